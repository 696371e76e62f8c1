"""The paper's MNIST experiments: fully connected nets, every hidden block decoupled, and a depth sweep.

A network of ``depth`` layers is ``depth - 1`` hidden blocks Linear→BatchNorm→ReLU
of width ``hidden``, then a linear top layer whose logits feed a softmax
cross-entropy.  The methods:

- ``backprop``: the true gradient reaches every block;
- ``no-bprop``: only the top layer learns;
- ``dni``: every hidden block is a :class:`~sgrad.DNIBlock`; generators learn
  from bootstrapped targets and only the top layer sees the true gradient;
- ``cdni``: as ``dni``, with the generators also given the one-hot label;
- ``synthetic-loss``: each block's generator predicts a non-negative loss ℓ̂
  from h; the block descends dℓ̂/dh, and the generator regresses ℓ̂ onto the
  next block's predicted loss (the top one's onto the real loss).

:func:`run_grid` runs methods × depths for one seed and budget, caching each
finished cell in its output folder so that an interrupted grid resumes.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from . import _validation
from .blocks import dense_block
from .checkpoint import fingerprint, resume_run, save_run
from .dni import DNIBlock
from .generators import LinearGenerator, MLPGenerator, SyntheticLossGenerator
from .layers import Layer
from .losses import softmax_cross_entropy
from .training import DTYPES, TrainingDiverged, backprop_step, dni_step

PAPER_METHODS = ("backprop", "no-bprop", "dni", "cdni", "synthetic-loss")
GENERATORS = ("linear", "mlp")
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
    alpha, generator_alpha : Adam learning rates of the blocks and of the generators
        (``generator_alpha=None``: alpha).
    eval_every : test accuracy is measured every this many iterations, and at the end.
    dtype : 'float32' or 'float64'.
    seed : fixes the initial weights, the generators' and the batch order.
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

    def __post_init__(self) -> None:
        _validation.check_positive_int(self.depth, "depth", minimum=2)
        _validation.check_positive_int(self.hidden, "hidden")
        _validation.check_positive_int(self.iterations, "iterations")
        _validation.check_positive_int(self.batch_size, "batch_size")
        _validation.check_positive_int(self.eval_every, "eval_every")
        _validation.check_positive_int(self.seed, "seed", minimum=0)
        _validation.check_learning_rate(self.alpha, "alpha")
        if self.generator_alpha is not None:
            _validation.check_learning_rate(self.generator_alpha, "generator_alpha")
        if self.generator not in GENERATORS:
            raise ValueError(f"unknown generator {self.generator!r}; choose one of {', '.join(GENERATORS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be 'float32' or 'float64'; got {self.dtype!r}")
        object.__setattr__(self, "generator_hidden", tuple(int(w) for w in self.generator_hidden))


def build_network(method: str, input_dim: int, config: PaperConfig) -> list[Any]:
    """Hidden blocks (DNI blocks for the decoupled methods) and a linear top layer with 10 outputs.

    The blocks' initial weights depend only on the seed and the widths, never on the method.
    """
    _check_method(method)
    dtype = np.dtype(config.dtype)
    block_seeds, generator_seeds = (seq.spawn(config.depth) for seq in np.random.SeedSequence(config.seed).spawn(2))
    widths = (input_dim,) + (config.hidden,) * (config.depth - 1)
    layers: list[Any] = []
    for k, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        block: Any = dense_block(fan_in, fan_out, "relu", batchnorm=config.batchnorm, update_rule=config.update_rule,
                            seed=block_seeds[k], dtype=dtype)
        if method in ("dni", "cdni", "synthetic-loss"):
            generator = _generator(method, fan_out, config, np.random.default_rng(generator_seeds[k]), dtype)
            block = DNIBlock(block, generator, config.alpha, generator_alpha=config.generator_alpha)
        layers.append(block)
    layers.append(Layer(widths[-1], NUM_CLASSES, "identity", init="xavier", update_rule=config.update_rule,
                        seed=block_seeds[-1], dtype=dtype))
    return layers


def _generator(method, width, config, rng, dtype):
    condition_dim = NUM_CLASSES if method == "cdni" else 0
    hidden = config.generator_hidden if config.generator == "mlp" else ()
    if method == "synthetic-loss":
        return SyntheticLossGenerator(width, hidden=hidden, batchnorm=config.generator_batchnorm,
                                      update_rule=config.update_rule, rng=rng, dtype=dtype)
    if config.generator == "linear":
        return LinearGenerator(width, condition_dim, update_rule=config.update_rule, rng=rng, dtype=dtype)
    return MLPGenerator(width, condition_dim, hidden=hidden, batchnorm=config.generator_batchnorm,
                        update_rule=config.update_rule, rng=rng, dtype=dtype)


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


def synthetic_loss_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[float, list[float]]:
    """One step of the synthetic-loss variant; returns ``(loss, generator_losses)``."""
    h = x
    for layer in layers[:-1]:
        _, h = layer.forward_and_synthetic_update(h)
    top = layers[-1]
    per_example, g = softmax_cross_entropy(top.forward(h), y, reduction="none")
    top.backward(g / len(x))
    top.update(alpha)
    # Block k's generator regresses onto block k+1's predicted loss; the last onto the real loss.
    targets = [layer.generator.predicted_loss for layer in layers[1:-1]] + [per_example[:, None]]
    generator_losses = [layer.update_synthetic_weights(t) for layer, t in zip(layers[:-1], targets)]
    return float(per_example.mean()), generator_losses


def accuracy(layers: Sequence[Any], x: np.ndarray, labels: np.ndarray, batch: int = 2000) -> float:
    """Fraction of rows whose largest logit is the label, in evaluation mode (running batch-norm statistics)."""
    _set_mode(layers, training=False)
    try:
        correct = 0
        for i in range(0, len(x), batch):
            h = x[i:i + batch]
            for layer in layers:
                h = layer.predict(h)
            correct += int(np.sum(h.argmax(axis=1) == labels[i:i + batch]))
    finally:
        _set_mode(layers, training=True)
    return correct / len(x)


def train_paper(method: str, data: Sequence[np.ndarray], config: PaperConfig | None = None, *,
                progress: Callable[[str], None] | None = None, checkpoint: str | os.PathLike[str] | None = None,
                checkpoint_every: int | None = None) -> dict[str, Any]:
    """Train ``method`` on ``data = (x_train, y_train, x_test, y_test)``; returns its history.

    x arrays: (n, 784) floats; y arrays: integer labels (n,).  The history
    holds ``iteration`` and ``test_accuracy`` (every ``eval_every`` iterations
    and at the end), ``train_loss`` (the mean loss over each such span) and
    ``wall_time`` (seconds, evaluation included, summed over resumed sessions).

    ``checkpoint`` (a path to an .npz file) and ``checkpoint_every`` work as in
    :func:`sgrad.train`: the state is saved every ``checkpoint_every``
    iterations and at the end, and a checkpoint of this run (same method, data
    and settings, ``iterations`` aside) is carried on from, bit for bit.
    """
    config = PaperConfig() if config is None else config
    _check_method(method)
    if checkpoint_every is not None:
        _validation.check_positive_int(checkpoint_every, "checkpoint_every")
    x_train, y_train, x_test, y_test = data
    dtype = np.dtype(config.dtype)
    onehot = np.eye(NUM_CLASSES, dtype=dtype)
    layers = build_network(method, x_train.shape[1], config)
    batch_rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(3)[2])
    name = f"[{method}, depth {config.depth}]"
    run = {"trainer": "sgrad.paper.train_paper", "method": method, "data": fingerprint(*data),
           "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "iterations"}}
    saved = resume_run(checkpoint, layers, run, budget=config.iterations, rng=batch_rng,
                       progress=None if progress is None else lambda line: progress(f"{name} {line}"))
    if saved is None:
        history: dict[str, Any] = {"method": method, "depth": config.depth, "iteration": [], "test_accuracy": [],
                                   "train_loss": [], "wall_time": 0.0}
        iteration, order, position, losses = 0, batch_rng.permutation(len(x_train)), 0, []
    else:
        history, iteration, order = saved.metadata["history"], saved.metadata["step"], saved.extra["order"]
        position, losses = saved.metadata["loop"]["position"], saved.metadata["loop"]["losses"]
        if progress is not None:
            progress(f"{name} resumed from {checkpoint} at iteration {iteration}")
    start = time.perf_counter() - history["wall_time"]

    def evaluate(iteration):
        history["iteration"].append(iteration)
        history["test_accuracy"].append(accuracy(layers, x_test, y_test))
        history["train_loss"].append(float(np.mean(losses)))
        losses.clear()
        if progress is not None:
            progress(f"{name} iteration {iteration}/{config.iterations}  loss {history['train_loss'][-1]:.4f}  "
                     f"test accuracy {100 * history['test_accuracy'][-1]:.2f}%  ({time.perf_counter() - start:.0f} s)")

    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            while iteration < config.iterations:
                iteration += 1
                if position + config.batch_size > len(order):
                    order, position = batch_rng.permutation(len(x_train)), 0
                idx = order[position:position + config.batch_size]
                position += config.batch_size
                x, y = x_train[idx], onehot[y_train[idx]]
                if method in ("backprop", "no-bprop"):
                    trainable = len(layers) - 1 if method == "no-bprop" else 0
                    loss = backprop_step(layers, x, y, summed_cross_entropy, config.alpha,
                                         trainable=trainable) / len(x)
                elif method == "synthetic-loss":
                    loss, _ = synthetic_loss_step(layers, x, y, config.alpha)
                else:
                    loss, _ = dni_step(layers, x, y, summed_cross_entropy, config.alpha,
                                       condition=y if method == "cdni" else None)
                    loss /= len(x)
                if not np.isfinite(loss):
                    raise FloatingPointError(f"the loss became {loss}")
                losses.append(loss)
                if iteration % config.eval_every == 0:
                    evaluate(iteration)
                if checkpoint is not None and (iteration == config.iterations
                                               or (checkpoint_every and iteration % checkpoint_every == 0)):
                    history["wall_time"] = time.perf_counter() - start
                    save_run(checkpoint, layers, run, step=iteration, rng=batch_rng, history=history,
                             loop={"position": position, "losses": losses}, extra={"order": order})
            if losses:  # the budget ended between two scheduled evaluations: one more, at the end
                evaluate(iteration)
    except FloatingPointError as error:
        history["wall_time"] = time.perf_counter() - start
        history["diverged_at_iteration"] = iteration
        rates = f"alpha={config.alpha}" + (f", generator_alpha={config.generator_alpha}"
                                           if config.generator_alpha and method not in ("backprop", "no-bprop") else "")
        raise TrainingDiverged(
            f"{method} (depth {config.depth}) diverged at iteration {iteration}: {error}. The learning rate "
            f"({rates}) is the likely cause; try a smaller one.", history) from error
    history["wall_time"] = time.perf_counter() - start
    return history


def run_grid(data: Sequence[np.ndarray], *, methods: Sequence[str] = PAPER_METHODS, depths: Sequence[int] = (3,),
             config: PaperConfig | None = None, out_dir: str | os.PathLike[str] | None = None,
             progress: Callable[[str], None] | None = None,
             checkpoint_every: int | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Train every method at every depth; returns ``{(method, depth): history}``.

    With ``out_dir``, each finished cell is saved there at once (``cells/<method>-depth<d>.json``,
    with its settings); a later call with the same settings loads it instead of
    training again, so an interrupted grid resumes.  With ``checkpoint_every``
    too, the cell in training is checkpointed every that many iterations
    (``checkpoints/<method>-depth<d>.npz``), so an interrupted cell carries on
    mid-way, bit for bit (see :func:`train_paper`).  At the end the folder also
    gets ``results.md`` (final test accuracy), ``paper.png`` and ``histories.json``.
    """
    config = PaperConfig() if config is None else config
    for method in methods:
        _check_method(method)
    # A cached cell is reused only for the same settings and the same data.
    data_tag = {"train_examples": len(data[0]), "test_examples": len(data[2]),
                "labels_sha256": hashlib.sha256(np.ascontiguousarray(data[1]).tobytes()).hexdigest()}
    results = {}
    for depth in depths:
        cell_config = dataclasses.replace(config, depth=depth)
        for method in methods:
            cached = _load_cell(out_dir, method, cell_config, data_tag)
            if cached is not None:
                if progress is not None:
                    progress(f"[{method}, depth {depth}] loaded from {out_dir}")
                results[(method, depth)] = cached
                continue
            checkpoint = (None if out_dir is None or checkpoint_every is None
                          else pathlib.Path(out_dir) / "checkpoints" / f"{method}-depth{depth}.npz")
            try:
                history = train_paper(method, data, cell_config, progress=progress, checkpoint=checkpoint,
                                      checkpoint_every=checkpoint_every)
            except TrainingDiverged as error:
                history = dict(error.history, diverged=str(error))
            if progress is not None:
                progress(f"[{method}, depth {depth}] done in {history['wall_time']:.1f} s")
            results[(method, depth)] = history
            _save_cell(out_dir, method, cell_config, data_tag, history)
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
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "results.md", results_table(results) + "\n")
    _atomic_write(out / "histories.json", json.dumps(
        {"config": dataclasses.asdict(config), "cells": [dict(h, method=m, depth=d) for (m, d), h in results.items()]}))
    plot_paper(results, out / "paper.png")


def _cell_path(out_dir, method, config):
    return pathlib.Path(out_dir) / "cells" / f"{method}-depth{config.depth}.json"


def _load_cell(out_dir, method, config, data_tag):
    if out_dir is None:
        return None
    path = _cell_path(out_dir, method, config)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    wanted = json.loads(json.dumps(dataclasses.asdict(config)))
    if _relevant(method, record.get("config") or {}) != _relevant(method, wanted) or record.get("data") != data_tag:
        return None  # made with other settings or other data: train again
    return record["history"]


def _relevant(method, settings):
    """The settings a cell depends on: backprop and no-bprop have no generators, so theirs don't count."""
    if method in ("backprop", "no-bprop"):
        return {k: v for k, v in settings.items() if not k.startswith("generator")}
    return settings


def _save_cell(out_dir, method, config, data_tag, history):
    if out_dir is None:
        return
    path = _cell_path(out_dir, method, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, json.dumps({"method": method, "config": dataclasses.asdict(config), "data": data_tag,
                                    "history": history}))


def _atomic_write(path, text):
    """Write to a temporary file beside ``path``, then rename: an interrupted write leaves the old file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _set_mode(layers, training):
    for layer in layers:
        if hasattr(layer, "train"):
            layer.train(training)


def _check_method(method):
    if method not in PAPER_METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(PAPER_METHODS)}")
