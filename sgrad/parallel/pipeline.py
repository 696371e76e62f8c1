"""The driver: train a network on a pipeline of workers, and keep the run's history, checkpoints and timeline.

:func:`train_parallel` cuts ``layers`` into stages (:func:`sgrad.parallel.worker.split_layers`),
hands each to a worker, starts the workers on an engine (local processes by default, or Ray) and
listens: it records the test accuracy the top worker reports, writes a checkpoint from the states
every worker reports, and stops everything if a worker fails.  When it returns, the trained arrays
are back in ``layers``, as after :func:`sgrad.training.loop.train_loop`; and the checkpoint is the
same file that loop writes (:func:`sgrad.training.resume.save_run`), so a run resumes from it.
"""

import copy
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..argument_checks import (check_batch, check_choice, check_integer, check_labels, check_learning_rate, check_record,
                               damaged)
from ..dni.synthetic_inputs import check_input_generators
from ..nn.checkpoint import START_AFRESH, CheckpointError, load_network_state
from ..training.batches import BatchOrder
from ..training.diverged import TrainingDiverged
from ..training.resume import resume_run, save_run
from .engines import Engine, describe, failure
from .local import LocalEngine
from .schedules import SCHEDULES
from .timeline import Event
from .worker import Plan, Worker, split_layers

SCHEDULE_NAMES = tuple(SCHEDULES)
COMPLETE_SCHEDULES = ("complete", "ccomplete")  # the schedules whose layers above the bottom take synthetic inputs
REPORT_TIMEOUT = 0.5  # seconds the driver waits for a report before it looks at the workers again


@dataclasses.dataclass
class ParallelRun:
    """What :func:`train_parallel` returns.

    history : as :func:`sgrad.experiments.mnist.train_paper` 's: ``iteration``, ``test_accuracy``,
        ``train_loss`` (per example, averaged since the last evaluation), ``evaluation_time`` (the
        wall-clock seconds at each evaluation) and ``wall_time`` (in all; both count from the
        driver's start, plus, on a resumed run, the time before its checkpoint).
    timeline : every worker's recorded events (:mod:`sgrad.parallel.timeline`).
    stale_targets : DNI and the complete unlock: ``{s: how many generator targets came s steps late}`` (the input
        generators' targets too).
    """

    history: dict[str, Any]
    timeline: list[Event]
    stale_targets: dict[int, int]


def train_parallel(layers: list[Any], data: Sequence[np.ndarray], *, schedule: str,
                   loss_fn: Callable[[np.ndarray, np.ndarray], tuple[Any, np.ndarray]], alpha: float, steps: int,
                   batch_size: int, rng: np.random.Generator, eval_every: int, workers: int | None = None,
                   staleness: int = 0, engine: Engine | None = None, run: dict[str, Any] | None = None,
                   checkpoint: str | os.PathLike[str] | None = None, checkpoint_every: int | None = None,
                   timeline_steps: tuple[int, int] = (1, 20), progress: Callable[[str], None] | None = None,
                   label: str = "[parallel]", input_generators: Sequence[Any] = (),
                   input_alpha: float | None = None) -> ParallelRun:
    """Train ``layers`` (hidden blocks, then a top layer) by ``schedule`` on ``workers`` workers.

    data : ``(x_train, y_train, x_test, y_test)``; x: (n, features) in the network's dtype, y: integer labels (n,).
    schedule : 'backprop', 'pipelined-backprop', 'dni', 'cdni', 'complete' or 'ccomplete'
        (:mod:`sgrad.parallel.schedules`); DNI and the complete unlock need :class:`~sgrad.DNIBlock` hidden
        blocks (cDNI's and ccomplete's generators conditioned on the one-hot labels).
    loss_fn, alpha : the loss, summed over the batch, and the learning rate of the top layer (and of
        every layer under backprop); a DNI block uses its own ``alpha`` and ``generator_alpha``.
    steps, batch_size, rng, eval_every : as in :func:`sgrad.training.loop.train_loop`: the same
        batches, drawn by ``rng``, and the test accuracy after every ``eval_every`` steps and the last.
    workers : 1 to the number of hidden blocks (default: one per block).
    staleness : DNI's bound on a target's lateness (:mod:`sgrad.parallel.schedules`); 0 is exact.
    engine : :class:`~sgrad.parallel.local.LocalEngine` (default) or :class:`~sgrad.parallel.ray_engine.RayEngine`.
    run, checkpoint, checkpoint_every : as in ``train_loop``: a checkpoint of this ``run`` at
        ``checkpoint`` is carried on from, and one is written every ``checkpoint_every`` steps and at the end.
    timeline_steps : the first and last steps whose events every worker records.
    input_generators, input_alpha : the complete unlock's ``[I_1, ..., I_m]``, one per hidden block
        (:class:`~sgrad.dni.synthetic_inputs.InputGenerator`, I_k predicting h_k), and their learning rate, as
        :func:`~sgrad.dni.steps.complete_unlock_step` takes them; the worker above each interface holds its
        I_k, and they are trained and checkpointed with ``layers`` (the network ``layers + input_generators``).

    Raises :class:`~sgrad.TrainingDiverged` if a number turns non-finite in a worker, and
    :class:`~sgrad.parallel.engines.WorkerFailed` if a worker raises anything else or dies; every
    worker has stopped by then, as it has when Ctrl-C interrupts the run.
    """
    check_choice(schedule, "schedule", SCHEDULE_NAMES)
    blocks = len(layers) - 1
    workers = blocks if workers is None else check_integer(workers, "workers")
    if not 1 <= workers <= blocks:
        raise ValueError(f"workers must be between 1 and the network's {blocks} hidden blocks (one block per worker "
                         f"at most); got {workers}")
    if schedule in ("dni", "cdni", *COMPLETE_SCHEDULES):
        _check_generators(layers[:-1], schedule, layers[-1].output_dim)
    input_generators = list(input_generators)
    if schedule in COMPLETE_SCHEDULES:
        if input_alpha is None:
            raise ValueError(f"schedule {schedule!r} needs input_alpha=, the learning rate of its input generators")
        input_alpha = check_learning_rate(input_alpha, "input_alpha")
    elif input_generators or input_alpha is not None:
        raise ValueError(f"input generators train under the complete unlock only; schedule {schedule!r} uses none. "
                         "Leave input_generators and input_alpha out, or use schedule 'complete' or 'ccomplete'")
    if checkpoint is not None and run is None:
        raise ValueError("a checkpoint needs run=, what identifies the run (settings and data), to resume from it")
    plan = Plan(schedule=schedule, steps=check_integer(steps, "steps"), start=0,
                eval_every=check_integer(eval_every, "eval_every"),
                save_every=None if checkpoint is None or checkpoint_every is None
                else check_integer(checkpoint_every, "checkpoint_every"),
                staleness=check_integer(staleness, "staleness", minimum=0), timeline=timeline_steps,
                alpha=check_learning_rate(alpha), loss_fn=loss_fn, classes=layers[-1].output_dim,
                input_alpha=input_alpha or 0.0)
    x_train, y_train, x_test, y_test = data
    _check_data(x_train, y_train, x_test, y_test, layers, check_integer(batch_size, "batch_size"))
    if schedule in COMPLETE_SCHEDULES:  # refused here, in the driver, as the single-process step refuses it
        onehot = np.eye(plan.classes, dtype=x_train.dtype)[y_train[:batch_size]]
        check_input_generators(layers, input_generators, x_train[:batch_size],
                               onehot if schedule == "ccomplete" else None)
    network = list(layers) + input_generators  # what is trained, checkpointed and resumed
    history = new_history(schedule, workers)
    batches, losses = BatchOrder(len(x_train), batch_size, rng), []
    before = Diagnostics()  # what the sessions before this one recorded, up to the checkpoint it resumes from

    def say(line):
        if progress is not None:
            progress(f"{label} {line}")

    session_start = time.time()
    saved = resume_run(checkpoint, network, run or {}, budget=plan.steps, batches=batches, history=history,
                       progress=say)
    if saved is not None:
        history, losses = saved.metadata["history"], saved.metadata["loop"]["losses"]
        plan = dataclasses.replace(plan, start=saved.metadata["step"])
        before = Diagnostics.from_json(saved.metadata["loop"], timeline_steps, checkpoint)
        say(f"resumed from {checkpoint} at iteration {plan.start} of {plan.steps}")
    start = session_start - history["wall_time"]
    stages = split_layers(len(layers), workers)
    team = _workers(layers, input_generators, stages, plan, data, batches, losses)

    engine = LocalEngine() if engine is None else engine
    this_session: list[tuple[list[Event], dict[int, int]]] = []  # every worker's timeline and late targets
    states: dict[int, dict[int, tuple]] = {}  # step -> {worker: (arrays, loop state)}
    done = 0
    try:
        engine.start(team)
        while done < workers:
            report = engine.next_report(REPORT_TIMEOUT)
            if report is None:
                continue
            worker = team[report.worker]
            if report.kind == "evaluation":
                step, accuracy, loss, when = report.payload
                history["wall_time"] = when - start
                history["evaluation_time"].append(history["wall_time"])
                history["iteration"].append(step)
                history["test_accuracy"].append(accuracy)
                history["train_loss"].append(loss)
                say(f"iteration {step}/{plan.steps}  train loss {loss:.4f}  test accuracy {100 * accuracy:.2f}%  "
                    f"({history['wall_time']:.0f} s)")
            elif report.kind == "state":
                step, arrays, loop = report.payload
                states.setdefault(step, {})[report.worker] = (arrays, loop)
                if len(states[step]) == workers:
                    _gather(team, states.pop(step), rng, history, start, step, network, run, checkpoint, before)
            elif report.kind == "timeline":
                this_session.append(report.payload)
            elif report.kind == "error":
                error = report.payload
                if error["type"] == "FloatingPointError":
                    history["diverged_at_iteration"] = error["step"]
                    raise TrainingDiverged.at(label, "iteration", error["step"], error["message"], {"alpha": alpha},
                                              history, where=f" in {describe(worker)}")
                raise failure(worker, error)
            elif report.kind == "done":
                done += 1
    finally:
        engine.stop()
    history["wall_time"] = time.time() - start
    diagnostics = before.plus(this_session)
    return ParallelRun(history, diagnostics.events, diagnostics.stale_targets)


@dataclasses.dataclass
class Diagnostics:
    """A run's timeline events and its count of late generator targets, summed over the sessions that made it."""

    events: list[Event] = dataclasses.field(default_factory=list)
    stale_targets: dict[int, int] = dataclasses.field(default_factory=dict)

    def plus(self, workers: Sequence[tuple[list[Event], dict[int, int]]]) -> "Diagnostics":
        """These and what ``workers`` recorded (each worker's ``(events, late targets)``), in one sorted record."""
        events, stale = list(self.events), dict(self.stale_targets)
        for worker_events, worker_stale in workers:
            events += worker_events
            for lateness, count in worker_stale.items():
                stale[lateness] = stale.get(lateness, 0) + count
        return Diagnostics(sorted(events, key=lambda e: (e.worker, e.start)), dict(sorted(stale.items())))

    def to_json(self) -> dict[str, Any]:
        return {"timeline": [e._asdict() for e in self.events], "stale_targets": self.stale_targets}

    @classmethod
    def from_json(cls, loop: dict[str, Any], timeline_steps: tuple[int, int], path: Any) -> "Diagnostics":
        """What the loop state of the checkpoint at ``path`` kept, with only the events of the steps this run records.

        Raises :class:`~sgrad.nn.checkpoint.CheckpointError` naming the file and the field if they are not what
        :func:`train_parallel` writes.
        """
        try:
            check_record(loop, {"timeline": [Event(0, "", 0, 0.0, 0.0)._asdict()], "stale_targets": {}}, "its 'loop'")
        except ValueError as error:
            raise damaged(path, str(error), START_AFRESH, CheckpointError) from None
        counts = loop["stale_targets"]
        if not all(lateness.isdigit() and isinstance(count, int) and not isinstance(count, bool) and count >= 0
                   for lateness, count in counts.items()):
            raise damaged(path, f"its loop's 'stale_targets' must count late targets (whole numbers >= 0) by their "
                                f"lateness (a whole number >= 0); got {counts!r}", START_AFRESH, CheckpointError)
        stale = {int(lateness): count for lateness, count in counts.items()}
        first, last = timeline_steps
        events = [Event(*(e[field] for field in Event._fields)) for e in loop["timeline"] if first <= e["step"] <= last]
        return cls(events, stale)


def new_history(schedule: str, workers: int) -> dict[str, Any]:
    """A fresh history of :func:`train_parallel` (what a checkpoint's or a cached run's history holds, at least)."""
    return {"schedule": schedule, "workers": workers, "iteration": [], "test_accuracy": [], "train_loss": [],
            "evaluation_time": [], "wall_time": 0.0}


def _workers(layers, input_generators, stages, plan, data, batches, losses):
    """A Worker per stage: the bottom one gets the training set, the test images and the batches; the top one the
    test labels and the training losses since the last evaluation.

    Under the complete unlock every worker draws the batches itself (a copy of the same order, so the same
    batches) and holds the input generators of its layers' inputs (I_k for layer k, k >= 1).
    """
    x_train, y_train, x_test, y_test = data
    bottom, top = 0, len(stages) - 1
    every = bool(input_generators)
    return [Worker(k, len(stages), layers[stage.start:stage.stop], plan, first_layer=stage.start,
                   train=(x_train, y_train) if k == bottom or every else None, test_x=x_test if k == bottom else None,
                   batches=batches if k == bottom else copy.deepcopy(batches) if every else None,
                   test_y=y_test if k == top else None, losses=losses if k == top else None,
                   input_generators=[input_generators[i - 1] if i else None for i in stage] if every else None)
            for k, stage in enumerate(stages)]


def _gather(team, states, rng, history, start, step, network, run, checkpoint, before):
    """Copy every worker's reported arrays into its modules, those of ``network``; write the checkpoint if there is one.

    The checkpoint also keeps the diagnostics up to ``step``: ``before`` (the sessions before this one)
    and what every worker has recorded in this one.
    """
    for k, worker in enumerate(team):
        load_network_state(worker.modules, states[k][0])
    bottom, top = states[0][1], states[len(team) - 1][1]
    rng.bit_generator.state = bottom["rng"]
    if checkpoint is not None:
        history["wall_time"] = time.time() - start
        diagnostics = before.plus([(loop["timeline"], loop["stale_targets"]) for _, loop in states.values()])
        save_run(checkpoint, network, run, step=step, batches=bottom, history=history,
                 loop={"losses": top["losses"], **diagnostics.to_json()})


def _check_data(x_train, y_train, x_test, y_test, layers, batch_size):
    """The arrays fit the network: (n, input_dim) images in its dtype, one integer label per row, a batch's worth."""
    dtype = layers[-1].weights.dtype
    for name, x, y in (("x_train", x_train, y_train), ("x_test", x_test, y_test)):
        check_batch(x, name, layers[0].input_dim, width_name="the network's input_dim")
        if x.dtype != dtype:
            raise TypeError(f"{name} must have the network's dtype, {dtype}; got {x.dtype}. Convert it with "
                            f"{name}.astype(np.{dtype})")
        check_labels(y, f"the labels of {name}", layers[-1].output_dim)
        if len(y) != len(x):
            raise ValueError(f"the labels of {name} must be one per row of {name}: {len(x)}; got {len(y)}")
    if len(x_train) < batch_size:
        raise ValueError(f"batch_size ({batch_size}) is larger than the training set ({len(x_train)} examples); "
                         "use a smaller batch_size or more training examples")


def _check_generators(blocks, schedule, classes):
    condition_dim = classes if schedule in ("cdni", "ccomplete") else 0
    for k, block in enumerate(blocks):
        generator = getattr(block, "generator", None)
        if generator is None or getattr(generator, "condition_dim", None) != condition_dim:
            raise ValueError(f"schedule {schedule!r} needs every hidden block to be a DNIBlock whose generator takes "
                             f"condition_dim={condition_dim}; block {k} is {block!r}. Build the network for "
                             f"{schedule!r} (sgrad.experiments.mnist.build_network({schedule!r}, ...))")
