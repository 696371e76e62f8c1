"""Runs side by side (sgrad/experiments/side_by_side.py): each in a worker process, results in the runs' order,
errors raised again in the driver, and no worker left behind whatever happens."""

import atexit
import contextlib
import functools
import multiprocessing
import os
import signal
import threading
import time

import pytest

from sgrad.experiments import side_by_side
from sgrad.experiments.side_by_side import run_side_by_side
from sgrad.parallel.engines import WorkerFailed


def says_and_returns(value, progress):
    if progress is not None:
        progress(f"{value} says hello")
    return {"value": value, "pid": os.getpid(), "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}


def raises(progress):
    raise ValueError("this run cannot go on; change its settings")


def dies(progress):
    os.kill(os.getpid(), signal.SIGKILL)


def sleeps(progress):
    time.sleep(120)


def no_worker_left():
    return multiprocessing.active_children() == []


def test_each_run_gives_its_result_in_the_runs_order_from_a_process_of_its_own_with_one_blas_thread():
    runs = {name: functools.partial(says_and_returns, name) for name in ("c", "a", "b")}
    lines = []
    results = run_side_by_side(runs, workers=2, progress=lines.append)
    assert list(results) == ["c", "a", "b"]
    assert [result["value"] for result in results.values()] == ["c", "a", "b"]
    assert len({result["pid"] for result in results.values()} | {os.getpid()}) == 4
    assert [result["blas_threads"] for result in results.values()] == ["1", "1", "1"]
    assert sorted(lines) == ["a says hello", "b says hello", "c says hello"]
    assert no_worker_left()


def test_without_workers_the_runs_go_one_after_another_in_this_process():
    lines = []
    results = run_side_by_side({"a": functools.partial(says_and_returns, "a")}, progress=lines.append)
    assert results["a"]["pid"] == os.getpid()
    assert lines == ["a says hello"]


def test_runs_report_no_lines_when_nobody_listens():
    results = run_side_by_side({"a": functools.partial(says_and_returns, "a")}, workers=1)
    assert results["a"]["value"] == "a"


def test_a_run_that_raises_stops_every_worker_and_its_error_is_raised_here_with_its_message():
    start = time.monotonic()
    with pytest.raises(ValueError) as raised:
        run_side_by_side({"sleeper": sleeps, "bad": raises}, workers=2)
    assert time.monotonic() - start < 60  # the sleeper was stopped, not waited for
    assert str(raised.value) == "this run cannot go on; change its settings"
    assert any("In the worker:" in note and "raises" in note for note in raised.value.__notes__)
    assert no_worker_left()


def test_a_run_whose_process_dies_stops_every_worker_with_a_message_naming_the_run_and_the_cause():
    with pytest.raises(WorkerFailed, match=r"^the doomed run's worker died: killed by signal SIGKILL \(9\)$"):
        run_side_by_side({"sleeper": sleeps, "doomed": dies}, workers=2)
    assert no_worker_left()


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt in this process, as at a terminal, also when pytest was started with it
    ignored (as a shell starts a command in the background)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_in_the_driver_stops_every_worker(ctrl_c_raises):
    # Sent to the driver's main thread, as a terminal's Ctrl-C reaches a command with one thread: if it comes while a
    # worker is being started, the driver takes it once the worker has started.
    timer = threading.Timer(2.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_side_by_side({"first": sleeps, "second": sleeps}, workers=2)
    finally:
        timer.cancel()
    assert no_worker_left()


def naps(progress):
    time.sleep(10)


def test_a_ctrl_c_while_a_worker_starts_is_taken_once_it_has_started(monkeypatch, ctrl_c_raises):
    real_environment = side_by_side.environment

    @contextlib.contextmanager
    def ctrl_c_then_environment(variables):  # Ctrl-C reaches the driver just as it starts a worker
        signal.raise_signal(signal.SIGINT)
        with real_environment(variables):
            yield

    monkeypatch.setattr(side_by_side, "environment", ctrl_c_then_environment)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_side_by_side({"first": naps, "second": naps}, workers=2)
    assert time.monotonic() - start < 5  # taken at once, not after the runs' 10 s
    assert no_worker_left()


def terminated_on_its_way_out(progress):
    """Returns, and at the interpreter's exit gets SIGTERM, as from a driver that stops a worker while it ends."""
    def sigterm_while_exiting():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)  # the signal is taken here, inside an atexit callback

    atexit.register(sigterm_while_exiting)
    return "done"


def test_a_sigterm_that_reaches_a_worker_on_its_way_out_ends_it_without_a_word(capfd):
    """Its run over, a worker ends at a SIGTERM: no SystemExit raised into the interpreter's exit, which would
    print 'Exception ignored in atexit callback' and a traceback on the command's stderr."""
    assert run_side_by_side({"a": terminated_on_its_way_out}, workers=1) == {"a": "done"}
    assert no_worker_left()
    assert capfd.readouterr().err == ""


class SignalledWhenCollected:
    """An object whose finalizer gets SIGTERM: the handler runs inside ``__del__``, where Python cannot raise."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the signal is taken here, inside the finalizer
            pass


def terminated_inside_a_finalizer(cleaned, progress):
    """A run whose SIGTERM lands in a finalizer; it writes ``cleaned`` as it unwinds."""
    try:
        SignalledWhenCollected()  # collected at once
        time.sleep(30)
        return "ran on"
    finally:
        with open(cleaned, "w") as file:
            file.write("unwound")


def test_a_sigterm_taken_where_python_cannot_raise_still_unwinds_the_run_at_once_without_a_word(capfd, tmp_path):
    """Raised in a ``__del__`` (or the import system's weakref callbacks), the handler's SystemExit would be
    printed as ignored and dropped: the run would go on, here for 30 s, where the driver would kill it."""
    cleaned = tmp_path / "cleaned"
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"^the a run's worker died: exited with status 143$"):
        run_side_by_side({"a": functools.partial(terminated_inside_a_finalizer, str(cleaned))}, workers=1)
    assert time.monotonic() - start < 20
    assert cleaned.read_text() == "unwound"
    assert no_worker_left()
    assert capfd.readouterr().err == ""


def test_the_worker_count_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="workers"):
        run_side_by_side({"a": sleeps}, workers=0)
