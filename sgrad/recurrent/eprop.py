"""The LSTM core's weight gradient within a window, computed online with e-prop eligibility traces (Bellec et al.
2020), forward in time: no backward pass through time.

Step t of :class:`~sgrad.recurrent.layers.LSTM` computes, from u_t = [x_t, h_{t-1}, 1] (the 1 for the bias),
z_t = x_t W_x + h_{t-1} W_h + b = u_t θ with θ = [W_x; W_h; b], (input_dim + hidden_dim + 1, 4 hidden_dim), then
the gates i, f, g, o, c_t = f c_{t-1} + i g and h_t = o tanh(c_t) (:func:`sgrad.nn.kernels.lstm_step_forward`).
e-prop treats h_{t-1} as an input: no gradient flows through h_{t-1} into earlier steps.  What is left of the
past is the cell's own path, c_{t-1} → c_t, weighted by f_t; so each hidden unit j carries, for the i, f and g
gates' parameters, an eligibility vector (its row of dc_t/dθ along that path), updated forward in time:

    ε_t = f_t ⊙ ε_{t-1} + ∂c_t/∂z_t · u_t        ε_0 = 0, one (batch, input_dim + hidden_dim + 1, hidden) per gate
    ∂c_t/∂z_i = g i (1 - i)      ∂c_t/∂z_f = c_{t-1} f (1 - f)      ∂c_t/∂z_g = i (1 - g²)

(per unit j: ε_t[b, d, j] = f_t[b, j] ε_{t-1}[b, d, j] + ∂c_t[b, j]/∂z_t[b, j] u_t[b, d]: the unit's own
entries, not the full Jacobian).  The o gate does not feed c, so its term is the step's own
∂h_t/∂z_o · u_t = tanh(c_t) o (1 - o) u_t.  The learning signals at step t, with the boundary's synthetic
gradient ĝ = [ĝ_h, ĝ_c] (batch, 2 hidden_dim) added at the window's last step T:

    L^h_t = ∂E_t/∂h_t  (+ ĝ_h at t = T)         the loss at step t through the readout, (batch, hidden)
    L^c_t = L^h_t ⊙ o_t (1 - tanh² c_t)  (+ ĝ_c at t = T)

and the estimate, summed over the steps and the batch as :meth:`~sgrad.recurrent.layers.Recurrent.backward` sums:

    dθ_{i,f,g} = Σ_t Σ_batch L^c_t ⊙ ε_t          dθ_o = Σ_t Σ_batch L^h_t ⊙ tanh(c_t) o_t (1 - o_t) u_t

It is the gradient of the window's loss plus ĝ · s_T exactly when W_h = 0 (then h_{t-1} reaches no later gate,
so the cell's path is the only one); otherwise it is an approximation of truncated BPTT's, which also follows
h_{t-1} → z_t back through the window.

How this relates to the authors' code (neuralml/bp_lambda, ``use_etraces=True``): the eligibility vectors are
theirs (ε carried through the forget gate for i, f and g; the step's own term for o).  Their synthesiser M
predicts dL/dc only and its prediction enters the learning signal one step late, at every step.  Here the
learning signal is the loss's within the window, and ĝ = [ĝ_h, ĝ_c] = γ M(s_T) enters once, at the window's last
step, as :func:`sgrad.recurrent.tbptt.tbptt_step`'s generator hands it to the core's backward: ĝ_h through h_T into both
L^h_T and L^c_T, ĝ_c straight into L^c_T.
"""

from typing import Any

import numpy as np

from .. import argument_checks
from .layers import LSTM, check_sequence


def eprop_backward(core: Any, d_outputs: np.ndarray, d_last_state: np.ndarray | None = None) -> None:
    """Store the e-prop estimate of the core's weight gradient from its last forward pass, for ``core.update``.

    core: an :class:`~sgrad.recurrent.layers.LSTM` after ``forward(x, state)``.  d_outputs: (batch, time, hidden_dim),
    L^h_t = ∂E_t/∂h_t from the loss at each step.  d_last_state: (batch, 2 hidden_dim), ĝ = [ĝ_h, ĝ_c] at the
    window's last state (synthetic, or known), or None for zero.  Sets ``weights_x_grad`` (input_dim, 4 hidden),
    ``weights_h_grad`` (hidden, 4 hidden) and ``bias_grad`` (4 hidden,), summed over the steps and the batch, as
    ``core.backward`` would set them; unlike it, no gradient reaches the window's start state or its input.
    """
    _check(core, d_outputs, d_last_state)
    gradient = eprop_gradient(core.input, core.hidden_states, core.cell_states, core.gate_values, d_outputs,
                              d_last_state)
    core.weights_x_grad = gradient[:core.input_dim]
    core.weights_h_grad = gradient[core.input_dim:-1]
    core.bias_grad = gradient[-1]


def eprop_gradient(x: np.ndarray, hidden_states: np.ndarray, cell_states: np.ndarray, gates: np.ndarray,
                   d_outputs: np.ndarray, d_last_state: np.ndarray | None) -> np.ndarray:
    """dθ, (input_dim + hidden + 1, 4 hidden), rows [W_x; W_h; b], columns the gates [i, f, g, o]: the estimate
    of the module docstring, from one forward pass forward in time.

    x: (batch, T, input_dim); hidden_states, cell_states: (batch, T + 1, hidden), h_0 ... h_T and c_0 ... c_T;
    gates: (batch, T, 4 hidden), [i, f, g, o] at each step; d_outputs: (batch, T, hidden), L^h_t without ĝ;
    d_last_state: (batch, 2 hidden), ĝ = [ĝ_h, ĝ_c], or None.
    """
    batch, time, hidden = d_outputs.shape
    width = x.shape[2] + hidden + 1
    dtype = np.result_type(x, hidden_states, d_outputs)
    trace = np.zeros((batch, width, 3 * hidden), dtype=dtype)           # ε_t for i, f, g, the units side by side
    d_cell_gates = np.zeros((width, 3 * hidden), dtype=dtype)
    d_output_gate = np.zeros((width, hidden), dtype=dtype)
    for t in range(time):
        u = np.concatenate([x[:, t], hidden_states[:, t], np.ones((batch, 1), dtype=dtype)], axis=1)
        i, f, g, o = (gates[:, t, k * hidden:(k + 1) * hidden] for k in range(4))
        c_prev, tanh_c = cell_states[:, t], np.tanh(cell_states[:, t + 1])
        dc_dz = np.concatenate([g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g)], axis=1)
        trace = np.tile(f, 3)[:, None, :] * trace + u[:, :, None] * dc_dz[:, None, :]
        signal_h = d_outputs[:, t]                                      # L^h_t
        if t == time - 1 and d_last_state is not None:
            signal_h = signal_h + d_last_state[:, :hidden]
        signal_c = signal_h * o * (1 - tanh_c * tanh_c)                 # L^c_t
        if t == time - 1 and d_last_state is not None:
            signal_c = signal_c + d_last_state[:, hidden:]
        d_cell_gates += np.einsum("bj,bdj->dj", np.tile(signal_c, 3), trace)
        d_output_gate += u.T @ (signal_h * tanh_c * o * (1 - o))
    return np.concatenate([d_cell_gates, d_output_gate], axis=1)


def _check(core, d_outputs, d_last_state):
    """Refuse a core that is not an LSTM with a fresh forward pass, and learning signals that do not fit it."""
    if not isinstance(core, LSTM):
        raise TypeError(f"e-prop's eligibility traces are written for sgrad.recurrent.layers.LSTM (its gates i, f, g, o and "
                        f"cell c); got {type(core).__name__}. Use core.backward for other cores")
    core.forward_cache("eprop_backward()", "core.forward(x, state)")
    check_sequence(d_outputs, "d_outputs (L^h_t, dE_t/dh_t)", core.hidden_dim,
                   width_name="the core's hidden_dim")
    if d_outputs.shape != core.outputs.shape:
        raise ValueError(f"d_outputs (L^h_t) must have the shape of the core's last outputs, {core.outputs.shape} "
                         f"(batch, time, hidden_dim); got shape {d_outputs.shape}")
    if d_last_state is not None:
        argument_checks.check_same_shape(d_last_state, "d_last_state (ĝ = [ĝ_h, ĝ_c])", core.last_state,
                                         "the core's last state [h_T, c_T]")
