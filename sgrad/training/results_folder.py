"""The files an experiment writes: its folder checked before any work, one writer at a time, every file whole.

An experiment writes into one folder (``--out``): its results (``results.md``, figures,
``histories.json``), the finished cells (:mod:`sgrad.training.cell_cache`) and, in
:data:`CHECKPOINT_FOLDER`, the running cell's checkpoint (:func:`checkpoint_path`).  While it
does, it holds the folder (:func:`one_writer`): a second run on the same folder is refused.
"""

import contextlib
import fcntl
import os
import pathlib
from collections.abc import Iterator

CHECKPOINT_FOLDER = "checkpoints"
LOCK_FILE = ".sgrad.lock"  # in the results folder: the writer's lock, and its pid for the message of a refusal


class FolderInUse(ValueError):
    """Another process is writing to the results folder asked for."""


def check_out_dir(out_dir: str | os.PathLike[str] | None, name: str = "out_dir") -> None:
    """Check, before any work, that the results folder ``out_dir`` can be made and written to (None: no folder).

    Nothing is created here: the folder is made when the first file is written.
    """
    if out_dir is None:
        return
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"{name} must be a folder's path (str or pathlib.Path); got {type(out_dir).__name__}")
    path = existing = pathlib.Path(out_dir)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name} {path} cannot be made: {existing} is a file, not a folder; choose another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {path} cannot be made: you may not write in {existing}; "
                         "choose a folder you can write to")


@contextlib.contextmanager
def one_writer(out_dir: str | os.PathLike[str] | None) -> Iterator[None]:
    """Hold the results folder ``out_dir`` for this process alone while the body runs (None: there is none).

    The hold is an operating-system lock (``flock``) on the folder's :data:`LOCK_FILE`, which the system
    lets go when the process ends, however it ends (a kill included): a run that died never blocks the
    next.  A second process asking for the same folder meanwhile is refused with :class:`FolderInUse`,
    naming the process that holds it; without the lock, each would delete the other's temporary files
    (:func:`sgrad.atomic_files.atomic_write`) and overwrite its results.  Makes the folder.
    """
    if out_dir is None:
        yield
        return
    pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)
    lock = os.open(pathlib.Path(out_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(lock, 32, 0).decode(errors="replace").strip() or "unknown"
            raise FolderInUse(f"{out_dir} is being written by another sgrad run (process {holder}); wait for it to "
                              "end, or give this run another folder") from None
        os.ftruncate(lock, 0)
        os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(lock)  # and with it the lock


def checkpoint_path(out_dir: str | os.PathLike[str] | None, run_name: str,
                    checkpoint_every: int | None) -> pathlib.Path | None:
    """Where a run of an experiment writing to ``out_dir`` keeps its checkpoint (None: it keeps none)."""
    if out_dir is None or checkpoint_every is None:
        return None
    return pathlib.Path(out_dir) / CHECKPOINT_FOLDER / f"{run_name}.npz"
