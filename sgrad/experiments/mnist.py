"""``sgrad paper``: the paper's MNIST experiments, fully connected nets with every hidden block decoupled.

A network of ``depth`` layers is ``depth - 1`` hidden blocks Linear→BatchNorm→ReLU
of width ``hidden``, then a linear top layer whose logits feed a softmax
cross-entropy.  The methods:

- ``backprop``: the true gradient reaches every block;
- ``no-bprop``: only the top layer learns;
- ``dni``: every hidden block is a :class:`~sgrad.DNIBlock`; generators learn
  from bootstrapped targets and only the top layer sees the true gradient;
- ``cdni``: as ``dni``, with the generators also given the one-hot label;
- ``synthetic-loss`` (fully connected nets only): each block's generator predicts a non-negative loss
  ℓ̂ = M(h, c) from h and the one-hot label c; the block descends dℓ̂/dh, and
  the generator regresses ℓ̂ onto the next block's predicted loss (the top
  one's onto the real loss).  ℓ̂ starts at ln 10 for every example, the loss
  of a uniform guess (see :func:`_generator` for why both matter);
- ``complete`` (fully connected nets only): the complete unlock.  Each interface has a gradient generator,
  as for ``dni``, and an input generator ĥ_k = I_k(x) (:class:`~sgrad.dni.synthetic_inputs.InputGenerator`,
  with the generators' hidden widths and batch norm) that predicts the interface's h_k from the image
  alone; the layers above an interface train on ĥ_k, so they wait for no forward pass below it, and I_k
  regresses onto the real h_k (:func:`~sgrad.dni.steps.complete_unlock_step`).  The test runs the real
  forward path;
- ``ccomplete``: as ``complete``, with both generators of each interface also given the one-hot label.

``arch='cnn'`` builds the paper's MNIST CNN instead (conv blocks and
convolutional generators: :mod:`sgrad.experiments.mnist_cnn`), and ``arch='peer-cnn'``
koz4k/dni-pytorch's MNIST CNN example (the same module).

:func:`run_grid` runs methods × depths for one seed and budget, caching each
finished cell in its output folder so that an interrupted grid resumes.
"""

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..argument_checks import check_bool, check_choice, check_integer, check_labels, check_widths
from ..atomic_files import atomic_write_text
from ..dni.decoupled import DNIBlock
from ..dni.generators import LinearGenerator, MLPGenerator, SyntheticLossGenerator
from ..dni.steps import complete_unlock_step, true_gradients_at_outputs
from ..dni.synthetic_inputs import InputGenerator
from ..nn.batchnorm import BatchNorm
from ..nn.blocks import Sequential, dense_block
from ..nn.layers import Layer
from ..nn.losses import softmax_cross_entropy
from ..training.batches import BatchOrder
from ..training.cell_cache import CellCache
from ..training.evaluation import accuracy
from ..training.loop import RunName, run_and_report, take_step, train_loop
from ..training.results_folder import check_out_dir, checkpoint_path, one_writer
from ..training.resume import fingerprint
from ..training.settings import (DECOUPLED, TARGETS, check_batch_fits, check_methods, check_network_size, check_settings,
                                 check_split, learning_rates)
from .mnist_cnn import (PEER_FIXED, build_cnn, build_peer_cnn, check_peer_cnn_settings, cnn_parameter_count,
                        image_side, peer_cnn_parameter_count)

PAPER_METHODS = ("backprop", "no-bprop", "dni", "cdni", "synthetic-loss", "complete", "ccomplete")
GENERATORS = ("linear", "mlp")
ARCHITECTURES = ("mlp", "cnn", "peer-cnn")
CONDITIONED = ("cdni", "synthetic-loss", "ccomplete")  # the methods whose generators are given the one-hot label
COMPLETE = ("complete", "ccomplete")  # the methods whose interfaces also predict their h_k from x (synthetic inputs)
WEIGHT_INITS = ("he", "pytorch")
GENERATOR_INITS = ("sgrad", "pytorch")  # how the generators of the fully connected nets start
INTERFACE_POSITIONS = ("after", "before")  # where on a block an interface sits: after its nonlinearity, or before
LOSS_REDUCTIONS = ("sum", "mean")
NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class PaperConfig:
    """One cell's settings.  The defaults are the public TensorFlow reproduction's 3-layer setting.

    depth : layers in all (hidden blocks + the top layer), 2 or more.
    hidden : width of every hidden block.
    batchnorm : Linear→BatchNorm→ReLU blocks (else Linear→ReLU).
    generator : 'mlp' (hidden layers ``generator_hidden``, batch-normalised if
        ``generator_batchnorm``) or 'linear'.  Output layers start at zero.
    iterations, batch_size : the budget: steps of ``batch_size`` examples.
    update_rule : 'sgd', 'momentum' or 'adam', for blocks and generators alike.
    alpha, generator_alpha : learning rates of the blocks and of the generators
        (``generator_alpha=None``: alpha).
    eval_every : test accuracy is measured every this many iterations, and at the end.
    dtype : 'float32' or 'float64'.
    seed : fixes the initial weights, the generators' and the batch order.
    arch : 'mlp' (the dense blocks above) or 'cnn' (the paper's MNIST CNN,
        :mod:`sgrad.experiments.mnist_cnn`: ``depth - 1`` conv blocks of ``channels``
        k×k filters, k = ``kernel_size``; ``hidden`` is then unused, and the generators are
        convolutional, ``generator_hidden`` their hidden channels), or 'peer-cnn', the MNIST CNN example
        of koz4k/dni-pytorch, whole: two valid 5×5 conv blocks with batch norm, 2×2 max pooling and 2-D
        dropout, one interface on the second block's pooled maps before its ReLU, a 320-50-10 top with
        dropout and batch-normalised logits, the peer's convolutional synthesizer (three 5×5 convolutions
        of 20 channels; cDNI adds the label's linear map at every position) and PyTorch's initial
        weights and biases (:func:`~sgrad.experiments.mnist_cnn.build_peer_cnn`).  It fixes every field
        that shapes a network (``depth``, ``hidden``, ``batchnorm``, ``channels``, ``kernel_size``,
        the generator's and the interfaces' fields, ``logit_batchnorm``, ``init``): leave them at their
        defaults.  The rest of the peer's setting is ``loss='mean', batch_size=64, alpha=1e-3`` and
        9,380 iterations (10 epochs of 938 batches) evaluated every 938.

    Where the decoupled methods put their interfaces, and what they descend (fully connected nets;
    the defaults are the paper's method as above, and ``interfaces=(2,), interface_position='before',
    loss='mean', logit_batchnorm=True, init='pytorch'`` is the MNIST MLP example of koz4k/dni-pytorch, and
    with ``batch_size=64, iterations=9380, generator_hidden=(256, 256), generator_batchnorm=False`` and
    the methods ``complete`` and ``ccomplete``, its full-unlock example; ``generator_init='pytorch'`` then
    starts the generators as its synthesizers start):

    interfaces : 'every' hidden block, or the numbers of the blocks that get one (1 is the lowest),
        e.g. ``(2,)``.  A block without an interface learns from the ĝ of the first interface above
        it, backpropagated through it; blocks above the highest interface join the top and learn
        from the true gradient.
    interface_position : 'after' the block's nonlinearity (ĝ = M(h_k) for h_k = relu(BN(z_k))) or
        'before' it (ĝ = M(u_k) for u_k = BN(z_k): the generator sees, and predicts the gradient
        of, what the ReLU takes in).
    generator_targets : 'bootstrap' (the method: each generator regresses onto the ĝ of the
        interface above, backpropagated to it) or 'true' (a teaching option: onto the true dL/dh_k,
        which costs a forward and backward pass on copies every step).  With one interface the two
        are the same.
    loss : the softmax cross-entropy 'sum'med over the batch (see :func:`summed_cross_entropy`)
        or its 'mean'.  The synthetic loss's step always descends the mean.
    logit_batchnorm : batch-normalise the 10 logits (the top layer is then Linear without a bias,
        then BatchNorm).
    init : the weights of the blocks and the top: 'he' (He normal for the blocks, Xavier for the
        top) or 'pytorch' (U(-1/√fan_in, 1/√fan_in) for all, PyTorch's default for ``nn.Linear``);
        also the hidden layers of the input generators of ``complete`` and ``ccomplete``, which feed
        the layers above their interface as the blocks do.
        Behind batch norm a block's output does not depend on its weights' scale, but Adam's steps
        have a fixed size, so smaller weights learn faster.
    generator_init : how the generators (gradient and input generators) start: 'sgrad' (the gradient
        generators' hidden weights He normal, the input generators' as ``init``, every bias and the
        output layers' weights zero, so ĝ = 0 and ĥ = 0 at first) or 'pytorch' (koz4k/dni-pytorch's
        synthesizer: every layer as PyTorch's ``nn.Linear``, weights and biases U(-1/√fan_in, 1/√fan_in),
        the label through a Linear of its own with fan_in = 10, the output layers' weights zero and their
        biases uniform: :func:`~sgrad.dni.generators.generator_net`).
    """

    depth: int = 3
    hidden: int = 256
    batchnorm: bool = True
    generator: str = "mlp"
    generator_hidden: tuple = (1024, 1024)
    generator_batchnorm: bool = True
    iterations: int = 25_000
    batch_size: int = 256
    update_rule: str = "adam"
    alpha: float = 3e-5
    generator_alpha: float | None = None
    eval_every: int = 500
    dtype: str = "float32"
    seed: int = 0
    arch: str = "mlp"
    channels: int = 64
    kernel_size: int = 5
    interfaces: str | tuple = "every"
    interface_position: str = "after"
    generator_targets: str = "bootstrap"
    loss: str = "sum"
    logit_batchnorm: bool = False
    init: str = "he"
    generator_init: str = "sgrad"

    def __post_init__(self) -> None:
        check_settings(self, {
            "depth": check_integer(self.depth, "depth", minimum=2),
            "hidden": check_integer(self.hidden, "hidden"),
            "batchnorm": check_bool(self.batchnorm, "batchnorm"),
            "generator": check_choice(self.generator, "generator", GENERATORS),
            "generator_hidden": check_widths(self.generator_hidden, "generator_hidden"),
            "generator_batchnorm": check_bool(self.generator_batchnorm, "generator_batchnorm"),
            "iterations": check_integer(self.iterations, "iterations"),
            "eval_every": check_integer(self.eval_every, "eval_every"),
            "arch": check_choice(self.arch, "arch", ARCHITECTURES),
            "channels": check_integer(self.channels, "channels"),
            "kernel_size": check_integer(self.kernel_size, "kernel_size"),
            "interfaces": _check_interfaces(self.interfaces, self.depth),
            "interface_position": check_choice(self.interface_position, "interface_position", INTERFACE_POSITIONS),
            "generator_targets": check_choice(self.generator_targets, "generator_targets", TARGETS),
            "loss": check_choice(self.loss, "loss", LOSS_REDUCTIONS),
            "logit_batchnorm": check_bool(self.logit_batchnorm, "logit_batchnorm"),
            "init": check_choice(self.init, "init", WEIGHT_INITS),
            "generator_init": check_choice(self.generator_init, "generator_init", GENERATOR_INITS),
        })
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, so that padding keeps the maps' size; got {self.kernel_size}. "
                             f"Use {self.kernel_size + 1} or {self.kernel_size - 1}")
        mlp_only = {"interfaces": "every", "interface_position": "after", "logit_batchnorm": False, "init": "he",
                    "generator_init": "sgrad"}
        changed = [name for name, default in mlp_only.items() if getattr(self, name) != default]
        if self.arch == "peer-cnn":
            check_peer_cnn_settings(self)
        if self.arch == "cnn" and changed:
            verb = "shapes" if len(changed) == 1 else "shape"
            raise ValueError(f"{', '.join(changed)} {verb} the fully connected nets only (arch='mlp'); the CNN has an "
                             f"interface after every conv block. Leave {' and '.join(changed)} at "
                             f"{', '.join(repr(mlp_only[name]) for name in changed)}, or use arch='mlp'")

    @property
    def interface_blocks(self) -> tuple[int, ...]:
        """The numbers of the hidden blocks with an interface (1 is the lowest)."""
        if isinstance(self.interfaces, str):  # 'every', the one name __post_init__ lets through
            return tuple(range(1, self.depth))
        return self.interfaces


def build_network(method: str, input_dim: int, config: PaperConfig) -> list[Any]:
    """Hidden blocks (DNI blocks at the interfaces, for the decoupled methods) and a linear top layer with 10 outputs.

    The blocks' initial weights depend only on the seed and the widths, never on the method, nor on
    where the interfaces are; the generator of block k depends only on the seed, k and its settings.
    For the methods without generators, each hidden block is a module of the list.
    """
    _check_arch(method, config)
    if config.arch == "peer-cnn":
        return build_peer_cnn(input_dim, config, decoupled=method in DECOUPLED,
                              condition_dim=NUM_CLASSES if method in CONDITIONED else 0, num_classes=NUM_CLASSES)
    if config.arch == "cnn":
        return build_cnn(method, input_dim, config, decoupled=method in DECOUPLED,
                         condition_dim=NUM_CLASSES if method in CONDITIONED else 0, num_classes=NUM_CLASSES)
    dtype = np.dtype(config.dtype)
    block_seeds, generator_seeds = (seq.spawn(config.depth) for seq in np.random.SeedSequence(config.seed).spawn(2))
    widths = (input_dim,) + (config.hidden,) * (config.depth - 1)
    # Each part as a list of modules: a hidden block's Linear→BatchNorm→ReLU, then the top's.
    parts: list[list[Any]] = [dense_block(fan_in, fan_out, "relu", batchnorm=config.batchnorm, init=config.init,
                                          update_rule=config.update_rule, seed=block_seeds[k], dtype=dtype).modules
                              for k, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:]))]
    top = Layer(widths[-1], NUM_CLASSES, "identity", bias=not config.logit_batchnorm,
                init="xavier" if config.init == "he" else config.init, update_rule=config.update_rule,
                seed=block_seeds[-1], dtype=dtype)
    parts.append([top, BatchNorm(NUM_CLASSES, update_rule=config.update_rule, dtype=dtype)]
                 if config.logit_batchnorm else [top])
    if config.interface_position == "before":  # each block ends at its pre-activation; its ReLU opens the next part
        for below, above in zip(parts[:-1], parts[1:]):
            above.insert(0, below.pop())
    if method not in DECOUPLED:
        return [_chain(part) for part in parts]
    layers: list[Any] = []
    pending: list[Any] = []
    for k, part in enumerate(parts[:-1]):
        pending += part
        if k + 1 in config.interface_blocks:
            generator = _generator(method, config.hidden, config, np.random.default_rng(generator_seeds[k]), dtype)
            layers.append(DNIBlock(_chain(pending), generator, config.alpha, generator_alpha=config.generator_alpha))
            pending = []
    layers.append(_chain(pending + parts[-1]))  # the blocks above the highest interface learn with the top
    return layers


def _chain(modules):
    """One module for a list of them: the module itself if it is alone, else a Sequential."""
    return modules[0] if len(modules) == 1 else Sequential(modules)


def parameter_count(method: str, input_dim: int, config: PaperConfig) -> int:
    """How many numbers :func:`build_network` 's network for ``method`` learns, counted without building it.

    A dense block learns its weights and, with batch norm, gamma and beta (its
    linear map then has no bias), else a bias; the top layer has weights and a
    bias (gamma and beta instead with ``logit_batchnorm``); a decoupled method adds a
    generator per interface, whose output layer predicts ĝ (a loss, one number, for 'synthetic-loss').  A CNN is counted by
    :func:`~sgrad.experiments.mnist_cnn.cnn_parameter_count`.
    """
    _check_arch(method, config)
    if config.arch == "peer-cnn":
        return peer_cnn_parameter_count(input_dim, decoupled=method in DECOUPLED,
                                        condition_dim=NUM_CLASSES if method in CONDITIONED else 0,
                                        num_classes=NUM_CLASSES)
    if config.arch == "cnn":
        return cnn_parameter_count(input_dim, config, decoupled=method in DECOUPLED,
                                   condition_dim=NUM_CLASSES if method in CONDITIONED else 0, num_classes=NUM_CLASSES)
    def blocks(widths, batchnorm):
        return sum(a * b + (2 * b if batchnorm else b) for a, b in zip(widths[:-1], widths[1:]))

    count = blocks((input_dim,) + (config.hidden,) * (config.depth - 1), config.batchnorm)
    count += config.hidden * NUM_CLASSES + (2 * NUM_CLASSES if config.logit_batchnorm else NUM_CLASSES)
    if method in DECOUPLED:
        widths = (config.hidden + (NUM_CLASSES if method in CONDITIONED else 0),
                  *(config.generator_hidden if config.generator == "mlp" else ()))
        outputs = 1 if method == "synthetic-loss" else config.hidden
        generator = blocks(widths, config.generator_batchnorm) + widths[-1] * outputs + outputs
        count += len(config.interface_blocks) * generator
    if method in COMPLETE:
        widths = (input_dim + (NUM_CLASSES if method in CONDITIONED else 0),
                  *(config.generator_hidden if config.generator == "mlp" else ()))
        generator = blocks(widths, config.generator_batchnorm) + widths[-1] * config.hidden + config.hidden
        count += len(config.interface_blocks) * generator
    return count


def build_input_generators(method: str, input_dim: int, config: PaperConfig) -> list[InputGenerator]:
    """The input generators I_k of ``complete`` and ``ccomplete``, one per interface (none for other methods).

    I_k predicts h_k, the output of the interface's block (``hidden`` wide), from x (``input_dim``
    wide) and, for ``ccomplete``, the one-hot label: hidden widths and batch norm as the gradient
    generators' (``generator_hidden`` for 'mlp', none for 'linear'), and the start ``generator_init`` says (for
    'sgrad', hidden weights as ``init`` and zero biases and output weights).  Its initial weights depend only on
    the seed, the interface's number and its settings.
    """
    _check_arch(method, config)
    if method not in COMPLETE:
        return []
    seeds = np.random.SeedSequence(config.seed).spawn(4)[3].spawn(config.depth)
    hidden = config.generator_hidden if config.generator == "mlp" else ()
    pytorch = config.generator_init == "pytorch"
    return [InputGenerator(input_dim, config.hidden, NUM_CLASSES if method in CONDITIONED else 0, hidden=hidden,
                           batchnorm=config.generator_batchnorm, init="pytorch" if pytorch else config.init,
                           bias_init="pytorch" if pytorch else "zeros", update_rule=config.update_rule,
                           seed=seeds[k - 1], dtype=np.dtype(config.dtype))
            for k in config.interface_blocks]


def check_grid(methods: Sequence[str], depths: Sequence[int], config: PaperConfig, *, input_dim: int,
               train_examples: int | None, checkpoint_every: int | None = None,
               out_dir: str | os.PathLike[str] | None = None) -> list[PaperConfig]:
    """Check a grid before any work: each depth, the batch against the training set, each network's size, the folder.

    Returns the config of each depth.  :func:`run_grid` calls it; the command
    line calls it before it loads MNIST (``input_dim`` 784, and
    ``train_examples=None`` when the archive's size is not known yet).
    """
    if isinstance(depths, (str, bytes)) or not isinstance(depths, Sequence) or not depths:
        raise TypeError(f"depths must be a non-empty sequence of depths such as (3, 4); got {depths!r}")
    configs = [dataclasses.replace(config, depth=depth) for depth in depths]
    if train_examples is not None:
        check_batch_fits(config.batch_size, train_examples)
    for cell_config in configs:
        for method in methods:
            check_network_size(parameter_count(method, input_dim, cell_config), cell_config.dtype,
                               cell_config.update_rule, f"the {method} network of depth {cell_config.depth}")
    if checkpoint_every is not None:
        check_integer(checkpoint_every, "checkpoint_every")
    check_out_dir(out_dir)
    return configs


def _check_arch(method, config):
    check_choice(method, "method", PAPER_METHODS)
    if config.arch != "mlp" and method == "synthetic-loss":
        raise ValueError("the synthetic loss is built for fully connected nets only (arch='mlp'); "
                         f"got arch={config.arch!r}. Leave 'synthetic-loss' out of the methods, or use arch='mlp'")
    if config.arch != "mlp" and method in COMPLETE:
        raise ValueError(f"{method!r} (the complete unlock) is built for fully connected nets only (arch='mlp'); got "
                         f"arch={config.arch!r}. Leave {method!r} out of the methods, or use arch='mlp'")
    if method in COMPLETE and config.generator_targets == "true":
        raise ValueError(f"{method!r} regresses each gradient generator at the synthetic input, onto the gradient "
                         "that comes back there, and generator_targets='true' would ask for the gradient at the real "
                         f"h_k instead. Leave {method!r} out of the methods, or use generator_targets='bootstrap'")
    if method == "synthetic-loss" and config.generator_targets == "true":
        raise ValueError("generator_targets='true' regresses generators onto true gradients, but the synthetic "
                         "loss's generators predict losses. Leave 'synthetic-loss' out of the methods, or use "
                         "generator_targets='bootstrap'")


def _check_interfaces(interfaces, depth):
    """'every', or the hidden-block numbers as a tuple of increasing ints from 1 to depth - 1."""
    if interfaces == "every":
        return interfaces
    example = f"'every', or the numbers of hidden blocks from 1 to {depth - 1} such as ({depth - 1},)"
    if isinstance(interfaces, (str, bytes)) or not isinstance(interfaces, Sequence) or not interfaces:
        raise ValueError(f"interfaces must be {example}; got {interfaces!r}")
    blocks = tuple(check_integer(k, "every block number in interfaces") for k in interfaces)
    if blocks[-1] > depth - 1 or list(blocks) != sorted(set(blocks)):
        raise ValueError(f"interfaces must be {example}, each once and in increasing order; got {interfaces!r} "
                         f"at depth {depth}")
    return blocks


def _generator(method, width, config, rng, dtype):
    """The generator of one hidden block of width ``width`` for ``method``.

    The synthetic loss's ℓ̂ = M(h, c) sees the label, and starts at ln 10 (the loss
    of a uniform guess).  Without the label, ℓ̂ can only learn E[ℓ | h], whose
    gradient does not depend on which class this example is.
    """
    condition_dim = NUM_CLASSES if method in CONDITIONED else 0
    hidden = config.generator_hidden if config.generator == "mlp" else ()
    bias_init = "pytorch" if config.generator_init == "pytorch" else "zeros"
    if config.generator == "linear" and method != "synthetic-loss":
        return LinearGenerator(width, condition_dim, bias_init=bias_init, update_rule=config.update_rule, rng=rng,
                               dtype=dtype)
    options = {"hidden": hidden, "batchnorm": config.generator_batchnorm,
               "init": "he" if bias_init == "zeros" else "pytorch", "bias_init": bias_init,
               "update_rule": config.update_rule, "rng": rng, "dtype": dtype}
    if method == "synthetic-loss":
        return SyntheticLossGenerator(width, condition_dim, initial_loss=float(np.log(NUM_CLASSES)), **options)
    return MLPGenerator(width, condition_dim, **options)


def mean_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Softmax cross-entropy averaged over the batch, and its gradient (``loss='mean'``)."""
    return softmax_cross_entropy(logits, y, reduction="mean")


def summed_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Softmax cross-entropy summed over the batch, and its gradient: what every paper-scale step descends.

    Summed, not averaged: Adam's step does not change when the loss is scaled,
    so backprop and the blocks learn the same either way, but the generators
    then regress onto per-example gradients dℓ_i/dh_i (entries of order 0.01
    to 1) instead of batch means 256 times smaller.  Against targets that
    small, each Adam step of size alpha moves a generator's output by more
    than the target itself, and its fit stalls (the README's paper-scale
    section has the measurement).
    """
    return softmax_cross_entropy(logits, y, reduction="sum")


def train_paper(method: str, data: Sequence[np.ndarray], config: PaperConfig | None = None, *,
                progress: Callable[[str], None] | None = None, checkpoint: str | os.PathLike[str] | None = None,
                checkpoint_every: int | None = None) -> dict[str, Any]:
    """Train ``method`` on ``data = (x_train, y_train, x_test, y_test)``; returns its history.

    x arrays: (n, 784) floats (shaped (n, 1, 28, 28) inside for the CNNs); y arrays: integer labels (n,).  The history
    holds ``iteration`` and ``test_accuracy`` (every ``eval_every`` iterations
    and at the end), ``train_loss`` (the mean loss over each such span) and
    ``wall_time`` (seconds, evaluation included, summed over resumed sessions).

    ``checkpoint`` (a path to an .npz file) and ``checkpoint_every`` work as in
    :func:`sgrad.train`: the state is saved every ``checkpoint_every``
    iterations and at the end, and a checkpoint of this run (same method, data
    and settings, ``iterations`` aside) is carried on from, bit for bit.

    Raises :class:`~sgrad.TrainingDiverged` if a number turns non-finite; its
    history then holds ``diverged_at_iteration``.
    """
    config = PaperConfig() if config is None else config
    check_choice(method, "method", PAPER_METHODS)
    check_split(data, config.batch_size, config.dtype, _check_labels)
    x_train, y_train, x_test, y_test = data
    check_network_size(parameter_count(method, x_train.shape[1], config), config.dtype, config.update_rule,
                       f"the {method} network of depth {config.depth}")
    # In the network's dtype: float64 data would turn every product of a float32 network into float64.
    x_train, x_test = np.asarray(x_train, dtype=config.dtype), np.asarray(x_test, dtype=config.dtype)
    if config.arch != "mlp":  # rows of pixels as one-channel images (n, 1, side, side)
        side = image_side(x_train.shape[1])
        x_train, x_test = x_train.reshape(-1, 1, side, side), x_test.reshape(-1, 1, side, side)
    onehot = np.eye(NUM_CLASSES, dtype=config.dtype)
    layers = build_network(method, data[0].shape[1], config)
    input_generators = build_input_generators(method, data[0].shape[1], config)
    loss_fn = summed_cross_entropy if config.loss == "sum" else mean_cross_entropy
    true_targets = method in DECOUPLED and config.generator_targets == "true"

    def train_step(indices, history):
        x, y = x_train[indices], onehot[y_train[indices]]
        if method in COMPLETE:
            input_alpha = config.alpha if config.generator_alpha is None else config.generator_alpha
            loss, _, _ = complete_unlock_step(layers, input_generators, x, y, loss_fn, config.alpha, input_alpha,
                                              condition=y if method in CONDITIONED else None)
            return loss / len(x) if config.loss == "sum" else loss
        targets = true_gradients_at_outputs(layers, x, y, loss_fn) if true_targets else None
        loss, _ = take_step(method, layers, x, y, loss_fn, config.alpha, targets=targets)
        # The synthetic-loss step gives the mean whatever the loss.
        return loss / len(x) if config.loss == "sum" and method != "synthetic-loss" else loss

    def evaluate(iteration, losses, history):
        history["iteration"].append(iteration)
        history["test_accuracy"].append(accuracy(layers, x_test, y_test))
        history["train_loss"].append(float(np.mean(losses)))
        return (f"iteration {iteration}/{config.iterations}  train loss {history['train_loss'][-1]:.4f}  "
                f"test accuracy {100 * history['test_accuracy'][-1]:.2f}%  ({history['wall_time']:.0f} s)")

    run = {"trainer": "sgrad.experiments.mnist.train_paper", "method": method, "data": fingerprint(*data),
           "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "iterations"}}
    history = new_history(method, config)
    names = RunName(f"{method} (depth {config.depth})", f"[{method}, depth {config.depth}]",
                    learning_rates(config, method in DECOUPLED), unit="iteration")
    rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(3)[2])
    return train_loop(layers + input_generators, train_step, evaluate, steps=config.iterations, eval_every=config.eval_every,
                      batches=BatchOrder(len(x_train), config.batch_size, rng), history=history, names=names, run=run,
                      checkpoint=checkpoint, checkpoint_every=checkpoint_every, progress=progress)


def new_history(method: str, config: PaperConfig) -> dict[str, Any]:
    """A fresh history of :func:`train_paper` (what a cell's history holds, at least)."""
    return {"method": method, "depth": config.depth, "iteration": [], "test_accuracy": [], "train_loss": [],
            "wall_time": 0.0}


def run_grid(data: Sequence[np.ndarray], *, methods: str | Sequence[str] = PAPER_METHODS, depths: Sequence[int] = (3,),
             config: PaperConfig | None = None, out_dir: str | os.PathLike[str] | None = None,
             progress: Callable[[str], None] | None = None,
             checkpoint_every: int | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Train every method at every depth; returns ``{(method, depth): history}``.

    Everything is checked before the first cell trains (:func:`check_grid`).
    With ``out_dir``, each finished cell is saved there at once (``cells/<method>-depth<d>.json``,
    with its settings and the code that made it, :func:`sgrad.nn.checkpoint.made_by`); a later call
    with the same settings and the same code loads it instead of training again, so an
    interrupted grid resumes.  With ``checkpoint_every``
    too, the cell in training is checkpointed every that many iterations
    (``checkpoints/<method>-depth<d>.npz``), so an interrupted cell carries on
    mid-way, bit for bit (see :func:`train_paper`).  A cell that diverges
    keeps what it recorded, with ``'diverged'`` (the reason), and the grid
    carries on.  At the end the folder also gets ``results.md`` (final test
    accuracy), ``paper.png`` and ``histories.json``.
    """
    config = PaperConfig() if config is None else config
    methods = check_methods(methods, PAPER_METHODS)
    check_split(data, config.batch_size, config.dtype, _check_labels)
    configs = check_grid(methods, depths, config, input_dim=data[0].shape[1], train_examples=len(data[0]),
                         checkpoint_every=checkpoint_every, out_dir=out_dir)
    # A cached cell is reused only for the same settings and the same data.
    data_tag = {"train_examples": len(data[0]), "test_examples": len(data[2]),
                "labels_sha256": hashlib.sha256(np.ascontiguousarray(data[1]).tobytes()).hexdigest()}
    with one_writer(out_dir):  # one run at a time writes to a folder
        cells, results = CellCache(out_dir, progress), {}
        for cell_config in configs:
            depth = cell_config.depth
            for method in methods:
                label, name = f"[{method}, depth {depth}]", _cell_name(method, cell_config)
                settings = {"method": method, "config": _relevant(method, dataclasses.asdict(cell_config)), "data": data_tag}
                cached = cells.load(name, settings, label, {"history": new_history(method, cell_config)})
                if cached is not None:
                    results[(method, depth)] = cached["history"]
                    continue
                run = functools.partial(train_paper, method, data, cell_config, progress=progress,
                                        checkpoint=checkpoint_path(out_dir, name, checkpoint_every),
                                        checkpoint_every=checkpoint_every)
                results[(method, depth)] = run_and_report(run, label, progress)
                cells.save(name, settings, history=results[(method, depth)])
        if out_dir is not None:
            write_grid(results, out_dir, config)
    return results


def results_table(results: Mapping[tuple[str, int], Mapping[str, Any]]) -> str:
    """Markdown: one row per method, one column per depth, the final test accuracy (and wall time)."""
    methods = list(dict.fromkeys(m for m, _ in results))
    depths = sorted({d for _, d in results})
    rows = ["| method | " + " | ".join(f"{d} layers" for d in depths) + " |",
            "|---|" + "---:|" * len(depths)]
    for method in methods:
        cells = []
        for depth in depths:
            h = results.get((method, depth))
            if h is None:
                cells.append("")
            elif h.get("diverged"):
                cells.append(f"diverged at iteration {h.get('diverged_at_iteration', '?')}")
            else:
                cells.append(f"{100 * h['test_accuracy'][-1]:.2f}% ({h['wall_time']:.0f} s)")
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def write_grid(results: Mapping[tuple[str, int], Mapping[str, Any]], out_dir: str | os.PathLike[str],
               config: PaperConfig) -> None:
    """Write ``results.md``, ``paper.png`` and ``histories.json`` for a finished grid."""
    from .plotting import plot_paper

    out = pathlib.Path(out_dir)
    atomic_write_text(out / "results.md", results_table(results) + "\n")
    atomic_write_text(out / "histories.json", json.dumps(
        {"config": dataclasses.asdict(config), "cells": [dict(h, method=m, depth=d) for (m, d), h in results.items()]}))
    plot_paper(results, out / "paper.png")


def _check_labels(y_train, y_test):
    for name, y in (("y_train", y_train), ("y_test", y_test)):
        check_labels(y, name, NUM_CLASSES)


def _cell_name(method, config):
    """'<method>-depth<d>' for a fully connected cell, '<method>-cnn-depth<d>' for a CNN one: never the same file."""
    return f"{method}-{config.arch}-depth{config.depth}" if config.arch != "mlp" else f"{method}-depth{config.depth}"


def _relevant(method, settings):
    """The settings a cell depends on: backprop and no-bprop have no generators, so theirs don't count.

    Nor does a fully connected net depend on the CNN's channels and kernel size, nor a CNN on ``hidden``, nor
    the peer's CNN on any field it fixes but ``depth`` (in the cell's name).
    """
    arch = settings.get("arch", "mlp")
    unused = ("channels", "kernel_size") if arch == "mlp" else ("hidden",) if arch == "cnn" else PEER_FIXED[1:]
    settings = {k: v for k, v in settings.items() if k not in unused}
    if settings.get("generator_init") == "sgrad":  # the start every cell had before there was a choice
        del settings["generator_init"]
    if method not in DECOUPLED:
        return {k: v for k, v in settings.items() if not k.startswith("generator") and k != "interfaces"}
    return settings
