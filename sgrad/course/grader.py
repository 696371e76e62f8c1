"""``sgrad grade``: run a homework notebook in a Jupyter kernel, then check the classes the student wrote.

    sgrad grade path/to/08_homework.ipynb

The notebook runs top to bottom in a fresh ``python3`` kernel, driven by nbclient (the library that
nbconvert and nbmake use to execute notebooks), with ``SGRAD_SMOKE=1`` so that its training cells stay
short.  A cell that raises does not stop the run, and a cell still running after ``--timeout`` seconds
is interrupted.  Then, in the same kernel, each exercise's checker from :mod:`sgrad.course.checkers`
runs on the class the student wrote (``MyLayer``, ``MyDNI``, ``MyFullDNI``), one cell per exercise, so
that a method that never returns costs only its own exercise.

Prints the cells that raised, then a ✓ or ✗ per exercise with the checker's message.  The exit status
is 0 if every exercise passed, 1 if any failed, and 2 if the notebook could not be graded (no such
file, not a notebook, no kernel).  The grader trusts the notebook not to tamper with the checkers.
"""

import argparse
import asyncio
import atexit
import contextlib
import copy
import os
import pathlib
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from .checkers import CheckResult


@dataclass(frozen=True)
class Exercise:
    """One exercise of notebook 08: the method the student writes, the class holding it, its checker."""

    number: int
    method: str
    class_name: str
    checker: str  # a function of sgrad.course.checkers, called with the student's class

    @property
    def title(self) -> str:
        return f"Exercise {self.number}, {self.method} ({self.class_name})"


EXERCISES = (
    Exercise(1, "Layer.backward", "MyLayer", "check_layer_backward"),
    Exercise(2, "DNI.forward_and_synthetic_update", "MyDNI", "check_dni_update"),
    Exercise(3, "DNI.update_synthetic_weights", "MyFullDNI", "check_generator_update"),
)
TIMEOUT = 300  # seconds a cell may run, the notebook's own and the checks alike
# A check's result leaves the kernel as display data of its own type, apart from what the student's code prints.
RESULT_TYPE = "application/vnd.sgrad.check+json"
CHECK_CELL = """\
import sgrad.course.checkers as _sgrad_checks
from IPython.display import display as _sgrad_display
if {class_name!r} in globals():
    _sgrad_result = _sgrad_checks.{checker}({class_name})
    _sgrad_display({{{result_type!r}: {{"passed": _sgrad_result.passed, "message": _sgrad_result.message}}}}, raw=True)
else:
    _sgrad_display({{{result_type!r}: {{"passed": False, "message": None}}}}, raw=True)
"""


@dataclass
class Grades:
    """What grading found: a CheckResult per exercise, the notebook's cells that raised, and the seconds taken."""

    results: list[CheckResult]
    cell_errors: list[str]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    def __str__(self) -> str:
        lines = [f"The notebook ran in {self.seconds:.1f} s (with SGRAD_SMOKE=1), then the checks of its "
                 f"{len(self.results)} exercises."]
        if self.cell_errors:
            lines += ["Cells that raised an error:"] + [f"    {error}" for error in self.cell_errors]
        lines += [""] + [str(result) for result in self.results]
        passed = sum(result.passed for result in self.results)
        lines += ["", f"{passed} of {len(self.results)} exercises passed."]
        return "\n".join(lines)


class GradingError(Exception):
    """The notebook could not be graded; the message says why, for the person who ran the grader."""


def read_notebook(path: pathlib.Path) -> Any:
    """The notebook at ``path``, as nbformat version 4; GradingError if there is none."""
    import nbformat  # here: only grading needs the notebook libraries (the "notebooks" extra)

    if not path.is_file():
        raise GradingError(f"no notebook at {path}")
    try:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # nbformat says "not JSON", "missing a key", ...: any of them means not a notebook
        raise GradingError(f"{path} is not a Jupyter notebook ({type(error).__name__}: {error})") from None
    return notebook


def grade(path: pathlib.Path, *, timeout: int = TIMEOUT) -> Grades:
    """Run the notebook at ``path`` in a fresh kernel, then each exercise's checker on the student's class."""
    notebook = read_notebook(path)
    first_check = len(notebook.cells)
    start = time.perf_counter()
    for attempt in range(1, KERNEL_STARTS + 1):
        run = _run_once(notebook, path, timeout)
        if run.interrupted:
            raise KeyboardInterrupt
        if run.started:
            break
        # The kernel never answered: not the notebook's fault.  Kernels started side by side can race for
        # their ports, so a fresh kernel is worth another try.
        if attempt == KERNEL_STARTS:
            said = f"; its last words: {run.kernel_said!r}" if run.kernel_said else ""
            raise GradingError(f"could not run a python3 Jupyter kernel ({run.error}; {KERNEL_STARTS} tries{said}); "
                               "install one with: pip install -e '.[notebooks]'")
    seconds = time.perf_counter() - start
    student_cells = run.notebook.cells[:first_check]
    results = [_result(exercise, cell, student_cells, run.died, timeout)
               for exercise, cell in zip(EXERCISES, run.notebook.cells[first_check:])]
    return Grades(results, [f"{place}: {error}" for place, _, error in _cell_errors(student_cells)], seconds)


KERNEL_STARTS = 3  # kernels to start before giving up on one that never answers


@dataclass
class _Run:
    """One run of the notebook and its checks in one kernel."""

    notebook: Any            # the executed copy, outputs included
    started: bool = False    # the kernel answered, and the cells began to run
    died: bool = False       # the kernel went away before the last check finished
    interrupted: bool = False
    error: str = ""          # why nbclient stopped early, if it did
    kernel_said: str = ""    # the last line the kernel process wrote to its own stdout or stderr


def _run_once(notebook: Any, path: pathlib.Path, timeout: int) -> _Run:
    """Run a copy of ``notebook``, then a check cell per exercise, in a fresh python3 kernel."""
    import nbformat
    from nbclient import NotebookClient

    run = _Run(copy.deepcopy(notebook))
    run.notebook.cells += [nbformat.v4.new_code_cell(CHECK_CELL.format(
        class_name=exercise.class_name, checker=exercise.checker, result_type=RESULT_TYPE)) for exercise in EXERCISES]
    # The kernel's log level keeps its own warnings (one about TCP on every start) out of the report.
    client = NotebookClient(run.notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
                            interrupt_on_timeout=True, extra_arguments=["--log-level=ERROR"],
                            resources={"metadata": {"path": str(path.parent)}})
    interrupted = _interruptible(client, run)
    # What the student's code prints reaches the notebook through the kernel's messages.  The kernel
    # process's own stdout and stderr carry only its log (at shutdown, ipykernel can log a traceback
    # from a socket it has already closed), so they go to a file, not into the report.
    with tempfile.TemporaryFile() as kernel_output:
        try:
            client.execute(env={**os.environ, "SGRAD_SMOKE": "1"}, stdout=kernel_output, stderr=kernel_output)
        except Exception as error:
            # Once the cells run, nbclient stops early only when the kernel goes away: DeadKernelError when
            # it notices the death, other errors when the death races its clean-up.
            run.died = run.started
            run.error = f"{type(error).__name__}: {error}".rstrip(": ")
        kernel_output.seek(0)
        lines = kernel_output.read().decode(errors="replace").strip().splitlines()
        run.kernel_said = lines[-1].strip() if lines else ""
    # nbclient has cleaned up by now, and its exit hook would fail on a kernel already given up.  (On Ctrl-C
    # before the kernel answered, the hook stays: it is what ends that kernel.)
    atexit.unregister(client._cleanup_kernel)
    run.interrupted = bool(interrupted)  # nbclient has shut the kernel down by now
    return run


class _Interrupted(Exception):
    """Ctrl-C while grading: ends ``client.execute`` as an ordinary error, so that nbclient shuts its kernel down."""


def _interruptible(client: Any, run: _Run) -> list[int]:
    """Make Ctrl-C stop ``client``'s run cleanly, and mark ``run`` started once its kernel answers; returns the
    list that each Ctrl-C appends its signal to.

    The kernel runs in a session of its own, so the terminal's Ctrl-C reaches the grader alone.  Once
    the kernel is up, the first Ctrl-C is passed on to the kernel (as Jupyter's own interrupt does), so
    that its running cell stops, and the next cell to start raises :class:`_Interrupted`; nbclient then
    shuts the kernel down as after any error.  A second Ctrl-C kills the kernel at once.
    """
    interrupted: list[int] = []

    def on_interrupt() -> None:
        interrupted.append(signal.SIGINT)
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT if len(interrupted) == 1 else signal.SIGKILL)

    def listen(**_: Any) -> None:
        run.started = True
        # nbclient removes the loop's SIGINT handler when the run ends, whoever installed it.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals here: not the main thread
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_interrupt)

    def refuse_when_interrupted(**_: Any) -> None:
        if interrupted:
            raise _Interrupted

    client.on_notebook_start = listen
    client.on_cell_start = refuse_when_interrupted
    return interrupted


def _result(exercise, cell, student_cells, died, timeout):
    """The CheckResult that ``cell`` (one exercise's check, run after the notebook) displayed, or why it has none."""
    outputs = cell.get("outputs", [])
    shown = [output["data"][RESULT_TYPE] for output in outputs if RESULT_TYPE in output.get("data", {})]
    errors = [output for output in outputs if output["output_type"] == "error"]
    if shown and shown[0]["message"] is not None:
        return CheckResult(exercise.title, bool(shown[0]["passed"]), shown[0]["message"])
    if shown:
        message = (f"{exercise.class_name} is not defined: keep the name of the stub's class, "
                   "and make sure the notebook runs from the top.")
        message += "".join(f"\nThe cell that defines it, {place}, raised {error}"
                           for place, source, error in _cell_errors(student_cells)
                           if f"class {exercise.class_name}" in source)
    elif died:
        message = "the kernel died before this check finished: does the notebook call exit(), or run out of memory?"
    elif errors and errors[0]["ename"] != "KeyboardInterrupt":  # a cell that times out is interrupted
        message = f"the check could not run: {errors[0]['ename']}: {errors[0]['evalue']}"
    else:
        message = f"the check did not finish within {timeout} s: does {exercise.method} loop forever?"
    return CheckResult(exercise.title, False, message)


def _cell_errors(cells):
    """``(place, source, error)`` for each code cell that raised: "code cell 3 (`class MyLayer(Layer):`)",
    its source, and "NameError: ..."."""
    code_cells = [cell for cell in cells if cell.cell_type == "code"]
    for number, cell in enumerate(code_cells, start=1):
        first_line = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                yield f"code cell {number} (`{first_line}`)", cell.source, f"{output['ename']}: {output['evalue']}"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` (``sgrad grade``'s) the grader's arguments: the notebook, ``--timeout``."""
    parser.add_argument("notebook", type=pathlib.Path, help="the student's notebook, an .ipynb file")
    parser.add_argument("--timeout", type=_positive_int, default=TIMEOUT, metavar="SECONDS",
                        help=f"interrupt a cell still running after this many seconds (default {TIMEOUT})")
    return parser


DESCRIPTION = ("Run a student's homework notebook (08_homework.ipynb) in a Jupyter kernel and check each exercise "
               "on the classes it defines. Exit status: 0 if every exercise passed, 1 if any failed, 2 if the "
               "notebook could not be graded.")


def run(args: argparse.Namespace) -> int:
    """Grade ``args.notebook``, print the report, and return the exit status (0, 1 or 2)."""
    try:
        grades = grade(args.notebook, timeout=args.timeout)
    except GradingError as error:
        print(f"sgrad grade: error: {error}", file=sys.stderr)
        return 2
    print(f"Grading {args.notebook}")
    print(grades)
    return 0 if grades.passed else 1


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 second; got {value}")
    return value
