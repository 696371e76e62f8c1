"""The local engine, the default: one process per worker on this machine, with the standard library's multiprocessing.

Each worker runs in a fresh interpreter (the 'spawn' start method) whose environment asks for one
BLAS thread before its NumPy loads.  Such an interpreter imports the driver's main module before it
runs anything, so the worker itself (its layers, and the data at the bottom) is handed over
afterwards, through a pipe, and the worker says it has it: a process that dies starting up (as one
does when a script starts a run without ``if __name__ == '__main__':``) stops the run with a message
instead of leaving the driver waiting to hand it its data.  Messages between workers go through one
``multiprocessing.Queue`` per worker (its inbox); a queue's feeder thread sends them while the
worker computes.  Reports go to the driver through one pipe per worker.  Workers ignore Ctrl-C:
the driver, which gets it, stops them all; and a worker whose driver has gone exits at once.
"""

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterator
from multiprocessing.connection import wait
from typing import Any

from .engines import WORKER_ENVIRONMENT, Engine, WorkerFailed, describe
from .messages import Message, Report


class LocalEngine(Engine):
    """One process per worker; ``stop_timeout``: seconds a process gets to end after SIGTERM before SIGKILL."""

    name = "local"

    def __init__(self, stop_timeout: float = 5.0) -> None:
        self.stop_timeout = stop_timeout
        self.workers: list[Any] = []
        self.processes: list[Any] = []
        self.connections: dict[int, Any] = {}
        self.queues: list[Any] = []

    def start(self, workers: list[Any]) -> None:
        context = multiprocessing.get_context("spawn")
        self.workers = workers
        self.queues = [context.Queue() for _ in workers]
        handovers = []
        with environment(WORKER_ENVIRONMENT):
            for worker in workers:
                receiver, sender = context.Pipe(duplex=False)
                handover, taker = context.Pipe()
                neighbours = {j: self.queues[j] for j in (worker.index - 1, worker.index + 1) if 0 <= j < len(workers)}
                process = context.Process(target=serve, args=(taker, self.queues[worker.index], neighbours, sender),
                                          name=f"sgrad {describe(worker)}", daemon=True)
                process.start()
                sender.close()  # the child has its own ends; ours would keep the pipes open after the child is gone
                taker.close()
                self.processes.append(process)
                self.connections[worker.index] = receiver
                handovers.append(handover)
        for i, (worker, process, handover) in enumerate(zip(workers, self.processes, handovers)):
            try:
                handover.send(worker)
                handover.recv()  # the worker has it
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self.let_end(self.processes[i:], handovers[i + 1:])
                raise WorkerFailed(
                    f"{describe(worker)} died as it started, before it took its layers "
                    f"({exit_cause(process.exitcode) if process.exitcode is not None else 'still running'}). "
                    "Each local worker is a fresh Python process that first imports your main module again "
                    "(multiprocessing's 'spawn'): if you start the run from a script, put that call under "
                    "`if __name__ == '__main__':`. The worker's own error, if any, is printed above") from None
            finally:
                handover.close()

    def let_end(self, processes: list[Any], handovers: list[Any]) -> None:
        """After a worker died starting: close the handovers not yet made and give those processes time to end.

        A worker still waiting for its layers then exits at once; one that is importing the main module, as
        the dead one was, dies of the same error by itself, having released what it created (a process
        stopped by a signal half-way leaves its queues' semaphores to multiprocessing's resource tracker,
        which warns of them).  Those still running after ``stop_timeout`` seconds are stopped with the rest.
        """
        for handover in handovers:
            handover.close()
        for process in processes:
            process.join(self.stop_timeout)

    def next_report(self, timeout: float) -> Report | None:
        alive = [p.sentinel for p in self.processes if p.exitcode is None]
        wait([*self.connections.values(), *alive], timeout)
        for index, connection in list(self.connections.items()):
            if connection.poll():  # reports first: a worker that raised has said why before it exited
                try:
                    return connection.recv()
                except EOFError:
                    del self.connections[index]
        for worker, process in zip(self.workers, self.processes):
            if process.exitcode not in (None, 0):
                raise WorkerFailed(f"{describe(worker)} died: {exit_cause(process.exitcode)}")
        return None

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(self.stop_timeout)
            if process.is_alive():
                process.kill()
                process.join()
        for inbox in self.queues:
            inbox.cancel_join_thread()
            inbox.close()
        for connection in self.connections.values():
            connection.close()


def serve(handover: Any, inbox: Any, neighbours: dict[int, Any], connection: Any) -> None:
    """A worker process's body: take the worker, run its loop; if it raises (having reported why), exit with status 1."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it stops every worker
    threading.Thread(target=exit_with_driver, daemon=True).start()
    with handover:
        try:
            worker = handover.recv()
        except EOFError:  # another worker died starting: the driver stops the run before handing this one its own
            return
        handover.send(True)

    def send(j: int, message: Message) -> None:
        neighbours[j].put(message)

    try:
        worker.run(received_in_background(inbox), send, connection.send)
    except BaseException:
        for outbox in neighbours.values():
            outbox.cancel_join_thread()  # at exit, do not wait to hand messages to a worker that may be gone
        sys.exit(1)


def received_in_background(inbox: Any) -> queue.SimpleQueue[Message]:
    """The messages of ``inbox`` as a thread of this process takes them, the moment they come.

    A message of a batch's activations is larger than a pipe holds, so its sender's feeder thread can write only
    the first part of it until the receiver reads; read only when the worker asks for it, the rest of the
    transfer would happen then, while the worker waits.  This thread reads each message as it arrives (NumPy's
    products release the interpreter lock, so it runs while the worker computes) and hands it on whole.
    """
    received: queue.SimpleQueue[Message] = queue.SimpleQueue()

    def take_all() -> None:
        while True:
            try:
                received.put(inbox.get())
            except (EOFError, OSError, ValueError):  # the queue was closed: the run is over
                return

    threading.Thread(target=take_all, name="sgrad inbox", daemon=True).start()
    return received


def exit_with_driver() -> None:
    """Wait for the driver's process to end; if this worker is still running then, end it at once.

    The thread takes no signals: the kernel hands Ctrl-C and SIGTERM to a thread that does not block them, and
    Python runs their handlers in the main thread at once, so this one, never blocking them, would let them through
    where the main thread holds them back (``sgrad.atomic_files``, while a checkpoint is written).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    driver = multiprocessing.parent_process()
    if driver is not None:
        driver.join()
        os._exit(1)


def exit_cause(code: int) -> str:
    """What a process's exit code says: ``'killed by signal SIGKILL (9)'``, ``'exited with status 1'``."""
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name} ({-code})"
    return f"exited with status {code}"


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """Set ``variables`` in os.environ for the body (the processes started there inherit them), then restore it."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
