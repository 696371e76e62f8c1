"""A speed trick for stride-1 convolutions on narrow maps: the convolution row by row, as one product with a matrix
banded along the width.

Output row y reads input rows y + i, i = 0 … k_h - 1, of the padded input x_p (width W_p = W + 2 padding).  With
the k_h rows it reads laid side by side, S[(n, y), (i, x', c)] = x_p[n, y + i, x', c], the output row is one
product with a matrix N that holds the weights along a band::

    N[(i, x', c), (x, o)] = W[o, c, i, x' - x]   for 0 <= x' - x < k_w,  else 0
    Z = S N,  Z[(n, y), (x, o)] = z[n, o, y, x]

N has W_p / k_w times the numbers of the im2col weights W_col per output pixel, but the product's second
dimension is W_out out_channels instead of out_channels: where out_channels is a few tens, as in the MNIST CNN of
koz4k/dni-pytorch (20 channels on maps of 8 × 8 pixels), the BLAS runs the larger product faster than im2col's,
and S (k_h rows copied, each a run of W_p in_channels numbers) is cheaper to build than X_col (k_h k_w runs of
in_channels numbers per pixel).  The gradients are those of a dense layer: dL/dS = dZ Nᵀ, whose block i is added
back to the input rows y + i, and dL/dN = Sᵀ dZ, whose band gives dL/dW[o, c, i, j], the sum over x of
dL/dN[(i, x + j, c), (x, o)].  :mod:`sgrad.nn.fast_kernels` calls this when :func:`rows_pay`;
``tests/test_fast.py`` checks it against the plain kernels of :mod:`sgrad.nn.kernels`.
"""

import numpy as np

WIDER_AT_MOST = 3  # N's numbers per output pixel over W_col's (W_p / k_w) at which the rows still pay
BAND_BYTES = 4 << 20  # the largest N built


def rows_pay(width: int, in_channels: int, out_channels: int, kernel: tuple[int, int], stride: int, padding: int,
             out_width: int, itemsize: int) -> bool:
    """Whether the convolution has stride 1, N multiplies at most ``WIDER_AT_MOST`` times W_col's numbers per output
    pixel (W_p <= WIDER_AT_MOST k_w), and N is at most ``BAND_BYTES``."""
    padded_width = width + 2 * padding
    size = kernel[0] * padded_width * in_channels * out_width * out_channels * itemsize
    return stride == 1 and padded_width <= WIDER_AT_MOST * kernel[1] and size <= BAND_BYTES


def _band(weights: np.ndarray, padded_width: int, out_width: int) -> np.ndarray:
    """N (k_h W_p in_channels, W_out out_channels) of ``weights`` (out_channels, in_channels, k_h, k_w)."""
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    by_tap = weights.transpose(2, 3, 1, 0)  # (k_h, k_w, in_channels, out_channels)
    band = np.zeros((kernel_height, padded_width, in_channels, out_width, out_channels), dtype=weights.dtype)
    for x in range(out_width):
        band[:, x:x + kernel_width, :, x, :] = by_tap
    return band.reshape(kernel_height * padded_width * in_channels, out_width * out_channels)


def stacked_rows(padded: np.ndarray, kernel_height: int, out_height: int) -> np.ndarray:
    """S (batch H_out, k_h W_p in_channels) of ``padded`` (batch, H_p, W_p, in_channels), channels-last."""
    batch, _, padded_width, in_channels = padded.shape
    rows = np.empty((batch, out_height, kernel_height, padded_width * in_channels), dtype=padded.dtype)
    flat = padded.reshape(batch, padded.shape[1], padded_width * in_channels)
    for i in range(kernel_height):
        rows[:, :, i] = flat[:, i:i + out_height]
    return rows.reshape(batch * out_height, -1)


def conv2d_forward(padded: np.ndarray, weights: np.ndarray, out_shape: tuple[int, int]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(z, S)``: z (batch, H_out, W_out, out_channels) of ``padded`` (batch, H_p, W_p, in_channels) at stride 1,
    no bias; S, the stacked rows, for :func:`conv2d_backward`."""
    out_height, out_width = out_shape
    stacked = stacked_rows(padded, weights.shape[2], out_height)
    z = stacked @ _band(weights, padded.shape[2], out_width)
    return z.reshape(padded.shape[0], out_height, out_width, weights.shape[0]), stacked


def conv2d_backward(rows: np.ndarray, stacked: np.ndarray, weights: np.ndarray, padded_shape: tuple[int, ...],
                    input_delta: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """``(dL/dx_p or None, dL/dW)`` from dZ ``rows`` (batch, H_out, W_out, out_channels) and S of the forward pass.

    dL/dx_p is (batch, H_p, W_p, in_channels), padding included: the caller cuts it off.
    """
    batch, out_height, out_width, out_channels = rows.shape
    _, in_channels, kernel_height, kernel_width = weights.shape
    padded_width = padded_shape[2]
    d_z = rows.reshape(batch * out_height, out_width * out_channels)
    d_band = (stacked.T @ d_z).reshape(kernel_height, padded_width, in_channels, out_width, out_channels)
    d_by_tap = d_band[:, 0:kernel_width, :, 0, :].copy()  # dL/dW[o, c, i, j] = sum over x of dL/dN[i, x + j, c, x, o]
    for x in range(1, out_width):
        d_by_tap += d_band[:, x:x + kernel_width, :, x, :]
    d_weights = np.ascontiguousarray(d_by_tap.transpose(3, 2, 0, 1))
    if not input_delta:
        return None, d_weights
    d_stacked = (d_z @ _band(weights, padded_width, out_width).T).reshape(
        batch, out_height, kernel_height, padded_width * in_channels)
    d_padded = np.zeros((batch, padded_shape[1], padded_width * in_channels), dtype=rows.dtype)
    for i in range(kernel_height):  # block i of dL/dS goes back to the input rows y + i
        d_padded[:, i:i + out_height] += d_stacked[:, :, i]
    return d_padded.reshape(padded_shape), d_weights
