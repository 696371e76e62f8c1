"""A speed trick: the blog-style training step of a stack of :class:`~sgrad.nn.layers.Layer` in one function.

The plain step is the loop a student writes from the blog post::

    h = x
    for layer in layers:
        h = layer.forward(h)
    loss, delta = softmax_cross_entropy(h, labels)
    for layer in layers[:0:-1]:
        delta = layer.backward(delta)
    layers[0].backward(delta, input_delta=False)
    for layer in layers:
        layer.update(alpha)

:func:`sgd_step` does the same arithmetic on the same layers and leaves them as that loop does, faster: it checks
its arguments once instead of once per call, computes ReLU and its derivative in place, computes the top layer
and the softmax transposed (the sums over a few classes then run along rows of the batch), and takes each layer's
SGD step on its weights as one product added to them (:func:`sgrad.nn.blas.add_product`: no product array, no
scaled copy of the batch).
``tests/test_fast_mlp_step.py`` checks it against the loop above; ``benchmarks/layer_step.py`` times both
against PyTorch.  Read :mod:`sgrad.nn.layers` and :mod:`sgrad.nn.kernels` for the maths.
"""

from collections.abc import Sequence

import numpy as np

from .. import argument_checks
from .blas import add_product
from .layers import Layer
from .nonlinearities import identity, relu
from .optimizers import SGD


def sgd_step(layers: Sequence[Layer], x: np.ndarray, labels: np.ndarray, alpha: float) -> float:
    """One step of the loop above: ``layers`` on x (batch, input_dim), softmax cross-entropy over ``labels``.

    labels: integer classes of shape (batch,).  L = (1/batch) Σ -log softmax(h_top)[label], and every layer
    descends ``W -= alpha * dL/dW``, ``b -= alpha * dL/db``.  Returns L.  The layers must chain (each one's
    output_dim the next one's input_dim), share x's dtype, and learn with plain SGD; anything else is refused
    before any layer changes.  Afterwards each layer holds its ``input``, ``output`` and ``weight_output_delta``
    and no gradients, as after the loop's ``update``.
    """
    alpha = _check_step(layers, x, labels, alpha)
    batch = x.shape[0]
    ones = np.ones(batch, dtype=x.dtype)

    # Forward: z = h W + b, h' = f(z), ReLU in place on the fresh z.  The top layer's z is computed transposed,
    # zᵀ = Wᵀ hᵀ (classes, batch), so that the softmax's sums over a few classes run along rows of the batch.
    inputs, outputs, h = [], [], x
    for k, layer in enumerate(layers):
        inputs.append(h)
        top = k == len(layers) - 1
        z = (layer.weights.T @ h.T).T if top else h @ layer.weights
        if layer.bias is not None:
            z += layer.bias
        h = np.maximum(z, 0, out=z) if layer.nonlin is relu else layer.nonlin(z)
        outputs.append(h)
        layer.input, layer.output = inputs[-1], h

    # Softmax cross-entropy, its gradient built in one array: (softmax(h) - onehot) / batch, on hᵀ (classes, batch).
    # L = mean over the batch of log Σ exp(s) - s[label], with s = h - max(h) so that exp cannot overflow.
    h_t = h.T
    delta_t = h_t - h_t.max(axis=0)
    columns = np.arange(batch)
    picked = delta_t[labels, columns]
    np.exp(delta_t, out=delta_t)
    sums = delta_t.sum(axis=0)
    loss = float(np.mean(np.log(sums) - picked))
    if not np.isfinite(loss):
        raise ValueError(f"the loss is {loss} before any layer has stepped: an activation overflowed; lower the "
                         "learning rate, or check the data")
    delta_t /= sums
    delta_t[labels, columns] -= 1
    delta_t *= 1.0 / batch
    delta = delta_t.T

    # Backward: dz = dh ⊙ f'(h), dh_below = dz Wᵀ (not for the bottom layer), with the weights before the step;
    # then SGD, W -= alpha hᵀ dz, one product added in place, and b -= alpha 1ᵀ dz.
    minus_alpha = x.dtype.type(-alpha)
    for k in range(len(layers) - 1, -1, -1):
        layer = layers[k]
        if layer.nonlin is relu:
            delta *= outputs[k] > 0
        elif layer.nonlin is not identity:
            delta *= layer.nonlin_deriv(outputs[k])
        layer.weight_output_delta = delta
        below = delta @ layer.weights.T if k else None
        add_product(layer.weights, inputs[k].T, delta, -alpha)
        if layer.bias is not None:
            layer.bias += (ones @ delta) * minus_alpha
        layer.weights_grad = layer.bias_grad = None
        layer.mark_stepped()
        delta = below
    return loss


def _check_step(layers, x, labels, alpha):
    if not isinstance(layers, Sequence) or not layers or not all(type(layer) is Layer for layer in layers):
        raise TypeError("layers must be a non-empty list of sgrad Layer objects (not subclasses: their methods may "
                        f"differ from Layer's); got {layers!r}. Train other modules with the plain loop")
    for below, above in zip(layers[:-1], layers[1:]):
        if below.output_dim != above.input_dim:
            raise ValueError(f"layers do not chain: {below!r} gives {below.output_dim} columns, {above!r} takes "
                             f"{above.input_dim}")
    for layer in layers:
        if type(layer.update_rule) is not SGD:
            raise ValueError(f"sgd_step takes layers that learn with plain SGD; {layer!r} has {layer.update_rule!r}. "
                             "Use the plain loop (forward, backward, update) for other update rules")
        if layer.dtype != layers[0].dtype:
            raise TypeError(f"every layer must have one dtype; got {layers[0].dtype} and {layer.dtype}")
    argument_checks.check_batch(x, "x", layers[0].input_dim, width_name="the bottom layer's input_dim")
    if x.dtype != layers[0].dtype:
        raise TypeError(f"x must have the layers' dtype {layers[0].dtype}; got {x.dtype}. "
                        f"Convert it with x.astype(np.{layers[0].dtype})")
    argument_checks.check_labels(labels, "labels", layers[-1].output_dim)
    if labels.shape[0] != x.shape[0]:
        raise ValueError(f"labels must have one class per row of x, shape ({x.shape[0]},); got {labels.shape}")
    return argument_checks.check_learning_rate(alpha)
