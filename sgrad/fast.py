"""Speed tricks, kept apart from the maths: each one computes what a plain formula says, faster.

Read :mod:`sgrad.kernels` for the maths.  Every function here names the plain
formula it replaces, and ``tests/test_fast.py`` checks the two against each
other.  A trick stays here only while it pays in ``benchmarks/performance.py``.
"""

import functools

import numpy as np


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(length, dtype=dtype)
    ones.flags.writeable = False  # shared by every caller: nobody may change it
    return ones


def all_finite(array: np.ndarray) -> bool:
    """``np.isfinite(array).all()`` for a 2-D float array.

    A NaN or an inf makes its column's sum NaN or inf, so finite column sums
    prove the array finite.  The sums run as one matrix-vector product in the
    BLAS (``ones @ array``), with no boolean copy of the array; only sums that
    are not finite (a real NaN or inf, or an overflow) need the elementwise test.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum, or inf - inf, is the answer "look closer"
        sums = _ones(array.shape[0], array.dtype) @ array
    return bool(np.isfinite(sums).all()) or bool(np.isfinite(array).all())


def batchnorm_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sgrad.kernels.batchnorm_backward` in one (batch, features) array instead of five.

    Since ``mean(dx_hat) = gamma * dbeta / batch`` and ``mean(dx_hat * x_hat) = gamma * dgamma / batch``,
    ``dx = gamma * inv_std * (dout - dbeta / batch - x_hat * dgamma / batch)``, built in place.
    """
    batch = dout.shape[0]
    dbeta = _ones(batch, dout.dtype) @ dout
    dgamma = np.einsum("ij,ij->j", dout, x_hat)  # sum(dout * x_hat), with no product array
    dx = x_hat * (dgamma / batch)
    np.subtract(dout, dx, out=dx)
    dx -= dbeta / batch
    dx *= gamma * inv_std
    return dx, dgamma, dbeta
