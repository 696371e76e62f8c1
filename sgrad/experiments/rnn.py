"""``sgrad rnn``: recurrent DNI on Copy and Repeat Copy (Jaderberg et al. 2016, section 3.1).

An LSTM core reads a sequence (:mod:`data_gen.copy_task`), a linear readout
gives the logits of every step's output bits, and the loss is the sigmoid
cross-entropy of the scored steps.  Training cuts each sequence into windows of
T steps (:func:`sgrad.recurrent.tbptt.tbptt_step`):

- ``bptt``: truncated BPTT.  The gradient stops at every window's end, so
  nothing teaches the core to keep a vector for longer than a window: the
  answer to the vector at step t comes N + 1 steps later (Copy).
- ``dni``: at every window's end a linear generator ``ĝ = M(s)`` of the state
  s = [h, c], zero-initialised, stands in for the gradient from the future that
  truncation throws away.  M regresses onto bootstrapped targets: the gradient
  that reaches the next window's start (its loss, plus M's own ĝ at its end).

The paper's third method, DNI + Aux (the core also predicts the synthetic
gradients further ahead), is left out: its text does not pin down the form of
the auxiliary prediction and loss well enough to implement it as the paper did.

A curriculum (:class:`data_gen.copy_task.Curriculum`) starts at N = 1 and raises
N by one whenever the average error of a fresh batch falls below 0.15 bits per
sequence (the paper's criterion); the figure of merit is the largest N solved
within the budget of steps.  :func:`run_grid` runs task × method × T × seed,
caching each finished cell in its output folder so that an interrupted grid resumes.
"""

import dataclasses
import functools
import json
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from data_gen.copy_task import PAPER_THRESHOLD, Curriculum, bits_error, copy_batch, repeat_copy_batch

from ..argument_checks import check_bool, check_bytes, check_choice, check_integer, check_number
from ..atomic_files import atomic_write_text
from ..nn.losses import bce_with_logits
from ..recurrent.boundary_targets import ONE_WINDOW, BoundaryTargets, LambdaReturn, NWindows, Untruncated
from ..recurrent.eligibility_traces import BPLambda
from ..recurrent.tbptt import Sequences, SyntheticGradient, tbptt_step
from ..training.batches import BatchOrder
from ..training.cell_cache import CellCache
from ..training.loop import RunName, run_and_report, train_loop
from ..training.results_folder import check_out_dir, checkpoint_path, one_writer
from ..training.settings import TARGETS, check_methods, check_network_size, check_settings, learning_rates
from .lstm_model import check_recurrent_settings, lstm_model

TASKS = ("copy", "repeat-copy")
RNN_METHODS = ("bptt", "dni")
DEFAULT_WINDOWS = (2, 3, 4, 5, 8)


@dataclasses.dataclass(frozen=True)
class RnnConfig:
    """One cell's settings (the task, method and T are the cell's own).

    steps : the budget, in training steps of ``batch_size`` sequences each.
    hidden : the LSTM's hidden_dim (its state [h, c] has 2 * hidden numbers).
    bits : the width of each vector to copy.
    max_repeats : Repeat Copy draws each sequence's R uniformly from 1 to this.
    threshold : the curriculum's error, in bits per sequence, below which N goes up.
    eval_every : steps between the curriculum's measurements, each on a fresh batch.
    update_rule, alpha, generator_alpha : the core's, the readout's and the
        generator's update rule and learning rates (``generator_alpha=None``: alpha).
    synthetic_scale : γ, the weight of ĝ where it enters a window's backward (DNI; see
        :class:`~sgrad.recurrent.tbptt.SyntheticGradient`): 1 is ĝ as it is, below 1 a discount per window.
    generator_targets : what the DNI generator regresses onto: 'bootstrap' (the default, the method) or
        'true' (a teaching option: the untruncated gradient of the rest of the sequence at each boundary,
        ``SyntheticGradient(..., targets=Untruncated())``; it backpropagates through every later step, so it shows how far
        a generator fed the future's exact gradient would carry the core, not a method that saves anything).
    target_windows : n, the windows a DNI generator's bootstrapped target spans (``SyntheticGradient(...,
        targets=NWindows(n))``): 1 (the default) is the method; n > 1 (a teaching option between 'bootstrap' and
        'true') backpropagates the loss of n windows, then bootstraps with ĝ at their end, as n-step returns do
        in temporal-difference learning.  Only with generator_targets='bootstrap'.
    td_lambda : λ in [0, 1]: M regresses onto the λ-return, a λ-weighted mixture of every n-window target
        (``SyntheticGradient(..., targets=LambdaReturn(λ))``, computed on copies); None (the default): the method's
        one-window targets.  λ = 0 is the method; λ = 1 the untruncated targets.
    traces : with td_lambda, learn the same online, with eligibility traces over M's parameters instead of
        targets on copies: accumulate BP(λ) (``targets=BPLambda(λ)``; costly for a wide state: each trace holds
        state_dim² (state_dim + 1) numbers per sequence).
    core_traces : the LSTM's weight gradient within each window by e-prop's eligibility traces, forward in time,
        instead of BPTT through the window (``tbptt_step(..., core_gradient='eprop')``, :mod:`sgrad.recurrent.eprop`); the
        DNI generator's targets are unchanged.  False (the default): BPTT within each window.
    dtype : 'float32' or 'float64'.
    seed : fixes the initial weights (the same for every method) and the sequences drawn.
    """

    steps: int = 20_000
    batch_size: int = 32
    hidden: int = 64
    bits: int = 8
    max_repeats: int = 3
    threshold: float = PAPER_THRESHOLD
    eval_every: int = 50
    update_rule: str = "adam"
    alpha: float = 1e-3
    generator_alpha: float | None = 3e-4
    synthetic_scale: float = 1.0
    generator_targets: str = "bootstrap"
    target_windows: int = 1
    td_lambda: float | None = None
    traces: bool = False
    core_traces: bool = False
    dtype: str = "float64"
    seed: int = 0

    def __post_init__(self) -> None:
        check_settings(self, {
            **check_recurrent_settings(self, scale_example="0.1"),
            "generator_targets": check_choice(self.generator_targets, "generator_targets", TARGETS),
            "target_windows": check_integer(self.target_windows, "target_windows"),
            "td_lambda": None if self.td_lambda is None else check_number(self.td_lambda, "td_lambda", at_least=0,
                                                                          at_most=1, example="0.5"),
            "traces": check_bool(self.traces, "traces"),
            "core_traces": check_bool(self.core_traces, "core_traces"),
            "bits": check_integer(self.bits, "bits"),
            "max_repeats": check_integer(self.max_repeats, "max_repeats"),
            "threshold": check_number(self.threshold, "threshold", above=0, example="0.15"),
        })
        if self.generator_targets == "true" and self.target_windows != 1:
            raise ValueError(f"generator_targets='true' backpropagates through every later step already; "
                             f"target_windows={self.target_windows} asks for n-step bootstrapped targets instead: "
                             "give one of the two")
        if self.td_lambda is not None and (self.generator_targets == "true" or self.target_windows != 1):
            raise ValueError(f"td_lambda={self.td_lambda:g} mixes every n-window target already; give it without "
                             "generator_targets='true' and target_windows")
        if self.traces and self.td_lambda is None:
            raise ValueError("traces=True learns the λ-return online: give td_lambda too (e.g. 0.5)")


def sizes(task: str, config: RnnConfig) -> tuple[int, int]:
    """``(input_dim, output_dim)`` of ``task``'s sequences: Copy adds a delimiter channel, Repeat Copy R and the end."""
    check_choice(task, "task", TASKS)
    return (config.bits + 1, config.bits) if task == "copy" else (config.bits + 2, config.bits + 1)


def parameter_count(task: str, method: str, config: RnnConfig) -> int:
    """How many numbers :func:`build_model` 's model learns, counted without building it.

    The LSTM's W_x (I, 4H), W_h (H, 4H) and b (4H,); the readout's weights (H, O) and bias; for
    ``dni``, the generator's linear map of the state [h, c] (2H, 2H) and its bias.
    """
    input_dim, output_dim = sizes(task, config)
    hidden = config.hidden
    count = 4 * hidden * (input_dim + hidden + 1) + (hidden + 1) * output_dim
    return count + (2 * hidden + 1) * 2 * hidden if method == "dni" else count


def step_bytes(task: str, config: RnnConfig, length: int) -> int:
    """About what one training step's arrays take at N = ``length``: the batch and what the LSTM keeps.

    Per sequence and time step: x, y and the mask; the states h and c and the four gates kept for
    the backward pass, and as many again for their gradients; the readout's logits.
    """
    input_dim, output_dim = sizes(task, config)
    time = 2 * length + 1 if task == "copy" else length + config.max_repeats * length + 2
    per_step = input_dim + 2 * output_dim + 1 + 2 * (2 + 4) * config.hidden
    return config.batch_size * time * per_step * np.dtype(config.dtype).itemsize


def check_sizes(tasks: Sequence[str], methods: Sequence[str], config: RnnConfig) -> None:
    """Refuse, before anything is built, a model or a step at the curriculum's start (N = 1) too large for memory."""
    for task in tasks:
        for method in methods:
            check_network_size(parameter_count(task, method, config), config.dtype, config.update_rule,
                               f"the {method} model of {task} (hidden {config.hidden}, bits {config.bits})")
        check_bytes(step_bytes(task, config, 1), f"a training step on {task} at N = 1 ({config.batch_size} sequences, "
                    f"hidden {config.hidden}, bits {config.bits}, max_repeats {config.max_repeats})",
                    "use a smaller batch_size, hidden, bits or max_repeats")


def draw_batch(task: str, length: int, config: RnnConfig, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch of ``task`` sequences of N = ``length`` vectors: ``(x, y, mask)`` as :mod:`data_gen.copy_task` gives them."""
    if task == "copy":
        return copy_batch(config.batch_size, length, bits=config.bits, rng=rng, dtype=config.dtype)
    repeats = rng.integers(1, config.max_repeats + 1, size=config.batch_size)
    return repeat_copy_batch(config.batch_size, length, repeats, bits=config.bits, max_repeats=config.max_repeats,
                             rng=rng, dtype=config.dtype)


def build_model(task: str, method: str, config: RnnConfig) -> list[Any]:
    """``[core, readout]``, plus the boundary generator for ``dni``; the weights depend on the seed, not the method."""
    check_choice(method, "method", RNN_METHODS)
    input_dim, output_dim = sizes(task, config)
    return lstm_model(input_dim, output_dim, config, generator=method == "dni")


def evaluate_error(model: Sequence[Any], x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The error of each sequence in bits (:func:`~data_gen.copy_task.bits_error`), (batch,), with no side effects."""
    core, readout = model[0], model[1]
    outputs, _ = core.predict(x)
    logits = readout.predict(outputs.reshape(-1, core.hidden_dim)).reshape(*y.shape)
    return bits_error(logits, y, mask)


def train_cell(task: str, method: str, window: int, config: RnnConfig | None = None, *,
               progress: Callable[[str], None] | None = None, checkpoint: str | os.PathLike[str] | None = None,
               checkpoint_every: int | None = None) -> dict[str, Any]:
    """Train ``method`` on ``task`` with windows of T = ``window`` steps under the curriculum; returns the history.

    Each step draws a batch of sequences of the curriculum's current N and
    takes one :func:`~sgrad.recurrent.tbptt.tbptt_step` over it (T is cut to the sequence's
    length when a sequence is shorter: full BPTT then).  Every ``eval_every``
    steps a fresh batch is measured and the curriculum told.  The history holds
    ``step``, ``length`` (the N measured) and ``error`` (mean bits per sequence)
    at every measurement, ``train_loss`` (mean over each span), ``solved`` (the
    largest N solved), ``solved_at`` (the step at which each N was solved),
    ``curriculum`` (its state) and ``wall_time`` (seconds, summed over resumed sessions).

    ``checkpoint`` and ``checkpoint_every`` work as in :func:`sgrad.train`.
    Raises :class:`~sgrad.TrainingDiverged` if a number turns non-finite.
    """
    config = RnnConfig() if config is None else config
    check_choice(task, "task", TASKS)
    check_choice(method, "method", RNN_METHODS)
    window = check_integer(window, "window (T)")
    check_sizes([task], [method], config)
    model = build_model(task, method, config)
    core, readout = model[0], model[1]
    generator = model[2] if method == "dni" else None
    targets: BoundaryTargets = ONE_WINDOW
    if generator is not None and config.td_lambda is not None:
        targets = BPLambda(config.td_lambda) if config.traces else LambdaReturn(config.td_lambda)
    elif generator is not None and config.generator_targets == "true":
        targets = Untruncated()
    elif generator is not None and config.target_windows > 1:
        targets = NWindows(config.target_windows)
    synthetic = None if generator is None else SyntheticGradient(generator, config.generator_alpha,
                                                                 config.synthetic_scale, targets)
    # The loop's rng draws the sequences; a generated task has no training set for it to order, so the loop
    # is told of one example, taken once per step (its one-element "pass" draws nothing that matters).
    rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(3)[2])

    def train_step(_indices, history):
        x, y, mask = draw_batch(task, history["curriculum"]["length"], config, rng)
        loss, _, _ = tbptt_step(core, readout, Sequences(x, y, mask), bce_with_logits, config.alpha,
                                window=min(window, x.shape[1]), synthetic=synthetic,
                                core_gradient="eprop" if config.core_traces else "bptt")
        return loss

    def evaluate(step, losses, history):
        curriculum = Curriculum.from_state(history["curriculum"])
        length = curriculum.length
        errors = evaluate_error(model, *draw_batch(task, length, config, rng))
        if curriculum.update(step, errors):
            history["solved_at"].append(step)
        history["curriculum"], history["solved"] = curriculum.state(), curriculum.solved
        history["step"].append(step)
        history["length"].append(length)
        history["error"].append(float(errors.mean()))
        history["train_loss"].append(float(np.mean(losses)))
        return (f"step {step}/{config.steps}  N {length}  error {history['error'][-1]:.2f} bits/sequence  "
                f"solved N={curriculum.solved}  ({history['wall_time']:.0f} s)")

    run = {"trainer": "sgrad.experiments.rnn.train_cell", "task": task, "method": method, "window": window,
           "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "steps"}}
    history = new_history(task, method, window, config)
    names = RunName(f"{method} ({task}, T={window})", f"[{task}, {method}, T={window}, seed {config.seed}]",
                    learning_rates(config, method == "dni"))
    return train_loop(model, train_step, evaluate, steps=config.steps, eval_every=config.eval_every,
                      batches=BatchOrder(1, 1, rng), history=history, names=names, run=run, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, check_history=_check_curriculum, progress=progress)


def _check_curriculum(history):
    """A resumed cell's curriculum must be one that :class:`~data_gen.copy_task.Curriculum` carries on from."""
    Curriculum.from_state(history["curriculum"])


def new_history(task: str, method: str, window: int, config: RnnConfig) -> dict[str, Any]:
    """A fresh history of :func:`train_cell` (what a cell's history holds, at least)."""
    return {"task": task, "method": method, "window": window, "seed": config.seed, "step": [], "length": [],
            "error": [], "train_loss": [], "solved": 0, "solved_at": [],
            "curriculum": Curriculum(threshold=config.threshold).state(), "wall_time": 0.0}


def check_grid(tasks: Sequence[str], methods: Sequence[str], windows: Sequence[int], seeds: Sequence[int],
               config: RnnConfig, *, checkpoint_every: int | None = None,
               out_dir: str | os.PathLike[str] | None = None) -> tuple[list[str], list[str], list[int], list[int]]:
    """Check a grid before any work; returns ``(tasks, methods, windows, seeds)`` as lists."""
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    if not tasks or any(task not in TASKS for task in tasks):
        raise ValueError(f"tasks must be a non-empty list drawn from {', '.join(TASKS)}; got {tasks!r}")
    methods = check_methods(methods, RNN_METHODS)
    for name, values, minimum in (("windows", windows, 1), ("seeds", seeds, 0)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise TypeError(f"{name} must be a non-empty sequence of integers such as (2, 3); got {values!r}")
        for value in values:
            check_integer(value, f"each of {name}", minimum=minimum)
    if not isinstance(config, RnnConfig):
        raise TypeError(f"config must be an RnnConfig; got {type(config).__name__}")
    check_sizes(tasks, methods, config)
    if checkpoint_every is not None:
        check_integer(checkpoint_every, "checkpoint_every")
    check_out_dir(out_dir)
    return list(tasks), list(methods), [int(w) for w in windows], [int(s) for s in seeds]


def run_grid(*, tasks: Sequence[str] = TASKS, methods: Sequence[str] = RNN_METHODS,
             windows: Sequence[int] = DEFAULT_WINDOWS, seeds: Sequence[int] = (0,), config: RnnConfig | None = None,
             out_dir: str | os.PathLike[str] | None = None, progress: Callable[[str], None] | None = None,
             checkpoint_every: int | None = None) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    """Train every task × method × T × seed; returns ``{(task, method, T, seed): history}``.

    Everything is checked before the first cell trains.  With ``out_dir``, each
    finished cell is saved there at once (``cells/<task>-<method>-T<T>-seed<s>.json``,
    with its settings and the code that made it); a later call with the same
    settings and code loads it instead of training again.  With
    ``checkpoint_every`` too, the cell in training is checkpointed
    (``checkpoints/<task>-<method>-T<T>-seed<s>.npz``) and carries on mid-way,
    bit for bit.  A cell that diverges keeps what it recorded, with
    ``'diverged'``, and the grid carries on.  At the end the folder also gets
    ``results.md``, ``histories.json``, ``copy_length.png`` and ``curriculum.png``.
    """
    config = RnnConfig() if config is None else config
    tasks, methods, windows, seeds = check_grid(tasks, methods, windows, seeds, config,
                                                checkpoint_every=checkpoint_every, out_dir=out_dir)
    with one_writer(out_dir):  # one run at a time writes to a folder
        cells, results = CellCache(out_dir, progress), {}
        for task in tasks:
            for window in windows:
                for seed in seeds:
                    cell_config = dataclasses.replace(config, seed=seed)
                    settings = {"config": dataclasses.asdict(cell_config)}
                    for method in methods:
                        name = f"{task}-{method}-T{window}-seed{seed}"
                        label = f"[{task}, {method}, T={window}, seed {seed}]"
                        cached = cells.load(name, settings, label,
                                            {"history": new_history(task, method, window, cell_config)})
                        if cached is not None:
                            results[(task, method, window, seed)] = cached["history"]
                            continue
                        run = functools.partial(train_cell, task, method, window, cell_config, progress=progress,
                                                checkpoint=checkpoint_path(out_dir, name, checkpoint_every),
                                                checkpoint_every=checkpoint_every)
                        history = run_and_report(run, label, progress)
                        if progress is not None:
                            progress(f"{label} largest N solved: {history['solved']}")
                        results[(task, method, window, seed)] = history
                        cells.save(name, settings, history=history)
        if out_dir is not None:
            write_grid(results, out_dir, config)
    return results


def results_table(results: Mapping[tuple[str, str, int, int], Mapping[str, Any]]) -> str:
    """Markdown: a row per task and method, a column per T: the largest N solved (the median over seeds, then each seed)."""
    keys = list(results)
    windows = sorted({w for _, _, w, _ in keys})
    rows = ["| task | method | " + " | ".join(f"T = {w}" for w in windows) + " |",
            "|---|---|" + "---:|" * len(windows)]
    for task, method in dict.fromkeys((t, m) for t, m, _, _ in keys):
        cells = []
        for window in windows:
            histories = [h for (t, m, w, _), h in results.items() if (t, m, w) == (task, method, window)]
            solved = [h["solved"] for h in histories]
            if not solved:
                cells.append("")
                continue
            text = f"{np.median(solved):g}"
            if len(solved) > 1:
                text += " (" + ", ".join(map(str, solved)) + ")"
            if any(h.get("diverged") for h in histories):
                text += " (diverged)"
            cells.append(text)
        rows.append(f"| {task} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def write_grid(results: Mapping[tuple[str, str, int, int], Mapping[str, Any]], out_dir: str | os.PathLike[str],
               config: RnnConfig) -> None:
    """Write ``results.md``, ``histories.json``, ``copy_length.png`` and ``curriculum.png`` for a finished grid."""
    from .plotting import plot_copy_lengths, plot_curricula

    out = pathlib.Path(out_dir)
    seeds = sorted({s for _, _, _, s in results})
    wall = "\n".join(f"- {t}, {m}, T = {w}, seed {s}: {h['wall_time']:.0f} s"
                     for (t, m, w, s), h in results.items())
    text = (f"Largest N solved (error below {config.threshold} bits per sequence) within {config.steps} steps of "
            f"{config.batch_size} sequences; seeds {', '.join(map(str, seeds))} (median, then each seed).\n\n"
            + results_table(results) + "\n\nWall time per cell:\n\n" + wall + "\n")
    atomic_write_text(out / "results.md", text)
    atomic_write_text(out / "histories.json", json.dumps(
        {"config": dataclasses.asdict(config),
         "cells": [dict(h, task=t, method=m, window=w, seed=s) for (t, m, w, s), h in results.items()]}))
    plot_copy_lengths(results, out / "copy_length.png")
    plot_curricula(results, out / "curriculum.png")
