"""``sgrad grade``: run a homework notebook in a Jupyter kernel, then grade the classes the student wrote.

    sgrad grade path/to/08_homework.ipynb

The notebook runs top to bottom in a fresh ``python3`` kernel, driven by nbclient (the library that
nbconvert and nbmake use to execute notebooks), with ``SGRAD_SMOKE=1`` so that its training cells stay
short.  A cell that raises does not stop the run, and a cell still running after ``--timeout`` seconds
is interrupted.  Then, one cell per exercise, the grader drives the class the student wrote
(``MyLayer``, ``MyDNI``, ``MyFullDNI``) on inputs it chose (:mod:`sgrad.course.driver`), and the kernel
sends back what came out, as arrays.  Every verdict is decided here, in the grader's process: the
arrays are compared with sgrad's reference code run on the same inputs (:func:`sgrad.course.checkers.judge`),
and the notebook's source is read for whether each method is the student's own (:mod:`sgrad.course.ownwork`).
Nothing the notebook does in its kernel can print a verdict: the report quotes what the notebook raised,
indented and marked, and its verdict lines are the grader's own, last.

The exit status is 0 if every exercise passed, 1 if any failed, and 2 if the notebook could not be graded
(no such file, not a notebook, no kernel).
"""

import asyncio
import atexit
import contextlib
import copy
import json
import os
import pathlib
import secrets
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from . import checkers, driver, ownwork, processes
from .checkers import CheckResult


@dataclass(frozen=True)
class Exercise:
    """One exercise of notebook 08: its checker's name, the method the student writes, the class holding it."""

    number: int
    key: str         # the checker's name for it (sgrad.course.checkers.judge)
    method: str      # "Layer.backward"
    class_name: str  # "MyLayer"

    @property
    def title(self) -> str:
        return f"Exercise {self.number}, {self.method} ({self.class_name})"

    @property
    def method_name(self) -> str:
        return self.method.split(".")[-1]


EXERCISES = (
    Exercise(1, "backward", "Layer.backward", "MyLayer"),
    Exercise(2, "dni_update", "DNI.forward_and_synthetic_update", "MyDNI"),
    Exercise(3, "generator_update", "DNI.update_synthetic_weights", "MyFullDNI"),
)
TIMEOUT = 300  # seconds a cell may run, the notebook's own and the grader's alike
SEED = 0       # the grader's inputs: those of the checkers in the notebook
KERNEL_STARTS = 3  # kernels to start before giving up on one that never answers
MAX_KILLS = 3      # the notebook's cells killed before the grader gives up on it
GRACE = 5          # seconds a cell may go on after the interrupt, before its kernel is killed
MEMORY = 4096      # MiB of address space a kernel may take, by default
# One BLAS thread per kernel, unless the grader's environment says otherwise: the homework's arrays are small,
# kernels graded side by side share the cores, and a BLAS library's buffers for many threads would count
# against the memory limit.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
DRIVER_CELL = """\
exec(compile({source!r}, "<sgrad grader>", "exec"), _sgrad_grader := {{"__name__": "_sgrad_grader"}})
_sgrad_grader["send"]({key!r}, {class_name!r}, {inputs!r}, {nonce!r}, globals())
"""
QUOTE = "    │ "  # the margin of every line the report quotes from the notebook


@dataclass
class Grades:
    """What grading found: a CheckResult per exercise, the notebook's cells that raised, and the seconds taken."""

    results: list[CheckResult]
    cell_errors: list[str]
    seconds: float
    refused: list[str]  # what the notebook's source does that the grader refuses

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    def __str__(self) -> str:
        lines = [f"The notebook ran in {self.seconds:.1f} s (with SGRAD_SMOKE=1, in a scratch copy of its folder), "
                 f"then the grader drove its {len(self.results)} exercises on inputs of its own."]
        if self.cell_errors:
            lines += ["Cells that raised an error:"] + [QUOTE + error for error in self.cell_errors]
        if self.refused:
            lines += ["What the notebook does that the grader refuses (quoted from its source):"]
            lines += [QUOTE + refusal for refusal in self.refused]
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


def grade(path: pathlib.Path, *, timeout: int = TIMEOUT, memory: int = MEMORY) -> Grades:
    """Run the notebook at ``path`` in a fresh kernel, drive each exercise's class there, and judge it here.

    ``memory``: the kernel's address-space limit, in MiB (0: none).  A cell that runs past ``timeout``
    and ignores the interrupt for :data:`GRACE` seconds is killed with its kernel and every process below
    it; the notebook then runs again in a fresh kernel without that cell, for the checks still to do.
    """
    notebook = read_notebook(path)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    found = ownwork.inspect_notebook(code, [(exercise.class_name, exercise.method_name) for exercise in EXERCISES])
    inputs = {exercise.key: checkers.exercise_inputs(exercise.key, SEED) for exercise in EXERCISES}
    nonces = {exercise.key: secrets.token_hex(16) for exercise in EXERCISES}
    start = time.perf_counter()
    results: dict[str, CheckResult] = {}
    killed: set[int] = set()  # the notebook's cells killed in an earlier run
    while True:
        pending = [exercise for exercise in EXERCISES if exercise.key not in results]
        run = _run_started(notebook, path, timeout, memory, inputs, nonces, pending, killed)
        student_cells = run.notebook.cells[:len(notebook.cells)]
        for exercise, cell in zip(pending, run.notebook.cells[len(notebook.cells):]):
            if run.killed == len(student_cells) + pending.index(exercise):
                results[exercise.key] = CheckResult(exercise.title, False, (
                    f"the check did not finish within {timeout} s, and ignored the interrupt for {GRACE} s more: it was "
                    f"killed. Does {exercise.method} loop forever?"))
            elif run.killed is None or run.killed > len(student_cells) + pending.index(exercise):
                results[exercise.key] = _verdict(exercise, cell, student_cells, run.died and run.killed is None,
                                                 timeout, inputs[exercise.key], nonces[exercise.key], found)
        if run.killed is not None and run.killed < len(notebook.cells):
            killed.add(run.killed)
        if run.killed is None or len(killed) > MAX_KILLS:
            break
    for exercise in EXERCISES:  # a notebook whose cells were killed more than MAX_KILLS times
        results.setdefault(exercise.key, CheckResult(exercise.title, False, (
            f"not checked: the notebook's cells were killed {len(killed)} times for running past --timeout")))
    seconds = time.perf_counter() - start
    errors = [f"{place}: {error}" for place, _, error in _cell_errors(notebook.cells, killed, timeout)]
    errors += [f"{place}: {error}" for place, _, error in _cell_errors(student_cells) if place not in
               {place for place, _, _ in _cell_errors(notebook.cells, killed, timeout)}]
    refused = [checkers._one_line(str(finding)) for finding in found.notebook]
    return Grades([results[exercise.key] for exercise in EXERCISES], errors, seconds, refused)




def _run_started(notebook, path, timeout, memory, inputs, nonces, pending, killed):
    """A run of the notebook (its ``killed`` cells left out) and the ``pending`` checks, in a kernel that answered."""
    for attempt in range(1, KERNEL_STARTS + 1):
        run = _run_once(notebook, path, timeout, memory, inputs, nonces, pending, killed)
        if run.interrupted:
            raise run.interrupted
        if run.started:
            return run
        # The kernel never answered: not the notebook's fault.  Kernels started side by side can race for
        # their ports, so a fresh kernel is worth another try.
        if attempt == KERNEL_STARTS:
            said = f"; its last words: {run.kernel_said!r}" if run.kernel_said else ""
            raise GradingError(f"could not run a python3 Jupyter kernel ({run.error}; {KERNEL_STARTS} tries{said}); "
                               "install one with: pip install -e '.[notebooks]'")
    raise AssertionError("unreachable")


@dataclass
class _Run:
    """One run of the notebook and the grader's cells in one kernel."""

    notebook: Any            # the executed copy, outputs included
    started: bool = False    # the kernel answered, and the cells began to run
    died: bool = False       # the kernel went away before the last of the grader's cells finished
    killed: "int | None" = None  # the index of the cell the grader killed the kernel in, if it did
    interrupted: "BaseException | None" = None  # Ctrl-C or SIGTERM, to raise once the kernel is gone
    error: str = ""          # why nbclient stopped early, if it did
    kernel_said: str = ""    # the last line the kernel process wrote to its own stdout or stderr


def _run_once(notebook, path, timeout, memory, inputs, nonces, pending, killed):
    """Run a copy of ``notebook`` (its ``killed`` cells emptied), then the grader's cell of each ``pending``
    exercise, in a fresh python3 kernel."""
    import nbformat

    source = pathlib.Path(driver.__file__).read_text()
    run = _Run(copy.deepcopy(notebook))
    for index in killed:
        run.notebook.cells[index].source = "# sgrad grade left this cell out: it was killed for running past --timeout"
    run.notebook.cells += [nbformat.v4.new_code_cell(DRIVER_CELL.format(
        source=source, key=exercise.key, class_name=exercise.class_name,
        inputs=json.dumps(driver.encode(inputs[exercise.key])), nonce=nonces[exercise.key]))
        for exercise in pending]
    token = secrets.token_hex(8)
    scratch = tempfile.TemporaryDirectory(prefix="sgrad-grade-")
    folder = _scratch_copy(path, pathlib.Path(scratch.name))
    # The kernel's log level keeps its own warnings (one about TCP on every start) out of the report.
    client = _client(run.notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
                     interrupt_on_timeout=True, extra_arguments=["--log-level=ERROR"],
                     resources={"metadata": {"path": str(folder)}},
                     km=_kernel_manager(kernel_name="python3", memory_bytes=memory * 2**20))
    client.run, client.token = run, token
    interrupted = _interruptible(client, run)
    # What the student's code prints reaches the notebook through the kernel's messages.  The kernel
    # process's own stdout and stderr carry only its log (at shutdown, ipykernel can log a traceback
    # from a socket it has already closed), so they go to a file, not into the report.
    with tempfile.TemporaryFile() as kernel_output:
        try:
            client.execute(env={**ONE_THREAD, **os.environ, "SGRAD_SMOKE": "1", processes.MARKER: token},
                           stdout=kernel_output, stderr=kernel_output)
        except Exception as error:
            # Once the cells run, nbclient stops early only when the kernel goes away: DeadKernelError when
            # it notices the death, other errors when the death races its clean-up.
            run.died = run.started
            run.error = f"{type(error).__name__}: {error}".rstrip(": ")
        finally:
            processes.end(token, client.kernel_pid)
            scratch.cleanup()
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # nbclient's clean-up left the default
                signal.signal(signal.SIGTERM, _on_sigterm)
        kernel_output.seek(0)
        lines = kernel_output.read().decode(errors="replace").strip().splitlines()
        run.kernel_said = lines[-1].strip() if lines else ""
    # nbclient has cleaned up by now, and its exit hook would fail on a kernel already given up.  (On Ctrl-C
    # before the kernel answered, the hook stays: it is what ends that kernel.)
    atexit.unregister(client._cleanup_kernel)
    if interrupted:
        run.interrupted = Terminated() if signal.SIGTERM in interrupted else KeyboardInterrupt()
    return run


SCRATCH_LIMIT = 100 * 2**20  # bytes of the notebook's folder copied for its kernel; a larger folder is not copied


def _scratch_copy(path: pathlib.Path, scratch: pathlib.Path) -> pathlib.Path:
    """A copy of the notebook's folder in ``scratch`` (of the notebook alone, if the folder holds more than
    SCRATCH_LIMIT bytes or is not readable); returns the copy, where the kernel runs."""
    import shutil

    folder = scratch / path.parent.name
    try:
        size = sum(entry.stat().st_size for entry in path.parent.rglob("*") if entry.is_file())
        if size > SCRATCH_LIMIT:
            raise OSError("too large")
        shutil.copytree(path.parent, folder, symlinks=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        shutil.copy2(path, folder / path.name)
    return folder


class Terminated(KeyboardInterrupt):
    """SIGTERM while grading: handled as Ctrl-C is (one line, no verdicts), with exit status 143."""


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM outside a kernel's run (the loop of a run has a handler of its own, which ends its kernel)."""
    raise Terminated


def _kernel_manager_class() -> Any:
    from jupyter_client.manager import AsyncKernelManager

    class KernelManager_(AsyncKernelManager):
        """A KernelManager whose kernel starts under the grader's memory limit."""

        def __init__(self, *args: Any, memory_bytes: int = 0, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.memory_bytes = memory_bytes

        def format_kernel_cmd(self, extra_arguments: Any = None) -> list[str]:
            return processes.launcher_command(super().format_kernel_cmd(extra_arguments), self.memory_bytes)

    return KernelManager_


def _kernel_manager(**kwargs: Any) -> Any:
    """A KernelManager_ (its class built on first use: jupyter_client loads late)."""
    return _kernel_manager_class()(**kwargs)


def _client_class() -> Any:
    from nbclient import NotebookClient

    class Client(NotebookClient):
        """nbclient's client, whose timeout holds against a cell that ignores the interrupt: after GRACE seconds
        more, the kernel and every process below it are killed."""

        run: _Run
        token: str
        interrupted: list[int]
        _interrupted_at: "float | None" = None

        @property
        def kernel_pid(self) -> "int | None":
            return getattr(getattr(self.km, "provisioner", None), "pid", None)

        async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
            self._interrupted_at, self._cell_index = None, cell_index
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            if self._interrupted_at is None:
                self._interrupted_at = time.monotonic()
                await super()._async_handle_timeout(timeout, cell)
            elif time.monotonic() - self._interrupted_at > GRACE and self.run.killed is None:
                self.run.killed = self._cell_index
                processes.end(self.token, self.kernel_pid)
            await asyncio.sleep(0.2)
            return None

    return Client


def _client(*args: Any, **kwargs: Any) -> Any:
    """A Client (its class built on first use: nbclient loads late)."""
    return _client_class()(*args, **kwargs)


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
    client.interrupted = interrupted

    def on_interrupt() -> None:
        interrupted.append(signal.SIGINT)
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT if len(interrupted) == 1 else signal.SIGKILL)

    def on_terminate() -> None:
        interrupted.append(signal.SIGTERM)
        processes.end(client.token, client.kernel_pid)

    def listen(**_: Any) -> None:
        run.started = True
        # nbclient removes the loop's SIGINT and SIGTERM handlers when the run ends, whoever installed them.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals here: not the main thread
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_interrupt)
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_terminate)

    def refuse_when_interrupted(**_: Any) -> None:
        if interrupted:
            raise _Interrupted

    client.on_notebook_start = listen
    client.on_cell_start = refuse_when_interrupted
    return interrupted


# --- the verdicts -------------------------------------------------------------------------------------


def _verdict(exercise, cell, student_cells, died, timeout, inputs, nonce, found):
    """The CheckResult of ``exercise``: the judge's on the record its grader's cell sent back (or why there is
    none), and what the notebook's source shows."""
    record, reason = _record(cell, nonce)
    if record is not None and record.get("missing"):
        reason = (f"{exercise.class_name} is not defined: keep the name of the stub's class, "
                  "and make sure the notebook runs from the top.")
        reason += "".join(f"\nThe cell that defines it, {place}, raised {error}"
                          for place, source, error in _cell_errors(student_cells)
                          if f"class {exercise.class_name}" in source)
    elif record is None and not reason:
        errors = [output for output in cell.get("outputs", []) if output["output_type"] == "error"]
        if died:
            reason = "the kernel died before this check finished: does the notebook call exit(), or run out of memory?"
        elif errors and errors[0]["ename"] == "KeyboardInterrupt":  # nbclient interrupts a cell that times out
            reason = f"the check did not finish within {timeout} s: does {exercise.method} loop forever?"
        elif errors:
            reason = (f"the check could not run: {checkers._one_line(errors[0]['ename'])}: "
                      f"{checkers._one_line(errors[0]['evalue'])}")
        else:
            reason = "the check ran, but its answer never reached the grader: something in the notebook stopped it"
    if reason:
        answers = CheckResult(exercise.title, False, reason)
    else:
        answers = checkers.judge(exercise.key, inputs, record)
        answers.name = exercise.title
    own = [message for message in found.exercises[exercise.class_name]
           if not (reason and "has no class statement" in message)]
    lines = [] if answers.passed else [answers.message]
    lines += own
    if found.notebook:
        lines += ["The notebook changes what the grader relies on (listed above), so no verdict can be a pass."]
    if answers.passed and lines:
        lines.append("Its answers on the grader's inputs match sgrad's, but the verdict cannot be a pass.")
    if not lines:
        return answers
    return CheckResult(exercise.title, False, "\n".join(lines))


RECORD_LIMIT = driver.RECORD_LIMIT


def _record(cell, nonce):
    """``(record, "")`` from the one display of the grader's type and ``nonce`` in ``cell``'s outputs;
    ``(None, why)`` if that display is not what the grader sent, ``(None, "")`` if there is none."""
    sent = [output["data"][driver.RESULT_TYPE] for output in cell.get("outputs", [])
            if driver.RESULT_TYPE in output.get("data", {})]
    mine = [payload for payload in sent if isinstance(payload, dict) and payload.get("nonce") == nonce]
    if not mine:
        return None, ("the kernel answered in a form the grader did not send: something in the notebook "
                      "imitates the grader" if sent else "")
    if len(mine) > 1:
        return None, "the kernel answered this check more than once: something in the notebook imitates the grader"
    if len(json.dumps(mine[0])) > RECORD_LIMIT:
        return None, f"the kernel's answer is larger than {RECORD_LIMIT // 1_000_000} MB: far more than was asked"
    try:
        record = driver.decode(mine[0].get("record"))
        _check_shape(record)
    except (ValueError, TypeError, KeyError) as error:
        return None, f"the kernel's answer could not be read ({checkers._one_line(error)})"
    return record, ""


def _check_shape(record):
    """Raise ValueError unless ``record`` has the shape of a driver's record."""
    if not isinstance(record, dict):
        raise ValueError("not a record")
    if record.get("missing"):
        return
    if not isinstance(record.get("cases"), list) or not all(isinstance(case, dict) for case in record["cases"]):
        raise ValueError("no cases")


def _cell_errors(cells, killed=(), timeout=None):
    """``(place, source, error)`` for each code cell that raised: "code cell 3 (`class MyLayer(Layer):`)",
    its source, and "NameError: ...", each on one line with the notebook's own text escaped; or, given the
    indices of the ``killed`` cells, for each of those."""
    code_cells = [(index, cell) for index, cell in enumerate(cells) if cell.cell_type == "code"]
    for number, (index, cell) in enumerate(code_cells, start=1):
        first_line = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
        if index in killed:
            yield (f"code cell {number} (`{checkers._one_line(first_line, 60)}`)", cell.source,
                   f"killed: it ran past --timeout {timeout} s and went on {GRACE} s after the interrupt; "
                   "the grader ran the notebook again without it")
            continue
        for output in cell.get("outputs", []) if not killed else []:
            if output["output_type"] == "error":
                yield (f"code cell {number} (`{checkers._one_line(first_line, 60)}`)", cell.source,
                       f"{checkers._one_line(output['ename'], 60)}: {checkers._one_line(output['evalue'])}")


# --- one notebook, from the command line -------------------------------------------------------------


def run_one(notebook: pathlib.Path, *, timeout: int, memory: int, record: "pathlib.Path | None" = None) -> int:
    """``sgrad grade NOTEBOOK``: grade it, print the report, return the exit status (0, 1 or 2); ``record``: a
    file to write the verdicts to, as JSON.  Every process the notebook started has ended on return."""
    processes.become_subreaper()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        grades = grade(notebook, timeout=timeout, memory=memory)
    except GradingError as error:
        print(f"sgrad grade: error: {error}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
        processes.end_orphans()
    print(f"Grading {notebook}")
    print(grades)
    if record is not None:
        record.write_text(json.dumps({"exercises": [
            {"title": result.name, "passed": result.passed, "message": result.message} for result in grades.results]}))
    return 0 if grades.passed else 1
