"""What the grader's tests share: handed-in notebooks, the real ``sgrad grade`` in a subprocess, and a look at
the processes left on the machine.

Every grading here is the real command, in a process of its own, with ``TMPDIR`` set to a folder of the
test's: every sandbox, kernel and driver of that grading then holds that folder in its command line, so
that :func:`left_running` finds whatever of it outlives the command.
"""

import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass

import nbformat
import pytest

from sgrad.course import sandbox
from solutions import MY_DNI, MY_FULL_DNI, MY_LAYER, edited

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "07_homework.ipynb"
COMMAND = [sys.executable, "-m", "sgrad", "grade"]
SETUP = "import numpy as np\nfrom sgrad import DNI, Layer"
CORRECT = (MY_LAYER, MY_DNI, MY_FULL_DNI)
WRONG = (edited(MY_LAYER, ("self.nonlin_deriv(self.output)", "1.0")), edited(MY_DNI, ("-=", "+=")),
         edited(MY_FULL_DNI, ("0.5 * np.sum", "np.sum")))


@dataclass
class Run:
    """One run of ``sgrad grade``: its exit status, its report (stdout), what it said on stderr, its seconds."""

    status: int
    report: str
    errors: str
    seconds: float = 0.0

    def exercise(self, number):
        """The lines of the report about exercise ``number``, from its ✓ or ✗ line to the next blank one."""
        lines = self.report.splitlines()
        start = next(i for i, line in enumerate(lines) if line[2:].startswith(f"Exercise {number},"))
        end = next(i for i in range(start + 1, len(lines) + 1) if i == len(lines) or not lines[i].strip()
                   or lines[i][2:].startswith("Exercise "))
        return "\n".join(lines[start:end])

    @property
    def score(self):
        """"3 of 3" from the report's last line."""
        return self.report.rstrip().splitlines()[-1].removesuffix(" exercises passed.")


def notebook_of(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])





def environment(scratch):
    """The grader's environment: this one, with its temporary files in ``scratch``."""
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(scratch)}


def grade(path, *options, scratch, timeout=300):
    """Run ``sgrad grade path *options`` to its end; its Run."""
    start = time.monotonic()
    run = subprocess.run(COMMAND + [str(path), *options], capture_output=True, text=True, timeout=timeout,
                         env=environment(scratch))
    return Run(run.returncode, run.stdout, run.stderr, time.monotonic() - start)


def grade_notebook(folder, name, notebook, *options, timeout=300):
    """Write ``notebook`` as ``folder/name.ipynb`` and grade it alone; its Run."""
    path = folder / f"{name}.ipynb"
    nbformat.write(notebook, path)
    return grade(path, *options, scratch=folder / f"{name}-tmp", timeout=timeout)


def start_grading(arguments, *, scratch):
    """``sgrad grade *arguments`` started, not awaited, in a session of its own."""
    return subprocess.Popen(COMMAND + [str(argument) for argument in arguments], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=environment(scratch))


def left_running(*needles):
    """The pids of the processes whose command line holds any of ``needles`` (the test itself excepted)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if any(needle in command for needle in needles):
            found.append(int(entry.name))
    return found


def none_left(*needles, within=10.0):
    """Whether no process holds any of ``needles`` in its command line, waiting up to ``within`` seconds for
    the last ones to be reaped."""
    deadline = time.monotonic() + within
    while left_running(*needles):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def sandbox_missing():
    """Why no sandbox can be made here ("" if one can); CI sets SGRAD_REQUIRE_SANDBOX=1, so that it fails instead."""
    try:
        sandbox.check_available()
    except sandbox.SandboxUnavailable as error:
        return "" if os.environ.get("SGRAD_REQUIRE_SANDBOX") == "1" else str(error)
    return ""


needs_the_sandbox = pytest.mark.skipif(bool(sandbox_missing()), reason=f"no sandbox here: {sandbox_missing()}")
