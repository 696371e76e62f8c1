"""sgrad.recurrent.fast_lstm, the LSTM's whole-window routines, against the plain loop they replace.

Two LSTMs with the same parameters run the same window, one as it runs by default (fast_lstm) and one with
``step_by_step = True`` (one call of kernels.lstm_step_forward and lstm_step_backward per step): every array either
returns or keeps must agree to rounding, in float32 and float64, from a zero state and from a given one, with and
without a gradient at the last state.  The gradients themselves are checked against central differences in
tests/test_recurrent.py.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from strategies import batches, booleans, dtypes, seeds, widths

from sgrad.recurrent.layers import LSTM

START_STATES = ["zeros (None)", "given", "h zero, c given"]


def _pair(dtype, input_dim, hidden, seed, spread):
    """Two LSTMs with the same random parameters (``spread`` their size), the second one step by step."""
    rng = np.random.default_rng(seed)
    fast, plain = LSTM(input_dim, hidden, seed=0, dtype=dtype), LSTM(input_dim, hidden, seed=0, dtype=dtype)
    plain.step_by_step = True
    for name, param in fast.parameters.items():
        param[...] = spread * rng.standard_normal(param.shape)
        plain.parameters[name][...] = param
    return fast, plain, rng


def _window(rng, dtype, batch, time, input_dim, hidden, start):
    x = rng.standard_normal((batch, time, input_dim)).astype(dtype)
    state = None
    if start != "zeros (None)":
        state = rng.standard_normal((batch, 2 * hidden)).astype(dtype)
        if start == "h zero, c given":
            state[:, :hidden] = 0
    return x, state


def _assert_close(name, mine, plain, dtype, size):
    """``mine`` (fast) equals ``plain`` to the rounding of sums of ``size``-sized terms in ``dtype``."""
    assert mine.shape == plain.shape, f"{name}: shape {mine.shape}, the plain loop's {plain.shape}"
    assert mine.dtype == plain.dtype, f"{name}: dtype {mine.dtype}, the plain loop's {plain.dtype}"
    bound = 64 * np.finfo(dtype).eps * size
    difference = float(np.max(np.abs(mine.astype(np.float64) - plain)))
    assert difference <= bound, (
        f"{name}: fast (mine) and the plain loop differ by {difference:.2g}, more than rounding ({bound:.2g})\n"
        f"  fast:  {np.ravel(mine)[:6]}\n  plain: {np.ravel(plain)[:6]}")


@given(dtype=dtypes, batch=batches, time=st.integers(1, 6), input_dim=widths, hidden=widths, seed=seeds,
       start=st.sampled_from(START_STATES), spread=st.sampled_from([0.5, 4.0]))
def test_the_window_forward_is_the_plain_loop(dtype, batch, time, input_dim, hidden, seed, start, spread):
    fast, plain, rng = _pair(dtype, input_dim, hidden, seed, spread)
    x, state = _window(rng, dtype, batch, time, input_dim, hidden, start)

    mine = fast.forward(x, state)
    theirs = plain.forward(x, state)

    # h, c and the gates are of order 1 (c grows by at most 1 a step); spread 4 saturates some gates.
    for name, ours, reference in [("outputs", mine[0], theirs[0]), ("last_state", mine[1], theirs[1]),
                                  ("hidden_states", fast.hidden_states, plain.hidden_states),
                                  ("cell_states", fast.cell_states, plain.cell_states),
                                  ("gate_values", fast.gate_values, plain.gate_values)]:
        _assert_close(name, ours, reference, dtype, time * (1 + spread * (input_dim + hidden + 1)))
    np.testing.assert_array_equal(fast.predict(x, state)[0], mine[0], err_msg="predict is not forward")


@given(dtype=dtypes, batch=batches, time=st.integers(1, 6), input_dim=widths, hidden=widths, seed=seeds,
       start=st.sampled_from(START_STATES), gradient_at_the_end=booleans, input_delta=booleans)
def test_the_window_backward_is_the_plain_loop(dtype, batch, time, input_dim, hidden, seed, start,
                                               gradient_at_the_end, input_delta):
    fast, plain, rng = _pair(dtype, input_dim, hidden, seed, 0.5)
    x, state = _window(rng, dtype, batch, time, input_dim, hidden, start)
    d_outputs = rng.standard_normal((batch, time, hidden)).astype(dtype)
    d_last_state = rng.standard_normal((batch, 2 * hidden)).astype(dtype) if gradient_at_the_end else None
    fast.forward(x, state)
    plain.forward(x, state)
    kept = {name: getattr(fast, name).copy() for name in ("input", "hidden_states", "cell_states", "gate_values")}
    given_arrays = [array.copy() for array in (d_outputs, d_last_state) if array is not None]

    d_x, d_state = fast.backward(d_outputs, d_last_state, input_delta=input_delta)
    plain_d_x, plain_d_state = plain.backward(d_outputs, d_last_state, input_delta=input_delta)

    # Each gradient is a sum over up to batch * time terms of products of order 1 and of the weights (0.5).
    size = batch * time * (1 + input_dim + hidden)
    _assert_close("d_state", d_state, plain_d_state, dtype, size)
    for name, gradient in fast.gradients.items():
        _assert_close(f"d{name}", gradient, plain.gradients[name], dtype, size)
    if input_delta:
        _assert_close("d_x", d_x, plain_d_x, dtype, size)
    else:
        assert d_x is None and plain_d_x is None
    for name, before in kept.items():
        np.testing.assert_array_equal(getattr(fast, name), before, err_msg=f"backward changed the layer's {name}")
    for array, before in zip([a for a in (d_outputs, d_last_state) if a is not None], given_arrays):
        np.testing.assert_array_equal(array, before, err_msg="backward changed its arguments")
    again = fast.backward(d_outputs, d_last_state, input_delta=input_delta)[1]
    np.testing.assert_array_equal(again, d_state, err_msg="a second backward on the same window gave other numbers")

    # Without the state's delta, on either path: no d_state, and the same parameter gradients and d_x as above.
    for core, reference_d_x in ((fast, d_x), (plain, plain_d_x)):
        path = "the plain loop" if core is plain else "fast_lstm"
        before = {name: gradient.copy() for name, gradient in core.gradients.items()}
        no_d_x, no_d_state = core.backward(d_outputs, d_last_state, input_delta=input_delta, state_delta=False)
        assert no_d_state is None, f"state_delta=False gave a d_state on {path}'s path"
        for name, gradient in core.gradients.items():
            np.testing.assert_array_equal(gradient, before[name], err_msg=f"state_delta=False changed d{name} ({path})")
        if input_delta:
            np.testing.assert_array_equal(no_d_x, reference_d_x, err_msg=f"state_delta=False changed d_x ({path})")


def test_the_plain_loop_and_the_window_routines_take_a_dozen_steps_alike_in_float32():
    """A training run in small: the two stay together over steps, not only over one."""
    fast, plain, rng = _pair(np.float32, 5, 8, seed=7, spread=0.3)
    x = rng.standard_normal((4, 9, 5)).astype(np.float32)
    y = rng.standard_normal((4, 9, 8)).astype(np.float32)
    for _ in range(12):
        for core in (fast, plain):
            outputs, _ = core.forward(x)
            core.backward((outputs - y) / 4, None, input_delta=False)
            core.update(0.1)
    for name, param in fast.parameters.items():
        _assert_close(name, param, plain.parameters[name], np.float32, 12 * 9 * 4)


@given(layer_dtype=dtypes, data_dtype=dtypes, seed=seeds, start=st.sampled_from(START_STATES))
def test_the_window_routines_take_data_of_another_dtype_as_the_plain_loop_does(layer_dtype, data_dtype, seed,
                                                                               start):
    """x and the state in one float dtype, the layer in another: the sums run in the wider, on both paths."""
    fast, plain, rng = _pair(layer_dtype, 3, 5, seed, 0.5)
    x, state = _window(rng, data_dtype, 4, 3, 3, 5, start)
    d_outputs = rng.standard_normal((4, 3, 5)).astype(data_dtype)
    mine, theirs = fast.forward(x, state), plain.forward(x, state)
    wider = np.result_type(layer_dtype, data_dtype)
    for name, ours, reference in [("outputs", mine[0], theirs[0]), ("last_state", mine[1], theirs[1])]:
        assert ours.dtype == wider, f"{name}: dtype {ours.dtype}, expected {wider}"
        _assert_close(name, ours, reference, wider, 3 * 10)
    d_mine, d_theirs = fast.backward(d_outputs, None), plain.backward(d_outputs, None)
    for name, ours, reference in [("d_x", d_mine[0], d_theirs[0]), ("d_state", d_mine[1], d_theirs[1])] + [
            (f"{name} gradient", fast.gradients[name], plain.gradients[name]) for name in fast.parameters]:
        _assert_close(name, ours, reference, wider, 3 * 10 * 4)
