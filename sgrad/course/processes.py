"""The grader's hold on the processes a notebook starts: a memory limit for each kernel, and an end for all of them.

Each kernel starts through :data:`LAUNCHER`, which sets its address-space limit (``RLIMIT_AS``) and
then becomes the kernel (``exec``, same pid): an allocation past the limit raises MemoryError in the
cell that made it.  Each kernel's environment carries ``SGRAD_GRADING=<token>``, a token per notebook,
which every process it starts inherits unless it clears its environment.  The grader makes itself a
*child subreaper* (Linux), so that a process the notebook detached (``start_new_session=True``, a
double fork) becomes the grader's child when its parent ends, rather than init's.  :func:`end` kills
what carries a token, and :func:`end_orphans` kills every child of the grader that is not a kernel in
use: together they end every process a notebook started.  Linux only (it reads /proc); elsewhere
these do nothing beyond what the kernel's own shutdown does.
"""

import contextlib
import os
import signal
import sys

MARKER = "SGRAD_GRADING"
LAUNCHER = ("import os, resource, sys; limit = int(sys.argv[1]); "
            "limit and resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); os.execvp(sys.argv[2], sys.argv[2:])")
PR_SET_CHILD_SUBREAPER = 36


def launcher_command(command: list[str], memory_bytes: int) -> list[str]:
    """``command`` (a kernel's), started under an address-space limit of ``memory_bytes`` (0: none)."""
    return [sys.executable, "-c", LAUNCHER, str(memory_bytes), *command]


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux); whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here: only the grader needs it, on Linux

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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


def end(token: str, kernel_pid: "int | None" = None) -> None:
    """Kill the kernel ``kernel_pid``, everything below it, and every process that carries ``token``."""
    pids = [] if kernel_pid is None else [kernel_pid, *descendants(kernel_pid)]
    kill(pids + [pid for pid in marked(token) if pid not in pids])


def end_orphans(keep: "set[int]" = frozenset()) -> None:  # type: ignore[assignment]
    """Kill every child of this process but ``keep`` (the kernels in use), and what is below each."""
    doomed = [pid for pid in children(os.getpid()) if pid not in keep]
    kill([pid for child in doomed for pid in (child, *descendants(child))])


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
