"""Two versions of sgrad on the same workloads, in alternation: wall times, their ratio per round, and the same figures.

    git worktree add /tmp/before <older commit>
    python benchmarks/two_versions.py --before /tmp/before --after . --rounds 2

For a change that should move nothing (a restructuring): each workload runs for both versions in every round,
the older one first in odd rounds and the newer one first in even rounds, so that a busy stretch of a shared
machine hits both sides of a round's ratio, and going first or second favours neither.  Each
version runs from its folder (``PYTHONPATH=<folder>``, ``OPENBLAS_NUM_THREADS=1``), in a fresh temporary folder:

- ``compare``: ``sgrad compare --out out --checkpoint-every 0``, the README's main job;
- ``paper``: ``sgrad paper`` on one MNIST cell per method (``--paper-args``; ``SGRAD_DATA_DIR`` names the data);
- ``rnn``: ``sgrad rnn`` on a short Copy run (``--rnn-args``);
- ``blog``: the blog's binary-addition net of ``Layer`` and ``DNI``, trained through sgrad's public names, which
  the same code imports from either version: seconds per iteration;
- ``steps``: each version's own ``benchmarks/performance.py`` on its step cases (``--cases``), read as the step
  over the matrix-product limit measured beside it, a figure that the machine's speed cancels out of.

A command's figures are its record with the wall times left out; the report gives the largest difference between
the two versions' figures over every round (``compare``, ``paper``, ``rnn``, ``blog``: every number they write;
accuracies are fractions, so 1e-4 is a hundredth of a point).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from compare_wall_time import BLAS_THREADS
from compare_wall_time import run as run_compare
from machine import describe, write_record

WORKLOADS = ("compare", "paper", "rnn", "blog", "steps")
PAPER_ARGS = "--methods backprop,dni,cdni --depths 3 --iterations 1000 --eval-every 500"
RNN_ARGS = "--tasks copy --methods bptt,dni --windows 3 --seeds 0 --steps 1000 --eval-every 250"

BLOG = """
import json, sys, time
import numpy as np
from data_gen import generate_dataset
from sgrad import DNI, Layer, sigmoid, sigmoid_out2deriv
x, y = generate_dataset(8, 1000, seed=0)
rng = np.random.default_rng(0)
layers = [DNI(16, 128, sigmoid, sigmoid_out2deriv, alpha=0.01, rng=rng),
          DNI(128, 64, sigmoid, sigmoid_out2deriv, alpha=0.01, rng=rng),
          Layer(64, 8, sigmoid, sigmoid_out2deriv, rng=rng)]
errors, start = [], time.perf_counter()
for iteration in range(int(sys.argv[1])):
    total = 0.0
    for b in range(0, 1000, 10):
        h, deltas = x[b:b + 10], []
        for layer in layers[:-1]:
            delta, h = layer.forward_and_synthetic_update(h)
            deltas.append(delta)  # dL/d(its input) by its ĝ: the target of the generator below
        out = layers[-1].forward(h)
        delta = out - y[b:b + 10]
        total += float((delta ** 2).sum())
        top_delta = layers[-1].backward(delta)
        layers[-1].update(0.01)
        for layer, target in zip(layers[:-1], deltas[1:] + [top_delta]):
            layer.update_synthetic_weights(target)
    errors.append(round(total, 10))
print(json.dumps({"seconds": time.perf_counter() - start, "figures": errors}))
"""


def environment(source):
    """This environment for the sgrad in ``source``, with one BLAS thread whatever the caller's settings say."""
    env = {name: value for name, value in os.environ.items() if name not in BLAS_THREADS}
    env.update(PYTHONPATH=str(pathlib.Path(source).resolve()), OPENBLAS_NUM_THREADS="1")
    return env


def without_wall_times(value):
    """The record ``value`` with every wall time left out (keys naming one), to compare two runs' figures."""
    if isinstance(value, dict):
        return {k: without_wall_times(v) for k, v in value.items() if "wall" not in k and k not in ("made_by", "date")}
    if isinstance(value, list):
        return [without_wall_times(v) for v in value]
    return value


def largest_difference(a, b):
    """The largest |a - b| over two records' numbers, 0.0 if they are equal; inf if their shapes differ.

    A key that one record has and the other has not (a setting that the newer version added) is left out.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        return max((largest_difference(a[k], b[k]) for k in a.keys() & b.keys()), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return float("inf")
        return max((largest_difference(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b)
    return 0.0 if a == b else float("inf")


def run_command(command, arguments, source, folder):
    """``(wall seconds, figures)`` of ``sgrad <command> <arguments> --out out --checkpoint-every 0``."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "sgrad", command, *arguments.split(), "--out", "out",
                             "--checkpoint-every", "0", "--quiet"], cwd=folder, env=environment(source),
                            capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"sgrad {command} {arguments} with PYTHONPATH={source} failed:\n{result.stderr}")
    return seconds, without_wall_times(json.loads((folder / "out" / "histories.json").read_text()))


def run_blog(iterations, source, folder):
    result = subprocess.run([sys.executable, "-c", BLOG, str(iterations)], cwd=folder, env=environment(source),
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"the blog's net with PYTHONPATH={source} failed:\n{result.stderr}")
    record = json.loads(result.stdout)
    return record["seconds"] / iterations, record["figures"]


def run_steps(cases, source, folder):
    """Each case's step over its matrix-product limit, by the version's own benchmark, and the cases' names."""
    script = pathlib.Path(source).resolve() / "benchmarks" / "performance.py"
    result = subprocess.run([sys.executable, str(script), "--cases", cases, "--memory-iterations", "0", "--out", "out"],
                            cwd=folder, env=environment(source), capture_output=True, text=True)
    if result.returncode not in (0, 1):  # 1: a target of its own missed, which is not this benchmark's question
        sys.exit(f"{script} failed:\n{result.stderr}")
    steps = json.loads((folder / "out" / "results.json").read_text())["steps"]
    return {name: step["sgrad"] / step["limit"] for name, step in steps.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="folder holding the older sgrad (and data_gen)")
    parser.add_argument("--after", required=True, help="folder holding the newer sgrad (and data_gen)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"a subset of {','.join(WORKLOADS)}")
    parser.add_argument("--paper-args", default=PAPER_ARGS, help=f"(default: {PAPER_ARGS})")
    parser.add_argument("--rnn-args", default=RNN_ARGS, help=f"(default: {RNN_ARGS})")
    parser.add_argument("--blog-iterations", type=int, default=30)
    parser.add_argument("--cases", default="0,1,4", help="performance.py's step cases (default 0,1,4)")
    parser.add_argument("--out", default=None, help="a JSON record of every figure")
    args = parser.parse_args(argv)
    workloads = args.workloads.split(",")
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"--workloads takes names from {','.join(WORKLOADS)}; got {','.join(unknown)}")
    load_before = os.getloadavg()[0]
    print(describe(), f"load before {load_before:.2f}", flush=True)
    sides = ("before", "after")
    times = {}      # (row, side) -> a figure per round
    figures = {}    # (workload, side) -> the last round's figures
    differ = {}     # workload -> the largest difference between the versions' figures, over the rounds
    for round_ in range(1, args.rounds + 1):
        for workload in workloads:
            for side in (sides if round_ % 2 else sides[::-1]):
                source = getattr(args, side)
                with tempfile.TemporaryDirectory() as name:
                    folder = pathlib.Path(name)
                    if workload == "compare":
                        seconds, _, found = run_compare("documented", source, folder)
                    elif workload in ("paper", "rnn"):
                        seconds, found = run_command(workload, getattr(args, f"{workload}_args"), source, folder)
                    elif workload == "blog":
                        seconds, found = run_blog(args.blog_iterations, source, folder)
                    else:
                        found = run_steps(args.cases, source, folder)
                if workload == "steps":
                    for case, ratio in found.items():
                        times.setdefault((f"step {case} / limit", side), []).append(ratio)
                    print(f"round {round_}  steps  {side:6s}  " + ", ".join(f"{r:.2f}" for r in found.values()),
                          flush=True)
                else:
                    times.setdefault((workload, side), []).append(seconds)
                    figures[workload, side] = found
                    print(f"round {round_}  {workload:8s}  {side:6s}  {seconds:8.3f} s", flush=True)
            if workload != "steps":
                differ[workload] = max(differ.get(workload, 0.0),
                                       largest_difference(figures[workload, "before"], figures[workload, "after"]))
    load_after = os.getloadavg()[0]
    print(f"load after {load_after:.2f}")
    rows = []
    print("\n| workload | before | after | after / before, per round | figures: largest difference |")
    print("|---|---:|---:|---|---|")
    for row in dict.fromkeys(key for key, _ in times):
        before, after = times[row, "before"], times[row, "after"]
        workload = row.split()[0] if row.startswith("step") else row
        difference = differ.get(workload)
        rows.append({"workload": row, "before": before, "after": after, "largest_difference": difference})
        unit = "" if row.startswith("step") else " s"
        print(f"| {row} | {statistics.median(before):.3f}{unit} | {statistics.median(after):.3f}{unit} | "
              + ", ".join(f"{a / b:.3f}" for a, b in zip(after, before))
              + f" | {'—' if difference is None else f'{difference:.3g}'} |")
    if args.out:
        write_record(args.out, load_before, rows=rows)


if __name__ == "__main__":
    main()
