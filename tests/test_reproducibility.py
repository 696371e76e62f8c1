"""Runs that end the same way every time, or stop clearly.

- the same seed gives bit-identical histories, run after run;
- nothing touches NumPy's global random state;
- methods compared side by side start from the same weights and see the same batches;
- a run whose numbers turn non-finite stops at once, naming the method, the step and the learning
  rate, without a RuntimeWarning, and ``compare`` carries on with the other methods.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from matplotlib.image import imread

import sgrad
from sgrad import paper, training
from sgrad.checkpoint import network_state

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
TINY = dict(output_dim=5, num_train=64, num_test=16, epochs=3, batch_size=16, hidden=(8, 8))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Found by experiment: with plain SGD, a generator learning rate of 3 (six times the layers' 0.5) makes the
# generators' least-squares regression blow up (dni at step 95, cdni at step 92), while backprop and no-bprop,
# which have no generators, train on.
# float64: the steps named below, and the two ways these runs overflow (inside a step, and in the evaluation at the
# end of an epoch), are those of this dtype.
DIVERGING = dict(output_dim=5, num_train=64, num_test=16, epochs=30, batch_size=16, hidden=(16, 16),
                 update_rule="sgd", alpha=0.5, generator_alpha=3.0, dtype="float64")


def without_wall_time(histories):
    return {m: {k: v for k, v in h.items() if k != "wall_time"} for m, h in histories.items()}


# --- the same seed, the same numbers ---------------------------------------------------------------------


def test_two_runs_of_sgrad_compare_with_one_seed_give_identical_histories(tmp_path):
    command = [sys.executable, "-m", "sgrad", "compare", "--bits", "5", "--train", "64", "--test", "16",
               "--epochs", "3", "--hidden", "8,8", "--batch-size", "16", "--seed", "4", "--checkpoint-every", "0"]
    histories = []
    for out in ("first", "second"):
        result = subprocess.run([*command, "--out", str(tmp_path / out)], capture_output=True, text=True, env=ENV,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        histories.append(json.loads((tmp_path / out / "history.json").read_text())["histories"])
    assert list(histories[0]) == list(sgrad.METHODS)
    assert without_wall_time(histories[0]) == without_wall_time(histories[1])


def test_another_seed_gives_other_numbers():
    first = sgrad.compare(["dni"], seed=0, **TINY)
    second = sgrad.compare(["dni"], seed=1, **TINY)
    assert first["dni"]["step_loss"] != second["dni"]["step_loss"]


# --- no global random state --------------------------------------------------------------------------------


def global_random_state():
    """NumPy's legacy global state ``(name, keys, pos, has_gauss, cached_gaussian)``: read here, never used."""
    return np.random.get_state()  # noqa: NPY002  (the test is about this very state)


def same_global_state(before, after):
    return before[0] == after[0] and np.array_equal(before[1], after[1]) and before[2:] == after[2:]


def test_a_whole_compare_run_leaves_numpys_global_random_state_alone(tmp_path):
    before = global_random_state()
    sgrad.compare(out_dir=tmp_path, checkpoint_every=5, **TINY)
    assert same_global_state(before, global_random_state())


def test_a_paper_grid_leaves_numpys_global_random_state_alone(tmp_path):
    rng = np.random.default_rng(0)
    data = (rng.random((64, 20), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32))
    config = paper.PaperConfig(iterations=4, eval_every=2, hidden=16, generator_hidden=(8,), batch_size=8)
    before = global_random_state()
    paper.run_grid(data, methods=paper.PAPER_METHODS, config=config, out_dir=tmp_path, checkpoint_every=2)
    assert same_global_state(before, global_random_state())


# np.random.<anything but the Generator API>, and the legacy names imported directly.
LEGACY_RANDOM = re.compile(r"np\.random\.(?!default_rng\b|Generator\b|SeedSequence\b|PCG64\b|BitGenerator\b)\w+"
                           r"|from numpy\.random import|^\s*import random\b|\bRandomState\b", re.MULTILINE)


@pytest.mark.parametrize("folder", ["sgrad", "data_gen"])
def test_no_source_file_calls_numpys_global_random_functions(folder):
    offenders = [f"{path.relative_to(ROOT)}: {match.group(0)!r}"
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 for match in LEGACY_RANDOM.finditer(path.read_text())]
    assert offenders == [], "use a numpy.random.Generator (np.random.default_rng(seed)) instead"


# --- side by side: the same start, the same batches --------------------------------------------------------


def test_compared_methods_start_from_the_same_weights_and_see_the_same_batches(monkeypatch):
    initial, batches = {}, {}  # per method: its network's arrays before training, and every step's batch
    build = training.build_network

    def recording_build(method, *args, **kwargs):
        layers = build(method, *args, **kwargs)
        initial[method], batches[method] = network_state(layers), []
        return layers

    def recording(step):
        def run(layers, x, y, *args, **kwargs):
            batches[list(initial)[-1]].append((x.copy(), y.copy()))  # methods train one after the other
            return step(layers, x, y, *args, **kwargs)
        return run

    monkeypatch.setattr(training, "build_network", recording_build)
    monkeypatch.setattr(training, "backprop_step", recording(training.backprop_step))
    monkeypatch.setattr(training, "dni_step", recording(training.dni_step))
    sgrad.compare(**TINY)
    assert list(batches) == list(sgrad.METHODS)
    reference, reference_batches = initial["backprop"], batches["backprop"]
    assert len(reference_batches) == 3 * (64 // 16)
    for method in sgrad.METHODS:
        # Every array the methods share (each layer's weights and bias) starts bit for bit the same.
        for name, value in reference.items():
            np.testing.assert_array_equal(initial[method][name], value, err_msg=f"{method}: {name}")
        assert len(batches[method]) == len(reference_batches)
        for step, ((x, y), (x_ref, y_ref)) in enumerate(zip(batches[method], reference_batches), start=1):
            assert np.array_equal(x, x_ref) and np.array_equal(y, y_ref), f"{method}: batch of step {step}"


def test_paper_methods_see_the_same_batches(monkeypatch):
    rng = np.random.default_rng(0)
    data = (rng.random((40, 20), dtype=np.float32), rng.integers(0, 10, 40),
            rng.random((16, 20), dtype=np.float32), rng.integers(0, 10, 16))
    config = paper.PaperConfig(iterations=12, eval_every=6, hidden=16, generator_hidden=(8,), batch_size=8)
    seen = []
    for name in ("backprop_step", "dni_step", "synthetic_loss_step"):
        step = getattr(paper, name)
        monkeypatch.setattr(paper, name, lambda layers, x, y, *a, step=step, **k: seen.append(x.copy())
                            or step(layers, x, y, *a, **k))
    per_method = {}
    for method in paper.PAPER_METHODS:
        seen.clear()
        paper.train_paper(method, data, config)
        per_method[method] = list(seen)
    for method, batches in per_method.items():
        assert len(batches) == 12
        assert all(np.array_equal(a, b) for a, b in zip(batches, per_method["backprop"])), method


# --- divergence ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def diverging_compare(tmp_path_factory):
    out = tmp_path_factory.mktemp("diverging")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        histories = sgrad.compare(out_dir=out, **DIVERGING)
    return histories, out, caught


def test_no_warning_leaks_from_a_diverging_run(diverging_compare):
    _, _, caught = diverging_compare
    assert [str(w.message) for w in caught] == []


def test_the_diverged_methods_stop_at_once_naming_method_step_and_learning_rate(diverging_compare):
    histories, _, _ = diverging_compare
    # dni overflowed inside step 95; cdni finished step 92 and overflowed in the evaluation at the end of its epoch.
    for method, step, recorded in (("dni", 95, 94), ("cdni", 92, 92)):
        history = histories[method]
        assert history["diverged_at_step"] == step
        assert history["diverged"].startswith(f"{method} diverged at step {step}: ")
        assert "The learning rate (alpha=0.5, generator_alpha=3.0) is the likely cause; try a smaller one." \
               in history["diverged"]
        assert len(history["step_loss"]) == recorded
        assert all(np.isfinite(history["step_loss"]))


def test_compare_carries_on_with_the_methods_that_survive(diverging_compare):
    histories, _, _ = diverging_compare
    for method in ("backprop", "no-bprop"):
        assert "diverged" not in histories[method]
        assert len(histories[method]["epoch_loss"]) == 30


def test_the_results_table_says_where_each_method_diverged(diverging_compare):
    _, out, _ = diverging_compare
    rows = (out / "results.md").read_text().splitlines()
    assert rows[4].startswith("| dni | diverged |") and "diverged at step 95" in rows[4]
    assert rows[5].startswith("| cdni | diverged |") and "diverged at step 92" in rows[5]
    assert re.match(r"\| backprop \| \d+\.\d% \|", rows[2])


def test_the_figure_of_a_diverging_comparison_is_a_real_png(diverging_compare):
    _, out, _ = diverging_compare
    assert (out / "compare.png").read_bytes()[:8] == PNG_SIGNATURE
    image = imread(out / "compare.png")[..., :3]
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert np.any(image != image[0, 0], axis=2).mean() > 0.01


def test_the_figure_marks_where_a_method_diverged(diverging_compare):
    histories, _, _ = diverging_compare
    from sgrad.comparison import comparison_figure

    figure = comparison_figure(histories, steps_per_epoch=4)
    assert [text.get_text() for text in figure.axes[0].texts] == ["dni diverged at step 95",
                                                                   "cdni diverged at step 92"]
    marker = figure.axes[0].lines[-2]  # after the four curves: dni's x, at its last finite step loss, then cdni's
    assert marker.get_marker() == "x"
    assert (marker.get_xdata()[0], marker.get_ydata()[0]) == (95 / 4, histories["dni"]["step_loss"][-1])


def test_a_diverging_paper_cell_names_method_iteration_and_learning_rates_and_the_grid_carries_on(tmp_path):
    rng = np.random.default_rng(0)
    data = (rng.random((64, 20), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32))
    # Measured: plain SGD with a generator learning rate of 100 blows dni up at iteration 4; backprop trains on.
    config = paper.PaperConfig(iterations=12, eval_every=4, hidden=16, generator_hidden=(8,), batch_size=8,
                               update_rule="sgd", alpha=1e-2, generator_alpha=1e2)
    with pytest.raises(sgrad.TrainingDiverged, match=r"^dni \(depth 3\) diverged at iteration 4: .* The learning "
                                                     r"rate \(alpha=0.01, generator_alpha=100.0\) is the likely"):
        paper.train_paper("dni", data, config)
    results = paper.run_grid(data, methods=("dni", "backprop"), config=config, out_dir=tmp_path)
    assert results[("backprop", 3)]["iteration"] == [4, 8, 12]
    table = (tmp_path / "results.md").read_text()
    assert "| dni | diverged at iteration 4 |" in table
    assert (tmp_path / "paper.png").read_bytes()[:8] == PNG_SIGNATURE
