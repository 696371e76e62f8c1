"""Predict a schedule's throughput on K workers from measured per-block times, without running it.

The cost model, in seconds per batch:

- :class:`BlockTimes` of each hidden block: ``forward``, ``backward`` (with the input delta, except
  for the network's bottom block, whose input is data), ``update`` (its descent step) and, for
  DNI, ``generator`` (ĝ = M(h, c)) and ``regression`` (the generator's backward pass and step); for
  the complete unlock also ``synthetic_input`` (ĥ = I(x, c), the input generator that predicts this
  block's output for the layer above) and ``input_regression`` (its backward pass and step);
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

:func:`simulate` runs each worker's operations, each starting as soon as the worker is free and
the message it needs has arrived, on one clock for all workers.  The operations are those of the
schedules' own code (:mod:`sgrad.parallel.schedules`): :func:`programs` runs a schedule's ``step``
on workers whose blocks cost their :class:`BlockTimes` instead of computing (:class:`CostedWorker`),
and notes what each one computes, sends and waits for.  The throughput is that of the steady
state: batches per second at which the top worker finishes steps in the second half of the run.
DNI and the complete unlock are modelled with ``staleness=0``, whose waits the schedule fixes (with more,
they depend on timing).

What it shows, e.g.: under DNI a worker sends batch t+1 up before it waits for batch t's target,
so two batches are in flight and each round trip to the worker above is shared between two steps;
under the complete unlock the worker above starts batch t without batch t's h, so no forward pass below
lies on its path either; under locked backprop every message lies on the critical path.
"""

import contextlib
import heapq
import math
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any, NamedTuple

from ..argument_checks import check_choice, check_integer, check_number
from .schedules import SCHEDULES
from .worker import split_layers

COMPLETE = ("complete", "ccomplete")  # the schedules whose workers hold input generators and draw the batches

Operation = tuple  # ('compute', seconds) | ('send', key) | ('receive', key) | ('done', step)


class BlockTimes(NamedTuple):
    forward: float
    backward: float
    update: float
    generator: float = 0.0
    regression: float = 0.0
    synthetic_input: float = 0.0
    input_regression: float = 0.0


def throughput(schedule: str, blocks: Sequence[BlockTimes], top: float, workers: int, *, transfer: float = 0.0,
               wake: float = 0.0, contention: float = 0.0, cores: int | None = None, message_cpu: float = 0.0,
               batch: int = 256, steps: int | None = None) -> float:
    """Examples per second of ``schedule`` on ``workers`` workers, the blocks shared out as the pipeline shares them.

    ``transfer``, ``wake``, ``contention``, ``cores`` and ``message_cpu``: the machine, as in :func:`simulate`.
    """
    check_choice(schedule, "schedule", SCHEDULES)
    blocks, top = _check_times(blocks, top)
    workers = check_integer(workers, "workers")
    if workers > len(blocks):
        raise ValueError(f"workers must be at most the {len(blocks)} blocks (one block per worker at most); got "
                         f"{workers}")
    steps = max(200, 4 * workers) if steps is None else check_integer(steps, "steps", minimum=2)
    batch = check_integer(batch, "batch")
    finished = simulate(programs(schedule, blocks, top, workers, steps), transfer, wake=wake, contention=contention,
                        cores=cores, message_cpu=message_cpu)[-1]
    half = steps // 2
    elapsed = finished[steps] - finished[half]
    if elapsed <= 0:
        raise ValueError("the blocks, the top layer and the messages take no time at all, so the throughput is "
                         "infinite; give the times measured (benchmarks/parallel.py measures them)")
    return batch * (steps - half) / elapsed


def scaling(schedule: str, block: BlockTimes, top: float, *, blocks: int = 64, workers: Sequence[int] = (1, 2, 4, 8, 16,
            32, 64), transfer: float = 0.0, wake: float = 0.0, contention: float = 0.0, cores: int | None = None,
            message_cpu: float = 0.0, batch: int = 256) -> dict[int, float]:
    """``{K: examples per second}`` of a network of ``blocks`` blocks like ``block`` on K workers (machine: as
    :func:`simulate`; with ``cores=None``, a core per worker)."""
    blocks = check_integer(blocks, "blocks")
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence) or not workers:
        raise TypeError(f"workers must be a non-empty sequence of worker counts such as (1, 2, 4); got {workers!r}")
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
    transfer, wake, contention, cores, message_cpu = _check_machine(transfer, wake, contention, cores, message_cpu)
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


def _check_times(blocks, top):
    """The blocks' times (a non-empty sequence of :class:`BlockTimes`) and the top's, each finite and >= 0."""
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence) or not blocks:
        raise TypeError(f"blocks must be a non-empty sequence of BlockTimes, one per hidden block; got {blocks!r}")
    checked = []
    for j, times in enumerate(blocks):
        if not isinstance(times, BlockTimes):
            raise TypeError(f"blocks[{j}] must be a BlockTimes(forward, backward, update, generator, regression, "
                            f"synthetic_input, input_regression); got {times!r}")
        checked.append(BlockTimes(*(check_number(value, f"blocks[{j}].{field} (seconds)", at_least=0,
                                                 example="0.002") for field, value in zip(BlockTimes._fields, times))))
    return checked, check_number(top, "top (seconds)", at_least=0, example="0.001")


def _check_machine(transfer, wake, contention, cores, message_cpu):
    """The machine's figures (see :func:`simulate`): finite seconds and contention >= 0, and cores None or >= 1."""
    return (check_number(transfer, "transfer (seconds)", at_least=0, example="0.001"),
            check_number(wake, "wake (seconds)", at_least=0, example="0.0001"),
            check_number(contention, "contention", at_least=0, example="0.1"),
            None if cores is None else check_integer(cores, "cores"),
            check_number(message_cpu, "message_cpu (seconds)", at_least=0, example="0.001"))


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


def programs(schedule: str, blocks: Sequence[BlockTimes], top: float, workers: int,
             steps: int) -> list[Iterator[Operation]]:
    """Each worker's operations over ``steps`` steps of ``schedule``, the blocks shared out as the pipeline shares them.

    The schedule's own ``step`` runs on a :class:`CostedWorker`; a step's operations end with ``('done', t)``.
    """
    layers = split_layers(len(blocks) + 1, workers)
    stages = [[j for j in stage if j < len(blocks)] for stage in layers]
    # The complete unlock: layer i >= 1 takes ĥ_i from the input generator of block i - 1's output.
    inputs = [[None if i == 0 else blocks[i - 1] for i in stage] for stage in layers]
    return [_program(schedule, CostedWorker(k, [[blocks[j] for j in stage] for stage in stages], top, schedule,
                                            inputs=inputs[k] if schedule in COMPLETE else None), steps)
            for k in range(workers)]


def _program(schedule, worker, steps):
    run = SCHEDULES[schedule](worker)
    for t in range(1, steps + 1):
        run.step(t)
        yield from worker.operations
        yield "done", t
        worker.operations.clear()


class CostedWorker:
    """Worker ``k`` of a pipeline of ``stages`` (each a list of :class:`BlockTimes`) as the schedules see it.

    Its blocks and top layer (:class:`CostedBlock`) cost time instead of computing.  It notes each
    operation that a schedule's step makes through it: a computation, a message sent, a message
    waited for.  Messages carry nothing, and a target is always there to take: every wait is a
    blocking one, as under DNI with ``staleness=0``.  ``inputs``: under the complete unlock, for each
    layer of the stage the times of the block whose output its input generator predicts (None for the
    network's bottom layer); the worker then draws every batch itself.
    """

    def __init__(self, k: int, stages: list[list[BlockTimes]], top: float, schedule: str, *,
                 inputs: list[BlockTimes | None] | None = None) -> None:
        self.index, self.count = k, len(stages)
        self.is_bottom, self.is_top = k == 0, k == len(stages) - 1
        self.operations: list[Operation] = []
        self.blocks = [CostedBlock(times, self.operations) for times in stages[k]]
        self.top = CostedBlock(BlockTimes(top, 0.0, 0.0), self.operations) if self.is_top else None
        self.layers = self.blocks + ([self.top] if self.top else [])
        self.input_generators = [None if times is None else CostedInputGenerator(times, self.operations)
                                 for times in inputs or []]
        self.draws_batches = inputs is not None
        self.plan = SimpleNamespace(schedule=schedule, staleness=0, alpha=0.0, input_alpha=0.0)
        self.timeline = SimpleNamespace(record=lambda kind: contextlib.nullcontext())
        self.stale_targets: dict[int, int] = {}

    def take_input(self, t: int) -> tuple[None, None]:
        if not (self.is_bottom or self.draws_batches):
            self.operations.append(("receive", ("activation", self.index, t)))
        return None, None

    def take_activation(self, t: int, *, block: bool = True) -> float:
        self.operations.append(("receive", ("activation", self.index, t)))
        return 0.0

    def take_synthetic_input(self, t: int) -> float:
        self.operations.append(("receive", ("synthetic input", self.index, t)))
        return 0.0

    def send_up(self, t: int, h: Any, y: Any) -> None:
        self.operations.append(("send", ("activation", self.index + 1, t)))

    def take_target(self, t: int, *, block: bool = True) -> float:
        self.operations.append(("receive", ("target", self.index, t)))
        return 0.0

    def send_down(self, t: int, delta: Any, *, synthetic_input: Any = None) -> None:
        if not self.is_bottom:
            if synthetic_input is not None:
                self.operations.append(("send", ("synthetic input", self.index - 1, t)))
            self.operations.append(("send", ("target", self.index - 1, t)))

    def top_gradient(self, output: Any, y: Any) -> None:
        """The loss's cost is the top layer's forward pass's (``top``)."""


class CostedBlock:
    """A block (or the top layer) whose every call costs its :class:`BlockTimes`: it appends ``('compute', seconds)``.

    ``update_from_synthetic_gradient`` costs ĝ's prediction, the backward pass and the step; ``update_generator``
    the regression, and the prediction once more when it is given the batch's h.
    """

    def __init__(self, times: BlockTimes, operations: list[Operation]) -> None:
        self.times, self.operations = times, operations

    def forward(self, x: Any) -> None:
        costs(self.operations, self.times.forward)

    def backward(self, delta: Any, *, input_delta: bool = True) -> None:
        costs(self.operations, self.times.backward)

    def update(self, alpha: float) -> None:
        costs(self.operations, self.times.update)

    def update_from_synthetic_gradient(self, h: Any, condition: Any, *, input_delta: bool = True) -> tuple[None, None]:
        costs(self.operations, self.times.generator + self.times.backward + self.times.update)
        return None, None

    def update_generator(self, target: Any, *, h: Any = None, condition: Any = None) -> None:
        costs(self.operations, self.times.regression + (0.0 if h is None else self.times.generator))


class CostedInputGenerator:
    """An input generator I_k whose calls cost the times of block k, whose output it predicts: ``synthetic_input``
    for ĥ = I_k(x, c), ``input_regression`` for its step onto h_k, and the prediction once more when it is given the
    batch's x.  Its ĥ is a stand-in, 0.0, that the schedule sends down as it sends a real one."""

    def __init__(self, times: BlockTimes, operations: list[Operation]) -> None:
        self.times, self.operations = times, operations

    def forward(self, x: Any, condition: Any = None) -> float:
        costs(self.operations, self.times.synthetic_input)
        return 0.0

    def update(self, h: Any, alpha: float, *, x: Any = None, condition: Any = None) -> None:
        costs(self.operations, self.times.input_regression + (0.0 if x is None else self.times.synthetic_input))


def costs(operations: list[Operation], seconds: float) -> None:
    """Append ``('compute', seconds)`` to ``operations``; computations in a row are one."""
    if operations and operations[-1][0] == "compute":
        seconds += operations.pop()[1]
    operations.append(("compute", seconds))
