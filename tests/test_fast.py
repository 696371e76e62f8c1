"""The speed tricks of sgrad/fast.py, each against the plain formula it replaces.

Like every test, these run with NumPy's overflow and invalid-operation warnings raised as errors (conftest.py):
a trick that warns where the plain formula is silent is not the same function.
"""

import numpy as np
from hypothesis import given
from strategies import (dtypes, long_batches, seeds, widths)

from sgrad import fast, kernels

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


# --- batchnorm_forward: kernels.batchnorm_forward in fewer passes ----------------------------------


@given(dtype=dtypes, batch=long_batches, features=widths, seed=seeds)
def test_batchnorm_forward_is_the_plain_kernels(dtype, batch, features, seed):
    rng = np.random.default_rng(seed)
    offset, spread = rng.uniform(-5.0, 5.0, features), rng.uniform(0.1, 10.0, features)
    x = (offset + spread * rng.standard_normal((batch, features))).astype(dtype)
    gamma, beta = rng.standard_normal(features).astype(dtype), rng.standard_normal(features).astype(dtype)
    before = x.copy()

    mine = fast.batchnorm_forward(x, gamma, beta, 1e-5)
    plain = kernels.batchnorm_forward(x, gamma, beta, 1e-5)

    eps = np.finfo(dtype).eps
    # Each result is compared to the size of what it is made from: x_hat and out are of order 1 to 3 (|x_hat| <=
    # sqrt(batch)), the mean and variance of order |x| and x**2.
    sizes = {"out": 1 + np.abs(gamma) * np.sqrt(batch) + np.abs(beta), "x_hat": np.sqrt(batch),
             "inv_std": 1 / np.sqrt(plain[4] + 1e-5), "mean": np.max(np.abs(x), axis=0),
             "var": np.max(x.astype(np.float64) ** 2, axis=0)}
    for (name, size), ours, theirs in zip(sizes.items(), mine, plain):
        assert ours.dtype == dtype, f"{name} is {ours.dtype}; expected {np.dtype(dtype)}"
        difference = np.abs(ours.astype(np.float64) - theirs)
        bound = 16 * batch * eps * size
        assert np.all(difference <= bound), (
            f"{name}: fast (mine) and plain kernel differ by {np.max(difference):.2g}, more than rounding\n"
            f"  fast:  {np.ravel(ours)[:6]}\n  plain: {np.ravel(theirs)[:6]}")
    np.testing.assert_array_equal(x, before, err_msg="batchnorm_forward changed its input")
