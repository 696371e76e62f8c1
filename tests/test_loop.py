"""The experiment loop (sgrad.training.loop): batches, evaluations, divergence, resuming, each method's step.

The loop is driven here by a tiny regression (two sgrad Layers, backprop) so that every behaviour is
seen on its own; the experiments' own tests check them on binary addition and MNIST.
"""

import time
import warnings

import numpy as np
import pytest
from conftest import damage_checkpoint

import sgrad
from sgrad.dni.steps import backprop_step
from sgrad.experiments import mnist
from sgrad.nn.checkpoint import CheckpointError, load_checkpoint
from sgrad.nn.losses import mse, softmax_cross_entropy
from sgrad.training import loop
from sgrad.training.batches import BatchOrder

EXAMPLES, BATCH = 10, 3  # three batches a pass; one example left over each pass


def regression():
    rng = np.random.default_rng(0)
    return rng.random((EXAMPLES, 4)), rng.random((EXAMPLES, 2))


def network():
    return [sgrad.Layer(4, 5, "tanh", seed=1), sgrad.Layer(5, 2, "identity", seed=2)]


def fresh_history():
    return {"evaluated_at": [], "mean_loss": [], "step_loss": [], "wall_time": 0.0}


def run(layers=None, *, steps=8, eval_every=3, seen=None, train_step=None, **options):
    """The loop on the tiny regression; ``seen`` collects every batch's indices."""
    layers = network() if layers is None else layers
    x, y = regression()

    def step(indices, history):
        if seen is not None:
            seen.append(indices.copy())
        return backprop_step(layers, x[indices], y[indices], mse, 0.1)

    def evaluate(step_number, losses, history):
        history["evaluated_at"].append(step_number)
        history["mean_loss"].append(float(np.mean(losses)))
        return f"step {step_number}"

    names = {"name": "regression", "label": "[regression]", "learning_rates": {"alpha": 0.1}}
    names.update((key, options.pop(key)) for key in ("name", "unit", "learning_rates") if key in options)
    settings = dict(run={"trainer": "test"}, steps=steps, eval_every=eval_every,
                    batches=BatchOrder(EXAMPLES, BATCH, np.random.default_rng(7)), history=fresh_history(),
                    names=loop.RunName(**names), keep_step_losses=True)
    settings.update(options)
    return loop.train_loop(layers, step if train_step is None else train_step, evaluate, **settings)


def without_wall_time(history):
    return {k: v for k, v in history.items() if k != "wall_time"}


# --- batches and evaluations ------------------------------------------------------------------------------


def test_each_pass_takes_full_batches_of_a_new_permutation_from_the_rng():
    seen = []
    run(steps=7, seen=seen)
    rng = np.random.default_rng(7)
    expected = []
    for _ in range(3):  # passes: 3 batches each
        order = rng.permutation(EXAMPLES)
        expected += [order[i:i + BATCH] for i in (0, 3, 6)]
    assert len(seen) == 7
    for step, (ours, theirs) in enumerate(zip(seen, expected), start=1):
        np.testing.assert_array_equal(ours, theirs, err_msg=f"step {step}")


def test_evaluations_come_every_eval_every_steps_and_once_more_at_the_end():
    history = run(steps=8, eval_every=3)
    assert history["evaluated_at"] == [3, 6, 8]
    losses = history["step_loss"]
    assert history["mean_loss"] == [float(np.mean(losses[0:3])), float(np.mean(losses[3:6])),
                                    float(np.mean(losses[6:8]))]


def test_no_extra_evaluation_when_the_budget_ends_on_one():
    assert run(steps=6, eval_every=3)["evaluated_at"] == [3, 6]


def test_progress_lines_carry_the_label():
    lines = []
    run(steps=6, progress=lines.append)
    assert lines == ["[regression] step 3", "[regression] step 6"]


# --- divergence -----------------------------------------------------------------------------------------


def overflowing_at(step):
    """A train_step whose numbers overflow in its ``step``-th call."""
    calls = []

    def train_step(indices, history):
        calls.append(1)
        return float(np.float64(1e300) * 1e10) if len(calls) == step else 1.0
    return train_step


def test_a_diverging_run_stops_at_once_naming_the_run_the_step_and_the_learning_rates():
    with pytest.raises(sgrad.TrainingDiverged) as info:
        run(train_step=overflowing_at(5), name="dni (depth 3)", unit="iteration",
            learning_rates={"alpha": 0.01, "generator_alpha": 100.0})
    assert str(info.value).startswith("dni (depth 3) diverged at iteration 5: overflow encountered in ")
    assert str(info.value).endswith(". The learning rate (alpha=0.01, generator_alpha=100.0) is the likely cause; "
                                    "try a smaller one.")
    history = info.value.history
    assert history["diverged_at_iteration"] == 5
    assert history["step_loss"] == [1.0] * 4
    assert history["evaluated_at"] == [3]
    assert history["wall_time"] > 0


def test_a_non_finite_loss_is_a_divergence_too():
    with pytest.raises(sgrad.TrainingDiverged, match=r"^regression diverged at step 2: the loss became nan\. "):
        run(train_step=lambda indices, history: float("nan") if history["step_loss"] else 1.0)


def test_no_warning_leaks_from_a_diverging_run():
    with np.errstate(all="warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(sgrad.TrainingDiverged):
            run(train_step=overflowing_at(2))
    assert [str(w.message) for w in caught] == []


def test_run_and_report_keeps_a_diverged_history_with_the_reason():
    lines = []
    history = loop.run_and_report(lambda: run(train_step=overflowing_at(2)), "[regression]", lines.append)
    assert history["diverged"].startswith("regression diverged at step 2: ")
    assert history["diverged_at_step"] == 2
    assert lines[0] == f"[regression] {history['diverged']}"
    assert lines[1].startswith("[regression] done in ")


# --- checkpoints ----------------------------------------------------------------------------------------


def test_an_interrupted_run_resumes_from_its_last_checkpoint_bit_for_bit(tmp_path):
    unbroken_layers = network()
    unbroken = run(unbroken_layers, steps=11, eval_every=4)
    calls = []
    x, y = regression()
    layers = network()

    def interrupted(indices, history):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return backprop_step(layers, x[indices], y[indices], mse, 0.1)

    with pytest.raises(KeyboardInterrupt):
        run(layers, steps=11, eval_every=4, train_step=interrupted, checkpoint=tmp_path / "run.npz",
            checkpoint_every=3)
    saved = load_checkpoint(tmp_path / "run.npz").metadata
    assert (saved["step"], saved["loop"]) == (6, {"position": 9, "losses": saved["history"]["step_loss"][4:6]})
    lines, resumed_layers = [], network()
    resumed = run(resumed_layers, steps=11, eval_every=4, checkpoint=tmp_path / "run.npz", checkpoint_every=3,
                  progress=lines.append)
    assert lines[0] == f"[regression] resumed from {tmp_path / 'run.npz'} at step 6 of 11"
    assert without_wall_time(resumed) == without_wall_time(unbroken)
    for ours, theirs in zip(resumed_layers, unbroken_layers):
        np.testing.assert_array_equal(ours.weights, theirs.weights)
    assert resumed["wall_time"] >= saved["history"]["wall_time"]


def test_a_finished_run_carries_on_to_a_larger_budget(tmp_path):
    unbroken = run(steps=10, eval_every=4)
    short = run(steps=6, eval_every=4, checkpoint=tmp_path / "run.npz")
    assert short["evaluated_at"] == [4, 6]  # the end of the shorter run: an evaluation not in the longer one
    longer = run(steps=10, eval_every=4, checkpoint=tmp_path / "run.npz")
    assert without_wall_time(longer) == without_wall_time(unbroken)


def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path):
    run(steps=4, checkpoint=tmp_path / "run.npz")
    lines = []
    fresh = run(steps=4, checkpoint=tmp_path / "run.npz", run={"trainer": "other"}, progress=lines.append)
    assert lines[0].startswith(f"[regression] not resuming from {tmp_path / 'run.npz'}: ")
    assert without_wall_time(fresh) == without_wall_time(run(steps=4))


def set_field(name, value, within=None):
    def change(metadata, arrays):
        (metadata if within is None else metadata[within])[name] = value
    return change


def drop_field(name, within=None):
    def change(metadata, arrays):
        (metadata if within is None else metadata[within]).pop(name)
    return change


def set_order(order):
    def change(metadata, arrays):
        arrays["extra.order"] = order
    return change


@pytest.mark.parametrize("change, message", [
    (set_field("step", "6"), "its 'step' must be a whole number >= 0; got '6'"),
    (set_field("step", -1), "its 'step' must be a whole number >= 0; got -1"),
    (set_field("step", True), "its 'step' must be a whole number >= 0; got True"),
    (drop_field("has_uint32", within="rng"), "its 'rng' is not the state of a PCG64 generator"),
    (set_field("rng", "PCG64"), "its 'rng' is not the state of a PCG64 generator"),
    (drop_field("mean_loss", within="history"), "its 'history' has no 'mean_loss'"),
    (set_field("evaluated_at", "3", within="history"), "its 'history'['evaluated_at'] must be a list; got '3' (str)"),
    (drop_field("loop"), "its 'loop' must be a JSON object; got None (NoneType)"),
    (set_field("position", 99, within="loop"), "its loop's 'position' must be a whole number from 0 to 10; got 99"),
    (set_field("losses", ["a"], within="loop"), "its 'loop'['losses'][0] must be a number, null or a list of them"),
    (set_field("losses", [float("nan")], within="loop"), "its loop's 'losses' must be finite numbers"),
    (set_order(np.arange(5)), "its batch 'order' must be a permutation of the 10 training examples (or empty)"),
    (set_order(np.zeros(10, dtype=int)), "its batch 'order' must be a permutation of the 10 training examples"),
], ids=["step-text", "step-negative", "step-bool", "rng-incomplete", "rng-text", "history-missing", "history-type",
        "loop-missing", "position", "losses-text", "losses-nan", "order-short", "order-repeats"])
def test_a_checkpoint_whose_fields_are_damaged_is_refused_naming_the_file_and_the_field(tmp_path, change, message):
    path = tmp_path / "run.npz"
    run(steps=6, checkpoint=path)
    damage_checkpoint(path, change)
    layers, fresh = network(), network()
    with pytest.raises(CheckpointError) as info:
        run(layers, steps=10, checkpoint=path)
    assert str(info.value).startswith(f"{path} is damaged: {message}"), str(info.value)
    assert str(info.value).endswith("; delete it to start afresh, or restore it from a copy")
    for ours, initial in zip(layers, fresh):  # refused before anything loads
        np.testing.assert_array_equal(ours.weights, initial.weights)


# --- wall time ------------------------------------------------------------------------------------------

PAUSE = 0.02  # seconds each step of the timed runs sleeps, so that a step's time is known from below


def timed_run(steps, **options):
    """``(history, seconds the call took)`` for a run whose every step sleeps PAUSE, then steps by backprop."""
    layers = network()
    x, y = regression()

    def slow_step(indices, history):
        time.sleep(PAUSE)
        return backprop_step(layers, x[indices], y[indices], mse, 0.1)

    start = time.perf_counter()
    history = run(layers, steps=steps, train_step=slow_step, **options)
    return history, time.perf_counter() - start


def test_the_wall_time_of_a_fresh_run_is_the_time_it_spent():
    history, elapsed = timed_run(10)
    assert 10 * PAUSE <= history["wall_time"] <= elapsed


def test_the_wall_time_of_a_resumed_run_is_the_time_before_plus_this_sessions(tmp_path):
    _, first_elapsed = timed_run(6, checkpoint=tmp_path / "run.npz")
    before = load_checkpoint(tmp_path / "run.npz").metadata["history"]["wall_time"]
    assert 6 * PAUSE <= before <= first_elapsed
    resumed, elapsed = timed_run(10, checkpoint=tmp_path / "run.npz")  # 4 more steps
    assert before + 4 * PAUSE <= resumed["wall_time"] <= before + elapsed


def test_a_finished_run_asked_again_adds_only_the_time_it_took_to_load(tmp_path):
    timed_run(6, checkpoint=tmp_path / "run.npz")
    before = load_checkpoint(tmp_path / "run.npz").metadata["history"]["wall_time"]
    again, elapsed = timed_run(6, checkpoint=tmp_path / "run.npz")
    assert before <= again["wall_time"] <= before + elapsed
    assert len(again["step_loss"]) == 6


# --- checks made before any work --------------------------------------------------------------------------


def test_keep_step_losses_must_be_a_bool():
    with pytest.raises(TypeError, match="keep_step_losses must be True or False; got 1 \\(int\\)"):
        run(keep_step_losses=1)


def test_checkpoint_every_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="checkpoint_every must be at least 1; got 0"):
        run(checkpoint_every=0)


# --- the steps of each method -----------------------------------------------------------------------------


def test_no_bprop_changes_only_the_top_layer():
    config = mnist.PaperConfig(hidden=16, generator_hidden=(8,), batch_size=8, seed=0)
    before, layers = mnist.build_network("no-bprop", 20, config), mnist.build_network("no-bprop", 20, config)
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 20), dtype=np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]
    loop.take_step("no-bprop", layers, x, y, softmax_cross_entropy, 1e-2)
    for ours, initial in zip(layers[:-1], before[:-1]):
        for name, value in initial.parameters.items():
            np.testing.assert_array_equal(ours.parameters[name], value)
    assert np.abs(layers[-1].weights - before[-1].weights).max() > 0
