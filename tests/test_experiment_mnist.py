"""The MNIST experiment (``sgrad paper``): every method trains and records, the same start and batches for each, its
settings, the grid's cache and resume, divergence, the command, and the ordering of methods on real data."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from conftest import copy_of_the_code, tiny_mnist

import sgrad
from sgrad.experiments import mnist
from sgrad.experiments.mnist import PAPER_METHODS, PaperConfig, build_network, results_table, run_grid, train_paper

TINY = PaperConfig(iterations=6, eval_every=3, hidden=16, generator_hidden=(8,), batch_size=8, seed=0)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(0)
    x_train = rng.random((64, 20), dtype=np.float32)
    x_test = rng.random((32, 20), dtype=np.float32)
    return x_train, rng.integers(0, 10, 64), x_test, rng.integers(0, 10, 32)


# --- every method ---------------------------------------------------------------------------------------


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


def test_every_method_sees_the_same_batches(monkeypatch):
    rng = np.random.default_rng(0)
    data = (rng.random((40, 20), dtype=np.float32), rng.integers(0, 10, 40),
            rng.random((16, 20), dtype=np.float32), rng.integers(0, 10, 16))
    config = PaperConfig(iterations=12, eval_every=6, hidden=16, generator_hidden=(8,), batch_size=8)
    seen = []
    for name in ("take_step", "complete_unlock_step"):  # the complete unlock's step takes its input generators too
        step = getattr(mnist, name)
        monkeypatch.setattr(mnist, name, lambda first, second, x, *a, step=step, **k: seen.append(x.copy())
                            or step(first, second, x, *a, **k))
    per_method = {}
    for method in PAPER_METHODS:
        seen.clear()
        train_paper(method, data, config)
        per_method[method] = list(seen)
    for method, batches in per_method.items():
        assert len(batches) == 12
        assert all(np.array_equal(a, b) for a, b in zip(batches, per_method["backprop"])), method


# --- settings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, error, fragment", [
    ({"depth": 1}, ValueError, "depth must be at least 2; got 1"),
    ({"hidden": 0}, ValueError, "hidden must be at least 1"),
    ({"batchnorm": "no"}, TypeError, "batchnorm must be True or False; got 'no'"),
    ({"generator": "lstm"}, ValueError, "unknown generator 'lstm'; choose one of 'linear', 'mlp'"),
    ({"generator_hidden": (8, 0)}, ValueError, "every width in generator_hidden must be at least 1; got 0"),
    ({"generator_hidden": 8}, TypeError, "generator_hidden must be a tuple of layer widths"),
    ({"generator_batchnorm": 1}, TypeError, "generator_batchnorm must be True or False; got 1"),
    ({"iterations": 0}, ValueError, "iterations must be at least 1"),
    ({"batch_size": 0}, ValueError, "batch_size must be at least 1"),
    ({"update_rule": "rmsprop"}, ValueError, "unknown update rule 'rmsprop'; choose one of 'sgd', 'momentum', 'adam'"),
    ({"alpha": float("nan")}, ValueError, "alpha (a learning rate) must be a finite number > 0"),
    ({"generator_alpha": -1e-3}, ValueError, "generator_alpha (a learning rate) must be a finite number > 0"),
    ({"eval_every": 0}, ValueError, "eval_every must be at least 1"),
    ({"dtype": "float16"}, ValueError, "unknown dtype 'float16'; choose one of 'float32', 'float64'"),
    ({"seed": -1}, ValueError, "seed must be at least 0"),
    ({"arch": "resnet"}, ValueError, "unknown arch 'resnet'; choose one of 'mlp', 'cnn', 'peer-cnn'"),
    ({"channels": 0}, ValueError, "channels must be at least 1"),
    ({"kernel_size": 4}, ValueError, "kernel_size must be odd, so that padding keeps the maps' size; got 4"),
    ({"interfaces": (3,)}, ValueError, "interfaces must be 'every', or the numbers of hidden blocks from 1 to 2 such "
                                       "as (2,), each once and in increasing order; got (3,) at depth 3"),
    ({"interfaces": (2, 1)}, ValueError, "each once and in increasing order; got (2, 1) at depth 3"),
    ({"interfaces": (1, 1)}, ValueError, "each once and in increasing order; got (1, 1) at depth 3"),
    ({"interfaces": ()}, ValueError, "interfaces must be 'every', or the numbers of hidden blocks from 1 to 2"),
    ({"interfaces": "all"}, ValueError, "interfaces must be 'every', or the numbers of hidden blocks from 1 to 2"),
    ({"interfaces": (0,)}, ValueError, "every block number in interfaces must be at least 1; got 0"),
    ({"interface_position": "middle"}, ValueError,
     "unknown interface_position 'middle'; choose one of 'after', 'before'"),
    ({"generator_targets": "oracle"}, ValueError, "unknown generator_targets 'oracle'; choose one of 'bootstrap', 'true'"),
    ({"loss": "max"}, ValueError, "unknown loss 'max'; choose one of 'sum', 'mean'"),
    ({"logit_batchnorm": "yes"}, TypeError, "logit_batchnorm must be True or False; got 'yes'"),
    ({"init": "xavier"}, ValueError, "unknown init 'xavier'; choose one of 'he', 'pytorch'"),
    ({"generator_init": "he"}, ValueError, "unknown generator_init 'he'; choose one of 'sgrad', 'pytorch'"),
    ({"arch": "cnn", "generator_init": "pytorch"}, ValueError,
     "generator_init shapes the fully connected nets only (arch='mlp')"),
    ({"arch": "peer-cnn", "generator_init": "pytorch"}, ValueError,
     "generator_init shapes sgrad's own networks, but arch='peer-cnn' is koz4k/dni-pytorch's MNIST CNN example whole"),
    ({"arch": "cnn", "interfaces": (1,), "logit_batchnorm": True}, ValueError,
     "interfaces, logit_batchnorm shape the fully connected nets only (arch='mlp'); the CNN has an interface after "
     "every conv block. Leave interfaces and logit_batchnorm at 'every', False, or use arch='mlp'"),
])
def test_bad_paper_options_are_refused_up_front(bad, error, fragment):
    with pytest.raises(error) as info:
        PaperConfig(**bad)
    assert fragment in str(info.value)


def test_unknown_method_is_refused(tiny_data):
    with pytest.raises(ValueError, match="unknown method 'synthetic'"):
        train_paper("synthetic", tiny_data, TINY)
    with pytest.raises(ValueError, match="methods must be a non-empty list drawn from backprop, no-bprop, dni, cdni"):
        run_grid(tiny_data, methods=("dni", "synthetic"), config=TINY)


# --- the grid -------------------------------------------------------------------------------------------


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
    assert (tmp_path / "paper.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "| cdni |" in (tmp_path / "results.md").read_text()
    assert sorted(p.name for p in tmp_path.rglob("*.tmp")) == []  # every write was atomic: no temporary file left


def test_a_cell_made_with_other_settings_or_data_is_trained_again(tiny_data, tmp_path):
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


GRID_IN_A_COPY = """
import sys
import numpy as np
from sgrad.experiments.mnist import PaperConfig, run_grid
rng = np.random.default_rng(0)
data = (rng.random((64, 20), dtype=np.float32), rng.integers(0, 10, 64),
        rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32))
config = PaperConfig(iterations=6, eval_every=3, hidden=16, generator_hidden=(8,), batch_size=8, seed=0)
run_grid(data, methods=("backprop",), depths=(2,), config=config, out_dir=sys.argv[1], progress=print)
"""


def test_a_cell_made_by_other_code_is_trained_again_and_says_why(tmp_path):
    src = copy_of_the_code(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(src), OPENBLAS_NUM_THREADS="1")

    def grid():
        result = subprocess.run([sys.executable, "-c", GRID_IN_A_COPY, str(tmp_path / "out")], capture_output=True,
                                text=True, env=env, cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    cell = tmp_path / "out" / "cells" / "backprop-depth2.json"
    assert "[backprop, depth 2] iteration 6/6" in grid()[1]
    assert grid()[0] == f"[backprop, depth 2] loaded from {tmp_path / 'out'}"  # the same code: the cell is reused
    made_by = json.loads(cell.read_text())["code"]
    steps = src / "sgrad" / "dni" / "steps.py"
    steps.write_text(steps.read_text(encoding="utf-8") + "# an edit that changes no number\n", encoding="utf-8")
    lines = grid()
    assert lines[0] == (f"[backprop, depth 2] not reusing {cell}: it was made by other code (another sgrad version "
                        "or source); training again")
    assert lines[2].startswith("[backprop, depth 2] iteration 6/6  train loss ")
    remade_by = json.loads(cell.read_text())["code"]
    assert remade_by["sgrad_version"] == made_by["sgrad_version"]
    assert remade_by["source_digest"] != made_by["source_digest"]


EDITED_WHILE_IT_RUNS = GRID_IN_A_COPY.replace("progress=print", "progress=edit_then_print").replace(
    "from sgrad.experiments.mnist", """import pathlib
def edit_then_print(line):  # the source changes on disk while the cell trains
    steps = pathlib.Path(sys.argv[2])
    if "# edited" not in steps.read_text(encoding="utf-8"):
        steps.write_text(steps.read_text(encoding="utf-8") + "# edited\\n", encoding="utf-8")
    print(line)
from sgrad.experiments.mnist""")


def test_a_cell_is_recorded_as_made_by_the_code_that_ran_not_by_an_edit_made_while_it_ran(tmp_path):
    src = copy_of_the_code(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(src), OPENBLAS_NUM_THREADS="1")
    digest = [sys.executable, "-c", "from sgrad.provenance import source_digest; print(source_digest())"]
    before = subprocess.run(digest, capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    steps = src / "sgrad" / "dni" / "steps.py"
    run = subprocess.run([sys.executable, "-c", EDITED_WHILE_IT_RUNS, str(tmp_path / "out"), str(steps)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert steps.read_text(encoding="utf-8").endswith("# edited\n")
    after = subprocess.run(digest, capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    assert after != before
    cell = tmp_path / "out" / "cells" / "backprop-depth2.json"
    assert json.loads(cell.read_text())["code"]["source_digest"] == before
    again = subprocess.run([sys.executable, "-c", GRID_IN_A_COPY, str(tmp_path / "out")], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == (f"[backprop, depth 2] not reusing {cell}: it was made by other code "
                                            "(another sgrad version or source); training again")
    assert json.loads(cell.read_text())["code"]["source_digest"] == after


def test_the_grid_checks_every_depth_and_the_folder_before_it_trains_a_cell(tiny_data, tmp_path):
    with pytest.raises(ValueError, match="depth must be at least 2; got 1"):
        run_grid(tiny_data, methods=("backprop",), depths=(3, 1), config=TINY, out_dir=tmp_path / "out")
    (tmp_path / "a file").write_text("")
    with pytest.raises(ValueError, match="a file is a file, not a folder"):
        run_grid(tiny_data, methods=("backprop",), depths=(3,), config=TINY, out_dir=tmp_path / "a file" / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a file"]


def test_a_batch_larger_than_the_training_set_is_refused(tiny_data):
    """The issue's case: asked for batches of 256 with 64 examples, it trained on batches of 64."""
    config = dataclasses.replace(TINY, batch_size=256)
    with pytest.raises(ValueError, match=r"batch_size \(256\) is larger than the training set \(64 examples\)"):
        train_paper("backprop", tiny_data, config)
    with pytest.raises(ValueError, match=r"batch_size \(256\) is larger than the training set \(64 examples\)"):
        run_grid(tiny_data, methods=("backprop",), config=config)


@pytest.mark.parametrize("bad, error, message", [
    (lambda d: (d[0], d[1].astype(float), d[2], d[3]), TypeError, "y_train must hold integers; got dtype float64"),
    (lambda d: (d[0], d[1], d[2], d[3] + 10), ValueError, r"y_test must lie in \[0, 9\]"),
    (lambda d: (d[0], np.ma.masked_array(d[1]), d[2], d[3]), TypeError, "y_train must be .*; got a masked array"),
    (lambda d: (d[0].astype(np.float64) * 1e39, *d[1:]), ValueError, "x_train holds .* beyond the largest float32"),
], ids=["float-labels", "label-10", "masked-labels", "beyond-float32"])
def test_train_paper_checks_its_data_before_it_builds_the_network(tiny_data, bad, error, message):
    with pytest.raises(error, match=message):
        train_paper("dni", bad(tiny_data), TINY)


def test_parameter_count_is_what_build_network_builds():
    for config in (PaperConfig(depth=6), TINY, dataclasses.replace(TINY, generator="linear", batchnorm=False),
                   dataclasses.replace(TINY, generator_batchnorm=False, generator_hidden=(7, 5)),
                   dataclasses.replace(TINY, depth=4, interfaces=(1, 3), interface_position="before",
                                       logit_batchnorm=True)):
        for method in PAPER_METHODS:
            modules = build_network(method, 784, config) + mnist.build_input_generators(method, 784, config)
            built = sum(p.size for layer in modules for _, module in layer.submodules()
                        for p in module.own_parameters().values())
            assert mnist.parameter_count(method, 784, config) == built, (method, config)


def test_the_synthetic_loss_is_refused_true_gradient_targets(tiny_data):
    with pytest.raises(ValueError, match="generator_targets='true' regresses generators onto true gradients, but the "
                                         "synthetic loss's generators predict losses"):
        train_paper("synthetic-loss", tiny_data, dataclasses.replace(TINY, generator_targets="true"))


def test_the_complete_unlock_has_an_input_generator_per_interface_and_ccomplete_gives_both_generators_the_label():
    config = dataclasses.replace(TINY, depth=4, interfaces=(1, 3), generator_batchnorm=False, init="pytorch")
    for method, condition_dim in (("complete", 0), ("ccomplete", 10)):
        layers = build_network(method, 20, config)
        generators = mnist.build_input_generators(method, 20, config)
        assert [g.output_dim for g in generators] == [layer.output_dim for layer in layers[:-1]] == [16, 16]
        assert {(g.input_dim, g.condition_dim) for g in generators} == {(20, condition_dim)}
        assert {layer.condition_dim for layer in layers[:-1]} == {condition_dim}
        assert [type(m).__name__ for m in generators[0].net.modules] == ["Sequential", "Layer"]  # hidden (8,), the out
        assert not np.any(generators[0].net.modules[-1].weights)
    assert mnist.build_input_generators("cdni", 20, config) == []


@pytest.mark.parametrize("method", ["complete", "ccomplete"])
def test_the_complete_unlock_is_refused_for_a_cnn_and_for_true_gradient_targets(tiny_data, method):
    with pytest.raises(ValueError, match=f"'{method}' \\(the complete unlock\\) is built for fully connected nets "
                                         "only"):
        build_network(method, 64, PaperConfig(arch="cnn"))
    with pytest.raises(ValueError, match=f"'{method}' regresses each gradient generator at the synthetic input"):
        train_paper(method, tiny_data, dataclasses.replace(TINY, generator_targets="true"))


def test_a_complete_unlock_run_carries_on_from_its_checkpoint_bit_for_bit(tiny_data, tmp_path):
    unbroken = train_paper("ccomplete", tiny_data, TINY)
    train_paper("ccomplete", tiny_data, dataclasses.replace(TINY, iterations=3), checkpoint=tmp_path / "run.npz")
    resumed = train_paper("ccomplete", tiny_data, TINY, checkpoint=tmp_path / "run.npz")
    for key in ("iteration", "test_accuracy", "train_loss"):
        assert resumed[key] == unbroken[key], key


# --- where the interfaces sit, what the generators regress onto, what the step descends -----------------


def _arrays(module):
    return {path + "." + name: value for path, sub in module.submodules() for name, value in
            sub.own_parameters().items()}


def test_one_interface_gathers_the_blocks_below_it_and_the_blocks_above_learn_with_the_top():
    config = dataclasses.replace(TINY, depth=4)
    every = build_network("dni", 20, config)
    at_two = build_network("dni", 20, dataclasses.replace(config, interfaces=(2,)))
    assert [type(layer).__name__ for layer in at_two] == ["DNIBlock", "Sequential"]
    assert [type(m).__name__ for m in at_two[0].block.modules] == ["Layer", "BatchNorm", "Activation"] * 2
    assert [type(m).__name__ for m in at_two[1].modules] == ["Layer", "BatchNorm", "Activation", "Layer"]
    # The same initial weights, block by block, and block 2's generator is the one it has at every block.
    ours = [m.weights for m in at_two[0].block.modules + at_two[1].modules if isinstance(m, sgrad.Layer)]
    theirs = [m.weights for layer in every[:-1] for m in layer.block.modules if isinstance(m, sgrad.Layer)]
    for a, b in zip(ours, theirs + [every[-1].weights]):
        np.testing.assert_array_equal(a, b)
    for name, value in _arrays(every[1].generator).items():
        np.testing.assert_array_equal(_arrays(at_two[0].generator)[name], value, err_msg=name)


def test_before_the_nonlinearity_each_block_ends_at_its_batch_norm_and_its_relu_opens_the_part_above():
    config = dataclasses.replace(TINY, interface_position="before", logit_batchnorm=True)
    layers = build_network("dni", 20, config)
    assert [type(m).__name__ for m in layers[0].block.modules] == ["Layer", "BatchNorm"]
    assert [type(m).__name__ for m in layers[1].block.modules] == ["Activation", "Layer", "BatchNorm"]
    assert [type(m).__name__ for m in layers[2].modules] == ["Activation", "Layer", "BatchNorm"]
    assert layers[2].modules[1].bias is None  # the logits' batch norm shifts them
    rng = np.random.default_rng(0)
    x = rng.random((TINY.batch_size, 20), dtype=np.float32)
    _, u = layers[0].forward_and_update(x, input_delta=False)
    assert (u < 0).mean() > 0.3  # the generator sees BN(z), negative values and all
    logits = layers[2].forward(layers[1].forward(u))
    np.testing.assert_allclose(logits.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(logits.std(axis=0), 1.0, atol=1e-2)


def test_pytorch_init_draws_every_weight_within_one_over_the_square_root_of_its_fan_in():
    layers = build_network("dni", 20, dataclasses.replace(TINY, init="pytorch", interfaces=(2,)))
    weights = [m.weights for layer in layers for path, m in layer.submodules()
               if isinstance(m, sgrad.Layer) and not path.startswith("generator")]
    assert [w.shape for w in weights] == [(20, 16), (16, 16), (16, 10)]
    for w in weights:
        assert 0.8 / np.sqrt(w.shape[0]) < np.abs(w).max() <= 1 / np.sqrt(w.shape[0])


def test_pytorchs_generator_start_draws_both_generators_as_the_peers_and_leaves_the_blocks_alone():
    config = dataclasses.replace(TINY, interfaces=(2,), generator_batchnorm=False, generator_hidden=(8, 8),
                                 init="pytorch")
    peer = dataclasses.replace(config, generator_init="pytorch")
    for old, new in zip(build_network("ccomplete", 20, config), build_network("ccomplete", 20, peer)):
        for path, module in new.submodules():
            if isinstance(module, sgrad.Layer) and not path.startswith("generator"):
                np.testing.assert_array_equal(module.weights, dict(old.submodules())[path].weights, err_msg=path)
    generator = build_network("ccomplete", 20, peer)[0].generator
    [input_generator] = mnist.build_input_generators("ccomplete", 20, peer)
    for net, width in ((generator.net, 16), (input_generator.net, 20)):
        first, out = net.modules[0].modules[0], net.modules[-1]
        assert 0.8 / np.sqrt(width) < np.abs(first.weights[:width]).max() <= 1 / np.sqrt(width)
        assert 1 / np.sqrt(width) < np.abs(first.weights[width:]).max() <= 1 / np.sqrt(10)  # the label's own fan-in
        np.testing.assert_array_equal(out.weights, np.zeros_like(out.weights))
        assert 0.8 / np.sqrt(8) < np.abs(out.bias).max() <= 1 / np.sqrt(8)
    [sgrads] = mnist.build_input_generators("ccomplete", 20, config)
    np.testing.assert_array_equal(sgrads.net.modules[-1].bias, np.zeros(16))


def test_backprop_learns_the_same_wherever_the_interface_would_sit(tiny_data):
    after = train_paper("backprop", tiny_data, TINY)
    before = train_paper("backprop", tiny_data, dataclasses.replace(TINY, interface_position="before"))
    np.testing.assert_allclose(before["train_loss"], after["train_loss"], rtol=1e-6)
    assert before["test_accuracy"] == after["test_accuracy"]


def test_with_one_interface_true_and_bootstrapped_targets_are_the_same_and_with_two_they_differ(tiny_data):
    one = dataclasses.replace(TINY, interfaces=(2,), alpha=1e-2)
    runs = {targets: train_paper("dni", tiny_data, dataclasses.replace(one, generator_targets=targets))
            for targets in ("bootstrap", "true")}
    assert runs["true"]["train_loss"] == runs["bootstrap"]["train_loss"]
    two = dataclasses.replace(one, interfaces="every")
    runs = {targets: train_paper("dni", tiny_data, dataclasses.replace(two, generator_targets=targets))
            for targets in ("bootstrap", "true")}
    # Measured: 2.8093 and 2.8167 at iteration 6 (bootstrapped, true).
    assert abs(runs["true"]["train_loss"][-1] - runs["bootstrap"]["train_loss"][-1]) > 1e-3


def test_the_mean_loss_reports_the_same_training_loss_and_adam_takes_nearly_the_same_steps(tiny_data):
    summed = train_paper("backprop", tiny_data, dataclasses.replace(TINY, alpha=1e-2))
    mean = train_paper("backprop", tiny_data, dataclasses.replace(TINY, alpha=1e-2, loss="mean"))
    assert 2.0 < summed["train_loss"][0] < 3.0  # about ln 10 per example, in both
    np.testing.assert_allclose(mean["train_loss"], summed["train_loss"], rtol=1e-4)


def test_synthetic_loss_generators_see_the_label_and_start_at_the_loss_of_a_uniform_guess():
    rng = np.random.default_rng(0)
    h = rng.random((TINY.batch_size, TINY.hidden), dtype=np.float32)
    c = np.eye(10, dtype=np.float32)[rng.integers(0, 10, TINY.batch_size)]
    for block in build_network("synthetic-loss", 20, TINY)[:-1]:
        assert block.condition_dim == block.generator.condition_dim == 10
        np.testing.assert_array_equal(block.generator.forward(h, c), np.zeros_like(h))
        np.testing.assert_allclose(block.generator.predicted_loss, np.log(10.0), rtol=1e-6)


def test_a_network_too_large_to_train_is_refused_before_it_is_built(tiny_data):
    with pytest.raises(ValueError, match=r"the cdni network of depth 3 would need [\d,]+ bytes \(\d+\.\d GiB\)"):
        train_paper("cdni", tiny_data, dataclasses.replace(TINY, generator_hidden=(20_000, 20_000)))


def test_generator_settings_do_not_invalidate_the_cells_of_methods_without_generators(tiny_data, tmp_path):
    run_grid(tiny_data, methods=("backprop", "no-bprop", "dni"), config=TINY, out_dir=tmp_path)
    lines = []
    run_grid(tiny_data, methods=("backprop", "no-bprop", "dni"), out_dir=tmp_path, progress=lines.append,
             config=dataclasses.replace(TINY, generator_alpha=1e-6, generator_hidden=(4,), interfaces=(2,),
                                        generator_targets="true"))
    loaded = sorted(line.split("]")[0] for line in lines if "loaded from" in line)
    assert loaded == ["[backprop, depth 3", "[no-bprop, depth 3"]


def test_results_table_has_a_row_per_method_and_a_column_per_depth(tiny_data):
    results = run_grid(tiny_data, methods=("backprop", "no-bprop"), depths=(2, 3), config=TINY)
    table = results_table(results)
    assert table.splitlines()[0] == "| method | 2 layers | 3 layers |"
    assert len(table.splitlines()) == 4


# --- divergence -----------------------------------------------------------------------------------------


def test_a_diverging_cell_names_method_depth_iteration_and_learning_rates_and_the_grid_carries_on(tmp_path):
    rng = np.random.default_rng(0)
    data = (rng.random((64, 20), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32))
    # Measured: plain SGD with a generator learning rate of 100 blows dni up at iteration 4; backprop trains on.
    config = PaperConfig(iterations=12, eval_every=4, hidden=16, generator_hidden=(8,), batch_size=8,
                         update_rule="sgd", alpha=1e-2, generator_alpha=1e2)
    with pytest.raises(sgrad.TrainingDiverged, match=r"^dni \(depth 3\) diverged at iteration 4: .* The learning "
                                                     r"rate \(alpha=0.01, generator_alpha=100.0\) is the likely"):
        train_paper("dni", data, config)
    results = run_grid(data, methods=("dni", "backprop"), config=config, out_dir=tmp_path)
    assert results[("dni", 3)]["diverged_at_iteration"] == 4
    assert results[("backprop", 3)]["iteration"] == [4, 8, 12]
    table = (tmp_path / "results.md").read_text()
    assert "| dni | diverged at iteration 4 |" in table
    assert (tmp_path / "paper.png").read_bytes()[:8] == PNG_SIGNATURE


# --- the convolutional nets (arch='cnn') ---------------------------------------------------------------

CNN_METHODS = ("backprop", "no-bprop", "dni", "cdni")
TINY_CNN = dataclasses.replace(TINY, arch="cnn", channels=4, kernel_size=3, generator_hidden=(3,))


@pytest.fixture(scope="module")
def tiny_images():
    """8×8 one-channel images as rows of 64 pixels, as prepare_mnist gives MNIST's 28×28."""
    rng = np.random.default_rng(1)
    return (rng.random((64, 64), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 64), dtype=np.float32), rng.integers(0, 10, 32))


@pytest.mark.parametrize("method", CNN_METHODS)
def test_every_method_trains_a_cnn_and_records_its_accuracy(tiny_images, method):
    history = train_paper(method, tiny_images, TINY_CNN)
    assert history["iteration"] == [3, 6]
    assert all(0.0 <= a <= 1.0 for a in history["test_accuracy"])
    assert all(np.isfinite(history["train_loss"]))


def test_the_cnn_pools_twice_and_its_generators_are_convolutional_and_start_at_zero(tiny_images):
    x = tiny_images[0][:8].reshape(8, 1, 8, 8)
    for method, condition_dim in (("dni", 0), ("cdni", 10)):
        layers = build_network(method, 64, dataclasses.replace(TINY_CNN, depth=4))
        h = x
        for block, side in zip(layers[:-1], (4, 2, 2)):
            h = block.forward(h)
            assert h.shape == (8, 4, side, side)
            assert isinstance(block.generator, sgrad.dni.generators.ConvGenerator)
            assert block.generator.condition_dim == condition_dim
            c = np.eye(10, dtype=np.float32)[:8] if condition_dim else None
            np.testing.assert_array_equal(block.generator.forward(h, c), np.zeros_like(h))
        assert layers[-1].forward(h).shape == (8, 10)


def test_cnn_parameter_count_is_what_build_network_builds():
    for config in (dataclasses.replace(TINY_CNN, depth=6), TINY_CNN,
                   dataclasses.replace(TINY_CNN, generator="linear", batchnorm=False),
                   dataclasses.replace(TINY_CNN, generator_batchnorm=False, generator_hidden=(5, 2), kernel_size=5)):
        for method in CNN_METHODS:
            built = sum(p.size for layer in build_network(method, 784, config) for _, module in layer.submodules()
                        for p in module.own_parameters().values())
            assert mnist.parameter_count(method, 784, config) == built, (method, config)


def test_a_cnn_too_large_to_train_is_refused_before_it_is_built(tiny_images):
    with pytest.raises(ValueError, match=r"the cdni network of depth 3 would need [\d,]+ bytes"):
        train_paper("cdni", tiny_images, dataclasses.replace(TINY_CNN, channels=4000, generator_hidden=(4000, 4000)))


def test_the_synthetic_loss_and_images_that_are_not_square_are_refused_for_a_cnn(tiny_images, tiny_data):
    with pytest.raises(ValueError, match="the synthetic loss is built for fully connected nets only"):
        train_paper("synthetic-loss", tiny_images, TINY_CNN)
    with pytest.raises(ValueError, match="the synthetic loss is built for fully connected nets only"):
        run_grid(tiny_images, methods=("backprop", "synthetic-loss"), config=TINY_CNN)
    with pytest.raises(ValueError, match="got rows of 20 pixels, which is not a square"):
        train_paper("dni", tiny_data, TINY_CNN)


def test_cnn_and_mlp_cells_never_mix_in_one_folder(tiny_images, tmp_path):
    run_grid(tiny_images, methods=("backprop", "dni"), config=TINY, out_dir=tmp_path)
    lines = []
    cnn = run_grid(tiny_images, methods=("backprop", "dni"), config=TINY_CNN, out_dir=tmp_path, progress=lines.append)
    assert not any("loaded from" in line for line in lines)
    assert sorted(p.name for p in (tmp_path / "cells").iterdir()) == [
        "backprop-cnn-depth3.json", "backprop-depth3.json", "dni-cnn-depth3.json", "dni-depth3.json"]
    lines.clear()
    again = run_grid(tiny_images, methods=("backprop", "dni"), config=TINY_CNN, out_dir=tmp_path, progress=lines.append)
    assert sum("loaded from" in line for line in lines) == 2
    assert all(again[cell]["test_accuracy"] == cnn[cell]["test_accuracy"] for cell in cnn)


def test_the_paper_command_refuses_the_synthetic_loss_for_a_cnn_before_it_loads_mnist(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sgrad", "paper", "--arch", "cnn", "--methods", "dni,synthetic-loss",
                             "--data", str(tiny_mnist(tmp_path)), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    # Refused by the grid's check, before the archive (not the real MNIST) is loaded and found unverifiable.
    assert "the synthetic loss is built for fully connected nets only" in result.stderr


# --- the command and real MNIST -------------------------------------------------------------------------


def test_the_paper_command_runs_and_writes_its_files(tmp_path):
    tiny_mnist(tmp_path)
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


def test_the_paper_command_builds_the_peers_interface_and_records_its_settings(tmp_path):
    tiny_mnist(tmp_path)
    env = dict(os.environ, SGRAD_DATA_DIR=str(tmp_path))
    command = [sys.executable, "-m", "sgrad", "paper", "--methods", "dni", "--iterations", "4", "--eval-every", "2",
               "--batch-size", "8", "--hidden", "16", "--generator-hidden", "8", "--no-verify", "--interfaces", "2",
               "--interface-position", "before", "--targets", "true", "--loss", "mean", "--logit-batchnorm",
               "--init", "pytorch", "--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    cell = json.loads((tmp_path / "out" / "cells" / "dni-depth3.json").read_text())
    settings = {k: cell["settings"]["config"][k] for k in ("interfaces", "interface_position", "generator_targets",
                                                             "loss", "logit_batchnorm", "init")}
    assert settings == {"interfaces": [2], "interface_position": "before", "generator_targets": "true",
                        "loss": "mean", "logit_batchnorm": True, "init": "pytorch"}
    assert cell["history"]["iteration"] == [2, 4]
    assert 1.5 < cell["history"]["train_loss"][0] < 3.5  # the mean loss per example, about ln 10 at the start


def test_the_paper_command_trains_the_complete_unlock_at_the_peers_interface(tmp_path):
    tiny_mnist(tmp_path)
    env = dict(os.environ, SGRAD_DATA_DIR=str(tmp_path))
    command = [sys.executable, "-m", "sgrad", "paper", "--methods", "complete,ccomplete", "--iterations", "4",
               "--eval-every", "2", "--batch-size", "8", "--hidden", "16", "--generator-hidden", "8,8",
               "--no-generator-batchnorm", "--no-verify", "--interfaces", "2", "--interface-position", "before",
               "--loss", "mean", "--logit-batchnorm", "--init", "pytorch", "--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [line.split(" |")[0] for line in result.stdout.splitlines()[2:]] == ["| complete", "| ccomplete"]
    for method in ("complete", "ccomplete"):
        cell = json.loads((tmp_path / "out" / "cells" / f"{method}-depth3.json").read_text())
        assert cell["settings"]["config"]["generator_hidden"] == [8, 8]
        assert cell["history"]["iteration"] == [2, 4]
        assert 1.5 < cell["history"]["train_loss"][0] < 3.5  # the mean loss per example, about ln 10 at the start


def test_the_paper_command_starts_the_generators_as_the_peers_with_generator_init_pytorch(tmp_path):
    tiny_mnist(tmp_path)
    env = dict(os.environ, SGRAD_DATA_DIR=str(tmp_path))
    command = [sys.executable, "-m", "sgrad", "paper", "--methods", "backprop,ccomplete", "--iterations", "4",
               "--eval-every", "2", "--batch-size", "8", "--hidden", "16", "--generator-hidden", "8,8",
               "--no-generator-batchnorm", "--no-verify", "--interfaces", "2", "--interface-position", "before",
               "--loss", "mean", "--logit-batchnorm", "--init", "pytorch"]
    cells = {}
    for start in ("sgrad", "pytorch"):
        out = tmp_path / start
        result = subprocess.run(command + ["--generator-init", start, "--out", str(out)], capture_output=True,
                                text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        cells[start] = {m: json.loads((out / "cells" / f"{m}-depth3.json").read_text()) for m in ("backprop", "ccomplete")}
    # the default's settings are those of every cell made before there was a choice; backprop has no generators
    assert "generator_init" not in cells["sgrad"]["ccomplete"]["settings"]["config"]
    assert cells["pytorch"]["ccomplete"]["settings"]["config"]["generator_init"] == "pytorch"
    assert cells["pytorch"]["backprop"]["settings"] == cells["sgrad"]["backprop"]["settings"]
    assert cells["pytorch"]["backprop"]["history"]["train_loss"] == cells["sgrad"]["backprop"]["history"]["train_loss"]
    assert cells["pytorch"]["ccomplete"]["history"]["train_loss"] != cells["sgrad"]["ccomplete"]["history"]["train_loss"]
    refused = subprocess.run(command + ["--generator-init", "he", "--out", str(tmp_path / "he")], capture_output=True,
                             text=True, env=env, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "argument --generator-init: invalid choice: 'he'" in refused.stderr


def test_the_paper_command_refuses_the_complete_unlock_for_a_cnn_before_it_loads_mnist(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sgrad", "paper", "--arch", "cnn", "--methods", "dni,ccomplete",
                             "--data", str(tiny_mnist(tmp_path)), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "'ccomplete' (the complete unlock) is built for fully connected nets only (arch='mlp'); got arch='cnn'" in (
        result.stderr)


def _real_mnist():
    folder = os.environ.get("SGRAD_DATA_DIR")
    path = pathlib.Path(folder) / "mnist.npz" if folder else None
    return path if path is not None and path.is_file() else None


RECORDED_CELL_AGAIN = """
import json, sys
from data_gen.mnist import load_mnist, prepare_mnist
from sgrad.experiments.mnist import PaperConfig, train_paper
cell = json.loads(open(sys.argv[1], encoding="utf-8").read())
settings = dict(cell["settings"]["config"], iterations=938)
config = PaperConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()})
assert config.generator_init == "sgrad", config.generator_init
history = train_paper("complete", tuple(prepare_mnist(load_mnist(sys.argv[2]), dtype="float32")), config)
print(json.dumps({"test_accuracy": history["test_accuracy"], "train_loss": history["train_loss"]}))
"""


@pytest.mark.skipif(_real_mnist() is None, reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz")
def test_the_default_generator_start_gives_the_recorded_full_unlock_run_bit_for_bit():
    """The first evaluation (938 steps, about 15 s) of docs/paper/full-unlock/seed0's complete cell, trained again.

    The records are made with one BLAS thread (OPENBLAS_NUM_THREADS=1, as the docs' commands say): with more,
    OpenBLAS splits the matrix products differently and the sums round differently, so the run is trained again
    in a process of its own with that setting, whatever the test process was started with.
    """
    cell_file = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "paper" / "full-unlock" / "seed0" / "cells" /
                 "complete-depth3.json")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", RECORDED_CELL_AGAIN, str(cell_file), str(_real_mnist())],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    history = json.loads(run.stdout)
    cell = json.loads(cell_file.read_text())
    assert history["test_accuracy"] == cell["history"]["test_accuracy"][:1]
    assert history["train_loss"] == cell["history"]["train_loss"][:1]


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


@pytest.mark.skipif(_real_mnist() is None, reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz")
def test_on_real_mnist_an_interface_before_the_relu_teaches_more_than_one_after_it():
    """Reduced budget (10,000 training images, 1,000 steps of 128, 3 layers of 128, generators of one hidden layer
    of 128 without batch norm; about 15 s).

    Measured (the subset and the seed both 0, then both 1), DNI after / before the ReLU: one interface at block 2
    89.97 / 93.77% and 85.92 / 93.85%; at every block 86.62 / 93.54% and 87.18 / 93.44%.
    docs/results/dni-pytorch.md has the full-scale figures and why.
    """
    from data_gen.mnist import load_mnist, prepare_mnist

    data = tuple(prepare_mnist(load_mnist(_real_mnist()), subset=10_000, seed=0))
    config = PaperConfig(iterations=1000, eval_every=1000, hidden=128, generator_hidden=(128,),
                         generator_batchnorm=False, alpha=1e-3, batch_size=128, seed=0)
    for interfaces in ((2,), "every"):
        accuracy = {position: train_paper("dni", data, dataclasses.replace(
            config, interfaces=interfaces, interface_position=position))["test_accuracy"][-1]
            for position in ("after", "before")}
        assert accuracy["before"] >= accuracy["after"] + 0.02, (interfaces, accuracy)
        assert accuracy["before"] >= 0.92, (interfaces, accuracy)


@pytest.mark.skipif(_real_mnist() is None, reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz")
def test_on_real_mnist_the_synthetic_loss_learns():
    """Reduced budget (10,000 training images, 1,000 steps, generators of 128-128; about 5 s).

    The synthetic loss as `sgrad paper` builds it (ℓ̂ = M(h, c) with the label, started at ln 10).
    Measured (the subset and the seed both 0, then both 1): 85.99 / 86.38% (no-bprop: 80.75 / 82.12%);
    ℓ̂ from h alone, started at ln 10: 63.52 / 61.65%; the first version (ℓ̂ from h alone, started at
    ln 2, commit b27993c~1): 19.63% with seed 0, the 11.5% of docs/results/mnist.md in the full setting.
    """
    from data_gen.mnist import load_mnist, prepare_mnist

    data = tuple(prepare_mnist(load_mnist(_real_mnist()), subset=10_000, seed=0))
    config = PaperConfig(iterations=1000, eval_every=1000, hidden=128, generator_hidden=(128, 128), alpha=1e-3,
                         batch_size=128, seed=0)
    assert train_paper("synthetic-loss", data, config)["test_accuracy"][-1] >= 0.75


@pytest.mark.skipif(_real_mnist() is None, reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz")
def test_on_real_mnist_the_cnn_methods_keep_the_papers_order():
    """Reduced budget (the paper's CNN at 3 layers with 8 channels, generators of one hidden conv layer of 8,
    10,000 training images, 400 steps of 64; about 35 s of CPU).

    Measured (the subset and the seed both 0, then both 1): backprop 95.96 / 94.81%, cdni 94.41 / 92.53%,
    dni 93.52 / 91.79%, no-bprop 92.44 / 90.65%.  Random conv features are good ones, so no-bprop is close
    behind; each margin asserted is about half the smaller measured gap.
    """
    from data_gen.mnist import load_mnist, prepare_mnist

    data = tuple(prepare_mnist(load_mnist(_real_mnist()), subset=10_000, seed=0))
    config = PaperConfig(arch="cnn", channels=8, generator_hidden=(8,), iterations=400, eval_every=400, alpha=1e-3,
                         batch_size=64, seed=0)
    accuracy = {m: train_paper(m, data, config)["test_accuracy"][-1] for m in ("backprop", "no-bprop", "dni", "cdni")}
    assert accuracy["backprop"] >= accuracy["cdni"] + 0.005
    assert accuracy["cdni"] >= accuracy["dni"] + 0.003
    assert accuracy["dni"] >= accuracy["no-bprop"] + 0.005
    assert accuracy["backprop"] >= accuracy["no-bprop"] + 0.02
