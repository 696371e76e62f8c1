"""What each worker did and when: the events of a timeline figure (one row per worker, a bar per event).

An event is ``(worker, kind, step, start, end)``: kind is ``'forward'`` (a block's forward pass),
``'backward'`` (a block's backward pass), ``'update'`` (a descent step: a block's, or a generator's
regression onto its target), ``'dni'`` (a block's synthetic update: ĝ = M(h, c), its backward pass
and the block's step on it), ``'synthetic input'`` (the complete unlock's ĥ = I(x, c) for the stage's
layers; an input generator's regression is an ``'update'``) or ``'wait'`` (blocked on a message from
another worker); step is the worker's step when it happened (a delayed gradient or a late target of
an earlier batch counts in the step that applies it); start and end are ``time.time()`` seconds, so that the events of
workers in different processes line up.
"""

import contextlib
import time
from collections.abc import Iterator
from typing import NamedTuple

KINDS = ("forward", "backward", "update", "dni", "synthetic input", "wait")


class Event(NamedTuple):
    worker: int
    kind: str
    step: int
    start: float
    end: float


class Timeline:
    """Records worker ``worker``'s events during steps ``first`` to ``last`` (inclusive; none if last < first).

    The worker sets ``step`` as it goes.
    """

    def __init__(self, worker: int, first: int, last: int) -> None:
        self.worker, self.first, self.last = worker, first, last
        self.step = 0
        self.events: list[Event] = []

    @contextlib.contextmanager
    def record(self, kind: str) -> Iterator[None]:
        """Time the body as one event of ``kind`` in the current step."""
        start = time.time()
        yield
        if self.first <= self.step <= self.last:
            self.events.append(Event(self.worker, kind, self.step, start, time.time()))

