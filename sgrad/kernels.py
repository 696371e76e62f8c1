"""Pure, vectorized kernels: the maths of a dense layer and a linear map.

No state, no printing, no checks: the classes in :mod:`sgrad.layers`,
:mod:`sgrad.dni` and :mod:`sgrad.generators` validate inputs, hold state and
call these.  Shapes use ``batch`` for the number of examples.
"""

import functools
from collections.abc import Callable

import numpy as np

from .nonlinearities import identity_out2deriv, relu_out2deriv


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of ones, made once per length and dtype (a training step asks for the same few)."""
    ones = np.ones(length, dtype=dtype)
    ones.flags.writeable = False
    return ones


def column_sums(a: np.ndarray) -> np.ndarray:
    """Sums over the rows of a (batch, features) array, as a matrix-vector product ``ones @ a``.

    The same sums as ``a.sum(axis=0)``, but the product runs in the BLAS,
    several times faster than NumPy's reduction over the first axis.
    """
    return _ones(a.shape[0], a.dtype) @ a


def row_sums(a: np.ndarray) -> np.ndarray:
    """Sums along the rows of a (batch, classes) array, as a matrix-vector product ``a @ ones``
    (NumPy's reduction along short rows is several times slower)."""
    return a @ _ones(a.shape[1], a.dtype)


def times_derivative(dh: np.ndarray, h: np.ndarray, nonlin_deriv: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``dh * nonlin'(z)``, from the output h; ReLU's derivative is applied as a boolean mask, with no float copy."""
    if nonlin_deriv is relu_out2deriv:
        return np.multiply(dh, h > 0)
    return dh * nonlin_deriv(h)


def linear_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Affine map ``z = x @ weights + bias``.

    x: (batch, in); weights: (in, out); bias: (out,) or None.  Returns z: (batch, out).
    """
    z = x @ weights
    if bias is not None:
        z += bias
    return z


def linear_backward(dz: np.ndarray, x: np.ndarray, weights: np.ndarray, with_bias: bool,
                    input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Backward pass of :func:`linear_forward`.

    dz: (batch, out), the gradient dL/dz.  Returns ``(dx, dweights, dbias)`` with
    shapes (batch, in), (in, out) and (out,) (``dbias`` is None without a bias).
    Gradients are summed over the batch: the loss decides any averaging.
    ``input_delta=False`` skips dx (returned as None) when nothing below needs it.
    """
    dx = dz @ weights.T if input_delta else None
    dweights = x.T @ dz
    dbias = column_sums(dz) if with_bias else None
    return dx, dweights, dbias


def dense_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                  nonlin: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """A blog-style layer: ``h = nonlin(x @ weights + bias)``.  Returns h: (batch, out)."""
    return nonlin(linear_forward(x, weights, bias))


def dense_backward(dh: np.ndarray, x: np.ndarray, h: np.ndarray, weights: np.ndarray,
                   nonlin_deriv: Callable[[np.ndarray], np.ndarray], with_bias: bool, input_delta: bool = True
                   ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray]:
    """Backward pass of :func:`dense_forward`.

    dh: (batch, out), the gradient dL/dh arriving at the layer's output h.
    Returns ``(dx, dweights, dbias, dz)`` where ``dz = dh * nonlin'(z)`` is the
    blog's ``weight_output_delta`` and ``dx = dz @ weights.T`` is computed with
    the weights as given (the pre-update weights, in a training step);
    ``input_delta=False`` skips dx (None), as :func:`linear_backward` does.
    """
    # The identity's derivative is 1: dz is dh itself, without an array of ones to multiply by.
    dz = dh if nonlin_deriv is identity_out2deriv else times_derivative(dh, h, nonlin_deriv)
    dx, dweights, dbias = linear_backward(dz, x, weights, with_bias, input_delta)
    return dx, dweights, dbias, dz


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two arrays, flattened; 0.0 if either is all zeros."""
    a = a.ravel()
    b = b.ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm > 0 else 0.0
