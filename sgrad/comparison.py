"""``compare``: train several methods on binary addition from the same start, and report."""

import dataclasses
import json
import pathlib
import sys

from data_gen.binary_addition import generate_split

from .plotting import plot_comparison
from .training import METHODS, TrainConfig, TrainingDiverged, train

HISTORY_FILE = "history.json"
FIGURE_FILE = "compare.png"
TABLE_FILE = "results.md"


def compare(methods=METHODS, *, output_dim=8, num_train=1000, num_test=1000, config=None, out_dir=None,
            progress=None, **options):
    """Train each of ``methods`` on the same binary-addition split, from the same weights, on the same batches.

    methods : any of ``sgrad.METHODS`` ('backprop', 'no-bprop', 'dni', 'cdni').
    output_dim, num_train, num_test : the task (see :func:`data_gen.generate_split`).
    config : a :class:`~sgrad.TrainConfig`; ``options`` override its fields
        (e.g. ``epochs=50, seed=1``).  Its seed also fixes the data split.
    out_dir : if given, writes ``history.json``, ``compare.png`` and ``results.md`` there.
    progress : a function taking one line of status (e.g. ``print``), or None.

    Returns ``{method: history}`` (see :func:`sgrad.train`).  A method that
    diverges stops at once; its history holds what it recorded up to then and
    ``'diverged'``, the reason, while the other methods carry on.
    """
    config = dataclasses.replace(TrainConfig() if config is None else config, **options)
    methods = _check_methods(methods)
    data = generate_split(output_dim, num_train, num_test, seed=config.seed)
    histories = {}
    for method in methods:
        try:
            history = train(method, data, config, progress=progress)
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


def results_table(histories):
    """A markdown table of each method's final figures."""
    rows = ["| method | held-out bit acc. | held-out exact sums | train bit acc. | final train loss | wall time |",
            "|---|---:|---:|---:|---:|---:|"]
    for method, h in histories.items():
        if h.get("diverged"):
            rows.append(f"| {method} | diverged | | | | {h['wall_time']:.1f} s |")
            continue
        rows.append(f"| {method} | {100 * h['test_bit_accuracy'][-1]:.1f}% | {100 * h['test_exact_accuracy'][-1]:.1f}% "
                    f"| {100 * h['train_bit_accuracy'][-1]:.1f}% | {h['epoch_loss'][-1]:.4f} | {h['wall_time']:.1f} s |")
    return "\n".join(rows)


def write_results(histories, out_dir, *, task, config):
    """Write ``history.json``, ``compare.png`` and ``results.md`` into ``out_dir`` (created if needed)."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = {"task": task, "config": dataclasses.asdict(config), "histories": histories}
    (out / HISTORY_FILE).write_text(json.dumps(record))
    (out / TABLE_FILE).write_text(results_table(histories) + "\n")
    plot_comparison(histories, out / FIGURE_FILE,
                    title=f"{task['output_dim']}-bit binary addition, {task['num_train']} training pairs")
    return out


def _check_methods(methods):
    if isinstance(methods, str):
        methods = [methods]
    methods = list(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty list drawn from {', '.join(METHODS)}; got {methods!r}")
    return methods


def print_progress(line):
    """Progress lines go to stderr, so stdout holds only the results table."""
    print(line, file=sys.stderr, flush=True)
