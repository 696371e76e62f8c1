"""Training loops: a small learning run per method, true-gradient targets, diagnostics, divergence."""

import dataclasses

import numpy as np
import pytest

import sgrad
from data_gen import generate_split
from sgrad.losses import bce_with_logits
from sgrad.losses import mse, softmax_cross_entropy
from sgrad.training import TrainConfig, backprop_step, build_network, dni_step, train, true_gradients

# 5-bit addition (operands below 16): 200 training pairs, 50 held out.  Measured at seed 0 in float32
# (the default): train bit accuracy backprop 1.000, cdni 1.000, dni 0.789, no-bprop 0.684 (dni - no-bprop
# was 0.105 to 0.164 over seeds 0-4; in float64, dni 0.779).  Each method takes well under a second.
SMALL = TrainConfig(epochs=150, batch_size=16, alpha=0.01, generator_alpha=0.01, hidden=(32, 32), seed=0)


@pytest.fixture(scope="module")
def small_data():
    return generate_split(5, 200, 50, seed=0)


@pytest.fixture(scope="module")
def small_runs(small_data):
    return {method: train(method, small_data, SMALL) for method in sgrad.METHODS}


def test_backprop_learns_the_training_set_exactly(small_runs):
    history = small_runs["backprop"]
    assert history["train_bit_accuracy"][-1] == 1.0
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 10


def test_cdni_learns_the_training_set_exactly(small_runs):
    assert small_runs["cdni"]["train_bit_accuracy"][-1] == 1.0


def test_dni_beats_no_backprop(small_runs):
    dni, no_bprop = small_runs["dni"], small_runs["no-bprop"]
    assert dni["train_bit_accuracy"][-1] >= no_bprop["train_bit_accuracy"][-1] + 0.04


def test_generators_learn_during_a_dni_run(small_runs):
    for losses in small_runs["cdni"]["generator_epoch_loss"]:
        assert np.mean(losses[-10:]) < losses[0]
    # Measured: cos(ĝ_k, g_k) peaks at 0.87 and 0.91; it falls later as g_k shrinks to noise at 100% accuracy.
    for cosines in small_runs["cdni"]["cosine_similarity"]:
        assert max(cosines) > 0.5


def test_history_lengths_match_the_budget(small_runs):
    steps = SMALL.epochs * (200 // SMALL.batch_size)
    for method, history in small_runs.items():
        assert len(history["step_loss"]) == steps
        assert len(history["test_bit_accuracy"]) == SMALL.epochs
        n_generators = 2 if method in ("dni", "cdni") else 0
        assert len(history["generator_loss"]) == n_generators
        assert all(len(losses) == steps for losses in history["generator_loss"])


def test_the_probe_batch_never_feeds_back_into_training(small_data):
    config = TrainConfig(epochs=3, batch_size=16, hidden=(16, 16), seed=1)
    small_probe = train("dni", small_data, dataclasses.replace(config, probe_size=4))
    large_probe = train("dni", small_data, dataclasses.replace(config, probe_size=200))
    assert small_probe["step_loss"] == large_probe["step_loss"]
    assert small_probe["generator_loss"] == large_probe["generator_loss"]
    assert small_probe["cosine_similarity"] != large_probe["cosine_similarity"]


def test_true_targets_are_the_true_gradients_and_not_the_default(small_data):
    assert TrainConfig().generator_targets == "bootstrap"
    x, y = small_data[0][:16], small_data[1][:16]
    layers = build_network("dni", 10, 5, SMALL)
    for layer in layers[:-1]:
        layer.generator.weights[:] = np.random.default_rng(0).standard_normal(layer.generator.weights.shape)
    expected = true_gradients(layers, x, y, bce_with_logits)
    seen = []
    for layer in layers[:-1]:
        update = layer.generator.update
        layer.generator.update = lambda target, alpha, update=update: seen.append(target) or update(target, alpha)
    dni_step(layers, x, y, bce_with_logits, 0.01, targets=expected)
    for target, g in zip(seen, expected):
        np.testing.assert_array_equal(target, g)


def test_true_gradients_match_the_layers_own_backprop(small_data):
    x, y = small_data[0][:16], small_data[1][:16]
    layers = build_network("backprop", 10, 5, SMALL)
    h = x
    for layer in layers:
        h = layer.forward(h)
    _, g = bce_with_logits(h, y)
    expected = []
    for layer in reversed(layers[1:]):
        g = layer.backward(g)
        expected.append(g)
    for ours, reference in zip(true_gradients(layers, x, y, bce_with_logits), expected[::-1]):
        np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=1e-15)


def test_true_gradient_targets_train_generators_closer_to_the_true_gradient(small_data):
    config = dataclasses.replace(SMALL, epochs=20)
    bootstrap = train("dni", small_data, config)
    true = train("dni", small_data, dataclasses.replace(config, generator_targets="true"))
    # The bottom generator is where bootstrapping differs most from the truth.
    assert true["cosine_similarity"][0][-1] > bootstrap["cosine_similarity"][0][-1]


def test_backprop_step_explains_a_stack_whose_widths_do_not_fit():
    # Inside a step, sgrad's layers skip re-checking what the layer below made; a misfit still gets the message.
    rng = np.random.default_rng(0)
    stack = [sgrad.Layer(4, 6, "tanh", seed=0), sgrad.Layer(5, 2, "identity", seed=1)]
    with pytest.raises(ValueError, match=r"input must have shape \(batch, 5\) \(5 = this layer's input_dim\)"):
        backprop_step(stack, rng.random((8, 4)), rng.random((8, 2)), mse, 0.1)


def test_backprop_step_refuses_one_row_for_batch_norm_above_the_bottom_layer():
    rng = np.random.default_rng(0)
    stack = [sgrad.Layer(4, 6, "tanh", seed=0), sgrad.dense_block(6, 5, seed=1), sgrad.Layer(5, 2, "identity", seed=2)]
    weights = [layer.parameters["weights"].copy() if "weights" in layer.parameters else None for layer in stack]
    with pytest.raises(ValueError, match="needs a batch of at least 2 rows"):
        backprop_step(stack, rng.random((1, 4)), rng.random((1, 2)), mse, 0.1)
    np.testing.assert_array_equal(stack[0].weights, weights[0])


def test_backprop_step_equals_each_layers_public_forward_backward_and_update():
    # The step's unchecked path (what a layer made goes to the next unchecked) must change nothing numerically.
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        return [sgrad.dense_block(4, 6, seed=0), sgrad.dense_block(6, 5, batchnorm=False, seed=1),
                sgrad.Layer(5, 3, "identity", seed=2)]

    fast, slow = stack(), stack()
    loss = backprop_step(fast, x, y, softmax_cross_entropy, 0.1)
    h = x
    for layer in slow:
        h = layer.forward(h)
    expected, delta = softmax_cross_entropy(h, y)
    for k in (2, 1, 0):
        delta = slow[k].backward(delta, input_delta=k > 0)
        slow[k].update(0.1)
    assert loss == expected
    for a, b in zip(fast, slow):
        for name in a.parameters:
            np.testing.assert_array_equal(a.parameters[name], b.parameters[name], err_msg=name)


def test_a_diverging_run_stops_with_the_method_step_and_learning_rate():
    data = generate_split(5, 64, 16, seed=0)
    # A generator learning rate of 1e3 makes its least-squares regression blow up within a few dozen steps.
    config = TrainConfig(epochs=50, batch_size=16, hidden=(16, 16), update_rule="sgd", alpha=0.1,
                         generator_alpha=1e3, seed=0)
    with pytest.raises(sgrad.TrainingDiverged, match=r"dni diverged at step \d+: .*generator_alpha=1000.0") as info:
        train("dni", data, config)
    assert len(info.value.history["step_loss"]) < 50 * 4


def test_compare_marks_a_diverged_method_and_carries_on():
    histories = sgrad.compare(["dni", "backprop"], output_dim=5, num_train=64, num_test=16, epochs=20,
                              batch_size=16, hidden=(16, 16), update_rule="sgd", alpha=0.1, generator_alpha=1e3)
    assert "dni diverged at step" in histories["dni"]["diverged"]
    assert len(histories["backprop"]["epoch_loss"]) == 20
    assert "| dni | diverged |" in sgrad.results_table(histories)


@pytest.mark.parametrize("bad, fragment", [
    ({"hidden": ()}, "hidden must be a non-empty sequence"),
    ({"epochs": 0}, "epochs must be at least 1"),
    ({"alpha": -1.0}, "alpha (a learning rate) must be finite and > 0"),
    ({"nonlin": "softsign"}, "unknown nonlinearity 'softsign'"),
    ({"update_rule": "rmsprop"}, "unknown update rule 'rmsprop'"),
    ({"generator_targets": "oracle"}, "unknown generator_targets 'oracle'"),
    ({"dtype": "float16"}, "unknown dtype 'float16'; choose one of 'float32', 'float64'"),
])
def test_bad_training_options_are_refused_up_front(bad, fragment):
    with pytest.raises(ValueError) as info:
        TrainConfig(**bad)
    assert fragment in str(info.value)


def test_unknown_method_is_refused(small_data):
    with pytest.raises(ValueError, match="unknown method 'synthetic'"):
        train("synthetic", small_data, SMALL)


@pytest.mark.parametrize("options, dtype", [({}, "float32"), ({"dtype": "float64"}, "float64")],
                         ids=["default", "float64"])
def test_training_runs_in_the_configs_dtype_whatever_the_datas(small_data, options, dtype, tmp_path):
    # small_data is float64; the network, its generators and their optimizer state all take the config's dtype.
    config = dataclasses.replace(SMALL, epochs=2, **options)
    history = train("cdni", small_data, config, checkpoint=tmp_path / "run.npz")
    assert np.all(np.isfinite(history["step_loss"]))
    arrays = sgrad.checkpoint.load_checkpoint(tmp_path / "run.npz").network
    assert any(".generator." in name for name in arrays) and any(name.endswith(".m") for name in arrays)
    assert {name: str(a.dtype) for name, a in arrays.items() if a.dtype.kind == "f"} == \
           {name: dtype for name, a in arrays.items() if a.dtype.kind == "f"}
