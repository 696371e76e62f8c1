"""Profile a training step: run one row of the performance benchmark in a loop, for a sampling profiler.

Where a step's time goes, line by line::

    pip install py-spy
    py-spy record -r 500 -f raw -o step.raw -- python benchmarks/profile_step.py --case 0 --steps 4000
    python benchmarks/profile_step.py --shares step.raw

The first command samples the loop 500 times a second and writes each sample's
stack (py-spy's "raw" format: ``frame;frame;... count`` per line).  The second
prints the share of the step's samples spent in each line of sgrad, the
innermost sgrad frame of each sample: the lines with ``@`` in
``kernels.py`` are the matrix products.  ``--case`` is a row number of
``CASES`` in ``performance.py`` (0: backprop, BatchNorm, float32; 5: DNI with
linear generators).

Threads: ``$OPENBLAS_NUM_THREADS`` (default 1), as in ``performance.py``.
"""

import argparse
import collections
import os
import pathlib
import re
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as performance.py does

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import performance

# A frame as py-spy writes it: "function (path/to/file.py:line)".
FRAME = re.compile(r"^(?P<function>.+) \((?P<path>.+):(?P<line>\d+)\)$")
STEP_FUNCTIONS = ("backprop_step", "dni_step")


def run(case_index, steps):
    """Time ``steps`` training steps of ``CASES[case_index]`` after a short warm-up; returns ms per step."""
    step, _ = performance.sgrad_step(performance.CASES[case_index])
    for _ in range(20):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return 1e3 * (time.perf_counter() - start) / steps


def shares(lines):
    """``(step samples, [(share, frame), ...])`` from py-spy raw lines, largest share first.

    Only samples inside a training step count; each goes to its innermost
    frame in sgrad (or to the innermost frame, if sgrad is not on the stack).
    """
    counts, total = collections.Counter(), 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        frames = [FRAME.match(frame) for frame in stack.split(";")]
        if not any(f is not None and f["function"] in STEP_FUNCTIONS for f in frames):
            continue
        inside = [f for f in frames if f is not None and "sgrad/" in f["path"]]
        frame = (inside or [f for f in frames if f is not None])[-1]
        counts[f"{frame['function']} ({pathlib.Path(frame['path']).name}:{frame['line']})"] += int(count)
        total += int(count)
    return total, [(count / total, frame) for frame, count in counts.most_common()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", type=int, default=0, choices=range(len(performance.CASES)), metavar="N",
                        help="row number of CASES in performance.py (default 0: " + performance.CASES[0].name + ")")
    parser.add_argument("--steps", type=int, default=4000, help="training steps to run (default 4000)")
    parser.add_argument("--shares", metavar="RAW", help="summarise a py-spy raw file instead of running steps")
    parser.add_argument("--top", type=int, default=20, help="lines to print with --shares (default 20)")
    args = parser.parse_args(argv)
    if args.shares is not None:
        total, rows = shares(pathlib.Path(args.shares).read_text().splitlines())
        if total == 0:
            parser.exit(1, f"{args.shares}: no samples inside {' or '.join(STEP_FUNCTIONS)}\n")
        print(f"{total} samples inside a training step")
        for share, frame in rows[:args.top]:
            print(f"{100 * share:5.1f}%  {frame}")
        return
    print(f"{run(args.case, args.steps):.3f} ms per step")


if __name__ == "__main__":
    main()
