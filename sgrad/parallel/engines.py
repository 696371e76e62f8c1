"""What every engine does: start one process (or actor) per worker, pass on their reports, and stop them all.

Two engines implement :class:`Engine`: :class:`sgrad.parallel.local.LocalEngine` (processes of
the standard library's ``multiprocessing``, on this machine; the default) and
:class:`sgrad.parallel.ray_engine.RayEngine` (Ray actors, on a cluster or on a Ray started for
the run).  The driver (:func:`sgrad.parallel.pipeline.train_parallel`) uses them the same way::

    engine.start(workers)                  # each worker's loop starts in its own process
    report = engine.next_report(timeout)   # a Report, or None; raises WorkerFailed if a worker died
    engine.stop()                          # always: every process has exited when it returns

Every worker runs with one BLAS thread (:data:`ONE_BLAS_THREAD`), set before its NumPy loads, and with
malloc keeping the memory it frees (:data:`KEEP_FREED_MEMORY`): both in :data:`WORKER_ENVIRONMENT`.
"""

from typing import Any

from .messages import Report

# Set in each worker's environment before NumPy loads there: OpenBLAS reads its thread count once, at load time.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# A step makes and frees arrays of a few hundred KB (a (784, 256) gradient is 800 KB).  glibc's malloc maps
# such blocks afresh, or gives the top of its heap back to the system once it grows past a trim threshold, so
# a process can pay a page fault per 4 KB of them at every step, as a fresh worker process did.  These keep
# freed memory for reuse, up to 256 MB; C libraries other than glibc ignore them.  glibc reads them once, at
# start-up.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}
WORKER_ENVIRONMENT = {**ONE_BLAS_THREAD, **KEEP_FREED_MEMORY}


class WorkerFailed(RuntimeError):
    """A worker raised or died; the message names the worker, its layers and the cause.  Every worker has stopped."""


class Engine:
    """Runs the workers; see the module's docstring."""

    name = "engine"

    def start(self, workers: list[Any]) -> None:
        raise NotImplementedError

    def next_report(self, timeout: float) -> Report | None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


def describe(worker: Any) -> str:
    """``'worker 1 (layers 1-2, the top)'``: how a message names a worker."""
    first, last = worker.first_layer, worker.first_layer + len(worker.layers) - 1
    layers = f"layer {first}" if first == last else f"layers {first}-{last}"
    return f"worker {worker.index} ({layers}{', the top' if worker.is_top else ''})"


def failure(worker: Any, error: dict[str, Any]) -> WorkerFailed:
    """The WorkerFailed for what ``worker`` reported it raised (its ``'error'`` report's payload)."""
    return WorkerFailed(f"{describe(worker)} raised {error['type']} at step {error['step']}: {error['message']}\n"
                        f"{error['traceback']}")
