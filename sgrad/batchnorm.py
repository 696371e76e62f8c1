"""Batch normalisation (Ioffe & Szegedy, 2015) with a hand-written backward pass.

In training mode each feature is normalised with the batch's own mean and
variance, and running averages of both are kept; in evaluation mode the
running averages are used instead, so a prediction does not depend on the
rest of the batch.
"""

import numpy as np
from numpy.typing import DTypeLike

from . import _validation
from .kernels import column_sums
from .optimizers import UpdateRule, get_update_rule


def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training-mode batch norm.  x: (batch, features).  Returns ``(out, centred, inv_std, mean, var)``.

    ``out = x_hat * gamma + beta`` with ``x_hat = centred * inv_std``, ``centred = x - mean``
    and ``inv_std = 1 / sqrt(var + eps)``.  x_hat itself is never stored: ``out``
    is computed from ``centred`` in one product, and the backward pass takes
    ``centred`` and ``inv_std`` (one pass over the batch less each way).
    """
    batch = x.shape[0]
    mean = column_sums(x) / batch
    centred = x - mean
    var = np.einsum("ij,ij->j", centred, centred) / batch  # column sums of squares, with no squared copy
    inv_std = 1.0 / np.sqrt(var + eps)
    out = centred * (gamma * inv_std)
    out += beta
    return out, centred, inv_std, mean, var


def batchnorm_backward(dout: np.ndarray, centred: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`batchnorm_forward`: returns ``(dx, dgamma, dbeta)``.

    With ``dx_hat = dout * gamma``, the compact form
    ``dx = inv_std * (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat))``
    accounts for the batch mean and variance depending on every row.  Since
    ``mean(dx_hat) = gamma * dbeta / batch`` and ``mean(dx_hat * x_hat) = gamma * dgamma / batch``,
    it is computed as ``gamma * inv_std * (dout - dbeta / batch - centred * (inv_std * dgamma / batch))``,
    in one (batch, features) array.
    """
    batch = dout.shape[0]
    dbeta = column_sums(dout)
    dgamma = np.einsum("ij,ij->j", dout, centred) * inv_std  # sum(dout * x_hat), with no product array
    dx = centred * (inv_std * (dgamma / batch))
    np.subtract(dout, dx, out=dx)
    dx -= dbeta / batch
    dx *= gamma * inv_std
    return dx, dgamma, dbeta


class BatchNorm:
    """Batch normalisation over the features of a (batch, features) input, with a learned scale and shift.

    ``momentum`` is the weight of the newest batch in the running averages
    (PyTorch's convention).  ``training`` selects the mode: set it with
    :meth:`train` and :meth:`eval`.
    """

    def __init__(self, features: int, *, momentum: float = 0.1, eps: float = 1e-5,
                 update_rule: str | UpdateRule | None = None, dtype: DTypeLike = np.float64) -> None:
        self.input_dim = self.output_dim = _validation.check_positive_int(features, "features")
        self.momentum = _validation.check_number(momentum, "momentum", above=0, at_most=1, example="0.1")
        self.eps = _validation.check_number(eps, "eps", above=0, example="1e-5")
        dtype = _validation.check_float_dtype(dtype)
        self.gamma = np.ones(features, dtype=dtype)
        self.beta = np.zeros(features, dtype=dtype)
        self.running_mean = np.zeros(features, dtype=dtype)
        self.running_var = np.ones(features, dtype=dtype)
        self.training = True
        self.update_rule = get_update_rule(update_rule)
        self.update_state = {name: self.update_rule.init_state(p) for name, p in self.parameters.items()}
        self.gradients: dict[str, np.ndarray] = {}
        self._cache = None

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return {"gamma": self.gamma, "beta": self.beta}

    def train(self, mode: bool = True) -> "BatchNorm":
        self.training = bool(mode)
        return self

    def eval(self) -> "BatchNorm":
        return self.train(False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The output for x in the current mode, with no side effects (running averages untouched)."""
        _validation.check_batch(x, "input", self.input_dim, width_name="features")
        if self.training:
            return batchnorm_forward(x, self.gamma, self.beta, self.eps)[0]
        return self._evaluate(x)[0]

    def _evaluate(self, x):
        """Evaluation mode: ``(out, centred, inv_std)`` with the running statistics."""
        inv_std = 1.0 / np.sqrt(self.running_var + self.eps)
        centred = x - self.running_mean
        out = centred * (self.gamma * inv_std)
        out += self.beta
        return out, centred, inv_std

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Normalise x: (batch, features); in training mode also update the running averages."""
        _validation.check_batch(x, "input", self.input_dim, width_name="features")
        if self.training and x.shape[0] < 2:
            raise ValueError("batch norm in training mode needs a batch of at least 2 rows; "
                             "use eval() for single examples")
        return self._forward(x)

    def _forward(self, x):
        """``forward`` without the input checks: for a block that has checked its own input."""
        self.gradients = {}
        if self.training:
            out, centred, inv_std, mean, var = batchnorm_forward(x, self.gamma, self.beta, self.eps)
            batch = x.shape[0]
            # Running variance is unbiased, as in PyTorch.
            self.running_mean += self.momentum * (mean - self.running_mean)
            self.running_var += self.momentum * (var * batch / (batch - 1) - self.running_var)
        else:
            out, centred, inv_std = self._evaluate(x)
        self._cache = (centred, inv_std, self.training)
        return out

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Backpropagate dL/d(output); stores dL/dgamma and dL/dbeta, returns dL/dx (None if not ``input_delta``)."""
        if self._cache is None:
            raise ValueError("backward() needs a forward pass first; call forward(x)")
        _validation.check_same_shape(output_delta, "output_delta", self._cache[0], "the last output")
        return self._backward(output_delta, input_delta)

    def _backward(self, output_delta, input_delta=True):
        """``backward`` without the checks: for a block that has checked its own output delta."""
        centred, inv_std, training = self._cache
        if training:
            dx, dgamma, dbeta = batchnorm_backward(output_delta, centred, inv_std, self.gamma)
        else:  # the running statistics are constants: an elementwise affine map
            dgamma = np.einsum("ij,ij->j", output_delta, centred) * inv_std
            dbeta = column_sums(output_delta)
            dx = output_delta * (self.gamma * inv_std)
        self.gradients = {"gamma": dgamma, "beta": dbeta}
        return dx if input_delta else None

    def update(self, alpha: float) -> None:
        """One descent step on gamma and beta with the gradients of the last backward."""
        if not self.gradients:
            raise ValueError("update() needs gradients; call backward(output_delta) after forward(x) first")
        alpha = _validation.check_learning_rate(alpha)
        for name, param in self.parameters.items():
            self.update_rule.step(param, self.gradients[name], self.update_state[name], alpha)
        self.gradients = {}

    def __repr__(self) -> str:
        return f"BatchNorm({self.input_dim}, training={self.training})"
