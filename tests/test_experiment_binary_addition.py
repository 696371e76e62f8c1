"""The binary-addition experiment (``sgrad compare``): what each method learns, the history it records, the same
start and batches for every method, its settings, and how a comparison reports a method that diverged."""

import dataclasses
import re
import warnings

import numpy as np
import pytest
from matplotlib.image import imread

import sgrad
from data_gen import generate_split
from sgrad.experiments import binary_addition
from sgrad.experiments.binary_addition import METHODS, TrainConfig, build_network, comparison_figure, train
from sgrad.nn.checkpoint import load_checkpoint, network_state

# 5-bit addition (operands below 16): 200 training pairs, 50 held out.  Measured at seed 0 in float32
# (the default): train bit accuracy backprop 1.000, cdni 1.000, dni 0.789, no-bprop 0.684 (dni - no-bprop
# was 0.105 to 0.164 over seeds 0-4; in float64, dni 0.779).  Each method takes well under a second.
SMALL = TrainConfig(epochs=150, batch_size=16, alpha=0.01, generator_alpha=0.01, hidden=(32, 32), seed=0)
TINY = dict(output_dim=5, num_train=64, num_test=16, epochs=3, batch_size=16, hidden=(8, 8))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Found by experiment: with plain SGD, a generator learning rate of 3 (six times the layers' 0.5) makes the
# generators' least-squares regression blow up (dni at step 96, cdni at step 92), while backprop and no-bprop,
# which have no generators, train on.  Both overflow in the evaluation at the end of an epoch (a divergence inside
# a step is tested in test_loop.py).  float64: the steps named below are those of this dtype, and they move by a
# step when the order of a sum in the generators' loss changes.
DIVERGING_TASK = dict(output_dim=5, num_train=64, num_test=16)
DIVERGING = TrainConfig(epochs=30, batch_size=16, hidden=(16, 16), update_rule="sgd", alpha=0.5, generator_alpha=3.0,
                        dtype="float64")


@pytest.fixture(scope="module")
def small_data():
    return generate_split(5, 200, 50, seed=0)


@pytest.fixture(scope="module")
def small_runs(small_data):
    return {method: train(method, small_data, SMALL) for method in METHODS}


# --- what each method learns ----------------------------------------------------------------------------


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


def test_true_gradient_targets_train_generators_closer_to_the_true_gradient(small_data):
    assert TrainConfig().generator_targets == "bootstrap"
    config = dataclasses.replace(SMALL, epochs=20)
    bootstrap = train("dni", small_data, config)
    true = train("dni", small_data, dataclasses.replace(config, generator_targets="true"))
    # The bottom generator is where bootstrapping differs most from the truth.
    assert true["cosine_similarity"][0][-1] > bootstrap["cosine_similarity"][0][-1]


# --- the history ----------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("options, dtype", [({}, "float32"), ({"dtype": "float64"}, "float64")],
                         ids=["default", "float64"])
def test_training_runs_in_the_configs_dtype_whatever_the_datas(small_data, options, dtype, tmp_path):
    # small_data is float64; the network, its generators and their optimizer state all take the config's dtype.
    config = dataclasses.replace(SMALL, epochs=2, **options)
    history = train("cdni", small_data, config, checkpoint=tmp_path / "run.npz")
    assert np.all(np.isfinite(history["step_loss"]))
    arrays = load_checkpoint(tmp_path / "run.npz").network
    assert any(".generator." in name for name in arrays) and any(name.endswith(".m") for name in arrays)
    assert {name: str(a.dtype) for name, a in arrays.items() if a.dtype.kind == "f"} == \
           {name: dtype for name, a in arrays.items() if a.dtype.kind == "f"}


# --- the same start and the same batches for every method -----------------------------------------------


def test_the_network_has_the_configs_widths_and_its_weights_depend_on_the_seed():
    config = TrainConfig(hidden=(8, 8), seed=3)
    for method in METHODS:
        assert [layer.weights.shape for layer in build_network(method, 10, 5, config)] == [(10, 8), (8, 8), (8, 5)]
    first = build_network("dni", 10, 5, config)
    second = build_network("dni", 10, 5, dataclasses.replace(config, seed=4))
    assert not np.array_equal(first[0].weights, second[0].weights)


def test_compared_methods_start_from_the_same_weights_and_see_the_same_batches(monkeypatch):
    initial, batches = {}, {}  # per method: its network's arrays before training, and every step's batch
    build, step = binary_addition.build_network, binary_addition.take_step

    def recording_build(method, *args, **kwargs):
        layers = build(method, *args, **kwargs)
        initial[method], batches[method] = network_state(layers), []
        return layers

    def recording_step(method, layers, x, y, *args, **kwargs):
        batches[method].append((x.copy(), y.copy()))
        return step(method, layers, x, y, *args, **kwargs)

    monkeypatch.setattr(binary_addition, "build_network", recording_build)
    monkeypatch.setattr(binary_addition, "take_step", recording_step)
    sgrad.compare(**TINY)
    assert list(batches) == list(METHODS)
    reference, reference_batches = initial["backprop"], batches["backprop"]
    assert len(reference_batches) == 3 * (64 // 16)
    for method in METHODS:
        # Every array the methods share (each layer's weights and bias) starts bit for bit the same.
        for name, value in reference.items():
            np.testing.assert_array_equal(initial[method][name], value, err_msg=f"{method}: {name}")
        assert len(batches[method]) == len(reference_batches)
        for k, ((x, y), (x_ref, y_ref)) in enumerate(zip(batches[method], reference_batches), start=1):
            assert np.array_equal(x, x_ref) and np.array_equal(y, y_ref), f"{method}: batch of step {k}"


def test_methods_trained_in_workers_record_the_histories_they_record_in_this_process(tmp_path):
    def without_wall_time(histories):
        return {method: {k: v for k, v in h.items() if k != "wall_time"} for method, h in histories.items()}

    lines = []
    here = sgrad.compare(**TINY)
    in_workers = sgrad.compare(**TINY, workers=2, out_dir=tmp_path, progress=lines.append)
    assert list(in_workers) == list(METHODS)
    assert without_wall_time(in_workers) == without_wall_time(here)
    assert all(h["wall_time"] > 0 for h in in_workers.values())
    assert sorted(line for line in lines if " done in " in line) == sorted(
        f"[{method}] done in {h['wall_time']:.1f} s" for method, h in in_workers.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sgrad.lock", "compare.png", "history.json", "results.md"]


# --- settings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, fragment", [
    ({"hidden": ()}, "hidden must be a non-empty sequence"),
    ({"hidden": (8, 0)}, "every width in hidden must be at least 1; got 0"),
    ({"epochs": 0}, "epochs must be at least 1"),
    ({"batch_size": 0}, "batch_size must be at least 1"),
    ({"probe_size": 0}, "probe_size must be at least 1"),
    ({"seed": -1}, "seed must be at least 0"),
    ({"alpha": -1.0}, "alpha (a learning rate) must be a finite number > 0"),
    ({"generator_alpha": 0.0}, "generator_alpha (a learning rate) must be a finite number > 0"),
    ({"nonlin": "softsign"}, "unknown nonlinearity 'softsign'"),
    ({"update_rule": "rmsprop"}, "unknown update rule 'rmsprop'"),
    ({"loss": "hinge"}, "unknown loss 'hinge'; choose one of 'bce', 'mse'"),
    ({"generator_init": "ones"}, "unknown generator_init 'ones'; choose one of 'zeros', 'blog'"),
    ({"generator_targets": "oracle"}, "unknown generator_targets 'oracle'"),
    ({"dtype": "float16"}, "unknown dtype 'float16'; choose one of 'float32', 'float64'"),
])
def test_bad_training_options_are_refused_up_front(bad, fragment):
    with pytest.raises(ValueError) as info:
        TrainConfig(**bad)
    assert fragment in str(info.value)


def test_a_config_holds_plain_python_values():
    config = TrainConfig(hidden=[np.int64(8), 4], epochs=np.int32(2), alpha=np.float32(0.5))
    assert config.hidden == (8, 4) and type(config.hidden[0]) is int
    assert type(config.epochs) is int and type(config.alpha) is float


def test_unknown_method_is_refused(small_data):
    with pytest.raises(ValueError, match="unknown method 'synthetic'"):
        train("synthetic", small_data, SMALL)


def test_compare_refuses_an_unknown_method_before_training():
    with pytest.raises(ValueError, match="methods must be a non-empty list drawn from backprop, no-bprop, dni, cdni"):
        sgrad.compare(["dni", "sgd"], **TINY)


def test_a_batch_larger_than_the_training_set_is_refused(small_data):
    with pytest.raises(ValueError, match=r"batch_size \(500\) is larger than the training set \(200 examples\)"):
        train("backprop", small_data, dataclasses.replace(SMALL, batch_size=500))


def test_float64_data_beyond_float32_is_refused_before_training_and_the_learning_rate_is_not_blamed(small_data):
    """The issue's case: cast to the float32 config, 1e39 became inf, and the message blamed the learning rate."""
    x_train = small_data[0].copy()
    x_train[7, 2] = 1e39
    with pytest.raises(ValueError) as info:
        train("backprop", (x_train, *small_data[1:]), SMALL)
    assert str(info.value) == ("x_train holds 1e+39, beyond the largest float32 (3.40282e+38): cast to float32 it "
                               "would become inf. Scale the data down, or train in float64 (dtype='float64')")
    assert not isinstance(info.value, sgrad.TrainingDiverged)


def test_parameter_count_is_what_build_network_builds():
    for config in (TrainConfig(), SMALL, TrainConfig(hidden=(7,))):
        for method in METHODS:
            built = sum(p.size for layer in build_network(method, 10, 5, config) for _, module in layer.submodules()
                        for p in module.own_parameters().values())
            assert binary_addition.parameter_count(method, 10, 5, config) == built, (method, config)


def test_compare_refuses_a_network_too_large_before_it_makes_any_data(monkeypatch):
    """The issue's case: --hidden 10000000 allocated for minutes; now it says at once what it would need."""
    made = []
    monkeypatch.setattr(binary_addition, "generate_split", lambda *args, **kwargs: made.append(args))
    # 10 -> 50,000 -> 50,000 -> 5 with biases, and two linear generators 50,000 -> 50,000: 7,500,950,005
    # numbers, 16 bytes each in float32 with Adam (parameter, gradient, two moments).
    with pytest.raises(ValueError, match=r"^the dni network would need 120,015,200,080 bytes \(111.8 GiB\) for its "
                                         r"7,500,950,005 parameters, their gradients and adam's state, more than the "
                                         r"2 GiB that sgrad allows"):
        sgrad.compare(["dni"], **dict(TINY, hidden=(50_000, 50_000)))
    assert made == []


# --- divergence -----------------------------------------------------------------------------------------


def test_a_diverging_run_stops_with_the_method_step_and_learning_rate():
    with pytest.raises(sgrad.TrainingDiverged, match=r"^dni diverged at step 96: .* The learning rate "
                                                     r"\(alpha=0.5, generator_alpha=3.0\) is the likely") as info:
        train("dni", generate_split(**DIVERGING_TASK, seed=0), DIVERGING)
    assert len(info.value.history["step_loss"]) == 96 < 30 * 4


@pytest.fixture(scope="module")
def diverging_compare(tmp_path_factory):
    out = tmp_path_factory.mktemp("diverging")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        histories = sgrad.compare(config=DIVERGING, out_dir=out, **DIVERGING_TASK)
    return histories, out, caught


def test_no_warning_leaks_from_a_diverging_comparison_its_table_or_its_figure(diverging_compare):
    _, _, caught = diverging_compare
    assert [str(w.message) for w in caught] == []


def test_the_diverged_methods_stop_at_once_naming_method_step_and_learning_rate(diverging_compare):
    histories, _, _ = diverging_compare
    # Each finished its step (96 and 92) and overflowed in the evaluation at the end of that epoch.
    for method, step, recorded in (("dni", 96, 96), ("cdni", 92, 92)):
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
    histories, out, _ = diverging_compare
    rows = (out / "results.md").read_text().splitlines()
    assert rows[4].startswith("| dni | diverged |") and "diverged at step 96" in rows[4]
    assert rows[5].startswith("| cdni | diverged |") and "diverged at step 92" in rows[5]
    assert re.match(r"\| backprop \| \d+\.\d% \|", rows[2])
    assert (out / "results.md").read_text() == sgrad.results_table(histories) + "\n"


def test_the_figure_of_a_diverging_comparison_is_a_real_png(diverging_compare):
    _, out, _ = diverging_compare
    assert (out / "compare.png").read_bytes()[:8] == PNG_SIGNATURE
    image = imread(out / "compare.png")[..., :3]
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert np.any(image != image[0, 0], axis=2).mean() > 0.01


def test_the_figure_marks_where_a_method_diverged(diverging_compare):
    histories, _, _ = diverging_compare
    figure = comparison_figure(histories, steps_per_epoch=4)
    assert [text.get_text() for text in figure.axes[0].texts] == ["dni diverged at step 96",
                                                                   "cdni diverged at step 92"]
    marker = figure.axes[0].lines[-2]  # after the four curves: dni's x, at its last finite step loss, then cdni's
    assert marker.get_marker() == "x"
    assert (marker.get_xdata()[0], marker.get_ydata()[0]) == (96 / 4, histories["dni"]["step_loss"][-1])
