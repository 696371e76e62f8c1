"""The Ray engine on a real local Ray: the same weights as one process, bit for bit; failures that name the worker;
the Ray it starts itself, it shuts down.  Skipped where Ray is not installed (sgrad's ``ray`` extra)."""

import os
import pathlib
import random
import signal
import time

import numpy as np
import pytest

from sgrad.experiments.mnist import PaperConfig, build_network, summed_cross_entropy, train_paper
from sgrad.nn.checkpoint import load_checkpoint, network_state
from sgrad.parallel import WorkerFailed, train_parallel
from sgrad.parallel.messages import Report
from sgrad.parallel.ray_engine import DIRECT_MESSAGES, LOOPBACK_ONLY, RayEngine, connect

os.environ.update(LOOPBACK_ONLY)  # before Ray loads: the tests' Ray listens on 127.0.0.1 only
ray = pytest.importorskip("ray")

CONFIG = PaperConfig(depth=4, hidden=16, generator_hidden=(8,), batch_size=8, iterations=12, eval_every=4,
                     dtype="float64", seed=0)
CPUS = 4  # Ray's count, not the machine's: three workers of one CPU each fit on two cores


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.random((64, 20)), rng.integers(0, 10, 64), rng.random((32, 20)), rng.integers(0, 10, 32)


@pytest.fixture(scope="module")
def local_ray():
    """One Ray for the module's tests (starting one takes seconds), started as a RayEngine starts its own; the engines
    use it and leave it running.

    Its worker processes can import the tests' own modules, as a cluster's nodes must import a user's.
    """
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pathlib.Path(__file__).parent), before]))
    assert connect(None, cpus=CPUS)
    yield
    ray.shutdown()
    if before is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = before


def train(method, data, workers, engine, layers=None, **options):
    layers = build_network(method, 20, CONFIG) if layers is None else layers
    train_parallel(layers, data, schedule=method, loss_fn=summed_cross_entropy, alpha=CONFIG.alpha,
                   steps=options.pop("steps", CONFIG.iterations), batch_size=CONFIG.batch_size,
                   rng=np.random.default_rng(np.random.SeedSequence(CONFIG.seed).spawn(3)[2]),
                   eval_every=CONFIG.eval_every, workers=workers, engine=engine, **options)
    return layers


def single_process(method, data, tmp_path):
    train_paper(method, data, CONFIG, checkpoint=tmp_path / "reference.npz")
    return load_checkpoint(tmp_path / "reference.npz").network


def assert_same_arrays(layers, reference):
    mine = network_state(layers)
    assert mine.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(mine[name], value, err_msg=name)


def all_cpus_free(seconds=15.0):
    """Whether every CPU of the module's Ray is free again (no actor of ours holds one) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU", 0) < CPUS and time.monotonic() < deadline:
        time.sleep(0.1)
    return ray.available_resources().get("CPU", 0) == CPUS


def test_without_an_address_the_engine_starts_a_loopback_ray_for_the_run_and_shuts_it_down(data, tmp_path):
    assert not ray.is_initialized()  # this test runs before the module's Ray starts
    layers = train("dni", data, 2, RayEngine())
    assert not ray.is_initialized()
    assert_same_arrays(layers, single_process("dni", data, tmp_path))


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("method", ["dni", "cdni", "backprop"])
def test_ray_actors_end_with_the_single_process_weights_bit_for_bit(local_ray, data, tmp_path, method, workers):
    assert_same_arrays(train(method, data, workers, RayEngine()), single_process(method, data, tmp_path))
    assert ray.is_initialized()  # the module's Ray, left running


def test_the_local_ray_listens_on_the_loopback_address_only(local_ray):
    assert ray.util.get_node_ip_address() == "127.0.0.1"


def test_a_ray_worker_whose_block_raises_stops_the_run_naming_it(local_ray, data):
    from test_parallel_reliability import BreakingBlock

    layers = build_network("backprop", 20, CONFIG)
    layers[2] = BreakingBlock(layers[2], breaks_at=5)
    with pytest.raises(WorkerFailed, match=r"worker 2 \(layers 2-3, the top\) raised RuntimeError at step 5: "
                                           "the block broke"):
        train("backprop", data, 3, RayEngine(), layers=layers)
    assert all_cpus_free()


def actor_pids():
    """The processes of this Ray's sgrad workers (Ray titles them 'ray::Mailbox...')."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(b"ray::Mailbox"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_a_ray_worker_killed_mid_run_stops_the_run_naming_it(local_ray, data):
    before, killed = set(actor_pids()), []  # other tests' actors may still be on their way out

    def kill_a_worker_once(line):
        if not killed:
            killed.append(min(set(actor_pids()) - before))
            os.kill(killed[0], signal.SIGKILL)

    with pytest.raises(WorkerFailed, match=r"worker \d \(layers? [-\d]+(, the top)?\) died: The actor died"):
        train("dni", data, 3, RayEngine(), steps=100_000, progress=kill_a_worker_once)
    assert killed and all_cpus_free()


def test_a_cluster_with_too_few_cpus_for_the_workers_is_refused_before_any_starts(local_ray, data):
    with pytest.raises(ValueError, match=r"the Ray cluster has 4 CPUs, but 2 workers of 3 CPU each need 6"):
        train("dni", data, 2, RayEngine(cpus_per_worker=3))
    assert all_cpus_free(seconds=0.0)


def test_a_comparison_on_ray_learns_exactly_what_it_learns_on_local_processes(local_ray, data):
    from sgrad.experiments.parallel import compare_parallel

    config = PaperConfig(depth=3, hidden=16, generator_hidden=(8,), batch_size=8, iterations=6, eval_every=3,
                         dtype="float64")
    runs = {engine: compare_parallel(data, schedules=("cdni", "pipelined-backprop"), workers=(2,), config=config,
                                     engine=engine) for engine in ("local", "ray")}
    for key, run in runs["ray"].items():
        assert run.history["test_accuracy"] == runs["local"][key].history["test_accuracy"]
        assert run.history["train_loss"] == runs["local"][key].history["train_loss"]
    assert ray.is_initialized()  # the module's Ray: the comparison used it and left it running


def test_the_ray_sgrad_starts_passes_a_workers_messages_inside_its_calls(local_ray):
    @ray.remote(num_cpus=0)
    def setting():
        return os.environ.get("RAY_max_direct_call_object_size")

    message = 256 * 256 * 4 + 256 * 10 * 4  # h of a batch of 256 (float32), and its one-hot labels
    assert int(ray.get(setting.remote())) == int(DIRECT_MESSAGES["RAY_max_direct_call_object_size"]) > message
    assert "RAY_max_direct_call_object_size" not in os.environ  # set only while that Ray started


class Chatty:
    """A worker that reports every millisecond, ``count`` times, and is done."""

    def __init__(self, index, count):
        self.index, self.count = index, count
        self.first_layer, self.layers, self.is_top = index, [None], index == 1

    def run(self, inbox, send, report):
        for step in range(self.count):
            report(Report("evaluation", self.index, step))
            time.sleep(0.001)
        report(Report("done", self.index))


def interrupt(signum, frame):
    raise KeyboardInterrupt


def test_ctrl_c_during_next_report_leaves_ray_no_error_to_print_as_unhandled(local_ray, capfd, caplog):
    """Ctrl-C (and SIGTERM, which the command line turns into it) may come while the driver waits on a call of
    Ray's; the call's answer is then never read.  Ray prints such an answer, if it is an error, when it is
    dropped: it must never be one."""
    engine, rng, interrupted = RayEngine(), random.Random(0), 0
    before = signal.signal(signal.SIGALRM, interrupt)
    engine.start([Chatty(0, 100_000), Chatty(1, 100_000)])
    try:
        for _ in range(1000):
            try:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0001, 0.003))
                while True:
                    engine.next_report(0.5)
            except KeyboardInterrupt:
                interrupted += 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        workers, deadline = set(), time.monotonic() + 60  # it goes on as if nothing came: both workers report
        while workers != {0, 1} and time.monotonic() < deadline:
            report = engine.next_report(0.5)
            workers |= set() if report is None else {report.worker}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        engine.stop()
    time.sleep(1.0)  # Ray prints an unread error from a thread of its own
    said = capfd.readouterr().err + "\n".join(record.getMessage() for record in caplog.records)  # Ray's logger
    assert "Unhandled error" not in said
    assert interrupted == 1000 and workers == {0, 1}
    assert all_cpus_free()
