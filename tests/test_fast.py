"""The speed tricks of sgrad/fast_kernels.py, each against the plain formula it replaces.

Like every test, these run with NumPy's overflow and invalid-operation warnings raised as errors (conftest.py):
a trick that warns where the plain formula is silent is not the same function.
"""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import (dtypes, long_batches, seeds, widths)

from sgrad import argument_checks
from sgrad.nn import fast_dft, fast_kernels, fast_rows, fast_small_maps, kernels

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

    mine = fast_kernels.batchnorm_backward(*arguments)
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

    mine = fast_kernels.batchnorm_forward(x, gamma, beta, 1e-5)
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


@given(dtype=dtypes, rows=st.integers(1, 64).map(lambda k: 1024 * k + 8 * (k % 5)), features=st.integers(1, 40),
       seed=seeds)
def test_batchnorm_over_many_rows_of_few_features_is_the_plain_kernels(dtype, rows, features, seed):
    """Batch norm over maps: many rows (one per pixel) of a few channels, which the fast kernels read r rows at a
    time; forward and backward against the plain kernels."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-2.0, 2.0, features) + rng.standard_normal((rows, features))).astype(dtype)
    gamma, beta = rng.standard_normal(features).astype(dtype), rng.standard_normal(features).astype(dtype)
    dout = rng.standard_normal((rows, features)).astype(dtype)

    mine = fast_kernels.batchnorm_forward(x, gamma, beta, 1e-5)
    plain = kernels.batchnorm_forward(x, gamma, beta, 1e-5)
    mine_back = fast_kernels.batchnorm_backward(dout, mine[1], mine[2], gamma)
    plain_back = kernels.batchnorm_backward(dout, plain[1], plain[2], gamma)

    # Sums of `rows` numbers in another order: rounding of rows * eps times the size of what is summed.
    tolerance = 8 * rows * np.finfo(dtype).eps
    scale = float(np.max(np.abs(gamma)) + np.max(np.abs(beta)) + 1) * float(np.max(np.abs(x)) + 1)
    for name, ours, theirs in [("out", mine[0], plain[0]), ("x_hat", mine[1], plain[1]), ("mean", mine[3], plain[3]),
                               ("var", mine[4], plain[4]), ("dx", mine_back[0], plain_back[0]),
                               ("dgamma", mine_back[1], plain_back[1]), ("dbeta", mine_back[2], plain_back[2])]:
        assert ours.dtype == dtype and ours.shape == theirs.shape, f"{name}: {ours.dtype} {ours.shape}"
        size = scale * (float(np.sum(np.abs(dout))) if name in ("dgamma", "dbeta") else 1.0)
        difference = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        assert difference <= tolerance * size, f"{name}: fast and plain differ by {difference:.2g}"


# --- maxpool2d_forward and maxpool2d_backward: kernels' max pooling, offset by offset ------------------


@given(dtype=dtypes, batch=st.integers(1, 3), channels=st.integers(1, 3), height=st.integers(1, 7),
       width=st.integers(1, 7), kernel_height=st.integers(1, 3), kernel_width=st.integers(1, 3),
       stride=st.integers(1, 3), padding=st.integers(0, 1), levels=st.sampled_from([3, 1000]), seed=seeds)
def test_maxpool2d_is_the_plain_kernels_ties_included(dtype, batch, channels, height, width, kernel_height,
                                                      kernel_width, stride, padding, levels, seed):
    """The same output and the same input gradient, bit for bit; with 3 levels most windows tie, and both
    kernels then send the gradient to the window's first maximum."""
    kernel = (kernel_height, kernel_width)
    assume(2 * padding <= min(kernel) and kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, levels, (batch, channels, height, width)).astype(dtype)
    before = x.copy()

    plain, argmax = kernels.maxpool2d_forward(x, kernel, stride, padding)
    mine = fast_kernels.maxpool2d_forward(x, kernel, stride, padding)
    np.testing.assert_array_equal(mine, plain, err_msg="output: fast (mine) against the plain kernel")
    dout = rng.standard_normal(plain.shape).astype(dtype)
    np.testing.assert_array_equal(fast_kernels.maxpool2d_backward(dout, x, mine, kernel, stride, padding),
                                  kernels.maxpool2d_backward(dout, argmax, x.shape, kernel, stride, padding),
                                  err_msg="dL/dx: fast (mine) against the plain kernel")
    assert mine.dtype == dtype
    np.testing.assert_array_equal(x, before, err_msg="maxpool2d changed its input")


# --- conv2d_forward and conv2d_backward: kernels' convolution, a few examples at a time ----------------------


@given(dtype=dtypes, batch=st.integers(1, 4), in_channels=st.integers(1, 3), out_channels=st.integers(1, 3),
       height=st.integers(1, 7), width=st.integers(1, 12), kernel_height=st.integers(1, 3),
       kernel_width=st.integers(1, 4), stride=st.integers(1, 3), padding=st.integers(0, 2), bias=st.booleans(),
       chunk_bytes=st.sampled_from([1, 300, 1 << 20]), whole=st.booleans(), input_delta=st.booleans(), seed=seeds)
def test_conv2d_in_chunks_is_the_plain_kernels(dtype, batch, in_channels, out_channels, height, width, kernel_height,
                                               kernel_width, stride, padding, bias, chunk_bytes, whole, input_delta,
                                               seed):
    """z, dL/dx, dL/dW and dL/db of the chunked kernels against the plain ones: one example per chunk (1 byte),
    a few, or the whole batch; X_col kept from the forward pass (whole) or built again in the backward one.  (Where
    the rows pay, the convolution goes row by row instead: see the banded form's test below.)"""
    assume(kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    out_width = (width + 2 * padding - kernel_width) // stride + 1
    assume(not fast_rows.strip_width(in_channels, out_channels, (kernel_height, kernel_width), stride, out_width,
                                      np.dtype(dtype).itemsize))
    assume(not fast_dft.pays(in_channels, out_channels, (kernel_height, kernel_width), stride, (height, width), padding))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, in_channels, height, width)).astype(dtype)
    weights = rng.standard_normal((out_channels, in_channels, kernel_height, kernel_width)).astype(dtype)
    b = rng.standard_normal(out_channels).astype(dtype) if bias else None
    before = x.copy()

    z_plain, columns_plain = kernels.conv2d_forward(x, weights, b, stride, padding)
    z, columns = fast_kernels.conv2d_forward(x, weights, b, stride, padding, whole_bytes=(1 << 30) if whole else 0,
                                             chunk_bytes=chunk_bytes)
    dense = fast_small_maps.dense_pays(height, width, in_channels, out_channels, (kernel_height, kernel_width),
                                       z_plain.shape[2:], np.dtype(dtype).itemsize)
    assert (columns is not None) == (whole and not dense)
    dz = rng.standard_normal(z_plain.shape).astype(dtype)
    plain = kernels.conv2d_backward(dz, columns_plain, x.shape, weights, stride, padding, bias, input_delta)
    mine = fast_kernels.conv2d_backward(dz, x, columns, weights, stride, padding, bias, input_delta,
                                        chunk_bytes=chunk_bytes)

    eps = np.finfo(dtype).eps
    taps = kernel_height * kernel_width
    # Each result is a sum of products in another order than the plain kernel's: rounding of the size of the sum
    # of the products' sizes.
    sizes = {"z": taps * in_channels * np.max(np.abs(x)) * np.max(np.abs(weights)) + (np.max(np.abs(b)) if bias else 0),
             "dL/dx": taps * out_channels * np.max(np.abs(dz)) * np.max(np.abs(weights)),
             "dL/dW": dz.size / out_channels * np.max(np.abs(dz)) * np.max(np.abs(x)),
             "dL/db": dz.size / out_channels * np.max(np.abs(dz))}
    for (name, size), ours, theirs in zip(sizes.items(), (z, *mine), (z_plain, *plain)):
        if theirs is None:
            assert ours is None, f"{name}: the fast kernel gave an array where the plain one gives None"
            continue
        assert ours.dtype == dtype and ours.shape == theirs.shape, f"{name}: {ours.dtype} {ours.shape}"
        difference = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        assert difference <= 4 * eps * float(size), (
            f"{name}: fast (mine) and plain kernel differ by {difference:.2g}, more than rounding\n"
            f"  fast:  {np.ravel(ours)[:6]}\n  plain: {np.ravel(theirs)[:6]}")
    np.testing.assert_array_equal(x, before, err_msg="the convolution changed its input")


@given(dtype=dtypes, batch=st.integers(1, 4), in_channels=st.integers(1, 4), out_channels=st.integers(1, 4),
       side=st.integers(1, 5), kernel=st.integers(3, 5), stride=st.integers(1, 2), padding=st.integers(0, 2),
       seed=seeds)
def test_conv2d_on_maps_as_small_as_the_kernel_is_the_plain_kernels(dtype, batch, in_channels, out_channels, side,
                                                                   kernel, stride, padding, seed):
    """The dense form (sgrad.nn.fast_small_maps), taken when the maps have no more pixels than the kernel, as the
    4x4 maps of the MNIST CNN's interface under 5x5 kernels padded by 2: z, dL/dx, dL/dW and dL/db."""
    assume(kernel <= side + 2 * padding and side * side <= kernel * kernel)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, in_channels, side, side)).astype(dtype)
    weights = rng.standard_normal((out_channels, in_channels, kernel, kernel)).astype(dtype)
    b = rng.standard_normal(out_channels).astype(dtype)

    z_plain, columns_plain = kernels.conv2d_forward(x, weights, b, stride, padding)
    assert fast_small_maps.dense_pays(side, side, in_channels, out_channels, (kernel, kernel), z_plain.shape[2:],
                                      np.dtype(dtype).itemsize)
    z, columns = fast_kernels.conv2d_forward(x, weights, b, stride, padding)
    dz = rng.standard_normal(z_plain.shape).astype(dtype)
    plain = kernels.conv2d_backward(dz, columns_plain, x.shape, weights, stride, padding, True, True)
    mine = fast_kernels.conv2d_backward(dz, x, columns, weights, stride, padding, True, True)

    assert_within_rounding("dense", x, weights, b, dz, (z, *mine), (z_plain, *plain))


def assert_within_rounding(form, x, weights, b, dz, mine, plain, factor=1):
    """z, dL/dx, dL/dW and dL/db of a convolution's ``form`` (mine) against the plain kernels', each within the
    rounding of a sum of its products' sizes (times ``factor``: the frame's pixels, for the frequency domain)."""
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    taps = kernel_height * kernel_width
    sizes = {"z": taps * in_channels * np.max(np.abs(x)) * np.max(np.abs(weights)) + np.max(np.abs(b)),
             "dL/dx": taps * out_channels * np.max(np.abs(dz)) * np.max(np.abs(weights)),
             "dL/dW": dz.size / out_channels * np.max(np.abs(dz)) * np.max(np.abs(x)),
             "dL/db": dz.size / out_channels * np.max(np.abs(dz))}
    eps = np.finfo(x.dtype).eps
    for (name, size), ours, theirs in zip(sizes.items(), mine, plain):
        assert ours.dtype == x.dtype and ours.shape == theirs.shape, f"{name}: {ours.dtype} {ours.shape}"
        difference = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        assert difference <= 4 * eps * factor * float(size), (
            f"{name}: {form} (mine) and plain kernel differ by {difference:.2g}, more than rounding")


@given(dtype=dtypes, batch=st.integers(1, 3), in_channels=st.integers(1, 4), out_channels=st.integers(1, 4),
       height=st.integers(1, 9), width=st.integers(1, 14), kernel_height=st.integers(1, 4),
       kernel_width=st.integers(2, 4), padding=st.integers(0, 2), channels_last=st.booleans(),
       strip_columns=st.sampled_from([1, 2, 3, 6, 8, fast_rows.STRIP_COLUMNS]), seed=seeds)
def test_conv2d_row_by_row_in_strips_is_the_plain_kernels(dtype, batch, in_channels, out_channels, height, width,
                                                          kernel_height, kernel_width, padding, channels_last,
                                                          strip_columns, seed):
    """The banded form (sgrad.nn.fast_rows) at stride 1, as the two convolutions of the peer's MNIST CNN (1 to 10
    channels on 28 x 28 maps, 10 to 20 on 12 x 12, 5 x 5): each output row in strips of s pixels, the smallest
    divisor of W_out with s out_channels at least ``strip_columns`` (the whole row when none is), while a strip reads
    at most three kernel widths.  z, dL/dx, dL/dW and dL/db, with and without the input delta."""
    assume(kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    assume(height * width > kernel_height * kernel_width)  # else the dense form takes it
    assume(not fast_dft.pays(in_channels, out_channels, (kernel_height, kernel_width), 1, (height, width), padding))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, height, width, in_channels) if channels_last else
                            (batch, in_channels, height, width)).astype(dtype)
    x = x.transpose(0, 3, 1, 2) if channels_last else x  # channels-last in memory, as a convolution's output
    weights = rng.standard_normal((out_channels, in_channels, kernel_height, kernel_width)).astype(dtype)
    b = rng.standard_normal(out_channels).astype(dtype)

    z_plain, columns_plain = kernels.conv2d_forward(x, weights, b, 1, padding)
    out_width = z_plain.shape[3]
    strip = fast_rows.strip_width(in_channels, out_channels, (kernel_height, kernel_width), 1, out_width,
                                  np.dtype(dtype).itemsize, strip_columns=strip_columns)
    divisors = [s for s in range(1, out_width + 1) if out_width % s == 0]
    expected = min([s for s in divisors if s * out_channels >= strip_columns], default=out_width)
    assert strip == (expected if expected + kernel_width - 1 <= 3 * kernel_width else 0)
    assume(strip)
    options = dict(strip_columns=strip_columns)
    z, columns = fast_kernels.conv2d_forward(x, weights, b, 1, padding, **options)
    assert columns is not None and columns.shape == (batch * z.shape[2] * out_width // strip,
                                                     kernel_height * (strip + kernel_width - 1) * in_channels)
    dz = rng.standard_normal(z_plain.shape).astype(dtype)
    plain = kernels.conv2d_backward(dz, columns_plain, x.shape, weights, 1, padding, True, True)
    mine = fast_kernels.conv2d_backward(dz, x, columns, weights, 1, padding, True, True, **options)
    without = fast_kernels.conv2d_backward(dz, x, columns, weights, 1, padding, True, False, **options)
    assert without[0] is None
    np.testing.assert_array_equal(without[1], mine[1], err_msg="dL/dW depends on whether dL/dx is asked for")
    rebuilt = fast_kernels.conv2d_backward(dz, x, None, weights, 1, padding, True, True, **options)  # S from x again
    for ours, again in zip(mine, rebuilt):
        np.testing.assert_array_equal(again, ours, err_msg="the rows built again give other gradients")

    assert_within_rounding("banded", x, weights, b, dz, (z, *mine), (z_plain, *plain))


@pytest.mark.parametrize(("out_channels", "width", "padding", "strip"), [
    (fast_rows.NARROW - 1, 8, 2, 4),  # strips: the smallest divisor s of W_out = 8 with 31 s >= 64
    (fast_rows.NARROW, 8, 2, 8),      # from NARROW on, whole rows while the padded width is at most 3 k_w
    (fast_rows.NARROW, 12, 2, 0),     # a padded width of 16: no rows
    (fast_rows.NARROW - 1, 27, 0, 0),  # W_out = 23, a prime: s = 23, whole rows that read more than 3 k_w
])
def test_conv2d_takes_strips_below_narrow_and_whole_rows_from_it_on(out_channels, width, padding, strip):
    rng = np.random.default_rng(out_channels + width)
    x = rng.standard_normal((2, 3, 6, width))
    weights = rng.standard_normal((out_channels, 3, 5, 5))
    b = rng.standard_normal(out_channels)
    z_plain, columns_plain = kernels.conv2d_forward(x, weights, b, 1, padding)
    assert fast_rows.strip_width(3, out_channels, (5, 5), 1, z_plain.shape[3], x.itemsize) == strip
    z, columns = fast_kernels.conv2d_forward(x, weights, b, 1, padding)
    if strip:
        assert columns.shape == (2 * z.shape[2] * z.shape[3] // strip, 5 * (strip + 4) * 3)
    dz = rng.standard_normal(z_plain.shape)
    plain = kernels.conv2d_backward(dz, columns_plain, x.shape, weights, 1, padding, True, True)
    mine = fast_kernels.conv2d_backward(dz, x, columns, weights, 1, padding, True, True)
    assert_within_rounding("banded" if strip else "im2col", x, weights, b, dz, (z, *mine), (z_plain, *plain))


@given(dtype=dtypes, batch=st.integers(1, 3), in_channels=st.integers(1, 4), out_channels=st.integers(1, 4),
       height=st.integers(1, 9), width=st.integers(1, 9), kernel_height=st.integers(1, 5),
       kernel_width=st.integers(1, 5), padding=st.integers(0, 4), channels_last=st.booleans(),
       input_delta=st.booleans(), seed=seeds)
def test_conv2d_in_the_frequency_domain_is_the_plain_kernels(dtype, batch, in_channels, out_channels, height, width,
                                                             kernel_height, kernel_width, padding, channels_last,
                                                             input_delta, seed):
    """sgrad.nn.fast_dft's z, dL/dx and dL/dW against the plain kernels, on frames of odd and even sizes, kernels as
    large as the padded maps, and paddings up to and past the kernel (outputs that read padding only)."""
    assume(kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, height, width, in_channels) if channels_last else
                            (batch, in_channels, height, width)).astype(dtype)
    x = x.transpose(0, 3, 1, 2) if channels_last else x
    weights = rng.standard_normal((out_channels, in_channels, kernel_height, kernel_width)).astype(dtype)
    before = x.copy()

    z_plain, columns_plain = kernels.conv2d_forward(x, weights, None, 1, padding)
    dz = rng.standard_normal(z_plain.shape).astype(dtype)
    dx_plain, dw_plain, _ = kernels.conv2d_backward(dz, columns_plain, x.shape, weights, 1, padding, False, input_delta)
    z, spectra = fast_dft.conv2d_forward(x, weights, padding)
    frame_height, frame_width = fast_dft.frame((height, width), (kernel_height, kernel_width), padding)
    assert spectra.shape == (frame_height * (frame_width // 2 + 1), batch, in_channels)
    dx, dw = fast_dft.conv2d_backward(dz, spectra, x.shape, weights, padding, input_delta)
    assert (dx is None) == (not input_delta)

    # Each result is a sum of products, here through transforms that add every pixel of the frame: rounding of the
    # size of the sum of the products' sizes, times the frame's pixels.
    eps, pixels = np.finfo(dtype).eps, frame_height * frame_width
    taps = kernel_height * kernel_width
    sizes = {"z": taps * in_channels * np.max(np.abs(x)) * np.max(np.abs(weights)),
             "dL/dx": taps * out_channels * np.max(np.abs(dz)) * np.max(np.abs(weights)),
             "dL/dW": dz.size / out_channels * np.max(np.abs(dz)) * np.max(np.abs(x))}
    for (name, size), ours, theirs in zip(sizes.items(), (z, dx, dw), (z_plain, dx_plain, dw_plain)):
        if theirs is None:
            continue
        assert ours.dtype == dtype and ours.shape == theirs.shape, f"{name}: {ours.dtype} {ours.shape}"
        difference = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
        assert difference <= 4 * eps * pixels * float(size), (
            f"{name}: frequency domain and plain kernel differ by {difference:.2g}, more than rounding")
    np.testing.assert_array_equal(x, before, err_msg="the convolution changed its input")


def test_conv2d_goes_through_the_frequency_domain_where_it_pays_and_keeps_the_spectra_for_backward():
    """fast_kernels on a convolution the rule sends to the frequency domain (16 to 32 channels, 5 x 5 on 8 x 8 maps
    padded by 2, as the MNIST CNN's second convolution but smaller): x's spectra kept in X_col's place, z
    channels-last in memory with its bias, every gradient within rounding of the plain kernels', the same with
    the spectra built again from x, and dL/dW the same without dL/dx."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    weights = rng.standard_normal((32, 16, 5, 5)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    assert fast_dft.pays(16, 32, (5, 5), 1, (8, 8), 2)
    z_plain, columns_plain = kernels.conv2d_forward(x, weights, b, 1, 2)
    z, spectra = fast_kernels.conv2d_forward(x, weights, b, 1, 2)
    assert np.iscomplexobj(spectra) and spectra.shape == (10 * 6, 2, 16)  # a 10 x 10 frame: max(8 + 2, 8, 5)
    assert z.transpose(0, 2, 3, 1).flags.c_contiguous
    dz = rng.standard_normal(z_plain.shape).astype(np.float32)
    plain = kernels.conv2d_backward(dz, columns_plain, x.shape, weights, 1, 2, True, True)
    mine = fast_kernels.conv2d_backward(dz, x, spectra, weights, 1, 2, True, True)
    assert_within_rounding("frequency-domain", x, weights, b, dz, (z, *mine), (z_plain, *plain), factor=10 * 10)
    rebuilt = fast_kernels.conv2d_backward(dz, x, None, weights, 1, 2, True, True)
    for ours, again in zip(mine, rebuilt):
        np.testing.assert_array_equal(again, ours, err_msg="the spectra built again give other gradients")
    without = fast_kernels.conv2d_backward(dz, x, spectra, weights, 1, 2, True, False)
    assert without[0] is None
    np.testing.assert_array_equal(without[1], mine[1], err_msg="dL/dW depends on whether dL/dx is asked for")


@pytest.mark.parametrize(("in_channels", "out_channels", "kernel", "stride", "side", "padding"), [
    (32, 64, 5, 1, 14, 2),  # the MNIST CNN's second convolution: a 16 x 16 frame, r = 196 * 25 / (4 * 16 * 9)
    (64, 64, 5, 1, 7, 2),   # the paper CNN's convolutions below the second pooling
    (16, 16, 3, 1, 28, 1),  # r = 784 * 9 / (4 * 29 * 15), times 16: just above BY_CHANNELS
    (16, 32, 3, 1, 14, 1),  # r = 196 * 9 / (4 * 15 * 8), times 16: just below it
    (10, 20, 5, 1, 12, 0),  # the peer CNN's second convolution: too few channels
    (1, 32, 5, 1, 28, 2),   # one input channel
    (64, 64, 3, 1, 4, 0),   # r below FEWER_AT_LEAST
    (512, 512, 1, 1, 7, 0),  # a 1 x 1 convolution: r < 1
    (32, 64, 5, 2, 14, 2),  # stride 2
])
def test_the_frequency_domain_rule(in_channels, out_channels, kernel, stride, side, padding):
    out = side + 2 * padding - kernel + 1
    frame = max(side + padding, out, kernel)
    assert fast_dft.frame((side, side), (kernel, kernel), padding) == (frame, frame)
    r = out * out * kernel * kernel / (4 * frame * (frame // 2 + 1))
    expected = (stride == 1 and r >= fast_dft.FEWER_AT_LEAST
                and r * min(in_channels, out_channels) >= fast_dft.BY_CHANNELS)
    assert fast_dft.pays(in_channels, out_channels, (kernel, kernel), stride, (side, side), padding) == expected
    taken = {(32, 64, 5, 1, 14), (64, 64, 5, 1, 7), (16, 16, 3, 1, 28)}  # the cases above the rule is meant to take
    assert expected == ((in_channels, out_channels, kernel, stride, side) in taken)


# --- argument_checks.all_finite: np.isfinite(array).all() through a dot product -------------------------------


@given(dtype=dtypes, size=st.sampled_from([1, 7, 4096, 5000]), layout=st.sampled_from(["rows", "maps", "slice"]),
       bad=st.sampled_from([None, np.nan, np.inf, -np.inf, "huge"]), seed=seeds)
def test_all_finite_is_isfinite_all(dtype, size, layout, bad, seed):
    """NaN, inf, -inf, or finite numbers whose squares overflow, anywhere, in rows, channels-last maps and a
    strided slice: the same answer as the plain test."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(size).astype(dtype)
    if bad is not None:
        x[rng.integers(size)] = np.finfo(dtype).max / 2 if bad == "huge" else bad
    if layout == "maps":
        x = np.repeat(x, 4).reshape(size, 2, 2, 1).transpose(0, 3, 1, 2)  # channels-last memory
    elif layout == "slice":
        x = np.repeat(x, 2)[::2]
    assert argument_checks.all_finite(x) == bool(np.isfinite(x).all())
