"""Wall time of ``sgrad compare`` for two versions of sgrad, run in alternation: medians and the ratio in each round.

    python benchmarks/compare_wall_time.py --before /path/to/older/checkout --after . --rounds 3

Each version runs from its folder (``PYTHONPATH=<folder>``), each command in a fresh temporary folder:

- ``documented``: ``OPENBLAS_NUM_THREADS=1 python -m sgrad compare --out <folder> --checkpoint-every 0``,
  the command of docs/results/compare.md;
- ``plain``: ``sgrad compare``, as the README runs it: the console script beside this Python, in an
  environment with no BLAS thread count set (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` and
  ``MKL_NUM_THREADS`` removed), writing its default ``results/compare`` with checkpoints.

A round runs each command for the older version, then for the newer one, so a busy stretch of a
shared machine hits both sides of a round's ratio.  The report gives the load (``os.getloadavg``)
before and after, every run's wall time and CPU time (user and system, its worker processes
included), the median of each, each round's ratio newer/older, and whether the two versions wrote
the same histories (every number but the wall times); and whether each version's two commands did.
"""

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
COMMANDS = ("documented", "plain")


def run(command, source, folder):
    """``(wall seconds, CPU seconds, histories)`` of ``command`` for the sgrad in ``source``, run in ``folder``."""
    env = {name: value for name, value in os.environ.items() if name not in BLAS_THREADS}
    env["PYTHONPATH"] = str(pathlib.Path(source).resolve())
    if command == "documented":
        env["OPENBLAS_NUM_THREADS"] = "1"
        arguments = [sys.executable, "-m", "sgrad", "compare", "--out", "out", "--checkpoint-every", "0"]
        record = folder / "out" / "history.json"
    else:
        arguments = [str(pathlib.Path(sys.executable).parent / "sgrad"), "compare"]
        record = folder / "results" / "compare" / "history.json"
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(arguments, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    if result.returncode != 0:
        sys.exit(f"{' '.join(arguments)} with PYTHONPATH={source} failed:\n{result.stderr}")
    histories = json.loads(record.read_text())["histories"]
    return seconds, cpu, {method: {k: v for k, v in h.items() if k != "wall_time"} for method, h in histories.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="folder holding the older sgrad (and data_gen)")
    parser.add_argument("--after", required=True, help="folder holding the newer sgrad (and data_gen)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    args = parser.parse_args(argv)
    print("load before: " + " ".join(f"{load:.2f}" for load in os.getloadavg()), flush=True)
    sides = ("before", "after")
    wall = {(command, side): [] for command in args.commands for side in sides}
    cpu = {(command, side): [] for command in args.commands for side in sides}
    histories = {}
    same = {command: [] for command in args.commands}
    for round_ in range(1, args.rounds + 1):
        for command in args.commands:
            for side in sides:
                with tempfile.TemporaryDirectory() as folder:
                    took, worked, histories[command, side] = run(command, getattr(args, side), pathlib.Path(folder))
                wall[command, side].append(took)
                cpu[command, side].append(worked)
                print(f"round {round_}  {command:10s}  {side:6s}  {took:6.1f} s wall  {worked:6.1f} s CPU", flush=True)
            same[command].append(histories[command, "before"] == histories[command, "after"])
    print("load after: " + " ".join(f"{load:.2f}" for load in os.getloadavg()))
    print("\n| command | wall, before | wall, after | after / before, per round | CPU, before | CPU, after "
          "| same histories before and after |")
    print("|---|---:|---:|---|---:|---:|---|")
    for command in args.commands:
        before, after = wall[command, "before"], wall[command, "after"]
        ratios = ", ".join(f"{a / b:.2f}×" for a, b in zip(after, before))
        print(f"| {command} | {statistics.median(before):.1f} s | {statistics.median(after):.1f} s | {ratios} "
              f"| {statistics.median(cpu[command, 'before']):.1f} s | {statistics.median(cpu[command, 'after']):.1f} s "
              f"| {'yes' if all(same[command]) else 'no'} |")
    if len(args.commands) == 2:
        for side in sides:
            alike = histories["documented", side] == histories["plain", side]
            print(f"{side}: the two commands wrote {'the same' if alike else 'different'} histories (last round)")


if __name__ == "__main__":
    main()
