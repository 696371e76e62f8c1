"""The parallel engine on local processes: how layers are shared out, every schedule against its single-process
definition (bit for bit in float64), the staleness bound, forward unlocking, the timeline, and resuming from a
checkpoint."""

import dataclasses
import os
import pathlib
import time

import numpy as np
import pytest
from conftest import damage_checkpoint

from sgrad.experiments.mnist import (PaperConfig, build_input_generators, build_network, summed_cross_entropy,
                                     train_paper)
from sgrad.nn.checkpoint import CheckpointError, load_checkpoint, network_state
from sgrad.parallel import SCHEDULE_NAMES, split_layers, train_parallel
from sgrad.parallel.local import LocalEngine
from sgrad.parallel.timeline import KINDS

# Four layers (three hidden blocks and the top), so that one, two and three workers all fit.
CONFIG = PaperConfig(depth=4, hidden=16, generator_hidden=(8,), batch_size=8, iterations=12, eval_every=4,
                     dtype="float64", seed=0)
METHOD = {"backprop": "backprop", "pipelined-backprop": "backprop", "dni": "dni", "cdni": "cdni", "complete": "complete",
          "ccomplete": "ccomplete"}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.random((64, 20)), rng.integers(0, 10, 64), rng.random((32, 20)), rng.integers(0, 10, 32)


def batch_rng(config=CONFIG):
    """The batch order's generator, as sgrad.experiments.mnist.train_paper makes it."""
    return np.random.default_rng(np.random.SeedSequence(config.seed).spawn(3)[2])


def parallel(schedule, data, workers, config=CONFIG, **options):
    """``schedule`` on ``workers`` workers: the network it trained (with the complete unlock's input generators after
    its layers, as ``sgrad paper`` checkpoints them) and the run."""
    layers = build_network(METHOD[schedule], data[0].shape[1], config)
    input_generators = build_input_generators(METHOD[schedule], data[0].shape[1], config)
    if input_generators:
        options.update(input_generators=input_generators, input_alpha=config.alpha)
    result = train_parallel(layers, data, schedule=schedule, loss_fn=summed_cross_entropy, alpha=config.alpha,
                            steps=config.iterations, batch_size=config.batch_size, rng=batch_rng(config),
                            eval_every=config.eval_every, workers=workers, **options)
    return layers + input_generators, result


def single_process(method, data, tmp_path, config=CONFIG):
    """``sgrad paper``'s own run of ``method``: its history and its final arrays (from the checkpoint it saves)."""
    history = train_paper(method, data, config, checkpoint=tmp_path / f"{method}.npz")
    return history, load_checkpoint(tmp_path / f"{method}.npz").network


def assert_same_arrays(layers, reference):
    mine = network_state(layers)
    assert mine.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(mine[name], value, err_msg=name)


# --- sharing out the layers ----------------------------------------------------------------------------


@pytest.mark.parametrize("layers, workers, expected", [
    (3, 2, [range(0, 1), range(1, 3)]),
    (4, 1, [range(0, 4)]),
    (6, 2, [range(0, 3), range(3, 6)]),
    (6, 3, [range(0, 2), range(2, 4), range(4, 6)]),
    (7, 4, [range(0, 2), range(2, 4), range(4, 5), range(5, 7)]),
])
def test_each_worker_holds_consecutive_blocks_and_the_top_layer_joins_the_last(layers, workers, expected):
    assert split_layers(layers, workers) == expected


def test_more_workers_than_hidden_blocks_is_refused(data):
    with pytest.raises(ValueError, match="workers must be between 1 and the network's 3 hidden blocks"):
        parallel("dni", data, workers=4)


def test_dni_needs_dni_blocks_with_generators_conditioned_as_the_schedule_says(data):
    layers = build_network("dni", 20, CONFIG)
    with pytest.raises(ValueError, match="schedule 'cdni' needs every hidden block to be a DNIBlock"):
        train_parallel(layers, data, schedule="cdni", loss_fn=summed_cross_entropy, alpha=1e-3, steps=2,
                       batch_size=8, rng=batch_rng(), eval_every=1)


# --- every schedule against its definition -------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("method", ["dni", "cdni", "backprop", "complete", "ccomplete"])
def test_the_pipeline_ends_with_the_single_process_weights_bit_for_bit(data, tmp_path, method, workers):
    history, reference = single_process(method, data, tmp_path)
    layers, result = parallel(method, data, workers)
    assert_same_arrays(layers, reference)
    assert result.history["test_accuracy"] == history["test_accuracy"]
    assert result.history["train_loss"] == history["train_loss"]


def delayed_gradients_in_one_process(layers, stages, batches, loss_fn, alpha):
    """Pipelined backprop's definition, step by step in one process: stage k backpropagates batch t - (K-1-k)."""
    from sgrad.nn.module import running_averages_kept

    count = len(stages)
    kept = [{} for _ in stages]  # per stage: batch -> its input
    targets = [{} for _ in stages]  # per stage: batch -> dL/d(its output)

    def backward(k, delta, u):
        own = [layers[i] for i in stages[k]]
        for i in range(len(own) - 1, -1, -1):
            delta = own[i].backward(delta, input_delta=not (k == 0 and i == 0))
            own[i].update(alpha)
        if k > 0:
            targets[k - 1][u] = delta

    for t, (x, y) in enumerate(batches, start=1):
        h = x
        for k, stage in enumerate(stages):
            kept[k][t] = h
            for i in stage:
                h = layers[i].forward(h)
            if k == count - 1:
                backward(k, loss_fn(h, y)[1], t)
            elif t - (count - 1 - k) >= 1:
                u = t - (count - 1 - k)
                with running_averages_kept(*[layers[i] for i in stage]):
                    h_again = kept[k].pop(u)
                    for i in stage:
                        h_again = layers[i].forward(h_again)
                backward(k, targets[k].pop(u), u)
    for u in range(len(batches) - count + 2, len(batches) + 1):  # the end: what is in flight lands, top down
        for k in range(count - 2, -1, -1):
            if u in targets[k]:
                with running_averages_kept(*[layers[i] for i in stages[k]]):
                    h_again = kept[k].pop(u)
                    for i in stages[k]:
                        h_again = layers[i].forward(h_again)
                backward(k, targets[k].pop(u), u)


def batches_of(data, config):
    """The batches train_paper draws: a new permutation per pass, consecutive slices of it."""
    rng, onehot = batch_rng(config), np.eye(10)
    order, position, batches = np.arange(0), 0, []
    for _ in range(config.iterations):
        if position + config.batch_size > len(order):
            order, position = rng.permutation(len(data[0])), 0
        indices = order[position:position + config.batch_size]
        position += config.batch_size
        batches.append((data[0][indices], onehot[data[1][indices]]))
    return batches


@pytest.mark.parametrize("workers", [2, 3])
def test_pipelined_backprop_applies_each_stages_gradient_k_steps_late_as_its_definition_says(data, workers):
    reference = build_network("backprop", 20, CONFIG)
    delayed_gradients_in_one_process(reference, split_layers(len(reference), workers), batches_of(data, CONFIG),
                                     summed_cross_entropy, CONFIG.alpha)
    layers, _ = parallel("pipelined-backprop", data, workers)
    assert_same_arrays(layers, network_state(reference))


def test_pipelined_backprop_on_one_worker_is_backprop(data, tmp_path):
    _, reference = single_process("backprop", data, tmp_path)
    layers, _ = parallel("pipelined-backprop", data, workers=1)
    assert_same_arrays(layers, reference)


def test_pipelined_backprop_differs_from_backprop_once_gradients_are_late(data, tmp_path):
    _, reference = single_process("backprop", data, tmp_path)
    layers, _ = parallel("pipelined-backprop", data, workers=2)
    bottom = "0.modules.0.weights"
    assert not np.array_equal(network_state(layers)[bottom], reference[bottom])


# --- staleness ---------------------------------------------------------------------------------------------


def test_no_generator_target_comes_later_than_the_staleness_bound(data):
    config = dataclasses.replace(CONFIG, iterations=40, eval_every=20)
    _, result = parallel("dni", data, workers=3, config=config, staleness=2)
    assert sum(result.stale_targets.values()) == 3 * config.iterations  # every block's generator, every batch
    assert max(result.stale_targets) <= 2


def test_with_staleness_zero_every_target_is_on_time(data):
    _, result = parallel("cdni", data, workers=3)
    assert result.stale_targets == {0: 3 * CONFIG.iterations}


def test_under_the_complete_unlock_no_target_of_either_generator_comes_later_than_the_staleness_bound(data):
    config = dataclasses.replace(CONFIG, iterations=40, eval_every=20)
    _, result = parallel("ccomplete", data, workers=3, config=config, staleness=2)
    # Every block's gradient generator and every layer's input generator (three of each), every batch.
    assert sum(result.stale_targets.values()) == 2 * 3 * config.iterations
    assert min(result.stale_targets) >= 0 and max(result.stale_targets) <= 2


def test_with_staleness_zero_every_target_of_the_complete_unlock_is_on_time(data):
    _, result = parallel("complete", data, workers=2)
    assert result.stale_targets == {0: 2 * 3 * CONFIG.iterations}


# --- forward unlocking -------------------------------------------------------------------------------------


class NoWaiting:
    """A worker's message source that hands over what it was given and fails the test if the worker would wait."""

    def __init__(self):
        self.messages = []

    def get(self, block=True, timeout=None):
        import queue

        if self.messages:
            return self.messages.pop(0)
        if not block:
            raise queue.Empty
        raise AssertionError("the worker waited for a message")


def upper_worker(schedule, data, staleness=0):
    """Worker 1 of two on the net of depth 3 (block 2 and the top), driven by hand: ``(worker, source, sent)``."""
    from sgrad.parallel.messages import Inbox
    from sgrad.parallel.timeline import Timeline
    from sgrad.parallel.worker import Plan, Worker
    from sgrad.training.batches import BatchOrder

    config = dataclasses.replace(CONFIG, depth=3)
    layers = build_network(METHOD[schedule], 20, config)
    input_generators = build_input_generators(METHOD[schedule], 20, config)
    plan = Plan(schedule=schedule, steps=3, start=0, eval_every=3, save_every=None, staleness=staleness,
                timeline=(1, 0), alpha=CONFIG.alpha, loss_fn=summed_cross_entropy, classes=10, input_alpha=CONFIG.alpha)
    own_batches = dict(train=data[:2], batches=BatchOrder(64, 8, batch_rng())) if input_generators else {}
    worker = Worker(1, 2, layers[1:], plan, first_layer=1, test_y=data[3], input_generators=input_generators or None,
                    **own_batches)  # under the complete unlock every worker draws the batches itself
    source, sent = NoWaiting(), []
    worker.inbox, worker.send, worker.timeline = Inbox(source), lambda j, message: sent.append(message), Timeline(1, 1, 0)
    return worker, source, sent


def test_under_the_complete_unlock_the_worker_above_runs_a_batch_before_anything_of_it_comes_from_below(data):
    from sgrad.parallel.messages import Message
    from sgrad.parallel.schedules import CompleteUnlock

    worker, source, sent = upper_worker("complete", data)
    schedule = CompleteUnlock(worker)
    schedule.step(1)  # the inbox is empty: the step runs on ĥ_1 = I_1(x), the batch the worker drew itself
    assert [(m.kind, m.step) for m in sent] == [("synthetic input", 1), ("target", 1)]
    np.testing.assert_array_equal(sent[0].array, worker.input_generators[0].synthetic_input)
    with pytest.raises(AssertionError, match="the worker waited"):
        schedule.step(2)  # before it predicts for batch 2, I_1 regresses onto batch 1's real h_1
    worker, source, sent = upper_worker("complete", data)
    schedule = CompleteUnlock(worker)
    schedule.step(1)
    source.messages.append(Message("activation", 1, np.zeros((8, CONFIG.hidden)), np.eye(10)[:8]))
    schedule.step(2)  # batch 1's real h_1 has come; batch 2's has not, and the step does not wait for it
    assert [(m.kind, m.step) for m in sent][2:] == [("synthetic input", 2), ("target", 2)]
    assert worker.stale_targets == {0: 5}  # M_2 and I_2 twice, I_1 once


def test_under_dni_the_worker_above_waits_for_the_forward_pass_below(data):
    from sgrad.parallel.schedules import Decoupled

    worker, _, _ = upper_worker("dni", data)
    with pytest.raises(AssertionError, match="the worker waited"):
        Decoupled(worker).step(1)


# --- the timeline ------------------------------------------------------------------------------------------


def test_every_worker_records_its_forward_backward_update_and_waits_for_the_steps_asked(data):
    _, result = parallel("dni", data, workers=3, timeline_steps=(3, 5))
    assert {e.worker for e in result.timeline} == {0, 1, 2}
    assert {e.step for e in result.timeline} == {3, 4, 5}
    assert {e.kind for e in result.timeline} <= set(KINDS)
    assert {"forward", "dni", "update"} <= {e.kind for e in result.timeline if e.worker == 0}
    assert all(e.start <= e.end for e in result.timeline)


def test_under_locked_backprop_the_bottom_worker_waits_while_the_one_above_runs_the_batch(data):
    _, result = parallel("backprop", data, workers=2, timeline_steps=(2, 4))
    for step in (2, 3, 4):
        waits = [e for e in result.timeline if e.worker == 0 and e.step == step and e.kind == "wait"]
        above = [e for e in result.timeline if e.worker == 1 and e.step == step and e.kind != "wait"]
        assert len(waits) == 1
        assert waits[0].start <= min(e.start for e in above) and max(e.end for e in above) <= waits[0].end


# --- checkpoints -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["dni", "pipelined-backprop", "ccomplete"])
def test_a_resumed_run_ends_where_an_unbroken_run_with_the_same_checkpoints_ends(data, tmp_path, schedule):
    run = {"test": schedule}
    unbroken, history = parallel(schedule, data, workers=3, run=run, checkpoint=tmp_path / "unbroken.npz",
                                 checkpoint_every=4)
    parallel(schedule, data, workers=3, config=dataclasses.replace(CONFIG, iterations=8), run=run,
             checkpoint=tmp_path / "broken.npz", checkpoint_every=4)
    lines = []
    resumed, resumed_history = parallel(schedule, data, workers=3, run=run, checkpoint=tmp_path / "broken.npz",
                                        checkpoint_every=4, progress=lines.append)
    assert any("resumed from" in line and "at iteration 8 of 12" in line for line in lines)
    assert_same_arrays(resumed, network_state(unbroken))
    assert resumed_history.history["test_accuracy"] == history.history["test_accuracy"]


def test_a_resumed_run_keeps_the_timeline_and_the_late_targets_of_the_steps_before_its_checkpoint(data, tmp_path):
    options = dict(workers=3, run={"test": "diagnostics"}, checkpoint_every=4, timeline_steps=(3, 10))
    _, unbroken = parallel("dni", data, checkpoint=tmp_path / "unbroken.npz", **options)
    parallel("dni", data, config=dataclasses.replace(CONFIG, iterations=8), checkpoint=tmp_path / "broken.npz",
             **options)
    _, resumed = parallel("dni", data, checkpoint=tmp_path / "broken.npz", **options)

    def steps(result):
        return sorted((e.worker, e.kind, e.step) for e in result.timeline)

    assert {step for _, _, step in steps(unbroken)} == set(range(3, 11))
    assert steps(resumed) == steps(unbroken)
    assert unbroken.stale_targets == {0: 3 * CONFIG.iterations}  # a target per generator and step, all on time
    assert resumed.stale_targets == unbroken.stale_targets


@pytest.mark.parametrize("change, message", [
    (lambda metadata, arrays: metadata["loop"].pop("timeline"), "its 'loop' has no 'timeline'"),
    (lambda metadata, arrays: metadata["loop"]["timeline"].append({"worker": 0}), "has no 'kind'"),
    (lambda metadata, arrays: metadata["loop"].update(stale_targets={"late": 3}), "its loop's 'stale_targets' must"),
    (lambda metadata, arrays: metadata["loop"].update(stale_targets={"0": -3}), "its loop's 'stale_targets' must count"),
    (lambda metadata, arrays: metadata["rng"].pop("has_uint32"), "its 'rng' is not the state of a PCG64 generator"),
    (lambda metadata, arrays: metadata["loop"].pop("position"), "its 'loop' has no 'position'"),
], ids=["no-timeline", "event", "stale-key", "stale-count", "rng", "position"])
def test_a_damaged_checkpoint_is_refused_naming_the_file_and_the_field_before_any_worker_starts(data, tmp_path,
                                                                                               change, message):
    options = dict(workers=2, run={"test": "damage"}, checkpoint=tmp_path / "c.npz", timeline_steps=(1, 4))
    parallel("dni", data, config=dataclasses.replace(CONFIG, iterations=4), **options)
    damage_checkpoint(tmp_path / "c.npz", change)
    with pytest.raises(CheckpointError) as info:
        parallel("dni", data, **options)
    assert str(info.value).startswith(f"{tmp_path / 'c.npz'} is damaged: "), str(info.value)
    assert message in str(info.value)


def test_the_checkpoint_holds_every_workers_arrays_as_train_paper_names_them(data, tmp_path):
    layers, _ = parallel("cdni", data, workers=3, run={"test": 1}, checkpoint=tmp_path / "c.npz")
    saved = load_checkpoint(tmp_path / "c.npz")
    assert saved.metadata["step"] == CONFIG.iterations
    assert_same_arrays(layers, saved.network)
    assert saved.network.keys() == network_state(build_network("cdni", 20, CONFIG)).keys()


def test_the_schedules_are_the_six_named_in_the_docs():
    assert SCHEDULE_NAMES == ("backprop", "pipelined-backprop", "dni", "cdni", "complete", "ccomplete")


def test_data_in_another_dtype_than_the_network_is_refused_before_any_worker_starts(data):
    layers = build_network("dni", 20, CONFIG)  # float64
    single = (data[0].astype(np.float32), data[1], data[2].astype(np.float32), data[3])
    with pytest.raises(TypeError, match=r"x_train must have the network's dtype, float64; got float32"):
        train_parallel(layers, single, schedule="dni", loss_fn=summed_cross_entropy, alpha=1e-3, steps=2,
                       batch_size=8, rng=batch_rng(), eval_every=1)


@pytest.mark.parametrize("labels, error, message", [
    (lambda y: np.where(y == 9, -1, y), ValueError, r"the labels of x_train must lie in \[0, 9\] for 10 classes; got "
                                                    r"values from -1 to 8"),
    (lambda y: y + 10, ValueError, r"the labels of x_train must lie in \[0, 9\] for 10 classes; got values from 10"),
    (lambda y: y.astype(float), TypeError, "the labels of x_train must hold integers; got dtype float64"),
    (lambda y: y[:-1], ValueError, "the labels of x_train must be one per row of x_train: 64; got 63"),
], ids=["minus-one", "ten", "floats", "one-short"])
def test_labels_are_checked_before_any_worker_starts(data, labels, error, message):
    """In the driver, before the engine starts: a worker's failure would be a WorkerFailed, not this error."""
    with pytest.raises(error, match=message):
        parallel("dni", (data[0], labels(data[1]), *data[2:]), workers=2)


def test_a_late_target_is_regressed_onto_with_the_activations_kept_for_its_batch(data):
    """Worker 0 of two, staleness 1, driven by hand: batches 1 and 2 go through before batch 1's target comes."""
    import copy
    import queue

    from sgrad.parallel.messages import Inbox, Message
    from sgrad.parallel.schedules import Decoupled
    from sgrad.parallel.timeline import Timeline
    from sgrad.training.batches import BatchOrder
    from sgrad.parallel.worker import Plan, Worker

    layers = build_network("cdni", 20, dataclasses.replace(CONFIG, depth=3))
    plan = Plan(schedule="cdni", steps=3, start=0, eval_every=3, save_every=None, staleness=1, timeline=(1, 0),
                alpha=CONFIG.alpha, loss_fn=summed_cross_entropy, classes=10)
    worker = Worker(0, 2, layers[:1], plan, train=data[:2], test_x=data[2],
                    batches=BatchOrder(64, 8, batch_rng()))
    inbox, sent = queue.Queue(), []
    worker.inbox, worker.send, worker.timeline = Inbox(inbox), lambda j, message: sent.append(message), Timeline(0, 1, 0)
    schedule = Decoupled(worker)
    schedule.step(1)
    schedule.step(2)  # batch 1's target may be a step late: no wait
    generator = layers[0].generator
    reference, running = copy.deepcopy(generator), network_state(generator)
    h, condition = schedule.kept[1]
    target = np.random.default_rng(1).standard_normal(h.shape)
    inbox.put(Message("target", 1, target))
    schedule.regress_late(through=1, newest=2)
    reference.forward(h, condition)
    reference.update(target, layers[0].generator_alpha)
    for name, value in network_state(reference).items():
        if "running" in name:  # batch norm's running averages count batch 1 once, when it was predicted for
            np.testing.assert_array_equal(network_state(generator)[name], running[name], err_msg=name)
        else:
            np.testing.assert_array_equal(network_state(generator)[name], value, err_msg=name)
    assert worker.stale_targets == {1: 1}
    assert sorted(schedule.kept) == [2]  # batch 2's target has not come: its activations are still kept
    assert [m.step for m in sent if m.kind == "activation"] == [1, 2]


# --- the workers' environment ------------------------------------------------------------------------------


class EnvironmentReadingEngine(LocalEngine):
    """The local engine, reading each worker process's environment from /proc once it has started."""

    def start(self, workers):
        super().start(workers)
        self.environments = []
        for process in self.processes:
            # start() returns once the child is forked; until it has exec'd the new interpreter, /proc shows the
            # environment this process itself started with.  The new interpreter's command line says spawn_main.
            deadline = time.monotonic() + 30
            while b"spawn_main" not in pathlib.Path(f"/proc/{process.pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline, "the worker process never started its interpreter"
                time.sleep(0.01)
            raw = pathlib.Path(f"/proc/{process.pid}/environ").read_bytes()
            self.environments.append(dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item))


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="reads the environment from /proc (Linux)")
def test_every_local_worker_starts_with_one_blas_thread_and_malloc_keeping_what_it_frees(data):
    engine, before = EnvironmentReadingEngine(), dict(os.environ)
    parallel("dni", data, workers=3, engine=engine)
    assert len(engine.environments) == 3
    for environment in engine.environments:
        assert environment["OPENBLAS_NUM_THREADS"] == "1"
        assert int(environment["MALLOC_TRIM_THRESHOLD_"]) >= 64 << 20
        assert int(environment["MALLOC_MMAP_THRESHOLD_"]) >= 1 << 20
    assert dict(os.environ) == before  # the driver's own environment is as it was
