"""Truncated backpropagation through time, with a synthetic gradient at each window's end (DNI for recurrent
layers: Jaderberg et al. 2016, section 3.1).

A batch of sequences is cut into windows of T steps.  The core (:class:`~sgrad.recurrent.layers.RNN`,
:class:`~sgrad.recurrent.layers.LSTM`) carries its state s from one window into the next, but the gradient stops
at every boundary: plain truncated BPTT hands the window's backward a zero from the future, DNI hands it
ĝ = M(s), a generator's guess of the gradient that truncation throws away.  M learns by regression onto
targets that :mod:`sgrad.recurrent.boundary_targets` computes, once per boundary.

:func:`tbptt_step` takes the data as :class:`Sequences`, the boundary's generator, its rate, γ and its targets as
one :class:`SyntheticGradient`, and the core's gradient within a window as a strategy (:class:`BPTT`,
:class:`EProp`).
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
        return core.backward(d_outputs, g_hat, input_delta=False, state_delta=boundary_delta)[1]


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


@dataclasses.dataclass(frozen=True, eq=False)
class Sequences:
    """A batch of sequences for :func:`tbptt_step`: the inputs, their targets, which steps count, where they start.

    x: (batch, time, input_dim) floats; y: (batch, time, ...) as the loss takes it; mask: (batch, time) step
    weights, floats or booleans (None: every step counts once); state: s_0 (batch, state_dim), the core's state
    where an earlier part of these sequences ended (None: zeros, the sequences start here); sequence_ends: False if
    more of the sequences follows, so that the last window ends at a boundary too.

    Checked when built, as far as it can be without the core (the widths, and y against the loss, are checked by
    :func:`tbptt_step`).
    """

    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray | None = None
    state: np.ndarray | None = None
    sequence_ends: bool = True

    def __post_init__(self) -> None:
        check_sequence(self.x, "x")
        batch, time, _ = self.x.shape
        argument_checks.check_array_type(self.y, "y", "a NumPy array of shape (batch, time, ...)")
        if self.y.shape[:2] != (batch, time):
            raise ValueError(f"y must have one target per sequence and step, shape ({batch}, {time}, ...) "
                             f"like x's first two axes; got shape {self.y.shape}")
        if self.mask is not None:
            argument_checks.check_array_type(self.mask, "mask",
                                             f"a NumPy array of step weights, shape ({batch}, {time})")
            if self.mask.shape != (batch, time) or self.mask.dtype.kind not in "fb":
                raise ValueError(f"mask must be floats or booleans of shape ({batch}, {time}), one weight per "
                                 f"sequence and step; got {self.mask.dtype} of shape {self.mask.shape}")
            if not (np.isfinite(self.mask).all() and (self.mask >= 0).all()):
                raise ValueError("mask must hold finite weights >= 0 (0 where a step's output does not count)")
        if self.state is not None:
            argument_checks.check_batch(self.state, "state")
            if self.state.shape[0] != batch:
                raise ValueError(f"state must have one row per sequence: x has {batch} sequences, "
                                 f"the state has {self.state.shape[0]} rows")
        argument_checks.check_bool(self.sequence_ends, "sequence_ends")

    def step_weights(self) -> np.ndarray:
        """The weight of each step's loss, (batch, time) in x's dtype: the mask, or ones."""
        return np.ones(self.x.shape[:2], dtype=self.x.dtype) if self.mask is None else self.mask.astype(self.x.dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class SyntheticGradient:
    """The synthetic gradient at every window's end: the generator M, how it learns, and ĝ's weight γ.

    generator: M, a gradient generator of the core's state (:class:`~sgrad.LinearGenerator`,
    :class:`~sgrad.MLPGenerator`, built with ``condition_dim=0``); generator_alpha: M's learning rate (None: the
    step's ``alpha``); synthetic_scale: γ in (0, 1], the weight of ĝ where it enters a window's backward, a
    discount per window; targets: what M regresses onto, a strategy of :mod:`sgrad.recurrent.boundary_targets`
    (default :data:`~sgrad.recurrent.boundary_targets.ONE_WINDOW`, the method's bootstrapped δ_k).

    Checked when built, as far as it can be without the core (M's width and dtype are checked by
    :func:`tbptt_step`).
    """

    generator: Any
    generator_alpha: float | None = None
    synthetic_scale: float = 1.0
    targets: BoundaryTargets = ONE_WINDOW

    def __post_init__(self) -> None:
        # generator_alpha and γ are kept as their checks return them, plain floats (set past the frozen guard).
        if self.generator_alpha is not None:
            object.__setattr__(self, "generator_alpha",
                               argument_checks.check_learning_rate(self.generator_alpha, "generator_alpha"))
        object.__setattr__(self, "synthetic_scale", argument_checks.check_number(
            self.synthetic_scale, "synthetic_scale", above=0, at_most=1, example="0.1"))
        if not isinstance(self.targets, BoundaryTargets):
            raise TypeError(f"targets must be one of sgrad.recurrent.boundary_targets' strategies, such as "
                            f"NWindows(2); got {type(self.targets).__name__}")
        if self.generator is None and isinstance(self.targets, OneWindow):
            raise ValueError("a SyntheticGradient needs its generator M, such as LinearGenerator(core.state_dim); "
                             "got None. For truncated BPTT without one, pass synthetic=None")
        if self.generator is None:
            raise ValueError(f"targets={self.targets!r} sets a generator's targets, but none was given; pass "
                             f"SyntheticGradient(generator, targets={self.targets!r})")
        if isinstance(self.generator, SyntheticLossGenerator):
            raise TypeError("the generator at a window's boundary must predict a gradient (LinearGenerator, "
                            "MLPGenerator); a SyntheticLossGenerator predicts a loss")
        check_generator_interface(self.generator)
        if getattr(self.generator, "condition_dim", 0) != 0:
            raise ValueError("the generator at a window's boundary takes the state alone: build it with "
                             "condition_dim=0")
        self.targets.check(self.generator)

    def g_hat(self, state: np.ndarray) -> np.ndarray:
        """γ M(s), the synthetic gradient at the state s (batch, state_dim) as it enters a window's backward."""
        return self.synthetic_scale * self.generator.predict(state)


def tbptt_step(core: Any, readout: Any, sequences: Sequences, loss_fn: SequenceLoss, alpha: float, *, window: int,
               synthetic: SyntheticGradient | None = None, core_gradient: str | CoreGradient = "bptt"
               ) -> tuple[float, np.ndarray, list[float]]:
    """Truncated BPTT over windows of T = ``window`` steps, with DNI at the boundaries if ``synthetic`` is given.

    With M = ``synthetic.generator`` and γ = ``synthetic.synthetic_scale``, window k runs from the state s_k
    (``sequences.state``, or zeros, for the first) and takes:

    1. ``outputs, s_{k+1} = core.forward(x_k, s_k)``; the readout and ``loss_fn`` give the window's loss L_k;
    2. ĝ_{k+1} = γ M(s_{k+1}); zero without M, or after the last step if ``sequences.sequence_ends``;
    3. δ_k = ``core.backward(dL_k/d(outputs), ĝ_{k+1})``, the gradient at s_k: it stops there;
    4. if s_k is a boundary (an earlier window, or a carried ``sequences.state``, ended there): M learns from
       ``synthetic.targets``, by default regressing M(s_k) onto δ_k (rate ``synthetic.generator_alpha``,
       default ``alpha``);
    5. the core and the readout descend (rate ``alpha``).

    ``core_gradient='eprop'`` (an :class:`~sgrad.recurrent.layers.LSTM` core only): the core descends along
    :func:`sgrad.recurrent.eprop.eprop_backward`'s estimate, from the same dL_k/d(outputs) and ĝ_{k+1}, computed
    forward in time with eligibility traces instead of 3.'s backward pass.  3. then runs only if M learns, for δ_k:
    M's targets are the same as with 'bptt'.  The default, 'bptt', is truncated BPTT within each window.  Each
    name is a strategy of step 3 (:class:`BPTT`, :class:`EProp`; :data:`CORE_GRADIENTS`), which may be passed
    itself, as ``synthetic.targets`` is one of step 4.

    ``loss_fn`` is a loss of :mod:`sgrad.nn.losses`, called with ``reduction='none'`` on the readout's output and
    ``sequences.y``.  L = (1/batch) Σ mask ℓ over every step.  Returns ``(L, s_end, generator_losses)``: s_end
    (batch, state_dim), one loss per boundary M learnt at.

    Every argument is checked before the first window runs (:func:`check_tbptt`), so a bad one changes
    nothing.  What no check can foresee, a number that overflows (NumPy set to raise, as the experiments'
    loop sets it) or an interrupt, stops the step in window k: the windows before k have stepped the
    core, the readout and M, and window k has stepped whatever it reached (M learns in 4., before the
    core and the readout descend in 5.); the state s_k is lost with the step.  Nothing is rolled back:
    a training loop that sees it raise treats the run as diverged, or carries on from its last checkpoint.
    """
    windows = check_tbptt(core, readout, sequences, loss_fn, alpha, window=window, synthetic=synthetic,
                          core_gradient=core_gradient)
    x, y, weights, window = sequences.x, sequences.y, windows.weights, windows.window
    batch, time, _ = x.shape
    s, total, generator_losses = windows.start, 0.0, list[float]()
    for begin in range(0, time, window):
        end = min(begin + window, time)
        outputs, s_next = core.forward(x[:, begin:end], s)                                          # 1.
        loss, d_outputs = window_loss(readout, outputs, y[:, begin:end], weights[:, begin:end], loss_fn, batch)
        last = end == time and sequences.sequence_ends  # no gradient comes back from after the sequences' end
        g_hat = None if synthetic is None or last else synthetic.g_hat(s_next)                      # 2.
        learns = synthetic is not None and (begin > 0 or sequences.state is not None)  # M learns at s_k
        delta = windows.core_gradient.backward(core, d_outputs, g_hat, boundary_delta=learns)       # 3. δ_k
        if synthetic is not None and delta is not None:                                             # 4.
            boundary = Boundary(windows, synthetic, begin, s, delta, first=not generator_losses)
            generator_alpha = alpha if synthetic.generator_alpha is None else synthetic.generator_alpha
            generator_losses.append(synthetic.targets.learn(synthetic.generator, boundary, generator_alpha))
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


@dataclasses.dataclass(frozen=True, eq=False)
class Windows:
    """One call of :func:`tbptt_step`, checked: the modules and the sequences they run, cut into windows of T steps.

    core_gradient: the strategy of step 3; weights: (batch, time), :meth:`Sequences.step_weights`; start: s_0
    (batch, state_dim), ``sequences.state`` or zeros; window: T.
    """

    core: Any
    readout: Any
    loss_fn: SequenceLoss
    core_gradient: CoreGradient
    sequences: Sequences
    weights: np.ndarray
    start: np.ndarray
    window: int


@dataclasses.dataclass(frozen=True, eq=False)
class Boundary:
    """What M's targets at the boundary s_k may use: the modules before they step, and the sequence from s_k on.

    windows: the call's modules and sequences; synthetic: M, γ and the targets; begin: the step s_k starts, counted
    from the batch's first; state: s_k (batch, state_dim); delta: δ_k (batch, state_dim), from step 3; first:
    whether s_k is the first boundary of this call of :func:`tbptt_step` (where a strategy that carries something
    from one boundary to the next starts again).
    """

    windows: Windows
    synthetic: SyntheticGradient
    begin: int
    state: np.ndarray
    delta: np.ndarray
    first: bool

    @property
    def window(self) -> int:
        """T, the steps of a window."""
        return self.windows.window

    @property
    def steps_left(self) -> int:
        """The steps from s_k to the end of the batch."""
        return self.windows.sequences.x.shape[1] - self.begin

    @property
    def x(self) -> np.ndarray:
        """The inputs from s_k to the end of the batch: (batch, steps_left, input_dim)."""
        return self.windows.sequences.x[:, self.begin:]

    @property
    def sequence_ends(self) -> bool:
        """Whether the batch's last step ends the sequences (no ĝ after it)."""
        return self.windows.sequences.sequence_ends

    @property
    def core(self) -> Any:
        """The core, before this window steps it."""
        return self.windows.core

    @property
    def generator(self) -> Any:
        """M."""
        return self.synthetic.generator

    @property
    def scale(self) -> float:
        """γ, the weight of ĝ where it enters a backward."""
        return self.synthetic.synthetic_scale

    def run_copy(self, begin: int, end: int, start: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
        """Steps ``begin:end`` (counted from s_k) from the state ``start``, on copies of the core and the readout.

        Returns ``(the core's copy, ready for its backward, dL/d(outputs) of those steps' loss, their last state)``.
        """
        w = self.windows
        steps = slice(self.begin + begin, self.begin + end)
        core, readout = copy.deepcopy((w.core, w.readout))
        outputs, last_state = core.forward(w.sequences.x[:, steps], start)
        _, d_outputs = window_loss(readout, outputs, w.sequences.y[:, steps], w.weights[:, steps], w.loss_fn,
                                   w.sequences.x.shape[0])
        return core, d_outputs, last_state

    def state_gradient(self, steps: int, *, bootstrap: bool) -> np.ndarray:
        """dL/ds_k of the loss of the next ``steps`` steps, plus γ M(s) at their end if ``bootstrap``, untruncated.

        Computed on copies of the core and the readout, so nothing changes.  (batch, state_dim).
        """
        core, d_outputs, last_state = self.run_copy(0, steps, self.state)
        g_hat = self.synthetic.g_hat(last_state) if bootstrap else None
        return core.backward(d_outputs, g_hat, input_delta=False)[1]


def check_tbptt(core: Any, readout: Any, sequences: Any, loss_fn: SequenceLoss, alpha: float, *, window: Any,
                synthetic: Any = None, core_gradient: Any = "bptt") -> Windows:
    """Check the arguments of :func:`tbptt_step` together, before any window runs, and return them as :class:`Windows`.

    :class:`Sequences` and :class:`SyntheticGradient` check themselves when built; this checks them against the
    core, the readout and the loss, and the window against the sequences.
    """
    if not isinstance(sequences, Sequences):
        raise TypeError(f"sequences must be a Sequences(x, y, mask=..., state=..., sequence_ends=...) of "
                        f"sgrad.recurrent.tbptt; got {type(sequences).__name__}. Wrap the data: "
                        f"tbptt_step(core, readout, Sequences(x, y), ...)")
    if synthetic is not None and not isinstance(synthetic, SyntheticGradient):
        raise TypeError(f"synthetic must be a SyntheticGradient(generator, ...) of sgrad.recurrent.tbptt, or None "
                        f"for truncated BPTT without one; got {type(synthetic).__name__}")
    window = _check_modules_and_data(core, readout, sequences, loss_fn, window)
    argument_checks.check_learning_rate(alpha)
    strategy = core_gradient if isinstance(core_gradient, CoreGradient) \
        else CORE_GRADIENTS[argument_checks.check_choice(core_gradient, "core_gradient", CORE_GRADIENTS)]
    strategy.check(core)
    x, state = sequences.x, sequences.state
    start = core.initial_state(x.shape[0]) if state is None else state
    if synthetic is not None:
        _check_generator(synthetic.generator, core, start)
    return Windows(core, readout, loss_fn, strategy, sequences, sequences.step_weights(), start, window)


def _check_modules_and_data(core, readout, sequences, loss_fn, window):
    """Check the sequences against the core, the readout and the loss, and the window against them; return T."""
    x, y, state = sequences.x, sequences.y, sequences.state
    batch, time, width = x.shape
    if width != core.input_dim:
        raise ValueError(f"x must have shape (batch, time, {core.input_dim}) ({core.input_dim} = the core's "
                         f"input_dim); got shape {x.shape}, i.e. {width} features per step")
    window = argument_checks.check_integer(window, "window (T, the steps between boundaries)")
    if window > time:
        raise ValueError(f"window (T) must be at most the sequence's length, {time} steps; got {window}. "
                         f"Use window={time} for full backpropagation through time")
    if state is not None and state.shape[1] != core.state_dim:
        raise ValueError(f"state must have shape (batch, {core.state_dim}) ({core.state_dim} = the core's "
                         f"state_dim); got shape {state.shape}, i.e. {state.shape[1]} columns")
    if getattr(readout, "input_dim", None) != core.hidden_dim:
        raise ValueError(f"the readout must take the core's hidden_dim, {core.hidden_dim}, features per step; "
                         f"it takes {getattr(readout, 'input_dim', None)}")
    if isinstance(readout, Module):  # the readout takes a window's steps as rows: the last window may be short
        shortest = time % window or window
        readout.check_batch_size(batch * shortest, f"the readout's input in the last window (batch {batch} x "
                                                   f"{shortest} steps)")
    # The loss checks y itself, once, on a zero prediction of every step: before any module has changed.
    loss_fn(np.zeros((batch * time, readout.output_dim), dtype=x.dtype),
            y.reshape(batch * time, *y.shape[2:]), reduction="none")
    return window


def _check_generator(generator, core, start):
    """Check that M predicts a gradient of the core's state, of its shape and dtype, at the state ``start``."""
    if getattr(generator, "output_dim", None) != core.state_dim:
        raise ValueError(f"the generator predicts the gradient of the core's state, so its output_dim must be the "
                         f"core's state_dim, {core.state_dim} ({type(core).__name__}); got "
                         f"{getattr(generator, 'output_dim', None)!r}")
    if isinstance(generator, Module):
        generator.check_batch_size(start.shape[0])
    argument_checks.check_same_shape(generator.predict(start), "the generator's synthetic gradient", start,
                                     "the core's state", same_dtype=True)
