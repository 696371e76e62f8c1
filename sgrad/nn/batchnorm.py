"""Batch normalisation (Ioffe & Szegedy, 2015) with a hand-written backward pass.

In training mode each feature is normalised with the batch's own mean and
variance, and running averages of both are kept; in evaluation mode the
running averages are used instead, so a prediction does not depend on the
rest of the batch.  The maths is in :func:`sgrad.nn.kernels.batchnorm_forward`
and :func:`~sgrad.nn.kernels.batchnorm_backward`.
"""

import numpy as np
from numpy.typing import DTypeLike

from .. import argument_checks
from . import fast_kernels, kernels
from .module import Module, step_in_place
from .optimizers import UpdateRule, get_update_rule


class BatchNorm(Module):
    """Batch normalisation over the features of a (batch, features) input, with a learned scale and shift.

    ``out = gamma * x_hat + beta``, ``x_hat = (x - mean) / sqrt(var + eps)``.
    ``momentum`` is the weight of the newest batch in the running averages
    (PyTorch's convention).  ``training`` selects the mode: set it with
    :meth:`train` and :meth:`eval`.
    """

    backward_needs: tuple[str, ...] = ("_cache",)

    def __init__(self, features: int, *, momentum: float = 0.1, eps: float = 1e-5,
                 update_rule: str | UpdateRule | None = None, dtype: DTypeLike = np.float64) -> None:
        self.input_dim = self.output_dim = argument_checks.check_integer(features, "features")
        self.momentum = argument_checks.check_number(momentum, "momentum", above=0, at_most=1, example="0.1")
        self.eps = argument_checks.check_number(eps, "eps", above=0, example="1e-5")
        dtype = argument_checks.check_float_dtype(dtype)
        self.gamma = np.ones(features, dtype=dtype)
        self.beta = np.zeros(features, dtype=dtype)
        self.running_mean = np.zeros(features, dtype=dtype)
        self.running_var = np.ones(features, dtype=dtype)
        self.training = True
        self.update_rule = get_update_rule(update_rule)
        self.update_state = {name: self.update_rule.init_state(p) for name, p in self.own_parameters().items()}
        self.gradients: dict[str, np.ndarray] = {}
        self._cache: tuple[np.ndarray, np.ndarray, bool] | None = None  # x_hat, inv_std, training

    def own_parameters(self) -> dict[str, np.ndarray]:
        return {"gamma": self.gamma, "beta": self.beta}

    def buffers(self) -> dict[str, np.ndarray]:
        return {"running_mean": self.running_mean, "running_var": self.running_var}

    def min_batch(self) -> int:
        return 2 if self.training else 1

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The output for x in the current mode, with no side effects (running averages untouched)."""
        argument_checks.check_batch(x, "input", self.input_dim, width_name="features")
        return self._predict_rows(x)

    def _predict_rows(self, x: np.ndarray) -> np.ndarray:
        """:meth:`predict` on rows already checked."""
        if self.training:
            return fast_kernels.batchnorm_forward(x, self.gamma, self.beta, self.eps)[0]
        return self._normalise_with_running_statistics(x)[0]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Normalise x: (batch, features); in training mode also update the running averages."""
        argument_checks.check_batch(x, "input", self.input_dim, width_name="features")
        self.check_batch_size(x.shape[0])
        return self._forward_rows(x)

    def _forward_rows(self, x: np.ndarray) -> np.ndarray:
        """:meth:`forward` on rows already checked (a subclass checks its own input, once)."""
        self.gradients = {}
        if self.training:
            out, x_hat, inv_std, mean, var = fast_kernels.batchnorm_forward(x, self.gamma, self.beta, self.eps)
            batch = x.shape[0]
            # Running variance is unbiased, as in PyTorch.
            self.running_mean += self.momentum * (mean - self.running_mean)
            self.running_var += self.momentum * (var * batch / (batch - 1) - self.running_var)
        else:
            out, x_hat, inv_std = self._normalise_with_running_statistics(x)
        self._cache = (x_hat, inv_std, self.training)
        return out

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Backpropagate dL/d(output); stores dL/dgamma and dL/dbeta, returns dL/dx (None if not ``input_delta``)."""
        x_hat = self.forward_cache()[0][0]
        argument_checks.check_same_shape(output_delta, "output_delta", x_hat, "the last output")
        return self._backward_rows(output_delta, input_delta)

    def _backward_rows(self, output_delta: np.ndarray, input_delta: bool) -> np.ndarray | None:
        """:meth:`backward` of a delta already checked."""
        x_hat, inv_std, training = self.forward_cache()[0]
        backward = fast_kernels.batchnorm_backward if training else kernels.batchnorm_eval_backward
        dx, dgamma, dbeta = backward(output_delta, x_hat, inv_std, self.gamma)
        self.gradients = {"gamma": dgamma, "beta": dbeta}
        return dx if input_delta else None

    def update(self, alpha: float) -> None:
        """One descent step on gamma and beta with the gradients of the last backward."""
        if not self.gradients:
            raise ValueError("update() needs gradients; call backward(output_delta) after forward(x) first")
        alpha = argument_checks.check_learning_rate(alpha)
        for name, param in self.own_parameters().items():
            step_in_place(self.update_rule, param, self.gradients[name], self.update_state[name], alpha)
        self.gradients = {}

    def _normalise_with_running_statistics(self, x):
        """Evaluation mode: ``(out, x_hat, inv_std)`` with the running mean and variance."""
        inv_std = 1.0 / np.sqrt(self.running_var + self.eps)
        x_hat = (x - self.running_mean) * inv_std
        return self.gamma * x_hat + self.beta, x_hat, inv_std

    def __repr__(self) -> str:
        return f"BatchNorm({self.input_dim}, training={self.training})"
