"""Recurrent layers over sequences, a tanh :class:`RNN` and an :class:`LSTM`, with backpropagation through time.

A sequence is an array of shape (batch, time, input_dim).  A recurrent layer
carries a *state* from one step to the next, always one array of shape
(batch, state_dim):

- :class:`RNN`: the hidden state h, so ``state_dim = hidden_dim``;
- :class:`LSTM`: h and the cell c side by side, ``[h, c]``, so ``state_dim = 2 * hidden_dim``
  (``state[:, :hidden_dim]`` is h, ``state[:, hidden_dim:]`` is c).

One window of T steps, and backpropagation through it::

    outputs, last_state = core.forward(x, state)            # outputs: every step's h, (batch, T, hidden_dim)
    d_x, d_state = core.backward(d_outputs, d_last_state)    # d_state: dL/d(state), at the window's start
    core.update(alpha)

``d_outputs`` (batch, T, hidden_dim) is dL/dh_t from the loss at every step.
``d_last_state`` (batch, state_dim) is the gradient arriving at the window's
last state from the steps after it: the true one, a synthetic one
``ĝ = M(s_T)`` (DNI), or None for zero (the future cut off, as truncated
BPTT does).  ``state=None`` starts from zeros.  :func:`sgrad.recurrent.tbptt.tbptt_step`
cuts a sequence into such windows.

A readout per step is a :class:`~sgrad.Layer` applied to the outputs as
(batch * T, hidden_dim) rows::

    import numpy as np
    from sgrad import Layer
    from sgrad.nn.losses import mse
    from sgrad.recurrent.layers import LSTM

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 8, 3)), rng.standard_normal((16, 8, 2))   # (batch, time, features)
    core, readout = LSTM(3, 32, seed=0), Layer(32, 2, "identity", seed=1)
    outputs, last_state = core.forward(x)                     # (16, 8, 32) and (16, 64): [h_8, c_8]
    loss, d_prediction = mse(readout.forward(outputs.reshape(-1, 32)), y.reshape(-1, 2))
    d_outputs = readout.backward(d_prediction).reshape(outputs.shape)
    _, d_state = core.backward(d_outputs, None, input_delta=False)   # (16, 64): dL/d[h_0, c_0]
    core.update(0.1)
    readout.update(0.1)

The maths of one step is in :mod:`sgrad.nn.kernels` (``rnn_step_forward``,
``lstm_step_forward`` and their backward passes); the classes run the steps
in a loop over time and hold the parameters.  The LSTM runs the same window
faster through :mod:`sgrad.recurrent.fast_lstm` unless ``step_by_step`` is set.
"""

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .. import argument_checks
from ..nn import kernels
from ..nn.initializers import INITIALIZERS, initialize
from ..nn.module import OwnParameters
from ..nn.optimizers import UpdateRule
from . import fast_lstm


def check_sequence(array: Any, name: str, width: int | None = None, *, width_name: str = "features") -> np.ndarray:
    """Check that ``array`` is a finite float array of shape (batch, time, width), batch and time >= 1; return it.

    ``width=None`` accepts any number of features.
    """
    expected = "(batch, time, features)" if width is None else f"(batch, time, {width})"
    argument_checks.check_array_type(array, name, f"a NumPy array of shape {expected}")
    if array.dtype.kind != "f":
        raise TypeError(f"{name} must hold floats; got dtype {array.dtype}. Convert it with {name}.astype(np.float64).")
    if array.ndim != 3:
        hint = ""
        if array.ndim == 2:
            hint = (f" For one sequence use {name}[None]; for sequences of one step use {name}[:, None, :].")
        raise ValueError(f"{name} must be a batch of sequences of shape {expected}; got shape {array.shape}.{hint}")
    if width is not None and array.shape[2] != width:
        raise ValueError(f"{name} must have shape {expected} ({width} = {width_name}); "
                         f"got shape {array.shape}, i.e. {array.shape[2]} features per step")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {array.shape}); pass at least one sequence of at least one step")
    if not np.isfinite(array).all():
        batch, step = (int(k) for k in np.argwhere(~np.isfinite(array))[0, :2])
        raise ValueError(f"{name} holds NaN or inf (first in sequence {batch}, step {step}); check the data, or "
                         "lower the learning rate if it came from a training run that diverged")
    return array


class Recurrent(OwnParameters):
    """What :class:`RNN` and :class:`LSTM` share: the parameters, the checks, backward and update.

    Every step computes the same pre-activation ``z_t = x_t W_x + h_{t-1} W_h + b``
    of ``gates * hidden_dim`` columns (1 block for the RNN, 4 for the LSTM);
    a subclass runs its cell over the steps (``_through_time``) and back
    (``_back_through_time``, which returns every step's dL/dz_t).

    Attributes
    ----------
    weights_x : (input_dim, gates * hidden_dim) array, W_x
    weights_h : (hidden_dim, gates * hidden_dim) array, W_h
    bias : (gates * hidden_dim,) array, b
    input : (batch, time, input_dim), the last forward pass's x
    hidden_states : (batch, time + 1, hidden_dim), h_0 (the state's h) to h_T from the last forward pass
    outputs : (batch, time, hidden_dim), h_1 to h_T (a view of hidden_states), as forward returned them
    last_state : (batch, state_dim), the state after the last step, as forward returned it
    weights_x_grad : dL/dW_x from the last backward, summed over the steps
    weights_h_grad : dL/dW_h from the last backward, summed over the steps
    bias_grad : dL/db from the last backward, summed over the steps
    """

    gates = 1
    backward_needs = ("input", "hidden_states", "outputs", "last_state")
    _calls_before_update = "backward(d_outputs, d_last_state) after forward(x, state)"
    weights_x_grad: np.ndarray | None
    weights_h_grad: np.ndarray | None
    bias_grad: np.ndarray | None

    def __init__(self, input_dim: int, hidden_dim: int, *, init: str = "xavier",
                 update_rule: str | UpdateRule | None = None, seed: argument_checks.Seed = None,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64) -> None:
        self.input_dim = argument_checks.check_integer(input_dim, "input_dim")
        self.hidden_dim = argument_checks.check_integer(hidden_dim, "hidden_dim")
        init = argument_checks.check_choice(init, "init", INITIALIZERS)
        self.dtype = argument_checks.check_trainable_dtype(dtype, f"an {type(self).__name__}")
        rng = argument_checks.make_rng(seed, rng)
        width = self.gates * self.hidden_dim
        argument_checks.check_bytes((self.input_dim + self.hidden_dim) * width * self.dtype.itemsize,
                                    f"the weights of {type(self).__name__}({self.input_dim}, {self.hidden_dim})",
                                    "use a smaller input_dim or hidden_dim")
        self.weights_x = initialize(init, (self.input_dim, width), rng, self.dtype)
        self.weights_h = initialize(init, (self.hidden_dim, width), rng, self.dtype)
        self.bias = np.zeros(width, dtype=self.dtype)
        self._start_learning(update_rule)
        self.input: np.ndarray | None = None
        self.hidden_states: np.ndarray | None = None
        self.outputs: np.ndarray | None = None
        self.last_state: np.ndarray | None = None

    @property
    def state_dim(self) -> int:
        """Width of the carried state: hidden_dim for the RNN, 2 * hidden_dim ([h, c]) for the LSTM."""
        return self.hidden_dim

    def own_parameters(self) -> dict[str, np.ndarray]:
        """``{'weights_x': W_x, 'weights_h': W_h, 'bias': b}``."""
        return {"weights_x": self.weights_x, "weights_h": self.weights_h, "bias": self.bias}

    def initial_state(self, batch: int) -> np.ndarray:
        """A state of zeros, (batch, state_dim): where a sequence starts."""
        return np.zeros((argument_checks.check_integer(batch, "batch"), self.state_dim), dtype=self.dtype)

    def forward(self, x: np.ndarray, state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Run the window ``x`` from ``state``; remember what backward needs.  Returns ``(outputs, last_state)``.

        x: (batch, time, input_dim).  state: (batch, state_dim), or None for zeros.
        outputs: (batch, time, hidden_dim), h_1 ... h_T.  last_state: (batch, state_dim),
        the state after the last step, to carry into the next window.  The layer keeps
        references to x and to the arrays it returns: do not change them in place before backward.
        """
        x, state = self._check_window(x, state)
        self.last_state, arrays = self._through_time(x, state)
        for name, array in arrays.items():  # hidden_states, and the LSTM's cell_states and gate_values
            setattr(self, name, array)
        self.outputs = arrays["hidden_states"][:, 1:]
        self.input = x
        self.weights_x_grad = self.weights_h_grad = self.bias_grad = None
        self._stale = False
        return self.outputs, self.last_state

    def predict(self, x: np.ndarray, state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(outputs, last_state)`` as :meth:`forward` returns them, with no side effects."""
        x, state = self._check_window(x, state)
        last_state, arrays = self._through_time(x, state)
        return arrays["hidden_states"][:, 1:], last_state

    def backward(self, d_outputs: np.ndarray, d_last_state: np.ndarray | None = None, *,
                 input_delta: bool = True, state_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Backpropagate through the window of the last forward pass.  Returns ``(d_x, d_state)``.

        d_outputs: (batch, time, hidden_dim), dL/dh_t from the loss at each step.
        d_last_state: (batch, state_dim), the gradient arriving at the last state from
        the steps after the window (known, or synthetic); None means zero.
        Returns d_state = dL/d(state) at the window's start, (batch, state_dim), or None with
        ``state_delta=False`` (when nothing before the window learns from it, as in truncated BPTT without a
        synthetic gradient to train: the LSTM's first step back then skips its matrix product), and
        d_x = dL/dx, (batch, time, input_dim), or None with ``input_delta=False`` (for
        x that is data: a matrix product per step saved).  Stores the parameter
        gradients, summed over the steps; nothing is averaged here.
        """
        x, hidden_states, outputs, last_state = self.forward_cache("backward()", "forward(x, state)")
        check_sequence(d_outputs, "d_outputs", self.hidden_dim, width_name="this layer's hidden_dim")
        if d_outputs.shape != outputs.shape:
            raise ValueError(f"d_outputs must have the shape of the last outputs, {outputs.shape} "
                             f"(batch, time, hidden_dim); got shape {d_outputs.shape}")
        if d_last_state is not None:
            argument_checks.check_same_shape(d_last_state, "d_last_state", last_state, "the last state")
        input_delta = argument_checks.check_bool(input_delta, "input_delta")
        state_delta = argument_checks.check_bool(state_delta, "state_delta")
        return self._backpropagate(x, hidden_states, d_outputs, d_last_state, input_delta, state_delta)

    def _backpropagate(self, x: np.ndarray, hidden_states: np.ndarray, d_outputs: np.ndarray,
                       d_last_state: np.ndarray | None, input_delta: bool, state_delta: bool
                       ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """:meth:`backward` once its arguments are checked: store the parameter gradients, return ``(d_x, d_state)``."""
        dz, d_state = self._back_through_time(d_outputs, d_last_state)
        # The same W_x, W_h and b serve every step, so their gradients are sums over the steps:
        # with the steps stacked as rows, z = [x_t] W_x + [h_{t-1}] W_h + b is one linear map.
        batch, time, _ = dz.shape
        dz = dz.reshape(batch * time, -1)
        x_rows = x.reshape(batch * time, self.input_dim)
        h_rows = hidden_states[:, :-1].reshape(batch * time, self.hidden_dim)
        d_x, self.weights_x_grad, self.bias_grad = kernels.linear_backward(dz, x_rows, self.weights_x, True,
                                                                           input_delta)
        _, self.weights_h_grad, _ = kernels.linear_backward(dz, h_rows, self.weights_h, False, False)
        return (None if d_x is None else d_x.reshape(x.shape)), (d_state if state_delta else None)

    def _check_window(self, x, state):
        check_sequence(x, "x", self.input_dim, width_name="this layer's input_dim")
        if state is None:
            return x, self.initial_state(x.shape[0])
        what = "hidden_dim" if self.state_dim == self.hidden_dim else "2 * hidden_dim: h and c side by side, [h, c]"
        argument_checks.check_batch(state, "state", self.state_dim, width_name=f"this layer's state_dim, {what}")
        if state.shape[0] != x.shape[0]:
            raise ValueError(f"state must have one row per sequence: x has {x.shape[0]} sequences, "
                             f"the state has {state.shape[0]} rows")
        return x, state

    def _through_time(self, x: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Run the cell over the steps, with no side effects: ``(last_state, the arrays backward needs)``."""
        raise NotImplementedError

    def _back_through_time(self, d_outputs: np.ndarray, d_last_state: np.ndarray | None
                           ) -> tuple[np.ndarray, np.ndarray]:
        """Run the cell's backward over the steps, last to first: ``(every step's dL/dz_t, dL/d(state))``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_dim}, {self.hidden_dim})"


class RNN(Recurrent):
    """A tanh RNN: ``h_t = tanh(x_t W_x + h_{t-1} W_h + b)``; the state is h, (batch, hidden_dim).

    Parameters
    ----------
    input_dim, hidden_dim : int
        Widths of each step's input x_t and of h_t.
    init : str
        Initialisation of W_x and W_h: 'xavier' (default), 'he', 'blog' or 'zeros'.  b starts at zero.
    update_rule : str or UpdateRule
        'sgd' (default), 'momentum', 'adam', or an :class:`~sgrad.nn.optimizers.UpdateRule`.
    seed, rng : where the initial weights come from.  Same seed, same weights.
    dtype : floating type of the parameters (default float64).
    """

    def _through_time(self, x, state):
        batch, time, _ = x.shape
        hs = np.empty((batch, time + 1, self.hidden_dim), dtype=np.result_type(x, state, self.weights_h))
        hs[:, 0] = state
        for t in range(time):
            hs[:, t + 1] = kernels.rnn_step_forward(x[:, t], hs[:, t], self.weights_x, self.weights_h, self.bias)
        return hs[:, -1], {"hidden_states": hs}

    def _back_through_time(self, d_outputs, d_last_state):
        hs = self.hidden_states
        assert hs is not None
        batch, time, _ = d_outputs.shape
        dz = np.empty((batch, time, self.hidden_dim), dtype=np.result_type(d_outputs, hs, *_given(d_last_state)))
        dh = np.zeros((batch, self.hidden_dim), dtype=dz.dtype) if d_last_state is None else d_last_state
        for t in range(time - 1, -1, -1):
            # dL/dh_t: the loss at step t, plus what came back from step t + 1 (or from after the window).
            dz[:, t], dh = kernels.rnn_step_backward(d_outputs[:, t] + dh, hs[:, t + 1], self.weights_h)
        return dz, dh


class LSTM(Recurrent):
    """An LSTM (gates in PyTorch's order i, f, g, o); the state is ``[h, c]``, (batch, 2 * hidden_dim).

    ``h_t = o * tanh(c_t)``, ``c_t = f * c_{t-1} + i * g``, with the gates computed from
    ``z_t = x_t W_x + h_{t-1} W_h + b`` (see :func:`sgrad.nn.kernels.lstm_step_forward`).

    Parameters as :class:`RNN`'s, plus ``forget_bias`` (default 1.0): the starting
    bias of the forget gate, so that c is carried along at first rather than forgotten.
    W_x is (input_dim, 4 * hidden_dim), W_h (hidden_dim, 4 * hidden_dim), b (4 * hidden_dim,),
    each with the four gates' columns side by side. Its attributes are :class:`Recurrent`'s, and these:

    Attributes
    ----------
    cell_states : (batch, time + 1, hidden_dim), c_0 to c_T from the last forward pass
    gate_values : (batch, time, 4 * hidden_dim), [i, f, g, o] at every step
    step_by_step : False (the default) runs each window with :mod:`sgrad.recurrent.fast_lstm`, which computes the
        same numbers faster; True (``core.step_by_step = True``) runs the loops below, one kernel call per step,
        as the maths reads.  ``tests/test_fast_lstm.py`` checks that the two agree.
    """

    gates = 4
    step_by_step = False

    def __init__(self, input_dim: int, hidden_dim: int, *, forget_bias: float = 1.0, **options: Any) -> None:
        forget_bias = argument_checks.check_number(forget_bias, "forget_bias", example="1.0")
        super().__init__(input_dim, hidden_dim, **options)
        self.bias[self.hidden_dim:2 * self.hidden_dim] = forget_bias
        self.cell_states: np.ndarray | None = None
        self.gate_values: np.ndarray | None = None

    @property
    def state_dim(self) -> int:
        return 2 * self.hidden_dim

    def _through_time(self, x, state):
        if not self.step_by_step:
            return fast_lstm.window_forward(x, state, self.weights_x, self.weights_h, self.bias)
        batch, time, _ = x.shape
        hidden = self.hidden_dim
        dtype = np.result_type(x, state, self.weights_h)
        hs = np.empty((batch, time + 1, hidden), dtype=dtype)
        cs = np.empty((batch, time + 1, hidden), dtype=dtype)
        gates = np.empty((batch, time, 4 * hidden), dtype=dtype)
        hs[:, 0], cs[:, 0] = state[:, :hidden], state[:, hidden:]
        for t in range(time):
            hs[:, t + 1], cs[:, t + 1], gates[:, t] = kernels.lstm_step_forward(
                x[:, t], hs[:, t], cs[:, t], self.weights_x, self.weights_h, self.bias)
        last_state = np.concatenate([hs[:, -1], cs[:, -1]], axis=1)
        return last_state, {"hidden_states": hs, "cell_states": cs, "gate_values": gates}

    def _backpropagate(self, x, hidden_states, d_outputs, d_last_state, input_delta, state_delta):
        if self.step_by_step:
            return super()._backpropagate(x, hidden_states, d_outputs, d_last_state, input_delta, state_delta)
        d_x, self.weights_x_grad, self.weights_h_grad, self.bias_grad, d_state = fast_lstm.window_backward(
            x, hidden_states, self.cell_states, self.gate_values, d_outputs, d_last_state, self.weights_x,
            self.weights_h, input_delta, state_delta)
        return d_x, d_state

    def _back_through_time(self, d_outputs, d_last_state):
        hs, cs, gates = self.hidden_states, self.cell_states, self.gate_values
        assert hs is not None and cs is not None and gates is not None
        batch, time, hidden = d_outputs.shape
        dz = np.empty((batch, time, 4 * hidden), dtype=np.result_type(d_outputs, hs, *_given(d_last_state)))
        if d_last_state is None:
            dh = dc = np.zeros((batch, hidden), dtype=dz.dtype)
        else:
            dh, dc = d_last_state[:, :hidden], d_last_state[:, hidden:]
        for t in range(time - 1, -1, -1):
            dz[:, t], dh, dc = kernels.lstm_step_backward(d_outputs[:, t] + dh, dc, cs[:, t], cs[:, t + 1],
                                                          gates[:, t], self.weights_h)
        return dz, np.concatenate([dh, dc], axis=1)


def _given(*arrays):
    """The arrays that are not None (for np.result_type)."""
    return [a for a in arrays if a is not None]
