"""Benchmark: what every block in its own worker buys, measured, and what the simulator predicted.

On the paper's MNIST net (784-256-256-10, Linear→BatchNorm→ReLU blocks, generators with two hidden
layers of 1024, float32, Adam, batch 256; random inputs, which cost what MNIST's do):

1. the single-process steps (``sgrad.dni.steps.dni_step``, ``backprop_step``): examples per second in
   the steady state, from the start of step steps/4 to the start of step 3 steps/4, gathering the batch
   included (as the bottom worker gathers it), measured as the workers' runs are;
2. the same nets on 1 and 2 local workers (``sgrad.parallel.train_parallel``): examples per
   second in the steady state (worker 0's start of batch steps/4 to its start of batch 3 steps/4;
   ``--steps`` for DNI, five times as many for backprop, whose step is some fifteen times shorter),
   and the seconds the workers spent computing per step (their timelines' forward, backward and
   update events), beside the compute measured in one process; and, for DNI on 2 workers, each
   worker's share of the work taken outside the pipeline in processes set up as workers are (no
   message, no wait, no timeline), each alone and then both at once: how much of the gap to 2x is the
   split's imbalance, how much the two workers slowing each other down, and how much the pipeline;
3. the machine the simulator is given, measured apart from those runs (``machine_costs``), on each
   engine: a message's ``transfer`` time (half a round trip of a worker's messages, h of one batch
   and its labels up, (256, 256) and (256, 10) float32, and the target down, between two workers that
   do nothing else: ``multiprocessing`` queues, or calls of a Ray actor's ``deliver``) and the
   processor time it costs the machine; the ``contention`` between two workers
   computing at once (the single-process step in two processes at the same time against one alone);
   and the ``wake`` cost (what a round trip costs beyond that when both sides take a step of the
   method between messages, so that each sleeps until its message comes);
4. each block's forward, backward, update, generator and regression times, and the top layer's,
   measured in every repeat, after its runs, in a process set up as a worker is (one BLAS thread,
   malloc keeping freed memory), over 30 batches for DNI and five times as many for backprop, whose
   step is much shorter (``BLOCK_ROUNDS``); the simulator's throughput from their medians over the
   repeats and the machine, against the measured ones (and, for comparison, on an ideal machine:
   transfer only); and its throughput for a net of 64 such blocks on K = 1 to 64 workers, each with
   a core of its own;
5. with ``--ray``, the runs and the machine on Ray actors too (Ray runs only while they are measured).

Targets (exit status 0 if all hold): 2 workers' DNI at least 1.9x the single-process DNI step;
locked backprop on 2 workers no faster than one process; the simulator within 10% of every measured
throughput.  Every measurement is repeated ``--repeats`` times; the tables give the median and the
range.  Other processes on the machine disturb the figures: run it on a quiet machine.

Run:  python benchmarks/parallel.py [--steps 200] [--repeats 3] [--ray] [--out docs/parallel]
"""

import os

# Before numpy is imported: OpenBLAS reads its thread count once, at load time.  One thread per process,
# as every worker has, so that the single process and the workers do the same arithmetic.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import contextlib
import datetime
import json
import multiprocessing
import pathlib
import sys
import threading
import time

import numpy as np
from machine import describe as describe_machine

from sgrad.dni.steps import backprop_step, dni_step
from sgrad.experiments.mnist import PaperConfig, build_input_generators, build_network, summed_cross_entropy
from sgrad.parallel import LocalEngine, RayEngine, train_parallel
from sgrad.parallel.engines import WORKER_ENVIRONMENT
from sgrad.parallel.local import environment, exit_with_driver
from sgrad.parallel.messages import Message
from sgrad.parallel.simulator import BlockTimes, scaling, throughput
from sgrad.parallel.worker import split_layers

CONFIG = PaperConfig(dtype="float32")
BATCH, CLASSES, EXAMPLES, TEST = CONFIG.batch_size, 10, 8192, 1024
TARGET_SPEEDUP, TOLERANCE = 1.9, 0.10
BACKPROP_STEPS = 5  # times --steps, for backprop's runs
BLOCK_ROUNDS = {"dni": 30, "backprop": 30 * BACKPROP_STEPS}  # batches each block is timed over, in every repeat


def data(seed=0, examples=EXAMPLES, test=TEST):
    """Random images in [0, 1) and labels: (examples, 784), (examples,), (test, 784), (test,)."""
    rng = np.random.default_rng(seed)
    x = rng.random((examples + test, 784), dtype=np.float32)
    y = rng.integers(0, CLASSES, examples + test)
    return x[:examples], y[:examples], x[examples:], y[examples:]


ORDER = np.random.default_rng(1).permutation(EXAMPLES)  # rows in a shuffled order, as the workers draw them


def batch(train, t, size=BATCH, dtype=np.float32):
    """Batch t's images and one-hot labels, gathered as the bottom worker gathers them (counted in every timing)."""
    x, y = train
    indices = ORDER[np.arange(t * size, (t + 1) * size) % EXAMPLES]
    return x[indices].astype(dtype, copy=False), np.eye(CLASSES, dtype=dtype)[y[indices]]


class Stepper:
    """Calls take the next single-process step of ``method`` (batch gathering included) on the benchmark's net."""

    def __init__(self, method, train=None):
        self.method, self.train, self.t = method, data()[:2] if train is None else train, 0
        self.layers = build_network(method, 784, CONFIG)

    def __call__(self):
        x, y = batch(self.train, self.t)
        self.t += 1
        if self.method == "backprop":
            backprop_step(self.layers, x, y, summed_cross_entropy, CONFIG.alpha)
        else:
            dni_step(self.layers, x, y, summed_cross_entropy, CONFIG.alpha,
                     condition=y if self.method == "cdni" else None)


def single_process_step(method, train, steps):
    """Median seconds of one step of ``method`` in this process, batch gathering included (a tenth warms up)."""
    step = Stepper(method, train)
    times = [duration(step) for _ in range(steps)]
    return float(np.median(times[steps // 10:]))


def single_process_throughput(method, train, steps):
    """Examples per second of ``method``'s single-process step in the steady state, as the workers' are measured.

    ``steps`` steps, timed from the start of step steps/4 to the start of step 3 steps/4, batch gathering
    included: the mean over that span, not a median step, so that every pause (a page fault, a slow stretch of
    the machine) counts as it counts in :func:`pipeline_throughput`.
    """
    step = Stepper(method, train)
    first, last = steps // 4, 3 * steps // 4
    for _ in range(first):
        step()
    start = time.perf_counter()
    for _ in range(last - first):
        step()
    return BATCH * (last - first) / (time.perf_counter() - start)


def pipeline_throughput(method, split, workers, steps, engine):
    """``(examples per second, seconds of computing per step, where a step's time goes)`` on ``workers`` workers.

    ``method`` in the steady state: from worker 0's start of batch steps/4 to its start of batch 3 steps/4;
    start-up, the final flush and the one evaluation (after the last step) are outside.  The computing is
    every worker's events but its waits over those steps, from the run's timeline.  Where the time goes:
    ``{worker: {kind: seconds per step}}`` of the timeline's events (forward, backward, update, dni, wait),
    and each worker's ``'other'``: the rest of the step, outside any event (sending, the loop's own code).
    """
    first, last = steps // 4, 3 * steps // 4
    layers = build_network(method, 784, CONFIG)
    result = train_parallel(layers, split, schedule=method, loss_fn=summed_cross_entropy, alpha=CONFIG.alpha,
                            steps=steps, batch_size=BATCH, rng=np.random.default_rng(0), eval_every=steps,
                            workers=workers, engine=engine, timeline_steps=(first, last))
    starts = {}
    for event in result.timeline:
        if event.worker == 0 and event.kind == "forward":
            starts[event.step] = min(event.start, starts.get(event.step, event.start))
    cycle = (starts[last] - starts[first]) / (last - first)
    shares: dict = {worker: {} for worker in range(workers)}
    for event in result.timeline:
        if first <= event.step < last:
            kinds = shares[event.worker]
            kinds[event.kind] = kinds.get(event.kind, 0.0) + (event.end - event.start) / (last - first)
    computing = sum(seconds for kinds in shares.values() for kind, seconds in kinds.items() if kind != "wait")
    for kinds in shares.values():
        kinds["other"] = cycle - sum(kinds.values())
    return BATCH / cycle, computing, shares


def worker_block_times(method, rounds):
    """:func:`block_times` of ``method`` over ``rounds`` batches, measured in a process set up as a local worker is."""
    return in_workers(1, block_times, method, data()[:2], rounds)[0]


def median_block_times(measurements):
    """``(blocks, top)``: each of :func:`block_times`' figures, the median over ``measurements`` (one per repeat)."""
    blocks = [BlockTimes(*np.median([measured[0][j] for measured in measurements], axis=0).tolist())
              for j in range(len(measurements[0][0]))]
    return blocks, float(np.median([measured[1] for measured in measurements]))


def block_times(method, train, rounds=30, config=CONFIG, schedule=None):
    """Each hidden block's :class:`BlockTimes` and the top layer's seconds, the mean over ``rounds`` batches.

    ``config``'s net, built for ``method``; ``schedule`` (default ``method``) says which generators are given
    the label (cDNI's and the conditioned complete unlock's).  The complete unlock's blocks also time their
    input generator's ĥ = I(x, c) and its regression onto the real h.
    """
    schedule = schedule or method
    layers = build_network(method, 784, config)
    input_generators = build_input_generators(method, 784, config)
    blocks, top = layers[:-1], layers[-1]
    samples = {(j, part): [] for j in range(len(blocks)) for part in BlockTimes._fields}
    top_samples = []

    def timed(key, call):
        start = time.perf_counter()
        value = call()
        samples[key].append(time.perf_counter() - start) if key else top_samples.append(time.perf_counter() - start)
        return value

    gathering = []
    for t in range(rounds):
        start = time.perf_counter()
        x, y = batch(train, t, config.batch_size, np.dtype(config.dtype))
        gathering.append(time.perf_counter() - start)
        condition = y if schedule in ("cdni", "ccomplete") else None
        h = x
        for j, block in enumerate(blocks):
            h_in = h
            h = timed((j, "forward"), lambda: block.forward(h_in))  # noqa: B023
            if method == "backprop":
                delta = np.ones_like(h)
                timed((j, "backward"), lambda: block.backward(delta, input_delta=j > 0))  # noqa: B023
                timed((j, "update"), lambda: block.update(config.alpha))  # noqa: B023
                continue
            h_out = h
            g_hat = timed((j, "generator"), lambda: block.generator.forward(h_out, condition))  # noqa: B023
            timed((j, "backward"), lambda: block.backward(g_hat, input_delta=j > 0))  # noqa: B023
            timed((j, "update"), lambda: block.update(block.alpha))  # noqa: B023
            target = g_hat + 0.01
            timed((j, "regression"), lambda: block.generator.update(target, block.generator_alpha))  # noqa: B023
            if input_generators:
                generator = input_generators[j]
                timed((j, "synthetic_input"), lambda: generator.forward(x, condition))  # noqa: B023
                timed((j, "input_regression"), lambda: generator.update(h_out, config.alpha))  # noqa: B023
        h_top = h

        def top_step():
            _, g = summed_cross_entropy(top.forward(h_top), y)  # noqa: B023
            top.backward(g)
            top.update(config.alpha)

        timed(None, top_step)
    # The mean, not the median: the simulator predicts a run's throughput, a mean, to which every slow call counts.
    mean = {key: float(np.mean(values[rounds // 5:])) if values else 0.0 for key, values in samples.items()}
    mean[(0, "forward")] += float(np.mean(gathering[rounds // 5:]))  # the bottom worker gathers the batch
    return ([BlockTimes(*(mean[(j, part)] for part in BlockTimes._fields)) for j in range(len(blocks))],
            float(np.mean(top_samples[rounds // 5:])))


def busy_seconds():
    """Processor seconds this machine has spent on anything but idling since it booted (Linux's /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def duration(call):
    """Seconds that ``call()`` takes."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


UP = Message("activation", 0, np.zeros((BATCH, 256), dtype=np.float32), np.eye(CLASSES, dtype=np.float32)[
    np.arange(BATCH) % CLASSES])  # what a worker sends up: h of one batch, (256, 256) float32, and its one-hot labels


def down(message):
    """The target a worker sends back down for the batch of ``message``."""
    return Message("target", message.step, message.array)


def work(method):
    """What a side of a round trip does between taking a message and passing one on: nothing, or ``method``'s step."""
    return Stepper(method) if method else lambda: None


def _echo(inbox, outbox, count, method):
    threading.Thread(target=exit_with_driver, daemon=True).start()
    step = work(method)
    for _ in range(count):
        message = inbox.get()
        step()
        outbox.put(down(message))


def local_round_trip(count, method=None):
    """``(seconds, processor seconds of the whole machine)`` of one round trip between two local processes
    (``multiprocessing`` queues, as the workers' inboxes): a worker's message up (:data:`UP`) and its target back
    down, each side taking a single-process step of ``method`` (if given) between taking a message and passing
    one on."""
    context = multiprocessing.get_context("spawn")
    there, back = context.Queue(), context.Queue()
    with environment(WORKER_ENVIRONMENT):
        echo = context.Process(target=_echo, args=(there, back, count + 5, method))
        echo.start()
    try:
        step = work(method)
        for k in range(count + 5):
            if k == 5:
                start, busy = time.perf_counter(), busy_seconds()
            there.put(UP._replace(step=k))
            back.get()
            step()
        return (time.perf_counter() - start) / count, (busy_seconds() - busy) / count
    finally:
        ended([echo])


class Mailbox:
    """A Ray actor that takes messages as a worker's does (its ``deliver`` fills a queue on another thread)."""

    def __init__(self):
        import queue

        self.inbox = queue.Queue()

    def deliver(self, message):
        self.inbox.put(message)

    def bounce(self, peer, count, method):
        step = work(method)
        for _ in range(count):
            message = self.inbox.get()
            step()
            peer.deliver.remote(down(message))

    def ping(self, peer, count, method):
        """``(seconds, processor seconds of the machine)`` per round trip to ``peer`` (which computes and bounces each
        message back), computing here too."""
        step = work(method)
        for k in range(count + 5):
            if k == 5:
                start, busy = time.perf_counter(), busy_seconds()
            peer.deliver.remote(UP._replace(step=k))
            self.inbox.get()
            step()
        return (time.perf_counter() - start) / count, (busy_seconds() - busy) / count

    def steps(self, method, steps):
        return step_seconds(method, steps)


def ray_round_trip(count, method=None):
    """As :func:`local_round_trip`, between two Ray actors, each calling the other's ``deliver``."""
    import ray

    first, second = ray_mailboxes(2)
    try:
        bounced = second.bounce.remote(first, count + 5, method)
        seconds = ray.get(first.ping.remote(second, count, method))
        ray.get(bounced)
        return seconds
    finally:
        for actor in (first, second):
            ray.kill(actor)


def ray_mailboxes(count):
    import ray

    mailbox = ray.remote(Mailbox).options(max_concurrency=2, num_cpus=1, runtime_env={"env_vars": WORKER_ENVIRONMENT})
    return [mailbox.remote() for _ in range(count)]


def step_seconds(method, steps):
    """Median seconds of one single-process step of ``method`` on the benchmark's data (built here)."""
    return single_process_step(method, data()[:2], steps)


def dni_share_seconds(workers, steps, worker):
    """``(worker, seconds)``: mean seconds per step of DNI worker ``worker``'s share of the work on ``workers`` workers.

    Its blocks (and the top layer, for the top worker) take each step as ``sgrad.parallel.schedules.Decoupled``
    takes it (forward, the top's step, each block's step on ĝ, each generator's regression), but outside the
    pipeline: no message and no timeline; the bottom worker gathers its batch, a worker above takes a fixed
    input, and a stage below the top regresses its last generator onto a fixed target.  A tenth of the steps
    warms up.
    """
    layers = build_network("dni", 784, CONFIG)
    share = split_layers(len(layers), workers)[worker]
    mine, is_top = [layers[i] for i in share], share.stop == len(layers)
    blocks, top = (mine[:-1], mine[-1]) if is_top else (mine, None)
    train, rng = data()[:2], np.random.default_rng(worker)
    fixed_input = (rng.random((BATCH, blocks[0].input_dim), dtype=np.float32),
                   np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, BATCH)])
    from_above = 1e-3 * rng.standard_normal((BATCH, blocks[-1].output_dim)).astype(np.float32)

    def step(t):
        x, y = batch(train, t) if worker == 0 else fixed_input
        hs = []
        for block in blocks:
            hs.append(block.forward(hs[-1] if hs else x))
        if is_top:
            _, g = summed_cross_entropy(top.forward(hs[-1]), y)
            top_delta = top.backward(g)
            top.update(CONFIG.alpha)
        for j, block in enumerate(blocks):
            if j == len(blocks) - 1 and not is_top and t > 0:
                block.update_generator(from_above)  # the target of the batch before, as regress_late takes it
            delta, _ = block.update_from_synthetic_gradient(hs[j], None, input_delta=not (worker == 0 and j == 0))
            if j > 0:
                blocks[j - 1].update_generator(delta)
        if is_top:
            blocks[-1].update_generator(top_delta)

    warm = max(1, steps // 10)
    for t in range(warm):
        step(t)
    start = time.perf_counter()
    for t in range(warm, steps):
        step(t)
    return worker, (time.perf_counter() - start) / (steps - warm)


def dni_shares_at_once(workers, steps):
    """``{worker: seconds per step}``: every DNI worker's share (:func:`dni_share_seconds`), each in a local worker's
    process, all at once."""
    return dict(in_workers(workers, dni_share_seconds, workers, steps, each=[(k,) for k in range(workers)]))


def dni_shares_alone(workers, steps):
    """``{worker: seconds per step}``: each DNI worker's share (:func:`dni_share_seconds`) in a local worker's process
    of its own, one after the other: nothing computing beside it."""
    return dict(in_workers(1, dni_share_seconds, workers, steps, each=[(k,)])[0] for k in range(workers))


def _run(function, args, start, results):
    threading.Thread(target=exit_with_driver, daemon=True).start()
    start.wait()
    results.put(function(*args))


def in_workers(copies, function, *args, each=None):
    """``function(*args)`` in each of ``copies`` local processes started together and set up as the local engine's
    workers are (one BLAS thread, malloc keeping the memory it frees): their results, in the order they finish.

    ``each``: for each process, a tuple of the arguments that follow ``args`` there (default: none).
    """
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [context.Process(target=_run, args=(function, (*args, *extra), start, results))
                 for extra in (each or [()] * copies)]
    try:
        with environment(WORKER_ENVIRONMENT):
            for process in processes:
                process.start()
        start.set()
        return [results.get(timeout=600) for _ in processes]
    finally:
        ended(processes)


def ended(processes):
    """Wait for ``processes`` to exit (10 s each at most), killing any still running then: none outlives the script."""
    for process in processes:
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


def local_steps_at_once(method, copies, steps):
    """Median seconds of one single-process step of ``method`` in each of ``copies`` local workers' processes at once."""
    return in_workers(copies, step_seconds, method, steps)


def ray_steps_at_once(method, copies, steps):
    """As :func:`local_steps_at_once`, in ``copies`` Ray actors."""
    import ray

    actors = ray_mailboxes(copies)
    try:
        return ray.get([actor.steps.remote(method, steps) for actor in actors])
    finally:
        for actor in actors:
            ray.kill(actor)


ENGINE_MEASUREMENTS = {"local": (local_round_trip, local_steps_at_once), "ray": (ray_round_trip, ray_steps_at_once)}


def machine_costs(engine, methods, steps):
    """What the simulator's machine is on ``engine``, measured apart from the runs it predicts.

    ``transfer``: half a round trip between two workers that do nothing else; ``message_cpu``: half
    the processor time the whole machine spent on that round trip.  ``contention[method]``: how much
    slower the method's single-process step runs in each of two workers at once than in one alone.
    ``wake[method]``: what each message costs beyond its transfer when the two workers take a step of
    the method between messages, so that each sleeps until its message comes and then computes: half
    the round trip, less the transfer and the step (as the worker takes it alone).
    """
    round_trip, steps_at_once = ENGINE_MEASUREMENTS[engine]
    seconds, busy = round_trip(400)
    transfer, message_cpu = seconds / 2, busy / 2
    wake, contention = {}, {}
    for method in methods:
        alone = steps_at_once(method, 1, steps)[0]
        together = float(np.median(steps_at_once(method, 2, steps)))
        contention[method] = max(0.0, together / alone - 1)
        count = max(20, min(200, int(2.0 / alone)))
        wake[method] = max(0.0, round_trip(count, method)[0] / 2 - alone - transfer)
    return {"transfer": transfer, "message_cpu": message_cpu, "wake": wake, "contention": contention}


def simulated_scaling(measured_blocks, machines):
    """The simulator's examples per second for a net of 64 blocks like the measured 256-256 one, on K workers.

    Each worker on a machine of its own (no contention, ``cores=None``), messages as measured on each engine.
    """
    counts = (1, 2, 4, 8, 16, 32, 64)
    lines = ["The simulator, a net of 64 hidden blocks like the measured 256-to-256 one, a core per worker and no "
             "contention, messages (transfer + wake) as measured (examples per second):", "",
             "| schedule, messages | " + " | ".join(f"K = {k}" for k in counts) + " |",
             "|---|" + "---:|" * len(counts)]
    for schedule in ("backprop", "pipelined-backprop", "dni"):
        method = "dni" if schedule == "dni" else "backprop"
        blocks, top = measured_blocks[method]
        for name, machine in machines.items():
            transfer, wake = machine["transfer"], machine["wake"][method]
            rates = scaling(schedule, blocks[1], top, blocks=64, workers=counts, transfer=transfer, wake=wake,
                            batch=BATCH)
            lines.append(f"| {schedule}, {name} ({1e3 * transfer:.2f} + {1e3 * wake:.2f} ms) | "
                         + " | ".join(f"{rate:,.0f}" for rate in rates.values()) + " |")
    return lines


def spread(values):
    """``'median (min-max)'`` of repeated measurements."""
    return f"{np.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def report(args):
    """Measure everything, print the tables (and write them to ``--out``); returns the exit status."""
    split = data()
    train = split[:2]
    if args.ray:
        from sgrad.parallel.ray_engine import LOOPBACK_ONLY

        os.environ.update(LOOPBACK_ONLY)  # before Ray loads: a Ray on 127.0.0.1 only
    engines = {"local": LocalEngine, **({"ray": RayEngine} if args.ray else {})}
    methods = ("dni", "backprop")
    # A backprop step is some fifteen times shorter than DNI's: five times the steps, so that its runs last long
    # enough (seconds) for the machine's and Ray's own periodic work to average out.
    steps = {"dni": args.steps, "backprop": BACKPROP_STEPS * args.steps}
    runs: dict = {}
    costs: dict = {name: [] for name in engines}
    computing: dict = {}
    where: dict = {}
    outside: list = []  # each repeat's {worker: seconds per step} of the DNI workers' shares outside the pipeline
    alone: list = []  # the same, each share with nothing beside it
    timed_blocks: dict = {method: [] for method in methods}  # each repeat's block_times, the simulator's input
    load_before = os.getloadavg()[0]
    for repeat in range(args.repeats):
        for method in methods:
            runs.setdefault((method, "one process", 1), []).append(
                single_process_throughput(method, train, steps[method]))
        for name, engine in engines.items():
            with started(name):
                for method in methods:
                    for workers in (1, 2):
                        rate, seconds, shares = pipeline_throughput(method, split, workers, steps[method],
                                                                    engine())
                        runs.setdefault((method, name, workers), []).append(rate)
                        computing.setdefault((method, name, workers), []).append(seconds)
                        where.setdefault((method, name, workers), []).append(shares)
                costs[name].append(machine_costs(name, methods, args.steps // 2))
        outside.append(dni_shares_at_once(2, args.steps // 2))
        alone.append(dni_shares_alone(2, args.steps // 2))
        for method in methods:
            timed_blocks[method].append(worker_block_times(method, BLOCK_ROUNDS[method]))
        print(f"repeat {repeat + 1} of {args.repeats} done", file=sys.stderr, flush=True)
    cores = os.cpu_count()
    machines = {name: {"transfer": float(np.median([c["transfer"] for c in values])),
                       "message_cpu": float(np.median([c["message_cpu"] for c in values])),
                       "wake": {m: float(np.median([c["wake"][m] for c in values])) for m in methods},
                       "contention": {m: float(np.median([c["contention"][m] for c in values])) for m in methods}}
                for name, values in costs.items()}
    predicted, ideal, measured_blocks = {}, {}, {}
    for method in methods:
        blocks, top = measured_blocks[method] = median_block_times(timed_blocks[method])
        for name, machine in machines.items():
            for workers in (1, 2):
                predicted[(method, name, workers)] = throughput(
                    method, blocks, top, workers, transfer=machine["transfer"], wake=machine["wake"][method],
                    contention=machine["contention"][method], cores=cores, message_cpu=machine["message_cpu"],
                    batch=BATCH)
                ideal[(method, name, workers)] = throughput(method, blocks, top, workers,
                                                            transfer=machine["transfer"], batch=BATCH)
    lines = ["| run | examples/s, median (range) | simulator | simulator's error | computing per step: in the "
             "workers / in one process | error on an ideal machine |", "|---|---:|---:|---:|---:|---:|"]
    errors = {}
    for (method, engine, workers), values in runs.items():
        plural = "s" if workers > 1 else ""
        label = f"{method}, {engine}" + ("" if engine == "one process" else f", {workers} worker{plural}")
        if (method, engine, workers) in predicted:
            guess = predicted[(method, engine, workers)]
            errors[(method, engine, workers)] = guess / np.median(values) - 1
            blocks, top = measured_blocks[method]
            modelled = top + sum(sum(block) for block in blocks)
            inside = float(np.median(computing[(method, engine, workers)]))
            lines.append(f"| {label} | {spread(values)} | {guess:,.0f} | {100 * errors[(method, engine, workers)]:+.1f}% "
                         f"| {1e3 * inside:.2f} / {1e3 * modelled:.2f} ms "
                         f"| {100 * (ideal[(method, engine, workers)] / np.median(values) - 1):+.1f}% |")
        else:
            lines.append(f"| {label} | {spread(values)} | | | | |")
    dni_speedup = np.median(runs[("dni", "local", 2)]) / np.median(runs[("dni", "one process", 1)])
    backprop_ratio = np.median(runs[("backprop", "local", 2)]) / np.median(runs[("backprop", "one process", 1)])
    checks = {
        f"DNI on 2 local workers / the single-process DNI step = {dni_speedup:.2f} (target >= {TARGET_SPEEDUP})":
            dni_speedup >= TARGET_SPEEDUP,
        f"locked backprop on 2 local workers / one process = {backprop_ratio:.2f} (target <= 1)": backprop_ratio <= 1,
        f"the simulator's largest error = {100 * max(abs(e) for e in errors.values()):.1f}% (target <= "
        f"{100 * TOLERANCE:.0f}%)": all(abs(e) <= TOLERANCE for e in errors.values()),
    }
    lines += ["", f"The machine, as the simulator is given it ({cores} cores; median of {args.repeats} measurements):",
              "", "| engine | transfer | processor time per message | wake, dni / backprop | contention, dni / backprop |",
              "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {1e3 * m['transfer']:.2f} ms | {1e3 * m['message_cpu']:.2f} ms | {1e3 * m['wake']['dni']:.2f} / "
              f"{1e3 * m['wake']['backprop']:.2f} ms | {100 * m['contention']['dni']:+.1f}% / "
              f"{100 * m['contention']['backprop']:+.1f}% |" for name, m in machines.items()]
    lines += ["", *(f"- {'met' if ok else 'MISSED'}: {text}" for text, ok in checks.items())]
    lines += ["", *where_the_time_goes(where[("dni", "local", 2)], np.median(runs[("dni", "one process", 1)]), alone,
                                        outside)]
    lines += ["", *simulated_scaling(measured_blocks, machines)]
    publish("\n".join(lines), args.out, {
        "cores": cores,
        "runs": [{"method": m, "engine": e, "workers": w, "examples_per_second": v} for (m, e, w), v in runs.items()],
        "machine": machines,
        "machine_measurements": costs,
        "computing_seconds_per_step": [{"method": m, "engine": e, "workers": w, "seconds": v}
                                       for (m, e, w), v in computing.items()],
        "where_the_time_goes": [{"method": m, "engine": e, "workers": w, "seconds_per_step": v}
                                for (m, e, w), v in where.items()],
        "dni_shares_outside_the_pipeline": [{str(k): v for k, v in shares.items()} for shares in outside],
        "dni_shares_alone": [{str(k): v for k, v in shares.items()} for shares in alone],
        "block_times": {method: [{"blocks": [block._asdict() for block in blocks], "top": top}
                                 for blocks, top in measurements] for method, measurements in timed_blocks.items()},
        "command": "python benchmarks/parallel.py " + " ".join(sys.argv[1:]),
        "cpu": describe_machine(), "date": datetime.date.today().isoformat(),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "predicted": [{"method": m, "engine": e, "workers": w, "examples_per_second": v,
                       "on_an_ideal_machine": ideal[(m, e, w)]} for (m, e, w), v in predicted.items()]})
    return 0 if all(checks.values()) else 1


def publish(text, out, record):
    """Print ``text``; with a folder ``out``, also write it to ``out/results.md`` and ``record`` to ``out/results.json``."""
    print(text)
    if out:
        folder = pathlib.Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.md").write_text(text + "\n")
        (folder / "results.json").write_text(json.dumps(record, indent=1) + "\n")


def where_the_time_goes(repeats, one_process_rate, alone, outside):
    """A table: DNI on 2 local workers, each worker's step by kind of event (median over the repeats), in ms.

    Below the workers' rows, each worker's share of the work taken outside the pipeline
    (:func:`dni_share_seconds`): what its step would take with no message, no wait and no timeline, first with
    nothing beside it (``alone``: each repeat's :func:`dni_shares_alone`), then with the other worker computing
    beside it (``outside``: each repeat's :func:`dni_shares_at_once`); and half the single-process step: what each
    worker's step would take if the work split evenly and nothing else cost anything.  ``repeats``:
    :func:`pipeline_throughput`'s ``shares`` of each repeat.  The last column, the single-process step over the
    row's step, is the speedup 2 workers would reach if every step took that long: the slower worker's row
    bounds it.
    """
    kinds = ("forward", "dni", "update", "backward", "wait", "other")
    single = BATCH / one_process_rate
    lines = ["Where a step's time goes, DNI on 2 local workers (ms per step, median of the repeats; `dni` is the "
             "block's step on ĝ, with the generator's prediction; `update` the generator's regression; `other` what "
             "no event covers: sending, the loop's own code; the last column is the single-process step over the "
             "row's step):", "",
             "| DNI, 2 local workers, ms per step | " + " | ".join(kinds) + " | step | one process / step |",
             "|---|" + "---:|" * (len(kinds) + 2)]
    blank = "| " * len(kinds)
    for worker in sorted(repeats[0]):
        values = {kind: float(np.median([shares[worker].get(kind, 0.0) for shares in repeats])) for kind in kinds}
        step = sum(values.values())
        lines.append(f"| worker {worker} | " + " | ".join(f"{1e3 * values[kind]:.2f}" for kind in kinds)
                     + f" | {1e3 * step:.2f} | {single / step:.2f} |")
    for label, measured in (("alone", alone), ("both at once", outside)):
        for worker in sorted(measured[0]):
            seconds = float(np.median([shares[worker] for shares in measured]))
            lines.append(f"| worker {worker}'s share outside the pipeline, {label} {blank}| {1e3 * seconds:.2f} "
                         f"| {single / seconds:.2f} |")
    lines.append(f"| half the single-process step {blank}| {1e3 * single / 2:.2f} | 2.00 |")
    return lines


def settle(seconds=30.0, idle=0.1):
    """Wait (at most ``seconds``) until the machine is quiet: less than ``idle`` of a core busy over a second.

    Ray starts processes of its own (its daemons, workers it keeps ready), which are busy for a while.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        busy = busy_seconds()
        time.sleep(1.0)
        if busy_seconds() - busy < idle:
            return


@contextlib.contextmanager
def started(engine):
    """Ray's own processes run only while Ray is measured (they would take processor time from the local runs)."""
    if engine != "ray":
        yield
        return
    import ray

    from sgrad.parallel.ray_engine import connect

    connect(None, cpus=4)  # as a RayEngine starts its own Ray
    try:
        settle()
        yield
    finally:
        ray.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200,
                        help=f"steps of each DNI run (default 200); backprop's runs take {BACKPROP_STEPS} times as many")
    parser.add_argument("--repeats", type=int, default=3, help="times each measurement is repeated (default 3)")
    parser.add_argument("--ray", action="store_true", help="also run on Ray actors (pip install 'sgrad[ray]')")
    parser.add_argument("--out", default=None, help="folder for results.json and results.md")
    raise SystemExit(report(parser.parse_args()))


if __name__ == "__main__":
    main()
