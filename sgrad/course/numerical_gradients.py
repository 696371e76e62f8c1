"""Numerical gradients: central differences, and the relative error that compares a gradient with them.

The tools beneath every gradient check of the course, as CS231n's ``gradient_check.py`` has them::

    expected = numerical_gradient(lambda: float(np.sum(layer.forward(x) * R)), layer.weights)
    relative_error(layer.weights_grad, expected)   # below 1e-6, usually near 1e-9, for a correct float64 gradient

They hold no answer to any exercise: they compare what a student's own forward and backward give.
"""

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike


def numerical_gradient(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of the scalar function ``f()`` with respect to ``x``.

    ``f`` takes no argument and reads ``x``, a float64 array whose entries are
    nudged in place by +eps and -eps, one at a time, and restored: ``x`` is
    unchanged on return.  Returns an array of ``x``'s shape.
    """
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        original = x[i]
        x[i] = original + eps
        f_plus = f()
        x[i] = original - eps
        f_minus = f()
        x[i] = original
        grad[i] = (f_plus - f_minus) / (2 * eps)
    return grad


def relative_error(a: ArrayLike, b: ArrayLike) -> float:
    """``max |a - b| / max(|a| + |b|)``: below 1e-6 (usually near 1e-9) for a correct float64 gradient."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(float(np.max(np.abs(a) + np.abs(b))), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(a - b))) / scale
