"""Every block in its own worker: DNI's update unlocking and the complete unlock in wall-clock time, on local
processes or on Ray.

- :mod:`~sgrad.parallel.worker`: a worker holds a stage of consecutive blocks (and the top layer, at the top);
- :mod:`~sgrad.parallel.schedules`: what a worker does with each batch under ``backprop`` (locked),
  ``pipelined-backprop`` (delayed gradients), ``dni`` / ``cdni`` (update unlocked) and ``complete`` /
  ``ccomplete`` (forward and update unlocked: synthetic inputs as well);
- :mod:`~sgrad.parallel.messages`: the activations going up and the targets (and synthetic inputs) coming down;
- :mod:`~sgrad.parallel.engines`, :mod:`~sgrad.parallel.local`, :mod:`~sgrad.parallel.ray_engine`: where the
  workers run (local processes, the default; Ray actors, ``pip install 'ray>=2.60'``, sgrad's ``ray`` extra);
- :mod:`~sgrad.parallel.pipeline`: :func:`train_parallel`, the driver;
- :mod:`~sgrad.parallel.timeline`: what each worker did and when; :mod:`~sgrad.parallel.simulator`: the
  throughput a schedule would reach on K workers, from measured per-block times.
"""

from .engines import Engine, WorkerFailed
from .local import LocalEngine
from .pipeline import SCHEDULE_NAMES, ParallelRun, train_parallel
from .ray_engine import RayEngine
from .worker import split_layers

__all__ = ["Engine", "LocalEngine", "RayEngine", "WorkerFailed", "SCHEDULE_NAMES", "ParallelRun", "train_parallel",
           "split_layers"]
