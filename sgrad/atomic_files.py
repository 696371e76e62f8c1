"""Files written whole or not at all: an interrupted write leaves the old file as it was.

A checkpoint (:mod:`sgrad.nn.checkpoint`), an experiment's results and its finished cells
(:mod:`sgrad.training.results_folder`, :mod:`sgrad.training.cell_cache`) are all written so.
"""

import contextlib
import os
import pathlib
import re
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> pathlib.Path:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it over ``path``.

    If ``write`` fails or the process is killed, the old file at ``path`` is
    still there and whole: the rename is the only step that touches it.  A
    failed write removes its temporary file; one that a killed process left
    (``.<name>.<8 random characters>.tmp``) is removed by the next call for
    the same ``path``, so only one process should write a given path at a time.
    Ctrl-C and SIGTERM that come during the write are held until the file is in
    place, so that an interrupted run keeps its newest file, and no library
    is stopped half-way through an object (NumPy's ``savez`` leaves a
    half-built ``ZipFile`` that complains on stderr when collected).
    Makes the folder if needed; returns the path.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)
    tmp = None
    try:
        with _interrupts_held():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):  # gone once the rename is done
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` (creating its folder): an interrupted write leaves the old file whole.

    As a checkpoint is written (:func:`atomic_write`): to a temporary file beside ``path``, which is then
    renamed over it.
    """
    atomic_write(path, lambda file: file.write(text.encode("utf-8")))


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back for the block (where the platform and thread allow): they arrive after it."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _remove_stale_temporaries(path):
    """Delete the temporary files of earlier writes of ``path`` that a killed process left, and no others."""
    # tempfile.mkstemp names them prefix + 8 characters of [a-z0-9_] + suffix.
    own = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    for entry in os.scandir(path.parent):
        if own.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
