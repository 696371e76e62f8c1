"""A speed trick for stride-1 convolutions with few output channels or on narrow maps: the convolution row by row,
each output row cut into strips of s pixels, as one product with a matrix banded along the strip.

Output pixel (y, x) reads input rows y + i, i = 0 … k_h - 1, of the padded input x_p, at columns x … x + k_w - 1.
A strip of s output pixels, x = t s … t s + s - 1, reads the s + k_w - 1 input columns from t s on.  With those
k_h pieces of rows laid side by side, S[(n, y, t), (i, x', c)] = x_p[n, y + i, t s + x', c], the strip's outputs are
one product with a matrix N that holds the weights along a band, the same for every strip::

    N[(i, x', c), (x, o)] = W[o, c, i, x' - x]   for 0 <= x' - x < k_w,  else 0     (x < s, x' < s + k_w - 1)
    Z = S N,  Z[(n, y, t), (x, o)] = z[n, o, y, t s + x]

Per output pixel, N multiplies (s + k_w - 1) / k_w times the numbers of the im2col weights W_col, but the product
is s out_channels wide instead of out_channels.  Where out_channels is a few tens or fewer, as in the MNIST CNN of
koz4k/dni-pytorch (10 and 20 channels), im2col's product is too narrow for the BLAS to run it fast, and s pixels
side by side make it wide enough; S (k_h runs of (s + k_w - 1) in_channels numbers per strip) is also cheaper to
build than X_col (k_h k_w runs of in_channels numbers per pixel).  With s = W_out, the strip is the whole row.

The gradients are those of a dense layer: dL/dS = dZ Nᵀ, whose block (t, i) is added back to input row y + i from
column t s on, and dL/dN = Sᵀ dZ, whose band gives dL/dW[o, c, i, j], the sum over x of dL/dN[(i, x + j, c), (x, o)].
:mod:`sgrad.nn.fast_kernels` calls this when :func:`strip_width` is not 0; ``tests/test_fast.py`` checks it against
the plain kernels of :mod:`sgrad.nn.kernels`.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

NARROW = 32  # out_channels below which the output rows are cut into strips; from it on, whole rows or no rows
STRIP_COLUMNS = 64  # the product's width s out_channels that a strip reaches where W_out has such a divisor
WIDER_AT_MOST = 3  # N's numbers per output pixel over W_col's, (s + k_w - 1) / k_w, at which the rows still pay
BAND_BYTES = 4 << 20  # the largest N built


def strip_width(in_channels: int, out_channels: int, kernel: tuple[int, int], stride: int, out_width: int,
                itemsize: int, *, strip_columns: int = STRIP_COLUMNS) -> int:
    """s, the output pixels per strip, or 0 where the rows do not pay.

    At stride 1: with fewer than ``NARROW`` output channels, the smallest divisor s of W_out with s out_channels at
    least ``strip_columns`` (W_out when none is); from ``NARROW`` on, whole rows, s = W_out.  The rows pay while N multiplies
    at most ``WIDER_AT_MOST`` times W_col's numbers per output pixel (s + k_w - 1 <= WIDER_AT_MOST k_w; for whole
    rows, a padded width of at most WIDER_AT_MOST k_w) and N is at most ``BAND_BYTES``.
    """
    if stride != 1:
        return 0
    strip = out_width
    if out_channels < NARROW:
        strip = next((s for s in range(1, out_width + 1) if out_width % s == 0 and s * out_channels >= strip_columns),
                     out_width)
    wide = strip + kernel[1] - 1  # at most W_p, since W_out = W_p - k_w + 1
    size = kernel[0] * wide * in_channels * strip * out_channels * itemsize
    return strip if wide <= WIDER_AT_MOST * kernel[1] and size <= BAND_BYTES else 0


def _band(weights: np.ndarray, strip: int) -> np.ndarray:
    """N (k_h (s + k_w - 1) in_channels, s out_channels) of ``weights`` (out_channels, in_channels, k_h, k_w)."""
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    by_tap = weights.transpose(2, 3, 1, 0)  # (k_h, k_w, in_channels, out_channels)
    band = np.zeros((kernel_height, strip + kernel_width - 1, in_channels, strip, out_channels), dtype=weights.dtype)
    for x in range(strip):
        band[:, x:x + kernel_width, :, x, :] = by_tap
    return band.reshape(-1, strip * out_channels)


def stacked_rows(padded: np.ndarray, kernel: tuple[int, int], out_shape: tuple[int, int], strip: int) -> np.ndarray:
    """S (batch H_out W_out / s, k_h (s + k_w - 1) in_channels) of ``padded`` (batch, H_p, W_p, in_channels),
    channels-last."""
    batch, _, padded_width, in_channels = padded.shape
    (kernel_height, kernel_width), (out_height, out_width) = kernel, out_shape
    wide = (strip + kernel_width - 1) * in_channels
    flat = np.ascontiguousarray(padded).reshape(batch, padded.shape[1], padded_width * in_channels)
    # (batch, H_p, W_out / s, wide): the input columns of each strip, a view
    pieces = sliding_window_view(flat, wide, axis=2)[:, :, :out_width * in_channels:strip * in_channels]
    rows = np.empty((batch, out_height, out_width // strip, kernel_height, wide), dtype=padded.dtype)
    for i in range(kernel_height):
        rows[:, :, :, i] = pieces[:, i:i + out_height]
    return rows.reshape(-1, kernel_height * wide)


def conv2d_forward(padded: np.ndarray, weights: np.ndarray, out_shape: tuple[int, int], strip: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(z, S)``: z (batch, H_out, W_out, out_channels) of ``padded`` (batch, H_p, W_p, in_channels) at stride 1,
    in strips of ``strip`` output pixels, no bias; S, the stacked rows, for :func:`conv2d_backward`."""
    stacked = stacked_rows(padded, weights.shape[2:], out_shape, strip)
    z = stacked @ _band(weights, strip)
    return z.reshape(padded.shape[0], *out_shape, weights.shape[0]), stacked


def conv2d_backward(rows: np.ndarray, stacked: np.ndarray, weights: np.ndarray, padded_shape: tuple[int, ...],
                    strip: int, input_delta: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """``(dL/dx_p or None, dL/dW)`` from dZ ``rows`` (batch, H_out, W_out, out_channels) and S of the forward pass,
    in strips of ``strip`` output pixels.  dL/dx_p is (batch, H_p, W_p, in_channels), padding included: the caller
    cuts it off."""
    batch, out_height, out_width, out_channels = rows.shape
    _, in_channels, kernel_height, kernel_width = weights.shape
    wide = strip + kernel_width - 1
    d_z = rows.reshape(-1, strip * out_channels)
    d_band = (stacked.T @ d_z).reshape(kernel_height, wide, in_channels, strip, out_channels)
    d_by_tap = d_band[:, 0:kernel_width, :, 0, :].copy()  # dL/dW[o, c, i, j] = sum over x of dL/dN[i, x + j, c, x, o]
    for x in range(1, strip):
        d_by_tap += d_band[:, x:x + kernel_width, :, x, :]
    d_weights = np.ascontiguousarray(d_by_tap.transpose(3, 2, 0, 1))
    if not input_delta:
        return None, d_weights
    strips = out_width // strip
    d_stacked = (d_z @ _band(weights, strip).T).reshape(batch, out_height, strips, kernel_height, wide * in_channels)
    d_padded = np.zeros((batch, padded_shape[1], padded_shape[2] * in_channels), dtype=rows.dtype)
    for i in range(kernel_height):  # block (t, i) of dL/dS goes back to input row y + i, from column t s on
        for t in range(strips):
            start = t * strip * in_channels
            d_padded[:, i:i + out_height, start:start + wide * in_channels] += d_stacked[:, :, t, i]
    return d_padded.reshape(padded_shape), d_weights
