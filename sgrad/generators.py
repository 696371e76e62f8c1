"""Synthetic-gradient generators ``ĝ = M(h, c)``.

A generator is any object with this small interface (write your own, e.g. an
oracle for a test, and pass it to :class:`sgrad.DNI` as ``generator=``):

``output_dim`` : int
    Width of h, and so of ĝ.
``condition_dim`` : int
    Width of the conditioning c (0: unconditioned).
``forward(h, condition=None) -> ĝ``
    Predict ĝ for h: (batch, output_dim) and c: (batch, condition_dim) or
    None, and remember what ``update`` needs.
``update(target, alpha) -> float``
    Take one descent step, with learning rate ``alpha``, on the regression
    loss ``L_M = 1/(2 batch) * sum((prediction - target)**2)`` of the last
    forward's prediction, and return that loss (measured before the step).
    It checks the target's shape.
``predict(h, condition=None) -> ĝ``
    The same prediction with no side effects, for diagnostics.

Here: :class:`LinearGenerator` (the blog's and the paper's), :class:`MLPGenerator`
(hidden layers, optionally batch-normalised, as in the public TensorFlow
reproduction), :class:`SyntheticLossGenerator` (predicts a loss, not a gradient)
and :class:`ConvGenerator` (a small CNN, for the feature maps of a convolutional
block: there h, ĝ and the target are (batch, channels, height, width), and
``output_dim`` is the number of channels).
"""

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import validation
from .blocks import Sequential, dense_block
from .conv import Conv2d, conv_block
from .layers import Layer
from .module import Module
from .nonlinearities import sigmoid


def regression_loss(prediction: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """The generator's loss ``L_M = 1/(2 batch) * sum((prediction - target)**2)`` and its gradient dL_M/dprediction."""
    diff = prediction - target
    batch = prediction.shape[0]
    return 0.5 * float(np.sum(diff * diff)) / batch, diff / batch


class Generator(Module):
    """A network ``net`` on ``[h, c]`` that predicts ĝ and learns by regression onto its targets.

    ``net`` is a module (forward, predict, backward, update, parameters,
    gradients), ``backward(delta, input_delta=False)`` included.  Subclasses build it.
    """

    def __init__(self, net: Any, output_dim: int, condition_dim: int) -> None:
        self.net = net
        self.output_dim = output_dim
        self.condition_dim = condition_dim
        self.update_state = {}
        self.input: np.ndarray | None = None
        self.synthetic_gradient: np.ndarray | None = None
        self._gradients: dict[str, np.ndarray] = {}
        self._updated = False

    def children(self) -> dict[str, Any]:
        return {"net": self.net}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable arrays by name."""
        return self.net.parameters

    @property
    def gradients(self) -> dict[str, np.ndarray]:
        """dL_M/d(parameter) from the last ``update``, keyed as :attr:`parameters`."""
        return self._gradients

    def predict(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = M(h, c): (batch, output_dim), with no side effects."""
        self._check(h, condition)
        return self.net.predict(self._join(h, condition))

    def forward(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = M(h, c), remembering the input for :meth:`update`."""
        self._check(h, condition)  # a refused batch leaves everything as it was
        self.check_batch_size(h.shape[0])
        joined = self._join(h, condition)
        self.synthetic_gradient = self.net.forward(joined)
        self.input = joined
        self._updated = False
        return self.synthetic_gradient

    def update(self, target: np.ndarray, alpha: float) -> float:
        """One descent step on ``L_M`` of the last forward's ĝ against ``target``; returns ``L_M``."""
        if self.synthetic_gradient is None:
            raise ValueError("update() needs a prediction to correct; call forward(h) first")
        validation.check_same_shape(target, "target", self.synthetic_gradient, "the last synthetic gradient")
        alpha = validation.check_learning_rate(alpha)
        if self._updated:
            raise ValueError("update() after update(): the last forward pass used the old weights; "
                             "call forward(h) again first")
        loss, dprediction = regression_loss(self.synthetic_gradient, target)
        self.net.backward(dprediction, input_delta=False)  # [h, c] is the generator's data: no delta for it
        self._gradients = dict(self.net.gradients)
        self.net.update(alpha)
        self._updated = True
        return loss

    def _check(self, h, condition):
        validation.check_batch(h, "h", self.output_dim, width_name="the generator's output_dim")
        validation.check_condition(condition, self.condition_dim, h.shape[0], "this generator")

    @staticmethod
    def _join(h, condition):
        if condition is None:
            return h
        return np.concatenate([h, condition.astype(h.dtype, copy=False)], axis=1)


class LinearGenerator(Generator):
    """The blog's linear generator: ``ĝ = [h, c] @ weights + bias``.

    ``weights`` has shape (output_dim + condition_dim, output_dim): conditioning
    concatenates c (e.g. the labels) to h.  ``init='zeros'`` (the default, as in
    the paper) starts with ĝ = 0, so a fresh DNI layer does not move until its
    generator has learned something; ``init='blog'`` is the blog's random start.
    """

    def __init__(self, output_dim: int, condition_dim: int = 0, *, init: str = "zeros", bias: bool = True,
                 update_rule: Any = None, seed: int | None = None, rng: np.random.Generator | None = None,
                 dtype: Any = np.float64) -> None:
        output_dim = validation.check_integer(output_dim, "output_dim")
        condition_dim = validation.check_integer(condition_dim, "condition_dim", minimum=0)
        net = Layer(output_dim + condition_dim, output_dim, "identity", bias=bias, init=init,
                    update_rule=update_rule, seed=seed, rng=rng, dtype=dtype)
        super().__init__(net, output_dim, condition_dim)

    def parameter_jacobians(self, h: np.ndarray, condition: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """dĝ/dθ of each example, keyed as :attr:`parameters`: (batch, output_dim, *parameter.shape).

        ĝ_i = Σ_a x_a W_ai + b_i with x = [h, c], so dĝ_i/dW_ac = x_a [i = c] and dĝ_i/db_c = [i = c].
        What eligibility traces accumulate (:mod:`sgrad.eligibility_traces`).
        """
        self._check(h, condition)
        x = self._join(h, condition)
        identity = np.eye(self.output_dim, dtype=x.dtype)
        jacobians = {"weights": np.einsum("ba,ic->biac", x, identity)}
        if self.bias is not None:
            jacobians["bias"] = np.broadcast_to(identity, (len(x), *identity.shape)).copy()
        return jacobians

    def apply_gradients(self, gradients: dict[str, np.ndarray], alpha: float) -> None:
        """One step of the update rule with ``gradients`` (keyed as :attr:`parameters`, each of its shape)."""
        for name, param in self.parameters.items():
            grad = gradients.get(name) if isinstance(gradients, dict) else None
            if not isinstance(grad, np.ndarray) or grad.shape != param.shape or not np.isfinite(grad).all():
                got = f"shape {grad.shape}" if isinstance(grad, np.ndarray) else repr(type(grad).__name__)
                raise ValueError(f"gradients must map each parameter to a finite array of its shape: {name!r} is "
                                 f"{param.shape}; got {got}")
        alpha = validation.check_learning_rate(alpha)
        self._gradients = {name: gradients[name] for name in self.parameters}
        self.net.weights_grad, self.net.bias_grad = gradients["weights"], gradients.get("bias")
        self.net.update(alpha)

    @property
    def weights(self) -> np.ndarray:
        return self.net.weights

    @weights.setter
    def weights(self, value: np.ndarray) -> None:
        self.net.weights = value

    @property
    def bias(self) -> np.ndarray | None:
        return self.net.bias

    @bias.setter
    def bias(self, value: np.ndarray | None) -> None:
        self.net.bias = value

    @property
    def weights_grad(self) -> np.ndarray | None:
        return self._gradients.get("weights")

    @property
    def bias_grad(self) -> np.ndarray | None:
        return self._gradients.get("bias")

    @property
    def update_rule(self) -> Any:
        return self.net.update_rule


class MLPGenerator(Generator):
    """ĝ = MLP([h, c]): hidden Linear→(BatchNorm)→ReLU blocks, then a zero-initialised linear output.

    ``hidden=(1024, 1024), batchnorm=True`` is the generator of the public
    TensorFlow reproduction of the paper's MNIST experiments.  The zero output
    layer makes ĝ = 0 at the start, as for :class:`LinearGenerator`.
    """

    def __init__(self, output_dim: int, condition_dim: int = 0, *, hidden: Sequence[int] = (1024, 1024),
                 batchnorm: bool = True, update_rule: Any = None, seed: int | None = None,
                 rng: np.random.Generator | None = None, dtype: Any = np.float64,
                 prediction_dim: int | None = None) -> None:
        output_dim = validation.check_integer(output_dim, "output_dim")
        condition_dim = validation.check_integer(condition_dim, "condition_dim", minimum=0)
        rng = validation.make_rng(seed, rng)
        widths = (output_dim + condition_dim, *validation.check_widths(hidden, "hidden"))
        blocks = [dense_block(a, b, "relu", batchnorm=batchnorm, update_rule=update_rule, rng=rng, dtype=dtype)
                  for a, b in zip(widths[:-1], widths[1:])]
        out = Layer(widths[-1], prediction_dim or output_dim, "identity", init="zeros", update_rule=update_rule,
                    rng=rng, dtype=dtype)
        super().__init__(Sequential(blocks + [out]), output_dim, condition_dim)


class SyntheticLossGenerator(MLPGenerator):
    """Predicts a non-negative loss ``ℓ̂ = softplus(M([h, c]))`` per example, and offers its gradient as ĝ.

    After the variant of the public TensorFlow reproduction: a block descends
    ``ĝ = dL̂/dh`` with ``L̂ = mean over the batch of ℓ̂``, and the generator
    regresses ℓ̂ onto the next block's predicted loss (the top block's onto the
    real per-example loss).  ``forward`` returns ĝ (batch, output_dim) and keeps
    ``predicted_loss`` ℓ̂ (batch, 1); ``update(target, alpha)`` takes a target
    of shape (batch, 1).  ``hidden=()`` gives a linear model.

    The output layer's weights start at zero, so ĝ = 0 at the start, and its bias
    at ``softplus⁻¹(initial_loss)``, so ℓ̂ = ``initial_loss`` for every example:
    give the loss you expect at the start, ln(classes) for a softmax
    cross-entropy (the default, ln 2, is softplus(0)).  A wrong start is not
    harmless (Adam moves the bias by at most about alpha per step, so the
    output weights take up the gap in level too).  Measured on 10,000 MNIST
    images (3 layers of 128, generators of 128-128, Adam at 1e-3, 1,000 steps,
    seed 0; tests/test_experiment_mnist.py): started at ln 2, 19.6% test
    accuracy with ℓ̂ = M(h) and 78.5% with ℓ̂ = M(h, c); started at ln 10,
    63.5% and 86.0% (no backprop: 80.8%).
    """

    predicted_loss: np.ndarray | None
    _z: np.ndarray | None

    def __init__(self, output_dim: int, condition_dim: int = 0, *, initial_loss: float = float(np.log(2.0)),
                 **options: Any) -> None:
        initial_loss = validation.check_number(initial_loss, "initial_loss", above=0,
                                               example="2.3026 (ln 10, a uniform guess among 10 classes)")
        super().__init__(output_dim, condition_dim, prediction_dim=1, **options)
        # softplus⁻¹(ℓ) = ℓ + log(1 - exp(-ℓ)), written so that it neither overflows nor loses small ℓ.
        self.net.modules[-1].bias[...] = initial_loss + np.log(-np.expm1(-initial_loss))
        self.predicted_loss = None
        self._z = None

    def predict(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = dL̂/dh for h, with no side effects (one forward and backward of a copy of the net)."""
        probe = copy.deepcopy(self)
        return probe.forward(h, condition)

    def forward(self, h: np.ndarray, condition: np.ndarray | None = None) -> np.ndarray:
        """ĝ = dL̂/dh with ``L̂ = mean over the batch of ℓ̂(h, c)``, remembering what :meth:`update` needs."""
        self._check(h, condition)
        self.check_batch_size(h.shape[0])
        joined = self._join(h, condition)
        self._z = self.net.forward(joined)
        self.input = joined
        self.predicted_loss = np.logaddexp(0.0, self._z)  # softplus, without overflow
        batch = h.shape[0]
        dinput = self.net.backward(sigmoid(self._z) / batch)  # softplus' = sigmoid
        self.synthetic_gradient = dinput[:, :self.output_dim]
        self._updated = False
        return self.synthetic_gradient

    def update(self, target: np.ndarray, alpha: float) -> float:
        """One descent step of ``1/(2 batch) sum((ℓ̂ - target)**2)``; target: (batch, 1).  Returns that loss."""
        if self.predicted_loss is None or self._z is None:
            raise ValueError("update() needs a prediction to correct; call forward(h) first")
        validation.check_same_shape(target, "target", self.predicted_loss, "the last predicted loss")
        alpha = validation.check_learning_rate(alpha)
        if self._updated:
            raise ValueError("update() after update(): the last forward pass used the old weights; "
                             "call forward(h) again first")
        loss, dloss = regression_loss(self.predicted_loss, target)
        self.net.backward(dloss * sigmoid(self._z), input_delta=False)
        self._gradients = dict(self.net.gradients)
        self.net.update(alpha)
        self._updated = True
        return loss


class ConvGenerator(Generator):
    """ĝ = CNN([h, c]) for feature maps h: (batch, channels, height, width); ĝ has the shape of h.

    Hidden Conv→(BatchNorm)→ReLU blocks of ``hidden`` channels (default two of 32), then a
    zero-initialised convolution to ``channels`` outputs, so that ĝ = 0 at the start; every
    kernel is ``kernel_size``×``kernel_size`` (odd) and padded to keep the maps' size.  A
    conditioned generator (cDNI) broadcasts c: (batch, condition_dim), e.g. the one-hot
    labels, over the maps as ``condition_dim`` extra input channels, each constant over
    its map.  ``output_dim`` is ``channels``, so it matches a conv block's ``output_dim``.
    """

    def __init__(self, channels: int, condition_dim: int = 0, *, hidden: Sequence[int] = (32, 32),
                 kernel_size: int = 3, batchnorm: bool = True, update_rule: Any = None, seed: int | None = None,
                 rng: np.random.Generator | None = None, dtype: Any = np.float64) -> None:
        channels = validation.check_integer(channels, "channels")
        condition_dim = validation.check_integer(condition_dim, "condition_dim", minimum=0)
        kernel_size = validation.check_integer(kernel_size, "kernel_size")
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, so that padding keeps the maps' size (ĝ has the shape of h); "
                             f"got {kernel_size}. Use {kernel_size + 1} or {kernel_size - 1}")
        rng = validation.make_rng(seed, rng)
        widths = (channels + condition_dim, *validation.check_widths(hidden, "hidden"))
        blocks = [conv_block(a, b, kernel_size, "relu", batchnorm=batchnorm, update_rule=update_rule, rng=rng,
                             dtype=dtype) for a, b in zip(widths[:-1], widths[1:])]
        out = Conv2d(widths[-1], channels, kernel_size, padding=kernel_size // 2, init="zeros",
                     update_rule=update_rule, rng=rng, dtype=dtype)
        super().__init__(Sequential(blocks + [out]), channels, condition_dim)

    def _check(self, h, condition):
        validation.check_feature_maps(h, "h", self.output_dim, channels_name="the generator's output_dim")
        validation.check_condition(condition, self.condition_dim, h.shape[0], "this generator")

    @staticmethod
    def _join(h, condition):
        """[h, c]: c (batch, condition_dim) broadcast to maps of h's size, as extra channels after h's."""
        if condition is None:
            return h
        batch, _, height, width = h.shape
        maps = np.broadcast_to(condition.astype(h.dtype, copy=False)[:, :, None, None],
                               (batch, condition.shape[1], height, width))
        return np.concatenate([h, maps], axis=1)
