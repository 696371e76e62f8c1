"""Benchmark: what every block in its own worker buys, measured, and what the simulator predicted.

On the paper's MNIST net (784-256-256-10, Linear→BatchNorm→ReLU blocks, generators with two hidden
layers of 1024, float32, Adam, batch 256; random inputs, which cost what MNIST's do):

1. the single-process steps (``sgrad.steps.dni_step``, ``backprop_step``), median time per step,
   gathering the batch included (as the bottom worker gathers it);
2. the same nets on 1 and 2 local workers (``sgrad.parallel.train_parallel``): examples per
   second in the steady state (worker 0's start of batch steps/4 to its start of batch 3 steps/4),
   and the seconds the workers spent computing per step (their timelines' forward, backward and
   update events), beside the compute the simulator is given: where the two differ, the blocks ran
   slower in the workers than in one process, which the simulator's cost model leaves out;
3. one message's one-way time between two local worker processes (``multiprocessing.Queue``) and
   between two Ray actors (a call of the neighbour's ``deliver``), for h of one batch, (256, 256);
4. each block's forward, backward, update, generator and regression times, and the top layer's,
   measured in this process; the simulator's throughput from them and the message times, against
   the measured ones; and its throughput for a net of 64 such blocks on K = 1 to 64 workers;
5. with ``--ray``, the 2-worker DNI run on Ray actors too;
6. a check of the simulator's schedules alone: its throughput again, with every block's times scaled by
   the ratio of the workers' measured compute per step to the modelled one.  That is not a prediction
   (the compute comes from the run it is compared with); what error remains is the model of the
   waits and the messages, and the rest of the first error is the blocks' slowdown in the workers.

Targets (exit status 0 if all hold): 2 workers' DNI at least 1.7x the single-process DNI step;
locked backprop on 2 workers no faster than one process; the simulator within 15% of every measured
throughput.  Every measurement is repeated ``--repeats`` times; the tables give the median and the
range.  Other processes on the machine disturb the figures: run it on a quiet machine.

Run:  python benchmarks/parallel.py [--steps 200] [--repeats 3] [--ray] [--out docs/parallel]
"""

import os

# Before numpy is imported: OpenBLAS reads its thread count once, at load time.  One thread per process,
# as every worker has, so that the single process and the workers do the same arithmetic.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import json
import multiprocessing
import pathlib
import sys
import time

import numpy as np

from sgrad.experiments.mnist import PaperConfig, build_network, summed_cross_entropy
from sgrad.parallel import LocalEngine, RayEngine, train_parallel
from sgrad.parallel.simulator import BlockTimes, scaling, throughput
from sgrad.steps import backprop_step, dni_step

CONFIG = PaperConfig(dtype="float32")
BATCH, CLASSES, EXAMPLES, TEST = CONFIG.batch_size, 10, 8192, 1024
TARGET_SPEEDUP, TOLERANCE = 1.7, 0.15


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((EXAMPLES + TEST, 784), dtype=np.float32)
    y = rng.integers(0, CLASSES, EXAMPLES + TEST)
    return x[:EXAMPLES], y[:EXAMPLES], x[EXAMPLES:], y[EXAMPLES:]


ORDER = np.random.default_rng(1).permutation(EXAMPLES)  # rows in a shuffled order, as the workers draw them


def batch(train, t):
    """Batch t's images and one-hot labels, gathered as the bottom worker gathers them (counted in every timing)."""
    x, y = train
    indices = ORDER[np.arange(t * BATCH, (t + 1) * BATCH) % EXAMPLES]
    return x[indices], np.eye(CLASSES, dtype=np.float32)[y[indices]]


def single_process_step(method, train, steps):
    """Median seconds of one step of ``method`` in this process, batch gathering included (a tenth warms up)."""
    layers = build_network(method, 784, CONFIG)
    times = []
    for t in range(steps):
        start = time.perf_counter()
        x, y = batch(train, t)
        if method == "backprop":
            backprop_step(layers, x, y, summed_cross_entropy, CONFIG.alpha)
        else:
            dni_step(layers, x, y, summed_cross_entropy, CONFIG.alpha, condition=y if method == "cdni" else None)
        times.append(time.perf_counter() - start)
    return float(np.median(times[steps // 10:]))


def pipeline_throughput(method, split, workers, steps, engine):
    """``(examples per second, seconds of computing per step)`` of ``method`` on ``workers`` workers, steady state.

    From worker 0's start of batch steps/4 to its start of batch 3 steps/4: start-up, the final flush
    and the one evaluation (after the last step) are outside.  The computing is every worker's forward,
    backward and update events (waits left out) over those steps, from the run's timeline.
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
    computing = sum(event.end - event.start for event in result.timeline
                    if event.kind != "wait" and first <= event.step < last)
    return BATCH * (last - first) / (starts[last] - starts[first]), computing / (last - first)


def block_times(method, train, rounds=30):
    """Each hidden block's :class:`BlockTimes` and the top layer's seconds, median over ``rounds`` batches."""
    layers = build_network(method, 784, CONFIG)
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
        x, y = batch(train, t)
        gathering.append(time.perf_counter() - start)
        h = x
        for j, block in enumerate(blocks):
            h_in = h
            h = timed((j, "forward"), lambda: block.forward(h_in))  # noqa: B023
            if method == "backprop":
                delta = np.ones_like(h)
                timed((j, "backward"), lambda: block.backward(delta, input_delta=j > 0))  # noqa: B023
                timed((j, "update"), lambda: block.update(CONFIG.alpha))  # noqa: B023
                continue
            condition = y if method == "cdni" else None
            h_out = h
            g_hat = timed((j, "generator"), lambda: block.generator.forward(h_out, condition))  # noqa: B023
            timed((j, "backward"), lambda: block.backward(g_hat, input_delta=j > 0))  # noqa: B023
            timed((j, "update"), lambda: block.update(block.alpha))  # noqa: B023
            target = g_hat + 0.01
            timed((j, "regression"), lambda: block.generator.update(target, block.generator_alpha))  # noqa: B023
        h_top = h

        def top_step():
            _, g = summed_cross_entropy(top.forward(h_top), y)  # noqa: B023
            top.backward(g)
            top.update(CONFIG.alpha)

        timed(None, top_step)
    median = {key: float(np.median(values[rounds // 5:])) if values else 0.0 for key, values in samples.items()}
    median[(0, "forward")] += float(np.median(gathering[rounds // 5:]))  # the bottom worker gathers the batch
    return ([BlockTimes(*(median[(j, part)] for part in BlockTimes._fields)) for j in range(len(blocks))],
            float(np.median(top_samples[rounds // 5:])))


def _echo(inbox, outbox, count):
    for _ in range(count):
        outbox.put(inbox.get())


def local_message_seconds(shape=(BATCH, 256), count=200):
    """One-way time of a message between two local processes through multiprocessing queues (half a round trip)."""
    context = multiprocessing.get_context("spawn")
    there, back = context.Queue(), context.Queue()
    echo = context.Process(target=_echo, args=(there, back, count + 10))
    echo.start()
    message = np.zeros(shape, dtype=np.float32)
    for k in range(count + 10):
        if k == 10:
            start = time.perf_counter()
        there.put(message)
        back.get()
    seconds = (time.perf_counter() - start) / count / 2
    echo.join()
    return seconds


class Mailbox:
    """A Ray actor that takes messages as a worker's does (its ``deliver`` fills a queue on another thread)."""

    def __init__(self):
        import queue

        self.inbox = queue.Queue()

    def deliver(self, message):
        self.inbox.put(message)

    def bounce(self, peer, count):
        for _ in range(count):
            peer.deliver.remote(self.inbox.get())

    def ping(self, peer, message, count):
        """Seconds per one-way trip: ``count`` round trips to ``peer`` (which bounces them back), halved."""
        for k in range(count + 10):
            if k == 10:
                start = time.perf_counter()
            peer.deliver.remote(message)
            self.inbox.get()
        return (time.perf_counter() - start) / count / 2


def ray_message_seconds(shape=(BATCH, 256), count=200):
    """One-way time of a message between two Ray actors, each calling the other's ``deliver``."""
    import ray

    mailbox = ray.remote(Mailbox).options(max_concurrency=2, num_cpus=0)
    first, second = mailbox.remote(), mailbox.remote()
    bounced = second.bounce.remote(first, count + 10)
    seconds = ray.get(first.ping.remote(second, np.zeros(shape, dtype=np.float32), count))
    ray.get(bounced)
    for actor in (first, second):
        ray.kill(actor)
    return seconds


def simulated_scaling(measured_blocks, transfer):
    """The simulator's examples per second for a net of 64 blocks like the measured 256-256 one, on K workers."""
    counts = (1, 2, 4, 8, 16, 32, 64)
    lines = ["The simulator, a net of 64 hidden blocks like the measured 256-to-256 one (examples per second):", "",
             "| schedule, messages | " + " | ".join(f"K = {k}" for k in counts) + " |",
             "|---|" + "---:|" * len(counts)]
    for schedule in ("backprop", "pipelined-backprop", "dni"):
        blocks, top = measured_blocks["dni" if schedule == "dni" else "backprop"]
        for name, seconds in transfer.items():
            rates = scaling(schedule, blocks[1], top, blocks=64, workers=counts, transfer=seconds, batch=BATCH)
            lines.append(f"| {schedule}, {name} ({1e3 * seconds:.2f} ms) | "
                         + " | ".join(f"{rate:,.0f}" for rate in rates.values()) + " |")
    return lines


def scaled(blocks, top, factor):
    """The blocks' and the top layer's times, each multiplied by ``factor``."""
    return [BlockTimes(*(factor * seconds for seconds in block)) for block in blocks], factor * top


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
        import ray

        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    engines = {"local": LocalEngine, **({"ray": RayEngine} if args.ray else {})}
    runs: dict = {}
    messages: dict = {name: [] for name in engines}
    computing: dict = {}
    for repeat in range(args.repeats):
        for method in ("dni", "backprop"):
            runs.setdefault((method, "one process", 1), []).append(
                BATCH / single_process_step(method, train, args.steps // 2))
            for name, engine in engines.items():
                for workers in (1, 2):
                    rate, seconds = pipeline_throughput(method, split, workers, args.steps, engine())
                    runs.setdefault((method, name, workers), []).append(rate)
                    computing.setdefault((method, name, workers), []).append(seconds)
        messages["local"].append(local_message_seconds())
        if args.ray:
            messages["ray"].append(ray_message_seconds())
        print(f"repeat {repeat + 1} of {args.repeats} done", file=sys.stderr, flush=True)
    transfer = {name: float(np.median(values)) for name, values in messages.items()}
    predicted, measured_blocks = {}, {}
    for method in ("dni", "backprop"):
        blocks, top = measured_blocks[method] = block_times(method, train)
        for name in engines:
            for workers in (1, 2):
                predicted[(method, name, workers)] = throughput(method, blocks, top, workers,
                                                                transfer=transfer[name], batch=BATCH)
    lines = ["| run | examples/s, median (range) | simulator | simulator's error | computing per step: in the "
             "workers / the simulator's | error given the workers' compute |", "|---|---:|---:|---:|---:|---:|"]
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
            given = throughput(method, *scaled(blocks, top, inside / modelled), workers, transfer=transfer[engine],
                               batch=BATCH)
            lines.append(f"| {label} | {spread(values)} | {guess:,.0f} | {100 * errors[(method, engine, workers)]:+.1f}% "
                         f"| {1e3 * inside:.2f} / {1e3 * modelled:.2f} ms | {100 * (given / np.median(values) - 1):+.1f}% |")
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
    lines += ["", "One message of one batch's h, (256, 256) float32, one way: " + ", ".join(
        f"{name} {1e3 * np.median(values):.2f} ms ({1e3 * min(values):.2f}-{1e3 * max(values):.2f})"
        for name, values in messages.items()), ""]
    lines += [f"- {'met' if ok else 'MISSED'}: {text}" for text, ok in checks.items()]
    lines += ["", *simulated_scaling(measured_blocks, transfer)]
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text(text + "\n")
        (out / "results.json").write_text(json.dumps({
            "runs": [{"method": m, "engine": e, "workers": w, "examples_per_second": v} for (m, e, w), v in runs.items()],
            "message_seconds": messages,
            "computing_seconds_per_step": [{"method": m, "engine": e, "workers": w, "seconds": v}
                                           for (m, e, w), v in computing.items()],
            "predicted": [{"method": m, "engine": e, "workers": w, "examples_per_second": v}
                                                       for (m, e, w), v in predicted.items()]}, indent=1))
    if args.ray:
        ray.shutdown()
    return 0 if all(checks.values()) else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps of each pipeline run (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="times each measurement is repeated (default 3)")
    parser.add_argument("--ray", action="store_true", help="also run on Ray actors (pip install 'sgrad[ray]')")
    parser.add_argument("--out", default=None, help="folder for results.json and results.md")
    raise SystemExit(report(parser.parse_args()))


if __name__ == "__main__":
    main()
