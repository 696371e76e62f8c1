"""A speed trick for stride-1 convolutions with many channels and a large kernel: the convolution in the frequency
domain, with each discrete Fourier transform (DFT) written as two matrix products.

Correlation theorem.  Put each map of the input x (H × W), each kernel W[o, c] (k_h × k_w) and each delta map
dZ[n, o] (H_out × W_out) at the top left corner of a frame of H_f × W_f pixels, zeros around them.  Write F for
the frame's 2-D DFT and ^* for the complex conjugate.  Then, at every frequency (u, v)::

    F(z)[n, o]  = sum over c of  F(x)[n, c] F(W)[o, c]^*      z[y, x]     = the frame's pixel (y - p, x - p)
    F(dx)[n, c] = sum over o of  F(dZ)[n, o] F(W)[o, c]       dL/dx[y, x] = the frame's pixel (y + p, x + p)
    F(dW)[o, c] = sum over n of  F(dZ)[n, o]^* F(x)[n, c]     dL/dW[i, j] = the frame's pixel (i - p, j - p)

with pixel indices taken modulo the frame's size: the DFT is circular, and the padding is the frame's zeros.  An
output pixel y reads x rows y - p … y - p + k_h - 1, all told from -p to H + p - 1.  With H_f >= H + p, rows -p …
-1 wrap to H_f - p … H_f - 1, at or past H, and rows H … H + p - 1 lie inside the frame, past H: zeros either
way, as the padding is.  dL/dx and dL/dW read the same pairs of pixels.  So the frame is
H_f = max(H + p, H_out, k_h) high (the kernel must fit, its taps apart), and as wide by the same rule.

Each of the three products of :func:`sgrad.nn.kernels.conv2d_forward` and its backward thus becomes, at each of the
frame's H_f (W_f // 2 + 1) frequencies (the others are conjugates: the maps are real), one complex matrix product
over the channels or the batch, with no k_h k_w factor: the MNIST CNN's second convolution (5 × 5, 32 → 64 channels
on 14 × 14 maps, a 16 × 16 frame) multiplies a few times fewer numbers than im2col's products.

The DFTs themselves are products too.  Along the width, a map's rows times the (w, W_f // 2 + 1) matrix
``exp(-2πi x v / W_f)``, real in, complex out (its real and imaginary parts as interleaved columns); along the
height, the (H_f, h) matrix ``exp(-2πi u y / H_f)`` times those, complex.  The inverse runs the other way round and
gives only the pixels wanted, from an offset on (-p, or p): the height's rows of ``exp(2πi (y + offset) u / H_f)
/ H_f``, then the width's ``Re(sum over v of a_v X_v exp(2πi (x + offset) v / W_f)) / W_f``, a_v = 2 except
a_0 = 1 (and a_{W_f/2} = 1 for an even W_f): the half spectrum's conjugates folded in.  Spectra are stored
frequency-major, (H_f, W_f // 2 + 1, maps), so that the products over the channels read one frequency's block at
a time.

:mod:`sgrad.nn.fast_kernels` calls this where :func:`pays`; ``tests/test_fast.py`` checks it against the plain
kernels of :mod:`sgrad.nn.kernels`.
"""

import functools

import numpy as np

# The frequency domain pays where im2col multiplies at least FEWER_AT_LEAST times the numbers its products do
# (counting a complex multiplication as four), and that ratio times the fewer of the input and output channels is
# at least BY_CHANNELS: the transforms' cost is shared over the channels (a map's spectrum serves every channel on
# the other side), so with few channels they outweigh what the products save.
FEWER_AT_LEAST = 2.0
BY_CHANNELS = 64.0


def frame(input_shape: tuple[int, int], kernel: tuple[int, int], padding: int) -> tuple[int, int]:
    """(H_f, W_f), the frame for maps of ``input_shape`` (H, W): max(H + p, H_out, k_h) and its like for the width."""
    def length(size: int, k: int) -> int:
        return max(size + padding, size + 2 * padding - k + 1, k)

    return length(input_shape[0], kernel[0]), length(input_shape[1], kernel[1])


def pays(in_channels: int, out_channels: int, kernel: tuple[int, int], stride: int, input_shape: tuple[int, int],
         padding: int) -> bool:
    """Whether to convolve in the frequency domain: at stride 1, where im2col's multiplications over the frequency
    domain's, r, is at least ``FEWER_AT_LEAST`` and r min(in_channels, out_channels) at least ``BY_CHANNELS``."""
    out_height, out_width = (size + 2 * padding - k + 1 for size, k in zip(input_shape, kernel))
    if stride != 1 or min(out_height, out_width) < 1:
        return False
    height, width = frame(input_shape, kernel, padding)
    fewer = out_height * out_width * kernel[0] * kernel[1] / (4 * height * (width // 2 + 1))  # r
    return fewer >= FEWER_AT_LEAST and fewer * min(in_channels, out_channels) >= BY_CHANNELS


@functools.lru_cache(maxsize=64)
def _analysis(length: int, frame_length: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The DFT's matrices for maps ``length`` long at the start of a frame ``frame_length`` long, for both axes.

    ``(width, height)``: width (length, 2 (frame_length // 2 + 1)), real, columns 2v and 2v + 1 the real and
    imaginary parts of exp(-2πi x v / frame_length); height (frame_length, length), complex, exp(-2πi u y / frame_length).
    """
    position = np.arange(length)
    along_width = np.exp(-2j * np.pi * np.outer(position, np.arange(frame_length // 2 + 1)) / frame_length)
    width = np.empty((length, 2 * along_width.shape[1]))
    width[:, 0::2], width[:, 1::2] = along_width.real, along_width.imag
    height = np.exp(-2j * np.pi * np.outer(np.arange(frame_length), position) / frame_length)
    return _fixed(width.astype(dtype)), _fixed(height.astype(np.result_type(dtype, np.complex64)))


@functools.lru_cache(maxsize=64)
def _synthesis(length: int, offset: int, frame_length: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The inverse DFT's matrices for ``length`` pixels from ``offset`` on (modulo the frame) of a frame
    ``frame_length`` long.

    ``(height, width)``: height (length, frame_length), complex, exp(2πi (y + offset) u / frame_length) / frame_length;
    width (2 (frame_length // 2 + 1), length), real, rows 2v and 2v + 1 times a number's real and imaginary parts
    giving Re(a_v X exp(2πi (x + offset) v / frame_length)) / frame_length, a_v as in the module's docstring.
    """
    position = np.arange(length) + offset
    frequencies = np.arange(frame_length // 2 + 1)
    folded = np.where((frequencies == 0) | (2 * frequencies == frame_length), 1.0, 2.0)
    along_width = folded[:, None] * np.exp(2j * np.pi * np.outer(frequencies, position) / frame_length) / frame_length
    width = np.empty((2 * len(frequencies), length))
    width[0::2], width[1::2] = along_width.real, -along_width.imag
    height = np.exp(2j * np.pi * np.outer(position, np.arange(frame_length)) / frame_length) / frame_length
    return _fixed(height.astype(np.result_type(dtype, np.complex64))), _fixed(width.astype(dtype))


def _fixed(matrix: np.ndarray) -> np.ndarray:
    """A cached matrix, made read-only: every caller shares it."""
    matrix.flags.writeable = False
    return matrix


def spectra(maps: np.ndarray, frame_shape: tuple[int, int]) -> np.ndarray:
    """The DFTs of real ``maps`` (count, h, w), each at the top left of a frame: (H_f, W_f // 2 + 1, count).

    Multiply by the height's matrix last, on every map's numbers of one frequency v side by side.
    """
    count, height, width = maps.shape
    along_width = _analysis(width, frame_shape[1], maps.dtype)[0]
    along_height = _analysis(height, frame_shape[0], maps.dtype)[1]
    half = along_width.shape[1] // 2
    rows = (np.ascontiguousarray(maps).reshape(-1, width) @ along_width).view(along_height.dtype)  # (count h, V)
    by_row = np.ascontiguousarray(rows.reshape(count, height, half).transpose(1, 2, 0))  # (h, V, count)
    return (along_height @ by_row.reshape(height, -1)).reshape(frame_shape[0], half, count)


def maps_of(spectra_: np.ndarray, frame_shape: tuple[int, int], offset: int, shape: tuple[int, int]) -> np.ndarray:
    """The real maps (count, h, w) of a frame's pixels from ``(offset, offset)`` on, from its spectra (H_f, V, count)."""
    _, half, count = spectra_.shape
    real = np.finfo(spectra_.dtype).dtype
    along_height = _synthesis(shape[0], offset, frame_shape[0], real)[0]
    along_width = _synthesis(shape[1], offset, frame_shape[1], real)[1]
    rows = (along_height @ spectra_.reshape(frame_shape[0], -1)).reshape(shape[0], half, count)
    by_map = np.ascontiguousarray(rows.transpose(2, 0, 1)).view(real).reshape(-1, 2 * half)  # (count h, 2V)
    return (by_map @ along_width).reshape(count, *shape)


def conv2d_forward(x: np.ndarray, weights: np.ndarray, padding: int) -> tuple[np.ndarray, np.ndarray]:
    """z of :func:`sgrad.nn.kernels.conv2d_forward` (stride 1, no bias) through the frequency domain: ``(z, X)``.

    z is (batch, out_channels, H_out, W_out), channels-first in memory; X, the input's spectra
    (frequencies, batch, in_channels), is what :func:`conv2d_backward` needs of x.
    """
    batch, in_channels, height, width = x.shape
    out_channels, _, kernel_height, kernel_width = weights.shape
    frame_shape = frame((height, width), (kernel_height, kernel_width), padding)
    out_shape = (height + 2 * padding - kernel_height + 1, width + 2 * padding - kernel_width + 1)
    x_spectra = spectra(x.reshape(-1, height, width), frame_shape).reshape(-1, batch, in_channels)
    w_spectra = spectra(weights.reshape(-1, kernel_height, kernel_width), frame_shape)
    z_spectra = np.matmul(x_spectra, w_spectra.reshape(-1, out_channels, in_channels).conj().transpose(0, 2, 1))
    z = maps_of(z_spectra.reshape(frame_shape[0], -1, batch * out_channels), frame_shape, -padding, out_shape)
    return z.reshape(batch, out_channels, *out_shape), x_spectra


def conv2d_backward(dz: np.ndarray, x_spectra: np.ndarray, input_shape: tuple[int, ...], weights: np.ndarray,
                    padding: int, input_delta: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """``(dL/dx or None, dL/dW)`` of :func:`sgrad.nn.kernels.conv2d_backward` (stride 1) through the frequency domain.

    ``x_spectra`` from :func:`conv2d_forward`; dz (batch, out_channels, H_out, W_out); dL/dx channels-first in memory.
    """
    batch, in_channels, height, width = input_shape
    out_channels, _, kernel_height, kernel_width = weights.shape
    frame_shape = frame((height, width), (kernel_height, kernel_width), padding)
    dz_spectra = spectra(dz.reshape(-1, *dz.shape[2:]), frame_shape).reshape(-1, batch, out_channels)
    dw_spectra = np.matmul(dz_spectra.conj().transpose(0, 2, 1), x_spectra)  # (frequencies, out, in)
    d_weights = maps_of(dw_spectra.reshape(frame_shape[0], -1, out_channels * in_channels), frame_shape, -padding,
                        (kernel_height, kernel_width)).reshape(weights.shape)
    if not input_delta:
        return None, d_weights
    w_spectra = spectra(weights.reshape(-1, kernel_height, kernel_width), frame_shape)
    dx_spectra = np.matmul(dz_spectra, w_spectra.reshape(-1, out_channels, in_channels))  # (frequencies, batch, in)
    dx = maps_of(dx_spectra.reshape(frame_shape[0], -1, batch * in_channels), frame_shape, padding, (height, width))
    return dx.reshape(input_shape), d_weights
