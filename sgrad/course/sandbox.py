"""The grader's sandbox: everything of one notebook runs in a bubblewrap container of its own, capped and killable.

What a process inside a :class:`Sandbox` can and cannot do, and the means of each:

- **See**: the system read-only (``/usr``, ``/etc``, and ``/bin``, ``/lib*``, ``/sbin`` as the host has them:
  bound, or the same symlinks), but for what in ``/etc`` others may not read (``/etc/shadow``), covered;
  the Python environment read-only (:func:`python_binds`: the interpreter's prefixes and site-packages,
  never a checkout of sgrad, whose installed copy :func:`python_hidden` covers with an empty folder); and
  what the caller binds (``ro_binds``, ``rw_binds``).  Nothing else of the host: not its HOME, not the
  checkout, not the other students' folders.  ``--ro-bind``, ``--symlink``, and ``--remount-ro /`` last,
  so that the sandbox's own root is read-only too.
- **Write**: a private, empty HOME (``/home/student``), ``/tmp`` and ``/dev/shm`` (``--tmpfs``, new for
  each sandbox, gone with it), and the ``rw_binds``.  Writing into the Python environment (a ``pip
  install``, a ``.pth`` file, an IPython startup file) fails, so no notebook can change the next one's.
- **Be**: user 1000 in a user namespace of its own, with no capabilities (``--unshare-user --uid 1000``;
  ``--disable-userns`` where bwrap has it, so that it cannot make another), in its own PID namespace
  (``--unshare-pid``: it sees only its own processes), with only its own loopback for a network
  (``--unshare-net``), in a terminal session of its own (``--new-session``), with the environment given
  and nothing else (``--clearenv``, ``--setenv``).  ``--unshare-all`` covers IPC, UTS and cgroup namespaces.
- **Use**: at most ``memory_mib`` MiB of memory, all its processes together, and at most ``max_processes``
  tasks: a child cgroup of this process's own cgroup, with ``memory.max`` and ``pids.max`` (cgroup v2) or
  ``memory.limit_in_bytes`` and ``pids.max`` (cgroup v1).  Each command starts through a small launcher
  that joins the cgroups and then becomes bwrap (``exec``), so nothing inside ever runs outside them.
  A cgroup v2 lends its controllers to children only while no process sits in it, so the grader must be
  alone in its cgroup, which it then leaves for a child of it (:func:`prepare_cgroups`).  Where no cgroup
  can be made (not root, nothing delegated), the launcher sets ``RLIMIT_AS`` instead (a cap per process)
  and, for a user other than root, ``RLIMIT_NPROC``; :attr:`Sandbox.memory_limited`,
  :attr:`Sandbox.processes_limited` and :attr:`Sandbox.why_no_cgroup` say which, and why.
- **Outlive it**: nothing.  bwrap's ``--die-with-parent`` kills the sandbox's init when bwrap dies, and
  when a PID namespace's init dies the kernel kills every process in it, however it detached
  (``setsid``, a double fork).  When the main process ends, bwrap returns, and its init ends a moment
  later with everything still inside.  :meth:`Sandbox.kill` SIGKILLs every member of the cgroups (v2's
  ``cgroup.kill`` where there is one) and the sandbox's bwrap processes, until none is left.  bwrap ties
  itself to its parent only once its sandbox is set up, so the launcher ties it from its first instruction
  (and ends if its parent is already gone); a class grading also adopts and ends whatever a grader killed
  outright leaves (:func:`sgrad.course.gradebook.grade_class`).

A grader uses it as::

    check_available()                        # SandboxUnavailable, in one line, if bwrap cannot work here
    with Sandbox(memory_mib=4096, ro_binds=python_binds(), hide=python_hidden(),
                 rw_binds=[(folder, "/home/student/work")], env={"OPENBLAS_NUM_THREADS": "1"}) as sandbox:
        subprocess.run(sandbox.command(["python", "-c", "print(1)"]))
        sandbox.kill()                       # __exit__ kills too, then removes the cgroups

and a Jupyter kernel runs inside through :func:`kernel_manager`.  Linux only.
"""

import contextlib
import errno
import functools
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SANDBOX_UID = 1000
HIDDEN_PACKAGES = ("sgrad", "data_gen")
PREFIX = "sgrad-sandbox"  # a sandbox is named PREFIX-<the grader's pid>-<random>, and so are its cgroups
LEAF = "sgrad-grader"  # the cgroup (v2) a grader moves itself into, so that its own can hold sandboxes
KILL_WAIT = 1.0        # seconds kill() goes on killing what is left of a sandbox, at most
SOCKET_PATH_LIMIT = 107  # bytes of a Unix socket's path (sun_path holds 108, with the final NUL)

# The launcher: `python -I -S -c LAUNCHER plan bwrap options...`.  It ties its life to its parent's (SIGKILL when
# the parent dies, kept through exec; bwrap ties itself only once its sandbox is set up), and ends at once if the
# parent has died already; joins the sandbox's cgroups, or sets the limits that stand in for them; then becomes
# bwrap (exec: same pid), so that bwrap and everything it starts are counted from their first instruction.
# -I -S: no site, no environment variables, so it starts bare and fast.
LAUNCHER = """
import ctypes, json, os, resource, signal, sys
plan = json.loads(sys.argv[1])
ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != plan["parent"]:
    sys.exit(1)
for procs in plan["join"]:
    with open(procs, "w") as file:
        file.write(str(os.getpid()))
for name, limit in plan["limits"].items():
    resource.setrlimit(getattr(resource, name), (limit, limit))
os.execv(sys.argv[2], sys.argv[2:])
"""


class SandboxUnavailable(Exception):
    """No sandbox can be made here; ``str()`` is one line: why, and what to do."""


# --- can bwrap work here? --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Bwrap:
    path: str = ""
    disable_userns: bool = False  # bwrap 0.8 and later
    problem: str = ""             # why no sandbox can be made, in one line; "" if one can


def check_available() -> None:
    """Raise :class:`SandboxUnavailable` unless a sandbox can be made here: Linux, ``bwrap`` on PATH, and bwrap
    able to make its namespaces (tried once per process, on ``true``)."""
    problem = _bwrap().problem
    if problem:
        raise SandboxUnavailable(problem)


@functools.cache
def _bwrap() -> _Bwrap:
    if not sys.platform.startswith("linux"):
        return _Bwrap(problem=f"the grading sandbox (bubblewrap) needs Linux, not {sys.platform}: "
                              "grade with --no-sandbox, in a container or virtual machine of its own")
    path = shutil.which("bwrap")
    if path is None:
        return _Bwrap(problem="bubblewrap is not installed (no bwrap on PATH): install it (apt-get install "
                              "bubblewrap, or dnf install bubblewrap), or grade with --no-sandbox")
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
        found = _Bwrap(path, disable_userns="--disable-userns" in usage)
        probe = subprocess.run([path, *_namespace_options(found, "sgrad-probe"), *_system_options(), "--", "true"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return _Bwrap(problem=f"bwrap could not run here ({error}): grade with --no-sandbox")
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
        return _Bwrap(problem=f"bwrap cannot make its namespaces here ({said}): allow user namespaces (sysctl "
                              "user.max_user_namespaces, kernel.unprivileged_userns_clone=1, or on Ubuntu "
                              "kernel.apparmor_restrict_unprivileged_userns=0), or grade with --no-sandbox")
    return found


def _namespace_options(bwrap: _Bwrap, name: str) -> list[str]:
    """Every namespace new, user 1000 without capabilities, killed with its parent, in a session of its own.

    ``name`` becomes the hostname: it marks the sandbox's bwrap processes on the host's side (kill())."""
    return ["--unshare-all", "--unshare-user", *(["--disable-userns"] if bwrap.disable_userns else []),
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", name,
            "--die-with-parent", "--new-session"]


def _system_options() -> list[str]:
    """The system read-only, as the host has it: each of SYSTEM bound, or the same symlink (merged /usr)."""
    options = []
    for path in SYSTEM:
        if os.path.islink(path):
            options += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            options += ["--ro-bind", path, path]
    return options + _private_files("/etc") + ["--proc", "/proc", "--dev", "/dev"]


@functools.cache
def _private_files(folder: str) -> "list[str]":
    """Options that cover what in ``folder`` others may not read (/etc/shadow, /etc/ssl/private): a folder with an
    empty one, a file with /dev/null (which cannot be opened there: bwrap binds without devices).

    The sandbox's user is the grader's user on the host, so a grader run as root would let it read
    root's files wherever they are bound."""
    options = []
    for parent, folders, files in os.walk(folder):
        for name in list(folders):
            path = os.path.join(parent, name)
            if _private(path):
                options += ["--tmpfs", path, "--remount-ro", path]
                folders.remove(name)
        options += [option for name in files if _private(os.path.join(parent, name))
                    for option in ("--ro-bind", "/dev/null", os.path.join(parent, name))]
    return options


def _private(path: str) -> bool:
    """Whether ``path`` (not a symlink) is closed to others."""
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return not stat.S_ISLNK(status.st_mode) and not status.st_mode & stat.S_IROTH


# --- the Python environment inside -----------------------------------------------------------------------------

def python_binds(hidden_packages: "tuple[str, ...]" = HIDDEN_PACKAGES) -> "list[tuple[str, str]]":
    """Read-only binds (host path, sandbox path) that make this interpreter (``sys.executable``) work inside.

    The interpreter's prefixes (``sys.base_prefix``, and ``sys.prefix`` for a virtual environment, even one
    inside a checkout: the environment alone is bound), every other site-packages on ``sys.path`` (the
    user's), and each other ``sys.path`` folder of installed packages (it holds ``*.dist-info``) unless it
    holds one of ``hidden_packages``.  Other ``sys.path`` folders are left out: a checkout that an editable
    install or PYTHONPATH adds, the script's folder, the current one.  So the source of ``hidden_packages``
    is not inside, but for a copy installed in a bound folder, which :func:`python_hidden` covers.  Each
    folder is bound at the path Python knows it by.
    """
    executable_home = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    prefixes = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix, executable_home]
    installed = [folder for folder in map(os.path.abspath, filter(None, sys.path))
                 if _holds_installed_packages(folder) and not _holds_any(folder, hidden_packages)]
    roots: list[str] = []
    for path in map(os.path.abspath, [*prefixes, *_site_packages(), *installed]):
        if os.path.isdir(path) and not any(_inside(path, root) for root in (*roots, *SYSTEM)):
            roots = [root for root in roots if not _inside(root, path)] + [path]
    return [(os.path.realpath(root), root) for root in roots]


def python_hidden(hidden_packages: "tuple[str, ...]" = HIDDEN_PACKAGES) -> "list[str]":
    """The folders of ``hidden_packages`` installed in a folder that :func:`python_binds` binds (a non-editable
    install: ``site-packages/sgrad``), to cover with an empty read-only tmpfs (``Sandbox(hide=...)``).

    ``import sgrad`` then finds an empty namespace package: nothing of its source is readable inside.
    """
    roots = [inside for _, inside in python_binds(hidden_packages)]
    folders = {*roots, *_site_packages()}
    return sorted(os.path.join(folder, name) for folder in folders for name in hidden_packages
                  if any(_inside(folder, root) for root in roots) and os.path.isdir(os.path.join(folder, name)))


def _site_packages() -> "list[str]":
    """The site-packages (or dist-packages) folders on sys.path and of the interpreter's prefixes."""
    import site  # here: only python_binds needs it, and the launcher's `python -S` does not load it

    candidates = [*sys.path, *site.getsitepackages([sys.base_prefix, sys.prefix])]
    return [os.path.abspath(path) for path in candidates
            if path and os.path.basename(path) in ("site-packages", "dist-packages")]


def _holds_installed_packages(folder: str) -> bool:
    with contextlib.suppress(OSError):
        return any(name.endswith((".dist-info", ".egg-info")) for name in os.listdir(folder))
    return False


def _holds_any(folder: str, packages: "tuple[str, ...]") -> bool:
    return any(os.path.exists(os.path.join(folder, name)) for name in packages)


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


# --- cgroups ---------------------------------------------------------------------------------------------------

@dataclass
class _Cgroups:
    """The cgroup directories of one sandbox: each one made (to join and to remove), and where each cap lives."""

    made: "list[str]" = field(default_factory=list)
    memory: "str | None" = None   # the directory counting the sandbox's memory
    memory_version: int = 0
    pids: "str | None" = None     # the directory capping its tasks
    pids_version: int = 0
    killable: "str | None" = None  # a v2 directory with cgroup.kill: one write kills every member
    problems: "list[str]" = field(default_factory=list)


def prepare_cgroups() -> str:
    """Make this process's cgroup (v2) able to hold sandboxes' cgroups; returns "" or, in one line, why it cannot.

    A cgroup v2 can give its children memory and pids controllers only while no process sits in it.  If this
    process is alone in its cgroup, it moves into a child (:data:`LEAF`), and the sandboxes' cgroups become
    the leaf's siblings.  A grader that starts worker processes calls this first, so that they start in the
    leaf; a Sandbox calls it too.  Elsewhere, run the grader alone in a cgroup of its own, e.g.
    ``systemd-run --user --scope -p Delegate=yes sgrad grade ...``.  With cgroup v1 there is nothing to do.
    """
    unified = _own_cgroups().get("unified")
    if unified is None:
        return ""
    try:
        _enable_controllers(unified)
    except OSError as error:
        return f"cgroup v2 {unified}: {error.strerror}"
    return ""


def _make_cgroups(name: str, memory_bytes: int, max_processes: int) -> _Cgroups:
    """A cgroup named ``name`` in each hierarchy that has one of this process's, capped; what could not be made
    is listed in ``problems``, and its cap falls back to a limit per process."""
    groups = _Cgroups()
    own = _own_cgroups()
    if "unified" in own:
        controllers: set[str] = set()
        with _noting(groups, own["unified"]):
            controllers = _enable_controllers(own["unified"])
        with _noting(groups, own["unified"]):
            directory = _make_directory(groups, own["unified"], name)
            if os.path.exists(os.path.join(directory, "cgroup.kill")):
                groups.killable = directory
            if "memory" in controllers:
                if memory_bytes:
                    _write(directory, "memory.max", memory_bytes)
                    if os.path.exists(os.path.join(directory, "memory.swap.max")):
                        _write(directory, "memory.swap.max", 0)
                groups.memory, groups.memory_version = directory, 2
            if "pids" in controllers:
                if max_processes:
                    _write(directory, "pids.max", max_processes)
                groups.pids, groups.pids_version = directory, 2
    # cgroup v1: a hierarchy per controller; the first file caps it, and memory's second, where the kernel counts
    # swap, caps memory and swap together
    v1_caps = (("memory", memory_bytes, ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")),
               ("pids", max_processes, ("pids.max",)))
    for controller, cap, cap_files in v1_caps:
        if getattr(groups, controller) is not None or controller not in own:
            continue
        with _noting(groups, own[controller]):
            directory = _make_directory(groups, own[controller], name)
            for cap_file in cap_files if cap else ():
                if cap_file == cap_files[0] or os.path.exists(os.path.join(directory, cap_file)):
                    _write(directory, cap_file, cap)
            setattr(groups, controller, directory)
            setattr(groups, f"{controller}_version", 1)
    return groups


@contextlib.contextmanager
def _noting(groups: _Cgroups, where: str) -> Any:
    """Note an OSError in ``groups.problems`` rather than raise it: the cap it concerns falls back."""
    try:
        yield
    except OSError as error:
        groups.problems.append(f"{where}: {error.strerror or error}")


def _own_cgroups() -> "dict[str, str]":
    """This process's cgroup directory in each mounted hierarchy: "unified" (v2), "memory" and "pids" (v1).

    A grader that moved itself into its LEAF (prepare_cgroups) is given the leaf's parent."""
    paths = {}
    with contextlib.suppress(OSError):
        with open("/proc/self/cgroup") as lines:
            for line in lines:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                for key in (["unified"] if number == "0" else controllers.split(",")):
                    paths[key] = path
    found = {}
    for key, (root, mount_point) in _cgroup_mounts().items():
        own = paths.get(key)
        if own is not None and _inside(own, root):
            directory = os.path.normpath(os.path.join(mount_point, os.path.relpath(own, root)))
            if key == "unified" and os.path.basename(directory) == LEAF:
                directory = os.path.dirname(directory)
            found[key] = directory
    return found


def _cgroup_mounts() -> "dict[str, tuple[str, str]]":
    """Each cgroup hierarchy mounted here, by key ("unified", or a v1 controller): (its root, its mount point)."""
    mounts: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo") as lines:
            for line in lines:
                before, after = line.split(" - ", 1)
                fields, (kind, _, options) = before.split(), after.split()
                root, mount_point = _unescape(fields[3]), _unescape(fields[4])
                keys = ["unified"] if kind == "cgroup2" else options.split(",") if kind == "cgroup" else []
                for key in keys:
                    mounts.setdefault(key, (root, mount_point))
    return mounts


def _unescape(text: str) -> str:
    """mountinfo's escapes undone (a space is written \\040)."""
    return re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), text)


def _enable_controllers(directory: str) -> "set[str]":
    """Give ``directory``'s children the memory and pids controllers it has; returns those its children have.

    If it holds a process (this one, alone), that process moves into LEAF first (prepare_cgroups)."""
    wanted = set(_read(directory, "cgroup.controllers").split()) & {"memory", "pids"}
    missing = wanted - set(_read(directory, "cgroup.subtree_control").split())
    if missing:
        change = " ".join(f"+{name}" for name in sorted(missing))
        try:
            _write(directory, "cgroup.subtree_control", change)
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
            if _read(directory, "cgroup.procs").split() != [str(os.getpid())]:
                raise OSError(errno.EBUSY, "other processes share this cgroup, so it cannot give children memory and "
                                           "pids controllers: run the grader in a cgroup of its own, e.g. "
                                           "systemd-run --user --scope -p Delegate=yes sgrad grade ...") from error
            leaf = os.path.join(directory, LEAF)
            os.makedirs(leaf, exist_ok=True)
            _write(leaf, "cgroup.procs", os.getpid())
            _write(directory, "cgroup.subtree_control", change)
    return set(_read(directory, "cgroup.subtree_control").split()) & {"memory", "pids"}


def _make_directory(groups: _Cgroups, parent: str, name: str) -> str:
    _remove_stale(parent)
    directory = os.path.join(parent, name)
    os.mkdir(directory)
    groups.made.append(directory)
    return directory


def _remove_stale(parent: str) -> None:
    """Remove the empty sandbox cgroups in ``parent`` whose grader is gone (killed before its __exit__)."""
    for name in os.listdir(parent):
        if name.startswith(f"{PREFIX}-") and not os.path.exists(f"/proc/{name.split('-')[2]}"):
            with contextlib.suppress(OSError):  # busy: a process is still in it
                os.rmdir(os.path.join(parent, name))


def _remove_directories(directories: "list[str]") -> None:
    """rmdir each cgroup; one whose last process is still exiting is busy for a moment."""
    for directory in reversed(directories):
        for _ in range(50):
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


def _read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as file:
        return file.read()


def _write(directory: str, name: str, value: "int | str") -> None:
    with open(os.path.join(directory, name), "w") as file:
        file.write(str(value))


def _number(directory: "str | None", name: str, key: "str | None" = None) -> "int | None":
    """The number in a cgroup file, or on its line ``key N``; None if there is none."""
    if directory is None:
        return None
    try:
        text = _read(directory, name)
    except OSError:
        return None
    if key is None:
        return int(text.strip()) if text.strip().isdigit() else None
    values = [line.split()[1] for line in text.splitlines() if line.split()[:1] == [key]]
    return int(values[0]) if values else None


# --- the sandbox -----------------------------------------------------------------------------------------------

class Sandbox:
    """A bubblewrap sandbox for one notebook's processes, capped by cgroups; a context manager.

    ``memory_mib``: the cap on the memory of all processes inside together, in MiB (0: none).
    ``max_processes``: the cap on tasks inside (threads count), so that a fork bomb stops there (0: none).
    ``ro_binds``, ``rw_binds``: (host path, sandbox path) pairs, mounted in order after HOME and /tmp, so
    that a bind may land inside either.  ``hide``: sandbox folders to cover with an empty read-only tmpfs.
    ``env``: the whole environment inside, with HOME, TMPDIR=/tmp, PATH (the interpreter's folder first) and
    LANG=C.UTF-8 added unless given.  ``home``: the private HOME, also the default working folder.
    ``use_cgroups=False`` skips the cgroups for the per-process limits (the fallback, made testable).
    """

    def __init__(self, *, memory_mib: int, max_processes: int = 128, ro_binds: Any = (), rw_binds: Any = (),
                 hide: Any = (), env: "dict[str, str]", home: str = "/home/student", use_cgroups: bool = True) -> None:
        for label, value in (("memory_mib", memory_mib), ("max_processes", max_processes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Sandbox: {label} must be an integer >= 0 (0: no cap), not {value!r}")
        if not all(isinstance(key, str) and isinstance(value, str) and key and "=" not in key
                   for key, value in env.items()):
            raise TypeError(f"Sandbox: env must map names (without '=') to strings, not {env!r}")
        if not home.startswith("/") or not all(isinstance(folder, str) and folder.startswith("/") for folder in hide):
            raise ValueError(f"Sandbox: home and hide take absolute paths inside the sandbox, not {home!r}, {hide!r}")
        check_available()
        self.memory_mib, self.max_processes = memory_mib, max_processes
        self.ro_binds, self.rw_binds = _binds("ro_binds", ro_binds), _binds("rw_binds", rw_binds)
        self.hide, self.home, self.use_cgroups = list(hide), home, use_cgroups
        self.env = {"HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                    "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", **env}
        self.name = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        self.memory_limited = self.processes_limited = "none"
        self.why_no_cgroup = ""  # what kept the caps from cgroups, in one line; "" if they are cgroups
        self._groups: _Cgroups | None = None  # while the sandbox is entered
        self._entered = False
        self._final: tuple[int | None, bool] = (None, False)  # peak memory and out of memory, at its end

    def __enter__(self) -> "Sandbox":
        if self._entered:
            raise RuntimeError("Sandbox: a sandbox serves one with block; make a new one for the next notebook")
        self._entered = True
        self._groups = _make_cgroups(self.name, self.memory_mib * 2**20, self.max_processes) if self.use_cgroups \
            else _Cgroups(problems=["use_cgroups=False"])
        self.memory_limited = ("none" if not self.memory_mib else f"cgroup v{self._groups.memory_version}"
                               if self._groups.memory else "per process (RLIMIT_AS)")
        self.processes_limited = ("none" if not self.max_processes else f"cgroup v{self._groups.pids_version}"
                                  if self._groups.pids else "per user (RLIMIT_NPROC)" if os.getuid() else "none")
        self.why_no_cgroup = "; ".join(self._groups.problems)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()
        if self._groups is not None:
            self._final = (self.peak_memory_bytes(), self.out_of_memory())
            _remove_directories(self._groups.made)
            self._groups = None

    def command(self, argv: "list[str]", *, cwd: "str | None" = None) -> "list[str]":
        """The host command line that runs ``argv`` inside this sandbox, in ``cwd`` (default: HOME)."""
        if self._groups is None:
            raise RuntimeError("Sandbox.command: only inside the sandbox's with block (with Sandbox(...) as sandbox:)")
        plan = {"join": [os.path.join(d, "cgroup.procs") for d in self._groups.made], "limits": self._limits(),
                "sandbox": self.name, "parent": os.getpid()}
        return [sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(plan), _bwrap().path,
                *self._bwrap_options(cwd or self.home), "--", *argv]

    def kill(self) -> None:
        """SIGKILL every process of the sandbox, until none is left (at most KILL_WAIT seconds); idempotent."""
        deadline = time.monotonic() + KILL_WAIT
        while True:
            if self._groups is not None and self._groups.killable:
                with contextlib.suppress(OSError):
                    _write(self._groups.killable, "cgroup.kill", 1)
            left = self._members()
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if not left or time.monotonic() > deadline:
                return
            time.sleep(0.01)

    def peak_memory_bytes(self) -> "int | None":
        """The most memory the sandbox's processes held together, if a cgroup counted it (memory.peak, v1's
        memory.max_usage_in_bytes); after the ``with``, as it was at its end."""
        if self._groups is None or self._groups.memory is None:
            return self._final[0]
        name = "memory.peak" if self._groups.memory_version == 2 else "memory.max_usage_in_bytes"
        return _number(self._groups.memory, name)

    def out_of_memory(self) -> bool:
        """Whether the memory cap killed a process inside (the cgroup's oom_kill count; v1 without it: failcnt).
        False without a cgroup: a process past RLIMIT_AS gets MemoryError, which only it sees."""
        if self._groups is None or self._groups.memory is None:
            return self._final[1]
        if self._groups.memory_version == 2:
            return bool(_number(self._groups.memory, "memory.events", "oom_kill"))
        killed = _number(self._groups.memory, "memory.oom_control", "oom_kill")
        return bool(killed if killed is not None else _number(self._groups.memory, "memory.failcnt"))

    def _limits(self) -> "dict[str, int]":
        """The per-process limits that stand in for the cgroups the sandbox could not make."""
        assert self._groups is not None
        limits = {}
        if self.memory_mib and self._groups.memory is None:
            limits["RLIMIT_AS"] = self.memory_mib * 2**20
        if self.max_processes and self._groups.pids is None and os.getuid() != 0:
            # RLIMIT_NPROC counts all of this user's processes on the host (root is exempt): allow as many more.
            limits["RLIMIT_NPROC"] = _processes_of_this_user() + self.max_processes
        return limits

    def _bwrap_options(self, cwd: str) -> "list[str]":
        options = [*_namespace_options(_bwrap(), self.name), *_system_options(),
                   "--tmpfs", "/tmp", "--tmpfs", "/dev/shm", "--tmpfs", self.home]
        for source, target in self.ro_binds:
            options += ["--ro-bind", source, target]
        for source, target in self.rw_binds:
            options += ["--bind", source, target]
        for folder in self.hide:
            options += ["--tmpfs", folder, "--remount-ro", folder]
        options += ["--remount-ro", "/", "--clearenv"]
        for key, value in self.env.items():
            options += ["--setenv", key, value]
        return options + ["--chdir", cwd]

    def _members(self) -> "list[int]":
        """The sandbox's processes that this host sees: the cgroups' members, and its launcher and bwrap
        processes (their command line holds the sandbox's name)."""
        found: set[int] = set()
        for directory in self._groups.made if self._groups else []:
            with contextlib.suppress(OSError):
                found.update(int(pid) for pid in _read(directory, "cgroup.procs").split())
        marker, starters = self.name.encode(), {sys.executable.encode(), _bwrap().path.encode()}
        names = {os.path.basename(starter)[:15] for starter in starters}  # /proc/pid/comm keeps 15 bytes
        for pid in _pids():
            with contextlib.suppress(OSError):
                # comm first: reading a command line waits on its process's memory, which may be busy
                with open(f"/proc/{pid}/comm", "rb") as file:
                    if file.read().rstrip(b"\n") not in names:
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    arguments = file.read().split(b"\0")
                if arguments[0] in starters and any(marker in argument for argument in arguments):
                    found.add(pid)
        found.discard(os.getpid())
        return sorted(found)


def _binds(label: str, binds: Any) -> "list[tuple[str, str]]":
    """``binds`` as (host path, sandbox path) pairs, each host path there and each sandbox path absolute."""
    pairs = []
    for pair in binds:
        if len(pair) != 2 or not all(isinstance(path, str) for path in pair) or not pair[1].startswith("/"):
            raise ValueError(f"Sandbox: {label} takes (host path, absolute sandbox path) pairs, not {pair!r}")
        if not os.path.exists(pair[0]):
            raise ValueError(f"Sandbox: {label}: there is no {pair[0]!r} to bind on {pair[1]!r}")
        pairs.append((pair[0], pair[1]))
    return pairs


def _pids() -> "list[int]":
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _processes_of_this_user() -> int:
    count = 0
    for pid in _pids():
        with contextlib.suppress(OSError):
            count += os.stat(f"/proc/{pid}").st_uid == os.getuid()
    return count


# --- a Jupyter kernel inside -----------------------------------------------------------------------------------

def kernel_manager(sandbox: Sandbox, connection_dir: str, *, cwd: "str | None" = None, **kwargs: Any) -> Any:
    """A jupyter_client ``AsyncKernelManager`` whose kernel runs inside ``sandbox`` (entered), in ``cwd``.

    The sandbox has no network of its own to share, so the kernel's sockets are files (``transport="ipc"``)
    in ``connection_dir``, which the sandbox must bind read-write at the same path (its real path:
    ``rw_binds=[(dir, dir)]``); keep that path short, a Unix socket's path holds 107 bytes.  ``kwargs`` go to
    the manager (``kernel_name="python3"``, say).  The kernel's environment is the sandbox's ``env``: the
    ``env`` given to ``start_kernel`` reaches only the launcher, and its ``cwd`` only sets where the launcher
    starts (a host folder); the kernel's folder inside is ``cwd`` here (default: the sandbox's HOME).

    The manager's process (its provisioner's pid) is the launcher, then bwrap: not the kernel.  So the
    manager interrupts the kernel by a message on its control channel (``interrupt_mode="message"``),
    which ipykernel turns into SIGINT for itself; a signal sent to the pid would kill bwrap, and the
    sandbox with it.  To stop the kernel and everything it started, call ``sandbox.kill()``
    (``shutdown_kernel(now=True)`` kills bwrap too, which ends the sandbox's processes the same way).
    """
    connection_dir = os.path.realpath(connection_dir)
    if not any(os.path.realpath(source) == connection_dir and target == connection_dir
               for source, target in sandbox.rw_binds):
        raise ValueError(f"kernel_manager: the sandbox must bind {connection_dir} read-write at the same path: "
                         f"Sandbox(rw_binds=[({connection_dir!r}, {connection_dir!r})], ...)")
    stem = os.path.join(connection_dir, f"kernel-{secrets.token_hex(4)}")
    if len(os.fsencode(stem)) + len("-65535") > SOCKET_PATH_LIMIT:
        raise ValueError(f"kernel_manager: connection_dir {connection_dir!r} is too long for the kernel's "
                         f"Unix sockets (at most {SOCKET_PATH_LIMIT - 21} bytes): use a shorter folder")
    return _kernel_manager_class()(sandbox=sandbox, sandbox_cwd=cwd, transport="ipc", ip=stem,
                                   connection_file=stem + ".json", **kwargs)


@functools.cache
def _kernel_manager_class() -> Any:
    from jupyter_client.manager import AsyncKernelManager  # here: jupyter_client loads only when a kernel starts

    class SandboxedKernelManager(AsyncKernelManager):
        """A kernel manager whose kernel command runs inside a Sandbox, interrupted by message."""

        def __init__(self, *args: Any, sandbox: Sandbox, sandbox_cwd: "str | None" = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.sandbox, self.sandbox_cwd = sandbox, sandbox_cwd

        @property
        def kernel_spec(self) -> Any:
            spec = super().kernel_spec
            if spec is not None:
                spec.interrupt_mode = "message"
            return spec

        def format_kernel_cmd(self, extra_arguments: Any = None) -> "list[str]":
            return self.sandbox.command(super().format_kernel_cmd(extra_arguments), cwd=self.sandbox_cwd)

    return SandboxedKernelManager
