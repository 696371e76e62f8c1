"""The convolutional nets of ``sgrad paper --arch cnn``: the paper's MNIST CNN, with convolutional generators.

A network of ``depth`` layers takes images x: (batch, 1, 28, 28) and is ``depth - 1``
hidden conv blocks, then a linear top layer::

    x → [Conv k×k, C channels, padding k // 2 → BatchNorm2d → ReLU (→ MaxPool 3×3, stride 2, padding 1)]
      × (depth - 1) → Flatten → Linear → 10 logits

with C = ``config.channels`` and k = ``config.kernel_size``; only the first two blocks
pool (28 → 14 → 7), so every deeper block works on 7×7 maps.  h_k is a block's output,
(batch, C, H_k, W_k); a decoupled block's generator is a
:class:`~sgrad.dni.generators.ConvGenerator`, ĝ_k = M_k(h_k, c), hidden conv layers of
``config.generator_hidden`` channels (none for ``generator='linear'``: one convolution),
the same k×k kernels, a zero-initialised output convolution, so ĝ_k has h_k's shape; for
cDNI, c (the one-hot label) is broadcast over the maps as 10 extra channels.

This is the paper's setting as its appendix describes it (Jaderberg et al., 2016,
Table 1's MNIST CNN rows: 64 filters of 5×5, resolution-preserving padding, batch norm,
ReLU, 3×3 max pooling of stride 2 after the first two layers; generators of two hidden
conv layers of 64 5×5 filters and a zero-initialised 5×5 output convolution), with the
channels and kernels left as settings: on a 2-core machine the README's measurements use
fewer channels (its CNN section says which).  The synthetic loss is not built here.
"""

import math
from typing import Any

import numpy as np

from ..dni.decoupled import DNIBlock
from ..dni.generators import ConvGenerator
from ..nn.blocks import Sequential
from ..nn.conv import Flatten, MaxPool2d, conv_block
from ..nn.layers import Layer

POOLED_BLOCKS = 2  # the first two blocks pool: 28×28 → 14×14 → 7×7
POOL, POOL_STRIDE, POOL_PADDING = 3, 2, 1


def image_side(input_dim: int) -> int:
    """The side s of the square images that rows of ``input_dim = s * s`` pixels hold (28 for MNIST)."""
    side = math.isqrt(input_dim)
    if side * side != input_dim:
        raise ValueError(f"the CNN takes square one-channel images as rows of side x side pixels; got rows of "
                         f"{input_dim} pixels, which is not a square; use MNIST's 784 (28 x 28)")
    return side


def map_sides(side: int, depth: int) -> list[int]:
    """The side of each hidden block's output maps, for images of ``side`` × ``side`` and ``depth`` layers."""
    sides = []
    for k in range(depth - 1):
        if k < POOLED_BLOCKS:
            side = (side + 2 * POOL_PADDING - POOL) // POOL_STRIDE + 1
        sides.append(side)
    return sides


def build_cnn(method: str, input_dim: int, config: Any, *, decoupled: bool, condition_dim: int,
              num_classes: int) -> list[Any]:
    """Hidden conv blocks (DNI blocks if ``decoupled``) and a Flatten→Linear top layer with ``num_classes`` outputs.

    ``config`` is a :class:`~sgrad.experiments.mnist.PaperConfig` with ``arch='cnn'``; its seed fixes
    the blocks' initial weights (the same for every method) and the generators'.  The network takes
    x: (batch, 1, side, side) with ``input_dim = side * side``.
    """
    dtype = np.dtype(config.dtype)
    side = image_side(input_dim)
    block_seeds, generator_seeds = (seq.spawn(config.depth) for seq in np.random.SeedSequence(config.seed).spawn(2))
    channels = (1,) + (config.channels,) * (config.depth - 1)
    layers: list[Any] = []
    for k, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:])):
        block: Any = conv_block(c_in, c_out, config.kernel_size, "relu", batchnorm=config.batchnorm,
                                update_rule=config.update_rule, seed=block_seeds[k], dtype=dtype)
        if k < POOLED_BLOCKS:
            block = Sequential(block.modules + [MaxPool2d(POOL, stride=POOL_STRIDE, padding=POOL_PADDING)])
        if decoupled:
            generator = ConvGenerator(c_out, condition_dim, hidden=_generator_hidden(config),
                                      kernel_size=config.kernel_size, batchnorm=config.generator_batchnorm,
                                      update_rule=config.update_rule, rng=np.random.default_rng(generator_seeds[k]),
                                      dtype=dtype)
            block = DNIBlock(block, generator, config.alpha, generator_alpha=config.generator_alpha)
        layers.append(block)
    last = map_sides(side, config.depth)[-1]
    top = Layer(config.channels * last * last, num_classes, "identity", init="xavier", update_rule=config.update_rule,
                seed=block_seeds[-1], dtype=dtype)
    layers.append(Sequential([Flatten((config.channels, last, last)), top]))
    return layers


def cnn_parameter_count(input_dim: int, config: Any, *, decoupled: bool, condition_dim: int, num_classes: int) -> int:
    """How many numbers :func:`build_cnn` 's network learns, counted without building it.

    A conv block learns C_in C_out k² weights and, with batch norm, gamma and beta (its
    convolution then has no bias), else a bias; the top layer its weights and a bias; a
    decoupled network adds a generator per block (hidden conv blocks alike, and an output
    convolution with a bias).
    """
    k2 = config.kernel_size ** 2

    def blocks(widths, batchnorm):
        return sum(a * b * k2 + (2 * b if batchnorm else b) for a, b in zip(widths[:-1], widths[1:]))

    side = map_sides(image_side(input_dim), config.depth)[-1]
    count = blocks((1,) + (config.channels,) * (config.depth - 1), config.batchnorm)
    count += config.channels * side * side * num_classes + num_classes
    if decoupled:
        widths = (config.channels + condition_dim, *_generator_hidden(config))
        count += (config.depth - 1) * (blocks(widths, config.generator_batchnorm)
                                       + widths[-1] * config.channels * k2 + config.channels)
    return count


def _generator_hidden(config):
    return tuple(config.generator_hidden) if config.generator == "mlp" else ()
