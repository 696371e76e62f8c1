"""Speed tricks, kept apart from the maths: each one computes what a plain formula says, faster.

Read :mod:`sgrad.nn.kernels` for the maths.  Every function here names the plain
formula it replaces, and ``tests/test_fast.py`` checks the two against each
other.  A trick stays here only while it pays in ``benchmarks/performance.py`` (the convolution's and the
pooling's: in ``benchmarks/cnn_step.py``; those for few channels and small maps, in the MNIST CNN of
koz4k/dni-pytorch that ``benchmarks/dni_pytorch_peer.py time --example cnn`` times, with
:mod:`sgrad.nn.fast_small_maps` and :mod:`sgrad.nn.fast_rows`; those with many channels and a large kernel in
the frequency domain, :mod:`sgrad.nn.fast_dft`, also in ``benchmarks/cnn_step.py``).
"""

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import fast_dft, fast_rows, fast_small_maps


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(length, dtype=dtype)
    ones.flags.writeable = False  # shared by every caller: nobody may change it
    return ones


# Batch norm's statistics are sums down the columns of (batch, features).  With few features, as a conv layer's
# channels (batch norm over maps runs on one row per pixel), NumPy's loops run along rows of a handful of numbers,
# and most of their time goes to starting over.  r consecutive rows read as one row of r * features numbers (a
# reshape, no copy) give loops at least WIDE_ROW long; the r partial sums of each feature are added at the end.
# Only for arrays of at least WIDE_FROM numbers: below that the loops cost little, and the sums keep the plain
# order, so that a dense net's numbers (a few thousand per batch norm) stay what they were.
WIDE_ROW = 256
WIDE_FROM = 1 << 15


@functools.lru_cache(maxsize=256)
def _rows_per_wide_row(batch: int, features: int) -> int:
    """r: the largest divisor of ``batch`` with r * features at most about ``WIDE_ROW`` (1 for wide rows already, or
    fewer than ``WIDE_FROM`` numbers)."""
    if batch * features < WIDE_FROM:
        return 1
    longest = max(1, -(-WIDE_ROW // features))
    return max(r for r in range(1, min(batch, longest) + 1) if batch % r == 0)


def _wide(x: np.ndarray, r: int) -> np.ndarray:
    """(batch, features) read as (batch / r, r features): r consecutive rows as one."""
    return x.reshape(x.shape[0] // r, r * x.shape[1])


def _per_feature(sums: np.ndarray, r: int) -> np.ndarray:
    """The column sums of a wide array (r features,) added up per feature: (features,)."""
    return sums if r == 1 else sums.reshape(r, -1).sum(axis=0)


def _spread(v: np.ndarray, r: int) -> np.ndarray:
    """(features,) v as a wide row: r copies of it end to end (v itself when r is 1)."""
    if r == 1:
        return v
    row = np.empty((r, v.shape[0]), dtype=v.dtype)
    row[...] = v
    return row.reshape(-1)


def _column_sums(x: np.ndarray) -> np.ndarray:
    """The sums down the columns of a contiguous (batch, features), over rows r times as wide."""
    r = _rows_per_wide_row(*x.shape)
    wide = _wide(x, r)
    return _per_feature(_ones(wide.shape[0], x.dtype) @ wide, r)


def _add_to_every_row(x: np.ndarray, v: np.ndarray) -> None:
    """``x += v`` for (batch, features) x, v (features,); over rows r times as wide when x is contiguous."""
    if not x.flags.c_contiguous:
        x += v
        return
    r = _rows_per_wide_row(*x.shape)
    wide = _wide(x, r)  # a view of x
    wide += _spread(v, r)


def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sgrad.nn.kernels.batchnorm_forward` in three passes over the batch instead of seven.

    The column sums run in the BLAS, the variance is a sum of products with no
    squared copy, and x_hat and the output are each built in one fresh array; with few
    features, over rows r times as wide (``WIDE_ROW``).
    """
    batch, features = x.shape
    r = _rows_per_wide_row(batch, features)
    wide = _wide(x, r)
    mean = _per_feature(_ones(wide.shape[0], x.dtype) @ wide, r) / batch
    x_hat = wide - _spread(mean, r)
    var = _per_feature(np.einsum("ij,ij->j", x_hat, x_hat), r) / batch
    inv_std = 1.0 / np.sqrt(var + eps)
    x_hat *= _spread(inv_std, r)
    out = x_hat * _spread(gamma, r)
    out += _spread(beta, r)
    return out.reshape(batch, features), x_hat.reshape(batch, features), inv_std, mean, var


def batchnorm_backward(dout: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sgrad.nn.kernels.batchnorm_backward` in one (batch, features) array instead of five.

    Since ``mean(dx_hat) = gamma * dbeta / batch`` and ``mean(dx_hat * x_hat) = gamma * dgamma / batch``,
    ``dx = gamma * inv_std * (dout - dbeta / batch - x_hat * dgamma / batch)``, built in place; with few
    features, over rows r times as wide, as in :func:`batchnorm_forward`.
    """
    batch, features = dout.shape
    r = _rows_per_wide_row(batch, features)
    wide_dout, wide_x_hat = _wide(dout, r), _wide(x_hat, r)
    dbeta = _per_feature(_ones(wide_dout.shape[0], dout.dtype) @ wide_dout, r)
    dgamma = _per_feature(np.einsum("ij,ij->j", wide_dout, wide_x_hat), r)  # sum(dout * x_hat), no product array
    dx = wide_x_hat * _spread(dgamma / batch, r)
    np.subtract(wide_dout, dx, out=dx)
    dx -= _spread(dbeta / batch, r)
    dx *= _spread(gamma * inv_std, r)
    return dx.reshape(batch, features), dgamma, dbeta


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
TAPS_PIECES = 4  # the plain way's pieces of dL/dX_col, in chunks of CHUNK_BYTES (see _input_delta)


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


def _dense_pays(input_shape: tuple[int, ...], weights_shape: tuple[int, ...], out_shape: tuple[int, int],
                dtype: np.dtype) -> bool:
    """:func:`sgrad.nn.fast_small_maps.dense_pays` for x of ``input_shape`` and weights of ``weights_shape``."""
    out_channels, in_channels, kernel_height, kernel_width = weights_shape
    return fast_small_maps.dense_pays(input_shape[2], input_shape[3], in_channels, out_channels,
                                      (kernel_height, kernel_width), out_shape, dtype.itemsize)


def _strip_width(weights_shape: tuple[int, ...], stride: int, out_shape: tuple[int, int], dtype: np.dtype,
                 strip_columns: int) -> int:
    """:func:`sgrad.nn.fast_rows.strip_width` for weights of ``weights_shape``: 0 where the rows do not pay."""
    out_channels, in_channels, kernel_height, kernel_width = weights_shape
    return fast_rows.strip_width(in_channels, out_channels, (kernel_height, kernel_width), stride, out_shape[1],
                                 dtype.itemsize, strip_columns=strip_columns)


def _dft_pays(input_shape: tuple[int, ...], weights_shape: tuple[int, ...], stride: int, padding: int) -> bool:
    """:func:`sgrad.nn.fast_dft.pays` for x of ``input_shape`` and weights of ``weights_shape``."""
    out_channels, in_channels, kernel_height, kernel_width = weights_shape
    return fast_dft.pays(in_channels, out_channels, (kernel_height, kernel_width), stride,
                         (input_shape[2], input_shape[3]), padding)


def _in_frequency_domain(choice: bool | None, input_shape: tuple[int, ...], weights_shape: tuple[int, ...],
                         stride: int, padding: int) -> bool:
    """Whether the convolution goes through :mod:`sgrad.nn.fast_dft`: where it pays (``choice`` None), or at
    stride 1 (True), or not (False)."""
    if choice is None:
        return _dft_pays(input_shape, weights_shape, stride, padding)
    return choice and stride == 1


def _columns_of_channels_first(x: np.ndarray, kernel: tuple[int, int], stride: int, padding: int,
                               out_shape: tuple[int, int]) -> np.ndarray:
    """X_col (batch H_out W_out, k_h k_w in_channels) of x whose memory is channels-first, built transposed.

    The windows of a channels-first array are copied number by number; read offset by offset instead, the pixels
    at offset (i, j) of every channel and example are one block of runs of W_out numbers, the row (i, j, c) of
    X_colᵀ.  Returns the transpose of that (k_h k_w in_channels, batch H_out W_out) array, a view.
    """
    out_height, out_width = out_shape
    if padding:
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    by_channel = x.transpose(1, 0, 2, 3)  # (in_channels, batch, H', W')
    columns_t = np.empty((*kernel, *by_channel.shape[:2], out_height, out_width), dtype=x.dtype)
    for (i, j), _ in _offsets(kernel, stride, out_height, out_width):
        columns_t[i, j] = by_channel[:, :, i:i + stride * out_height:stride, j:j + stride * out_width:stride]
    return columns_t.reshape(-1, x.shape[0] * out_height * out_width).T


def conv2d_forward(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None, stride: int, padding: int, *,
                   whole_bytes: int = WHOLE_BYTES, chunk_bytes: int = CHUNK_BYTES,
                   strip_columns: int = fast_rows.STRIP_COLUMNS, frequency_domain: bool | None = None
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`sgrad.nn.kernels.conv2d_forward`, ``Z = X_col W_colᵀ + b``, a few examples at a time: ``(z, X_col or None)``.

    When the im2col matrix X_col is at most ``whole_bytes``, it is built whole, as the plain kernel does, and
    returned for the backward pass.  Larger, it is built ``chunk_bytes`` at a time into one reused piece of
    memory, each piece multiplied while it is still in the cache, and None is returned:
    :func:`conv2d_backward` builds the pieces again (twice the copying, but in the cache, and cheaper than one
    pass through main memory).  On maps not much larger than the kernel, no X_col at all: see
    :mod:`sgrad.nn.fast_small_maps`; at stride 1 with few output channels or on narrow maps, the rows S of
    :mod:`sgrad.nn.fast_rows` (in strips of s output pixels, ``strip_columns`` wide), returned in X_col's place;
    at stride 1 with many channels and a large kernel, the frequency domain of :mod:`sgrad.nn.fast_dft`, x's
    spectra returned in X_col's place.  ``frequency_domain``: None, where :func:`sgrad.nn.fast_dft.pays`; True,
    at every stride-1 convolution that the dense form does not take; False, never (the two sides of
    ``benchmarks/conv_paths.py``).  z is (batch, out_channels, H_out, W_out), channels-last in memory.
    """
    kernel = weights.shape[2:]
    out_shape = ((x.shape[2] + 2 * padding - kernel[0]) // stride + 1, (x.shape[3] + 2 * padding - kernel[1]) // stride + 1)
    w_col_t = weights.transpose(2, 3, 1, 0).reshape(-1, weights.shape[0])  # W_colᵀ: (k_h k_w in_channels, out_channels)
    columns = None
    if _dense_pays(x.shape, weights.shape, out_shape, x.dtype):
        z = fast_small_maps.conv2d_forward(x, weights, stride, padding, out_shape)
    elif _in_frequency_domain(frequency_domain, x.shape, weights.shape, stride, padding):
        z_first, columns = fast_dft.conv2d_forward(x, weights, padding)  # columns: x's spectra
        z = np.empty((x.shape[0], *out_shape, weights.shape[0]), dtype=x.dtype)
        np.copyto(z, z_first.transpose(0, 2, 3, 1))
    elif strip := _strip_width(weights.shape, stride, out_shape, x.dtype, strip_columns):
        z, columns = fast_rows.conv2d_forward(_padded(x, padding), weights, out_shape, strip)  # columns: S
    elif x.shape[0] * out_shape[0] * out_shape[1] * w_col_t.shape[0] * x.dtype.itemsize <= whole_bytes:  # X_col's bytes
        if x.flags.c_contiguous:  # channels-first in memory, as images come from the data (one channel: either way)
            columns = _columns_of_channels_first(x, kernel, stride, padding, out_shape)
        else:
            columns = _windows(_padded(x, padding), kernel, stride).reshape(-1, w_col_t.shape[0])  # the im2col copy
        z = (columns @ w_col_t).reshape(x.shape[0], *out_shape, -1)
    else:
        z = _correlate_in_chunks(_padded(x, padding), w_col_t, kernel, stride, chunk_bytes)
    if bias is not None:
        _add_to_every_row(z.reshape(-1, z.shape[-1]), bias)
    return z.transpose(0, 3, 1, 2), columns


def conv2d_backward(dz: np.ndarray, x: np.ndarray, columns: np.ndarray | None, weights: np.ndarray, stride: int,
                    padding: int, with_bias: bool, input_delta: bool = True, *, chunk_bytes: int = CHUNK_BYTES,
                    strip_columns: int = fast_rows.STRIP_COLUMNS, frequency_domain: bool | None = None
                    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """:func:`sgrad.nn.kernels.conv2d_backward`, ``(dL/dx, dL/dW, dL/db)``, a few examples at a time.

    ``dL/dW_col = dZᵀ X_col`` and ``dL/db`` the sum of dZ's rows, as in the plain kernel; X_col is ``columns``
    from :func:`conv2d_forward`, or, when that is None, built again ``chunk_bytes`` at a time from x, dL/dW
    then the sum of the pieces' products (the same sum in another order).  dL/dx: see :func:`_input_delta`.
    Where the forward pass went row by row (:mod:`sgrad.nn.fast_rows`, with the same ``strip_columns``), ``columns``
    is its S, and so does this; where it went through the frequency domain (:mod:`sgrad.nn.fast_dft`, with the same
    ``frequency_domain``), x's spectra.
    """
    out_channels, _, kernel_height, kernel_width = weights.shape
    rows = np.ascontiguousarray(dz.transpose(0, 2, 3, 1))  # dZ, (batch, H_out, W_out, out_channels): no copy if
    flat_rows = rows.reshape(-1, out_channels)             # dz came channels-last, as this module's outputs do
    d_bias = _column_sums(flat_rows) if with_bias else None
    if _dense_pays(x.shape, weights.shape, rows.shape[1:3], x.dtype):
        dx, d_weights = fast_small_maps.conv2d_backward(rows, x, weights, stride, padding, input_delta)
        return dx, d_weights, d_bias
    if _in_frequency_domain(frequency_domain, x.shape, weights.shape, stride, padding):
        spectra = columns if columns is not None else fast_dft.conv2d_forward(x, weights, padding)[1]
        dx, d_weights = fast_dft.conv2d_backward(dz, spectra, x.shape, weights, padding, input_delta)
        return dx, d_weights, d_bias
    if strip := _strip_width(weights.shape, stride, rows.shape[1:3], x.dtype, strip_columns):
        batch, in_channels, height, width = x.shape
        stacked = columns if columns is not None else fast_rows.stacked_rows(
            _padded(x, padding), (kernel_height, kernel_width), rows.shape[1:3], strip)
        padded_shape = (batch, height + 2 * padding, width + 2 * padding, in_channels)
        d_padded, d_weights = fast_rows.conv2d_backward(rows, stacked, weights, padded_shape, strip, input_delta)
        dx = None if d_padded is None else (
            d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2))
        return dx, d_weights, d_bias
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
    fewer input channels than that) the plain kernel's sums, a few examples at a time, with dL/dX_col's columns
    taken offset by offset: dZ W[:, :, i, j] for every (i, j) in one stacked product, each added where its
    windows read.
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
    # dL/dX_col offset by offset: for each (i, j), dZ W[:, :, i, j] (rows, in_channels), all in one stacked product,
    # so that each addition reads a contiguous block and writes runs of W_out in_channels numbers
    w_taps = weights.transpose(2, 3, 0, 1).reshape(kernel_height * kernel_width, out_channels, in_channels)
    d_padded = np.zeros((batch, height + 2 * padding, width + 2 * padding, in_channels), dtype=rows.dtype)
    # Each piece is added out right after its product, once: pieces of TAPS_PIECES chunks (in the last-level cache)
    # take a quarter of the calls of pieces that fit in L2
    chunks = _chunks(batch, out_height * out_width * w_taps.shape[0] * in_channels * rows.dtype.itemsize,
                     TAPS_PIECES * chunk_bytes)
    for chunk in chunks:
        chunk_rows = rows[chunk]
        d_taps = np.matmul(chunk_rows.reshape(-1, out_channels), w_taps)  # (k_h k_w, rows, in_channels)
        d_chunk = d_padded[chunk]
        for (i, j), index in _offsets((kernel_height, kernel_width), stride, out_height, out_width):
            d_chunk[index] += d_taps[i * kernel_width + j].reshape(chunk_rows.shape[:3] + (in_channels,))
    return d_padded[:, padding:padding + height, padding:padding + width].transpose(0, 3, 1, 2)
