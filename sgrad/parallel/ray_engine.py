"""The Ray engine: one Ray actor per worker, for a user who outgrows one machine (``pip install 'sgrad[ray]'``).

``RayEngine(address)`` connects to the Ray cluster at ``address`` (the head node's ``'host:port'``, or
``'auto'`` on a node of it); ``RayEngine()`` starts a Ray on this machine for the run and shuts it
down after: a single-node Ray whose services listen on 127.0.0.1 only (:data:`LOOPBACK_ONLY`, which
must be in the environment before Ray is imported; a warning says when it came too late), with no
dashboard, that passes a worker's messages inside its calls (:data:`DIRECT_MESSAGES`).  If this
process is already connected to a Ray, that one is used and left running.  Each worker is an actor
with one BLAS thread, asking ``cpus_per_worker`` CPUs of the cluster.  A worker sends a message to
its neighbour by calling the neighbour's ``deliver`` (Ray carries the arrays, through its object
store when they are larger than it passes inside a call); the neighbour's loop, on another thread of
the actor, takes it from a ``queue.Queue``.  Reports go to the driver through a ``ray.util.queue.Queue``.
"""

import collections
import contextlib
import copy
import os
import queue
import sys
import warnings
from collections.abc import Iterator
from typing import Any

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


class Mailbox:
    """The actor around a worker: ``deliver`` (called by the neighbours) fills its inbox; ``run`` is its loop."""

    def __init__(self, worker: Any) -> None:
        # Ray hands arrays over read-only (straight from its object store); a worker's layers are its own to update.
        self.worker = copy.deepcopy(worker)
        self.inbox: queue.Queue = queue.Queue()

    def deliver(self, message: Message) -> None:
        self.inbox.put(message)

    def run(self, neighbours: dict[int, Any], reports: Any) -> None:
        def send(j: int, message: Message) -> None:
            neighbours[j].deliver.remote(message)

        self.worker.run(self.inbox, send, reports.put)


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

    def start(self, workers: list[Any]) -> None:
        needed = len(workers) * self.cpus_per_worker
        self.owns_ray = connect(self.address, cpus=int(needed + 0.999))
        ray = import_ray()
        from ray.util.queue import Queue

        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < needed:
            raise ValueError(f"the Ray cluster has {cpus:g} CPUs, but {len(workers)} workers of {self.cpus_per_worker:g} "
                             f"CPU each need {needed:g}; use fewer workers, a smaller cpus_per_worker, or a bigger cluster")
        actor = ray.remote(Mailbox).options(num_cpus=self.cpus_per_worker, max_concurrency=2,
                                            runtime_env={"env_vars": WORKER_ENVIRONMENT})
        self.actors = [actor.remote(worker) for worker in workers]
        self.reports = Queue()
        for worker in workers:
            neighbours = {j: self.actors[j] for j in (worker.index - 1, worker.index + 1) if 0 <= j < len(workers)}
            self.runs[self.actors[worker.index].run.remote(neighbours, self.reports)] = worker

    def next_report(self, timeout: float) -> Report | None:
        import ray
        from ray.util.queue import Empty

        # A run's reports are in the queue before it ends: look at the ended runs first, then at the queue.
        ended, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        try:
            if not self.pending and not ended:
                self.pending.append(self.reports.get(timeout=timeout))
            while True:
                self.pending.append(self.reports.get_nowait())
        except Empty:
            pass
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

        for actor in self.actors:
            ray.kill(actor)
        for run in self.runs:  # collected, so that Ray does not print their errors as unhandled
            try:
                ray.get(run)
            except ray.exceptions.RayError:
                pass
        if self.reports is not None:
            self.reports.shutdown()
        self.actors, self.runs = [], {}
        if self.owns_ray:
            ray.shutdown()
            self.owns_ray = False


def connect(address: str | None, cpus: int = 1) -> bool:
    """Connect this process to the Ray at ``address``, or start a local one (of at least ``cpus`` CPUs) if None.

    Returns True if it did, False if this process was connected to a Ray already (which is then used).
    """
    if address is None and "ray" not in sys.modules:
        os.environ.update(LOOPBACK_ONLY)
    ray = import_ray()
    if ray.is_initialized():
        return False
    if address is not None:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        return True
    with environment(DIRECT_MESSAGES):
        ray.init(num_cpus=max(os.cpu_count() or 1, cpus), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    if ray.util.get_node_ip_address() != "127.0.0.1":
        warnings.warn(f"the local Ray listens on {ray.util.get_node_ip_address()}, not on 127.0.0.1 only: Ray was "
                      f"imported before sgrad could set {', '.join(f'{k}={v}' for k, v in LOOPBACK_ONLY.items())}; "
                      "set it in the environment before importing Ray", stacklevel=3)
    return True


@contextlib.contextmanager
def ray_session(address: str | None = None, cpus: int = 1) -> Iterator[None]:
    """One Ray for several runs (the engines inside use it): connected or started here, shut down after."""
    started = connect(address, cpus)
    try:
        yield
    finally:
        if started:
            import_ray().shutdown()


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("the Ray engine needs Ray: install it with pip install 'sgrad[ray]'") from None
    return ray


def summary(error: BaseException) -> str:
    """Ray's error in a line: its first, and its last (the cause, when Ray gives a traceback between them)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
