"""A speed trick for convolutions on maps not much larger than the kernel: the convolution as one dense matrix.

On maps of H × W pixels, an output pixel reads k_h k_w input pixels (fewer at the borders); when H W is at most
k_h k_w, as for a 5×5 kernel on the 4×4 maps at the MNIST CNN's interface, every output pixel reads nearly every
input pixel, and most of the im2col matrix is padding.  The convolution is then a linear map of the whole
flattened maps, z_flat = x_flat T + b, with T (H W in_channels, H_out W_out out_channels) holding W[o, c, i, j]
where input pixel p and output pixel q are offset by (i, j), and zeros elsewhere::

    T[(p, c), (q, o)] = W[o, c, i, j]   for p = stride q + (i, j) - padding,  else 0

Its products multiply fewer numbers than im2col's (H W against k_h k_w per output and channel pair) and copy
nothing.  The gradients are those of a dense layer, dL/dT = x_flatᵀ dz_flat and dL/dx_flat = dz_flat Tᵀ, and
dL/dW[o, c, i, j] is the sum of dL/dT over the pixel pairs (p, q) offset by (i, j).  x and dz are read
channels-last: (batch, H, W, channels) flattened per example.  :mod:`sgrad.nn.fast_kernels` calls this when
:func:`dense_pays`; ``tests/test_fast.py`` checks it against the plain kernels of :mod:`sgrad.nn.kernels`.
"""

import functools

import numpy as np

DENSE_BYTES = 4 << 20  # the largest T built: a few times a core's L2 cache


def dense_pays(height: int, width: int, in_channels: int, out_channels: int, kernel: tuple[int, int],
               out_shape: tuple[int, int], itemsize: int) -> bool:
    """Whether T multiplies no more numbers than im2col (H W <= k_h k_w) and is at most ``DENSE_BYTES``."""
    size = height * width * in_channels * out_shape[0] * out_shape[1] * out_channels * itemsize
    return height * width <= kernel[0] * kernel[1] and size <= DENSE_BYTES


@functools.lru_cache(maxsize=64)
def _pairs(height: int, width: int, kernel: tuple[int, int], stride: int, padding: int,
           out_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p, q, tap)``: each input pixel p (flat index) read by output pixel q at kernel offset tap = i k_w + j."""
    out_height, out_width = out_shape
    i, j, y, x = np.meshgrid(np.arange(kernel[0]), np.arange(kernel[1]), np.arange(out_height), np.arange(out_width),
                             indexing="ij")
    row, column = stride * y + i - padding, stride * x + j - padding
    inside = (row >= 0) & (row < height) & (column >= 0) & (column < width)
    pairs = ((row * width + column)[inside], (y * out_width + x)[inside], (i * kernel[1] + j)[inside])
    for array in pairs:
        array.flags.writeable = False  # shared by every caller
    return pairs


@functools.lru_cache(maxsize=64)
def _entries(weights_shape: tuple[int, int, int, int], height: int, width: int, stride: int, padding: int,
             out_shape: tuple[int, int]) -> np.ndarray:
    """For each entry of T, the index of the weight it holds in ``weights.ravel()``, or ``weights.size`` for a zero."""
    out_channels, in_channels, kernel_height, kernel_width = weights_shape
    p, q, tap = _pairs(height, width, (kernel_height, kernel_width), stride, padding, out_shape)
    size = out_channels * in_channels * kernel_height * kernel_width
    entries = np.full((height * width, in_channels, out_shape[0] * out_shape[1], out_channels), size, dtype=np.intp)
    c, o = np.arange(in_channels)[:, None], np.arange(out_channels)
    entries[p, :, q, :] = (o * in_channels + c) * kernel_height * kernel_width + tap[:, None, None]
    flat = entries.reshape(height * width * in_channels, -1)
    flat.flags.writeable = False  # shared by every caller
    return flat


def _dense_matrix(weights: np.ndarray, height: int, width: int, stride: int, padding: int,
                  out_shape: tuple[int, int]) -> np.ndarray:
    """T, (H W in_channels, H_out W_out out_channels), for ``weights`` (out_channels, in_channels, k_h, k_w)."""
    weights_and_zero = np.zeros(weights.size + 1, dtype=weights.dtype)
    weights_and_zero[:-1] = weights.ravel()
    return weights_and_zero[_entries(weights.shape, height, width, stride, padding, out_shape)]


def _flat(maps: np.ndarray) -> np.ndarray:
    """(batch, channels, height, width) maps as rows (batch, height width channels), channels-last."""
    return maps.transpose(0, 2, 3, 1).reshape(maps.shape[0], -1)


def conv2d_forward(x: np.ndarray, weights: np.ndarray, stride: int, padding: int,
                   out_shape: tuple[int, int]) -> np.ndarray:
    """z (batch, H_out, W_out, out_channels), without the bias, as x_flat T."""
    matrix = _dense_matrix(weights, x.shape[2], x.shape[3], stride, padding, out_shape)
    return (_flat(x) @ matrix).reshape(x.shape[0], *out_shape, weights.shape[0])


def conv2d_backward(rows: np.ndarray, x: np.ndarray, weights: np.ndarray, stride: int, padding: int,
                    input_delta: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """``(dL/dx or None, dL/dW)`` from dZ ``rows`` (batch, H_out, W_out, out_channels)."""
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    batch, height, width = x.shape[0], x.shape[2], x.shape[3]
    out_shape = rows.shape[1:3]
    dz_flat = rows.reshape(batch, -1)
    # dL/dT, and each tap's sum over its pixel pairs: one product with the (taps, pairs) matrix of which tap each is
    d_matrix = (_flat(x).T @ dz_flat).reshape(height * width, in_channels, -1, out_channels)
    p, q, tap = _pairs(height, width, (kernel_height, kernel_width), stride, padding, out_shape)
    which = np.zeros((kernel_height * kernel_width, len(tap)), dtype=x.dtype)
    which[tap, np.arange(len(tap))] = 1
    d_taps = which @ d_matrix[p, :, q, :].reshape(len(tap), in_channels * out_channels)  # (k_h k_w, c o)
    d_weights = np.ascontiguousarray(
        d_taps.reshape(kernel_height, kernel_width, in_channels, out_channels).transpose(3, 2, 0, 1))
    if not input_delta:
        return None, d_weights
    matrix = _dense_matrix(weights, height, width, stride, padding, out_shape)
    dx = (dz_flat @ matrix.T).reshape(batch, height, width, in_channels)
    return dx.transpose(0, 3, 1, 2), d_weights
