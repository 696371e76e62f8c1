"""Predict a schedule's throughput on K workers from measured per-block times, without running it.

The cost model, in seconds per batch:

- :class:`BlockTimes` of each hidden block: ``forward``, ``backward`` (with the input delta, except
  for the network's bottom block, whose input is data), ``update`` (its descent step) and, for
  DNI, ``generator`` (ĝ = M(h, c)) and ``regression`` (the generator's backward pass and step);
- ``top``: the top layer's forward pass, the loss, its backward pass and its step;
- ``transfer``: from a worker's send to the message's arrival at the neighbour.  Sending costs the
  sender nothing (the engines send in the background);
- ``wake``: what a worker loses each time it has slept in a receive until its message came (the
  operating system wakes it, its caches are cold): it resumes ``wake`` after the arrival;
- ``contention`` and ``cores``: workers computing at the same time slow one another down, by
  ``contention`` for every other busy core (they share memory and caches), and, past ``cores`` busy
  workers, they take turns on the cores (:func:`speed`);
- ``message_cpu``: the processor time a message costs the machine (copies, serialisation, the
  engine's own processes), taken from the cores while it is in flight.

The defaults (``wake=0``, ``contention=0``, ``cores=None``, ``message_cpu=0``) model an ideal machine:
a core per worker, and a message that costs only its transfer.  On a real one, measure them
(``benchmarks/parallel.py`` does) and pass them in.

:func:`simulate` runs each worker's operations in the order the schedules' code runs them
(:mod:`sgrad.parallel.schedules`: the same sends, the same waits), each starting as soon as the
worker is free and the message it needs has arrived, on one clock for all workers.  The throughput
is that of the steady state: batches per second at which the top worker finishes steps in the second
half of the run.  DNI is modelled with ``staleness=0``, whose waits the schedule fixes (with more,
they depend on timing).

What it shows, e.g.: under DNI a worker sends batch t+1 up before it waits for batch t's target,
so two batches are in flight and each round trip to the worker above is shared between two steps;
under locked backprop every message lies on the critical path.
"""

import heapq
import math
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
               wake: float = 0.0, contention: float = 0.0, cores: int | None = None, message_cpu: float = 0.0,
               batch: int = 256, steps: int | None = None) -> float:
    """Examples per second of ``schedule`` on ``workers`` workers, the blocks shared out as the pipeline shares them.

    ``transfer``, ``wake``, ``contention``, ``cores`` and ``message_cpu``: the machine, as in :func:`simulate`.
    """
    steps = max(200, 4 * workers) if steps is None else steps
    stages = [[j for j in stage if j < len(blocks)] for stage in split_layers(len(blocks) + 1, workers)]
    program = {"backprop": _backprop, "pipelined-backprop": _delayed, "dni": _decoupled, "cdni": _decoupled}[schedule]
    programs = [program(k, stages, blocks, top, steps) for k in range(workers)]
    finished = simulate(programs, transfer, wake=wake, contention=contention, cores=cores, message_cpu=message_cpu)[-1]
    half = steps // 2
    return batch * (steps - half) / (finished[steps] - finished[half])


def scaling(schedule: str, block: BlockTimes, top: float, *, blocks: int = 64, workers: Sequence[int] = (1, 2, 4, 8, 16,
            32, 64), transfer: float = 0.0, wake: float = 0.0, contention: float = 0.0, cores: int | None = None,
            message_cpu: float = 0.0, batch: int = 256) -> dict[int, float]:
    """``{K: examples per second}`` of a network of ``blocks`` blocks like ``block`` on K workers (machine: as
    :func:`simulate`; with ``cores=None``, a core per worker)."""
    return {k: throughput(schedule, [block] * blocks, top, k, transfer=transfer, wake=wake, contention=contention,
                          cores=cores, message_cpu=message_cpu, batch=batch) for k in workers}


def simulate(programs: list[Iterator[Operation]], transfer: float, *, wake: float = 0.0, contention: float = 0.0,
             cores: int | None = None, message_cpu: float = 0.0) -> list[dict[int, float]]:
    """Run the workers' programs; returns, for each worker, ``{step: the time it finished that step}``.

    One clock for all workers.  A worker runs its operations until it computes or must wait:
    a message sent at time t arrives at t + ``transfer``; a worker that reaches a receive before
    its message has arrived sleeps, and resumes ``wake`` seconds after the arrival.  The workers
    that compute at the same moment share the machine (:func:`speed`) with the messages in flight,
    each of which keeps ``message_cpu / transfer`` of a core busy; so every computing worker runs at
    the same speed, and one clock of work done, ``work``, tells when each one's computing ends.
    """
    now = work = 0.0  # the time, and the seconds of computing that a worker busy since time 0 would have done
    arrivals: dict[tuple, float] = {}  # message -> the time it arrives
    asleep: dict[tuple, int] = {}  # message not sent yet -> the worker waiting for it
    computing: list[tuple[float, int]] = []  # (the value of ``work`` at which the worker's computing ends, worker)
    waking: list[tuple[float, int]] = []  # (the time the worker resumes, worker)
    flying: list[float] = []  # the arrival times of the messages in flight
    load = message_cpu / transfer if transfer > 0 else 0.0  # the cores a message in flight keeps busy
    finished: list[dict[int, float]] = [{} for _ in programs]
    ready = list(range(len(programs)))
    while True:
        for k in sorted(ready):
            for kind, value in programs[k]:
                if kind == "compute":
                    if value > 0:
                        heapq.heappush(computing, (work + value, k))
                        break
                elif kind == "send":
                    arrivals[value] = now + transfer
                    if load:  # only a message that takes processor time changes the cores' speed as it lands
                        heapq.heappush(flying, arrivals[value])
                    if value in asleep:
                        heapq.heappush(waking, (arrivals[value] + wake, asleep.pop(value)))
                elif kind == "receive":
                    if value not in arrivals:
                        asleep[value] = k
                        break
                    if arrivals[value] > now:
                        heapq.heappush(waking, (arrivals[value] + wake, k))
                        break
                else:
                    finished[k][value] = now
        ready = []
        if not computing and not waking:
            if asleep:
                raise RuntimeError(f"the workers {sorted(asleep.values())} wait for each other: the schedule deadlocks")
            return finished
        rate = speed(len(computing), contention, cores, load * len(flying))
        computed = now + (computing[0][0] - work) / rate if computing else math.inf
        other = min(waking[0][0] if waking else math.inf, flying[0] if flying else math.inf)
        if other < computed:  # a worker wakes, or a message lands (and the cores' load changes)
            work += (other - now) * rate
            now = other
        else:
            now, work = computed, computing[0][0]
        while computing and computing[0][0] <= work:
            ready.append(heapq.heappop(computing)[1])
        while waking and waking[0][0] <= now:
            ready.append(heapq.heappop(waking)[1])
        while flying and flying[0] <= now:
            heapq.heappop(flying)


def speed(busy: int, contention: float = 0.0, cores: int | None = None, load: float = 0.0) -> float:
    """How fast each of ``busy`` workers computing at once runs, against one computing alone.

    Two things slow it: the cores' shared parts (memory, caches), by ``contention`` for every other
    busy core (``1 + contention * (cores in use - 1)``); and, past ``cores`` busy workers (counting
    ``load``, the cores that messages in flight keep busy), turns on the cores: each worker gets
    ``cores / (busy + load)`` of one.  ``cores=None``: a core per worker, and messages take none.
    """
    used = busy if cores is None else min(busy, cores)
    share = 1.0 if cores is None or busy + load <= cores else cores / (busy + load)
    return share / (1.0 + contention * (used - 1))


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
