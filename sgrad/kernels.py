"""Pure, vectorized kernels: the maths of a dense layer, a linear map and batch norm.

No state, no printing, no checks: the classes in :mod:`sgrad.layers`,
:mod:`sgrad.batchnorm` and :mod:`sgrad.blocks` check their inputs, hold state
and call these.  Shapes use ``batch`` for the number of examples.  Each
function is written as its formula reads; the few that a training step runs
faster another way have a twin in :mod:`sgrad.fast`, tested against these.
"""

from collections.abc import Callable

import numpy as np

Nonlinearity = Callable[[np.ndarray], np.ndarray]


def linear_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Affine map ``z = x W + b``.

    x: (batch, in); weights W: (in, out); bias b: (out,) or None.  Returns z: (batch, out).
    """
    z = x @ weights
    if bias is not None:
        z += bias
    return z


def linear_backward(dz: np.ndarray, x: np.ndarray, weights: np.ndarray, with_bias: bool,
                    input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Backward pass of :func:`linear_forward`: ``(dL/dx, dL/dW, dL/db)``.

    dz: (batch, out), the gradient dL/dz.  ``dL/dx = dz Wᵀ`` (batch, in),
    ``dL/dW = xᵀ dz`` (in, out), ``dL/db = sum over the batch of dz`` (out,),
    None without a bias.  Gradients are summed over the batch: the loss decides
    any averaging.  ``input_delta=False`` skips dL/dx (None) when nothing below needs it.
    """
    dx = dz @ weights.T if input_delta else None
    dweights = x.T @ dz
    dbias = dz.sum(axis=0) if with_bias else None
    return dx, dweights, dbias


def dense_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, nonlin: Nonlinearity) -> np.ndarray:
    """A blog-style layer: ``h = f(x W + b)``.  Returns h: (batch, out)."""
    return nonlin(linear_forward(x, weights, bias))


def dense_backward(dh: np.ndarray, x: np.ndarray, h: np.ndarray, weights: np.ndarray, nonlin_deriv: Nonlinearity,
                   with_bias: bool, input_delta: bool = True
                   ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray]:
    """Backward pass of :func:`dense_forward`: ``(dL/dx, dL/dW, dL/db, dL/dz)``.

    dh: (batch, out), the gradient dL/dh arriving at the layer's output h.
    ``dL/dz = dh * f'(z)``, with f' computed from the output h (the blog's
    ``weight_output_delta``); then :func:`linear_backward`, with the weights as
    given (the pre-update weights, in a training step).
    """
    dz = dh * nonlin_deriv(h)
    dx, dweights, dbias = linear_backward(dz, x, weights, with_bias, input_delta)
    return dx, dweights, dbias, dz


def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training-mode batch norm (Ioffe & Szegedy, 2015): ``(out, x_hat, inv_std, mean, var)``.

    x: (batch, features).  Each feature is normalised with the batch's own
    statistics: ``x_hat = (x - mean) / sqrt(var + eps)``, ``out = gamma * x_hat + beta``.
    """
    mean = x.mean(axis=0)
    var = ((x - mean) ** 2).mean(axis=0)
    inv_std = 1.0 / np.sqrt(var + eps)
    x_hat = (x - mean) * inv_std
    return gamma * x_hat + beta, x_hat, inv_std, mean, var


def batchnorm_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of :func:`batchnorm_forward`: ``(dL/dx, dL/dgamma, dL/dbeta)``.

    The mean and the variance depend on every row, hence the two mean terms::

        dx_hat = dout * gamma
        dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / std
    """
    dbeta = dout.sum(axis=0)
    dgamma = (dout * x_hat).sum(axis=0)
    dx_hat = dout * gamma
    dx = (dx_hat - dx_hat.mean(axis=0) - x_hat * (dx_hat * x_hat).mean(axis=0)) * inv_std
    return dx, dgamma, dbeta


def affine_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of evaluation-mode batch norm, ``out = gamma * (x - running_mean) * inv_std + beta``.

    The running statistics are constants, so it is an elementwise affine map:
    ``dL/dx = dout * gamma * inv_std``.  Returns ``(dL/dx, dL/dgamma, dL/dbeta)``.
    """
    return dout * (gamma * inv_std), (dout * x_hat).sum(axis=0), dout.sum(axis=0)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two arrays, flattened; 0.0 if either is all zeros."""
    a = a.ravel()
    b = b.ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm > 0 else 0.0
