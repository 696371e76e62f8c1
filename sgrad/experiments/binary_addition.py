"""``sgrad compare``: backprop, no backprop, DNI and cDNI side by side on the blog's binary addition.

Every method starts from the same initial weights and sees the same batches
when given the same seed, so their curves differ only by the method.

The network is a list of layers: hidden :class:`~sgrad.Layer` (or
:class:`~sgrad.DNI`) layers, then a linear top layer that outputs logits for
the binary cross-entropy (or sigmoid outputs for the blog's squared error).
"""

import dataclasses
import functools
import json
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from data_gen.binary_addition import generate_split

from ..argument_checks import check_batch, check_choice, check_integer, check_widths
from ..atomic_files import atomic_write_text
from ..dni.decoupled import DNI
from ..dni.steps import forward_all, predict, true_gradients
from ..nn.layers import Layer
from ..nn.losses import bce_with_logits, mse
from ..nn.nonlinearities import NONLINEARITIES
from ..training.batches import BatchOrder
from ..training.evaluation import cosine_similarity
from ..training.loop import RunName, run_and_report, take_step, train_loop
from ..training.results_folder import check_out_dir, checkpoint_path, one_writer
from ..training.resume import fingerprint
from ..training.settings import (DECOUPLED, TARGETS, check_batch_fits, check_methods, check_network_size, check_settings,
                                 check_split, learning_rates)
from .side_by_side import run_side_by_side

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METHODS = ("backprop", "no-bprop", "dni", "cdni")
# The loss fixes the top layer's nonlinearity and how an output is read as a bit.
TASK_LOSSES = {
    "bce": (bce_with_logits, "identity", 0.0),
    "mse": (mse, "sigmoid", 0.5),
}
HISTORY_FILE = "history.json"
FIGURE_FILE = "compare.png"
TABLE_FILE = "results.md"
LOG_AXIS_TOP = 1e200


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train.  The defaults are those of ``sgrad compare``.

    hidden : widths of the hidden layers.
    nonlin : the hidden layers' nonlinearity ('tanh', 'sigmoid', 'relu').
    update_rule : 'sgd', 'momentum' or 'adam', for layers and generators alike.
    alpha, generator_alpha : learning rates of the layers and of the generators
        (``generator_alpha=None``: the same as ``alpha``).
    loss : 'bce' (logits and binary cross-entropy) or 'mse' (sigmoid outputs, the blog's).
    generator_init : 'zeros' (the paper's) or 'blog' (the blog's random start).
    generator_targets : 'bootstrap' (the default, the method as published:
        each generator regresses onto the delta the layer above returned) or
        'true' (a teaching option: regress onto the true gradient dL/dh_k,
        which costs a full backward pass per step).
    batch_size : examples per step.  Each epoch reshuffles the training set
        and takes ``len(x_train) // batch_size`` full batches, so every step's
        gradients have the same scale; the few examples left over are seen in
        other epochs.
    probe_size : examples of the training set on which the synthetic gradients
        are compared to the true ones after every epoch (diagnostic only).
    dtype : 'float32' (the default, faster) or 'float64': the network's and the
        data's float type.
    seed : fixes the initial weights and the batch order.
    """

    hidden: tuple = (128, 64)
    nonlin: str = "tanh"
    epochs: int = 300
    batch_size: int = 32
    update_rule: str = "adam"
    alpha: float = 2e-3
    generator_alpha: float | None = None
    loss: str = "bce"
    generator_init: str = "zeros"
    generator_targets: str = "bootstrap"
    probe_size: int = 256
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.hidden, (tuple, list)) or not self.hidden:
            raise ValueError(f"hidden must be a non-empty sequence of layer widths; got {self.hidden!r}")
        check_settings(self, {
            "hidden": check_widths(self.hidden, "hidden"),
            "nonlin": check_choice(self.nonlin, "nonlinearity", NONLINEARITIES),
            "epochs": check_integer(self.epochs, "epochs"),
            "loss": check_choice(self.loss, "loss", TASK_LOSSES),
            "generator_init": check_choice(self.generator_init, "generator_init", ("zeros", "blog")),
            "generator_targets": check_choice(self.generator_targets, "generator_targets", TARGETS),
            "probe_size": check_integer(self.probe_size, "probe_size"),
        })


def build_network(method: str, input_dim: int, output_dim: int, config: TrainConfig | None = None) -> list[Any]:
    """The stack for ``method``: hidden layers (DNI for 'dni' and 'cdni') and a linear top layer.

    The initial weights depend only on ``config.seed`` and the widths, never on
    the method, so every method starts from the same point.
    """
    config = TrainConfig() if config is None else config
    check_choice(method, "method", METHODS)
    dims = (input_dim, *config.hidden, output_dim)
    layer_seeds = np.random.SeedSequence(config.seed).spawn(2)[0].spawn(len(dims) - 1)
    condition_dim = output_dim if method == "cdni" else 0
    _, top_nonlin, _ = TASK_LOSSES[config.loss]
    dtype = np.dtype(config.dtype)
    layers: list[Any] = []
    for k, (fan_in, fan_out) in enumerate(zip(dims[:-2], dims[1:-1])):
        rng = np.random.default_rng(layer_seeds[k])
        if method in DECOUPLED:
            layers.append(DNI(fan_in, fan_out, config.nonlin, alpha=config.alpha,
                              generator_alpha=config.generator_alpha, condition_dim=condition_dim,
                              generator_init=config.generator_init,
                              update_rule=config.update_rule, rng=rng, dtype=dtype))
        else:
            layers.append(Layer(fan_in, fan_out, config.nonlin, update_rule=config.update_rule, rng=rng, dtype=dtype))
    layers.append(Layer(dims[-2], dims[-1], top_nonlin, update_rule=config.update_rule,
                        rng=np.random.default_rng(layer_seeds[-1]), dtype=dtype))
    return layers


def parameter_count(method: str, input_dim: int, output_dim: int, config: TrainConfig) -> int:
    """How many numbers :func:`build_network` 's network for ``method`` learns, counted without building it.

    Each layer has weights and a bias; a DNI layer's linear generator maps
    [h, c] to ĝ, with c the labels for 'cdni'.
    """
    dims = (input_dim, *config.hidden, output_dim)
    count = sum(fan_in * fan_out + fan_out for fan_in, fan_out in zip(dims[:-1], dims[1:]))
    if method in DECOUPLED:
        condition_dim = output_dim if method == "cdni" else 0
        count += sum((width + condition_dim) * width + width for width in config.hidden)
    return count


def train(method: str, data: Sequence[np.ndarray], config: TrainConfig | None = None, *,
          progress: Callable[[str], None] | None = None, checkpoint: str | os.PathLike[str] | None = None,
          checkpoint_every: int | None = None) -> dict[str, Any]:
    """Train ``method`` on ``data = (x_train, y_train, x_test, y_test)`` and return its history.

    The history is a dict of plain lists and numbers (JSON-ready):

    - ``step_loss``: training loss of every step; ``epoch_loss``: their mean per epoch;
    - ``train_bit_accuracy``, ``test_bit_accuracy``, ``train_exact_accuracy``,
      ``test_exact_accuracy``, ``test_loss``: per epoch, on the whole sets;
    - ``generator_loss``: per hidden layer, every step's regression loss, and
      ``generator_epoch_loss``: their mean per epoch (DNI only);
    - ``cosine_similarity``: per hidden layer, per epoch, cos(ĝ_k, g_k) on a
      fixed probe batch (DNI only; a diagnostic never fed back into training).
      The cosine ignores scale: g_k on the probe batch is that of the mean
      loss over ``probe_size`` rows, while generators learn targets at the
      scale of ``batch_size`` rows (multiply g_k by probe_size / batch_size
      to compare magnitudes);
    - ``wall_time``: seconds (summed over resumed sessions).

    ``progress``, if given, is called with a one-line status after some epochs.

    ``checkpoint``, a path to an .npz file, makes the run resumable: every
    ``checkpoint_every`` steps (None: only at the end) the network, the update
    rules' state, the batch order and the history are saved there (see
    :mod:`sgrad.training.loop`).  If the file already holds this run (same
    method, data and settings, ``epochs`` aside) at a step within this run's
    budget, training carries on from it and ends bit for bit where an
    uninterrupted run would; otherwise it starts afresh and replaces the file.

    Raises :class:`~sgrad.TrainingDiverged` if a number turns non-finite; its
    history then holds ``diverged_at_step``.
    """
    config = TrainConfig() if config is None else config
    check_choice(method, "method", METHODS)
    check_split(data, config.batch_size, config.dtype, _check_targets)
    x_train, y_train = data[0], data[1]
    check_network_size(parameter_count(method, x_train.shape[1], y_train.shape[1], config), config.dtype,
                       config.update_rule, f"the {method} network")
    # In the network's dtype: float64 data would turn every product of a float32 network into float64.
    x_train, y_train = np.asarray(x_train, dtype=config.dtype), np.asarray(y_train, dtype=config.dtype)
    loss_fn, _, threshold = TASK_LOSSES[config.loss]
    layers = build_network(method, x_train.shape[1], y_train.shape[1], config)
    n_hidden = len(layers) - 1 if method in DECOUPLED else 0
    n_batches = len(x_train) // config.batch_size

    def train_step(indices, history):
        x, y = x_train[indices], y_train[indices]
        targets = (true_gradients(layers, x, y, loss_fn)
                   if method in DECOUPLED and config.generator_targets == "true" else None)
        loss, generator_losses = take_step(method, layers, x, y, loss_fn, config.alpha, targets=targets)
        for k, value in enumerate(generator_losses):
            history["generator_loss"][k].append(value)
        return loss

    def evaluate(step, losses, history):
        epoch = step // n_batches
        _record_epoch(history, method, layers, data, losses, loss_fn, threshold, config.probe_size)
        if epoch == 1 or epoch % max(1, config.epochs // 10) == 0 or epoch == config.epochs:
            return (f"epoch {epoch}/{config.epochs}  train loss {history['epoch_loss'][-1]:.4f}  "
                    f"held-out bits {100 * history['test_bit_accuracy'][-1]:.1f}%")
        return None

    run = {"trainer": "sgrad.experiments.binary_addition.train", "method": method, "data": fingerprint(*data),
           "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "epochs"}}
    rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(2)[1])
    return train_loop(
        layers, train_step, evaluate, steps=config.epochs * n_batches, eval_every=n_batches,
        batches=BatchOrder(len(x_train), config.batch_size, rng), history=_new_history(method, n_hidden),
        names=RunName(method, f"[{method}]", learning_rates(config, method in DECOUPLED)), run=run,
        checkpoint=checkpoint, checkpoint_every=checkpoint_every, keep_step_losses=True, progress=progress)


def _new_history(method, n_generators):
    return {"method": method, "step_loss": [], "epoch_loss": [], "test_loss": [],
            "train_bit_accuracy": [], "test_bit_accuracy": [],
            "train_exact_accuracy": [], "test_exact_accuracy": [],
            "generator_loss": [[] for _ in range(n_generators)],
            "generator_epoch_loss": [[] for _ in range(n_generators)],
            "cosine_similarity": [[] for _ in range(n_generators)],
            "wall_time": 0.0}


def _record_epoch(history, method, layers, data, losses, loss_fn, threshold, probe_size):
    """The epoch's figures: on the data as given (float64 from data_gen), whatever the network's dtype."""
    x_train, y_train, x_test, y_test = data
    history["epoch_loss"].append(float(np.mean(losses)))
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        out = predict(layers, x)
        correct = (out > threshold) == (y > 0.5)
        history[f"{split}_bit_accuracy"].append(float(correct.mean()))
        history[f"{split}_exact_accuracy"].append(float(correct.all(axis=1).mean()))
        if split == "test":
            history["test_loss"].append(loss_fn(out, y)[0])
    if method not in DECOUPLED:
        return
    x, y = x_train[:probe_size], y_train[:probe_size]
    hs = forward_all(layers, x)
    condition = y if method == "cdni" else None
    for k, g in enumerate(true_gradients(layers, x, y, loss_fn)):
        synthetic = layers[k].generator.predict(hs[k + 1], condition)
        history["cosine_similarity"][k].append(cosine_similarity(synthetic, g))
    for k, generator_losses in enumerate(history["generator_loss"]):  # the epoch's steps: as many as its losses
        history["generator_epoch_loss"][k].append(float(np.mean(generator_losses[-len(losses):])))


def _check_targets(y_train, y_test):
    check_batch(y_train, "y_train")
    check_batch(y_test, "y_test", y_train.shape[1], width_name="the width of y_train")


def compare(methods: str | Sequence[str] = METHODS, *, output_dim: int = 8, num_train: int = 1000,
            num_test: int = 1000, config: TrainConfig | None = None, out_dir: str | os.PathLike[str] | None = None,
            progress: Callable[[str], None] | None = None, checkpoint_every: int | None = None,
            workers: int | None = None, **options: Any) -> dict[str, dict[str, Any]]:
    """Train each of ``methods`` on the same binary-addition split, from the same weights, on the same batches.

    methods : any of ``sgrad.METHODS`` ('backprop', 'no-bprop', 'dni', 'cdni').
    output_dim, num_train, num_test : the task (see :func:`data_gen.generate_split`).
    config : a :class:`~sgrad.TrainConfig`; ``options`` override its fields
        (e.g. ``epochs=50, seed=1``).  Its seed also fixes the data split.
    out_dir : if given, writes ``history.json``, ``compare.png`` and ``results.md`` there.
    progress : a function taking one line of status (e.g. ``print``), or None.
    checkpoint_every : with ``out_dir``, each method saves a checkpoint every
        this many steps and at its end (``checkpoints/<method>.npz``); a later
        call with the same settings carries each method on from its checkpoint
        (a finished one is not trained again), bit for bit.  None: no checkpoints.
    workers : train this many methods at once, each in a process of its own with one
        BLAS thread (:func:`~sgrad.experiments.side_by_side.run_side_by_side`); None (the
        default): one after another, in this process.  The histories are the same either way
        (with one BLAS thread here too: DNI's and cDNI's float32 products round differently on two).

    Returns ``{method: history}`` (see :func:`sgrad.train`).  A method that
    diverges stops at once; its history holds what it recorded up to then,
    ``'diverged'`` (the reason) and ``'diverged_at_step'``, while the other
    methods carry on.
    """
    config = dataclasses.replace(TrainConfig() if config is None else config, **options)
    methods = check_methods(methods, METHODS)
    output_dim = check_integer(output_dim, "output_dim")
    num_train = check_integer(num_train, "num_train")
    check_batch_fits(config.batch_size, num_train)
    if checkpoint_every is not None:
        check_integer(checkpoint_every, "checkpoint_every")
    if workers is not None:
        check_integer(workers, "workers")
    for method in methods:  # x holds the bits of both operands: 2 * output_dim columns
        check_network_size(parameter_count(method, 2 * output_dim, output_dim, config), config.dtype,
                           config.update_rule, f"the {method} network")
    check_out_dir(out_dir)
    data = generate_split(output_dim, num_train, num_test, seed=config.seed)
    with one_writer(out_dir):  # one run at a time writes to a folder
        runs = {method: functools.partial(_train_and_report, method, data, config,
                                          checkpoint=checkpoint_path(out_dir, method, checkpoint_every),
                                          checkpoint_every=checkpoint_every)
                for method in methods}
        histories = run_side_by_side(runs, workers=workers, progress=progress)
        if out_dir is not None:
            task = {"name": "binary_addition", "output_dim": output_dim, "num_train": num_train, "num_test": num_test}
            write_results(histories, out_dir, task=task, config=config)
    return histories


def _train_and_report(method, data, config, progress, *, checkpoint, checkpoint_every):
    """:func:`train`'s history of ``method``; a divergence is reported and its history kept (:func:`run_and_report`)."""
    run = functools.partial(train, method, data, config, progress=progress, checkpoint=checkpoint,
                            checkpoint_every=checkpoint_every)
    return run_and_report(run, f"[{method}]", progress)


def results_table(histories: dict[str, dict[str, Any]]) -> str:
    """A markdown table of each method's final figures."""
    rows = ["| method | held-out bit acc. | held-out exact sums | train bit acc. | final train loss | wall time |",
            "|---|---:|---:|---:|---:|---:|"]
    for method, h in histories.items():
        if h.get("diverged"):
            rows.append(f"| {method} | diverged | | | diverged at step {h.get('diverged_at_step', '?')} "
                        f"| {h['wall_time']:.1f} s |")
            continue
        rows.append(f"| {method} | {100 * h['test_bit_accuracy'][-1]:.1f}% | {100 * h['test_exact_accuracy'][-1]:.1f}% "
                    f"| {100 * h['train_bit_accuracy'][-1]:.1f}% | {h['epoch_loss'][-1]:.4f} | {h['wall_time']:.1f} s |")
    return "\n".join(rows)


def write_results(histories: dict[str, dict[str, Any]], out_dir: str | os.PathLike[str], *, task: dict[str, Any],
                  config: TrainConfig) -> pathlib.Path:
    """Write ``history.json``, ``compare.png`` and ``results.md`` into ``out_dir`` (created if needed)."""
    out = pathlib.Path(out_dir)
    record = {"task": task, "config": dataclasses.asdict(config), "histories": histories}
    atomic_write_text(out / HISTORY_FILE, json.dumps(record))
    atomic_write_text(out / TABLE_FILE, results_table(histories) + "\n")
    figure = comparison_figure(histories, steps_per_epoch=task["num_train"] // config.batch_size,
                               title=f"{task['output_dim']}-bit binary addition, {task['num_train']} training pairs")
    figure.savefig(out / FIGURE_FILE, dpi=100)
    return out


def comparison_figure(histories: dict[str, dict[str, Any]], *, steps_per_epoch: int,
                      title: str | None = None) -> "Figure":
    """:func:`~sgrad.experiments.plotting.plot_comparison`'s figure, with every diverged method marked where it stopped.

    histories : ``{method: history}`` as :func:`compare` returns it; a diverged
        history holds ``diverged_at_step``, and its ``step_loss`` (one float per
        step) runs up to the last finite loss.
    steps_per_epoch : steps in an epoch (the x axis counts epochs).
    The loss panel gets an x at (step / steps_per_epoch, last finite loss) and
    the label "<method> diverged at step K".
    """
    from .plotting import COLORS, plot_comparison

    # A generator whose regression diverged reaches losses near 1e300, where matplotlib's log-axis margins
    # overflow; that panel's limits are then set from the data below.
    with np.errstate(over="ignore"):
        figure = plot_comparison(histories, title=title)
    diverged = {method: h for method, h in histories.items() if h.get("diverged")}
    if not diverged:
        return figure
    ax_loss, _, _, ax_generator = figure.axes
    for method, h in diverged.items():
        if not h["step_loss"]:
            continue
        step, color = h["diverged_at_step"], COLORS.get(method, "black")
        x, y = step / steps_per_epoch, h["step_loss"][-1]
        ax_loss.plot([x], [y], marker="x", markersize=12, markeredgewidth=2, color=color)
        ax_loss.annotate(f"{method} diverged at step {step}", (x, y), textcoords="offset points", xytext=(6, 6),
                         fontsize="small", color=color)
    losses = [float(y) for line in ax_generator.lines for y in np.asarray(line.get_ydata(), dtype=float) if 0 < y < np.inf]
    if losses:  # matplotlib's log ticks break down near 1e308: the top is at most 1e200, higher curves leave the view
        ax_generator.set_ylim(min(losses) / 2, min(max(losses) * 2, LOG_AXIS_TOP))
    return figure
