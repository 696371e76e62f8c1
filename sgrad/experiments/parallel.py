"""``sgrad parallel``: what update unlocking buys in wall-clock time, every schedule on the same workers and batches.

For each schedule (``backprop``, ``pipelined-backprop``, ``dni``, ``cdni``, ``complete``, ``ccomplete``) and each
worker count,
the paper's MNIST net (:class:`~sgrad.experiments.mnist.PaperConfig`, built by
:func:`~sgrad.experiments.mnist.build_network`) trains on a pipeline of workers
(:func:`sgrad.parallel.train_parallel`) from the same initial weights on the same batches as
``sgrad paper`` would.  :func:`compare_parallel` writes into its folder:

- ``results.md``: per schedule and worker count, examples per second, the test accuracy after a
  wall-clock budget and after the last step, and the run's wall time;
- ``timeline.png``: one row per worker, a bar per forward, backward, update and wait, for locked
  backprop against DNI and the complete unlock on the most workers run (the pictures of the update and
  forward locks; the schedules run on the most workers, if none of those);
- ``accuracy_time.png``: test accuracy against wall-clock time, per run;
- ``histories.json``: every run's history, timeline and targets' lateness.

Each finished run is kept in ``cells/`` (with its settings and the code that made it) and the
running one is checkpointed in ``checkpoints/``, so an interrupted comparison carries on.
"""

import contextlib
import dataclasses
import json
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..argument_checks import check_integer, check_number, damaged
from ..atomic_files import atomic_write_text
from ..parallel.local import LocalEngine
from ..parallel.pipeline import COMPLETE_SCHEDULES, SCHEDULE_NAMES, ParallelRun, new_history, train_parallel
from ..parallel.ray_engine import RayEngine, ray_session
from ..parallel.timeline import Event
from ..training.cell_cache import TRAIN_AGAIN, CellCache
from ..training.diverged import TrainingDiverged
from ..training.results_folder import checkpoint_path, one_writer
from ..training.resume import fingerprint
from ..training.settings import check_methods
from .mnist import PaperConfig, build_input_generators, build_network, check_grid, summed_cross_entropy

ENGINES = ("local", "ray")
TIMELINE_STEPS = 6  # steps drawn in the timeline figure


def timeline_window(iterations: int, eval_every: int) -> tuple[int, int]:
    """The steps a run's timeline records: a few, halfway between two evaluations near the middle of the run.

    Away from the start (workers start one after the other) and from the evaluations (the test set
    going through the pipeline), so that the figure shows the steady state.
    """
    middle = (iterations // 2 // eval_every) * eval_every + eval_every // 2
    first = max(1, min(middle - TIMELINE_STEPS // 2, iterations - TIMELINE_STEPS + 1))
    return first, first + TIMELINE_STEPS - 1
Run = tuple[str, int]  # (schedule, workers)
DECOUPLED_SCHEDULES = ("dni", "cdni", *COMPLETE_SCHEDULES)  # the schedules whose blocks have generators


def network_method(schedule: str) -> str:
    """The network :func:`~sgrad.experiments.mnist.build_network` builds for ``schedule``: DNI blocks for DNI and the
    complete unlock only (whose method is also that of its input generators)."""
    return schedule if schedule in DECOUPLED_SCHEDULES else "backprop"



def check_runs(schedules: Sequence[str], workers: Sequence[int], config: PaperConfig, *, staleness: int,
               budget: float, engine: str, train_examples: int | None, out_dir: str | os.PathLike[str] | None,
               checkpoint_every: int | None = None) -> list[str]:
    """Check a comparison before any work: the schedules, each worker count against the hidden blocks, the rest.

    Returns the schedules as a list.  ``train_examples=None``: the training set's size is not known yet.
    """
    schedules = check_methods(schedules, SCHEDULE_NAMES)
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence) or not workers:
        raise TypeError(f"workers must be a non-empty sequence of worker counts such as (1, 2); got {workers!r}")
    for count in workers:
        check_integer(count, "every worker count")
        if count > config.depth - 1:
            raise ValueError(f"{count} workers need at least {count} hidden blocks, one per worker; a net of depth "
                             f"{config.depth} has {config.depth - 1}. Use fewer workers or a larger depth")
    check_integer(staleness, "staleness", minimum=0)
    check_number(budget, "budget", above=0, example="60")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(map(repr, ENGINES))}")
    check_grid([network_method(s) for s in schedules], (config.depth,), config, input_dim=784,
               train_examples=train_examples, checkpoint_every=checkpoint_every, out_dir=out_dir)
    return schedules


def train_schedule(schedule: str, workers: int, data: Sequence[np.ndarray], config: PaperConfig, *,
                   staleness: int = 0, engine: Any = None, checkpoint: str | os.PathLike[str] | None = None,
                   checkpoint_every: int | None = None, progress: Callable[[str], None] | None = None,
                   timeline_steps: tuple[int, int] | None = None) -> ParallelRun:
    """Train ``schedule`` on ``workers`` workers: the net, weights, batches and loss of ``sgrad paper``'s cell.

    data: ``(x_train, y_train, x_test, y_test)`` with integer labels.  ``engine``: an engine
    (:class:`~sgrad.parallel.LocalEngine` by default).  ``timeline_steps``: the first and last steps whose
    events the workers record (by default :func:`timeline_window`'s few, in the steady state).
    """
    x_train, y_train, x_test, y_test = data
    x_train, x_test = np.asarray(x_train, dtype=config.dtype), np.asarray(x_test, dtype=config.dtype)
    layers = build_network(network_method(schedule), x_train.shape[1], config)
    input_generators = build_input_generators(network_method(schedule), x_train.shape[1], config)
    run = {"trainer": "sgrad.experiments.parallel.train_schedule", "schedule": schedule, "workers": workers,
           "staleness": staleness, "data": fingerprint(*data),
           "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "iterations"}}
    return train_parallel(
        layers, (x_train, y_train, x_test, y_test), schedule=schedule, loss_fn=summed_cross_entropy,
        alpha=config.alpha, steps=config.iterations, batch_size=config.batch_size,
        rng=np.random.default_rng(np.random.SeedSequence(config.seed).spawn(3)[2]), eval_every=config.eval_every,
        workers=workers, staleness=staleness, engine=engine, run=run, checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        timeline_steps=timeline_window(config.iterations, config.eval_every) if timeline_steps is None else timeline_steps,
        progress=progress, label=f"[{schedule}, {workers} workers]", input_generators=input_generators,
        input_alpha=(config.alpha if config.generator_alpha is None else config.generator_alpha)
        if schedule in COMPLETE_SCHEDULES else None)


def compare_parallel(data: Sequence[np.ndarray], *, schedules: Sequence[str] = SCHEDULE_NAMES,
                     workers: Sequence[int] = (1, 2), config: PaperConfig | None = None, staleness: int = 0,
                     budget: float = 60.0, engine: str = "local", ray_address: str | None = None,
                     out_dir: str | os.PathLike[str] | None = None, checkpoint_every: int | None = None,
                     progress: Callable[[str], None] | None = None) -> dict[Run, ParallelRun]:
    """Train every schedule on every worker count; returns ``{(schedule, workers): ParallelRun}``.

    budget : the wall-clock seconds at which the table reads each run's test accuracy.
    engine, ray_address : 'local' processes, or 'ray' (on the cluster at ``ray_address``, or on a
        Ray started for the comparison and shut down after it).
    With ``out_dir``, writes the files listed in the module's docstring.
    """
    config = PaperConfig() if config is None else config
    schedules = check_runs(schedules, workers, config, staleness=staleness, budget=budget, engine=engine,
                           train_examples=len(data[0]), out_dir=out_dir, checkpoint_every=checkpoint_every)
    settings = {"config": dataclasses.asdict(config), "staleness": staleness, "data": fingerprint(*data)}
    with one_writer(out_dir):  # one run at a time writes to a folder
        with ray_session(ray_address, cpus=max(workers)) if engine == "ray" else contextlib.nullcontext():
            results = _every_run(data, schedules, workers, config, staleness, engine, out_dir, checkpoint_every, settings,
                                 progress)
        if out_dir is not None:
            write_results(results, out_dir, config, budget)
    return results


def _every_run(data, schedules, workers, config, staleness, engine, out_dir, checkpoint_every, settings, progress):
    """``{(schedule, workers): ParallelRun}``, each loaded from ``out_dir`` if it finished there, else trained."""
    cells, results = CellCache(out_dir, progress), {}
    for schedule in schedules:
        for count in workers:
            name = f"{schedule}-{count}"
            cached = cells.load(name, settings, f"[{schedule}, {count} workers]", {
                "history": new_history(schedule, count), "timeline": [Event(0, "", 0, 0.0, 0.0)._asdict()],
                "stale_targets": {}})
            if cached is not None:
                results[(schedule, count)] = _cached_run(cells.path(name), cached)
                continue
            try:
                results[(schedule, count)] = train_schedule(
                    schedule, count, data, config, staleness=staleness,
                    engine=RayEngine() if engine == "ray" else LocalEngine(),
                    checkpoint=checkpoint_path(out_dir, name, checkpoint_every), checkpoint_every=checkpoint_every,
                    progress=progress)
            except TrainingDiverged as error:  # the comparison carries on with the other runs
                if progress is not None:
                    progress(f"[{schedule}, {count} workers] {error}")
                results[(schedule, count)] = ParallelRun(dict(error.history, diverged=str(error)), [], {})
            run = results[(schedule, count)]
            cells.save(name, settings, history=run.history, timeline=[e._asdict() for e in run.timeline],
                       stale_targets=run.stale_targets)
    return results


def _cached_run(path, record):
    """The ParallelRun a cell file kept; its late-target counts must be whole numbers by whole-number lateness."""
    counts = record["stale_targets"]
    if not all(str(lateness).isdigit() and isinstance(count, int) and not isinstance(count, bool) and count >= 0
               for lateness, count in counts.items()):
        raise damaged(path, f"its 'stale_targets' must count late targets (whole numbers >= 0) by their lateness "
                            f"(a whole number >= 0); got {counts!r}", TRAIN_AGAIN)
    return ParallelRun(record["history"], [Event(*(e[field] for field in Event._fields)) for e in record["timeline"]],
                       {int(lateness): count for lateness, count in counts.items()})


# Why a run has no examples/s in the table: the rate is measured between its first and last evaluations.
NO_RATE = ("– examples/s: the run had fewer than two evaluations, between which its rate is measured (start-up left "
           "out); evaluate more often (--eval-every) or train longer")


def examples_per_second(history: Mapping[str, Any], batch_size: int) -> float | None:
    """Training examples per second between the first and the last evaluation (start-up left out, evaluations in).

    None if the run had fewer than two evaluations (or they came at the same time): there is no rate to measure.
    """
    if len(history["iteration"]) < 2:
        return None
    steps = history["iteration"][-1] - history["iteration"][0]
    seconds = history["evaluation_time"][-1] - history["evaluation_time"][0]
    return steps * batch_size / seconds if steps and seconds > 0 else None


def accuracy_at(history: Mapping[str, Any], seconds: float) -> float | None:
    """The test accuracy of the last evaluation within ``seconds`` of wall-clock time (None if none was)."""
    within = [a for a, t in zip(history["test_accuracy"], history["evaluation_time"]) if t <= seconds]
    return within[-1] if within else None


def results_table(results: Mapping[Run, ParallelRun], config: PaperConfig, budget: float) -> str:
    """Markdown: one row per schedule and worker count; a run without a measured rate shows "–", and why under the table."""
    rows = [f"| schedule | workers | examples/s | test accuracy after {budget:g} s | test accuracy after "
            f"{config.iterations} steps | wall time |", "|---|---:|---:|---:|---:|---:|"]
    missing = False
    for (schedule, count), result in results.items():
        history = result.history
        if history.get("diverged"):
            rows.append(f"| {schedule} | {count} | diverged at iteration {history.get('diverged_at_iteration', '?')} "
                        "| | | |")
            continue
        early, rate = accuracy_at(history, budget), examples_per_second(history, config.batch_size)
        missing |= rate is None
        rows.append(f"| {schedule} | {count} | " + ("–" if rate is None else f"{rate:,.0f}") + " | "
                    + ("–" if early is None else f"{100 * early:.2f}%")
                    + f" | {100 * history['test_accuracy'][-1]:.2f}% | {history['wall_time']:.1f} s |")
    return "\n".join(rows) + (f"\n\n{NO_RATE}" if missing else "")


def write_results(results: Mapping[Run, ParallelRun], out_dir: str | os.PathLike[str], config: PaperConfig,
                  budget: float) -> None:
    """Write ``results.md``, ``timeline.png``, ``accuracy_time.png`` and ``histories.json``."""
    from .plotting import plot_accuracy_against_time, plot_timeline

    out = pathlib.Path(out_dir)
    atomic_write_text(out / "results.md", results_table(results, config, budget) + "\n")
    atomic_write_text(out / "histories.json", json.dumps({"config": dataclasses.asdict(config), "runs": [
        {"schedule": s, "workers": k, "history": r.history, "timeline": [e._asdict() for e in r.timeline],
         "stale_targets": r.stale_targets} for (s, k), r in results.items()]}))
    most = max(k for _, k in results)
    recorded = {f"{s}, {k} workers": r.timeline for (s, k), r in results.items() if k == most and r.timeline}
    # Locked backprop against DNI and the complete unlock, conditioned or not, those of them that were run; else
    # what was.
    panels = {title: events for title, events in recorded.items()
              if title.split(",")[0] in ("backprop", "dni", "complete", "ccomplete")} or recorded
    if panels:
        plot_timeline(panels, out / "timeline.png")
    plot_accuracy_against_time({f"{s}, {k} workers": r.history for (s, k), r in results.items()},
                               out / "accuracy_time.png")
