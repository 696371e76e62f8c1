"""Where the time of ``sgrad compare`` goes: each method's step and evaluation, timed, and a step's profile by kind.

``sgrad compare`` trains a 16-128-64-8 net four ways for 300 epochs of 31 steps (batch 32), and
measures the net after every epoch.  Its matrices are tiny, so a step's time is mostly what NumPy
and Python spend per call.  Timed, per method, as ``sgrad.experiments.binary_addition.train``
runs them::

    python benchmarks/compare_step.py

prints the milliseconds of one step (``take_step`` on the command's net and batches) and of one
evaluation (the figures recorded after each epoch), in CPU time (``time.process_time``): on a
machine shared with other work, it moves far less than the wall clock does.  With a sampling profiler (py-spy is not a
dependency of sgrad), where a step's time goes, by kind of work::

    pip install py-spy
    py-spy record -r 1000 -f raw -o dni.raw -- python benchmarks/compare_step.py --methods dni --steps 40000
    python benchmarks/compare_step.py --shares dni.raw

Each sample inside a step goes to the kind of the innermost frame of sgrad that names one (see
``KINDS``): a matrix product is a line of ``kernels.py`` with ``@``; NumPy's own frames count for the
sgrad line that called them.  Threads: ``$OPENBLAS_NUM_THREADS`` (default 1, as the command's workers).
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: OpenBLAS reads it once

import argparse
import collections
import linecache
import pathlib
import re
import statistics
import time

import numpy as np

from data_gen.binary_addition import generate_split
from sgrad.experiments import binary_addition
from sgrad.training.batches import BatchOrder
from sgrad.training.loop import take_step

# A frame as py-spy writes it: "function (path/to/file.py:line)".
FRAME = re.compile(r"^(?P<function>.+) \((?P<path>.+):(?P<line>\d+)\)$")
STEP_FUNCTIONS = ("backprop_step", "dni_step")
# (kind, file, functions): the first frame from the innermost out that matches names the sample's kind.
# An empty tuple of functions matches the whole file.
KINDS = [
    ("input checks", "argument_checks.py", ()),
    ("input checks", "checks.py", ()),
    ("input checks", "optimizers.py", ("_check_gradient",)),
    ("input checks", "module.py", ("Module.check_batch_size",)),
    ("input checks", "decoupled.py", ("_check_step",)),
    ("input checks", "generators.py", ("Generator._check", "Generator._check_h")),
    ("snapshot for a refused step", "module.py", ("restored_on_error", "_each_module", "_buffer_copies",
                                                  "step_in_place")),
    ("update rule (Adam)", "optimizers.py", ()),
    ("elementwise maths", "nonlinearities.py", ()),
    ("elementwise maths", "losses.py", ()),
    ("elementwise maths", "generators.py", ("regression_loss",)),
    ("matrix products", "kernels.py", ("@",)),  # by the line's text: see kind_of
    ("elementwise maths", "kernels.py", ()),
]
OTHER = "the rest: modules' and steps' Python"
OURS = re.compile(r"(^|/)(sgrad|data_gen)/")
SOURCE = pathlib.Path(binary_addition.__file__).parents[2]  # the folder that holds sgrad/


def network_and_batches(method, steps, seed=0):
    """``(layers, x, y, batches)``: the command's network for ``method`` and its first ``steps`` batches, float32."""
    config = binary_addition.TrainConfig(seed=seed)
    data = generate_split(8, 1000, 1000, seed=seed)
    x, y = (np.asarray(array, dtype=config.dtype) for array in data[:2])
    layers = binary_addition.build_network(method, x.shape[1], y.shape[1], config)
    order = BatchOrder(len(x), config.batch_size, np.random.default_rng(seed))
    return layers, data, x, y, [order.next() for _ in range(steps)]


def time_steps(method, steps):
    """CPU seconds per step of ``method``, as ``train`` takes them (errors raised on overflow), after 50 to warm up."""
    layers, _, x, y, batches = network_and_batches(method, steps + 50)
    loss_fn = binary_addition.TASK_LOSSES["bce"][0]
    alpha = binary_addition.TrainConfig().alpha
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        for indices in batches[:50]:
            take_step(method, layers, x[indices], y[indices], loss_fn, alpha)
        start = time.process_time()
        for indices in batches[50:]:
            take_step(method, layers, x[indices], y[indices], loss_fn, alpha)
    return (time.process_time() - start) / steps


def time_evaluation(method, repeats):
    """CPU seconds per evaluation of ``method``'s net (the median): the figures ``train`` records after each epoch."""
    layers, data, _, _, _ = network_and_batches(method, 0)
    loss_fn, _, threshold = binary_addition.TASK_LOSSES["bce"]
    hidden = len(layers) - 1 if method in ("dni", "cdni") else 0
    history = binary_addition._new_history(method, hidden)
    losses = [0.0] * 31
    for k in range(hidden):
        history["generator_loss"][k].extend(losses)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        binary_addition._record_epoch(history, method, layers, data, losses, loss_fn, threshold, 256)
        times.append(time.process_time() - start)
    return statistics.median(times)


def kind_of(function, path, line):
    """The kind of work of a frame of sgrad (None: it names none).

    ``path`` as py-spy gives it, maybe relative (``sgrad/nn/kernels.py``): then to the folder that holds
    the sgrad imported here, so read a profile with the sgrad that was profiled.
    """
    name = pathlib.Path(path).name
    for kind, file, functions in KINDS:
        if name != file:
            continue
        if functions == ("@",):
            if " @ " in linecache.getline(str(SOURCE / path), line):
                return kind
        elif not functions or function in functions or function.split(".<locals>")[0] in functions:
            return kind
    return None


def shares(lines):
    """``(step samples, [(share, kind), ...])`` from py-spy raw lines, largest share first."""
    counts, total = collections.Counter(), 0
    for line in lines:
        stack, _, count = line.strip().rpartition(" ")
        frames = [FRAME.match(frame) for frame in stack.split(";")]
        frames = [f for f in frames if f is not None]
        if not any(f["function"] in STEP_FUNCTIONS for f in frames):
            continue
        ours = [f for f in frames if OURS.search(f["path"])]
        kind = next((k for f in reversed(ours) if (k := kind_of(f["function"], f["path"], int(f["line"])))), OTHER)
        counts[kind] += int(count)
        total += int(count)
    return total, [(count / total, kind) for kind, count in counts.most_common()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(binary_addition.METHODS),
                        choices=binary_addition.METHODS)
    parser.add_argument("--steps", type=int, default=3000, help="steps timed per method (default 3000)")
    parser.add_argument("--evaluations", type=int, default=50, help="evaluations timed per method (default 50)")
    parser.add_argument("--shares", metavar="RAW", help="summarise a py-spy raw file instead of timing")
    args = parser.parse_args(argv)
    if args.shares is not None:
        total, rows = shares(pathlib.Path(args.shares).read_text().splitlines())
        if total == 0:
            parser.exit(1, f"{args.shares}: no samples inside {' or '.join(STEP_FUNCTIONS)}\n")
        print(f"{total} samples inside a step")
        for share, kind in rows:
            print(f"{100 * share:5.1f}%  {kind}")
        return
    print(f"{'method':10s} {'CPU ms per step':>16s} {'CPU ms per evaluation':>22s}")
    for method in args.methods:
        step = time_steps(method, args.steps)
        evaluation = time_evaluation(method, args.evaluations) if args.evaluations else float("nan")
        print(f"{method:10s} {1e3 * step:16.3f} {1e3 * evaluation:22.3f}")


if __name__ == "__main__":
    main()
