"""What code made a result: sgrad's version and the digest of the source this process runs.

A checkpoint or a finished cell is stamped with :func:`made_by`, so that other code never takes
it for its own.  The stamp must name the code that *ran*, not the code on disk when the result
is saved: a long run may outlive an edit of the source.  Hashing the source costs a read of every
file, so it is not done at ``import sgrad``.  Instead, ``import sgrad`` notes each source file's
size and modification time (a stat call per file), and the digest is computed the first time it
is needed.  If the files still match that note, the digest is the running code's, and this process
keeps it; if they have changed since the import, the running code's digest can no longer be read
from disk, and :func:`made_by` says so instead of giving the edited code's.
"""

import hashlib
import pathlib

from .version import __version__

ROOT = pathlib.Path(__file__).parent
CHANGED = ("sgrad's source changed on disk after this process imported it, so the digest of the code "
           "that runs is unknown")


def source_files() -> list[pathlib.Path]:
    """Every ``.py`` file of the sgrad package (``sgrad/*.py`` and its sub-packages'), in a fixed order."""
    return sorted(ROOT.rglob("*.py"))


def source_state() -> dict[str, tuple[int, int, int]]:
    """Each source file's ``(size, modification time in ns, inode)`` by its path inside the package: stat calls only."""
    state = {}
    for source in source_files():
        facts = source.stat()
        state[source.relative_to(ROOT).as_posix()] = (facts.st_size, facts.st_mtime_ns, facts.st_ino)
    return state


def source_digest() -> str:
    """A SHA-256 hex digest of sgrad's source as it is on disk now.

    It covers every ``.py`` file of the sgrad package, read at call time:
    ``sgrad/*.py`` (the library, its command line and its checkers) and its
    sub-packages', each with its path inside the package.  Any edit to any of
    them, a comment included, gives another digest.
    """
    digest = hashlib.sha256()
    for source in source_files():
        digest.update(source.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(source.read_bytes())
    return digest.hexdigest()


def made_by() -> dict[str, str | None]:
    """What this process's results are made by: ``{'sgrad_version': ..., 'source_digest': ...}``.

    The digest is that of the source this process imported.  The first call
    reads it from disk if the files are as they were at ``import sgrad``, and
    every later call gives the same, whatever happens on disk since.  If they
    had already changed, ``source_digest`` is None and ``source_changed`` says
    why: such a stamp matches nothing (:func:`is_this_code`), so an edit is
    never passed off as the code that ran.
    """
    global _stamp
    if _stamp is None:
        before = source_state()
        digest = source_digest()
        # The files must be those imported, before and after the read: an edit during the read counts too.
        if before == _STATE_AT_IMPORT and source_state() == _STATE_AT_IMPORT:
            _stamp = {"sgrad_version": __version__, "source_digest": digest}
        else:
            _stamp = {"sgrad_version": __version__, "source_digest": None, "source_changed": CHANGED}
    return dict(_stamp)


def is_this_code(stamp: object) -> bool:
    """Whether a result stamped ``stamp`` (a :func:`made_by` of some process) was made by the code this process runs."""
    ours = made_by()
    return ours["source_digest"] is not None and stamp == ours


_STATE_AT_IMPORT = source_state()  # once, as `import sgrad` loads this module: a stat call per file
_stamp: dict[str, str | None] | None = None
