"""Independent runs side by side: each in a worker process of its own, a few at a time.

The methods of ``sgrad compare`` start from the same weights and see the same batches, but
share nothing while they train, so each can train in a process of its own, one per core.
:func:`run_side_by_side` takes the runs by name, each a function ``run(progress) -> result``,
and returns their results in the same order::

    results = run_side_by_side({"dni": run_dni, "cdni": run_cdni}, workers=2, progress=print)

``workers=None`` runs them one after another in this process.  Otherwise each run gets a fresh
interpreter (multiprocessing's 'spawn', so a run must be picklable, e.g. a ``functools.partial`` of
a module's function) whose environment asks for one BLAS thread before its NumPy loads
(:data:`~sgrad.parallel.engines.WORKER_ENVIRONMENT`): on matrices as small as these, a second
BLAS thread costs more in waiting than it saves, and the numbers come out as they do with
``OPENBLAS_NUM_THREADS=1``.

The driver (this process) passes each worker's progress lines on and collects its result.  No
worker outlives it: a worker that raises stops them all and its error is raised here again; one
that dies stops them all with :class:`~sgrad.parallel.engines.WorkerFailed`; so do Ctrl-C and
SIGTERM (the KeyboardInterrupt goes on).  Workers ignore Ctrl-C, which is the driver's to handle;
SIGTERM ends a worker as it ends the command, letting an interrupted file write remove its
temporary file; and a worker whose driver has gone exits at once.
"""

import contextlib
import functools
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

from ..parallel.engines import WORKER_ENVIRONMENT, WorkerFailed
from ..parallel.local import environment, exit_cause, exit_with_driver
from ..argument_checks import check_integer

Progress = Callable[[str], None] | None
TERMINATED = 128 + signal.SIGTERM  # a worker's exit status after SIGTERM, as a shell reports it
RESEND_AFTER = 0.01  # seconds: a SIGTERM that landed where it could not raise is sent again after this


def run_side_by_side(runs: Mapping[str, Callable[[Progress], Any]], *, workers: int | None = None,
                     progress: Progress = None, stop_timeout: float = 5.0) -> dict[str, Any]:
    """``{name: run(progress)}`` for each of ``runs``, at most ``workers`` at once, each in a process of its own.

    workers : how many runs at once (None: one after another, in this process).
    progress : called here with each line a run reports (None: runs report nothing).
    stop_timeout : seconds a worker gets to end after SIGTERM, when the driver stops it, before SIGKILL.
    """
    if workers is None:
        return {name: run(progress) for name, run in runs.items()}
    workers = check_integer(workers, "workers")
    context = multiprocessing.get_context("spawn")
    waiting = list(runs.items())
    running: dict[str, tuple[Any, Connection]] = {}
    results: dict[str, Any] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                name, run = waiting.pop(0)
                try:
                    running[name] = _start(context, name, progress is not None)  # stopped in the end, whatever happens
                finally:
                    _take_ctrl_c()
                _hand_over(name, *running[name], run)
            _collect(running, results, progress)
    finally:
        _stop([process for process, _ in running.values()], stop_timeout)
    return {name: results[name] for name in runs}


def _start(context, name, relay_progress):
    """A worker process, and the end of the pipe on which it takes its run and reports."""
    connection, child_end = context.Pipe()
    # The child inherits Ctrl-C ignored (a handler set later could come too late: its NumPy takes a while to
    # load) and its environment, which its NumPy and malloc read as they start.
    with _sigint_ignored(), environment(WORKER_ENVIRONMENT):
        process = context.Process(target=_serve, args=(child_end, relay_progress), name=f"sgrad {name}", daemon=True)
        process.start()
    child_end.close()  # the child has its own; with ours open, the pipe would never say the child is gone
    return process, connection


def _hand_over(name, process, connection, run):
    """Send ``run`` to its worker, once started: the run may be large (its data), and the child reads it once up."""
    try:
        connection.send(run)
    except (BrokenPipeError, ConnectionResetError):
        process.join()
        raise WorkerFailed(f"the {name} run's worker died as it started: {exit_cause(process.exitcode)}") from None


@contextlib.contextmanager
def _sigint_ignored():
    """Start the body's processes with Ctrl-C ignored; a Ctrl-C that comes meanwhile waits for :func:`_take_ctrl_c`.

    A process started in the body inherits SIGINT ignored (its disposition) and blocked (the main thread's
    mask).  Here the handler is back when the body ends, but SIGINT stays blocked: one sent to the main thread
    meanwhile stays pending (Linux keeps a blocked signal even while it is ignored) until the caller, having
    recorded the process it started, unblocks it and takes it as a KeyboardInterrupt.  Only in the main thread,
    where Python lets a program set its signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _take_ctrl_c() -> None:
    """Unblock SIGINT in the main thread: a Ctrl-C held since a worker was started is raised here."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _collect(running, results, progress):
    """Wait for the next reports and pass them on; a finished run's result goes into ``results``."""
    wait([connection for _, connection in running.values()])
    for name, (process, connection) in list(running.items()):
        while connection.poll():
            try:
                kind, payload = connection.recv()
            except (EOFError, OSError):  # the worker has exited, and every report it sent has been read
                process.join()
                connection.close()
                del running[name]
                if name not in results:
                    raise WorkerFailed(f"the {name} run's worker died: {exit_cause(process.exitcode)}") from None
                break
            if kind == "line" and progress is not None:
                progress(payload)
            elif kind == "result":
                results[name] = payload
            elif kind == "error":
                raise payload


def _stop(processes, timeout):
    """End every process still running: SIGTERM, then SIGKILL for those that take longer than ``timeout`` seconds."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()


def _serve(connection, relay_progress):
    """A worker's body: take the run, run it, report its lines, then its result or its error (and exit with status 1).

    Ctrl-C is ignored, as the worker was started: it is the driver's to handle, and the driver stops every worker.
    """
    signal.signal(signal.SIGTERM, _end)
    sys.unraisablehook = functools.partial(_send_sigterm_again, sys.unraisablehook)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # started blocked as well as ignored: still ignored
    threading.Thread(target=exit_with_driver, daemon=True).start()
    try:
        with connection:
            try:
                run = connection.recv()
            except EOFError:  # the driver stopped before it handed the run over
                return
            try:
                result = run(functools.partial(_report_line, connection) if relay_progress else None)
            except Exception as error:
                connection.send(("error", _picklable(error)))
                sys.exit(1)
            connection.send(("result", result))
    finally:
        # The run is over, its cleanups done: a SIGTERM now (the driver stopping a worker that is on its way out)
        # just ends the process.  Raised as SystemExit inside the interpreter's own exit (its atexit callbacks,
        # its threads' shutdown), it would be printed there as an exception ignored, on the command's stderr.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _report_line(connection, line):
    connection.send(("line", line))


def _end(signum, frame):
    """SIGTERM unwinds the run as an exception would, so that ``finally`` blocks and cleanups run.

    A second SIGTERM is ignored: sent to the whole process group, the signal reaches the worker and then the
    driver, which stops its workers with one more; raised again inside a cleanup, it would cut that cleanup
    short (a checkpoint's temporary file left behind)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(TERMINATED)


def _send_sigterm_again(hook, unraisable):
    """The unraisable-exception hook of a worker: a SIGTERM taken where Python cannot raise is sent again.

    Python runs a signal's handler wherever the main thread is, and that can be code whose exceptions it
    prints and drops (a ``__del__``, a weakref callback such as the import system's): the SystemExit of
    :func:`_end` would be printed on the command's stderr, and the run would go on until the driver's SIGKILL.
    Instead the handler is set again and the signal sent again from another thread, a moment later, when the
    main thread is back in ordinary code, where the SystemExit unwinds the run.  Any other unraisable
    exception goes to ``hook``, Python's.
    """
    error = unraisable.exc_value
    if not (isinstance(error, SystemExit) and error.code == TERMINATED):
        hook(unraisable)
        return
    signal.signal(signal.SIGTERM, _end)
    threading.Timer(RESEND_AFTER, os.kill, (os.getpid(), signal.SIGTERM)).start()


def _picklable(error):
    """``error`` with the worker's traceback as a note, or, if it cannot be sent, a RuntimeError that says what it was."""
    error.add_note("In the worker:\n" + "".join(traceback.format_exception(error)).rstrip())
    try:
        pickle.dumps(error)
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
