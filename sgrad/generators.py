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
    loss ``L_M = 1/(2 batch) * sum((ĝ - target)**2)`` of the last forward's
    prediction, and return that loss (measured before the step).
``predict(h, condition=None) -> ĝ``
    The same prediction with no side effects, for diagnostics.
"""

import numpy as np

from . import _validation, kernels
from .initializers import initialize
from .optimizers import get_update_rule


def regression_loss(prediction, target):
    """The generator's loss ``1/(2 batch) * sum((ĝ - target)**2)`` and its gradient dL_M/dĝ."""
    diff = prediction - target
    batch = prediction.shape[0]
    return 0.5 * float(np.sum(diff * diff)) / batch, diff / batch


class LinearGenerator:
    """The blog's linear generator: ``ĝ = [h, c] @ weights + bias``.

    ``weights`` has shape (output_dim + condition_dim, output_dim): conditioning
    concatenates c (e.g. the labels) to h.  ``init='zeros'`` (the default, as in
    the paper) starts with ĝ = 0, so a fresh DNI layer does not move until its
    generator has learned something; ``init='blog'`` is the blog's random start.
    """

    def __init__(self, output_dim, condition_dim=0, *, init="zeros", bias=True, update_rule=None,
                 seed=None, rng=None, dtype=np.float64):
        self.output_dim = _validation.check_positive_int(output_dim, "output_dim")
        self.condition_dim = _validation.check_positive_int(condition_dim, "condition_dim", minimum=0)
        rng = _validation.make_rng(seed, rng)
        self.weights = initialize(init, (self.output_dim + self.condition_dim, self.output_dim), rng, dtype)
        self.bias = np.zeros(self.output_dim, dtype=dtype) if bias else None
        self.update_rule = get_update_rule(update_rule)
        self.update_state = {name: self.update_rule.init_state(p) for name, p in self.parameters.items()}
        self.input = None
        self.synthetic_gradient = None
        self.weights_grad = None
        self.bias_grad = None

    @property
    def parameters(self):
        """The trainable arrays by name."""
        params = {"weights": self.weights}
        if self.bias is not None:
            params["bias"] = self.bias
        return params

    @property
    def gradients(self):
        """dL_M/d(parameter) from the last ``update``, keyed as :attr:`parameters`."""
        grads = {"weights": self.weights_grad}
        if self.bias is not None:
            grads["bias"] = self.bias_grad
        return grads

    def predict(self, h, condition=None):
        """ĝ = M(h, c): (batch, output_dim), with no side effects."""
        return kernels.linear_forward(self._joined(h, condition), self.weights, self.bias)

    def forward(self, h, condition=None):
        """ĝ = M(h, c), remembering the input for :meth:`update`."""
        self.input = self._joined(h, condition)
        self.synthetic_gradient = kernels.linear_forward(self.input, self.weights, self.bias)
        return self.synthetic_gradient

    def update(self, target, alpha):
        """One descent step on ``L_M`` of the last forward's ĝ against ``target``; returns ``L_M``."""
        if self.synthetic_gradient is None:
            raise ValueError("update() needs a prediction to correct; call forward(h) first")
        _validation.check_same_shape(target, "target", self.synthetic_gradient, "the last synthetic gradient")
        alpha = _validation.check_learning_rate(alpha)
        loss, dprediction = regression_loss(self.synthetic_gradient, target)
        _, self.weights_grad, self.bias_grad = kernels.linear_backward(
            dprediction, self.input, self.weights, self.bias is not None)
        for name, param in self.parameters.items():
            self.update_rule.step(param, self.gradients[name], self.update_state[name], alpha)
        return loss

    def _joined(self, h, condition):
        _validation.check_batch(h, "h", self.output_dim, width_name="the generator's output_dim")
        _validation.check_condition(condition, self.condition_dim, h.shape[0], "this generator")
        if condition is None:
            return h
        return np.concatenate([h, condition.astype(h.dtype, copy=False)], axis=1)
