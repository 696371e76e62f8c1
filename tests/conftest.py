"""Helpers shared by the tests: a central-difference gradient and a relative error.

Import them in a test file with ``from conftest import numerical_gradient, relative_error``
(pytest puts ``tests/`` on ``sys.path``).
"""

import numpy as np


def numerical_gradient(f, x, eps=1e-6):
    """Central-difference gradient of the scalar function ``f()`` with respect to ``x``.

    ``f`` takes no argument and reads ``x``; each entry of ``x`` (a float64 array)
    is nudged in place by ``+eps`` and ``-eps`` and then restored, so ``x`` is
    unchanged on return.  Returns an array of ``x``'s shape.
    """
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        original = x[i]
        x[i] = original + eps
        f_plus = f()
        x[i] = original - eps
        f_minus = f()
        x[i] = original
        grad[i] = (f_plus - f_minus) / (2 * eps)
    return grad


def relative_error(a, b):
    """``max |a - b| / max(|a| + |b|)``: about 1e-8 or less for a correct float64 gradient."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(float(np.max(np.abs(a) + np.abs(b))), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(a - b))) / scale
