"""Truncated backpropagation through time, with a synthetic gradient at each window's end (DNI for recurrent
layers: Jaderberg et al. 2016, section 3.1).

A batch of sequences is cut into windows of T steps.  The core (:class:`~sgrad.recurrent.layers.RNN`,
:class:`~sgrad.recurrent.layers.LSTM`) carries its state s from one window into the next, but the gradient stops
at every boundary: plain truncated BPTT hands the window's backward a zero from the future, DNI hands it
ĝ = M(s), a generator's guess of the gradient that truncation throws away.  M learns by regression onto
targets that :mod:`sgrad.recurrent.boundary_targets` computes, once per boundary.
"""

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import argument_checks
from ..dni.generators import SyntheticLossGenerator, check_generator_interface
from ..nn.module import Module
from .boundary_targets import ONE_WINDOW, BoundaryTargets, OneWindow
from .eprop import eprop_backward
from .layers import LSTM, check_sequence

SequenceLoss = Callable[..., tuple[Any, np.ndarray]]


class CoreGradient:
    """A strategy for the core's weight gradient within a window, from dL/d(outputs) and ĝ at its end (step 3)."""

    name = ""

    def check(self, core: Any) -> None:
        """Refuse a core this strategy cannot differentiate, before anything changes."""

    def backward(self, core: Any, d_outputs: np.ndarray, g_hat: np.ndarray | None, *,
                 boundary_delta: bool) -> np.ndarray | None:
        """Store the core's weight gradient for ``core.update``; return δ_k, the gradient at the window's start
        state s_k (batch, state_dim), if ``boundary_delta`` (M learns from it), else None."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BPTT(CoreGradient):
    """Truncated BPTT within the window: the core's own backward pass, which also gives δ_k."""

    name = "bptt"

    def backward(self, core: Any, d_outputs: np.ndarray, g_hat: np.ndarray | None, *,
                 boundary_delta: bool) -> np.ndarray | None:
        delta = core.backward(d_outputs, g_hat, input_delta=False)[1]
        return delta if boundary_delta else None


class EProp(CoreGradient):
    """e-prop's estimate (:func:`sgrad.recurrent.eprop.eprop_backward`), forward in time with eligibility traces.

    δ_k for M's targets still comes from the core's backward pass, run only when M learns from it (its weight
    gradient is then replaced by the estimate): M's targets are the same as with :class:`BPTT`.  An
    :class:`~sgrad.recurrent.layers.LSTM` core only.
    """

    name = "eprop"

    def check(self, core: Any) -> None:
        if not isinstance(core, LSTM):
            raise TypeError(f"core_gradient='eprop' needs an sgrad.recurrent.layers.LSTM core (its traces follow the "
                            f"cell c); got {type(core).__name__}. Use core_gradient='bptt' for it")

    def backward(self, core: Any, d_outputs: np.ndarray, g_hat: np.ndarray | None, *,
                 boundary_delta: bool) -> np.ndarray | None:
        delta = core.backward(d_outputs, g_hat, input_delta=False)[1] if boundary_delta else None
        eprop_backward(core, d_outputs, g_hat)  # the core's gradient replaced by e-prop's estimate
        return delta


CORE_GRADIENTS = {strategy.name: strategy for strategy in (BPTT(), EProp())}


def tbptt_step(core: Any, readout: Any, x: np.ndarray, y: np.ndarray, loss_fn: SequenceLoss, alpha: float, *,
               window: int, mask: np.ndarray | None = None, state: np.ndarray | None = None,
               sequence_ends: bool = True, generator: Any = None, generator_alpha: float | None = None,
               synthetic_scale: float = 1.0, targets: BoundaryTargets = ONE_WINDOW, core_gradient: str = "bptt"
               ) -> tuple[float, np.ndarray, list[float]]:
    """Truncated BPTT over windows of T = ``window`` steps, with DNI at the boundaries if M = ``generator`` is given.

    Window k runs from the state s_k (``state``, or zeros, for the first) and takes, with γ = ``synthetic_scale``:

    1. ``outputs, s_{k+1} = core.forward(x_k, s_k)``; the readout and ``loss_fn`` give the window's loss L_k;
    2. ĝ_{k+1} = γ M(s_{k+1}); zero without M, or after the last step if ``sequence_ends``;
    3. δ_k = ``core.backward(dL_k/d(outputs), ĝ_{k+1})``, the gradient at s_k: it stops there;
    4. if s_k is a boundary (an earlier window, or a carried ``state``, ended there): M learns from
       ``targets``, by default regressing M(s_k) onto δ_k (rate ``generator_alpha``, default ``alpha``);
    5. the core and the readout descend (rate ``alpha``).

    ``core_gradient='eprop'`` (an :class:`~sgrad.recurrent.layers.LSTM` core only): the core descends along
    :func:`sgrad.recurrent.eprop.eprop_backward`'s estimate, from the same dL_k/d(outputs) and ĝ_{k+1}, computed forward in
    time with eligibility traces instead of 3.'s backward pass.  3. then runs only if M learns, for δ_k: M's
    targets are the same as with 'bptt'.  The default, 'bptt', is truncated BPTT within each window.  Each name
    is a strategy of step 3 (:class:`BPTT`, :class:`EProp`; :data:`CORE_GRADIENTS`), as ``targets`` is of step 4.

    x: (batch, time, input_dim); y: (batch, time, ...) as ``loss_fn`` (a loss of :mod:`sgrad.nn.losses`, called with
    ``reduction='none'``) takes it; mask: (batch, time) step weights (default ones).  L = (1/batch) Σ mask ℓ
    over every step.  ``sequence_ends=False``: more of the sequence follows, so the last window ends at a boundary.
    Returns ``(L, s_end, generator_losses)``: s_end (batch, state_dim), one loss per boundary M learnt at.

    Every argument is checked before the first window runs (:func:`check_tbptt`), so a bad one changes
    nothing.  What no check can foresee, a number that overflows (NumPy set to raise, as the experiments'
    loop sets it) or an interrupt, stops the step in window k: the windows before k have stepped the
    core, the readout and M, and window k has stepped whatever it reached (M learns in 4., before the
    core and the readout descend in 5.); the state s_k is lost with the step.  Nothing is rolled back:
    a training loop that sees it raise treats the run as diverged, or carries on from its last checkpoint.
    """
    s, window, weights, scale = check_tbptt(core, readout, x, y, loss_fn, alpha, window, mask, state, sequence_ends,
                                            generator, generator_alpha, synthetic_scale, targets, core_gradient)
    gradient = CORE_GRADIENTS[core_gradient]
    batch, time, _ = x.shape
    generator_alpha = alpha if generator_alpha is None else generator_alpha
    total, generator_losses = 0.0, list[float]()
    for begin in range(0, time, window):
        end = min(begin + window, time)
        outputs, s_next = core.forward(x[:, begin:end], s)                                          # 1.
        loss, d_outputs = window_loss(readout, outputs, y[:, begin:end], weights[:, begin:end], loss_fn, batch)
        cut_off = generator is None or (end == time and sequence_ends)
        g_hat = None if cut_off else scale * generator.predict(s_next)                              # 2.
        learns = generator is not None and (begin > 0 or state is not None)  # s_k is a boundary M learns at
        delta = gradient.backward(core, d_outputs, g_hat, boundary_delta=learns)                    # 3. δ_k
        if delta is not None:                                                                       # 4.
            boundary = Boundary(core, readout, loss_fn, x[:, begin:], y[:, begin:], weights[:, begin:], s,
                                window, delta, generator, scale, sequence_ends, first=not generator_losses)
            generator_losses.append(targets.learn(generator, boundary, generator_alpha))
        core.update(alpha)                                                                          # 5.
        readout.update(alpha)
        total += loss
        s = s_next
    return total, s, generator_losses


def window_loss(readout: Any, outputs: np.ndarray, y: np.ndarray, weights: np.ndarray, loss_fn: SequenceLoss,
                batch: int) -> tuple[float, np.ndarray]:
    """The window's part of L, and dL/d(outputs): (batch, steps, hidden_dim); the readout keeps its gradients."""
    rows = outputs.reshape(-1, outputs.shape[2])
    per_row, d_prediction = loss_fn(readout.forward(rows), y.reshape(rows.shape[0], *y.shape[2:]), reduction="none")
    row_weights = weights.reshape(-1) / batch
    d_rows = readout.backward(d_prediction * row_weights[:, None])
    return float(per_row @ row_weights), d_rows.reshape(outputs.shape)


@dataclasses.dataclass(frozen=True)
class Boundary:
    """What M's targets at the boundary s_k may use: the modules before they step, and the sequence from s_k on.

    x, y, weights: the steps from s_k to the end of the batch; delta: δ_k (batch, state_dim), from step 3;
    first: whether s_k is the first boundary of this call of :func:`tbptt_step`.
    """

    core: Any
    readout: Any
    loss_fn: SequenceLoss
    x: np.ndarray
    y: np.ndarray
    weights: np.ndarray
    state: np.ndarray
    window: int
    delta: np.ndarray
    generator: Any
    scale: float
    sequence_ends: bool
    first: bool = True

    @property
    def steps_left(self) -> int:
        """The steps from s_k to the end of the batch."""
        return self.x.shape[1]

    def run_copy(self, begin: int, end: int, start: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
        """Steps ``begin:end`` (counted from s_k) from the state ``start``, on copies of the core and the readout.

        Returns ``(the core's copy, ready for its backward, dL/d(outputs) of those steps' loss, their last state)``.
        """
        core, readout = copy.deepcopy((self.core, self.readout))
        outputs, last_state = core.forward(self.x[:, begin:end], start)
        _, d_outputs = window_loss(readout, outputs, self.y[:, begin:end], self.weights[:, begin:end], self.loss_fn,
                                   self.x.shape[0])
        return core, d_outputs, last_state

    def state_gradient(self, steps: int, *, bootstrap: bool) -> np.ndarray:
        """dL/ds_k of the loss of the next ``steps`` steps, plus γ M(s) at their end if ``bootstrap``, untruncated.

        Computed on copies of the core and the readout, so nothing changes.  (batch, state_dim).
        """
        core, d_outputs, last_state = self.run_copy(0, steps, self.state)
        g_hat = self.scale * self.generator.predict(last_state) if bootstrap else None
        return core.backward(d_outputs, g_hat, input_delta=False)[1]


def check_tbptt(core, readout, x, y, loss_fn, alpha, window, mask, state, sequence_ends, generator, generator_alpha,
                synthetic_scale, targets, core_gradient="bptt"):
    """Check the arguments of :func:`tbptt_step` before any window runs.

    Returns ``(s_0, window, step weights (batch, time), γ)``: s_0 is ``state``, or zeros.
    """
    window, weights = _check_data(core, readout, x, y, loss_fn, window, mask, state)
    start = core.initial_state(x.shape[0]) if state is None else state
    argument_checks.check_learning_rate(alpha)
    if generator_alpha is not None:
        argument_checks.check_learning_rate(generator_alpha, "generator_alpha")
    scale = argument_checks.check_number(synthetic_scale, "synthetic_scale", above=0, at_most=1, example="0.1")
    argument_checks.check_bool(sequence_ends, "sequence_ends")
    CORE_GRADIENTS[argument_checks.check_choice(core_gradient, "core_gradient", CORE_GRADIENTS)].check(core)
    if not isinstance(targets, BoundaryTargets):
        raise TypeError(f"targets must be one of sgrad.recurrent.boundary_targets' strategies, such as NWindows(2); "
                        f"got {type(targets).__name__}")
    if generator is None and not isinstance(targets, OneWindow):
        raise ValueError(f"targets={targets!r} sets a generator's targets, but none was given; pass generator=...")
    if generator is not None:
        _check_generator(generator, core, start)
        targets.check(generator)
    return start, window, weights, scale


def _check_data(core, readout, x, y, loss_fn, window, mask, state):
    """Check the sequences, the window and the modules; return ``(window, step weights)``."""
    check_sequence(x, "x", core.input_dim, width_name="the core's input_dim")
    batch, time, _ = x.shape
    window = argument_checks.check_integer(window, "window (T, the steps between boundaries)")
    if window > time:
        raise ValueError(f"window (T) must be at most the sequence's length, {time} steps; got {window}. "
                         f"Use window={time} for full backpropagation through time")
    if state is not None:
        argument_checks.check_batch(state, "state", core.state_dim, width_name="the core's state_dim")
        if state.shape[0] != batch:
            raise ValueError(f"state must have one row per sequence: x has {batch} sequences, "
                             f"the state has {state.shape[0]} rows")
    if getattr(readout, "input_dim", None) != core.hidden_dim:
        raise ValueError(f"the readout must take the core's hidden_dim, {core.hidden_dim}, features per step; "
                         f"it takes {getattr(readout, 'input_dim', None)}")
    if isinstance(readout, Module):  # the readout takes a window's steps as rows: the last window may be short
        shortest = time % window or window
        readout.check_batch_size(batch * shortest, f"the readout's input in the last window (batch {batch} x "
                                                   f"{shortest} steps)")
    argument_checks.check_array_type(y, "y", "a NumPy array of shape (batch, time, ...)")
    if y.shape[:2] != (batch, time):
        raise ValueError(f"y must have one target per sequence and step, shape ({batch}, {time}, ...) "
                         f"like x's first two axes; got shape {y.shape}")
    if mask is not None:
        argument_checks.check_array_type(mask, "mask", f"a NumPy array of step weights, shape ({batch}, {time})")
        if mask.shape != (batch, time) or mask.dtype.kind not in "fb":
            raise ValueError(f"mask must be floats or booleans of shape ({batch}, {time}), one weight per "
                             f"sequence and step; got {mask.dtype} of shape {mask.shape}")
        if not (np.isfinite(mask).all() and (mask >= 0).all()):
            raise ValueError("mask must hold finite weights >= 0 (0 where a step's output does not count)")
    # The loss checks y itself, once, on a zero prediction of every step: before any module has changed.
    loss_fn(np.zeros((batch * time, readout.output_dim), dtype=x.dtype),
            y.reshape(batch * time, *y.shape[2:]), reduction="none")
    return window, np.ones((batch, time), dtype=x.dtype) if mask is None else mask.astype(x.dtype)


def _check_generator(generator, core, start):
    """Check that M predicts a gradient of the core's state, of its shape and dtype, at the state ``start``."""
    if isinstance(generator, SyntheticLossGenerator):
        raise TypeError("the generator at a window's boundary must predict a gradient (LinearGenerator, "
                        "MLPGenerator); a SyntheticLossGenerator predicts a loss")
    check_generator_interface(generator)
    if getattr(generator, "output_dim", None) != core.state_dim:
        raise ValueError(f"the generator predicts the gradient of the core's state, so its output_dim must be the "
                         f"core's state_dim, {core.state_dim} ({type(core).__name__}); got "
                         f"{getattr(generator, 'output_dim', None)!r}")
    if getattr(generator, "condition_dim", 0) != 0:
        raise ValueError("the generator at a window's boundary takes the state alone: build it with condition_dim=0")
    if isinstance(generator, Module):
        generator.check_batch_size(start.shape[0])
    argument_checks.check_same_shape(generator.predict(start), "the generator's synthetic gradient", start,
                                     "the core's state", same_dtype=True)
