"""Predict a schedule's throughput on K workers from measured per-block times, without running it.

The cost model, in seconds per batch:

- :class:`BlockTimes` of each hidden block: ``forward``, ``backward`` (with the input delta, except
  for the network's bottom block, whose input is data), ``update`` (its descent step) and, for
  DNI, ``generator`` (ĝ = M(h, c)) and ``regression`` (the generator's backward pass and step);
- ``top``: the top layer's forward pass, the loss, its backward pass and its step;
- ``transfer``: from a worker's send to the message's arrival at the neighbour.  Sending costs the
  sender nothing (the engines send in the background).

:func:`simulate` runs each worker's operations in the order the schedules' code runs them
(:mod:`sgrad.parallel.schedules`: the same sends, the same waits), each starting as soon as the
worker is free and the message it needs has arrived.  The throughput is that of the steady state:
batches per second at which the top worker finishes steps in the second half of the run.  DNI
is modelled with ``staleness=0``, whose waits the schedule fixes (with more, they depend on timing).

What it shows, e.g.: under DNI a worker sends batch t+1 up before it waits for batch t's target,
so two batches are in flight and each round trip to the worker above is shared between two steps;
under locked backprop every message lies on the critical path.
"""

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from .worker import split_layers

Operation = tuple  # ('compute', seconds) | ('send', key) | ('receive', key) | ('done', step)


class BlockTimes(NamedTuple):
    forward: float
    backward: float
    update: float
    generator: float = 0.0
    regression: float = 0.0


def throughput(schedule: str, blocks: Sequence[BlockTimes], top: float, workers: int, *, transfer: float = 0.0,
               batch: int = 256, steps: int | None = None) -> float:
    """Examples per second of ``schedule`` on ``workers`` workers, the blocks shared out as the pipeline shares them."""
    steps = max(200, 4 * workers) if steps is None else steps
    stages = [[j for j in stage if j < len(blocks)] for stage in split_layers(len(blocks) + 1, workers)]
    program = {"backprop": _backprop, "pipelined-backprop": _delayed, "dni": _decoupled, "cdni": _decoupled}[schedule]
    finished = simulate([program(k, stages, blocks, top, steps) for k in range(workers)], transfer)[-1]
    half = steps // 2
    return batch * (steps - half) / (finished[steps] - finished[half])


def scaling(schedule: str, block: BlockTimes, top: float, *, blocks: int = 64, workers: Sequence[int] = (1, 2, 4, 8, 16,
            32, 64), transfer: float = 0.0, batch: int = 256) -> dict[int, float]:
    """``{K: examples per second}`` of a network of ``blocks`` blocks like ``block`` on K workers."""
    return {k: throughput(schedule, [block] * blocks, top, k, transfer=transfer, batch=batch) for k in workers}


def simulate(programs: list[Iterator[Operation]], transfer: float) -> list[dict[int, float]]:
    """Run the workers' programs; returns, for each worker, ``{step: the time it finished that step}``."""
    clocks = [0.0] * len(programs)
    sent: dict[tuple, float] = {}
    finished: list[dict[int, float]] = [{} for _ in programs]
    waiting: list[Operation | None] = [None] * len(programs)
    running = set(range(len(programs)))
    while running:
        moved = False
        for k in sorted(running):
            while True:
                operation = waiting[k] or next(programs[k], None)
                if operation is None:
                    running.discard(k)
                    break
                kind, value = operation
                if kind == "receive":
                    if value not in sent:
                        waiting[k] = operation  # blocked until the sender gets there
                        break
                    clocks[k] = max(clocks[k], sent[value] + transfer)
                elif kind == "compute":
                    clocks[k] += value
                elif kind == "send":
                    sent[value] = clocks[k]
                else:
                    finished[k][value] = clocks[k]
                waiting[k] = None
                moved = True
        if not moved and running:
            raise RuntimeError(f"the workers {sorted(running)} wait for each other: the schedule deadlocks")
    return finished


def _backprop(k, stages, blocks, top, steps):
    own, is_top = stages[k], k == len(stages) - 1
    for t in range(1, steps + 1):
        if k > 0:
            yield "receive", ("activation", k, t)
        yield "compute", sum(blocks[j].forward for j in own)
        if is_top:
            yield "compute", top
        else:
            yield "send", ("activation", k + 1, t)
            yield "receive", ("target", k, t)
        yield from _backward(k, own, blocks, t)
        yield "done", t


def _delayed(k, stages, blocks, top, steps):
    own, is_top = stages[k], k == len(stages) - 1
    delay = len(stages) - 1 - k
    for t in range(1, steps + 1):
        if k > 0:
            yield "receive", ("activation", k, t)
        yield "compute", sum(blocks[j].forward for j in own)
        if is_top:
            yield "compute", top
            yield from _backward(k, own, blocks, t)
        else:
            yield "send", ("activation", k + 1, t)
            if t - delay >= 1:
                yield "receive", ("target", k, t - delay)
                yield "compute", sum(blocks[j].forward for j in own)  # the forward pass again, for its caches
                yield from _backward(k, own, blocks, t - delay)
        yield "done", t


def _backward(k, own, blocks, t):
    """Every block's backward pass and step, top first; the stage's input delta goes down before the bottom's step."""
    yield "compute", sum(blocks[j].backward for j in own) + sum(blocks[j].update for j in own[1:])
    if k > 0:
        yield "send", ("target", k - 1, t)
    yield "compute", blocks[own[0]].update


def _decoupled(k, stages, blocks, top, steps):
    own, is_top = stages[k], k == len(stages) - 1
    for t in range(1, steps + 1):
        if k > 0:
            yield "receive", ("activation", k, t)
        yield "compute", sum(blocks[j].forward for j in own)
        if is_top:
            yield "compute", top
        else:
            yield "send", ("activation", k + 1, t)
        for i, j in enumerate(own):
            if t > 1:  # the generator regresses onto batch t-1's target before it predicts batch t's ĝ
                if i == len(own) - 1 and not is_top:
                    yield "receive", ("target", k, t - 1)
                yield "compute", blocks[j].regression
            yield "compute", blocks[j].generator + blocks[j].backward
            if i == 0 and k > 0:
                yield "send", ("target", k - 1, t)
            yield "compute", blocks[j].update
        yield "done", t
