"""Convolutional modules over feature maps of shape (batch, channels, height, width), and the conv block.

``Conv2d``, ``MaxPool2d``, ``BatchNorm2d`` (batch norm over channels) and ``Flatten``
have the interface of every module (:mod:`sgrad.nn.module`): ``forward`` / ``backward(...,
input_delta=)`` / ``update`` / ``predict``, each checking its input once at the boundary.
:func:`conv_block` chains Conv→BatchNorm→ReLU(→pool) into a :class:`~sgrad.Sequential`,
as :func:`~sgrad.dense_block` does for Linear→BatchNorm→ReLU, so that it sits under a
:class:`~sgrad.DNIBlock` with a :class:`~sgrad.dni.generators.ConvGenerator`.

For a convolutional module, ``input_dim`` and ``output_dim`` are numbers of *channels*
(the maps' height and width may be anything the kernel fits), so ``Sequential`` checks
that each module takes the channels the one before it gives.  A small CNN for MNIST::

    import numpy as np
    from sgrad import Layer, Sequential
    from sgrad.nn.conv import Flatten, conv_block

    x = np.random.default_rng(0).random((64, 1, 28, 28))              # (batch, channels, height, width)
    net = [conv_block(1, 32, 5, pool=2, seed=0),                        # → (64, 32, 14, 14)
           conv_block(32, 64, 5, pool=2, seed=1),                       # → (64, 64, 7, 7)
           Sequential([Flatten((64, 7, 7)), Layer(64 * 7 * 7, 10, "identity", seed=2)])]   # → (64, 10)

The maths is in :mod:`sgrad.nn.kernels` (``conv2d_forward``, ``maxpool2d_forward`` and
their backward passes: im2col and one matrix product, no loop over examples or positions).
The modules run faster twins from :mod:`sgrad.nn.fast_kernels`, each tested against its plain kernel: the
convolution a few examples at a time (its im2col matrix in pieces that stay in the cache), and max pooling
offset by offset.  Outputs are (batch, channels, height, width) arrays
whose memory is channels-last; that changes nothing for a reader, and saves copies between
the kernels.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .. import argument_checks
from . import fast_kernels
from .batchnorm import BatchNorm
from .blocks import Activation, Sequential
from .initializers import BIAS_INITIALIZERS, INITIALIZERS, initial_bias, initialize
from .module import NothingToLearn, WeightsAndBias
from .optimizers import UpdateRule


def _kernel_pair(kernel_size: Any, name: str = "kernel_size") -> tuple[int, int]:
    """``(k_h, k_w)`` from an int k (a square kernel) or a pair of ints, each >= 1."""
    if isinstance(kernel_size, (tuple, list)) and len(kernel_size) == 2:
        return (argument_checks.check_integer(kernel_size[0], f"{name}[0]"),
                argument_checks.check_integer(kernel_size[1], f"{name}[1]"))
    if isinstance(kernel_size, (tuple, list)):
        raise ValueError(f"{name} must be an int or a pair (height, width) such as (3, 3); got {kernel_size!r}")
    return (argument_checks.check_integer(kernel_size, name),) * 2


def _check_window_fits(x: np.ndarray, kernel: tuple[int, int], padding: int, owner: str) -> None:
    """Refuse maps too small for one window: the kernel must fit the input padded on every side."""
    height, width = x.shape[2] + 2 * padding, x.shape[3] + 2 * padding
    if kernel[0] > height or kernel[1] > width:
        padded = f", {height}×{width} with a padding of {padding}" if padding else ""
        raise ValueError(f"the {kernel[0]}×{kernel[1]} kernel of {owner} does not fit the input: its maps are "
                         f"{x.shape[2]}×{x.shape[3]}{padded}; pass larger maps, more padding or a smaller kernel")


class Conv2d(WeightsAndBias):
    """A 2-D convolution ``z = W ⋆ x + b`` with stride and zero padding (PyTorch's ``Conv2d``).

    ``z[n, o, y, x] = b[o] + sum over c, i, j of W[o, c, i, j] * x_pad[n, c, stride y + i, stride x + j]``,
    with H_out = (height + 2 padding - k_h) // stride + 1, and likewise W_out.

    Parameters
    ----------
    in_channels, out_channels : int
        Channels of the input (batch, in_channels, height, width) and of the output z (batch, out_channels, H_out, W_out).
    kernel_size : int or (k_h, k_w)
    stride : int >= 1
        The same along both axes.
    padding : int >= 0
        The same along both axes.
    bias : bool
        Whether there is a bias b (default True; a conv block with batch norm has none: beta plays its part).
    init : str
        'he' (default, for ReLU), 'xavier', 'pytorch', 'blog' or 'zeros', with fan_in = in_channels k_h k_w and
        fan_out = out_channels.
    bias_init : str
        'zeros' (default) or 'pytorch': U(-1/√fan_in, 1/√fan_in), PyTorch's default for ``nn.Conv2d``.
    update_rule, seed, rng, dtype : as :class:`~sgrad.Layer`'s.

    Attributes
    ----------
    weights : (out_channels, in_channels, k_h, k_w) array, W
    bias : (out_channels,) array, or None
    input : the last forward pass's x
    output : the last forward pass's z
    columns : (batch H_out W_out, k_h k_w in_channels), the im2col matrix of the last input, or None when it is
        too large to keep (above ``fast_kernels.WHOLE_BYTES``): backward then builds it again, piece by piece
    weights_grad : dL/dW from the last backward
    bias_grad : dL/db from the last backward
    """

    backward_needs = ("input", "output")  # and columns, which may be None: see the attributes

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], *, stride: int = 1,
                 padding: int = 0, bias: bool = True, init: str = "he", bias_init: str = "zeros",
                 update_rule: str | UpdateRule | None = None, seed: argument_checks.Seed = None,
                 rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64) -> None:
        self.input_dim = self.in_channels = argument_checks.check_integer(in_channels, "in_channels")
        self.output_dim = self.out_channels = argument_checks.check_integer(out_channels, "out_channels")
        self.kernel_size = _kernel_pair(kernel_size)
        self.stride = argument_checks.check_integer(stride, "stride")
        self.padding = argument_checks.check_integer(padding, "padding", minimum=0)
        init = argument_checks.check_choice(init, "init", INITIALIZERS)
        self.dtype = argument_checks.check_trainable_dtype(dtype, "a Conv2d")
        rng = argument_checks.make_rng(seed, rng)
        kernel_height, kernel_width = self.kernel_size
        fan_in = self.in_channels * kernel_height * kernel_width
        argument_checks.check_bytes(fan_in * self.out_channels * self.dtype.itemsize,
                                    f"the weights of Conv2d({self.in_channels}, {self.out_channels}, "
                                    f"{kernel_height}x{kernel_width})", "use fewer channels or a smaller kernel")
        matrix = initialize(init, (fan_in, self.out_channels), rng, self.dtype)  # (fan_in, fan_out), as for a Layer
        self.weights = np.ascontiguousarray(matrix.T.reshape(self.out_channels, self.in_channels, *self.kernel_size))
        bias_init = argument_checks.check_choice(bias_init, "bias_init", BIAS_INITIALIZERS)
        self.bias = (initial_bias(bias_init, self.out_channels, fan_in, rng, self.dtype)
                     if argument_checks.check_bool(bias, "bias") else None)
        self._start_learning(update_rule)
        self.input: np.ndarray | None = None
        self.output: np.ndarray | None = None
        self.columns: np.ndarray | None = None

    def _check(self, x: np.ndarray) -> None:
        argument_checks.check_feature_maps(x, "input", self.in_channels, channels_name="this layer's in_channels")
        _check_window_fits(x, self.kernel_size, self.padding, "this Conv2d")

    def forward(self, x: np.ndarray) -> np.ndarray:
        """z for x: (batch, in_channels, height, width), remembering x and its im2col matrix for ``backward``."""
        self._check(x)
        # kernels.conv2d_forward's z, a few examples at a time when X_col is large (faster: see sgrad.nn.fast_kernels)
        self.output, self.columns = fast_kernels.conv2d_forward(x, self.weights, self.bias, self.stride, self.padding)
        self.input = x
        self.weights_grad = self.bias_grad = None
        self._stale = False
        return self.output

    def predict(self, x: np.ndarray) -> np.ndarray:
        """z for x, with no side effects."""
        self._check(x)
        return fast_kernels.conv2d_forward(x, self.weights, self.bias, self.stride, self.padding)[0]

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Backpropagate ``output_delta = dL/dz`` (batch, out_channels, H_out, W_out) through the last forward.

        Stores ``weights_grad`` and ``bias_grad`` (summed over the batch) and returns
        dL/dx: (batch, in_channels, height, width), or None with ``input_delta=False``.
        """
        x, z = self.forward_cache()
        argument_checks.check_same_shape(output_delta, "output_delta", z, "this layer's last output")
        input_delta = argument_checks.check_bool(input_delta, "input_delta")
        # kernels.conv2d_backward, a few examples at a time (faster: see sgrad.nn.fast_kernels)
        dx, self.weights_grad, self.bias_grad = fast_kernels.conv2d_backward(
            output_delta, x, self.columns, self.weights, self.stride, self.padding, self.bias is not None, input_delta)
        return dx

    def __repr__(self) -> str:
        return (f"Conv2d({self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None})")


class MaxPool2d(NothingToLearn):
    """Max pooling: each output is the largest value of its window, channel by channel (PyTorch's ``MaxPool2d``).

    ``kernel_size`` an int or (k_h, k_w); ``stride`` defaults to the kernel's height (windows side
    by side); ``padding`` (at most half the kernel) pads with -inf, so a maximum is always a real
    value.  No parameters.  Backward sends each window's gradient to its maximum, nowhere else.
    The maths is :func:`sgrad.nn.kernels.maxpool2d_forward` and its backward; this module runs their
    twins in :mod:`sgrad.nn.fast_kernels`, which take the maxima offset by offset (many times faster).
    """

    backward_needs = ("input", "output")

    def __init__(self, kernel_size: int | tuple[int, int], *, stride: int | None = None, padding: int = 0) -> None:
        self.kernel_size = _kernel_pair(kernel_size)
        self.stride = self.kernel_size[0] if stride is None else argument_checks.check_integer(stride, "stride")
        self.padding = argument_checks.check_integer(padding, "padding", minimum=0)
        if 2 * self.padding > min(self.kernel_size):
            raise ValueError(f"padding must be at most half the kernel, {min(self.kernel_size) // 2} for a "
                             f"{self.kernel_size[0]}×{self.kernel_size[1]} kernel, so that every window holds a "
                             f"real value; got {self.padding}")
        self.update_state = {}
        self.input: np.ndarray | None = None
        self.output: np.ndarray | None = None

    def _check(self, x: np.ndarray) -> None:
        argument_checks.check_feature_maps(x, "input")
        _check_window_fits(x, self.kernel_size, self.padding, "this MaxPool2d")

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The pooled maps (batch, channels, H_out, W_out).

        Keeps a reference to x, where ``backward`` finds the maxima again: do not change x in place before it.
        """
        self._check(x)
        self.output = fast_kernels.maxpool2d_forward(x, self.kernel_size, self.stride, self.padding)
        self.input = x
        return self.output

    def predict(self, x: np.ndarray) -> np.ndarray:
        self._check(x)
        return fast_kernels.maxpool2d_forward(x, self.kernel_size, self.stride, self.padding)

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """dL/dx: (batch, channels, height, width), each window's gradient on its maximum."""
        x, output = self.forward_cache()
        argument_checks.check_same_shape(output_delta, "output_delta", output, "the last output")
        if not argument_checks.check_bool(input_delta, "input_delta"):
            return None
        return fast_kernels.maxpool2d_backward(output_delta, x, output, self.kernel_size, self.stride, self.padding)

    def __repr__(self) -> str:
        return f"MaxPool2d(kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding})"


class BatchNorm2d(BatchNorm):
    """Batch norm over the channels of feature maps (batch, channels, height, width): PyTorch's ``BatchNorm2d``.

    Each channel is normalised with the mean and variance of its values over the batch *and*
    every position: the dense :class:`~sgrad.BatchNorm` (its kernels, running averages and
    update), run on the maps reshaped to rows of channels, (batch height width, channels).
    ``gamma``, ``beta`` and the running statistics are (channels,).  In training mode a channel
    needs at least 2 values, so a single example is fine as long as its maps have 2 pixels.
    """

    backward_needs = (*BatchNorm.backward_needs, "output")  # BatchNorm's backward reads its own first

    def __init__(self, channels: int, **options: Any) -> None:
        super().__init__(argument_checks.check_integer(channels, "channels"), **options)
        self.output: np.ndarray | None = None

    def min_batch(self) -> int:
        return 1  # the statistics also run over the positions: see forward

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The output for x in the current mode, with no side effects (running averages untouched)."""
        argument_checks.check_feature_maps(x, "input", self.input_dim, channels_name="this batch norm's channels")
        return _as_maps(self._predict_rows(_as_rows(x)), x.shape)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Normalise x: (batch, channels, height, width); in training mode also update the running averages."""
        argument_checks.check_feature_maps(x, "input", self.input_dim, channels_name="this batch norm's channels")
        batch, _, height, width = x.shape
        if self.training and batch * height * width < 2:
            raise ValueError(f"input has one value per channel (shape {x.shape}), but batch norm in training mode "
                             "needs at least 2 (over the batch and the positions); pass more examples or larger "
                             "maps, or use eval()")
        self.output = _as_maps(self._forward_rows(_as_rows(x)), x.shape)
        return self.output

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """dL/dx: (batch, channels, height, width); stores dL/dgamma and dL/dbeta (None if not ``input_delta``)."""
        _, output = self.forward_cache()
        argument_checks.check_same_shape(output_delta, "output_delta", output, "the last output")
        delta = self._backward_rows(_as_rows(output_delta), input_delta)
        return None if delta is None else _as_maps(delta, output.shape)

    def __repr__(self) -> str:
        return f"BatchNorm2d({self.input_dim}, training={self.training})"


def _as_rows(maps: np.ndarray) -> np.ndarray:
    """(batch, channels, height, width) → (batch height width, channels): one row per pixel."""
    return maps.transpose(0, 2, 3, 1).reshape(-1, maps.shape[1])


def _as_maps(rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`_as_rows`: rows (batch height width, channels) → maps of ``shape``."""
    batch, channels, height, width = shape
    return rows.reshape(batch, height, width, channels).transpose(0, 3, 1, 2)


class Activation2d(Activation):
    """An elementwise nonlinearity ``h = f(x)`` on feature maps (batch, channels, height, width)."""

    def _check(self, x: np.ndarray) -> None:
        argument_checks.check_feature_maps(x, "input")


class Flatten(NothingToLearn):
    """Feature maps (batch, channels, height, width) as rows (batch, channels height width), for a dense layer.

    ``shape`` is (channels, height, width) of the maps it takes, so that ``output_dim``
    (channels height width) is known when a :class:`~sgrad.Sequential` checks its widths.
    The rows are in PyTorch's order (``torch.flatten(x, 1)``).  No parameters.
    """

    backward_needs = ("input_shape",)

    def __init__(self, shape: tuple[int, int, int]) -> None:
        if not isinstance(shape, (tuple, list)) or len(shape) != 3:
            raise ValueError(f"shape must be (channels, height, width) of the maps to flatten, e.g. (64, 7, 7); "
                             f"got {shape!r}")
        self.shape = tuple(argument_checks.check_integer(size, f"every size in shape {tuple(shape)}") for size in shape)
        self.input_dim = self.shape[0]
        self.output_dim = int(np.prod(self.shape))
        self.update_state = {}
        self.input_shape: tuple[int, ...] | None = None

    def _check(self, x: np.ndarray) -> None:
        argument_checks.check_feature_maps(x, "input", self.shape[0], channels_name="the channels of this Flatten's shape")
        if x.shape[1:] != self.shape:
            raise ValueError(f"input must have shape (batch, {', '.join(map(str, self.shape))}), the shape this "
                             f"Flatten was built for; got shape {x.shape}")

    def forward(self, x: np.ndarray) -> np.ndarray:
        self._check(x)
        self.input_shape = x.shape
        return x.reshape(x.shape[0], -1)

    def predict(self, x: np.ndarray) -> np.ndarray:
        self._check(x)
        return x.reshape(x.shape[0], -1)

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """The rows' gradient (batch, channels height width) as maps (batch, channels, height, width)."""
        [input_shape] = self.forward_cache()
        argument_checks.check_batch(output_delta, "output_delta", self.output_dim, width_name="this Flatten's output_dim")
        if output_delta.shape[0] != input_shape[0]:
            raise ValueError(f"output_delta must have one row per example of the last input, {input_shape[0]}; "
                             f"got {output_delta.shape[0]}")
        return output_delta.reshape(input_shape) if argument_checks.check_bool(input_delta, "input_delta") else None

    def __repr__(self) -> str:
        return f"Flatten({self.shape})"


def conv_block(in_channels: int, out_channels: int, kernel_size: int = 3,
               nonlin: str | Callable[[np.ndarray], np.ndarray] = "relu", *, stride: int = 1,
               padding: int | None = None, batchnorm: bool = True, pool: int | None = None, init: str = "he",
               bias_init: str = "zeros", update_rule: str | UpdateRule | None = None, seed: argument_checks.Seed = None,
               rng: np.random.Generator | None = None, dtype: DTypeLike = np.float64) -> Sequential:
    """The convolutional hidden block: Conv→BatchNorm→nonlinearity, then max pooling if ``pool`` is given.

    The analogue of :func:`~sgrad.dense_block`; without batch norm, Conv (with a bias, started by
    ``bias_init``)→nonlinearity.
    A k×k kernel; ``padding=None`` pads (k - 1) // 2 on each side, which keeps the maps' size for
    an odd k at stride 1.  ``pool=p`` adds ``MaxPool2d(p)`` (p×p windows side by side: the maps shrink p
    times).  Takes (batch, in_channels, height, width); gives (batch, out_channels, H_out, W_out).
    """
    batchnorm = argument_checks.check_bool(batchnorm, "batchnorm")
    kernel_size = argument_checks.check_integer(kernel_size, "kernel_size")
    padding = (kernel_size - 1) // 2 if padding is None else padding
    rng = argument_checks.make_rng(seed, rng)
    modules: list[Any] = [Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                 bias=not batchnorm, init=init, bias_init=bias_init, update_rule=update_rule, rng=rng,
                                 dtype=dtype)]
    if batchnorm:
        modules.append(BatchNorm2d(out_channels, update_rule=update_rule, dtype=dtype))
    modules.append(Activation2d(nonlin))
    if pool is not None:
        modules.append(MaxPool2d(argument_checks.check_integer(pool, "pool")))
    return Sequential(modules)
