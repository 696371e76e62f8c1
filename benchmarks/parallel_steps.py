"""Benchmark: where a pipeline run's time goes, step by step, on every worker.

A finished ``sgrad parallel`` comparison records a few steps of each run's timeline, and its examples per second
from the first evaluation to the last.  This reruns one schedule at the comparison's setting (its
``histories.json``: the network, batch, steps and evaluations) with every step's events recorded, on random
inputs of MNIST's sizes (60,000 training and 10,000 test images by default: a step costs what it costs on
MNIST, and an evaluation sends as many images through the pipeline), and reports for each worker:

- the time from the start of one step to the start of the next: its median, its mean and percentiles;
- the time per step in each kind of event (``forward``, ``backward``, ``update``, ``dni``, ``wait``, ...), and
  between events (receiving and sending messages, the worker's own bookkeeping);
- the slow steps, those over twice the median: how many, what they add to the mean step, and how many of them
  come within three steps after an evaluation (the test set going through the pipeline) or of the start.

The mean step is what the run's examples per second come from (batch / mean); the median, what a step costs
when nothing else happens.  Writes ``steps-<schedule>.json`` into the comparison's folder.

Run:  python benchmarks/parallel_steps.py docs/parallel/forward-unlock --schedule dni
"""

import os

# Before numpy is imported: one BLAS thread, as every worker has.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import collections
import dataclasses
import json
import pathlib
import time

import numpy as np
from machine import describe
from parallel import data as random_data

from sgrad.experiments.mnist import PaperConfig
from sgrad.experiments.parallel import examples_per_second, train_schedule

SLOW = 2.0  # a slow step takes more than this many times the median
AFTER_EVALUATION = 3  # steps after an evaluation that its pass through the pipeline may slow down


def worker_steps(events, worker, eval_every):
    """One worker's figures, from its events (dicts of ``worker``, ``kind``, ``step``, ``start``, ``end``)."""
    by_step = collections.defaultdict(list)
    for event in events:
        if event["worker"] == worker:
            by_step[event["step"]].append(event)
    steps = sorted(by_step)
    starts = np.array([min(e["start"] for e in by_step[s]) for s in steps])
    spans = 1e3 * np.diff(starts)  # ms from each step's start to the next one's; the last step has none
    kinds = collections.Counter()
    for step in steps[:-1]:
        for event in by_step[step]:
            kinds[event["kind"]] += 1e3 * (event["end"] - event["start"])
    median = float(np.median(spans))
    slow = spans > SLOW * median
    after = np.array([(s - 1) % eval_every < AFTER_EVALUATION for s in steps[:-1]])
    count = len(spans)
    return {"worker": worker, "steps": count, "median_ms": median, "mean_ms": float(spans.mean()),
            "percentiles_ms": {str(p): float(v) for p, v in zip((10, 90, 99), np.percentile(spans, (10, 90, 99)))},
            "events_ms": {kind: total / count for kind, total in sorted(kinds.items())},
            "between_events_ms": float(spans.sum() - sum(kinds.values())) / count,
            "slow_steps": int(slow.sum()), "slow_excess_ms": float((spans[slow] - median).sum()) / count,
            "slow_after_evaluations": int((slow & after).sum()),
            "slow_excess_after_evaluations_ms": float((spans[slow & after] - median).sum()) / count}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", help="the --out folder of a finished sgrad parallel comparison")
    parser.add_argument("--schedule", required=True, help="one of the comparison's schedules")
    parser.add_argument("--examples", type=int, default=60_000, help="training images (random)")
    parser.add_argument("--test", type=int, default=10_000, help="test images (random)")
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.comparison)
    record = json.loads((folder / "histories.json").read_text())
    runs = [run for run in record["runs"] if run["schedule"] == args.schedule]
    if not runs:
        raise SystemExit(f"parallel_steps.py: {folder} has no run of {args.schedule!r}; its schedules are "
                         f"{', '.join(sorted({run['schedule'] for run in record['runs']}))}")
    config = PaperConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["config"].items()})
    workers = runs[0]["workers"]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    run = train_schedule(args.schedule, workers, random_data(examples=args.examples, test=args.test), config,
                         timeline_steps=(1, config.iterations))
    seconds = time.perf_counter() - started
    events = [event._asdict() for event in run.timeline]
    result = {"command": f"python benchmarks/parallel_steps.py {args.comparison} --schedule {args.schedule}",
              "machine": describe(), "date": time.strftime("%Y-%m-%d"), "load": [load_before, os.getloadavg()[0]],
              "config": dataclasses.asdict(config), "schedule": args.schedule, "workers": workers,
              "examples": args.examples, "test": args.test, "seconds": seconds,
              "examples_per_second": examples_per_second(run.history, config.batch_size),
              "recorded_examples_per_second": examples_per_second(runs[0]["history"], config.batch_size),
              "per_worker": [worker_steps(events, w, config.eval_every) for w in range(workers)]}
    (folder / f"steps-{args.schedule}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.schedule} on {workers} workers: {result['examples_per_second']:,.0f} examples/s "
          f"(the comparison's run: {result['recorded_examples_per_second']:,.0f}); load average {load_before:.2f}")
    kinds = sorted({kind for worker in result["per_worker"] for kind in worker["events_ms"]})
    print("| worker | median step | mean step | slow steps (after an evaluation or the start) | what they add | "
          "between events | " + " | ".join(kinds) + " |")
    for w in result["per_worker"]:
        print(f"| {w['worker']} | {w['median_ms']:.2f} ms | {w['mean_ms']:.2f} ms | {w['slow_steps']} "
              f"({w['slow_after_evaluations']}) | {w['slow_excess_ms']:.2f} ms | {w['between_events_ms']:.2f} ms | "
              + " | ".join(f"{w['events_ms'].get(k, 0.0):.2f}" for k in kinds) + " |")


if __name__ == "__main__":
    main()
