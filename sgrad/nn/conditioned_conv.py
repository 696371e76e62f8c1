"""A convolution of feature maps h plus a linear map of a condition c, broadcast over the maps.

    z[n, o, y, x] = (W ⋆ h)[n, o, y, x] + b[o] + sum over j of c[n, j] V[j, o] + a[o]

The first layer of a convolutional generator that takes the label c as a vector: c's linear map adds
the same amount to every position of a map, whatever the kernel and the padding around h.  (Given c
as extra channels to the k×k convolution instead, as :class:`~sgrad.dni.generators.ConvGenerator`
does by default, the positions near the border see less of c, since part of the kernel falls on the
zero padding.)

The module takes what a conditioned generator hands its net: h and c side by side as maps,
(batch, in_channels + condition_channels, height, width), c's channels each constant over its map.  It
reads c as the mean of each of those maps (c itself, since they are constant, and a gradient that
spreads evenly over the map); the convolution of h is its child ``conv``, a
:class:`~sgrad.nn.conv.Conv2d`, and the linear map of c its child ``condition``, a
:class:`~sgrad.Layer` (PyTorch's ``nn.Linear``).
"""

from typing import Any

import numpy as np

from .. import argument_checks
from .conv import Conv2d
from .layers import Layer
from .module import Module


class ConditionedConv2d(Module):
    """``z = W ⋆ h + b + (c V + a)``: a k×k convolution of h, and a linear map of c added at every position.

    Parameters
    ----------
    in_channels, condition_channels, out_channels : int
        Channels of h, width of c, and channels of z: (batch, out_channels, H_out, W_out).
    kernel_size, stride, padding, bias, init, bias_init, update_rule, seed, rng, dtype :
        as :class:`~sgrad.nn.conv.Conv2d`'s, for the convolution of h; the linear map of c has
        the same ``bias``, ``init`` and ``bias_init``, with fan_in = condition_channels.

    ``input_dim`` is in_channels + condition_channels, the channels of the maps it takes;
    ``parameters`` and ``gradients`` are keyed ``'conv.<name>'`` and ``'condition.<name>'``.
    """

    backward_needs = ("output", "input_shape")

    def __init__(self, in_channels: int, condition_channels: int, out_channels: int, kernel_size: int, *,
                 stride: int = 1, padding: int = 0, bias: bool = True, init: str = "he", bias_init: str = "zeros",
                 update_rule: Any = None, seed: argument_checks.Seed = None, rng: np.random.Generator | None = None,
                 dtype: Any = np.float64) -> None:
        rng = argument_checks.make_rng(seed, rng)
        self.conv = Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias,
                           init=init, bias_init=bias_init, update_rule=update_rule, rng=rng, dtype=dtype)
        self.condition = Layer(condition_channels, out_channels, "identity", bias=bias, init=init,
                               bias_init=bias_init, update_rule=update_rule, rng=rng, dtype=dtype)
        self.in_channels = self.conv.in_channels
        self.input_dim = self.in_channels + self.condition.input_dim
        self.output_dim = self.conv.out_channels
        self.update_state = {}
        self.output: np.ndarray | None = None
        self.input_shape: tuple[int, ...] | None = None

    def children(self) -> dict[str, Any]:
        return {"conv": self.conv, "condition": self.condition}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return {f"{name}.{key}": p for name, child in self.children().items() for key, p in child.parameters.items()}

    @property
    def gradients(self) -> dict[str, Any]:
        return {f"{name}.{key}": g for name, child in self.children().items() for key, g in child.gradients.items()}

    def _check(self, x: np.ndarray) -> None:
        argument_checks.check_feature_maps(x, "input", self.input_dim,
                                           channels_name="in_channels + condition_channels")

    def _parts(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """h's maps, and c: the mean of each of c's maps, (batch, condition_channels)."""
        return x[:, :self.in_channels], x[:, self.in_channels:].mean(axis=(2, 3))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """z for x = [h, c]: (batch, in_channels + condition_channels, height, width)."""
        self._check(x)
        h, c = self._parts(x)
        self.output = self.conv.forward(h) + self.condition.forward(c)[:, :, None, None]
        self.input_shape = x.shape
        return self.output

    def predict(self, x: np.ndarray) -> np.ndarray:
        """z for x, with no side effects."""
        self._check(x)
        h, c = self._parts(x)
        return self.conv.predict(h) + self.condition.predict(c)[:, :, None, None]

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """Stores both children's gradients; returns dL/dx = [dL/dh, dL/dc / (height width) on each of c's maps].

        The linear map's output is added at every position, so its gradient is dz summed over the map.
        """
        output, input_shape = self.forward_cache()  # the children refuse a step taken since: their own caches
        argument_checks.check_same_shape(output_delta, "output_delta", output, "the last output")
        input_delta = argument_checks.check_bool(input_delta, "input_delta")
        dh = self.conv.backward(output_delta, input_delta=input_delta)
        dc = self.condition.backward(output_delta.sum(axis=(2, 3)), input_delta=input_delta)
        if dh is None or dc is None:
            return None
        batch, _, height, width = input_shape
        dc_maps = np.broadcast_to(dc[:, :, None, None] / (height * width), (batch, dc.shape[1], height, width))
        return np.concatenate([dh, dc_maps], axis=1)

    def update(self, alpha: float) -> None:
        """One descent step of both maps."""
        alpha = argument_checks.check_learning_rate(alpha)
        self.conv.update(alpha)
        self.condition.update(alpha)

    def __repr__(self) -> str:
        return (f"ConditionedConv2d({self.in_channels}, {self.condition.input_dim}, {self.output_dim}, "
                f"kernel_size={self.conv.kernel_size}, padding={self.conv.padding})")
