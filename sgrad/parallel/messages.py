"""What workers pass each other and tell the driver, and the inbox each worker takes its messages from.

Between workers (worker k holds a stage of consecutive layers; k + 1 is the stage above):

- up, ``Message('activation', t, h, y)``: stage k's output h_k for batch t, (batch, width),
  and the batch's one-hot labels y, (batch, classes), which the top needs for the loss and cDNI's
  generators take as their conditioning c;
- down, ``Message('target', t, δ)``: dL/dh_k for batch t as the stage above computed it (the true
  gradient under backprop; under DNI, ĝ_{k+1} backpropagated through the stage above: the
  bootstrapped target of stage k's top generator), (batch, width);
- up, ``Message('evaluation', t, h)``: the test set's activations after step t, (test examples, width);
- down, under the complete unlock, ``Message('synthetic input', t, ĥ_k)``, just before the target: the
  synthetic input at which the stage above computed δ, where stage k's top generator regresses its
  prediction; and the ``'activation'`` going up is then the target of the input generator above, not
  the input of the stage above (each worker draws the batch itself).

To the driver, ``Report(kind, worker, payload)``: ``'evaluation'`` (from the top: step, test accuracy,
mean training loss, time), ``'state'`` (every array of the stage after a step, for a checkpoint),
``'timeline'`` (the worker's recorded events), ``'error'`` (what the worker raised) and ``'done'``.

Messages are keyed by ``(kind, step)``: a worker asks for the one it needs next
(:meth:`Inbox.take`), whatever order the engine delivered them in.
"""

import queue
from typing import Any, NamedTuple, Protocol

import numpy as np


class Message(NamedTuple):
    """One array (and the batch's labels, going up) for step ``step``."""

    kind: str
    step: int
    array: np.ndarray
    labels: np.ndarray | None = None


class Report(NamedTuple):
    """What worker ``worker`` tells the driver."""

    kind: str
    worker: int
    payload: Any = None


class Source(Protocol):
    """Where an inbox's messages come from: ``multiprocessing.Queue`` and ``queue.Queue`` both fit."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


class Inbox:
    """The messages a worker has received, taken by ``(kind, step)``.

    ``source`` delivers messages in any order; those not asked for yet wait here.
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.waiting: dict[tuple[str, int], Message] = {}

    def take(self, kind: str, step: int, *, block: bool = True) -> Message | None:
        """The message ``(kind, step)``; waits for it, or with ``block=False`` returns None if it has not come."""
        key = (kind, step)
        while key not in self.waiting:
            try:
                message = self.source.get(block=block)
            except queue.Empty:
                return None
            self.waiting[(message.kind, message.step)] = message
        return self.waiting.pop(key)
