"""``compare``: train several methods on binary addition from the same start, and report."""

import dataclasses
import json
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from data_gen.binary_addition import generate_split

from .plotting import COLORS, plot_comparison
from .training import METHODS, TrainConfig, TrainingDiverged, train

HISTORY_FILE = "history.json"
FIGURE_FILE = "compare.png"
TABLE_FILE = "results.md"
CHECKPOINT_FOLDER = "checkpoints"
LOG_AXIS_TOP = 1e200


def compare(methods: str | Sequence[str] = METHODS, *, output_dim: int = 8, num_train: int = 1000,
            num_test: int = 1000, config: TrainConfig | None = None, out_dir: str | os.PathLike[str] | None = None,
            progress: Callable[..., Any] | None = None, checkpoint_every: int | None = None,
            **options: Any) -> dict[str, dict[str, Any]]:
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

    Returns ``{method: history}`` (see :func:`sgrad.train`).  A method that
    diverges stops at once; its history holds what it recorded up to then,
    ``'diverged'`` (the reason) and ``'diverged_at_step'``, while the other
    methods carry on.
    """
    config = dataclasses.replace(TrainConfig() if config is None else config, **options)
    methods = _check_methods(methods)
    data = generate_split(output_dim, num_train, num_test, seed=config.seed)
    histories = {}
    for method in methods:
        checkpoint = (None if out_dir is None or checkpoint_every is None
                      else pathlib.Path(out_dir) / CHECKPOINT_FOLDER / f"{method}.npz")
        try:
            history = train(method, data, config, progress=progress, checkpoint=checkpoint,
                            checkpoint_every=checkpoint_every)
        except TrainingDiverged as error:
            history = error.history
            history["diverged"] = str(error)
            if progress is not None:
                progress(f"[{method}] {error}")
        histories[method] = history
        if progress is not None:
            progress(f"[{method}] done in {history['wall_time']:.1f} s")
    if out_dir is not None:
        task = {"name": "binary_addition", "output_dim": output_dim, "num_train": num_train, "num_test": num_test}
        write_results(histories, out_dir, task=task, config=config)
    return histories


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
    out.mkdir(parents=True, exist_ok=True)
    record = {"task": task, "config": dataclasses.asdict(config), "histories": histories}
    (out / HISTORY_FILE).write_text(json.dumps(record))
    (out / TABLE_FILE).write_text(results_table(histories) + "\n")
    figure = comparison_figure(histories, steps_per_epoch=task["num_train"] // config.batch_size,
                               title=f"{task['output_dim']}-bit binary addition, {task['num_train']} training pairs")
    figure.savefig(out / FIGURE_FILE, dpi=100)
    return out


def comparison_figure(histories: dict, *, steps_per_epoch: int, title: str | None = None) -> Figure:
    """:func:`~sgrad.plotting.plot_comparison`'s figure, with every diverged method marked where it stopped.

    histories : ``{method: history}`` as :func:`compare` returns it; a diverged
        history holds ``diverged_at_step``, and its ``step_loss`` (one float per
        step) runs up to the last finite loss.
    steps_per_epoch : steps in an epoch (the x axis counts epochs).
    The loss panel gets an x at (step / steps_per_epoch, last finite loss) and
    the label "<method> diverged at step K".
    """
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


def _check_methods(methods):
    if isinstance(methods, str):
        methods = [methods]
    methods = list(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty list drawn from {', '.join(METHODS)}; got {methods!r}")
    return methods


def print_progress(line: str) -> None:
    """Progress lines go to stderr, so stdout holds only the results table."""
    print(line, file=sys.stderr, flush=True)
