"""Checkpoints: bit-for-bit round trips, clear errors for files that cannot be used, atomic saves,
and training that resumes (in a fresh process) exactly where an uninterrupted run would be."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import copy_of_the_code, damage_checkpoint, tiny_mnist

import sgrad
from data_gen import generate_split
from sgrad.dni import steps
from sgrad.experiments import binary_addition, mnist
from sgrad import provenance
from sgrad.nn import checkpoint as ckpt
from sgrad.nn.checkpoint import CheckpointError, CheckpointNotFoundError, load_checkpoint, network_state, save_checkpoint
from sgrad.nn.losses import softmax_cross_entropy

SGRAD = [sys.executable, "-m", "sgrad"]
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
PAPER_TINY = mnist.PaperConfig(hidden=16, generator="mlp", generator_hidden=(8,), batch_size=8, iterations=10,
                               eval_every=4, seed=0)


def paper_data():
    rng = np.random.default_rng(0)
    return (rng.random((64, 20), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32))


def trained(kind, seed=0):
    """A network of ``kind`` after three training steps, so that every kind of state has moved off its start."""
    rng = np.random.default_rng(seed)
    if kind == "momentum layer":
        layer = sgrad.Layer(6, 4, "tanh", update_rule="momentum", seed=1)
        for _ in range(3):
            layer.forward(rng.standard_normal((5, 6)))
            layer.backward(rng.standard_normal((5, 4)))
            layer.update(0.1)
        return layer
    if kind == "cdni stack (linear generators, adam)":
        layers = binary_addition.build_network("cdni", 10, 5, binary_addition.TrainConfig(hidden=(8, 8)))
        for _ in range(3):
            x, y = rng.random((16, 10)), rng.integers(0, 2, (16, 5)).astype(float)
            steps.dni_step(layers, x, y, sgrad.bce_with_logits, 0.01, condition=y)
        return layers
    method = {"dni blocks (mlp generators, batch norm, adam)": "cdni", "synthetic-loss blocks": "synthetic-loss"}[kind]
    config = dataclasses.replace(PAPER_TINY, seed=seed)
    layers = mnist.build_network(method, 20, config)
    for _ in range(3):
        x, y = rng.random((8, 20), dtype=np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]
        if method == "synthetic-loss":
            steps.synthetic_loss_step(layers, x, y, 1e-3)
        else:
            steps.dni_step(layers, x, y, softmax_cross_entropy, 1e-3, condition=y)
    return layers


KINDS = ["momentum layer", "cdni stack (linear generators, adam)", "dni blocks (mlp generators, batch norm, adam)",
         "synthetic-loss blocks"]


def assert_same_state(ours, theirs):
    assert list(ours) == list(theirs)
    for name in ours:
        assert ours[name].dtype == theirs[name].dtype, name
        assert ours[name].shape == theirs[name].shape, name
        assert ours[name].tobytes() == theirs[name].tobytes(), f"{name}: mine {ours[name]}, saved {theirs[name]}"


# --- round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_loading_gives_the_saved_arrays_bit_for_bit(tmp_path, kind):
    saved = trained(kind, seed=0)
    save_checkpoint(tmp_path / "c.npz", saved)
    other = trained(kind, seed=1)
    assert network_state(other)  # a different state, about to be overwritten
    load_checkpoint(tmp_path / "c.npz", other)
    assert_same_state(network_state(other), network_state(saved))


def test_the_state_covers_update_rule_state_and_batch_norm_statistics():
    names = network_state(trained("dni blocks (mlp generators, batch norm, adam)"))
    assert {"0.block.modules.0.weights", "0.block.modules.1.running_mean", "0.block.modules.1.running_var",
            "0.block.modules.1.update_state.gamma.m", "0.block.modules.1.update_state.gamma.v",
            "0.block.modules.1.update_state.gamma.t", "0.generator.net.modules.0.modules.1.running_var",
            "0.generator.net.modules.1.update_state.weights.m", "2.update_state.bias.t"} <= set(names)
    assert int(names["2.update_state.bias.t"]) == 3  # Adam's step count after three steps
    assert "update_state.weights.velocity" in network_state(trained("momentum layer"))


def test_a_loaded_network_trains_on_exactly_as_the_saved_one(tmp_path):
    saved = trained("dni blocks (mlp generators, batch norm, adam)", seed=0)
    save_checkpoint(tmp_path / "c.npz", saved)
    loaded = trained("dni blocks (mlp generators, batch norm, adam)", seed=1)
    load_checkpoint(tmp_path / "c.npz", loaded)
    rng = np.random.default_rng(5)
    x, y = rng.random((8, 20), dtype=np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]
    for layers in (saved, loaded):
        steps.dni_step(layers, x, y, softmax_cross_entropy, 1e-3, condition=y)
    assert_same_state(network_state(loaded), network_state(saved))


def test_metadata_and_extra_arrays_come_back(tmp_path):
    order = np.random.default_rng(0).permutation(10)
    save_checkpoint(tmp_path / "c.npz", trained("momentum layer"), metadata={"step": 7, "history": [0.5, 1e-300]},
                    extra={"order": order})
    checkpoint = load_checkpoint(tmp_path / "c.npz")
    assert checkpoint.metadata["step"] == 7 and checkpoint.metadata["history"] == [0.5, 1e-300]
    assert checkpoint.metadata["format_version"] == ckpt.FORMAT_VERSION
    np.testing.assert_array_equal(checkpoint.extra["order"], order)


def test_a_checkpoint_records_the_sgrad_version_and_the_digest_of_its_source(tmp_path):
    save_checkpoint(tmp_path / "c.npz", trained("momentum layer"))
    code = load_checkpoint(tmp_path / "c.npz").metadata["code"]
    assert code == {"sgrad_version": sgrad.__version__, "source_digest": provenance.source_digest()}
    assert len(code["source_digest"]) == 64 and int(code["source_digest"], 16) >= 0


def test_an_extra_array_of_python_objects_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, trained("momentum layer"), metadata={"step": 1})
    old = path.read_bytes()
    with pytest.raises(TypeError, match=r"extra\['notes'\] holds Python objects \(dtype object\), which a checkpoint "
                                        "cannot store .*; pass arrays of numbers, and put other values into metadata"):
        save_checkpoint(path, trained("momentum layer"), extra={"order": np.arange(3),
                                                                 "notes": np.array([{"lr": 0.1}], dtype=object)})
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


# --- errors ---------------------------------------------------------------------------------


@pytest.fixture
def saved_stack(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, trained("cdni stack (linear generators, adam)"))
    return path


def test_a_missing_file_says_where_it_looked(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint at .*nowhere.npz") as info:
        load_checkpoint(tmp_path / "nowhere.npz")
    assert isinstance(info.value, ValueError) and isinstance(info.value, FileNotFoundError)


def test_a_truncated_file_is_refused_with_advice(saved_stack):
    saved_stack.write_bytes(saved_stack.read_bytes()[:len(saved_stack.read_bytes()) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt.*delete it to start afresh"):
        load_checkpoint(saved_stack)


def test_a_corrupted_byte_is_caught_by_the_checksum(saved_stack):
    raw = bytearray(saved_stack.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    saved_stack.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(saved_stack)


def test_a_file_from_a_newer_format_asks_for_a_newer_sgrad(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "FORMAT_VERSION", ckpt.FORMAT_VERSION + 1)
    save_checkpoint(tmp_path / "new.npz", trained("momentum layer"))
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match=r"format version 2, but this sgrad reads versions up to 1; "
                                              "load it with a newer sgrad"):
        load_checkpoint(tmp_path / "new.npz")


@pytest.mark.parametrize("version", [True, -7, 0, "1", None], ids=["true", "negative", "zero", "text", "none"])
def test_a_format_version_that_is_no_version_is_refused_naming_the_field(saved_stack, version):
    damage_checkpoint(saved_stack, lambda metadata, arrays: metadata.update(format_version=version))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(saved_stack)
    assert str(info.value) == (f"{saved_stack} is damaged: its 'format_version' must be a whole number from 1 to "
                               f"{ckpt.FORMAT_VERSION}; got {version!r}; delete it to start afresh, or restore it "
                               "from a copy")


def test_an_npz_that_is_not_a_checkpoint_is_refused(tmp_path):
    np.savez(tmp_path / "other.npz", weights=np.ones(3))
    with pytest.raises(CheckpointError, match="not an sgrad checkpoint"):
        load_checkpoint(tmp_path / "other.npz")


def test_a_different_layer_count_is_named(saved_stack):
    deeper = binary_addition.build_network("cdni", 10, 5, binary_addition.TrainConfig(hidden=(8, 8, 8)))
    with pytest.raises(CheckpointError, match="holds a network of 3 layers, this network has 4"):
        load_checkpoint(saved_stack, deeper)


def test_a_different_shape_names_the_array_and_both_shapes(saved_stack):
    wider = binary_addition.build_network("cdni", 10, 5, binary_addition.TrainConfig(hidden=(8, 16)))
    with pytest.raises(CheckpointError, match=r"array '1.weights' is float32 of shape \(8, 8\) in the checkpoint but "
                                              r"float32 of shape \(8, 16\) in this network"):
        load_checkpoint(saved_stack, wider)


def test_another_kind_of_network_names_an_array_it_lacks(saved_stack):
    backprop = binary_addition.build_network("backprop", 10, 5, binary_addition.TrainConfig(hidden=(8, 8)))
    with pytest.raises(CheckpointError, match="it holds '0.generator.net.weights', which this network does not have"):
        load_checkpoint(saved_stack, backprop)


def test_another_dtype_is_named(tmp_path):
    save_checkpoint(tmp_path / "c.npz", mnist.build_network("dni", 20, PAPER_TINY))
    float64 = mnist.build_network("dni", 20, dataclasses.replace(PAPER_TINY, dtype="float64"))
    with pytest.raises(CheckpointError, match="is float32 of shape .* but float64"):
        load_checkpoint(tmp_path / "c.npz", float64)


def test_a_refused_load_changes_nothing(saved_stack):
    wider = binary_addition.build_network("cdni", 10, 5, binary_addition.TrainConfig(hidden=(8, 16), seed=3))
    before = network_state(wider)
    with pytest.raises(CheckpointError):
        load_checkpoint(saved_stack, wider)
    assert_same_state(network_state(wider), before)


# --- atomic saves ---------------------------------------------------------------------------


@pytest.mark.parametrize("failure", [OSError("No space left on device"), KeyboardInterrupt()])
def test_a_save_that_fails_mid_write_leaves_the_old_checkpoint_and_no_temporary_file(tmp_path, monkeypatch, failure):
    path = tmp_path / "c.npz"
    old = trained("cdni stack (linear generators, adam)", seed=0)
    save_checkpoint(path, old, metadata={"step": 1})
    write = ckpt._write_npz

    def write_half_then_fail(file, payload):
        write(file, payload)
        file.truncate(file.tell() // 2)
        raise failure

    monkeypatch.setattr(ckpt, "_write_npz", write_half_then_fail)
    with pytest.raises(type(failure)):
        save_checkpoint(path, trained("cdni stack (linear generators, adam)", seed=1), metadata={"step": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]
    checkpoint = load_checkpoint(path)
    assert checkpoint.metadata["step"] == 1
    assert_same_state(checkpoint.network, network_state(old))


SAVE_FOREVER = """
import sys
import numpy as np
import sgrad
from sgrad.nn.checkpoint import save_checkpoint
layer = sgrad.Layer(4, 3, "tanh")
for i in range(1, 10**6):
    save_checkpoint(sys.argv[1], layer, metadata={"i": i}, extra={"fill": np.full(1_000_000, i)})
    if i == 1:
        print("saved", flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.13])
def test_a_saving_process_killed_at_any_moment_leaves_a_whole_checkpoint(tmp_path, delay):
    path = tmp_path / "c.npz"
    saver = subprocess.Popen([sys.executable, "-c", SAVE_FOREVER, str(path)], stdout=subprocess.PIPE, text=True,
                             env=ENV)
    try:
        assert saver.stdout.readline() == "saved\n"
        time.sleep(delay)
    finally:
        saver.send_signal(signal.SIGKILL)
        saver.wait(timeout=30)
        saver.stdout.close()
    checkpoint = load_checkpoint(path)
    assert np.all(checkpoint.extra["fill"] == checkpoint.metadata["i"])  # one save's arrays, whole


SAVE_AND_HANG = """
import sys, time
import numpy as np
import sgrad
from sgrad import checkpoint
write = checkpoint._write_npz

def write_then_hang(file, payload):
    write(file, payload)
    file.flush()
    print("written", flush=True)
    time.sleep(600)

checkpoint._write_npz = write_then_hang
checkpoint.save_checkpoint(sys.argv[1], sgrad.Layer(4, 3, "tanh"), extra={"fill": np.ones(1_000_000)})
"""


def test_the_temporary_file_of_a_killed_save_is_removed_by_the_next_save(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, trained("momentum layer"), metadata={"step": 1})
    saver = subprocess.Popen([sys.executable, "-c", SAVE_AND_HANG, str(path)], stdout=subprocess.PIPE, text=True,
                             env=ENV)
    try:
        assert saver.stdout.readline() == "written\n"  # the whole temporary file is on disk, not yet renamed
    finally:
        saver.send_signal(signal.SIGKILL)
        saver.wait(timeout=30)
        saver.stdout.close()
    left = [p for p in tmp_path.iterdir() if p.name != "c.npz"]
    assert len(left) == 1 and left[0].name.startswith(".c.npz.") and left[0].name.endswith(".tmp")
    assert left[0].stat().st_size > 8_000_000  # the size of that checkpoint, 1e6 float64 in it
    assert load_checkpoint(path).metadata["step"] == 1  # the old checkpoint is whole

    save_checkpoint(path, trained("momentum layer"), metadata={"step": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]
    assert load_checkpoint(path).metadata["step"] == 2


def test_a_save_removes_only_its_own_checkpoints_temporary_files(tmp_path):
    others = [".c.npz.x.abcd1234.tmp", ".d.npz.abcd1234.tmp", ".c.npz.abc.tmp", "c.npz.abcd1234.tmp", ".c.npz.abcd1234"]
    for name in [*others, ".c.npz.k2_9zq0a.tmp"]:
        (tmp_path / name).write_bytes(b"left by a killed save")
    save_checkpoint(tmp_path / "c.npz", trained("momentum layer"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*others, "c.npz"])


# --- resuming training ----------------------------------------------------------------------------


def interrupt_at(monkeypatch, module, names, call):
    """Make ``module``'s step functions raise KeyboardInterrupt on their ``call``-th call, as if killed there."""
    calls = []
    for name in names:
        step = getattr(module, name)

        def interrupted(*args, step=step, **kwargs):
            calls.append(1)
            if len(calls) == call:
                raise KeyboardInterrupt
            return step(*args, **kwargs)
        monkeypatch.setattr(module, name, interrupted)


def without_wall_time(history):
    return {k: v for k, v in history.items() if k != "wall_time"}


RESUME_TRAIN = """
import json, sys
from data_gen import generate_split
from sgrad.experiments.binary_addition import METHODS, TrainConfig, train
config = TrainConfig(**json.loads(sys.argv[2]))
data = generate_split(5, 64, 16, seed=0)
lines = []
histories = {m: train(m, data, config, progress=lines.append, checkpoint=f"{sys.argv[1]}/{m}.npz") for m in METHODS}
json.dump({"histories": histories, "lines": lines}, sys.stdout)
"""


def test_train_resumed_in_a_fresh_process_ends_bit_identical_to_an_unbroken_run(tmp_path, monkeypatch):
    """All four methods; 4 steps per epoch, 16 in all, killed at step 7, checkpoints every 3 steps: resumes at 6."""
    data = generate_split(5, 64, 16, seed=0)
    config = binary_addition.TrainConfig(epochs=4, batch_size=16, hidden=(8, 8), seed=2)
    unbroken = {m: binary_addition.train(m, data, config, checkpoint=tmp_path / f"unbroken-{m}.npz") for m in sgrad.METHODS}
    for method in sgrad.METHODS:
        interrupt_at(monkeypatch, binary_addition, ["take_step"], call=7)
        with pytest.raises(KeyboardInterrupt):
            binary_addition.train(method, data, config, checkpoint=tmp_path / f"{method}.npz", checkpoint_every=3)
        monkeypatch.undo()
        assert load_checkpoint(tmp_path / f"{method}.npz").metadata["step"] == 6
    result = subprocess.run([sys.executable, "-c", RESUME_TRAIN, str(tmp_path), json.dumps(dataclasses.asdict(config))],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr
    resumed = json.loads(result.stdout)
    for method in sgrad.METHODS:
        assert f"[{method}] resumed from {tmp_path}/{method}.npz at step 6 of 16" in resumed["lines"]
        assert without_wall_time(resumed["histories"][method]) == without_wall_time(unbroken[method])
        assert_same_state(load_checkpoint(tmp_path / f"{method}.npz").network,
                          load_checkpoint(tmp_path / f"unbroken-{method}.npz").network)


def test_train_carries_a_finished_run_on_to_more_epochs(tmp_path):
    data = generate_split(5, 64, 16, seed=0)
    config = binary_addition.TrainConfig(epochs=5, batch_size=16, hidden=(8, 8), seed=1)
    unbroken = binary_addition.train("cdni", data, config)
    binary_addition.train("cdni", data, dataclasses.replace(config, epochs=2), checkpoint=tmp_path / "c.npz")
    lines = []
    resumed = binary_addition.train("cdni", data, config, checkpoint=tmp_path / "c.npz", progress=lines.append)
    assert lines[0] == f"[cdni] resumed from {tmp_path}/c.npz at step 8 of 20"
    assert without_wall_time(resumed) == without_wall_time(unbroken)


def test_a_checkpoint_of_other_settings_is_not_resumed_and_says_why(tmp_path):
    data = generate_split(5, 64, 16, seed=0)
    config = binary_addition.TrainConfig(epochs=2, batch_size=16, hidden=(8, 8))
    binary_addition.train("dni", data, config, checkpoint=tmp_path / "c.npz")
    lines = []
    fresh = binary_addition.train("dni", data, dataclasses.replace(config, alpha=0.01), checkpoint=tmp_path / "c.npz",
                           progress=lines.append)
    assert lines[0] == (f"[dni] not resuming from {tmp_path}/c.npz: it was saved with other settings or data "
                        "(alpha 0.002 then, 0.01 now); starting afresh")
    assert without_wall_time(fresh) == without_wall_time(
        binary_addition.train("dni", data, dataclasses.replace(config, alpha=0.01)))


RESUME_PAPER = """
import json, sys
import numpy as np
from sgrad.experiments.mnist import PaperConfig, train_paper
config = PaperConfig(**json.loads(sys.argv[2]))
arrays = np.load(f"{sys.argv[1]}/data.npz")
data = tuple(arrays[k] for k in ("x_train", "y_train", "x_test", "y_test"))
lines = []
methods = ("backprop", "dni", "cdni", "synthetic-loss")
histories = {m: train_paper(m, data, config, progress=lines.append, checkpoint=f"{sys.argv[1]}/{m}.npz")
             for m in methods}
json.dump({"histories": histories, "lines": lines}, sys.stdout)
"""


def test_train_paper_resumed_in_a_fresh_process_ends_bit_identical(tmp_path, monkeypatch):
    """MLP generators with batch norm, Adam everywhere, float32; 8 batches per pass over the data, 10 iterations,
    evaluations at 4, 8 and 10; killed at iteration 7, checkpoints every 3 iterations: resumes at 6."""
    data = paper_data()
    np.savez(tmp_path / "data.npz", **dict(zip(("x_train", "y_train", "x_test", "y_test"), data)))
    methods = ("backprop", "dni", "cdni", "synthetic-loss")
    unbroken = {m: mnist.train_paper(m, data, PAPER_TINY, checkpoint=tmp_path / f"unbroken-{m}.npz") for m in methods}
    for method in methods:
        interrupt_at(monkeypatch, mnist, ["take_step"], call=7)
        with pytest.raises(KeyboardInterrupt):
            mnist.train_paper(method, data, PAPER_TINY, checkpoint=tmp_path / f"{method}.npz", checkpoint_every=3)
        monkeypatch.undo()
    result = subprocess.run([sys.executable, "-c", RESUME_PAPER, str(tmp_path),
                             json.dumps(dataclasses.asdict(PAPER_TINY))],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr
    resumed = json.loads(result.stdout)
    for method in methods:
        assert f"[{method}, depth 3] resumed from {tmp_path}/{method}.npz at iteration 6 of 10" in resumed["lines"]
        assert resumed["histories"][method]["iteration"] == [4, 8, 10]
        assert without_wall_time(resumed["histories"][method]) == without_wall_time(unbroken[method])
        assert_same_state(load_checkpoint(tmp_path / f"{method}.npz").network,
                          load_checkpoint(tmp_path / f"unbroken-{method}.npz").network)


# --- the commands resume from their own checkpoints ------------------------------------------------------

COMPARE_TINY = ["compare", "--bits", "5", "--train", "64", "--test", "16", "--hidden", "8,8", "--batch-size", "16"]


def histories_in(out):
    record = json.loads((out / "history.json").read_text())
    return {method: without_wall_time(h) for method, h in record["histories"].items()}


def test_sgrad_compare_run_again_with_more_epochs_resumes_bit_identical(tmp_path):
    unbroken = subprocess.run([*SGRAD, *COMPARE_TINY, "--epochs", "6", "--out", str(tmp_path / "unbroken")],
                              capture_output=True, text=True, env=ENV, timeout=300)
    assert unbroken.returncode == 0, unbroken.stderr
    for epochs in ("3", "6"):
        broken = subprocess.run([*SGRAD, *COMPARE_TINY, "--epochs", epochs, "--checkpoint-every", "5",
                                 "--out", str(tmp_path / "broken")], capture_output=True, text=True, env=ENV,
                                timeout=300)
        assert broken.returncode == 0, broken.stderr
    for method in sgrad.METHODS:
        assert f"[{method}] resumed from {tmp_path}/broken/checkpoints/{method}.npz at step 12 of 24" in broken.stderr
        assert_same_state(load_checkpoint(tmp_path / "broken" / "checkpoints" / f"{method}.npz").network,
                          load_checkpoint(tmp_path / "unbroken" / "checkpoints" / f"{method}.npz").network)
    assert histories_in(tmp_path / "broken") == histories_in(tmp_path / "unbroken")


def test_sgrad_compare_killed_after_a_checkpoint_resumes_bit_identical(tmp_path):
    command = [*SGRAD, *COMPARE_TINY, "--methods", "cdni", "--epochs", "300", "--checkpoint-every", "50"]
    checkpoint = tmp_path / "killed" / "checkpoints" / "cdni.npz"
    run = subprocess.Popen([*command, "--out", str(tmp_path / "killed")], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL
    step = load_checkpoint(checkpoint).metadata["step"]
    assert 50 <= step < 1200
    resumed = subprocess.run([*command, "--out", str(tmp_path / "killed")], capture_output=True, text=True, env=ENV,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"[cdni] resumed from {checkpoint} at step {step} of 1200" in resumed.stderr
    unbroken = subprocess.run([*command, "--checkpoint-every", "0", "--out", str(tmp_path / "unbroken")],
                              capture_output=True, text=True, env=ENV, timeout=300)
    assert unbroken.returncode == 0, unbroken.stderr
    assert histories_in(tmp_path / "killed") == histories_in(tmp_path / "unbroken")
    assert not (tmp_path / "unbroken" / "checkpoints").exists()


def test_sgrad_compare_with_other_settings_starts_afresh(tmp_path, capsys):
    from sgrad.cli import main

    out = str(tmp_path / "out")
    assert main([*COMPARE_TINY, "--methods", "dni", "--epochs", "1", "--out", out]) == 0
    assert main([*COMPARE_TINY, "--methods", "dni", "--epochs", "1", "--lr", "0.01", "--out", out]) == 0
    assert "[dni] not resuming from" in capsys.readouterr().err


def test_sgrad_compare_refuses_a_damaged_checkpoint_in_one_line(tmp_path, capsys):
    from sgrad.cli import main

    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "dni.npz").write_bytes(b"PK\x03\x04 not really a zip archive")
    with pytest.raises(SystemExit) as info:
        main([*COMPARE_TINY, "--methods", "dni", "--epochs", "1", "--out", str(out), "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sgrad compare: error: {out}/checkpoints/dni.npz is not a readable checkpoint")
    assert "delete it to start afresh" in err and len(err.splitlines()) == 1


def test_sgrad_paper_run_again_with_more_iterations_resumes_a_cell_bit_identical(tmp_path):
    tiny_mnist(tmp_path)
    command = [*SGRAD, "paper", "--methods", "backprop,cdni", "--depths", "2", "--eval-every", "4", "--batch-size", "8",
               "--hidden", "16", "--generator-hidden", "8", "--no-verify", "--data", str(tmp_path / "mnist.npz")]
    unbroken = subprocess.run([*command, "--iterations", "10", "--out", str(tmp_path / "unbroken")],
                              capture_output=True, text=True, env=ENV, timeout=300)
    assert unbroken.returncode == 0, unbroken.stderr
    for iterations in ("6", "10"):
        broken = subprocess.run([*command, "--iterations", iterations, "--checkpoint-every", "3",
                                 "--out", str(tmp_path / "broken")], capture_output=True, text=True, env=ENV,
                                timeout=300)
        assert broken.returncode == 0, broken.stderr
    for method in ("backprop", "cdni"):
        path = f"{tmp_path}/broken/checkpoints/{method}-depth2.npz"
        assert f"[{method}, depth 2] resumed from {path} at iteration 6" in broken.stderr
        assert_same_state(load_checkpoint(path).network,
                          load_checkpoint(tmp_path / "unbroken" / "checkpoints" / f"{method}-depth2.npz").network)
    cells = {out: {(c["method"], c["depth"]): without_wall_time(c)
                   for c in json.loads((tmp_path / out / "histories.json").read_text())["cells"]}
             for out in ("broken", "unbroken")}
    assert cells["broken"] == cells["unbroken"]
    assert cells["broken"][("cdni", 2)]["iteration"] == [4, 8, 10]


# --- results that follow the code -------------------------------------------------------------------

DNI_UPDATE = "    module.update(module_alpha)                                  # 4. descend on ĝ_k at once\n"


def test_sgrad_compare_after_an_edit_of_sgrad_starts_afresh_and_says_why(tmp_path):
    """The issue's case: a DNI layer edited to no longer update must not report the old results."""
    src = copy_of_the_code(tmp_path)
    env = dict(ENV, PYTHONPATH=str(src))
    command = [*SGRAD, *COMPARE_TINY, "--methods", "dni", "--epochs", "3", "--checkpoint-every", "5",
               "--out", str(tmp_path / "out")]
    first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    before = json.loads((tmp_path / "out" / "history.json").read_text())["histories"]["dni"]

    dni = src / "sgrad" / "dni" / "decoupled.py"
    assert dni.read_text(encoding="utf-8").count(DNI_UPDATE) == 1
    dni.write_text(dni.read_text(encoding="utf-8").replace(DNI_UPDATE, "    # edited: no descent on ĝ\n"),
                   encoding="utf-8")
    start = time.perf_counter()
    edited = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    elapsed = time.perf_counter() - start
    assert edited.returncode == 0, edited.stderr
    checkpoint = tmp_path / "out" / "checkpoints" / "dni.npz"
    assert (f"[dni] not resuming from {checkpoint}: it was saved by other code (source digest "
            in edited.stderr), edited.stderr
    assert "whose results would not be this code's; starting afresh" in edited.stderr
    assert "resumed from" not in edited.stderr
    after = json.loads((tmp_path / "out" / "history.json").read_text())["histories"]["dni"]
    assert after["step_loss"] != before["step_loss"]
    assert after["step_loss"][0] == before["step_loss"][0]  # the same start; the layers no longer learn after it
    assert 0 < after["wall_time"] < elapsed  # this run's own time, none of the old run's

    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert f"[dni] resumed from {checkpoint} at step 12 of 12" in again.stderr  # the same code again: it resumes
