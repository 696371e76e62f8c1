"""Speed tricks, kept apart from the maths: each one computes what a plain formula says, faster.

Read :mod:`sgrad.nn.kernels` for the maths.  Every function here names the plain
formula it replaces, and ``tests/test_fast.py`` checks the two against each
other.  A trick stays here only while it pays in ``benchmarks/performance.py`` (the convolution's and the
pooling's: in ``benchmarks/cnn_step.py``).
"""

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


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
    out = np.maximum(views[0], views[1]) if len(views) > 1 else views[0].copy()
    for view in views[2:]:
        np.maximum(out, view, out=out)
    return out.transpose(0, 3, 1, 2)


def maxpool2d_backward(dout: np.ndarray, x: np.ndarray, out: np.ndarray, kernel: tuple[int, int], stride: int,
                       padding: int) -> np.ndarray:
    """:func:`sgrad.nn.kernels.maxpool2d_backward` from x and the pooled out, offset by offset.

    Each window's gradient goes to the first offset (in the order i, then j) whose value equals
    the window's maximum, as argmax chooses in the plain kernel: ties go to the same input.  Where windows
    do not overlap, each offset writes its pixels' gradients in place, ``dout * hit``, with no sum.
    """
    padded = _channels_last_padded(x, padding)
    # dout channels-last in memory (a copy only if it is not, as from Flatten), so that each offset reads runs of it
    out, dout = out.transpose(0, 2, 3, 1), np.ascontiguousarray(dout.transpose(0, 2, 3, 1))
    # Windows side by side that cover every pixel of the input: each pixel is written once, by one offset.
    tiled = (stride == kernel[0] == kernel[1] and padding == 0 and x.shape[2] == stride * out.shape[1]
             and x.shape[3] == stride * out.shape[2])
    overlap = stride < max(kernel)
    d_padded = np.empty(padded.shape, dtype=dout.dtype) if tiled else np.zeros(padded.shape, dtype=dout.dtype)
    unclaimed = np.ones(out.shape, dtype=bool)
    hit = np.empty(out.shape, dtype=bool)
    for _, index in _offsets(kernel, stride, out.shape[1], out.shape[2]):
        np.equal(padded[index], out, out=hit)
        hit &= unclaimed
        if overlap:
            d_padded[index] += dout * hit
        else:
            np.multiply(dout, hit, out=d_padded[index])
        unclaimed ^= hit  # hit lies within unclaimed: these windows are claimed now
    height, width = x.shape[2:]
    return d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2)


# The im2col matrix of a whole batch can be far larger than the cache (40 MB for the second convolution of the MNIST
# CNN in float32): written out once and read back by the matrix product, it costs about as much as the product.
# A piece of a few examples' windows that fits in the cache is written and read there instead.
CHUNK_BYTES = 1 << 20  # about the size of a core's L2 cache: the im2col piece of one chunk of examples
WHOLE_BYTES = 16 << 20  # an im2col matrix up to this size is built whole, and kept for the backward pass
# The input delta as a convolution with the flipped kernel (_input_delta) while its copies are at most this many
# times the plain way's additions: the MNIST CNN's second convolution (twice) gains by it, the peer CNN's (4.5 times)
# does not.
FLIPPED_AT_MOST = 3


def _chunks(batch: int, bytes_per_example: int, chunk_bytes: int) -> list[slice]:
    """The batch cut into runs of consecutive examples whose im2col rows take about ``chunk_bytes`` each."""
    per = max(1, chunk_bytes // max(1, bytes_per_example))
    return [slice(start, min(batch, start + per)) for start in range(0, batch, per)]


def _windows(padded: np.ndarray, kernel: tuple[int, int], stride: int) -> np.ndarray:
    """:func:`sgrad.nn.kernels.sliding_windows` of an already padded channels-last array (batch, H', W', channels)."""
    windows = sliding_window_view(padded, kernel, axis=(1, 2))  # (batch, H' - k_h + 1, W' - k_w + 1, channels, k_h, k_w)
    return windows[:, ::stride, ::stride].transpose(0, 1, 2, 4, 5, 3)


def _padded(x: np.ndarray, padding: int) -> np.ndarray:
    """x (batch, channels, height, width) as (batch, height, width, channels), padded with zeros."""
    channels_last = x.transpose(0, 2, 3, 1)
    if padding:
        return np.pad(channels_last, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    return channels_last


def _correlate_in_chunks(padded: np.ndarray, w_col_t: np.ndarray, kernel: tuple[int, int], stride: int,
                         chunk_bytes: int) -> np.ndarray:
    """``X_col W_colᵀ`` for the windows of ``padded`` (batch, H', W', channels), X_col built a few examples at a time
    into one reused piece of memory and multiplied while it is in the cache.  Returns (batch, H_out, W_out, outputs)."""
    windows = _windows(padded, kernel, stride)  # (batch, H_out, W_out, k_h, k_w, channels)
    batch, out_height, out_width = windows.shape[:3]
    width, outputs = w_col_t.shape
    out = np.empty((batch, out_height, out_width, outputs), dtype=padded.dtype)
    chunks = _chunks(batch, out_height * out_width * width * padded.dtype.itemsize, chunk_bytes)
    piece = np.empty((chunks[0].stop, *windows.shape[1:]), dtype=padded.dtype)
    for chunk in chunks:
        rows = piece[:chunk.stop - chunk.start]
        np.copyto(rows, windows[chunk])
        np.matmul(rows.reshape(-1, width), w_col_t, out=out[chunk].reshape(-1, outputs))
    return out


def conv2d_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, stride: int, padding: int, *,
                   whole_bytes: int = WHOLE_BYTES, chunk_bytes: int = CHUNK_BYTES
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`sgrad.nn.kernels.conv2d_forward`, ``Z = X_col W_colᵀ + b``, a few examples at a time: ``(z, X_col or None)``.

    When the im2col matrix X_col is at most ``whole_bytes``, it is built whole, as the plain kernel does, and
    returned for the backward pass.  Larger, it is built ``chunk_bytes`` at a time into one reused piece of
    memory, each piece multiplied while it is still in the cache, and None is returned:
    :func:`conv2d_backward` builds the pieces again (twice the copying, but in the cache, and cheaper than one
    pass through main memory).  z is (batch, out_channels, H_out, W_out), channels-last in memory.
    """
    kernel = weights.shape[2:]
    padded = _padded(x, padding)
    w_col_t = weights.transpose(2, 3, 1, 0).reshape(-1, weights.shape[0])  # W_colᵀ: (k_h k_w in_channels, out_channels)
    windows = _windows(padded, kernel, stride)
    columns = None
    if windows.size * x.dtype.itemsize <= whole_bytes:
        columns = windows.reshape(-1, w_col_t.shape[0])  # the im2col copy
        z = (columns @ w_col_t).reshape(*windows.shape[:3], -1)
    else:
        z = _correlate_in_chunks(padded, w_col_t, kernel, stride, chunk_bytes)
    if bias is not None:
        z += bias
    return z.transpose(0, 3, 1, 2), columns


def conv2d_backward(dz: np.ndarray, x: np.ndarray, columns: np.ndarray | None, weights: np.ndarray, stride: int,
                    padding: int, with_bias: bool, input_delta: bool = True, *, chunk_bytes: int = CHUNK_BYTES
                    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """:func:`sgrad.nn.kernels.conv2d_backward`, ``(dL/dx, dL/dW, dL/db)``, a few examples at a time.

    ``dL/dW_col = dZᵀ X_col`` and ``dL/db`` the sum of dZ's rows, as in the plain kernel; X_col is ``columns``
    from :func:`conv2d_forward`, or, when that is None, built again ``chunk_bytes`` at a time from x, dL/dW
    then the sum of the pieces' products (the same sum in another order).  dL/dx: see :func:`_input_delta`.
    """
    out_channels, _, kernel_height, kernel_width = weights.shape
    rows = np.ascontiguousarray(dz.transpose(0, 2, 3, 1))  # dZ, (batch, H_out, W_out, out_channels): no copy if
    flat_rows = rows.reshape(-1, out_channels)             # dz came channels-last, as this module's outputs do
    d_bias = flat_rows.sum(axis=0) if with_bias else None
    # dL/dW_colᵀ = X_colᵀ dZ, (k_h k_w in_channels, out_channels): the same products as dZᵀ X_col, which the BLAS
    # runs faster this way round
    if columns is not None:
        d_w_col_t = columns.T @ flat_rows
    else:
        windows = _windows(_padded(x, padding), (kernel_height, kernel_width), stride)
        width = kernel_height * kernel_width * x.shape[1]
        d_w_col_t = np.zeros((width, out_channels), dtype=x.dtype)
        chunks = _chunks(x.shape[0], windows[:1].size * x.dtype.itemsize, chunk_bytes)
        piece = np.empty((chunks[0].stop, *windows.shape[1:]), dtype=x.dtype)
        for chunk in chunks:
            chunk_columns = piece[:chunk.stop - chunk.start]
            np.copyto(chunk_columns, windows[chunk])
            d_w_col_t += chunk_columns.reshape(-1, width).T @ rows[chunk].reshape(-1, out_channels)
    d_weights = np.ascontiguousarray(
        d_w_col_t.reshape(kernel_height, kernel_width, -1, out_channels).transpose(3, 2, 0, 1))
    dx = _input_delta(rows, x.shape, weights, stride, padding, chunk_bytes) if input_delta else None
    return dx, d_weights, d_bias


def _input_delta(rows: np.ndarray, input_shape: tuple[int, ...], weights: np.ndarray, stride: int, padding: int,
                 chunk_bytes: int) -> np.ndarray:
    """dL/dx of :func:`sgrad.nn.kernels.conv2d_backward` from dZ (batch, H_out, W_out, out_channels), channels-last.

    The plain kernel makes dL/dX_col = dZ W_col, (batch H_out W_out, k_h k_w in_channels), then adds each window
    back where it was read (:func:`~sgrad.nn.kernels.sum_windows`): k_h k_w additions of runs of in_channels
    numbers.  At stride 1, with a padding p below the kernel's size k, the same sums read the other way round
    are a convolution: ``dx[n, c, y, x] = sum over o, i, j of dz_pad[n, o, y + i, x + j] W[o, c, k_h-1-i, k_w-1-j]``,
    with dz padded by k - 1 - p, run as the forward pass runs, a few examples at a time.  That copies
    H W out_channels numbers per kernel offset where the plain way adds H_out W_out in_channels, so it pays only
    while the first is at most ``FLIPPED_AT_MOST`` times the second.  Otherwise (a larger stride or padding, or
    fewer input channels than that) the plain kernel's way, a few examples at a time.
    """
    batch, in_channels, height, width = input_shape
    out_channels, _, kernel_height, kernel_width = weights.shape
    _, out_height, out_width, _ = rows.shape
    flipped_pays = height * width * out_channels <= FLIPPED_AT_MOST * out_height * out_width * in_channels
    if stride == 1 and padding < min(kernel_height, kernel_width) and flipped_pays:
        pad_height, pad_width = kernel_height - 1 - padding, kernel_width - 1 - padding
        padded = np.pad(rows, ((0, 0), (pad_height, pad_height), (pad_width, pad_width), (0, 0)))
        flipped_t = weights[:, :, ::-1, ::-1].transpose(2, 3, 0, 1).reshape(-1, in_channels)  # (k_h k_w out, in)
        dx = _correlate_in_chunks(padded, flipped_t, (kernel_height, kernel_width), 1, chunk_bytes)
        return dx.transpose(0, 3, 1, 2)
    w_col = weights.transpose(0, 2, 3, 1).reshape(out_channels, -1)
    d_padded = np.zeros((batch, height + 2 * padding, width + 2 * padding, in_channels), dtype=rows.dtype)
    chunks = _chunks(batch, out_height * out_width * w_col.shape[1] * rows.dtype.itemsize, chunk_bytes)
    piece = np.empty((chunks[0].stop * out_height * out_width, w_col.shape[1]), dtype=rows.dtype)
    for chunk in chunks:
        chunk_rows = rows[chunk].reshape(-1, out_channels)
        d_windows = np.matmul(chunk_rows, w_col, out=piece[:len(chunk_rows)]).reshape(
            -1, out_height, out_width, kernel_height, kernel_width, in_channels)
        d_chunk = d_padded[chunk]
        for (i, j), index in _offsets((kernel_height, kernel_width), stride, out_height, out_width):
            d_chunk[index] += d_windows[:, :, :, i, j]
    return d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2)
