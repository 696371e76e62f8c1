"""``sgrad parallel`` on Ray as a user meets it: joining a real cluster started with ``ray start --head`` on the
loopback address (Ray's defaults, token authentication included), and Ray's failures in sgrad's words, each in
one line within a bounded time, with no process left behind.  Skipped where Ray is not installed.

The cluster is stopped by ending its own process group (``ray start --block`` in a session of its own), not by
``ray stop``, which would stop every Ray on the machine, other people's too.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_group_ends, started, tiny_mnist

from sgrad.parallel.ray_engine import LOOPBACK_ONLY

pytest.importorskip("ray")

SGRAD = Path(sys.executable).parent / "sgrad"
RAY = Path(sys.executable).parent / "ray"
TINY = ["--iterations", "6", "--eval-every", "3", "--hidden", "16", "--generator-hidden", "8", "--batch-size", "8",
        "--schedules", "dni", "--workers", "1,2", "--no-verify", "--dtype", "float64", "--engine", "ray"]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def sgrad_parallel(cwd, *args, env=None, timeout=300):
    return subprocess.run([str(SGRAD), "parallel", *TINY, "--data", str(tiny_mnist(cwd)), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def cluster():
    """A Ray head started as its documentation says, on 127.0.0.1 with Ray's loopback switch; yields its address."""
    port, temp = free_port(), tempfile.mkdtemp(prefix="sgr", dir="/tmp")  # short: Ray's socket paths are limited
    env = {**os.environ, **LOOPBACK_ONLY}
    head = subprocess.Popen([str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                             "--num-cpus", "4", "--include-dashboard", "false", "--disable-usage-stats",
                             "--temp-dir", temp, "--block"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # Ray drains for up to 30 s, then ends its processes
        try:
            head.wait(timeout=60)
        finally:
            try:
                os.killpg(head.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            head.wait(timeout=30)
            assert_group_ends(head.pid, "the Ray head")
            shutil.rmtree(temp, ignore_errors=True)


def test_joining_a_cluster_started_with_rays_defaults_on_the_loopback_address_works(cluster, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}  # Ray's defaults
    result = sgrad_parallel(tmp_path, "--ray-address", cluster, "--out", "out", env=env)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if not line.startswith("[dni, ")] == [
        "wrote out/results.md, timeline.png, accuracy_time.png and histories.json"]
    assert "| dni | 2 |" in result.stdout


def test_a_cluster_that_refuses_the_token_is_reported_in_one_line_that_says_what_to_set(cluster, tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32}
    start = time.monotonic()
    result = sgrad_parallel(tmp_path, "--ray-address", cluster, "--out", "out", env=env)
    if "asks for an authentication token" not in result.stderr:
        pytest.skip("this cluster runs without token authentication (no token at hand when it started)")
    assert time.monotonic() - start < 45
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"sgrad parallel: error: the Ray cluster at {cluster} asks for an authentication token (Ray's token "
        "authentication) and the token this process has is not the cluster's: set RAY_AUTH_TOKEN to the cluster's "
        "token (ray get-auth-token, on its head node), or RAY_AUTH_MODE=disabled if the cluster runs without "
        "authentication"]


def test_an_address_where_nothing_listens_is_refused_at_once_in_one_line(tmp_path):
    port = free_port()
    start = time.monotonic()
    result = sgrad_parallel(tmp_path, "--ray-address", f"127.0.0.1:{port}", "--out", "out")
    assert time.monotonic() - start < 30
    assert (result.returncode, result.stderr) == (2, (
        f"sgrad parallel: error: no Ray cluster answers at 127.0.0.1:{port} (connection refused); start one there "
        f"(ray start --head --port {port}), or check the address\n"))


def test_an_address_where_something_else_listens_is_refused_at_once_in_one_line(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer_as_a_web_server():
            connection, _ = server.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer_as_a_web_server, daemon=True).start()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        start = time.monotonic()
        result = sgrad_parallel(tmp_path, "--ray-address", address, "--out", "out")
    assert time.monotonic() - start < 30
    assert (result.returncode, result.stderr) == (2, (
        f"sgrad parallel: error: something answers at {address}, but not a Ray cluster's head (it does not answer "
        "as a gRPC server does); check the address: the head node's port, 6379 by default\n"))


def test_a_broken_ray_install_is_reported_with_its_cause_in_one_line(tmp_path):
    broken = tmp_path / "site" / "ray"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libray_core.so: cannot open shared object file')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(broken.parent),
                                                                     os.environ.get("PYTHONPATH")]))}
    result = sgrad_parallel(tmp_path, "--out", "out", env=env)
    assert (result.returncode, result.stderr) == (2, (
        "sgrad parallel: error: Ray is installed but cannot be imported: ImportError: libray_core.so: cannot open "
        "shared object file; reinstall it with pip install --force-reinstall 'ray>=2.60'\n"))


def descendants(pid, name):
    """The pids of ``pid``'s process group whose command line starts with ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == pid and \
                    (entry / "cmdline").read_bytes().split(b"\0")[0].endswith(name):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def long_run(tmp_path):
    return [str(SGRAD), "parallel", *TINY, "--iterations", "1000000", "--eval-every", "50", "--checkpoint-every",
            "50", "--workers", "2", "--data", str(tiny_mnist(tmp_path)), "--out", str(tmp_path / "out")]


def test_a_raylet_killed_mid_run_ends_the_run_in_one_line_and_leaves_no_process(tmp_path):
    with started(long_run(tmp_path), cwd=tmp_path) as run:
        assert run.stderr.readline().startswith("[dni, 2 workers] iteration 50/1000000")
        [raylet] = descendants(run.pid, b"raylet")  # of the Ray that sgrad started for the run
        os.kill(raylet, signal.SIGKILL)
        _, rest = run.communicate(timeout=120)
    assert run.returncode == 1
    [line] = [line for line in rest.splitlines() if not line.startswith("[dni, 2 workers] iteration")]
    assert line.startswith("sgrad parallel: the Ray cluster failed under the workers: "), line
    assert "Traceback" not in rest
    assert_group_ends(run.pid, "the command and its Ray", seconds=60)


def test_sigterm_ends_a_run_on_ray_with_one_line_status_143_and_no_ray_lines(tmp_path):
    with started(long_run(tmp_path), cwd=tmp_path) as run:
        run.stderr.readline()
        assert run.stderr.readline().startswith("[dni, 2 workers] iteration 100/1000000")  # after a checkpoint
        os.killpg(run.pid, signal.SIGTERM)
        _, rest = run.communicate(timeout=120)
    assert run.returncode == 143
    assert [line for line in rest.splitlines() if not line.startswith("[dni, 2 workers] iteration")] == [
        f"sgrad parallel: terminated; rerun the same command to resume from the checkpoints in {tmp_path}/out/"
        "checkpoints"]
    assert_group_ends(run.pid, "the command and its Ray", seconds=60)
    assert (tmp_path / "out" / "checkpoints" / "dni-2.npz").is_file()
