"""Recurrent layers, and truncated backpropagation through time with a synthetic gradient at each window's end.

- :mod:`.layers`: ``RNN`` and ``LSTM`` over ``(batch, time, features)``;
- :mod:`.fast_lstm`: the LSTM's window forward and back in one routine each, a speed trick tested against the
  layer's plain loop;
- :mod:`.tbptt`: ``tbptt_step``, truncated BPTT with DNI at the window boundaries, on ``Sequences`` with a
  ``SyntheticGradient``;
- :mod:`.boundary_targets`: what the boundary's generator learns from, one strategy per kind of target;
- :mod:`.eligibility_traces`: BP(λ), the λ-return's backward view, learned online;
- :mod:`.eprop`: the LSTM core's gradient within a window, forward in time with e-prop's eligibility traces.
"""
