"""The paper's MNIST experiments: the grid's cache and resume, the command, and the ordering of methods on real data."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from sgrad.paper import PAPER_METHODS, PaperConfig, build_network, results_table, run_grid, train_paper

TINY = PaperConfig(iterations=6, eval_every=3, hidden=16, generator_hidden=(8,), batch_size=8, seed=0)


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(0)
    x_train = rng.random((64, 20), dtype=np.float32)
    x_test = rng.random((32, 20), dtype=np.float32)
    return x_train, rng.integers(0, 10, 64), x_test, rng.integers(0, 10, 32)


@pytest.mark.parametrize("method", PAPER_METHODS)
def test_every_method_trains_and_records_its_accuracy(tiny_data, method):
    history = train_paper(method, tiny_data, TINY)
    assert history["iteration"] == [3, 6]
    assert all(0.0 <= a <= 1.0 for a in history["test_accuracy"])
    assert all(np.isfinite(history["train_loss"]))


def test_every_method_starts_from_the_same_block_weights():
    networks = {m: build_network(m, 20, TINY) for m in PAPER_METHODS}
    reference = networks["backprop"]
    for method, layers in networks.items():
        for ours, theirs in zip(layers, reference):
            for name, value in theirs.parameters.items():
                np.testing.assert_array_equal(ours.parameters[name], value, err_msg=f"{method}: {name}")


def test_no_bprop_changes_only_the_top_layer(tiny_data):
    import dataclasses

    config = dataclasses.replace(TINY, iterations=3)
    before = build_network("no-bprop", 20, config)
    # Train a copy by hand through train_paper's own step, then compare every block's parameters.
    from sgrad.losses import softmax_cross_entropy
    from sgrad.training import backprop_step

    layers = build_network("no-bprop", 20, config)
    x, y = tiny_data[0][:8], np.eye(10, dtype=np.float32)[tiny_data[1][:8]]
    backprop_step(layers, x, y, softmax_cross_entropy, 1e-2, trainable=len(layers) - 1)
    for ours, initial in zip(layers[:-1], before[:-1]):
        for name, value in initial.parameters.items():
            np.testing.assert_array_equal(ours.parameters[name], value)
    assert np.abs(layers[-1].weights - before[-1].weights).max() > 0


def test_the_grid_caches_each_cell_and_resumes(tiny_data, tmp_path):
    lines = []
    first = run_grid(tiny_data, methods=("backprop",), depths=(3,), config=TINY, out_dir=tmp_path,
                     progress=lines.append)
    assert (tmp_path / "cells" / "backprop-depth3.json").is_file()
    lines.clear()
    resumed = run_grid(tiny_data, methods=("backprop", "cdni"), depths=(3,), config=TINY, out_dir=tmp_path,
                       progress=lines.append)
    assert "[backprop, depth 3] loaded from" in lines[0]
    assert any(line.startswith("[cdni, depth 3] done in") for line in lines)
    assert resumed[("backprop", 3)] == json.loads(json.dumps(first[("backprop", 3)]))
    for name in ("results.md", "paper.png", "histories.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "paper.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| cdni |" in (tmp_path / "results.md").read_text()


def test_a_cell_made_with_other_settings_or_data_is_trained_again(tiny_data, tmp_path):
    import dataclasses

    run_grid(tiny_data, methods=("backprop",), config=TINY, out_dir=tmp_path)
    lines = []
    run_grid(tiny_data, methods=("backprop",), config=dataclasses.replace(TINY, alpha=1e-3), out_dir=tmp_path,
             progress=lines.append)
    assert not any("loaded" in line for line in lines)
    lines.clear()
    other_labels = (tiny_data[0], tiny_data[1][::-1].copy(), tiny_data[2], tiny_data[3])
    run_grid(other_labels, methods=("backprop",), config=dataclasses.replace(TINY, alpha=1e-3), out_dir=tmp_path,
             progress=lines.append)
    assert not any("loaded" in line for line in lines)


def test_generator_settings_do_not_invalidate_the_cells_of_methods_without_generators(tiny_data, tmp_path):
    import dataclasses

    run_grid(tiny_data, methods=("backprop", "no-bprop", "dni"), config=TINY, out_dir=tmp_path)
    lines = []
    run_grid(tiny_data, methods=("backprop", "no-bprop", "dni"), out_dir=tmp_path, progress=lines.append,
             config=dataclasses.replace(TINY, generator_alpha=1e-6, generator_hidden=(4,)))
    loaded = sorted(line.split("]")[0] for line in lines if "loaded from" in line)
    assert loaded == ["[backprop, depth 3", "[no-bprop, depth 3"]


def test_results_table_has_a_row_per_method_and_a_column_per_depth(tiny_data):
    results = run_grid(tiny_data, methods=("backprop", "no-bprop"), depths=(2, 3), config=TINY)
    table = results_table(results)
    assert table.splitlines()[0] == "| method | 2 layers | 3 layers |"
    assert len(table.splitlines()) == 4


def _real_mnist():
    folder = os.environ.get("SGRAD_DATA_DIR")
    path = pathlib.Path(folder) / "mnist.npz" if folder else None
    return path if path is not None and path.is_file() else None


@pytest.mark.skipif(_real_mnist() is None, reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz")
def test_on_real_mnist_the_methods_keep_the_papers_order():
    """Reduced budget (10,000 training images, 1,000 steps, linear generators; about 15 s).

    Measured (the subset and the seed both 0, then both 1): backprop 95.98 / 95.76%, cdni 96.43 / 96.19%,
    dni 90.43 / 91.09%, no-bprop 80.75 / 82.12%.
    """
    from data_gen.mnist import load_mnist, prepare_mnist

    data = tuple(prepare_mnist(load_mnist(_real_mnist()), subset=10_000, seed=0))
    config = PaperConfig(iterations=1000, eval_every=1000, hidden=128, generator="linear", alpha=1e-3,
                         batch_size=128, seed=0)
    accuracy = {m: train_paper(m, data, config)["test_accuracy"][-1]
                for m in ("backprop", "no-bprop", "dni", "cdni")}
    assert accuracy["no-bprop"] <= accuracy["backprop"] - 0.10
    assert accuracy["dni"] >= accuracy["no-bprop"] + 0.06
    assert accuracy["cdni"] >= accuracy["backprop"] - 0.01


def test_the_paper_command_runs_and_writes_its_files(tmp_path):
    rng = np.random.default_rng(0)
    archive = tmp_path / "mnist.npz"
    np.savez_compressed(archive, x_train=rng.integers(0, 256, (64, 28, 28), dtype=np.uint8),
                        y_train=rng.integers(0, 10, 64, dtype=np.uint8),
                        x_test=rng.integers(0, 256, (16, 28, 28), dtype=np.uint8),
                        y_test=rng.integers(0, 10, 16, dtype=np.uint8))
    env = dict(os.environ, SGRAD_DATA_DIR=str(tmp_path))
    command = [sys.executable, "-m", "sgrad", "paper", "--methods", "backprop,dni", "--depths", "2,3",
               "--iterations", "4", "--eval-every", "2", "--batch-size", "8", "--hidden", "16",
               "--generator-hidden", "8", "--out", str(tmp_path / "out")]
    # The small archive is not the real MNIST, so its hashes cannot be verified: the command must say so.
    refused = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert refused.stderr.startswith("sgrad paper: error: ")
    assert "SHA-256" in refused.stderr or "sha256" in refused.stderr.lower()

    result = subprocess.run(command + ["--no-verify"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "| method | 2 layers | 3 layers |"
    assert "[dni, depth 3] iteration 4/4" in result.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in (out / "cells").iterdir()) == [
        "backprop-depth2.json", "backprop-depth3.json", "dni-depth2.json", "dni-depth3.json"]
    assert (out / "results.md").read_text() == result.stdout
    histories = json.loads((out / "histories.json").read_text())
    assert {(c["method"], c["depth"]) for c in histories["cells"]} == {
        ("backprop", 2), ("backprop", 3), ("dni", 2), ("dni", 3)}
    assert all(c["iteration"] == [2, 4] for c in histories["cells"])
