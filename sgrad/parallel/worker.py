"""One worker of the pipeline: a stage of consecutive layers, the messages it takes and sends, and its loop.

A network ``[block_1, ..., block_{n-1}, top]`` is cut into K stages of consecutive hidden blocks
(:func:`split_layers`); the top layer goes with the last stage.  Worker k holds stage k: its
blocks (with their generators, for DNI), their update rules' state, and nothing of the others'.
Worker 0 also holds the training set and draws the batches; the top worker holds the test
labels and computes the loss.  A worker's loop (:meth:`Worker.run`) takes its schedule's step
for every batch (:mod:`sgrad.parallel.schedules`), passes the test set up at every evaluation,
and reports its state at every checkpoint and at the end.  The same loop runs in a local
process or in a Ray actor: the engine only says how messages travel.
"""

import dataclasses
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ..nn.checkpoint import network_state
from ..training.batches import BatchOrder
from ..training.evaluation import accuracy, predict_in_eval_mode
from ..training.memory import keep_freed_memory
from .messages import Inbox, Message, Report, Source
from .schedules import SCHEDULES
from .timeline import Timeline

def split_layers(layers: int, workers: int) -> list[range]:
    """Which of ``layers`` layers (hidden blocks, then the top) each of ``workers`` workers holds.

    The hidden blocks are shared out in consecutive runs whose lengths differ by at most one (the
    longer runs first); the top layer joins the last.  ``split_layers(3, 2)``: [range(0, 1), range(1, 3)].
    """
    blocks = layers - 1
    sizes = [blocks // workers + (k < blocks % workers) for k in range(workers)]
    bounds = np.cumsum([0, *sizes]).tolist()
    stages = [range(start, end) for start, end in zip(bounds[:-1], bounds[1:])]
    stages[-1] = range(stages[-1].start, layers)  # the top layer joins the last stage
    return stages


@dataclasses.dataclass(frozen=True)
class Plan:
    """What every worker of a run knows.

    schedule : 'backprop', 'pipelined-backprop', 'dni', 'cdni', 'complete' or 'ccomplete'.
    steps, start : the run ends after step ``steps``; ``start`` steps were done before (a resumed run).
    eval_every : the test set goes through the pipeline after every this many steps, and after the last.
    save_every : every worker reports its state every this many steps (None: only after the last).
    staleness : DNI: how many batches a generator may predict for before it regresses onto the
        target of an earlier one (0: none; the run is then the single-process DNI step's, bit for bit).
    timeline : the first and last steps whose events are recorded.
    alpha : the learning rate of the top layer and, under backprop, of every layer.
    input_alpha : the complete unlock: the learning rate of every input generator I_k.
    loss_fn : ``loss_fn(output, y) -> (L, dL/doutput)``, summed over the batch.
    classes : the width of the one-hot labels.
    """

    schedule: str
    steps: int
    start: int
    eval_every: int
    save_every: int | None
    staleness: int
    timeline: tuple[int, int]
    alpha: float
    loss_fn: Callable[[np.ndarray, np.ndarray], tuple[Any, np.ndarray]]
    classes: int
    input_alpha: float = 0.0


class Worker:
    """Worker ``index`` of ``count``: the layers of its stage (the network's from ``first_layer`` on), and what its
    place in the pipeline needs.

    The bottom worker (index 0) gets ``train = (x_train, y_train)`` (y: integer labels), ``test_x``
    and ``batches``; the top worker gets ``test_y`` and ``losses`` (the training losses since the
    last evaluation, on a resumed run).  ``blocks`` are the hidden blocks, ``top`` the top layer
    (None below the top).  Under the complete unlock every worker gets ``train`` and its own copy of
    ``batches``, and ``input_generators``: one per layer of the stage, the I_k that predicts the
    layer's input (None for the network's bottom layer, whose input is data).
    """

    def __init__(self, index: int, count: int, layers: list[Any], plan: Plan, *, first_layer: int = 0,
                 train: tuple | None = None, test_x: np.ndarray | None = None, batches: BatchOrder | None = None,
                 test_y: np.ndarray | None = None, losses: list[float] | None = None,
                 input_generators: list[Any] | None = None) -> None:
        self.index, self.count, self.layers, self.plan = index, count, layers, plan
        self.first_layer = first_layer  # the index in the network of this stage's first layer
        self.is_bottom, self.is_top = index == 0, index == count - 1
        self.blocks = layers[:-1] if self.is_top else layers
        self.top = layers[-1] if self.is_top else None
        self.train, self.test_x, self.batches = train, test_x, batches
        self.test_y, self.losses = test_y, list(losses or [])
        self.input_generators = list(input_generators or [])
        # What the worker trains, and reports at a checkpoint: its layers, then its input generators.
        self.modules = self.layers + [I_k for I_k in self.input_generators if I_k is not None]
        self.stale_targets: dict[int, int] = {}  # DNI, complete unlock: how many targets came this many steps late
        self.step = plan.start

    def run(self, source: Source, send: Callable[[int, Message], Any], report: Callable[[Report], Any]) -> None:
        """Train from step ``plan.start + 1`` to ``plan.steps``; messages come from ``source``.

        ``send(j, message)`` sends to worker j; ``report(report)`` tells the driver.  Whatever the
        worker raises is reported (``'error'``) and raised again.
        """
        keep_freed_memory()  # as the training loop does: each step allocates what the last one freed
        self.inbox, self.send, self.report = Inbox(source), send, report
        self.timeline = Timeline(self.index, *self.plan.timeline)
        schedule = SCHEDULES[self.plan.schedule](self)
        try:
            with np.errstate(over="raise", invalid="raise", divide="raise"):
                for t in range(self.plan.start + 1, self.plan.steps + 1):
                    self.step = self.timeline.step = t
                    schedule.step(t)
                    saving = t == self.plan.steps or (self.plan.save_every is not None and t % self.plan.save_every == 0)
                    if saving:
                        schedule.flush(t)  # what is in flight lands, so the state is whole
                    if t % self.plan.eval_every == 0 or t == self.plan.steps:
                        self.evaluate(t)
                    if saving:
                        self.report(Report("state", self.index, (t, network_state(self.modules), self.loop_state())))
            self.report(Report("timeline", self.index, (self.timeline.events, self.stale_targets)))
            self.report(Report("done", self.index))
        except Exception as error:
            self.report(Report("error", self.index, {
                "type": type(error).__name__, "message": str(error), "step": self.step,
                "traceback": traceback.format_exc()}))
            raise

    # --- what the schedules call ---------------------------------------------------------------

    def take_input(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch t's input to this stage and its one-hot labels: drawn from the data by worker 0, else from below."""
        if self.train is not None and self.batches is not None:
            x_train, y_train = self.train
            indices = self.batches.next()
            return x_train[indices], np.eye(self.plan.classes, dtype=x_train.dtype)[y_train[indices]]
        with self.timeline.record("wait"):
            message = self.inbox.take("activation", t)
        assert message is not None and message.labels is not None
        return message.array, message.labels

    def take_target(self, t: int, *, block: bool = True) -> np.ndarray | None:
        """dL/dh for batch t from the worker above; None if ``block=False`` and it has not come yet."""
        if not block:
            message = self.inbox.take("target", t, block=False)
        else:
            with self.timeline.record("wait"):
                message = self.inbox.take("target", t)
        return None if message is None else message.array

    def take_activation(self, t: int, *, block: bool = True) -> np.ndarray | None:
        """The complete unlock: h for batch t from the worker below; None if ``block=False`` and it has not come yet."""
        if not block:
            message = self.inbox.take("activation", t, block=False)
        else:
            with self.timeline.record("wait"):
                message = self.inbox.take("activation", t)
        return None if message is None else message.array

    def take_synthetic_input(self, t: int) -> np.ndarray:
        """The complete unlock: ĥ for batch t, at which the worker above computed the δ it sent (sent before δ)."""
        with self.timeline.record("wait"):
            message = self.inbox.take("synthetic input", t)
        assert message is not None
        return message.array

    def send_up(self, t: int, h: np.ndarray, y: np.ndarray) -> None:
        self.send(self.index + 1, Message("activation", t, h, y))

    def send_down(self, t: int, delta: np.ndarray | None, *, synthetic_input: np.ndarray | None = None) -> None:
        """δ for batch t to the worker below; the bottom worker has none (its input is data: ``delta`` is None).

        Under the complete unlock, ``synthetic_input`` is the ĥ at which δ was computed; it goes first.
        """
        if delta is None:
            return
        if synthetic_input is not None:
            self.send(self.index - 1, Message("synthetic input", t, synthetic_input))
        self.send(self.index - 1, Message("target", t, delta))

    def top_gradient(self, output: np.ndarray, y: np.ndarray) -> np.ndarray:
        """dL/doutput of the top layer's output (batch, classes); the loss per example is kept for the history."""
        loss, gradient = self.plan.loss_fn(output, y)
        if not np.isfinite(loss):
            raise FloatingPointError(f"the loss became {loss}")
        self.losses.append(float(loss) / len(output))
        return gradient

    # --- evaluation and state ------------------------------------------------------------------

    def evaluate(self, t: int) -> None:
        """Pass the test set through this stage in evaluation mode; the top reports the accuracy."""
        if self.is_bottom:
            h = self.test_x
        else:
            message = self.inbox.take("evaluation", t)
            assert message is not None
            h = message.array
        assert h is not None
        if not self.is_top:
            self.send(self.index + 1, Message("evaluation", t, predict_in_eval_mode(self.layers, h)))
            return
        assert self.test_y is not None
        score = accuracy(self.layers, h, self.test_y)
        self.report(Report("evaluation", self.index, (t, score, float(np.mean(self.losses)), time.time())))
        self.losses.clear()

    def loop_state(self) -> dict[str, Any]:
        """What a checkpoint needs besides the layers: worker 0's batch order, the top's losses, and every worker's
        timeline and late targets so far."""
        state: dict[str, Any] = {"timeline": list(self.timeline.events), "stale_targets": dict(self.stale_targets)}
        if self.batches is not None:
            state.update(self.batches.state())
        if self.is_top:
            state["losses"] = list(self.losses)
        return state
