"""The Ray engine: one Ray actor per worker, for a user who outgrows one machine (sgrad's ``ray`` extra).

``RayEngine(address)`` connects to the Ray cluster at ``address`` (the head node's ``'host:port'``, or
``'auto'`` on a node of it); ``RayEngine()`` starts a Ray on this machine for the run and shuts it
down after: a single-node Ray whose services listen on 127.0.0.1 only (:data:`LOOPBACK_ONLY`, which
must be in the environment before Ray is imported; a warning says when it came too late), with no
dashboard, that passes a worker's messages inside its calls (:data:`DIRECT_MESSAGES`).  If this
process is already connected to a Ray, that one is used and left running.  Each worker is an actor
with one BLAS thread, asking ``cpus_per_worker`` CPUs of the cluster.  A worker sends a message to
its neighbour by calling the neighbour's ``deliver`` (Ray carries the arrays, through its object
store when they are larger than it passes inside a call); the neighbour's loop, on another thread of
the actor, takes it from a ``queue.Queue``.  Reports go to the driver through one more actor,
:class:`Reports`, which hands the driver all it holds at once.
"""

import asyncio
import collections
import contextlib
import copy
import importlib
import ipaddress
import os
import pathlib
import queue
import signal
import socket
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from typing import IO, Any

from .engines import WORKER_ENVIRONMENT, Engine, WorkerFailed, describe
from .local import environment
from .messages import Message, Report


# Ray's own switch for a Ray that stays on one machine (as it does on macOS and Windows): its node's address is
# 127.0.0.1, and its services listen there only.  Ray reads it once, when it is imported.
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
# Ray passes an argument larger than 100 KiB (its default) through its object store, which costs the raylet
# and both actors work; a worker's message is 257 KiB (h of one batch and its labels).  Up to 8 MiB, this
# Ray passes arguments inside the call instead: a message arrives sooner and takes less processor time.
# Read by each of Ray's processes as it starts: set while the Ray started for a run starts.
DIRECT_MESSAGES = {"RAY_max_direct_call_object_size": str(8 << 20)}
ANSWER_TIMEOUT = 10.0  # seconds an address may take to accept a connection before it counts as dead
STOP_TIMEOUT = 10.0  # seconds the killed actors' runs may take to end before the engine stops waiting for them
# HTTP/2's connection preface and an empty SETTINGS frame; a gRPC server answers with a frame of type SETTINGS.
HTTP2_OPENING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4  # the type of a frame: its fourth byte


class Mailbox:
    """The actor around a worker: ``deliver`` (called by the neighbours) fills its inbox; ``run`` is its loop."""

    def __init__(self, worker: Any) -> None:
        # Ray hands arrays over read-only (straight from its object store); a worker's layers are its own to update.
        self.worker = copy.deepcopy(worker)
        self.inbox: queue.Queue = queue.Queue()

    def deliver(self, message: Message) -> None:
        self.inbox.put(message)

    def run(self, neighbours: dict[int, Any], reports: Any) -> None:
        import ray

        def send(j: int, message: Message) -> None:
            neighbours[j].deliver.remote(message)

        def report(item: Report) -> None:  # in the actor before the run goes on, so before the run ends
            ray.get(reports.put.remote(item))

        self.worker.run(self.inbox, send, report)


class Reports:
    """The actor that holds the workers' reports until the driver takes them: all of them at once, in ``take``.

    No call of it ends in an error while it lives (``take`` with nothing to hand answers ``[]``, where
    ``ray.util.queue.Queue`` raises ``Empty``), so a call whose answer the driver never reads (Ctrl-C or
    SIGTERM came during it) leaves no error for Ray to print as unhandled.
    """

    def __init__(self) -> None:
        self.held: list[Report] = []
        self.arrived = asyncio.Event()

    async def put(self, report: Report) -> None:
        self.held.append(report)
        self.arrived.set()

    async def take(self, timeout: float) -> list[Report]:
        """Every report held, in the order they came; waits up to ``timeout`` seconds for one if none is."""
        if not self.held:
            self.arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), timeout)
        taken, self.held = self.held, []
        return taken


class RayEngine(Engine):
    """Ray actors, on the cluster at ``address`` or on a Ray started for the run (``address=None``)."""

    name = "ray"

    def __init__(self, address: str | None = None, cpus_per_worker: float = 1.0) -> None:
        self.address, self.cpus_per_worker = address, cpus_per_worker
        self.owns_ray = False
        self.actors: list[Any] = []
        self.runs: dict[Any, Any] = {}
        self.pending: collections.deque = collections.deque()
        self.reports: Any = None
        self.taking: Any = None  # the driver's call of ``Reports.take`` until its answer is read

    def start(self, workers: list[Any]) -> None:
        needed = len(workers) * self.cpus_per_worker
        self.owns_ray = connect(self.address, cpus=int(needed + 0.999))
        ray = import_ray()
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < needed:
            raise ValueError(f"the Ray cluster has {cpus:g} CPUs, but {len(workers)} workers of {self.cpus_per_worker:g} "
                             f"CPU each need {needed:g}; use fewer workers, a smaller cpus_per_worker, or a bigger cluster")
        actor = ray.remote(Mailbox).options(num_cpus=self.cpus_per_worker, max_concurrency=2,
                                            runtime_env={"env_vars": WORKER_ENVIRONMENT})
        self.actors = [actor.remote(worker) for worker in workers]
        self.reports = ray.remote(Reports).options(num_cpus=0).remote()
        for worker in workers:
            neighbours = {j: self.actors[j] for j in (worker.index - 1, worker.index + 1) if 0 <= j < len(workers)}
            self.runs[self.actors[worker.index].run.remote(neighbours, self.reports)] = worker

    def next_report(self, timeout: float) -> Report | None:
        import ray

        # A run's reports are in the Reports actor before it ends: look at the ended runs first, then take them.
        try:
            ended, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
            if self.taking is None:
                self.taking = self.reports.take.remote(0.0 if self.pending or ended else timeout)
            answered, _ = ray.wait([self.taking], timeout=timeout)
            if not answered:  # slow (a loaded machine, an actor still starting), not gone: ask again next time
                return self.pending.popleft() if self.pending else None
            self.pending.extend(ray.get(self.taking))
            self.taking = None
        except ray.exceptions.RayError as error:  # the reports' actor, or Ray itself, is gone: a raylet died
            raise WorkerFailed(f"the Ray cluster failed under the workers: {summary(error)}") from None
        if self.pending:
            return self.pending.popleft()
        for run in ended:
            worker = self.runs.pop(run)
            try:
                ray.get(run)
            except ray.exceptions.RayActorError as error:
                raise WorkerFailed(f"{describe(worker)} died: {summary(error)}") from None
            except ray.exceptions.RayError as error:
                raise WorkerFailed(f"{describe(worker)} failed: {summary(error)}") from None
        return None

    def stop(self) -> None:
        if not self.actors:
            return
        import ray

        with contextlib.suppress(ray.exceptions.RayError):  # what is already dead (a raylet that died) stays so
            for actor in self.actors:
                ray.kill(actor)
            # The runs' ends collected, so that Ray does not print their errors as unhandled; within STOP_TIMEOUT
            # for all of them, since a run whose node is gone never ends.
            ended, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=STOP_TIMEOUT)
            for run in ended:
                with contextlib.suppress(ray.exceptions.RayError):
                    ray.get(run)
            if self.reports is not None:
                ray.kill(self.reports)
            if self.taking is not None:  # a take not answered yet, or interrupted: its answer, or its actor's end, read
                with contextlib.suppress(ray.exceptions.RayError):
                    ray.get(self.taking, timeout=STOP_TIMEOUT)
        self.actors, self.runs, self.reports, self.taking = [], {}, None, None
        if self.owns_ray:
            with _ray_kept_quiet():
                ray.shutdown()
            self.owns_ray = False


def connect(address: str | None, cpus: int = 1) -> bool:
    """Connect this process to the Ray at ``address``, or start a local one (of at least ``cpus`` CPUs) if None.

    Returns True if it did, False if this process was connected to a Ray already (which is then used).
    Joining a cluster follows Ray's own defaults for one found on this machine: a loopback address gets
    Ray's loopback switch (:data:`LOOPBACK_ONLY`), and token authentication is on if a token is at hand
    (:func:`use_the_token_at_hand`).  An address where nothing answers is refused within
    :data:`ANSWER_TIMEOUT` seconds, and a cluster that refuses this process in one line that says why,
    instead of Ray's retries and log lines.
    """
    if "ray" not in sys.modules and (address is None or _is_loopback(address)):
        os.environ.update(LOOPBACK_ONLY)
    if address is not None and address != "auto":
        _check_something_answers(address)
        use_the_token_at_hand()
    ray = import_ray()
    if ray.is_initialized():
        return False
    if address is not None:
        with _ray_kept_quiet() as said:
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except Exception as error:  # Ray's ConnectionError, RuntimeError, AuthenticationError, ...
                raise ConnectionError(_refusal(address, error, said())) from None
        return True
    with environment(DIRECT_MESSAGES), _ray_kept_quiet():
        ray.init(num_cpus=max(os.cpu_count() or 1, cpus), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    if ray.util.get_node_ip_address() != "127.0.0.1":
        warnings.warn(f"the local Ray listens on {ray.util.get_node_ip_address()}, not on 127.0.0.1 only: Ray was "
                      f"imported before sgrad could set {', '.join(f'{k}={v}' for k, v in LOOPBACK_ONLY.items())}; "
                      "set it in the environment before importing Ray", stacklevel=3)
    return True


def use_the_token_at_hand() -> None:
    """Turn Ray's token authentication on for this process if a token is at hand and ``RAY_AUTH_MODE`` is not set.

    So does ``ray start --head`` for the cluster it starts (Ray 2.60 and later), and ``ray.init()`` for a
    local cluster; but ``ray.init(address=...)`` does not, and then a cluster started with Ray's defaults
    refuses it.  A token is at hand in ``RAY_AUTH_TOKEN``, in the file ``RAY_AUTH_TOKEN_PATH`` names, or in
    ``~/.ray/auth_token``.  An explicit ``RAY_AUTH_MODE`` (``disabled`` too) is left as it is.
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    path = pathlib.Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or pathlib.Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or path.is_file():
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray" in sys.modules:  # Ray read its settings when it was imported: it reads them again, as it does itself
            importlib.import_module("ray._raylet").Config.initialize("")


def _is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_something_answers(address: str) -> None:
    """Refuse, within about 2 × :data:`ANSWER_TIMEOUT` seconds, an address ``HOST:PORT`` where no Ray head answers.

    Ray's head answers on a gRPC server (HTTP/2): to HTTP/2's opening it replies with its settings.  Where
    nothing accepts a connection, or something that is not a gRPC server does, ``ray.init`` would retry
    for minutes.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a Ray address is HOST:PORT, the head node's, e.g. 127.0.0.1:6379; got {address!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=ANSWER_TIMEOUT) as connection:
            connection.sendall(HTTP2_OPENING)
            reply = connection.recv(9)
    except OSError as error:
        why = "it timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error)).lower()
        raise ConnectionError(f"no Ray cluster answers at {address} ({why}); start one there "
                              f"(ray start --head --port {port}), or check the address") from None
    if len(reply) < 4 or reply[3] != HTTP2_SETTINGS:
        raise ConnectionError(f"something answers at {address}, but not a Ray cluster's head (it does not answer "
                              "as a gRPC server does); check the address: the head node's port, 6379 by default")


def _refusal(address: str, error: BaseException, said: str) -> str:
    """Why joining the cluster at ``address`` failed, in a line: Ray's ``error`` and what it logged (``said``)."""
    if "InvalidAuthToken" in said or "Authentication" in type(error).__name__:
        has = ("the token this process has is not the cluster's" if os.environ.get("RAY_AUTH_MODE") == "token"
               else "this process has none")
        return (f"the Ray cluster at {address} asks for an authentication token (Ray's token authentication) and "
                f"{has}: set RAY_AUTH_TOKEN to the cluster's token (ray get-auth-token, on its head node), or "
                "RAY_AUTH_MODE=disabled if the cluster runs without authentication")
    return f"could not join the Ray cluster at {address}: {summary(error)}"


@contextlib.contextmanager
def _ray_kept_quiet() -> Iterator[Any]:
    """While Ray connects or starts: its log lines (written by its C++ core to file descriptor 2, bypassing Python)
    go to a file instead of the terminal, and its SIGTERM handler is undone.

    Yields a function that returns what Ray wrote.  Ray sets a handler of its own for SIGTERM as it
    starts; a handler that this process had (the command line's: SIGTERM ends a command as Ctrl-C does)
    is put back.
    """
    handler = signal.getsignal(signal.SIGTERM)
    with tempfile.TemporaryFile() as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            yield lambda: _read(log)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if callable(handler) and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, handler)


def _read(log: IO[bytes]) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")


@contextlib.contextmanager
def ray_session(address: str | None = None, cpus: int = 1) -> Iterator[None]:
    """One Ray for several runs (the engines inside use it): connected or started here, shut down after."""
    started = connect(address, cpus)
    try:
        yield
    finally:
        if started:
            with _ray_kept_quiet():
                import_ray().shutdown()


def import_ray() -> Any:
    """Ray, imported; an ImportError that says whether Ray is missing or installed but broken (and why)."""
    try:
        import ray
    except ModuleNotFoundError as error:
        if error.name != "ray":
            raise ImportError(f"Ray is installed but cannot be imported: {error}; reinstall it with "
                              "pip install --force-reinstall 'ray>=2.60'") from error
        raise ImportError("the Ray engine needs Ray: install it with pip install 'ray>=2.60' (sgrad's ray extra)") from None
    except Exception as error:  # a broken install: a library that does not load, a module that raises
        raise ImportError(f"Ray is installed but cannot be imported: {type(error).__name__}: {error}; reinstall it "
                          "with pip install --force-reinstall 'ray>=2.60'") from error
    return ray


def summary(error: BaseException) -> str:
    """Ray's error in a line: its first, and its last (the cause, when Ray gives a traceback between them)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
