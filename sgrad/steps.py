"""The training steps, one function per algorithm: backprop, no backprop, DNI, the synthetic loss, and truncated
BPTT with DNI at the window boundaries (:func:`tbptt_step`, for the recurrent layers of :mod:`sgrad.recurrent`).

A stack is a list of modules: hidden layers or blocks (:class:`~sgrad.DNI` or
:class:`~sgrad.DNIBlock` for the decoupled steps), then a top layer whose
output goes into the loss.  ``loss_fn(output, y)`` returns ``(L, dL/doutput)``
(see :mod:`sgrad.losses`).  A step changes the stack's parameters and returns
the loss; nothing here records, saves or prints: that is the experiment
loop's part (:mod:`sgrad.experiments.loop`).
"""

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import kernels, validation
from .generators import SyntheticLossGenerator
from .losses import softmax_cross_entropy
from .module import Module
from .recurrent import check_sequence

Loss = Callable[[np.ndarray, np.ndarray], tuple[Any, np.ndarray]]


def backprop_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Loss, alpha: float, *,
                  trainable: int | None = None) -> float:
    """One step of backprop; only ``layers[trainable:]`` learn (default: all).  Returns the loss.

    ``trainable=len(layers) - 1`` is 'no backprop': only the top layer learns.
    Each layer updates as soon as it has passed its input delta down, which it
    computed with its weights from before the update.
    """
    trainable = 0 if trainable is None else trainable
    h = x
    for layer in layers:
        h = layer.forward(h)
    loss, delta = loss_fn(h, y)
    for k in range(len(layers) - 1, trainable - 1, -1):
        # The lowest learning layer's input delta would go nowhere: skip its matrix product.
        delta = layers[k].backward(delta, input_delta=k > trainable)
        layers[k].update(alpha)
    return loss


def dni_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Loss, alpha: float, *,
             condition: np.ndarray | None = None,
             targets: Sequence[np.ndarray] | None = None) -> tuple[float, list[float]]:
    """One decoupled step of a stack whose hidden layers are DNI layers or blocks.

    Each hidden layer k updates from its own ĝ_k as soon as it has computed h_k.
    The top layer alone sees the true gradient.  Each generator M_k then
    regresses onto δ_k, the delta that layer k+1 returned (bootstrapping: ĝ_{k+1}
    backpropagated one layer; the true dL/dh for the top generator), unless
    ``targets`` (one array per hidden layer, e.g. true gradients) is given.
    Returns ``(loss, generator_losses)``.
    """
    h = x
    deltas = []
    for k, layer in enumerate(layers[:-1]):
        # The bottom layer's input delta would have no generator to train: skip its matrix product.
        delta, h = layer.forward_and_synthetic_update(h, condition, input_delta=k > 0)
        deltas.append(delta)
    top = layers[-1]
    loss, g = loss_fn(top.forward(h), y)
    top_delta = top.backward(g)
    top.update(alpha)
    if targets is None:
        targets = deltas[1:] + [top_delta]
    generator_losses = [layer.update_synthetic_weights(t) for layer, t in zip(layers[:-1], targets)]
    return loss, generator_losses


def synthetic_loss_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[float, list[float]]:
    """One step of the synthetic-loss variant: every hidden block's generator predicts a loss ℓ̂.

    Each block descends ĝ = dL̂/dh at once.  The top layer learns from the
    batch-mean softmax cross-entropy; block k's generator regresses its ℓ̂
    onto block k+1's predicted loss, the last one onto the real per-example
    loss.  y: one-hot labels (batch, classes); a generator built with
    ``condition_dim > 0`` is given them as c, ℓ̂ = M(h, y), as a cDNI's is.
    Returns ``(mean loss, generator_losses)``.
    """
    h = x
    for layer in layers[:-1]:
        # The targets are predicted losses, not deltas: no block needs its input delta.
        _, h = layer.forward_and_synthetic_update(h, y if layer.condition_dim else None, input_delta=False)
    top = layers[-1]
    per_example, g = softmax_cross_entropy(top.forward(h), y, reduction="none")
    top.backward(g / len(x))
    top.update(alpha)
    targets = [layer.generator.predicted_loss for layer in layers[1:-1]] + [per_example[:, None]]
    generator_losses = [layer.update_synthetic_weights(t) for layer, t in zip(layers[:-1], targets)]
    return float(per_example.mean()), generator_losses


def forward_all(layers: Sequence[Any], x: np.ndarray) -> list[np.ndarray]:
    """``[x, h_1, ..., h_N]``: every dense layer's output, with no side effects."""
    hs = [x]
    for layer in layers:
        hs.append(kernels.dense_forward(hs[-1], layer.weights, layer.bias, layer.nonlin))
    return hs


def predict(layers: Sequence[Any], x: np.ndarray) -> np.ndarray:
    """A stack of dense layers' output for x, with no side effects."""
    return forward_all(layers, x)[-1]


def true_gradients(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Loss) -> list[np.ndarray]:
    """``[g_1, ..., g_{N-1}]``, the true dL/dh_k at every hidden layer of a dense stack, with no side effects."""
    hs = forward_all(layers, x)
    g: Any
    _, g = loss_fn(hs[-1], y)
    grads = []
    for k in range(len(layers) - 1, 0, -1):
        layer = layers[k]
        g, _, _, _ = kernels.dense_backward(g, hs[k], hs[k + 1], layer.weights, layer.nonlin_deriv,
                                            layer.bias is not None)
        grads.append(g)
    return grads[::-1]


# --- recurrent layers: truncated backpropagation through time, and DNI at the boundaries ----------


def tbptt_step(core: Any, readout: Any, x: np.ndarray, y: np.ndarray, loss_fn: Callable[..., tuple[Any, np.ndarray]],
               alpha: float, *, window: int, state: np.ndarray | None = None, generator: Any = None,
               generator_alpha: float | None = None, mask: np.ndarray | None = None, sequence_ends: bool = True,
               true_targets: bool = False, synthetic_scale: float = 1.0,
               target_windows: int = 1) -> tuple[float, np.ndarray, list[float]]:
    """Truncated BPTT over a batch of sequences, with a synthetic gradient at each window's end if a generator is given.

    core: a recurrent layer (:class:`~sgrad.recurrent.RNN`, :class:`~sgrad.recurrent.LSTM`);
    readout: a module such as ``Layer(hidden_dim, output_dim, 'identity')``, applied to every step's h;
    x: (batch, time, input_dim); y: (batch, time, output_dim), or (batch, time) class labels, as
    ``loss_fn`` takes them (a loss of :mod:`sgrad.losses`, called with ``reduction='none'``).
    The sequences are cut into windows of ``window`` (T) steps; the last window takes what is left.
    Window k starts from the state s_k that window k-1 ended with (``state`` for the first one, or
    zeros if None) and runs:

    1. ``outputs, s_{k+1} = core.forward(x_k, s_k)``; the readout and ``loss_fn`` give the window's loss;
    2. the gradient arriving at the window's last state: ``ĝ_{k+1} = M(s_{k+1})`` from the ``generator``
       M (DNI), or zero (plain truncated BPTT, and after the sequence's last step if ``sequence_ends``);
    3. ``δ_k = core.backward(d_outputs, λ ĝ_{k+1})``: the window's loss gradient and λ ĝ_{k+1},
       backpropagated to s_k, with λ = ``synthetic_scale`` (default 1).  Nothing of it goes on into
       window k-1: the gradient stops at the boundary;
    4. the core and the readout descend at once, with learning rate ``alpha``;
    5. DNI: M regresses M(s_k) onto δ_k (learning rate ``generator_alpha``, default ``alpha``).
       δ_k is the bootstrapped target of the ĝ_k that window k-1 used at its end: the true gradient
       of this window's loss plus λ times M's own prediction at the next boundary.  So M learns the
       future's gradient with each window further away weighted by λ once more, as a discount weights
       later rewards in temporal-difference learning: λ < 1 bounds the sum, and keeps a ĝ that is still
       poor from driving the core as hard as the window's own loss does.  There is no boundary before
       the first window of a fresh sequence (``state=None``), so M does not train there; a ``state``
       carried over from a previous call is a boundary.  ``true_targets=True`` (a teaching option)
       regresses M(s_k) onto the true dL/ds_k instead: the loss of every step from s_k to the end of x,
       backpropagated without truncation (computed on a copy of the core and the readout).
       ``target_windows=n`` > 1 (a teaching option too) regresses M(s_k) onto an n-step target, as
       n-step returns do in temporal-difference learning: the loss of the n windows from s_k on plus
       λ ĝ_{k+n} = λ M(s_{k+n}) at their end (nothing where the sequence ends), backpropagated to s_k on
       copies.  n = 1 is δ_k; an n that reaches the sequence's end gives the true targets.  The core
       still learns from its window and λ ĝ_{k+1} alone; only M's targets look further.

    The loss is ``L = (1/batch) * sum over sequences and steps of mask * ℓ(prediction_t, y_t)``, with ℓ
    the loss of one step and ``mask`` (batch, time) weights (default ones; e.g. zero where a step's
    output does not count).  Summed over the steps, L and its gradients do not depend on where the
    windows are cut.  For an LSTM, M predicts the gradient of the whole state [h, c]: its output_dim
    is ``core.state_dim``.  ``sequence_ends=False`` (e.g. one chunk of a longer text): after the last step
    comes more of the sequence, so the last window ends at a boundary too (ĝ there, with a generator).

    Everything is checked before anything changes.  Returns ``(L, s_end, generator_losses)``: s_end
    (batch, state_dim) is the state to carry into the next chunk, generator_losses one regression loss
    of M per boundary it trained on.
    """
    batch, time, window = _check_tbptt(core, readout, x, y, loss_fn, window, state, mask)
    s = core.initial_state(batch) if state is None else state
    if generator is not None:
        _check_boundary_generator(generator, core, s)
    alpha = validation.check_learning_rate(alpha)
    generator_alpha = alpha if generator_alpha is None else validation.check_learning_rate(generator_alpha,
                                                                                           "generator_alpha")
    sequence_ends = validation.check_bool(sequence_ends, "sequence_ends")
    scale = validation.check_number(synthetic_scale, "synthetic_scale", above=0, at_most=1, example="0.1")
    if validation.check_bool(true_targets, "true_targets") and generator is None:
        raise ValueError("true_targets=True trains a generator, but none was given; pass generator=...")
    target_windows = validation.check_integer(target_windows, "target_windows (the windows an n-step target spans)")
    if target_windows > 1 and generator is None:
        raise ValueError(f"target_windows={target_windows} sets a generator's targets, but none was given; "
                         "pass generator=...")
    if target_windows > 1 and true_targets:
        raise ValueError(f"true_targets=True backpropagates through every later step already; target_windows="
                         f"{target_windows} asks for an n-step target instead: give one of the two")
    weights = np.ones((batch, time), dtype=x.dtype) if mask is None else mask.astype(x.dtype)
    total, generator_losses = 0.0, []
    for begin in range(0, time, window):
        end = min(begin + window, time)
        at_boundary = begin > 0 or state is not None  # the window starts where an earlier one ended
        outputs, s_next = core.forward(x[:, begin:end], s)                                        # 1.
        loss, d_outputs = _window_loss(readout, outputs, y[:, begin:end], weights[:, begin:end], loss_fn, batch)
        cut_off = generator is None or (end == time and sequence_ends)
        g_hat = None if cut_off else scale * generator.predict(s_next)                          # 2. λ ĝ_{k+1}
        _, delta = core.backward(d_outputs, g_hat, input_delta=False)                           # 3. δ_k
        far = time if true_targets else min(begin + target_windows * window, time)  # where M's target looks to
        if at_boundary and (true_targets or far > end):  # n windows that end where this one does: δ_k already
            ahead = None if true_targets or (far == time and sequence_ends) else generator
            delta = _state_gradient(core, readout, x[:, begin:far], y[:, begin:far], weights[:, begin:far], loss_fn,
                                    s, ahead, scale)
        core.update(alpha)                                                                      # 4.
        readout.update(alpha)
        if generator is not None and at_boundary:                                               # 5.
            generator.forward(s)
            generator_losses.append(generator.update(delta, generator_alpha))
        total += loss
        s = s_next
    return total, s, generator_losses


def _window_loss(readout, outputs, y, weights, loss_fn, batch):
    """The window's part of L, and dL/d(outputs): (batch, steps, hidden_dim)."""
    rows = outputs.reshape(-1, outputs.shape[2])
    per_row, d_prediction = loss_fn(readout.forward(rows), y.reshape(rows.shape[0], *y.shape[2:]), reduction="none")
    row_weights = weights.reshape(-1) / batch
    d_rows = readout.backward(d_prediction * row_weights[:, None])
    return float(per_row @ row_weights), d_rows.reshape(outputs.shape)


def _state_gradient(core, readout, x, y, weights, loss_fn, state, generator, scale):
    """dL/d(state) of the loss over all of x from ``state`` on, untruncated, plus ``scale`` times the generator's
    ĝ at x's end (none if ``generator`` is None); on copies, so nothing changes."""
    core, readout = copy.deepcopy((core, readout))
    outputs, last_state = core.forward(x, state)
    _, d_outputs = _window_loss(readout, outputs, y, weights, loss_fn, x.shape[0])
    g_hat = None if generator is None else scale * generator.predict(last_state)
    return core.backward(d_outputs, g_hat, input_delta=False)[1]


def _check_tbptt(core, readout, x, y, loss_fn, window, state, mask):
    """Check the arguments of :func:`tbptt_step` that a window would meet too late; return (batch, time, window)."""
    check_sequence(x, "x", core.input_dim, width_name="the core's input_dim")
    batch, time, _ = x.shape
    window = validation.check_integer(window, "window (T, the steps between boundaries)")
    if window > time:
        raise ValueError(f"window (T) must be at most the sequence's length, {time} steps; got {window}. "
                         f"Use window={time} for full backpropagation through time")
    if state is not None:
        validation.check_batch(state, "state", core.state_dim, width_name="the core's state_dim")
        if state.shape[0] != batch:
            raise ValueError(f"state must have one row per sequence: x has {batch} sequences, "
                             f"the state has {state.shape[0]} rows")
    if getattr(readout, "input_dim", None) != core.hidden_dim:
        raise ValueError(f"the readout must take the core's hidden_dim, {core.hidden_dim}, features per step; "
                         f"it takes {getattr(readout, 'input_dim', None)}")
    validation.check_array_type(y, "y", "a NumPy array of shape (batch, time, ...)")
    if y.shape[:2] != (batch, time):
        raise ValueError(f"y must have one target per sequence and step, shape ({batch}, {time}, ...) "
                         f"like x's first two axes; got shape {y.shape}")
    if mask is not None:
        validation.check_array_type(mask, "mask", f"a NumPy array of step weights, shape ({batch}, {time})")
        if mask.shape != (batch, time) or mask.dtype.kind not in "fb":
            raise ValueError(f"mask must be floats or booleans of shape ({batch}, {time}), one weight per "
                             f"sequence and step; got {mask.dtype} of shape {mask.shape}")
        if not (np.isfinite(mask).all() and (mask >= 0).all()):
            raise ValueError("mask must hold finite weights >= 0 (0 where a step's output does not count)")
    # The loss checks y itself, once, on a zero prediction of every step: before any module has changed.
    loss_fn(np.zeros((batch * time, readout.output_dim), dtype=x.dtype),
            y.reshape(batch * time, *y.shape[2:]), reduction="none")
    return batch, time, window


def _check_boundary_generator(generator, core, start):
    """Check that ``generator`` predicts a gradient of the core's state, of its shape and dtype, at ``start``."""
    if isinstance(generator, SyntheticLossGenerator):
        raise TypeError("the generator at a window's boundary must predict a gradient (LinearGenerator, "
                        "MLPGenerator); a SyntheticLossGenerator predicts a loss")
    missing = [name for name in ("forward", "update", "predict") if not callable(getattr(generator, name, None))]
    if missing:
        raise TypeError(f"generator must have methods forward, update and predict (see sgrad.generators); "
                        f"{type(generator).__name__} lacks {', '.join(missing)}")
    if getattr(generator, "output_dim", None) != core.state_dim:
        raise ValueError(f"the generator predicts the gradient of the core's state, so its output_dim must be the "
                         f"core's state_dim, {core.state_dim} ({type(core).__name__}); got "
                         f"{getattr(generator, 'output_dim', None)!r}")
    if getattr(generator, "condition_dim", 0) != 0:
        raise ValueError("the generator at a window's boundary takes the state alone: build it with condition_dim=0")
    if isinstance(generator, Module):
        generator.check_batch_size(start.shape[0])
    validation.check_same_shape(generator.predict(start), "the generator's synthetic gradient", start,
                                "the core's state", same_dtype=True)
