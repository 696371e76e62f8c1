"""A class at once: ``sgrad grade`` on many notebooks, or a folder of them, into one gradebook.

    sgrad grade submissions/ --jobs 2 --gradebook grades.csv

Each notebook is graded by a grader process of its own (``sgrad grade NOTEBOOK``, with its own
sandboxes, limits and clean-up), ``--jobs`` of them at a time, so that a broken or hanging notebook,
or a grader that fails on it, costs only its own row.  A grader hands its verdicts back in a file of
the gradebook's private folder, which no sandbox can see; a grader that fails for any reason, or whose
file is not a complete record, gives "not graded" with the reason, never a verdict.  The reports go
to stdout, one after the other in the order the notebooks were given; a progress bar goes to stderr
(a line per notebook when stderr is not a terminal).  The gradebook is a CSV file that a
learning-management system imports: a row per notebook with its score, each exercise's verdict, the
seed of its inputs, whether it was sandboxed, and a one-line message.  It is written whole at the end,
or not at all if grading is interrupted.
"""

import csv
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from . import processes
from .grader import EXERCISES


@dataclass
class Row:
    """One notebook's line of the gradebook, and its report."""

    notebook: pathlib.Path
    status: "int | None" = None           # the grader's exit status: 0, 1, 2, or another if it broke
    report: str = ""
    error: str = ""                       # why it could not be graded
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # {"title", "passed", "message"}
    seed: "int | None" = None             # the seed of the inputs its exercises were driven on
    sandboxed: bool = True

    @property
    def graded(self) -> bool:
        return self.status in (0, 1) and len(self.verdicts) == len(EXERCISES) and self.seed is not None

    def cells(self, name: str) -> list[str]:
        sandbox = "yes" if self.sandboxed else "no (--no-sandbox)"
        if not self.graded:
            return [name, "not graded", "", str(len(EXERCISES))] + [""] * len(EXERCISES) + ["", sandbox, self.error]
        passed = [verdict["passed"] for verdict in self.verdicts]
        failing = [f"Exercise {number}: {verdict['message'].splitlines()[0]}"
                   for number, verdict in enumerate(self.verdicts, start=1) if not verdict["passed"] and verdict["message"]]
        return ([name, "graded", str(sum(passed)), str(len(EXERCISES))] + ["pass" if ok else "fail" for ok in passed]
                + [str(self.seed), sandbox, " | ".join(failing)])


HEADER = (["notebook", "status", "score", "max_score"] + [f"exercise_{exercise.number}" for exercise in EXERCISES]
          + ["seed", "sandbox", "message"])


def notebooks_in(paths: list[pathlib.Path]) -> list[pathlib.Path]:
    """The notebooks that ``paths`` name: each file as given, and every .ipynb under each folder, sorted."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(path)
    return found


def grade_class(notebooks: list[pathlib.Path], *, jobs: int, timeout: int, memory: int, seed: "int | None" = None,
                sandboxed: bool = True, gradebook: "pathlib.Path | None", out: TextIO = sys.stdout,
                progress: TextIO = sys.stderr) -> int:
    """Grade each notebook in a grader process of its own, ``jobs`` at a time; print the reports in order, write
    the gradebook; returns the exit status: the worst of the notebooks' (0 all passed, 1 some failed, 2 some
    not graded).  Ctrl-C or SIGTERM stops every grader (each ends its sandboxes) and raises KeyboardInterrupt
    (:class:`sgrad.course.grader.Terminated` for SIGTERM), with no gradebook written."""
    from .grader import Terminated

    if sandboxed:
        from .sandbox import prepare_cgroups

        prepare_cgroups()  # under cgroup v2, before the graders start: their sandboxes' cgroups then have room
    rows = [Row(path) for path in notebooks]
    # A grader killed outright (SIGKILL, the kernel's OOM killer) cannot end its sandboxes, and bwrap may not yet
    # have tied one to the grader's life when it dies; this process then adopts them (a child subreaper, for the
    # run) and ends every child of its own that is not a running grader, each time a grader ends.
    was_subreaper = processes.set_subreaper(True)
    bar = _Progress(len(rows), progress)
    lock = threading.Condition()
    running: dict[int, subprocess.Popen[str]] = {}
    stopping: list[int] = []
    with tempfile.TemporaryDirectory(prefix="sgrad-gradebook-") as scratch:
        def grade_one(index: int) -> None:
            record = pathlib.Path(scratch) / f"{index}.json"
            command = [sys.executable, "-m", "sgrad", "grade", str(rows[index].notebook), "--timeout", str(timeout),
                       "--memory", str(memory), "--record", str(record)]
            command += ([] if seed is None else ["--seed", str(seed)]) + ([] if sandboxed else ["--no-sandbox"])
            with lock:
                if stopping:
                    return
                process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                           start_new_session=True)
                running[index] = process
                bar.started()
            report, errors = process.communicate()
            with lock:
                del running[index]
                processes.end_orphans(keep=[grader.pid for grader in running.values()])
                _fill(rows[index], process.returncode, report, errors, record)
                bar.finished(rows[index])
                lock.notify_all()

        def on_signal(signum: int, frame: Any) -> None:
            stopping.append(signum)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            threads: list[threading.Thread] = []
            next_index = 0
            while next_index < len(rows) or any(thread.is_alive() for thread in threads):
                if stopping:
                    break
                if next_index < len(rows) and sum(thread.is_alive() for thread in threads) < jobs:
                    thread = threading.Thread(target=grade_one, args=(next_index,), daemon=True)
                    thread.start()
                    threads.append(thread)
                    next_index += 1
                    continue
                with lock:
                    lock.wait(timeout=0.2)
                bar.draw()
            if stopping:
                with lock:
                    for process in running.values():
                        process.send_signal(signal.SIGTERM)  # each grader kills its sandboxes, then exits
                for thread in threads:
                    thread.join(timeout=GRACE)
                with lock:
                    for process in running.values():  # a grader still there: killed, and what it leaves below
                        process.kill()
                        process.wait()
                    processes.end_orphans()
                bar.close()
                raise Terminated if stopping[0] == signal.SIGTERM else KeyboardInterrupt
            bar.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if was_subreaper is False:
                processes.set_subreaper(False)
    for row in rows:
        out.write(row.report if row.graded else f"Grading {row.notebook}\nNot graded: {row.error}\n")
        out.write("\n")
    if gradebook is not None:
        _write(gradebook, rows, notebooks)
        progress.write(f"wrote {gradebook}\n")
    return max((row.status if row.status in (0, 1) and row.graded else 2) for row in rows) if rows else 2


GRACE = 10  # seconds a grader may take to end after SIGTERM, before it is killed


def _fill(row: Row, status: int, report: str, errors: str, record: pathlib.Path) -> None:
    row.status, row.report = status, report
    try:
        data = json.loads(record.read_text())
        row.verdicts, row.seed, row.sandboxed = data["exercises"], int(data["seed"]), bool(data["sandboxed"])
        if not all(isinstance(verdict["passed"], bool) and isinstance(verdict["message"], str)
                   for verdict in row.verdicts):
            raise ValueError("not a record of verdicts")
    except (OSError, ValueError, KeyError, TypeError):
        row.verdicts, row.seed = [], None
    if not row.graded:
        said = errors.strip().splitlines()
        row.error = (said[-1].removeprefix("sgrad grade: error: ") if said and status == 2
                     else f"the grader stopped with exit status {status}" + (f": {said[-1]}" if said else ""))


def _write(path: pathlib.Path, rows: list[Row], notebooks: list[pathlib.Path]) -> None:
    """The gradebook, written whole: a temporary file beside it, then renamed."""
    base = pathlib.Path(os.path.commonpath([str(p.resolve().parent) for p in notebooks])) if notebooks else None
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(HEADER)
    for row in rows:
        name = str(row.notebook.resolve().relative_to(base)) if base else str(row.notebook)
        writer.writerow([_plain(cell) for cell in row.cells(name)])
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text.getvalue(), encoding="utf-8")
    os.replace(temporary, path)


def _plain(cell: str) -> str:
    """A cell a spreadsheet shows as text: one that starts like a formula gets a leading apostrophe."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@") else cell


class _Progress:
    """A progress bar on a terminal; on anything else, a line per notebook graded."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream, self.done, self.running = total, stream, 0, 0
        self.start = time.monotonic()
        self.tty = stream.isatty()

    def started(self) -> None:
        self.running += 1
        self.draw()

    def finished(self, row: Row) -> None:
        self.running -= 1
        self.done += 1
        if self.tty:
            self.draw()
        else:
            verdict = (f"{sum(v['passed'] for v in row.verdicts)} of {len(EXERCISES)} exercises passed" if row.graded
                       else f"not graded: {row.error}")
            self.stream.write(f"graded {self.done} of {self.total} ({self._elapsed()}): {row.notebook}: {verdict}\n")
            self.stream.flush()

    def draw(self) -> None:
        if not self.tty:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} graded, "
                          f"{self.running} running, {self._elapsed()} ")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.start)
        return f"{seconds // 60}:{seconds % 60:02d}"
