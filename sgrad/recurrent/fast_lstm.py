"""A speed trick: a whole window of the :class:`~sgrad.recurrent.layers.LSTM`, forward and back, in one routine each.

The plain layer (``LSTM.step_by_step = True``) runs :func:`sgrad.nn.kernels.lstm_step_forward` once per step, then
:func:`~sgrad.nn.kernels.lstm_step_backward` once per step back, then the weight gradients as sums over the steps.
:func:`window_forward` and :func:`window_backward` compute the same numbers, faster, with these tricks:

- ``x_t W_x`` for every step of the window in one matrix product, before the recurrence: the inputs do not depend
  on the state, and one large product runs faster than T small ones;
- time-major memory, ``(time, batch, ...)``: each step's rows are one contiguous block, which stays in the cache
  (the arrays handed back are ``(batch, time, ...)`` views of it, the shapes the layer documents);
- the four gates in place in one row of z: ``sigmoid(z) = (1 + tanh(z / 2)) / 2``, so i, f, g, o are one tanh
  over the row between two scalings by columns; no concatenation, no fresh array per step;
- the gates' derivatives from their stored outputs, ``s (1 - s)`` and ``1 - g**2``, in one buffer per step;
- ``dh_{t-1} = dz_t W_hᵀ`` written into a column-major array, i.e. computed as ``(W_h dz_tᵀ)ᵀ``: the BLAS runs that
  shape faster (in float32) than rows of ``dz_t W_hᵀ``;
- ``h_0 W_h`` skipped when the start state is zero (a sequence's first window), since it is zero; and back,
  ``dz_1 W_hᵀ`` skipped when nothing needs dL/d(state) at the window's start (``state_delta=False``);
- the three weight gradients in one product, ``[x, h, 1]ᵀ dz`` over every step's rows, with no copy of dz.

``tests/test_fast_lstm.py`` checks both routines against the plain loop, in float32 and float64, with and without a
start state and a gradient at the last state.
"""

import numpy as np


def window_forward(x: np.ndarray, state: np.ndarray, weights_x: np.ndarray, weights_h: np.ndarray,
                   bias: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The LSTM over the window x from ``state``: ``(last_state, arrays)``, as the plain ``LSTM._through_time``.

    x: (batch, time, input_dim); state: (batch, 2 hidden), [h_0, c_0]; weights_x W_x: (input_dim, 4 hidden);
    weights_h W_h: (hidden, 4 hidden); bias b: (4 hidden,).  Each step is :func:`sgrad.nn.kernels.lstm_step_forward`.
    last_state: (batch, 2 hidden), [h_T, c_T]; arrays: ``hidden_states`` and ``cell_states`` (batch, time + 1, hidden),
    h_0 ... h_T and c_0 ... c_T, and ``gate_values`` (batch, time, 4 hidden), [i, f, g, o] at each step.
    """
    batch, time, _ = x.shape
    hidden = weights_h.shape[0]
    dtype = np.result_type(x, state, weights_h)
    hs = np.empty((time + 1, batch, hidden), dtype=dtype)
    cs = np.empty((time + 1, batch, hidden), dtype=dtype)
    gates = np.empty((time, batch, 4 * hidden), dtype=dtype)
    # z_t = x_t W_x for every step at once; h_{t-1} W_h and b are added step by step, while the rows are in the cache.
    x_rows = np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(time * batch, -1)
    np.matmul(x_rows, weights_x, out=gates.reshape(time * batch, 4 * hidden))
    hs[0], cs[0] = state[:, :hidden], state[:, hidden:]
    # sigmoid(z) = 0.5 + 0.5 tanh(0.5 z): the columns of i, f and o are scaled by 0.5 before and after the tanh and
    # shifted by 0.5; those of g are left as they are.
    scale = np.full(4 * hidden, 0.5, dtype=dtype)
    scale[2 * hidden:3 * hidden] = 1.0
    shift = np.full(4 * hidden, 0.5, dtype=dtype)
    shift[2 * hidden:3 * hidden] = 0.0
    h_times_w = np.empty((batch, 4 * hidden), dtype=dtype)
    product, tanh_c = np.empty((batch, hidden), dtype=dtype), np.empty((batch, hidden), dtype=dtype)
    for t in range(time):
        z = gates[t]
        if t or hs[0].any():  # h_0 W_h = 0 when h_0 = 0
            np.matmul(hs[t], weights_h, out=h_times_w)
            z += h_times_w
        z += bias
        z *= scale
        np.tanh(z, out=z)
        z *= scale
        z += shift                                           # z is now [i, f, g, o]
        i, f, g, o = z[:, :hidden], z[:, hidden:2 * hidden], z[:, 2 * hidden:3 * hidden], z[:, 3 * hidden:]
        np.multiply(f, cs[t], out=cs[t + 1])                 # c_t = f * c_{t-1} + i * g
        np.multiply(i, g, out=product)
        cs[t + 1] += product
        np.tanh(cs[t + 1], out=tanh_c)                       # h_t = o * tanh(c_t)
        np.multiply(o, tanh_c, out=hs[t + 1])
    last_state = np.concatenate([hs[-1], cs[-1]], axis=1)
    return last_state, {"hidden_states": hs.transpose(1, 0, 2), "cell_states": cs.transpose(1, 0, 2),
                        "gate_values": gates.transpose(1, 0, 2)}


def window_backward(x: np.ndarray, hidden_states: np.ndarray, cell_states: np.ndarray, gate_values: np.ndarray,
                    d_outputs: np.ndarray, d_last_state: np.ndarray | None, weights_x: np.ndarray,
                    weights_h: np.ndarray, input_delta: bool, state_delta: bool = True
                    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Backpropagation through the window: ``(d_x, d_weights_x, d_weights_h, d_bias, d_state)``.

    x, hidden_states, cell_states, gate_values: the window's input and what :func:`window_forward` returned for it
    (any memory layout); d_outputs: (batch, time, hidden), dL/dh_t from the loss at each step; d_last_state:
    (batch, 2 hidden), the gradient arriving at [h_T, c_T], or None for zero.  Each step back is
    :func:`sgrad.nn.kernels.lstm_step_backward`; the weight gradients are its dz_t's, summed over the steps as the
    plain ``Recurrent.backward`` sums them.  d_x: (batch, time, input_dim), or None with ``input_delta=False``;
    d_weights_x, d_weights_h, d_bias as W_x, W_h, b; d_state: (batch, 2 hidden), dL/d[h_0, c_0], or None with
    ``state_delta=False``, which skips the first step's ``dz_1 W_hᵀ``.
    Reads its arguments and changes none of them.
    """
    batch, time, hidden = d_outputs.shape
    hs, cs, gates = (array.transpose(1, 0, 2) for array in (hidden_states, cell_states, gate_values))
    dtype = np.result_type(d_outputs, hidden_states, *([] if d_last_state is None else [d_last_state]))
    dz = np.empty((time, batch, 4 * hidden), dtype=dtype)
    dh, dc = np.empty((batch, hidden), dtype=dtype), np.empty((batch, hidden), dtype=dtype)
    if d_last_state is None:
        dh_next, dc_next = np.zeros((batch, hidden), dtype=dtype), np.zeros((batch, hidden), dtype=dtype)
    else:
        dh_next, dc_next = d_last_state[:, :hidden].astype(dtype), d_last_state[:, hidden:].astype(dtype)
    dh_back = np.empty((hidden, batch), dtype=dtype).T  # dh_{t-1} column by column: see the module docstring
    tanh_c, work = np.empty((batch, hidden), dtype=dtype), np.empty((batch, hidden), dtype=dtype)
    derivative = np.empty((batch, 4 * hidden), dtype=dtype)
    for t in range(time - 1, -1, -1):
        z, d = gates[t], dz[t]
        i, f, g, o = z[:, :hidden], z[:, hidden:2 * hidden], z[:, 2 * hidden:3 * hidden], z[:, 3 * hidden:]
        np.add(d_outputs[:, t], dh_next, out=dh)             # dL/dh_t: the loss at step t and what came back
        np.tanh(cs[t + 1], out=tanh_c)
        np.multiply(tanh_c, tanh_c, out=work)                # dc = dc_t + dh_t * o * (1 - tanh(c_t)**2)
        np.subtract(1.0, work, out=work)
        work *= o
        work *= dh
        np.add(work, dc_next, out=dc)
        np.subtract(1.0, z, out=derivative)                  # s (1 - s) for i, f, o; 1 - g**2 for g
        derivative *= z
        np.multiply(g, g, out=derivative[:, 2 * hidden:3 * hidden])
        np.subtract(1.0, derivative[:, 2 * hidden:3 * hidden], out=derivative[:, 2 * hidden:3 * hidden])
        np.multiply(dc, g, out=d[:, :hidden])                # dz = [dc g, dc c_{t-1}, dc i, dh tanh(c_t)] * derivative
        np.multiply(dc, cs[t], out=d[:, hidden:2 * hidden])
        np.multiply(dc, i, out=d[:, 2 * hidden:3 * hidden])
        np.multiply(dh, tanh_c, out=d[:, 3 * hidden:])
        d *= derivative
        if t == 0 and not state_delta:
            break
        dh_next = np.matmul(d, weights_h.T, out=dh_back)     # dh_{t-1} = dz_t W_hᵀ
        np.multiply(dc, f, out=dc_next)                      # dc_{t-1} = dc * f
    # z_t = [x_t, h_{t-1}, 1] [W_x; W_h; b] at every step: with the steps stacked as rows, one linear map, whose
    # gradient [dW_x; dW_h; db] = [x, h, 1]ᵀ dz is one matrix product.
    input_dim = x.shape[2]
    dz_rows = dz.reshape(time * batch, 4 * hidden)
    rows = np.empty((time, batch, input_dim + hidden + 1), dtype=np.result_type(x, hs, dz))
    rows[:, :, :input_dim] = x.transpose(1, 0, 2)
    rows[:, :, input_dim:-1] = hs[:-1]
    rows[:, :, -1] = 1.0
    d_weights = rows.reshape(time * batch, -1).T @ dz_rows
    d_weights_x, d_weights_h, d_bias = d_weights[:input_dim], d_weights[input_dim:-1], d_weights[-1]
    d_x = None
    if input_delta:
        d_x = (dz_rows @ weights_x.T).reshape(time, batch, -1).transpose(1, 0, 2)
    d_state = np.concatenate([dh_next, dc_next], axis=1) if state_delta else None
    return d_x, d_weights_x, d_weights_h, d_bias, d_state
