"""``sgrad grade``: grade a homework notebook in a sandbox, on inputs drawn afresh for each grading.

    sgrad grade path/to/07_homework.ipynb

Everything of the notebook runs in a sandbox (:mod:`sgrad.course.sandbox`): a read-only system and
Python environment, a private HOME and /tmp, no network, a process namespace of its own, one memory
limit for all its processes.  There ``import sgrad`` finds the homework edition
(:mod:`sgrad.course.edition`), which holds no reference implementation of any exercise: the real
sgrad, its solutions and the other students' notebooks are not there to be read.  Grading takes two
steps, within one wall-clock limit, ``--timeout``:

1. **The verdicts.**  For each exercise, a fresh Python process loads the notebook's definitions (its
   imports, functions, classes and constants, :mod:`sgrad.course.definitions`; none of its other
   statements), drives the class the student wrote (``MyLayer``, ``MyDNI``, ``MyFullDNI``) on inputs
   drawn from a seed chosen afresh for this grading (:mod:`sgrad.course.exercise_runner`), and writes what came
   out, as arrays, to a pipe that the grader reads up to a limit.  Every verdict is decided here, in the
   grader's process: the arrays are compared with sgrad's reference code run on the same inputs
   (:func:`sgrad.course.checkers.judge`), and the notebook's source is read for whether each method is
   the student's own (:mod:`sgrad.course.ownwork`).
2. **The report.**  The notebook runs top to bottom in a fresh python3 Jupyter kernel, with
   ``SGRAD_SMOKE=1`` (short training cells) and ``SGRAD_GRADING=1``, so that the report can list the
   cells that raised.  The grader reads only each cell's reply (whether it raised, and what), never its
   output.  Nothing the notebook does there reaches a verdict.

The exit status is 0 if every exercise passed, 1 if any failed, and 2 if the notebook could not be graded
(no such file, not a notebook, no sandbox, no kernel).
"""

import contextlib
import json
import os
import pathlib
import queue
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import checkers, definitions, exercise_runner, edition, ownwork, processes, sandbox
from .check_reports import CheckResult, one_line


@dataclass(frozen=True)
class Exercise:
    """One exercise of notebook 07: its checker's name, the method the student writes, the class holding it."""

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
TIMEOUT = 300      # seconds for the whole grading of a notebook: its exercises, then its cells
MEMORY = 4096      # MiB that all the processes of a notebook's sandbox may take together, by default
MIN_MEMORY = 256          # MiB below which the homework does not run where one cgroup caps a sandbox's processes
MIN_ADDRESS_SPACE = 1024  # MiB below which a kernel does not start where each process's address space is capped
ANSWER_LIMIT = 4 * exercise_runner.RECORD_LIMIT  # bytes the grader reads of an exercise's answer
MESSAGE_LIMIT = 2**20  # bytes of one message the grader takes from a kernel; a larger one is dropped
KERNEL_START = 60      # seconds a kernel may take to answer, at most (and never past the deadline)
# One BLAS thread per process: the homework's arrays are small, and notebooks graded side by side share the cores.
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
LIBRARY = "/opt/sgrad-grading/lib"                 # where the sandbox holds the homework edition
RUNNER = "/opt/sgrad-grading/exercise_runner.py"   # and the exercise runner
QUOTE = "    │ "  # the margin of every line the report quotes from the notebook


class GradingError(Exception):
    """The notebook could not be graded; the message says why, for the person who ran the grader."""


class Terminated(KeyboardInterrupt):
    """SIGTERM while grading: handled as Ctrl-C is (one line, no verdicts), with exit status 143."""


@dataclass
class Grades:
    """What grading found: a CheckResult per exercise, the seed of the inputs, the cells that raised, the time."""

    results: list[CheckResult]
    seed: int
    sandboxed: bool
    cell_errors: list[str]
    refused: list[str]   # what the notebook's source does that the grader refuses
    notes: list[str]     # what stopped the notebook's run early, and what its definitions left out
    seconds: float

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    def __str__(self) -> str:
        lines = [] if self.sandboxed else [f"WARNING: {NO_SANDBOX}"]
        lines += [f"Graded in {self.seconds:.1f} s, on inputs drawn from seed {self.seed}: the exercises' classes "
                  "first, then the notebook top to bottom (SGRAD_SMOKE=1)."]
        lines += self.notes
        if self.cell_errors:
            lines += ["Cells that raised an error:"] + [QUOTE + error for error in self.cell_errors]
        if self.refused:
            lines += ["What the notebook does that the grader refuses (quoted from its source):"]
            lines += [QUOTE + refusal for refusal in self.refused]
        lines += [""] + [str(result) for result in self.results]
        passed = sum(result.passed for result in self.results)
        lines += ["", f"{passed} of {len(self.results)} exercises passed."]
        return "\n".join(lines)


NO_SANDBOX = ("graded without a sandbox (--no-sandbox): the notebook could read and change anything this user "
              "can, sgrad's reference code included; grade untrusted notebooks only in a sandbox")


def read_notebook(path: pathlib.Path) -> Any:
    """The notebook at ``path``, as nbformat version 4; GradingError if there is none."""
    nbformat = _nbformat()
    if not path.is_file():
        raise GradingError(f"no notebook at {path}")
    try:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # nbformat says "not JSON", "missing a key", ...: any of them means not a notebook
        raise GradingError(f"{path} is not a Jupyter notebook ({type(error).__name__}: {error})") from None
    return notebook


def _nbformat() -> Any:
    """nbformat, imported here: only grading needs the notebook libraries (the "notebooks" extra).

    nbformat imports jsonschema, and jsonschema, when it can, the optional package ``rfc3987_syntax`` for its
    checks of the "iri" formats, which no notebook schema uses.  That import builds a parser's grammar, most of a
    grader's start-up, and a class starts a grader for every notebook.  So it is held back while nbformat loads
    (jsonschema then goes without those two formats) and let through again after.
    """
    held_back = "rfc3987_syntax" not in sys.modules
    if held_back:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # "import rfc3987_syntax" raises ImportError
    try:
        import nbformat
    finally:
        if held_back:
            del sys.modules["rfc3987_syntax"]
    return nbformat


def grade(path: pathlib.Path, *, timeout: int = TIMEOUT, memory: int = MEMORY, seed: "int | None" = None,
          sandboxed: bool = True) -> Grades:
    """Grade the notebook at ``path``: drive each exercise's class, then run the notebook for the report, both in
    sandboxes and within ``timeout`` seconds in all; ``memory``: MiB for all of a sandbox's processes (0: none);
    ``seed``: the inputs' (default: drawn afresh); ``sandboxed=False`` grades without a sandbox (--no-sandbox)."""
    notebook = read_notebook(path)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    found = ownwork.inspect_notebook(code, [(exercise.class_name, exercise.method_name) for exercise in EXERCISES])
    loaded = definitions.definitions(code)
    seed = secrets.randbelow(2**31) if seed is None else seed
    inputs = {exercise.key: checkers.exercise_inputs(exercise.key, seed) for exercise in EXERCISES}
    start = time.monotonic()
    with _workspace() as workspace:
        # The exercises run side by side and take a second or two; a method that loops forever may take half
        # of the time, so that the report can still list the cells that raised.
        answers = _drive(workspace, loaded, inputs, start + timeout / 2, memory, sandboxed)
        run = _run_notebook(workspace, code, start + timeout, memory, sandboxed, timeout)
    results = [_verdict(exercise, answers[exercise.key], inputs[exercise.key], found, timeout)
               for exercise in EXERCISES]
    notes = run.notes + [f"The grader loaded the definitions only; it left out {place}" for place in loaded.left_out]
    refused = [one_line(str(finding)) for finding in found.notebook]
    return Grades(results, seed, sandboxed, run.errors, refused, notes, time.monotonic() - start)


# --- the sandboxes ------------------------------------------------------------------------------------


@dataclass
class _Workspace:
    """The grader's folders for one notebook: the homework edition and the exercise runner (read-only in the
    sandboxes), and the folder of the kernel's sockets (read-write; a socket's path may not pass 107 bytes,
    so it is in /tmp when the temporary folder's path is long)."""

    root: pathlib.Path
    kernel: pathlib.Path

    @property
    def library(self) -> pathlib.Path:
        return self.root / "lib"


@contextlib.contextmanager
def _workspace() -> Iterator[_Workspace]:
    short = len(tempfile.gettempdir()) < 60
    with tempfile.TemporaryDirectory(prefix="sgrad-grade-") as folder, \
            tempfile.TemporaryDirectory(prefix="sgk-", dir=None if short else "/tmp") as kernel:
        workspace = _Workspace(pathlib.Path(folder), pathlib.Path(kernel))
        edition.build(workspace.library)
        shutil.copy2(exercise_runner.__file__, workspace.root / "exercise_runner.py")
        yield workspace


def _environment(library: str) -> dict[str, str]:
    """What a notebook's processes see of the environment: nothing of the grader's but the BLAS threads, and
    ``library`` (the homework edition's folder) first on their path."""
    inherited = {name: os.environ[name] for name in ONE_THREAD if name in os.environ}
    return {**ONE_THREAD, **inherited, "SGRAD_SMOKE": "1", "SGRAD_GRADING": "1", "MPLBACKEND": "Agg",
            "PYTHONPATH": library, "PYTHONDONTWRITEBYTECODE": "1"}


def _box(workspace: _Workspace, memory: int, sandboxed: bool) -> Any:
    """A Sandbox for one step of a notebook's grading (or, with ``sandboxed=False``, the bare hold of
    :class:`sgrad.course.processes.Unsandboxed`)."""
    if not sandboxed:
        return processes.Unsandboxed(memory_mib=memory, env=_environment(str(workspace.library)))
    env = _environment(LIBRARY)
    return sandbox.Sandbox(memory_mib=memory, env=env, hide=sandbox.python_hidden(), ro_binds=sandbox.python_binds() + [
        (str(workspace.library), LIBRARY), (str(workspace.root / "exercise_runner.py"), RUNNER)],
        rw_binds=[(str(workspace.kernel), str(workspace.kernel))])


def _runner_path(workspace: _Workspace, sandboxed: bool) -> str:
    return RUNNER if sandboxed else str(workspace.root / "exercise_runner.py")


_ACTIVE: list[Any] = []  # the sandboxes running now: SIGTERM and Ctrl-C kill them before anything else


@contextlib.contextmanager
def _active(box: Any) -> Iterator[Any]:
    with box:
        _ACTIVE.append(box)
        try:
            yield box
        finally:
            _ACTIVE.remove(box)


# --- step 1: the exercises ------------------------------------------------------------------------------


@dataclass
class _Answer:
    """What came back from driving one exercise: its record, or why there is none."""

    record: "dict[str, Any] | None" = None
    why: str = ""
    unstarted: str = ""  # why the exercise runner never started: the grader's failure, not the notebook's


def _drive(workspace, loaded, inputs, deadline, memory, sandboxed):
    """{exercise key: _Answer}: each exercise driven by a fresh process of its own, all three at once, in one
    sandbox, until ``deadline``."""
    answers = {exercise.key: _Answer() for exercise in EXERCISES}
    with _active(_box(workspace, memory, sandboxed)) as box:
        command = box.command([sys.executable, "-I", _runner_path(workspace, sandboxed)])
        threads = [threading.Thread(target=_drive_one, daemon=True, args=(
            command, box, answers[exercise.key], deadline, {
                "library": LIBRARY if sandboxed else str(workspace.library), "definitions": loaded.cells,
                "exercise": exercise.key, "class_name": exercise.class_name,
                "inputs": exercise_runner.encode(inputs[exercise.key])})) for exercise in EXERCISES]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.1)  # short waits, so that a signal's handler runs at once
        unstarted = [answer.unstarted for answer in answers.values() if answer.unstarted]
        if unstarted:
            raise GradingError(unstarted[0])
        oom = box.out_of_memory()
    for answer in answers.values():
        if answer.record is None and oom:
            answer.why = "its process ran out of memory (--memory): does a method allocate far more than asked?"
    return answers


def _drive_one(command, box, answer, deadline, job):
    """Run ``command`` (the exercise runner), hand it ``job`` on its standard input, and read its answer into ``answer``."""
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=box.env)
    except OSError as error:
        answer.unstarted = f"the sandbox could not start ({error})"
        return
    sent = threading.Thread(target=_send, args=(process, json.dumps(job).encode()), daemon=True)
    sent.start()
    lines, status = _read_lines(process, deadline, ANSWER_LIMIT)
    if process.poll() is None:
        process.kill()
    process.wait()
    errors = process.stderr.read(4096).decode(errors="replace") if process.stderr else ""
    if not lines or lines[0] != exercise_runner.READY:  # nothing of the notebook has run yet
        said = errors.strip().splitlines()
        answer.unstarted = ("the grading sandbox could not start" + (f": {said[-1]}" if said else
                            f" (exit status {process.returncode})") if status != "deadline" else
                            "the grading sandbox did not start before --timeout ran out")
        return
    if len(lines) < 2:
        answer.why = {"deadline": "the check did not finish within half of --timeout: does the method loop forever?",
                      "limit": f"the check's answer is larger than {ANSWER_LIMIT // 1_000_000} MB: far more than asked"
                      }.get(status, "the check's process ended before it answered: does the notebook call exit(), or "
                                    "run out of memory?")
        return
    answer.record, answer.why = _record(lines[-1])


def _send(process, data):
    with contextlib.suppress(OSError):
        assert process.stdin is not None
        process.stdin.write(data)
        process.stdin.close()


def _read_lines(process, deadline, limit):
    """The lines ``process`` writes to its stdout until it closes it (status "end"), ``deadline`` passes
    ("deadline"), or more than ``limit`` bytes came ("limit")."""
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "deadline"
                break
            if not selector.select(timeout=min(remaining, 0.5)):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                status = "end"
                break
            data += chunk
            if len(data) > limit:
                status = "limit"
                break
    lines = data.decode(errors="replace").split("\n")
    complete = lines[:-1] if status != "end" or not lines[-1] else lines
    return [line for line in complete if line], status


def _record(line):
    """``(record, "")`` from a line of the exercise runner's JSON; ``(None, why)`` if it is not what the runner sends."""
    try:
        record = exercise_runner.decode(json.loads(line))
        _check_shape(record)
    except (ValueError, TypeError, KeyError, RecursionError) as error:
        return None, f"the check's answer could not be read ({one_line(error)})"
    return record, ""


def _check_shape(record):
    """Raise ValueError unless ``record`` has the shape of an exercise runner's record."""
    if not isinstance(record, dict):
        raise ValueError("not a record")
    if record.get("missing"):
        return
    if not isinstance(record.get("cases"), list) or not all(isinstance(case, dict) for case in record["cases"]):
        raise ValueError("no cases")


# --- step 2: the notebook, for the report ---------------------------------------------------------------


@dataclass
class _Run:
    """What running the notebook's cells showed: the cells that raised, and notes on how the run ended."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _run_notebook(workspace, code, deadline, memory, sandboxed, timeout):
    """Run the code cells ``code`` in order in a fresh python3 kernel in a sandbox, until ``deadline``; the grader
    reads each cell's reply on the shell channel, never its output."""
    run = _Run()
    import zmq
    from jupyter_client import KernelManager  # here: only grading needs Jupyter's client (the "notebooks" extra)

    context = zmq.Context()
    context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_LIMIT)  # a larger message is dropped, not read into memory
    with _active(_box(workspace, memory, sandboxed)) as box:
        manager = _kernel_manager(KernelManager, box, workspace)
        try:
            # The kernel's own stdout and stderr carry its banner and log, never the notebook's output.
            manager.start_kernel(env=box.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except Exception as error:  # jupyter_client raises what Popen and the provisioner raise
            raise GradingError(f"could not start a python3 Jupyter kernel ({one_line(error)}); "
                               "install one with: pip install -e '.[notebooks]'") from None
        client = manager.client(context=context)
        client.start_channels(iopub=False, stdin=False, hb=False, control=False)
        try:
            if not _ready(client, manager, min(deadline, time.monotonic() + KERNEL_START)):
                if box.out_of_memory():
                    raise GradingError(f"the kernel ran out of memory as it started: give --memory more than {memory}")
                if time.monotonic() < deadline:
                    raise GradingError("the python3 Jupyter kernel did not answer; install one with: "
                                       "pip install -e '.[notebooks]'")
                run.notes.append(f"The notebook was not run: its kernel was not ready within --timeout {timeout} s.")
                return run
            for number, source in enumerate(code, start=1):
                if not source.strip():
                    continue
                reply = _execute(client, manager, source, deadline)
                place = f"code cell {number} (`{one_line(_first_line(source), 60)}`)"
                if reply is None:
                    ended = (f"it ran past --timeout {timeout} s" if time.monotonic() >= deadline else
                             "the kernel ran out of memory (--memory)" if box.out_of_memory() else "the kernel died")
                    run.notes.append(f"The notebook's run stopped in {place}: {ended}; the cells after it did not run.")
                    break
                if reply.get("status") == "error":
                    run.errors.append(f"{place}: {one_line(str(reply.get('ename')), 60)}: "
                                      f"{one_line(str(reply.get('evalue')))}")
        finally:
            client.stop_channels()
            box.kill()
            manager.cleanup_resources()
            context.destroy(linger=0)
    return run


def _kernel_manager(base, box, workspace):
    """A KernelManager whose kernel runs in ``box``, its sockets files in the workspace (no network needed).

    The kernel is this Python's ipykernel, whatever kernel spec named python3 the environment holds: the
    sandbox binds this interpreter's folders alone."""

    class Manager(base):  # type: ignore[misc, valid-type]
        def format_kernel_cmd(self, extra_arguments: Any = None) -> list[str]:
            return box.command([sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file])

    return Manager(kernel_name="python3", transport="ipc", ip=str(workspace.kernel / "s"),
                   connection_file=str(workspace.kernel / "kernel.json"))


def _ready(client, manager, until):
    """Whether the kernel answers a kernel_info request before ``until``."""
    message_id = client.kernel_info()
    return _reply(client, manager, message_id, until) is not None


def _execute(client, manager, source, deadline):
    """The content of the kernel's reply to running ``source``; None if the kernel died or ``deadline`` passed."""
    message_id = client.execute(source, store_history=True, allow_stdin=False, stop_on_error=False)
    return _reply(client, manager, message_id, deadline)


def _reply(client, manager, message_id, until):
    while time.monotonic() < until:
        try:
            message = client.get_shell_msg(timeout=min(0.5, max(until - time.monotonic(), 0.01)))
        except queue.Empty:
            if not manager.is_alive():
                return None
            continue
        if message.get("parent_header", {}).get("msg_id") == message_id:
            content = message.get("content")
            return content if isinstance(content, dict) else {}
    return None


def _first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


# --- the verdicts -------------------------------------------------------------------------------------


def _verdict(exercise, answer, inputs, found, timeout):
    """The CheckResult of ``exercise``: the judge's on the record its exercise runner sent back (or why there is none),
    and what the notebook's source shows."""
    record, reason = answer.record, answer.why.replace("--timeout", f"--timeout {timeout} s")
    if record is not None and record.get("missing"):
        reason = (f"{exercise.class_name} is not defined: keep the name of the stub's class, "
                  "and make sure the notebook runs from the top.")
        reason += "".join(f"\nLoading the notebook's definitions, {error}" for error in record.get("errors", []))
    if reason:
        answers = CheckResult(exercise.title, False, reason)
    else:
        answers = checkers.judge(exercise.key, inputs, record)
        answers.name = exercise.title
    own = [message for message in found.exercises[exercise.class_name]
           if not (record is not None and record.get("missing") and "has no class statement" in message)]
    lines = [] if answers.passed else [answers.message]
    lines += own
    if found.notebook:
        lines += ["The notebook changes what the grader relies on (listed above), so no verdict can be a pass."]
    if answers.passed and lines:
        lines.append("Its answers on the grader's inputs match sgrad's, but the verdict cannot be a pass.")
    if not lines:
        return answers
    return CheckResult(exercise.title, False, "\n".join(lines))


# --- one notebook, from the command line -------------------------------------------------------------


def check_memory(memory: int, sandboxed: bool) -> None:
    """GradingError unless ``memory`` MiB (0: no limit) is enough for the homework to run, as the limit is kept here:
    by a cgroup for all of a sandbox's processes, or by an address-space limit on each process (no cgroup could
    be made, or ``--no-sandbox``), which counts memory a process reserves but never uses."""
    if memory == 0:
        return
    if sandboxed:
        with sandbox.Sandbox(memory_mib=memory, env={}) as box:
            how = box.memory_limited
    else:
        how = "per process (RLIMIT_AS)"
    least = MIN_MEMORY if how.startswith("cgroup") else MIN_ADDRESS_SPACE
    if memory < least:
        raise GradingError(f"--memory {memory} MiB is too small for a kernel to start where the limit is kept {how}: "
                           f"give at least {least} (or 0 for no limit)")


def check_sandbox(sandboxed: bool) -> None:
    """GradingError, in one line, if a sandbox is asked for and none can be made here."""
    if sandboxed:
        try:
            sandbox.check_available()
        except sandbox.SandboxUnavailable as error:
            raise GradingError(f"{error}; to grade without a sandbox, on notebooks you trust, pass --no-sandbox") \
                from None


def run_one(notebook: pathlib.Path, *, timeout: int, memory: int, seed: "int | None" = None, sandboxed: bool = True,
            record: "pathlib.Path | None" = None) -> int:
    """``sgrad grade NOTEBOOK``: grade it, print the report, return the exit status (0, 1 or 2); ``record``: a
    file to write the verdicts to, as JSON.  Every process the notebook started has ended on return, on
    Ctrl-C (KeyboardInterrupt) and on SIGTERM (:class:`Terminated`) alike."""
    processes.set_subreaper(True)  # what its notebook's processes leave comes to it: see sgrad.course.processes
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        check_sandbox(sandboxed)
        check_memory(memory, sandboxed)
        grades = grade(notebook, timeout=timeout, memory=memory, seed=seed, sandboxed=sandboxed)
    except GradingError as error:
        print(f"sgrad grade: error: {error}", file=sys.stderr)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        processes.end_orphans()
    if not sandboxed:
        print(f"sgrad grade: warning: {NO_SANDBOX}", file=sys.stderr)
    print(f"Grading {notebook}")
    print(grades)
    if record is not None:
        record.write_text(json.dumps({"seed": grades.seed, "sandboxed": grades.sandboxed, "exercises": [
            {"title": result.name, "passed": result.passed, "message": result.message} for result in grades.results]}))
    return 0 if grades.passed else 1


def _on_signal(signum: int, frame: Any) -> None:
    """Ctrl-C or SIGTERM while grading: kill every sandbox at once, then unwind with one line and no verdicts."""
    for box in list(_ACTIVE):
        box.kill()
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
