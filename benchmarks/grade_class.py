"""Benchmark: a class of homework notebooks graded by ``sgrad grade --jobs 2``, with and without the sandbox.

The class is notebook 07 handed in ``--notebooks`` times (default 30): two thirds with the correct
answers, a third with one planted mistake per exercise.  Each round grades the class twice, with the
sandbox and with ``--no-sandbox``, alternating which goes first, and checks every verdict as planted.
The table gives each round's wall time, the median, and the sandbox's cost per notebook: (sandboxed
wall time − unsandboxed wall time) × jobs ÷ notebooks, the time a core spends on it per notebook.

Target (exit status 0 if it holds): the sandboxed class in at most ``--target`` seconds (default 90).
Other processes on the machine disturb the figures: run it on a quiet machine.

Run:  python benchmarks/grade_class.py [--notebooks 30] [--rounds 2] [--jobs 2] [--out docs/grading/class.json]
"""

import argparse
import csv
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import nbformat

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "instructor"))
from solutions import MY_DNI, MY_FULL_DNI, MY_LAYER, edited, handed_in  # the instructor's answers, in the clone

from machine import describe

CORRECT = {"MyLayer": MY_LAYER, "MyDNI": MY_DNI, "MyFullDNI": MY_FULL_DNI}
MISTAKES = {"MyLayer": edited(MY_LAYER, ("self.nonlin_deriv(self.output)", "1.0")),
            "MyDNI": edited(MY_DNI, ("-=", "+=")), "MyFullDNI": edited(MY_FULL_DNI, ("0.5 * np.sum", "np.sum"))}


def make_class(folder: pathlib.Path, count: int) -> dict[str, str]:
    """``count`` notebooks in ``folder``; {name: the score each must get}."""
    expected = {}
    for index in range(count):
        wrong = index % 3 == 2
        name = f"student{index:02d}.ipynb"
        nbformat.write(handed_in(MISTAKES if wrong else CORRECT), folder / name)
        expected[name] = "0" if wrong else "3"
    return expected


def grade(folder: pathlib.Path, jobs: int, sandboxed: bool, expected: dict[str, str]) -> float:
    """Seconds to grade ``folder``; SystemExit unless every score is as planted."""
    gradebook = folder.parent / f"grades-{'sandbox' if sandboxed else 'bare'}.csv"
    command = [sys.executable, "-m", "sgrad", "grade", str(folder), "--jobs", str(jobs), "--gradebook", str(gradebook)]
    start = time.monotonic()
    run = subprocess.run(command + ([] if sandboxed else ["--no-sandbox"]), capture_output=True, text=True)
    seconds = time.monotonic() - start
    scores = {row["notebook"]: row["score"] for row in csv.DictReader(gradebook.read_text().splitlines())}
    if scores != expected:
        wrong = {name: (scores.get(name), score) for name, score in expected.items() if scores.get(name) != score}
        raise SystemExit(f"verdicts not as planted (got, expected): {wrong}\n{run.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--target", type=float, default=90.0)
    parser.add_argument("--out", type=pathlib.Path, help="write the run's record here, as JSON")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    print(describe())
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="sgrad-class-") as scratch:
        folder = pathlib.Path(scratch) / "class"
        folder.mkdir()
        expected = make_class(folder, args.notebooks)
        for round_number in range(args.rounds):
            order = (True, False) if round_number % 2 == 0 else (False, True)
            for sandboxed in order:
                times[sandboxed].append(grade(folder, args.jobs, sandboxed, expected))
    print(f"\n{args.notebooks} notebooks, --jobs {args.jobs}, every verdict as planted\n")
    print("| grading | " + " | ".join(f"round {n + 1}" for n in range(args.rounds)) + " | median |")
    print("|---|" + "---:|" * (args.rounds + 1))
    for sandboxed in (True, False):
        label = "sandboxed" if sandboxed else "--no-sandbox"
        print(f"| {label} | " + " | ".join(f"{t:.1f} s" for t in times[sandboxed])
              + f" | {statistics.median(times[sandboxed]):.1f} s |")
    cost = [(s - b) * args.jobs / args.notebooks for s, b in zip(times[True], times[False])]
    print(f"\nthe sandbox's cost per notebook (a core's seconds): {', '.join(f'{c:.2f}' for c in cost)}; "
          f"median {statistics.median(cost):.2f} s")
    held = statistics.median(times[True]) <= args.target
    print(f"target: the sandboxed class in at most {args.target:.0f} s: {'holds' if held else 'MISSED'}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "command": f"python benchmarks/grade_class.py --notebooks {args.notebooks} --rounds {args.rounds} "
                       f"--jobs {args.jobs}",
            "machine": f"{describe()}; {os.cpu_count()} cores", "date": datetime.date.today().isoformat(),
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)], "notebooks": args.notebooks,
            "jobs": args.jobs, "sandboxed_seconds": times[True], "unsandboxed_seconds": times[False],
            "target_seconds": args.target}, indent=1) + "\n")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
