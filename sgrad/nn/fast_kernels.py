"""Speed tricks, kept apart from the maths: each one computes what a plain formula says, faster.

Read :mod:`sgrad.nn.kernels` for the maths.  Every function here names the plain
formula it replaces, and ``tests/test_fast.py`` checks the two against each
other.  A trick stays here only while it pays in ``benchmarks/performance.py`` (the convolution's and the
pooling's: in ``benchmarks/cnn_step.py``).
"""

import functools

import numpy as np


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(length, dtype=dtype)
    ones.flags.writeable = False  # shared by every caller: nobody may change it
    return ones


def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sgrad.nn.kernels.batchnorm_forward` in three passes over the batch instead of seven.

    The column sums run in the BLAS, the variance is a sum of products with no
    squared copy, and x_hat and the output are each built in one fresh array.
    """
    batch = x.shape[0]
    mean = (_ones(batch, x.dtype) @ x) / batch
    x_hat = x - mean
    var = np.einsum("ij,ij->j", x_hat, x_hat) / batch
    inv_std = 1.0 / np.sqrt(var + eps)
    x_hat *= inv_std
    out = x_hat * gamma
    out += beta
    return out, x_hat, inv_std, mean, var


def batchnorm_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sgrad.nn.kernels.batchnorm_backward` in one (batch, features) array instead of five.

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


def _offsets(kernel: tuple[int, int], stride: int, out_height: int, out_width: int):
    """``((i, j), index)`` for each kernel offset: the index of what the windows read at (i, j) in a padded
    (batch, height, width, channels) array, one pixel per window, (batch, H_out, W_out, channels)."""
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            yield (i, j), (slice(None), slice(i, i + stride * out_height, stride), slice(j, j + stride * out_width, stride))


def _channels_last_padded(x: np.ndarray, padding: int) -> np.ndarray:
    """x (batch, channels, height, width) as (batch, height, width, channels), padded with -inf."""
    channels_last = x.transpose(0, 2, 3, 1)
    if padding:
        channels_last = np.pad(channels_last, ((0, 0), (padding, padding), (padding, padding), (0, 0)),
                               constant_values=-np.inf)
    return channels_last


def maxpool2d_forward(x: np.ndarray, kernel: tuple[int, int], stride: int, padding: int) -> np.ndarray:
    """The output of :func:`sgrad.nn.kernels.maxpool2d_forward` as an elementwise maximum over the kernel's offsets.

    ``out = max over (i, j) of x_pad[:, :, i::stride, j::stride]`` (cut to H_out × W_out): k_h k_w
    elementwise maxima over strided views, with no copy of the windows and no argmax along a
    middle axis (which NumPy runs slowly); 20 times faster for 2×2 pooling.  Returns out only:
    :func:`maxpool2d_backward` finds the maxima again from x and out.
    """
    padded = _channels_last_padded(x, padding)
    out_height = (padded.shape[1] - kernel[0]) // stride + 1
    out_width = (padded.shape[2] - kernel[1]) // stride + 1
    views = [padded[index] for _, index in _offsets(kernel, stride, out_height, out_width)]
    out = views[0].copy()
    for view in views[1:]:
        np.maximum(out, view, out=out)
    return out.transpose(0, 3, 1, 2)


def maxpool2d_backward(dout: np.ndarray, x: np.ndarray, out: np.ndarray, kernel: tuple[int, int], stride: int,
                       padding: int) -> np.ndarray:
    """:func:`sgrad.nn.kernels.maxpool2d_backward` from x and the pooled out, offset by offset.

    Each window's gradient goes to the first offset (in the order i, then j) whose value equals
    the window's maximum, as argmax chooses in the plain kernel: ties go to the same input.
    """
    padded = _channels_last_padded(x, padding)
    out, dout = out.transpose(0, 2, 3, 1), dout.transpose(0, 2, 3, 1)
    d_padded = np.zeros(padded.shape, dtype=dout.dtype)
    unclaimed = np.ones(out.shape, dtype=bool)
    hit = np.empty(out.shape, dtype=bool)
    for _, index in _offsets(kernel, stride, out.shape[1], out.shape[2]):
        np.equal(padded[index], out, out=hit)
        hit &= unclaimed
        d_padded[index] += dout * hit
        unclaimed &= ~hit
    height, width = x.shape[2:]
    return d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2)


def conv2d_input_delta(dz: np.ndarray, input_shape: tuple[int, ...], weights: np.ndarray, stride: int,
                       padding: int) -> np.ndarray:
    """dL/dx of :func:`sgrad.nn.kernels.conv2d_backward`, summed offset by offset rather than through one big dL/dX_col.

    dz: (batch, out_channels, H_out, W_out); returns dL/dx: ``input_shape``.  The plain kernel
    computes dL/dX_col = dZ W_col, (batch H_out W_out, k_h k_w in_channels): for a 5×5 kernel 25
    times the size of dL/dx, written out and read back by :func:`~sgrad.nn.kernels.sum_windows`.
    Here each kernel offset (i, j) adds its own product ``dZ W[:, :, i, j]``, (batch H_out W_out,
    in_channels), onto the pixels its windows read: the same sums, in pieces that stay in the cache.
    """
    batch, in_channels, height, width = input_shape
    out_height, out_width = dz.shape[2:]
    rows = dz.transpose(0, 2, 3, 1).reshape(-1, weights.shape[0])
    d_padded = np.zeros((batch, height + 2 * padding, width + 2 * padding, in_channels), dtype=rows.dtype)
    for (i, j), index in _offsets(weights.shape[2:], stride, out_height, out_width):
        d_padded[index] += (rows @ weights[:, :, i, j]).reshape(batch, out_height, out_width, in_channels)
    return d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2)
