"""The grader's sandbox (sgrad.course.sandbox): what a notebook's processes can see, write, reach and outlive.

Every test runs real processes in a real bubblewrap sandbox and looks at them from the host's side: a
process of a sandbox is found by a token in its environment (``SANDBOX_TEST=<token>``), never through the
sandbox's own bookkeeping.  Without bwrap the tests are skipped, unless ``SGRAD_REQUIRE_SANDBOX=1``.
"""

import asyncio
import contextlib
import json
import os
import pathlib
import secrets
import socket
import stat
import subprocess
import sys
import time
import zipfile

import pytest

import sgrad
from sgrad.course.sandbox import Sandbox, SandboxUnavailable, check_available, kernel_manager, python_binds, python_hidden

SOURCE = pathlib.Path(sgrad.__file__).parent.parent  # the checkout whose sgrad these tests import
TIMEOUT = 60


@pytest.fixture(autouse=True)
def bwrap_works():
    try:
        check_available()
    except SandboxUnavailable as error:
        if os.environ.get("SGRAD_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"SGRAD_REQUIRE_SANDBOX=1, but: {error}")
        pytest.skip(f"no sandbox here: {error}")


@pytest.fixture
def token():
    return secrets.token_hex(8)


def sandbox(token, *, memory_mib=512, env=None, ro_binds=(), **kwargs):
    """A Sandbox with this interpreter inside, whose processes carry ``SANDBOX_TEST=token``."""
    return Sandbox(memory_mib=memory_mib, ro_binds=[*python_binds(), *ro_binds], hide=python_hidden(),
                   env={"SANDBOX_TEST": token, "OPENBLAS_NUM_THREADS": "1", **(env or {})}, **kwargs)


def run(box, code, timeout=TIMEOUT, **kwargs):
    """Run ``code`` in ``python -c`` inside ``box``; the finished process, its output as text."""
    return subprocess.run(box.command(["python", "-c", code], **kwargs), capture_output=True, text=True,
                          timeout=timeout)


def marked(token):
    """The host's pids whose environment holds ``SANDBOX_TEST=token``."""
    wanted, found = f"SANDBOX_TEST={token}".encode(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if wanted in pathlib.Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    found.append(int(name))
    return found


def on_the_way(folder):
    """The names in ``folder`` that the sandbox makes on the way to the folders of python_binds() in it."""
    folder = pathlib.Path(folder)
    return {pathlib.Path(inside).relative_to(folder).parts[0] for _, inside in python_binds()
            if pathlib.Path(inside).is_relative_to(folder) and pathlib.Path(inside) != folder}


def left_after(token, seconds):
    """The processes marked with ``token`` still there ``seconds`` from now, or none as soon as they are gone."""
    deadline = time.monotonic() + seconds
    while marked(token) and time.monotonic() < deadline:
        time.sleep(0.01)
    return marked(token)


@contextlib.contextmanager
def started(box, code):
    """Start ``code`` inside ``box``, wait for it to print "ready ...", and yield the process and the rest of that
    line; at the end, or on a failed assertion, kill the sandbox and reap the process."""
    process = subprocess.Popen(box.command(["python", "-c", code]), stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        first = process.stdout.readline().split()
        assert first[:1] == ["ready"], f"the process inside said {first}"
        yield process, first[1:]
    finally:
        box.kill()
        process.stdout.close()
        process.wait(timeout=TIMEOUT)


# --- what the sandbox sees and writes --------------------------------------------------------------------------

TRY_WRITES = """
import json, os, sys, sysconfig
tried = {}
for path in [sys.prefix + "/planted", sysconfig.get_paths()["purelib"] + "/planted.pth", "/usr/planted",
             "/etc/planted", "/planted"]:
    try:
        open(path, "w").close()
        tried[path] = "written"
    except OSError as error:
        tried[path] = error.strerror
print(json.dumps(tried))
"""


def test_the_system_and_the_python_environment_are_read_only(token):
    with sandbox(token) as box:
        result = run(box, TRY_WRITES)
    assert result.returncode == 0, result.stderr
    tried = json.loads(result.stdout)
    assert len(tried) == 5
    assert set(tried.values()) == {"Read-only file system"}, tried


def test_what_others_may_not_read_in_etc_is_unreadable_inside(token):
    """The sandbox's user is the grader's on the host: a grader run as root must not lend it root's eyes."""
    private = [str(path) for path in pathlib.Path("/etc").rglob("*") if path.is_file() and not path.is_symlink()
               and not path.stat().st_mode & stat.S_IROTH and os.access(path, os.R_OK)]
    if not private:
        pytest.skip("nothing in /etc that this user may read and others may not")
    code = ("import json, sys\nseen = {}\nfor path in sys.argv[1:]:\n    try:\n"
            "        seen[path] = len(open(path, 'rb').read())\n    except OSError as error:\n"
            "        seen[path] = error.strerror\nprint(json.dumps(seen))")
    with sandbox(token) as box:
        result = subprocess.run(box.command(["python", "-c", code, *private]), capture_output=True, text=True,
                                timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    read = {path: seen for path, seen in json.loads(result.stdout).items() if seen not in (0, "Permission denied")}
    assert read == {}


def test_pip_cannot_install_into_the_environment(token, tmp_path):
    """A wheel made here, installed by pip inside: it fails, and the host's site-packages holds nothing new."""
    wheel = tmp_path / "sandboxprobe-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sandboxprobe.py", "PLANTED = True\n")
        archive.writestr("sandboxprobe-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: sandboxprobe\n"
                                                                "Version: 0.1\n")
        archive.writestr("sandboxprobe-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                                             "Root-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr("sandboxprobe-0.1.dist-info/RECORD", "sandboxprobe.py,,\nsandboxprobe-0.1.dist-info/"
                                                              "METADATA,,\nsandboxprobe-0.1.dist-info/WHEEL,,\n"
                                                              "sandboxprobe-0.1.dist-info/RECORD,,\n")
    site_packages = pathlib.Path(subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig."
                                                 "get_paths()['purelib'])"], capture_output=True, text=True,
                                                check=True).stdout.strip())
    with sandbox(token, ro_binds=[(str(tmp_path), "/wheels")]) as box:
        result = subprocess.run(box.command(["python", "-m", "pip", "install", "--no-index", "--no-deps",
                                             "--disable-pip-version-check", f"/wheels/{wheel.name}"]),
                                capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode != 0, result.stdout
    assert "Read-only file system" in result.stdout + result.stderr
    assert not list(site_packages.glob("sandboxprobe*"))


LOOK_AROUND = """
import json, os
home = os.listdir(os.environ["HOME"])
tmp = os.listdir("/tmp")
os.makedirs(os.path.expanduser("~/.ipython/profile_default/startup"))
with open(os.path.expanduser("~/.ipython/profile_default/startup/00-planted.py"), "w") as file:
    file.write("print('planted')")
with open("/tmp/planted", "w") as file:
    file.write("planted")
print(json.dumps({"home": home, "tmp": tmp, "cwd": os.getcwd()}))
"""


def test_home_and_tmp_are_private_empty_and_new_in_each_sandbox(token):
    seen = []
    for _ in range(2):
        with sandbox(token) as box:
            result = run(box, LOOK_AROUND)
        assert result.returncode == 0, result.stderr
        seen.append(json.loads(result.stdout))
    for look in seen:
        assert look["home"] == [] and set(look["tmp"]) == on_the_way("/tmp") and look["cwd"] == "/home/student"
    assert not pathlib.Path("/home/student/.ipython").exists()  # nothing reached the host either


def test_the_environment_inside_is_the_one_given_and_the_defaults(token):
    with sandbox(token, env={"LANG": "en_GB.UTF-8"}) as box:
        # As the process starts: Python then adds LC_CTYPE for a locale it lacks (PEP 538).
        result = run(box, "import json; print(json.dumps([pair.decode() for pair in "
                          "open('/proc/self/environ', 'rb').read().split(bytes(1)) if pair]))")
    assert result.returncode == 0, result.stderr
    assert dict(pair.split("=", 1) for pair in json.loads(result.stdout)) == {
        "SANDBOX_TEST": token, "OPENBLAS_NUM_THREADS": "1", "LANG": "en_GB.UTF-8", "HOME": "/home/student",
        "TMPDIR": "/tmp", "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "PWD": "/home/student"}  # bwrap's --chdir sets PWD


def test_the_hosts_home_is_invisible_but_for_the_folders_bound(token):
    home = pathlib.Path.home()
    with sandbox(token) as box:
        result = run(box, f"import json, os; print(json.dumps(os.listdir({str(home)!r})))")
    assert result.returncode == 0, result.stderr
    assert len(os.listdir(home)) > len(on_the_way(home))  # something to hide
    assert set(json.loads(result.stdout)) == on_the_way(home)


def test_a_classmates_folder_and_the_sgrad_source_are_invisible(token, tmp_path):
    for student in ("alice", "bob"):
        (tmp_path / student).mkdir()
        (tmp_path / student / "07_homework.ipynb").write_text(f"{student}'s answers")
    code = ("import json, os, sys; print(json.dumps([{path: os.path.exists(path) for path in sys.argv[2:]}, "
            "os.listdir(sys.argv[1]) if os.path.isdir(sys.argv[1]) else []]))")
    paths = ["/home/student/work/07_homework.ipynb", str(tmp_path / "bob" / "07_homework.ipynb"),
             str(tmp_path / "bob"), str(SOURCE / "sgrad" / "__init__.py"), str(SOURCE / "sgrad")]
    with sandbox(token, rw_binds=[(str(tmp_path / "alice"), "/home/student/work")]) as box:
        seen = subprocess.run(box.command(["python", "-c", code, str(SOURCE), *paths]), capture_output=True,
                              text=True, timeout=TIMEOUT)
        imported = run(box, "import sgrad")
    exists, checkout = json.loads(seen.stdout)
    assert exists == {paths[0]: True, paths[1]: False, paths[2]: False, paths[3]: False, paths[4]: False}
    assert set(checkout) == on_the_way(SOURCE)  # nothing of the checkout but the way to a bound venv inside it
    assert imported.returncode == 1 and "No module named 'sgrad'" in imported.stderr


def test_sgrad_imports_inside_only_from_a_copy_bound_for_it(token):
    course = [(str(SOURCE / "sgrad"), "/opt/course/sgrad"), (str(SOURCE / "data_gen"), "/opt/course/data_gen")]
    with sandbox(token, ro_binds=course, env={"PYTHONPATH": "/opt/course"}) as box:
        result = run(box, "import sgrad; print(sgrad.__file__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "/opt/course/sgrad/__init__.py"


def test_an_installed_sgrad_is_hidden_under_an_empty_folder(token, tmp_path, monkeypatch):
    """A non-editable install: site-packages/sgrad exists, and the sandbox covers it (python_hidden)."""
    site_packages = tmp_path / "lib" / "site-packages"
    (site_packages / "sgrad").mkdir(parents=True)
    (site_packages / "sgrad" / "__init__.py").write_text("SECRET = 'the reference answers'\n")
    (site_packages / "other").mkdir()
    (site_packages / "other" / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(site_packages))
    assert (str(site_packages), str(site_packages)) in python_binds()
    assert python_hidden() == [str(site_packages / "sgrad")]
    code = (f"import os, sys; sys.path.insert(0, {str(site_packages)!r}); import other, sgrad; "
            f"print(other.VALUE, os.listdir({str(site_packages / 'sgrad')!r}), getattr(sgrad, 'SECRET', None))")
    with sandbox(token) as box:
        result = run(box, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["7", "[]", "None"]


def test_the_bound_python_folders_leave_the_checkout_out():
    assert not [inside for _, inside in python_binds() if SOURCE.is_relative_to(inside)]
    assert python_hidden() == []  # sgrad is installed editable here, or imported from PYTHONPATH


# --- what the sandbox reaches ----------------------------------------------------------------------------------

def test_a_server_on_the_hosts_loopback_is_out_of_reach(token):
    code = ("import socket, sys\n"
            "try:\n"
            "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close(); print('connected')\n"
            "except OSError as error:\n"
            "    print(type(error).__name__)\n"
            "print(sorted(name for _, name in socket.if_nameindex()))")
    # A listening socket completes connections by itself (its backlog), so no thread needs to accept them.
    with socket.create_server(("127.0.0.1", 0)) as server, sandbox(token) as box:
        port = server.getsockname()[1]
        result = subprocess.run(box.command(["python", "-c", code, str(port)]), capture_output=True, text=True,
                                timeout=TIMEOUT)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # from outside, it answers
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["ConnectionRefusedError", "['lo']"]


# --- what the sandbox outlives ---------------------------------------------------------------------------------

def test_it_sees_only_its_own_processes(token):
    code = "import os; print(sorted(int(name) for name in os.listdir('/proc') if name.isdigit()))"
    with sandbox(token) as box:
        result = run(box, code)
    assert result.returncode == 0, result.stderr
    assert eval(result.stdout) == [1, 2]  # bwrap's init and this python


def test_it_runs_as_user_1000_without_capabilities_and_cannot_make_a_user_namespace(token):
    if not os.path.exists("/usr/bin/unshare"):
        pytest.skip("no /usr/bin/unshare to try a user namespace with")
    code = ("import subprocess; print(open('/proc/self/status').read().split('CapEff:')[1].split()[0], "
            "subprocess.run(['unshare', '--user', 'true'], capture_output=True).returncode)")
    with sandbox(token) as box:
        result = run(box, f"import os; print(os.getuid(), os.getgid()); {code}")
    assert result.returncode == 0, result.stderr
    uid, gid, capabilities, unshared = result.stdout.split()
    assert (uid, gid, int(capabilities, 16)) == ("1000", "1000", 0)
    assert unshared != "0"


DETACH = """
import os, subprocess, time
subprocess.run(["sh", "-c", "(setsid sleep 600 &)"])  # a double fork, in a session of its own
subprocess.Popen(["sleep", "600"], start_new_session=True)
def sleeping():
    return [pid for pid in os.listdir("/proc") if pid.isdigit() and open(f"/proc/{pid}/comm").read() == "sleep\\n"]
while len(sleeping()) < 2:  # the double fork's sleep may not have started yet
    time.sleep(0.01)
print("ready", flush=True)
"""


def test_processes_left_behind_end_with_the_main_one(token):
    with sandbox(token) as box, started(box, DETACH) as (process, _):  # prints "ready", then ends
        assert process.wait(timeout=TIMEOUT) == 0
        # bwrap returns when the main process ends; its init, ending then, takes the rest down with it.
        assert left_after(token, seconds=2) == []


PARENT = """
import subprocess, sys, time
sys.path[:0] = [{tests!r}, {source!r}]
from test_sandbox import sandbox
with sandbox({token!r}) as box:
    launcher = subprocess.Popen(box.command(["python", "-c", "import time; time.sleep(600)"]))
    print(launcher.pid, flush=True)
    time.sleep(600)
"""


def test_a_sandbox_ends_with_its_parent_killed_while_it_starts(token):
    """The grader killed outright (SIGKILL) just after it started a sandbox, before bwrap has set it up and tied
    itself to its parent: the launcher ties it from its first instruction on, so nothing of it is left."""
    code = PARENT.format(tests=str(pathlib.Path(__file__).parent), source=str(SOURCE), token=token)
    for _ in range(5):
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        launcher = int(parent.stdout.readline())
        parent.kill()
        parent.wait(timeout=TIMEOUT)
        parent.stdout.close()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{launcher}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{launcher}"), "the sandbox's bwrap outlived its parent"
        assert left_after(token, seconds=5) == []


def killed_at_once(token, code, processes=None):
    """Whether ``box.kill()`` ends ``code`` run in a sandbox, and all it started (``processes`` of them, if
    given, before the kill), within 1.5 s."""
    with sandbox(token) as box, started(box, code) as (process, _):
        assert processes is None or len(marked(token)) == processes
        began = time.monotonic()
        box.kill()
        took = time.monotonic() - began
        assert marked(token) == []
        assert process.wait(timeout=5) != 0
    return took < 1.5


def test_kill_ends_detached_processes_at_once(token):
    # python and the two sleeps (bwrap's processes have the host's environment)
    assert killed_at_once(token, DETACH + "time.sleep(600)", processes=3)


def test_kill_ends_a_process_that_ignores_sigterm_and_sigint_at_once(token):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)")
    assert killed_at_once(token, code)


FORK_LOOP = """
import os, time
made = 0
for _ in range(300):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
    except OSError as error:
        print("ready stopped", made, error.strerror, flush=True)
        break
    made += 1
else:
    print("ready not stopped", made, flush=True)
time.sleep(600)
"""


def test_a_fork_loop_stops_at_max_processes_and_dies_on_kill(token):
    with sandbox(token, max_processes=24) as box:
        if box.processes_limited == "none":
            pytest.skip(f"no cap on processes here: {box.why_no_cgroup}")
        with started(box, FORK_LOOP) as (_, said):
            assert said[0] == "stopped" and 10 < int(said[1]) < 24, said
            box.kill()
            assert marked(token) == []


# --- what the sandbox may use ----------------------------------------------------------------------------------

TOUCH = ("import sys, time\nheld = b'x' * ({mib} * 2**20)  # written, so each page is taken\n"
         "time.sleep({hold})\nprint('held', flush=True)")


@pytest.mark.parametrize("use_cgroups", [True, False], ids=["cgroup", "per-process"])
def test_a_process_past_the_memory_cap_is_stopped(token, use_cgroups):
    with sandbox(token, memory_mib=128, use_cgroups=use_cgroups) as box:
        result = run(box, TOUCH.format(mib=256, hold=0))
        if use_cgroups and not box.memory_limited.startswith("cgroup"):
            pytest.skip(f"no memory cgroup here: {box.why_no_cgroup}")
        assert "held" not in result.stdout
        assert result.returncode != 0
        if use_cgroups:
            assert box.out_of_memory()
            assert box.peak_memory_bytes() <= 128 * 2**20
        else:
            assert box.memory_limited == "per process (RLIMIT_AS)"
            assert "MemoryError" in result.stderr


def test_the_memory_cap_covers_all_processes_together(token):
    """Two processes of 100 MiB each, under a cap of 160 MiB: each alone fits, together they do not."""
    one = TOUCH.format(mib=100, hold=2)
    with sandbox(token, memory_mib=160) as box:
        if not box.memory_limited.startswith("cgroup"):
            pytest.skip(f"no memory cgroup here, the cap is per process: {box.why_no_cgroup}")
        alone = run(box, one)
        together = subprocess.run(box.command(["sh", "-c", 'python -c "$0" & python -c "$0" & wait', one]),
                                  capture_output=True, text=True, timeout=TIMEOUT)
        assert box.out_of_memory()
        assert box.name not in pathlib.Path("/proc/self/cgroup").read_text()  # the test's process is outside
    assert alone.stdout.split() == ["held"]
    assert together.stdout.split() == ["held"]  # one of the two was killed


# --- a Jupyter kernel inside -----------------------------------------------------------------------------------

async def talk_to_a_kernel_inside(box, connection_dir):
    """Start a python3 kernel in ``box``; what ``1+1`` and a look at its process gave, and the reply to an
    interrupted ``time.sleep(60)``."""
    manager = kernel_manager(box, connection_dir, kernel_name="python3")
    await manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=TIMEOUT)
        results = []
        for code in ("1+1", "import os; os.getpid(), os.getcwd(), os.environ['SANDBOX_TEST']"):
            outputs = []
            reply = await client.execute_interactive(code, timeout=TIMEOUT, output_hook=outputs.append)
            assert reply["content"]["status"] == "ok", reply["content"]
            results += [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]
        sleeping = client.execute("import time; time.sleep(60)")
        await asyncio.sleep(1)
        began = time.monotonic()
        await manager.interrupt_kernel()
        while True:
            reply = await client.get_shell_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == sleeping:
                break
        interrupted = (reply["content"].get("ename"), time.monotonic() - began)
    finally:
        client.stop_channels()
        box.kill()
        await manager.shutdown_kernel(now=True)  # reaps the launcher, which kill() ended
    return results, interrupted


def test_a_jupyter_kernel_runs_inside_and_ends_with_kill(token, tmp_path):
    connection_dir = str(tmp_path.resolve())
    with sandbox(token, rw_binds=[(connection_dir, connection_dir)]) as box:
        results, (error, took) = asyncio.run(talk_to_a_kernel_inside(box, connection_dir))
        assert marked(token) == []
    assert results[0] == "2"
    pid, cwd, seen_token = eval(results[1])
    assert (pid, cwd, seen_token) == (2, "/home/student", token)  # in the sandbox's pid namespace, as given
    assert (error, took < 5) == ("KeyboardInterrupt", True)


def test_a_kernel_needs_its_connection_folder_bound_at_the_same_path(token, tmp_path):
    with sandbox(token, rw_binds=[(str(tmp_path), "/home/student/work")]) as box:
        with pytest.raises(ValueError, match="read-write at the same path"):
            kernel_manager(box, str(tmp_path))


# --- where there is no sandbox ---------------------------------------------------------------------------------

def test_without_bwrap_the_reason_is_one_line_that_says_what_to_do():
    code = ("from sgrad.course.sandbox import SandboxUnavailable, check_available\n"
            "try:\n    check_available()\nexcept SandboxUnavailable as error:\n    print(error)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT,
                            env={**os.environ, "PATH": "/nonexistent"})
    assert result.stderr == ""
    assert result.stdout.count("\n") == 1
    assert "no bwrap on PATH" in result.stdout and "apt-get install bubblewrap" in result.stdout


def test_bad_arguments_are_refused_in_words(tmp_path):
    with pytest.raises(ValueError, match="memory_mib must be an integer >= 0"):
        Sandbox(memory_mib=-1, env={})
    with pytest.raises(ValueError, match=f"there is no '{tmp_path}/missing' to bind"):
        Sandbox(memory_mib=0, rw_binds=[(str(tmp_path / "missing"), "/home/student/work")], env={})
    with pytest.raises(ValueError, match="absolute sandbox path"):
        Sandbox(memory_mib=0, ro_binds=[(str(tmp_path), "work")], env={})
    with pytest.raises(RuntimeError, match="only inside the sandbox's with block"):
        Sandbox(memory_mib=0, env={}).command(["true"])
