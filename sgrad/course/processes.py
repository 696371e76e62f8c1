"""The grader's hold on the processes of a notebook graded without a sandbox (``--no-sandbox``), and its own end.

:class:`Unsandboxed` offers what :class:`sgrad.course.sandbox.Sandbox` offers, as far as a plain process can:
each process starts through :data:`LAUNCHER`, which ties its life to the grader's (Linux: it is killed when
the grader dies, even by SIGKILL), sets its address-space limit (``RLIMIT_AS``: per process, not for all
together), moves to a private HOME, and then becomes the command (``exec``, same pid).  Each process's
environment carries ``SGRAD_HELD=<token>``, a token per hold, which every process it starts inherits unless it
clears its environment; :meth:`Unsandboxed.kill` kills what carries the token.  Nothing stops such a process
from reading or changing what this user can.

Either way, the grader makes itself a *child subreaper* (Linux), so that a process detached from its
parent becomes the grader's child when that parent ends, rather than init's, and :func:`end_orphans`
kills every child of the grader on its way out.  Linux only (it reads /proc); elsewhere these do
nothing beyond what each process's own end does.
"""

import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Collection
from typing import Any

MARKER = "SGRAD_HELD"
# `python -c LAUNCHER parent limit home argv...`.  On Linux it ties its life to its parent's first (SIGKILL when the
# parent dies, kept through exec: PR_SET_PDEATHSIG), and ends at once if the parent has died already, so that a
# grader killed outright leaves no kernel behind; then sets the limit, moves to HOME and becomes the command.
LAUNCHER = ("import os, resource, sys\n"
            "if sys.platform.startswith('linux'):\n"
            "    import ctypes, signal; ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
            "    os.getppid() == int(sys.argv[1]) or sys.exit(1)\n"
            "limit = int(sys.argv[2]); limit and resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
            "os.chdir(sys.argv[3]); os.execvp(sys.argv[4], sys.argv[4:])")
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


class Unsandboxed:
    """The processes of one step of a grading, without a sandbox: a private HOME (a temporary folder), an
    address-space limit per process, and an end for all of them.  A context manager, as a Sandbox is."""

    def __init__(self, *, memory_mib: int, env: dict[str, str]) -> None:
        self.memory_mib = memory_mib
        self.token = secrets.token_hex(8)
        self.home = tempfile.mkdtemp(prefix="sgrad-home-")
        self.env = {**os.environ, **env, "HOME": self.home, MARKER: self.token}

    def __enter__(self) -> "Unsandboxed":
        return self

    def __exit__(self, *exception: Any) -> None:
        self.kill()
        shutil.rmtree(self.home, ignore_errors=True)

    def command(self, argv: list[str]) -> list[str]:
        """``argv``, started in the private HOME under the address-space limit."""
        return [sys.executable, "-c", LAUNCHER, str(os.getpid()), str(self.memory_mib * 2**20), self.home, *argv]

    def kill(self) -> None:
        """Kill every process that carries this hold's token."""
        kill(marked(self.token))

    def out_of_memory(self) -> bool:
        """Unknown without a sandbox: a process past its limit raises MemoryError, as the report shows."""
        return False


def set_subreaper(on: bool) -> "bool | None":
    """Make this process a child subreaper (``on``) or not (Linux); whether it was one before, or None if this
    platform cannot say or do it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: only the grader needs it, on Linux

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0:
            return None
        return bool(was.value) if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0 else None
    except (OSError, AttributeError):
        return None


def marked(token: str) -> list[int]:
    """The pids whose environment holds ``SGRAD_GRADING=token``."""
    wanted = f"{MARKER}={token}".encode()
    found = []
    for pid in _pids():
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if wanted in environ.read().split(b"\0"):
                    found.append(pid)
    return found


def children(parent: int) -> list[int]:
    """The pids whose parent is ``parent``."""
    found = []
    for pid in _pids():
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/stat") as stat:
                # pid (comm) state ppid ...: comm may hold spaces and parentheses, so read from the last ")"
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(pid)
    return found


def descendants(root: int) -> list[int]:
    """``root``'s children, their children, and so on."""
    found, frontier = [], [root]
    while frontier:
        for child in children(frontier.pop()):
            if child not in found:
                found.append(child)
                frontier.append(child)
    return found


def kill(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` (gone already: fine), and reap those that are this process's children."""
    for pid in pids:
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def end_orphans(keep: "Collection[int]" = ()) -> None:
    """Kill every child of this process but those in ``keep``, and what is below each."""
    doomed = [child for child in children(os.getpid()) if child not in keep]
    kill([pid for child in doomed for pid in (child, *descendants(child))])


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
