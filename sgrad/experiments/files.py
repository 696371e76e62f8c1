"""The files an experiment writes: its folder checked before any work, every file written whole or not at all.

An experiment writes into one folder (``--out``): its results (``results.md``, figures,
``histories.json``), the finished cells (:mod:`sgrad.experiments.cells`) and, in
:data:`CHECKPOINT_FOLDER`, the running cell's checkpoint (:func:`checkpoint_path`).
"""

import os
import pathlib

from ..checkpoint import atomic_write

CHECKPOINT_FOLDER = "checkpoints"


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


def checkpoint_path(out_dir: str | os.PathLike[str] | None, run_name: str,
                    checkpoint_every: int | None) -> pathlib.Path | None:
    """Where a run of an experiment writing to ``out_dir`` keeps its checkpoint (None: it keeps none)."""
    if out_dir is None or checkpoint_every is None:
        return None
    return pathlib.Path(out_dir) / CHECKPOINT_FOLDER / f"{run_name}.npz"


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` (creating its folder): an interrupted write leaves the old file whole.

    As a checkpoint is written (:func:`sgrad.checkpoint.atomic_write`): to a
    temporary file beside ``path``, which is then renamed over it.
    """
    atomic_write(path, lambda file: file.write(text.encode("utf-8")))
