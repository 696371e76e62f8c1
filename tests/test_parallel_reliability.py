"""A parallel run that goes wrong stops whole: a worker that raises or is killed, a run that diverges, Ctrl-C, a driver
that is killed.  Each test checks, on the real processes, that none is left running."""

import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import assert_group_ends, started
from sgrad import TrainingDiverged
from sgrad.experiments.mnist import PaperConfig, build_network, summed_cross_entropy
from sgrad.nn.blocks import Sequential
from sgrad.parallel import WorkerFailed, train_parallel

CONFIG = PaperConfig(depth=3, hidden=16, generator_hidden=(8,), batch_size=8, dtype="float64", seed=0)
ROOT = pathlib.Path(__file__).resolve().parents[1]


class BreakingBlock(Sequential):
    """A block whose forward pass raises on its ``breaks_at``-th call (in the worker's process, where it runs)."""

    def __init__(self, block, breaks_at):
        super().__init__(block.modules)
        self.calls, self.breaks_at = 0, breaks_at

    def forward(self, x):
        self.calls += 1
        if self.calls == self.breaks_at:
            raise RuntimeError("the block broke")
        return super().forward(x)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.random((64, 20)), rng.integers(0, 10, 64), rng.random((32, 20)), rng.integers(0, 10, 32)


def train(layers, data, schedule="backprop", steps=400, **options):
    return train_parallel(layers, data, schedule=schedule, loss_fn=summed_cross_entropy,
                          alpha=options.pop("alpha", CONFIG.alpha), steps=steps, batch_size=8,
                          rng=np.random.default_rng(0), eval_every=options.pop("eval_every", 5), **options)


def running(pid):
    """Whether process ``pid`` exists and has not exited (a zombie has exited, waiting only to be reaped)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_until_gone(pids, seconds=15.0):
    deadline = time.monotonic() + seconds
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if running(pid)]


def test_a_worker_killed_mid_run_stops_the_run_naming_it_and_the_signal(data):
    workers = {}

    def kill_the_top_worker_once(line):
        if not workers:
            workers.update({p.name: p.pid for p in multiprocessing.active_children()})
            os.kill(next(pid for name, pid in workers.items() if "worker 1" in name), signal.SIGKILL)

    with pytest.raises(WorkerFailed, match=r"worker 1 \(layers 1-2, the top\) died: killed by signal SIGKILL \(9\)"):
        train(build_network("dni", 20, CONFIG), data, "dni", progress=kill_the_top_worker_once)
    assert len(workers) == 2
    assert wait_until_gone(workers.values(), seconds=0.0) == []  # stopped and reaped before train_parallel returned


def test_under_the_complete_unlock_a_worker_killed_mid_run_stops_the_run_and_no_worker_is_left(data):
    from sgrad.experiments.mnist import build_input_generators

    workers = {}

    def kill_the_bottom_worker_once(line):
        if not workers:
            workers.update({p.name: p.pid for p in multiprocessing.active_children()})
            os.kill(next(pid for name, pid in workers.items() if "worker 0" in name), signal.SIGKILL)

    with pytest.raises(WorkerFailed, match=r"worker 0 \(layer 0\) died: killed by signal SIGKILL \(9\)"):
        train(build_network("complete", 20, CONFIG), data, "complete", progress=kill_the_bottom_worker_once,
              input_generators=build_input_generators("complete", 20, CONFIG), input_alpha=CONFIG.alpha)
    assert len(workers) == 2
    assert wait_until_gone(workers.values(), seconds=0.0) == []  # the worker above, which waits for none, too


def test_a_worker_whose_block_raises_stops_the_run_with_the_workers_name_and_error(data):
    layers = build_network("backprop", 20, CONFIG)
    layers[1] = BreakingBlock(layers[1], breaks_at=7)
    pids = []
    with pytest.raises(WorkerFailed, match=r"worker 1 \(layers 1-2, the top\) raised RuntimeError at step 7: "
                                           "the block broke") as failure:
        train(layers, data, progress=lambda line: pids.extend(p.pid for p in multiprocessing.active_children()))
    assert "in forward" in str(failure.value)  # the worker's traceback comes along
    assert pids and wait_until_gone(pids, seconds=0.0) == []


def test_a_worker_whose_numbers_overflow_ends_the_run_as_a_divergence_with_its_history(data):
    config = PaperConfig(depth=3, hidden=16, batch_size=8, dtype="float64", update_rule="sgd", seed=0)
    with pytest.raises(TrainingDiverged, match=r"diverged at iteration \d+ in worker \d .*try a smaller one") as error:
        train(build_network("backprop", 20, config), data, alpha=1e6, eval_every=1)
    assert error.value.history["diverged_at_iteration"] >= 1


SCRIPT = """
import multiprocessing, sys
import numpy as np
from sgrad.experiments.mnist import PaperConfig, build_network, summed_cross_entropy
from sgrad.parallel import train_parallel

def announce(line, said=[]):
    if not said:
        said.append(True)
        print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)

if __name__ == "__main__":
    config = PaperConfig(depth=4, hidden=16, generator_hidden=(8,), batch_size=8, dtype="float64")
    rng = np.random.default_rng(0)
    data = rng.random((64, 20)), rng.integers(0, 10, 64), rng.random((32, 20)), rng.integers(0, 10, 32)
    try:
        train_parallel(build_network("dni", 20, config), data, schedule="dni", loss_fn=summed_cross_entropy,
                       alpha=1e-3, steps=10**6, batch_size=8, rng=np.random.default_rng(0), eval_every=20,
                       progress=announce)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
"""


UNGUARDED = """
import multiprocessing, time
import numpy as np
from sgrad.experiments.mnist import PaperConfig, build_network, summed_cross_entropy
from sgrad.parallel import train_parallel

# No `if __name__ == "__main__":` here: every local worker imports this script again as it starts.
if multiprocessing.current_process().name.startswith("sgrad worker 1 "):
    held = multiprocessing.get_context("spawn").Lock()  # a semaphore, as the queues the run makes hold
    time.sleep(2)  # still starting when worker 0 has died
config = PaperConfig(depth=3, hidden=16, generator_hidden=(8,), batch_size=8, dtype="float64")
rng = np.random.default_rng(0)
data = rng.random((4000, 20)), rng.integers(0, 10, 4000), rng.random((32, 20)), rng.integers(0, 10, 32)
train_parallel(build_network("dni", 20, config), data, schedule="dni", loss_fn=summed_cross_entropy, alpha=1e-3,
               steps=10, batch_size=8, rng=np.random.default_rng(0), eval_every=5)
"""


def test_a_script_without_a_main_guard_stops_with_a_message_that_says_so(tmp_path):
    # The bottom worker's data (640 kB) is more than a pipe holds: handed over while the process starts, as it once
    # was, it left the driver waiting for ever on a child that had died importing the script.
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    with started([sys.executable, str(script)], cwd=ROOT) as run:
        _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("sgrad.parallel.engines.WorkerFailed: worker 0 (layer 0) died as it started"), last
    assert "put that call under `if __name__ == '__main__':`" in last
    # Worker 1, still importing the script, was let die of the same error rather than stopped half-way: stopped,
    # it would have left its semaphore to multiprocessing's resource tracker, which warns as the script ends.
    assert stderr.count("\nRuntimeError: ") == 2 and "leaked" not in stderr, stderr
    assert_group_ends(run.pid, "the script's group")


@pytest.fixture
def long_run(tmp_path):
    """A parallel run that would take hours, in its own process group: the driver's Popen and its workers' pids.

    Whatever a failed test leaves running is killed afterwards, by pid.
    """
    script = tmp_path / "long_run.py"
    script.write_text(SCRIPT)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, cwd=ROOT)
    line = process.stdout.readline()
    workers = [int(pid) for pid in line.split()]
    yield process, workers
    for pid in [process.pid, *workers]:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=60)
    process.stdout.close()
    process.stderr.close()


def test_ctrl_c_to_the_process_group_stops_the_driver_and_every_worker(long_run):
    process, workers = long_run
    assert len(workers) == 3 and all(running(pid) for pid in workers)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert process.stdout.read().strip() == "interrupted"
    assert wait_until_gone(workers) == []
    assert_group_ends(process.pid, "the run's group")  # multiprocessing's helpers included


def test_workers_whose_driver_is_killed_exit_on_their_own(long_run):
    process, workers = long_run
    assert len(workers) == 3 and all(running(pid) for pid in workers)
    process.kill()  # SIGKILL: the driver cannot stop anything itself
    process.wait(timeout=60)
    assert wait_until_gone(workers) == []
