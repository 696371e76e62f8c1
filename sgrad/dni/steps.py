"""The training steps of a stack, one function per algorithm: backprop, no backprop, DNI, the synthetic loss,
the complete unlock.
(Truncated BPTT with DNI at the window boundaries, for the recurrent layers, is :mod:`sgrad.recurrent.tbptt`.)

A stack is a list of modules: hidden layers or blocks (:class:`~sgrad.DNI` or
:class:`~sgrad.DNIBlock` for the decoupled steps), then a top layer whose
output goes into the loss.  ``loss_fn(output, y)`` returns ``(L, dL/doutput)``
(see :mod:`sgrad.nn.losses`).  A step changes the stack's parameters and returns
the loss; nothing here records, saves or prints: that is the experiment
loop's part (:mod:`sgrad.training.loop`).
"""

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import argument_checks
from ..nn import kernels
from ..nn.losses import softmax_cross_entropy
from .synthetic_inputs import check_input_generators

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


def dni_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Loss, top_alpha: float, *,
             condition: np.ndarray | None = None,
             targets: Sequence[np.ndarray] | None = None) -> tuple[float, list[float]]:
    """One decoupled step of a stack whose hidden layers are DNI layers or blocks.

    Each hidden layer k updates from its own ĝ_k as soon as it has computed h_k.
    The top layer alone sees the true gradient.  Each generator M_k then
    regresses onto δ_k, the delta that layer k+1 returned (bootstrapping: ĝ_{k+1}
    backpropagated one layer; the true dL/dh for the top generator), unless
    ``targets`` (one array per hidden layer, e.g. true gradients) is given.
    Each rate is its owner's: ``top_alpha`` the top layer's; a hidden layer steps at its own ``alpha`` and
    its generator at its ``generator_alpha``, both fixed when it was built.
    Returns ``(loss, generator_losses)``.
    """
    h = x
    deltas = []
    for k, layer in enumerate(layers[:-1]):
        # The bottom layer's input delta would have no generator to train: skip its matrix product.
        delta, h = layer.forward_and_update(h, condition, input_delta=k > 0)
        deltas.append(delta)
    top = layers[-1]
    loss, g = loss_fn(top.forward(h), y)
    top_delta = top.backward(g)
    top.update(top_alpha)
    if targets is None:
        targets = deltas[1:] + [top_delta]
    generator_losses = [layer.update_generator(t) for layer, t in zip(layers[:-1], targets)]
    return loss, generator_losses


def synthetic_loss_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, top_alpha: float
                        ) -> tuple[float, list[float]]:
    """One step of the synthetic-loss variant: every hidden block's generator predicts a loss ℓ̂.

    Each block descends ĝ = dL̂/dh at once.  The top layer learns from the
    batch-mean softmax cross-entropy; block k's generator regresses its ℓ̂
    onto block k+1's predicted loss, the last one onto the real per-example
    loss.  y: one-hot labels (batch, classes); a generator built with
    ``condition_dim > 0`` is given them as c, ℓ̂ = M(h, y), as a cDNI's is.
    ``top_alpha`` is the top layer's rate; each block and its generator step at their own.
    Returns ``(mean loss, generator_losses)``.
    """
    h = x
    for layer in layers[:-1]:
        # The targets are predicted losses, not deltas: no block needs its input delta.
        _, h = layer.forward_and_update(h, y if layer.condition_dim else None, input_delta=False)
    top = layers[-1]
    per_example, g = softmax_cross_entropy(top.forward(h), y, reduction="none")
    top.backward(g / len(x))
    top.update(top_alpha)
    targets = [layer.generator.predicted_loss for layer in layers[1:-1]] + [per_example[:, None]]
    generator_losses = [layer.update_generator(t) for layer, t in zip(layers[:-1], targets)]
    return float(per_example.mean()), generator_losses


def complete_unlock_step(layers: Sequence[Any], input_generators: Sequence[Any], x: np.ndarray, y: np.ndarray,
                         loss_fn: Loss, top_alpha: float, input_alpha: float, *,
                         condition: np.ndarray | None = None) -> tuple[float, list[float], list[float]]:
    """One step of a completely unlocked stack: each layer above the bottom trains on a synthetic input.

    layers: ``[B_1, ..., B_m, top]``, each B_k a DNI block with ĝ_k = M_k(h_k, c) at its output h_k.
    input_generators: ``[I_1, ..., I_m]``, I_k predicting h_k from x (and c):
    :class:`~sgrad.dni.synthetic_inputs.InputGenerator`.  B_1 takes x; every layer above takes
    ĥ_{k-1} = I_{k-1}(x, c) in place of h_{k-1}, so it waits for no forward pass below it (forward
    unlocking), and each B_k descends ĝ_k at once, waiting for no gradient from above (update unlocking).
    Then each M_k regresses its prediction at the synthetic input, M_k(ĥ_k, c), onto δ_k, the gradient that
    the layer above returned at ĥ_k (the true dL/dĥ_m for the top's); and each I_k regresses onto the real
    h_k.  Each rate is its owner's: ``top_alpha`` the top's; a block and its M_k step at the rates the block
    was built with; every I_k at ``input_alpha``.

    x: (batch, input_dim); y: what ``loss_fn`` takes, one row per example; condition: c for the
    conditioned generators (the one-hot labels), else None.  Bad input is refused before anything changes.
    Returns ``(loss, [L_M of each M_k], [L_I of each I_k])``.

    A pipeline's workers take the same calls apart: the worker of B_k runs line 2, then line 5 when δ_k
    and ĥ_k come back; the worker above it runs line 1 for its input, lines 3 and 4 (or line 2 for a
    block), and line 6 when the real h_k arrives.
    """
    check_input_generators(layers, input_generators, x, condition)
    if not isinstance(y, np.ndarray) or y.ndim < 1 or len(y) != len(x):
        rows = len(y) if isinstance(y, np.ndarray) and y.ndim else "no"
        raise ValueError(f"y must have one row per example: x has {len(x)} rows, y has {rows}; pass the batch's labels")
    h_hat = [x] + [I_k.forward(x, condition) for I_k in input_generators]       # 1. ĥ_k = I_k(x, c)
    deltas: list[Any] = []
    hs = []
    for k, block in enumerate(layers[:-1]):
        delta, h = block.forward_and_update(h_hat[k], condition, input_delta=k > 0)  # 2. h_k = f_k(ĥ_{k-1});
        deltas.append(delta)                                                    #    ĝ_k = M_k(h_k, c); θ_k steps on ĝ_k
        hs.append(h)
    top = layers[-1]
    loss, g = loss_fn(top.forward(h_hat[-1]), y)                                # 3. the top on ĥ_m: L and dL/doutput
    deltas.append(top.backward(g))                                              # 4. δ_m = dL/dĥ_m, the true gradient
    top.update(top_alpha)                                                       #    at the synthetic input; θ_top steps
    generator_losses = [block.update_generator(delta, h=at, condition=condition)  # 5. M_k(ĥ_k, c) regresses onto δ_k
                        for block, delta, at in zip(layers[:-1], deltas[1:], h_hat[1:])]
    input_losses = [I_k.update(h, input_alpha) for I_k, h in zip(input_generators, hs)]  # 6. I_k(x, c) onto h_k
    return loss, generator_losses, input_losses


def forward_all(layers: Sequence[Any], x: np.ndarray) -> list[np.ndarray]:
    """``[x, h_1, ..., h_N]``: every dense layer's output, with no side effects.

    The dense formula on each layer's ``weights``, ``bias`` and ``nonlin``, so it takes the notebooks' layers
    written from scratch too; x is checked here, as a layer's ``forward`` checks it: (batch, input_dim).
    """
    argument_checks.check_batch(x, "x", layers[0].weights.shape[0], width_name="the first layer's input_dim")
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


def true_gradients_at_outputs(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Loss) -> list[np.ndarray]:
    """``[g_1, ..., g_{N-1}]``: the true dL/dh_k at the output of every hidden module of a stack, with no side effects.

    For any modules (layers, blocks, DNI blocks, whose ``forward`` and ``backward`` are their block's):
    one forward and one backward pass on copies, with the parameters as they are, so batch norm
    normalises with this batch's statistics as the step itself does.  ``dni_step(..., targets=...)``
    takes them: each generator then regresses onto the true gradient instead of a bootstrapped one.
    (:func:`true_gradients` is the dense stack's formula instead: it needs only each layer's weights, bias and
    nonlinearity, so the notebooks' layers written from scratch, which have no ``forward``, use it.)
    """
    copies = copy.deepcopy(list(layers))
    h = x
    for module in copies:
        h = module.forward(h)
    _, g = loss_fn(h, y)
    grads = []
    for module in copies[:0:-1]:
        g = module.backward(g)
        grads.append(g)
    return grads[::-1]
