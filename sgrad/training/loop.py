"""The experiment loop: one resumable training run, the same for every experiment.

An experiment (:mod:`~sgrad.experiments.binary_addition`, :mod:`~sgrad.experiments.mnist`,
:mod:`~sgrad.experiments.rnn`, :mod:`~sgrad.experiments.char_lm`) builds a network and two functions of
its own, then hands them to :func:`train_loop`:

- ``train_step(indices, history) -> loss``: one step of its method on the
  training examples ``indices`` (:func:`take_step` knows every method's step);
- ``evaluate(step, losses, history) -> line``: measure the network, record the
  figures in ``history`` and return a one-line status (None: say nothing).
  ``losses`` are the training losses of the steps since the last evaluation.

The loop does the rest, the same way for every experiment:

- batches: drawn from a :class:`~sgrad.training.batches.BatchOrder`, each pass over the
  training set in a new random order, in full batches;
- divergence: every step runs with NumPy's overflow, invalid and
  divide-by-zero raising, and a non-finite loss or number stops the run at
  once with :class:`~sgrad.TrainingDiverged`, which names the run, the step and
  the learning rates;
- checkpoints: every ``checkpoint_every`` steps and at the end, the network,
  the batch order and the history are saved (:func:`sgrad.training.resume.save_run`);
  a later run with the same settings carries on from there, bit for bit;
- wall time: ``history['wall_time']``, the seconds this session has spent
  (from reading the checkpoint on) plus, on a resumed run, what the sessions
  before had spent up to the checkpoint it resumed from.

:func:`run_and_report` lets a comparison carry on past a run that diverged.  What experiments
share besides lives in modules of its own: the checks made before any work
(:mod:`~sgrad.training.settings`), the files they write (:mod:`~sgrad.training.results_folder`) and the finished cells
(:mod:`~sgrad.training.cell_cache`).
"""

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..argument_checks import check_bool, check_integer
from ..dni.steps import Loss, backprop_step, dni_step, synthetic_loss_step
from .batches import BatchOrder
from .diverged import TrainingDiverged
from .memory import keep_freed_memory
from .resume import resume_run, save_run

Progress = Callable[[str], None] | None


@dataclasses.dataclass(frozen=True)
class RunName:
    """How the loop's messages name a run.

    name : in a divergence's message, e.g. 'dni (depth 3)'.
    label : before every progress line, e.g. '[dni, depth 3]'.
    learning_rates : named as a divergence's likely cause, e.g. ``{'alpha': 0.01}``.
    unit : what a step is called, e.g. 'iteration'.
    """

    name: str
    label: str
    learning_rates: dict[str, float]
    unit: str = "step"


def train_loop(network: Sequence[Any], train_step: Callable[[np.ndarray, dict], float],
               evaluate: Callable[[int, list[float], dict], str | None], *, steps: int, eval_every: int,
               batches: BatchOrder, history: dict[str, Any], names: RunName, run: dict[str, Any],
               checkpoint: str | os.PathLike[str] | None = None, checkpoint_every: int | None = None,
               check_history: Callable[[dict], Any] | None = None, keep_step_losses: bool = False,
               progress: Progress = None) -> dict[str, Any]:
    """Train ``network`` for ``steps`` steps, a batch from ``batches`` each; returns the history.

    eval_every : ``evaluate`` runs every this many steps, and once more at the
        end if steps were taken since the last evaluation.
    batches : a fresh :class:`~sgrad.training.batches.BatchOrder`; its rng draws the batch order (and nothing else).
    history : a fresh history (with ``'wall_time': 0.0``), for a run that does not resume.
    names : how messages name the run (:class:`RunName`).
    run : what identifies the run in a checkpoint (method, settings without the
        budget, data fingerprint); JSON-ready.
    checkpoint, checkpoint_every : an .npz path saved every ``checkpoint_every``
        steps (None: only at the end); a checkpoint there of this ``run``, within
        ``steps``, is carried on from, once its fields are checked: its history must
        have the shape of ``history`` and pass ``check_history`` (the experiment's
        own state, e.g. a curriculum; None: no more checks).
    keep_step_losses : also keep every step's loss in ``history['step_loss']``.
    progress : called with one line of status at evaluations and on resuming.

    Raises :class:`~sgrad.TrainingDiverged` if a number turns non-finite; its history
    then holds ``diverged_at_<unit>``.  From the first step on, the process keeps the memory its steps free
    (:func:`~sgrad.training.memory.keep_freed_memory`).
    """
    if checkpoint_every is not None:
        check_integer(checkpoint_every, "checkpoint_every")
    keep_step_losses = check_bool(keep_step_losses, "keep_step_losses")

    def say(line):
        if progress is not None:
            progress(f"{names.label} {line}")

    keep_freed_memory()  # each step allocates what the last one freed: see sgrad.training.memory
    session_start = time.perf_counter()  # reading the checkpoint is part of this session's time
    saved = resume_run(checkpoint, network, run, budget=steps, batches=batches, history=history,
                       check_history=check_history, progress=say)
    step, losses = 0, []
    if saved is not None:
        history, step, losses = saved.metadata["history"], saved.metadata["step"], saved.metadata["loop"]["losses"]
        say(f"resumed from {checkpoint} at {names.unit} {step} of {steps}")
    # The time before (summed over the sessions up to the checkpoint), then this session's on top.
    start = session_start - history["wall_time"]

    def record_evaluation():
        history["wall_time"] = time.perf_counter() - start  # current, for the status line
        line = evaluate(step, losses, history)
        losses.clear()
        if line is not None:
            say(line)

    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            while step < steps:
                step += 1
                loss = train_step(batches.next(), history)
                if not np.isfinite(loss):
                    raise FloatingPointError(f"the loss became {loss}")
                losses.append(loss)
                if keep_step_losses:
                    history["step_loss"].append(loss)
                if step % eval_every == 0:
                    record_evaluation()
                if checkpoint is not None and (step == steps or (checkpoint_every and step % checkpoint_every == 0)):
                    history["wall_time"] = time.perf_counter() - start
                    save_run(checkpoint, network, run, step=step, batches=batches.state(), history=history,
                             loop={"losses": losses})
            if losses:  # the budget ended between two evaluations: one more, at the end
                record_evaluation()
    except FloatingPointError as error:
        history["wall_time"] = time.perf_counter() - start
        history[f"diverged_at_{names.unit}"] = step
        raise TrainingDiverged.at(names.name, names.unit, step, error, names.learning_rates, history) from error
    history["wall_time"] = time.perf_counter() - start
    return history


def take_step(method: str, layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Loss, alpha: float, *,
              targets: Sequence[np.ndarray] | None = None) -> tuple[float, list[float]]:
    """One step of ``method`` on the batch ``(x, y)``; returns ``(loss, generator_losses)``.

    - backprop: every layer learns from the true gradient;
    - no-bprop: only the top layer learns;
    - dni, cdni: each hidden layer learns from its generator's ĝ_k at once (cdni's
      generators also see c = y); ``targets`` replaces the bootstrapped ones;
    - synthetic-loss: each hidden block descends its predicted loss; the loss
      reported is the batch mean of the softmax cross-entropy, whatever ``loss_fn``.
    """
    if method == "backprop":
        return backprop_step(layers, x, y, loss_fn, alpha), []
    if method == "no-bprop":
        return backprop_step(layers, x, y, loss_fn, alpha, trainable=len(layers) - 1), []
    if method == "synthetic-loss":
        return synthetic_loss_step(layers, x, y, alpha)
    return dni_step(layers, x, y, loss_fn, alpha, condition=y if method == "cdni" else None, targets=targets)


def run_and_report(train: Callable[[], dict[str, Any]], label: str, progress: Progress) -> dict[str, Any]:
    """``train()``'s history; a run that diverges gives what it recorded, with ``'diverged'`` (the reason).

    So a comparison carries on with its other runs.  ``progress`` hears of a
    divergence and of the run's wall time, after ``label``.
    """
    try:
        history = train()
    except TrainingDiverged as error:
        history = dict(error.history, diverged=str(error))
        if progress is not None:
            progress(f"{label} {error}")
    if progress is not None:
        progress(f"{label} done in {history['wall_time']:.1f} s")
    return history
