"""The speed tricks of sgrad/fast.py, each against the plain formula it replaces.

Like every test, these run with NumPy's overflow and invalid-operation warnings raised as errors (conftest.py):
a trick that warns where the plain formula is silent is not the same function.
"""

import numpy as np
import pytest
from hypothesis import given
from strategies import (draws, dtypes, float_dtypes, float_matrices, indices, long_batches, matrix_sides, non_finite,
                        orders, seeds, widths)

from sgrad import fast, kernels

# --- all_finite: np.isfinite(array).all() ------------------------------------------------------


@given(array=float_matrices())
def test_all_finite_is_isfinite_all(array):
    assert fast.all_finite(array) == np.isfinite(array).all(), (
        f"all_finite (mine) says {fast.all_finite(array)}, np.isfinite(array).all() says {np.isfinite(array).all()}")


@given(rows=matrix_sides, columns=matrix_sides, dtype=float_dtypes, order=orders, bad=non_finite, seed=seeds,
       data=draws)
def test_one_nan_or_inf_anywhere_makes_the_array_not_finite(rows, columns, dtype, order, bad, seed, data):
    array = np.asarray(np.random.default_rng(seed).random((rows, columns)), dtype=dtype, order=order)
    array[data.draw(indices(rows), label="row"), data.draw(indices(columns), label="column")] = bad
    assert not fast.all_finite(array)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_finite_columns_whose_sums_overflow_are_finite(dtype, order):
    largest = np.finfo(dtype).max
    array = np.asarray(np.full((8, 3), largest / 2), dtype=dtype, order=order)
    array[:, 1] *= -1
    assert fast.all_finite(array)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_inf_and_minus_inf_in_one_column_are_not_finite(dtype):
    array = np.ones((4, 3), dtype=dtype)
    array[0, 2], array[3, 2] = np.inf, -np.inf  # their column sum is inf - inf: NaN, an invalid operation
    assert not fast.all_finite(array)


# --- batchnorm_backward: kernels.batchnorm_backward in place --------------------------------------


@given(dtype=dtypes, batch=long_batches, features=widths, seed=seeds)
def test_batchnorm_backward_is_the_plain_kernels(dtype, batch, features, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((batch, features)) * rng.uniform(0.1, 10.0, features)).astype(dtype)
    gamma, beta = rng.standard_normal(features).astype(dtype), rng.standard_normal(features).astype(dtype)
    _, x_hat, inv_std, _, _ = kernels.batchnorm_forward(x, gamma, beta, 1e-5)
    dout = rng.standard_normal((batch, features)).astype(dtype)
    arguments = (dout, x_hat, inv_std, gamma)
    copies = [argument.copy() for argument in arguments]

    mine = fast.batchnorm_backward(*arguments)
    plain = kernels.batchnorm_backward(*arguments)

    # dx is a difference of terms of size |gamma * inv_std| * |dout| * (1 + x_hat**2); it may cancel to nothing
    # (it does for a batch of two), so it is compared to the size of those terms, not to its own.
    eps = np.finfo(dtype).eps
    scale = float(np.max(np.abs(gamma * inv_std)) * np.max(np.abs(dout)) * (1 + np.max(x_hat**2)))
    for name, ours, theirs, size in [("dx", mine[0], plain[0], scale),
                                     ("dgamma", mine[1], plain[1], float(np.sum(np.abs(dout * x_hat)))),
                                     ("dbeta", mine[2], plain[2], float(np.sum(np.abs(dout))))]:
        assert ours.dtype == dtype, f"{name} is {ours.dtype}; expected {np.dtype(dtype)}"
        difference = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        assert difference <= 8 * batch * eps * size, (
            f"{name}: fast (mine) and plain kernel differ by {difference:.2g}, more than rounding "
            f"({8 * batch * eps * size:.2g})\n  fast:  {np.ravel(ours)[:6]}\n  plain: {np.ravel(theirs)[:6]}")
    for argument, copy in zip(arguments, copies):
        np.testing.assert_array_equal(argument, copy, err_msg="batchnorm_backward changed its input")
