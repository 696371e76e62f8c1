"""The convolutional nets of ``sgrad paper``: the paper's MNIST CNN (``--arch cnn``), with convolutional generators,
and koz4k/dni-pytorch's MNIST CNN example (``--arch peer-cnn``, at the end of the file).

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

import dataclasses
import math
from typing import Any

import numpy as np

from ..dni.decoupled import DNIBlock
from ..dni.generators import ConvGenerator
from ..nn.batchnorm import BatchNorm
from ..nn.blocks import Activation, Sequential
from ..nn.conv import Activation2d, BatchNorm2d, Conv2d, Flatten, MaxPool2d, conv_block
from ..nn.dropout import Dropout, Dropout2d
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


# ---------------------------------------------------------------- arch='peer-cnn'
#
# koz4k/dni-pytorch's MNIST CNN example (examples/mnist-cnn/main.py), layer for layer.  Its one interface sits
# on the second conv block's pooled maps, before the ReLU that opens the top; every layer starts as PyTorch starts
# it.  Its convolutions and dense layers keep a bias in front of batch norm (PyTorch's default): batch norm
# subtracts it again, so it learns nothing, but it is built, and counted, as the peer builds it.

PEER_CHANNELS = (1, 10, 20)  # the two valid 5×5 convolutions: 1 → 10 → 20 channels
PEER_KERNEL, PEER_POOL, PEER_DROPOUT = 5, 2, 0.5
PEER_HIDDEN = 50  # the dense layer between the maps and the 10 logits
PEER_SYNTHESIZER = (20, 20)  # the synthesizer's hidden channels, each a 5×5 convolution padded by 2
# The PaperConfig fields that shape a network; the peer's example fixes all of them.
PEER_FIXED = ("depth", "hidden", "batchnorm", "channels", "kernel_size", "generator", "generator_hidden",
              "generator_batchnorm", "interfaces", "interface_position", "logit_batchnorm", "init", "generator_init")


def check_peer_cnn_settings(config: Any) -> None:
    """Refuse a PaperConfig with ``arch='peer-cnn'`` that changes a field of :data:`PEER_FIXED` from its default."""
    changed = {field.name: field.default for field in dataclasses.fields(config)
               if field.name in PEER_FIXED and getattr(config, field.name) != field.default}
    if changed:
        verb = "shapes" if len(changed) == 1 else "shape"
        raise ValueError(f"{', '.join(changed)} {verb} sgrad's own networks, but arch='peer-cnn' is koz4k/dni-pytorch's "
                         f"MNIST CNN example whole, its layers, synthesizer and interface fixed; leave "
                         f"{' and '.join(changed)} at {', '.join(repr(value) for value in changed.values())}, "
                         f"or use arch='cnn'")


def peer_map_side(side: int) -> int:
    """The side of the maps at the interface: each block's valid 5×5 convolution takes 4, its pooling halves."""
    out = side
    for _ in PEER_CHANNELS[1:]:
        out = (out - PEER_KERNEL + 1) // PEER_POOL
    if out < 1:
        raise ValueError(f"arch='peer-cnn' takes images of at least 16 x 16 pixels, for its two 5x5 convolutions "
                         f"and poolings; got rows of {side} x {side}; use MNIST's 28 x 28")
    return out


def build_peer_cnn(input_dim: int, config: Any, *, decoupled: bool, condition_dim: int, num_classes: int) -> list[Any]:
    """The peer's CNN: ``[below, above]``, with ``below`` a DNIBlock if ``decoupled``.  Takes x: (batch, 1, 28, 28).

    below: Conv 5×5 → BatchNorm2d → MaxPool 2 → ReLU → Conv 5×5 → BatchNorm2d → Dropout2d → MaxPool 2,
    whose output h (batch, 20, 4, 4) is where the interface sits; above: ReLU → Flatten → Linear 320 → 50 →
    BatchNorm → ReLU → Dropout → Linear 50 → 10 → BatchNorm, the logits.  The generator is the peer's
    synthesizer: ĝ = Conv(relu(Conv(relu(Conv(h) + c V + a)))), three 5×5 convolutions of 20 channels padded
    by 2, the last with zero weights; c V + a (cDNI only) the label's linear map, added at every position.
    The seed fixes ``below`` and ``above`` (the same for every method) and, apart, the generator.
    """
    dtype = np.dtype(config.dtype)
    block_seeds, generator_seeds = (seq.spawn(2) for seq in np.random.SeedSequence(config.seed).spawn(2))
    pytorch = {"init": "pytorch", "bias_init": "pytorch", "update_rule": config.update_rule, "dtype": dtype}
    norm = {"update_rule": config.update_rule, "dtype": dtype}
    (c_in, c_mid, channels), k = PEER_CHANNELS, PEER_KERNEL
    rng = np.random.default_rng(block_seeds[0])
    below: Any = Sequential([
        Conv2d(c_in, c_mid, k, rng=rng, **pytorch), BatchNorm2d(c_mid, **norm), MaxPool2d(PEER_POOL),
        Activation2d("relu"),
        Conv2d(c_mid, channels, k, rng=rng, **pytorch), BatchNorm2d(channels, **norm),
        Dropout2d(PEER_DROPOUT, rng=rng), MaxPool2d(PEER_POOL)])  # h: the interface, before the top's ReLU
    side = peer_map_side(image_side(input_dim))
    rng = np.random.default_rng(block_seeds[1])
    above = Sequential([Activation2d("relu"), Flatten((channels, side, side)),
                        Layer(channels * side * side, PEER_HIDDEN, "identity", rng=rng, **pytorch),
                        BatchNorm(PEER_HIDDEN, **norm), Activation("relu"), Dropout(PEER_DROPOUT, rng=rng),
                        Layer(PEER_HIDDEN, num_classes, "identity", rng=rng, **pytorch), BatchNorm(num_classes, **norm)])
    if decoupled:
        generator = ConvGenerator(channels, condition_dim, hidden=PEER_SYNTHESIZER, kernel_size=PEER_KERNEL,
                                  batchnorm=False, condition="linear", init="pytorch", update_rule=config.update_rule,
                                  rng=np.random.default_rng(generator_seeds[1]), dtype=dtype)
        below = DNIBlock(below, generator, config.alpha, generator_alpha=config.generator_alpha)
    return [below, above]


def peer_cnn_parameter_count(input_dim: int, *, decoupled: bool, condition_dim: int, num_classes: int) -> int:
    """How many numbers :func:`build_peer_cnn` 's network learns, counted from its layers' shapes.

    A convolution learns C_in C_out k² weights and C_out biases, a dense layer n_in n_out and n_out, a batch
    norm gamma and beta; the synthesizer is three 20 → 20 convolutions and, conditioned, the label's map.
    """
    def conv(c_in, c_out, k):
        return c_in * c_out * k * k + c_out

    def dense(n_in, n_out):
        return n_in * n_out + n_out

    side, channels = peer_map_side(image_side(input_dim)), PEER_CHANNELS[-1]
    count = sum(conv(a, b, PEER_KERNEL) + 2 * b for a, b in zip(PEER_CHANNELS[:-1], PEER_CHANNELS[1:]))
    count += dense(channels * side * side, PEER_HIDDEN) + 2 * PEER_HIDDEN + dense(PEER_HIDDEN, num_classes) + 2 * num_classes
    if decoupled:
        widths = (channels, *PEER_SYNTHESIZER, channels)
        count += sum(conv(a, b, PEER_KERNEL) for a, b in zip(widths[:-1], widths[1:]))
        count += dense(condition_dim, PEER_SYNTHESIZER[0]) if condition_dim else 0
    return count
