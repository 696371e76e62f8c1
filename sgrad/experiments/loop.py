"""The experiment loop: one resumable training run, and what every experiment shares.

An experiment (:mod:`~sgrad.experiments.binary_addition`, :mod:`~sgrad.experiments.mnist`) builds a network and
two functions of its own, then hands them to :func:`train_loop`:

- ``train_step(indices, history) -> loss``: one step of its method on the
  training examples ``indices`` (:func:`take_step` knows every method's step);
- ``evaluate(step, losses, history) -> line``: measure the network, record the
  figures in ``history`` and return a one-line status (None: say nothing).
  ``losses`` are the training losses of the steps since the last evaluation.

The loop does the rest, the same way for every experiment:

- batches: each pass over the training set in a new random order drawn from
  ``rng``; a pass takes ``num_examples // batch_size`` full batches, so every
  step's gradients have the same scale (the few examples left over are seen
  in other passes);
- divergence: every step runs with NumPy's overflow, invalid and
  divide-by-zero raising, and a non-finite loss or number stops the run at
  once with :class:`TrainingDiverged`, which names the method, the step and the
  learning rates;
- checkpoints: every ``checkpoint_every`` steps and at the end, the network,
  the batch order and the history are saved (:func:`sgrad.checkpoint.save_run`);
  a later run with the same settings carries on from there, bit for bit;
- wall time: ``history['wall_time']``, the seconds this session has spent
  (from reading the checkpoint on) plus, on a resumed run, what the sessions
  before had spent up to the checkpoint it resumed from.

Below the loop, what experiments share besides: :func:`take_step` (which
step each method takes), the checks made before any work starts
(:func:`check_settings`, the settings every config has; :func:`check_methods`;
:func:`check_split`, the data; :func:`check_network_size`, the memory a
network would need; :func:`check_out_dir`, the results folder),
:func:`run_and_report` (a comparison carries on past a diverged run),
:func:`checkpoint_path` and :func:`atomic_write_text` (every results file is
written whole or not at all).
"""

import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..checkpoint import atomic_write, resume_run, save_run
from ..optimizers import UPDATE_RULES, get_update_rule
from ..steps import Loss, backprop_step, dni_step, synthetic_loss_step
from ..validation import check_batch, check_bool, check_choice, check_fits_dtype, check_integer, check_learning_rate

DTYPES = ("float32", "float64")
# The methods whose hidden layers learn from generators rather than from the true gradient.
DECOUPLED = ("dni", "cdni", "synthetic-loss")
# What a generator regresses onto: bootstrapped targets (the method) or the true gradient (a teaching option).
TARGETS = ("bootstrap", "true")
CHECKPOINT_FOLDER = "checkpoints"
# The most memory that a network's parameters, their gradients and its update rule's state may take.  The
# largest net the README trains (cDNI at depth 6 with 1024-1024 batch-norm generators, float32, Adam: 8.4
# million parameters) needs 134 MB; 2 GiB is 16 times that and still leaves room for MNIST (188 MB) on an
# 8 GB laptop; a network that size (134 million parameters) would take days per pass over MNIST on one core
# (6 flops per parameter and example at the 90 GFLOP/s that docs/performance measures).
MAX_NETWORK_BYTES = 2 * 2**30

Progress = Callable[[str], None] | None


class TrainingDiverged(FloatingPointError):
    """Training produced a non-finite number; the message names the method, the step and the likely cause.

    ``history`` holds what was recorded up to the step that diverged.
    """

    def __init__(self, message: str, history: dict[str, Any]) -> None:
        super().__init__(message)
        self.history = history


def train_loop(network: Sequence[Any], train_step: Callable[[np.ndarray, dict], float],
               evaluate: Callable[[int, list[float], dict], str | None], *, run: dict[str, Any], steps: int,
               eval_every: int, num_examples: int, batch_size: int, rng: np.random.Generator,
               history: dict[str, Any], name: str, label: str, learning_rates: dict[str, float], unit: str = "step",
               keep_step_losses: bool = False, checkpoint: str | os.PathLike[str] | None = None,
               checkpoint_every: int | None = None, progress: Progress = None) -> dict[str, Any]:
    """Train ``network`` for ``steps`` steps of ``batch_size`` examples; returns the history.

    run : what identifies the run in a checkpoint (method, settings without the
        budget, data fingerprint); JSON-ready.
    eval_every : ``evaluate`` runs every this many steps, and once more at the
        end if steps were taken since the last evaluation.
    rng : draws the batch order (and nothing else).
    history : a fresh history (with ``'wall_time': 0.0``), for a run that does not resume.
    name, label, unit : how messages call the run and its steps: ``'dni (depth 3)'``,
        ``'[dni, depth 3]'`` (before every progress line), ``'iteration'``.
    learning_rates : named in the message of a divergence, e.g. ``{'alpha': 0.01}``.
    keep_step_losses : also keep every step's loss in ``history['step_loss']``.
    checkpoint, checkpoint_every : an .npz path saved every ``checkpoint_every``
        steps (None: only at the end); a checkpoint there of this ``run``, within
        ``steps``, is carried on from.
    progress : called with one line of status at evaluations and on resuming.

    Raises :class:`TrainingDiverged` if a number turns non-finite; its history
    then holds ``diverged_at_<unit>``.
    """
    if checkpoint_every is not None:
        check_integer(checkpoint_every, "checkpoint_every")
    keep_step_losses = check_bool(keep_step_losses, "keep_step_losses")

    def say(line):
        if progress is not None:
            progress(f"{label} {line}")

    session_start = time.perf_counter()  # reading the checkpoint is part of this session's time
    saved = resume_run(checkpoint, network, run, budget=steps, rng=rng, progress=say)
    if saved is None:
        step, order, position, losses = 0, np.arange(0), 0, []
    else:
        history, step, order = saved.metadata["history"], saved.metadata["step"], saved.extra["order"]
        position, losses = saved.metadata["loop"]["position"], saved.metadata["loop"]["losses"]
        say(f"resumed from {checkpoint} at {unit} {step} of {steps}")
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
                if position + batch_size > len(order):  # a new pass over the training set, in a new order
                    order, position = rng.permutation(num_examples), 0
                loss = train_step(order[position:position + batch_size], history)
                position += batch_size
                if not np.isfinite(loss):
                    raise FloatingPointError(f"the loss became {loss}")
                losses.append(loss)
                if keep_step_losses:
                    history["step_loss"].append(loss)
                if step % eval_every == 0:
                    record_evaluation()
                if checkpoint is not None and (step == steps or (checkpoint_every and step % checkpoint_every == 0)):
                    history["wall_time"] = time.perf_counter() - start
                    save_run(checkpoint, network, run, step=step, rng=rng, history=history,
                             loop={"position": position, "losses": losses}, extra={"order": order})
            if losses:  # the budget ended between two evaluations: one more, at the end
                record_evaluation()
    except FloatingPointError as error:
        history["wall_time"] = time.perf_counter() - start
        history[f"diverged_at_{unit}"] = step
        rates = ", ".join(f"{rate}={value}" for rate, value in learning_rates.items())
        raise TrainingDiverged(f"{name} diverged at {unit} {step}: {error}. The learning rate ({rates}) "
                               "is the likely cause; try a smaller one.", history) from error
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


def check_settings(config: Any, own: dict[str, Any]) -> None:
    """Check the settings every experiment's config has, and store them with its ``own`` checked ones on ``config``.

    Every experiment has batch_size, update_rule, alpha, generator_alpha, dtype
    and seed.  ``config`` is a frozen dataclass; it gets plain Python ints,
    floats and tuples, because it goes into JSON (checkpoints, results).
    """
    shared = {
        "batch_size": check_integer(config.batch_size, "batch_size"),
        "update_rule": check_choice(config.update_rule, "update rule", UPDATE_RULES),
        "alpha": check_learning_rate(config.alpha, "alpha"),
        "generator_alpha": (None if config.generator_alpha is None
                            else check_learning_rate(config.generator_alpha, "generator_alpha")),
        "dtype": check_choice(config.dtype, "dtype", DTYPES),
        "seed": check_integer(config.seed, "seed", minimum=0),
    }
    for field, value in {**own, **shared}.items():
        object.__setattr__(config, field, value)


def check_split(data: Sequence[np.ndarray], batch_size: int, dtype: str,
                check_targets: Callable[[Any, Any], None]) -> None:
    """Check ``data = (x_train, y_train, x_test, y_test)`` before training on it in ``dtype``.

    x arrays: finite floats (n, features), as many features in both, each
    value within ``dtype``'s range; ``check_targets(y_train, y_test)`` checks
    the experiment's own targets; every y has a row per row of its x; the
    training set holds at least ``batch_size`` examples.
    """
    if not isinstance(data, (tuple, list)) or len(data) != 4:
        raise TypeError(f"data must be a tuple (x_train, y_train, x_test, y_test); got {type(data).__name__}"
                        + (f" of {len(data)} items" if isinstance(data, (tuple, list)) else ""))
    x_train, y_train, x_test, y_test = data
    check_batch(x_train, "x_train")
    check_batch(x_test, "x_test", x_train.shape[1], width_name="the width of x_train")
    check_targets(y_train, y_test)
    for x_name, x, y_name, y in (("x_train", x_train, "y_train", y_train), ("x_test", x_test, "y_test", y_test)):
        if len(x) != len(y):
            raise ValueError(f"{x_name} and {y_name} must have as many rows; got {len(x)} and {len(y)}")
        check_fits_dtype(x, x_name, dtype)
    check_batch_fits(batch_size, len(x_train))


def check_batch_fits(batch_size: int, examples: int) -> None:
    """Refuse a ``batch_size`` larger than the training set's ``examples``: no full batch could be drawn."""
    if examples < batch_size:
        raise ValueError(f"batch_size ({batch_size}) is larger than the training set ({examples} examples); "
                         "use a smaller batch_size or more training examples")


def check_network_size(parameters: int, dtype: str, update_rule: str, what: str) -> None:
    """Refuse, before it is built, a network whose arrays would take more than :data:`MAX_NETWORK_BYTES`.

    parameters : how many numbers the network learns.  Each takes ``dtype``'s
    bytes, once as a parameter, once as a gradient and once per array of the
    update rule's state (two for Adam).  ``what`` names the network in the message.
    """
    state = get_update_rule(update_rule).init_state(np.zeros(1))
    arrays = 2 + sum(np.shape(value) == (1,) for value in state.values())
    needed = parameters * arrays * np.dtype(dtype).itemsize
    if needed > MAX_NETWORK_BYTES:
        raise ValueError(f"{what} would need {needed:,} bytes ({needed / 2**30:,.1f} GiB) for its {parameters:,} "
                         f"parameters, their gradients and {update_rule}'s state, more than the "
                         f"{MAX_NETWORK_BYTES / 2**30:g} GiB that sgrad allows "
                         "(sgrad.experiments.loop.MAX_NETWORK_BYTES); use smaller widths")


def check_out_dir(out_dir: str | os.PathLike[str] | None, name: str = "out_dir") -> None:
    """Check, before any work, that the results folder ``out_dir`` can be made and written to (None: no folder).

    Nothing is created here: the folder is made when the first file is written.
    """
    if out_dir is None:
        return
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"{name} must be a folder's path (str or pathlib.Path); got {type(out_dir).__name__}")
    path = existing = pathlib.Path(out_dir)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name} {path} cannot be made: {existing} is a file, not a folder; choose another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {path} cannot be made: you may not write in {existing}; "
                         "choose a folder you can write to")


def check_methods(methods: str | Sequence[str], known: Sequence[str]) -> list[str]:
    """``methods`` as a list: one name, or a non-empty sequence of names, each one of ``known``."""
    methods = [methods] if isinstance(methods, str) else list(methods)
    if not methods or any(method not in known for method in methods):
        raise ValueError(f"methods must be a non-empty list drawn from {', '.join(known)}; got {methods!r}")
    return methods


def checkpoint_path(out_dir: str | os.PathLike[str] | None, run_name: str,
                    checkpoint_every: int | None) -> pathlib.Path | None:
    """Where a run of an experiment writing to ``out_dir`` keeps its checkpoint (None: it keeps none)."""
    if out_dir is None or checkpoint_every is None:
        return None
    return pathlib.Path(out_dir) / CHECKPOINT_FOLDER / f"{run_name}.npz"


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` (creating its folder): an interrupted write leaves the old file whole.

    As a checkpoint is written (:func:`sgrad.checkpoint.atomic_write`): to a
    temporary file beside ``path``, which is then renamed over it.
    """
    atomic_write(path, lambda file: file.write(text.encode("utf-8")))
