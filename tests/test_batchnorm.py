"""BatchNorm: gradients in both modes, normalisation, running averages, dtype, errors, the update step.

Switching the mode (train/eval) is the Module tree's, specified in test_module.py; bad arguments shared by
the whole public API are in test_bad_input.py.
"""

import numpy as np
import pytest
from conftest import (assert_backward_matches_central_differences, assert_dtype, assert_tree_dtype, normal, randomize,
                      relative_error)
from hypothesis import assume, given
from strategies import booleans, dtypes, seeds, training_batches, update_rules, widths

from sgrad.nn.batchnorm import BatchNorm

BATCH, FEATURES = 6, 4


def _batch(seed=0, rows=BATCH):
    """A batch whose features have different offsets and scales, far from mean 0 and variance 1."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, FEATURES)) * [0.5, 2.0, 3.0, 0.1] + [5.0, -1.0, 0.0, 2.0]


def _norm(seed=1, **options):
    """A BatchNorm whose gamma and beta are not the trivial ones and whose running averages have moved."""
    norm = BatchNorm(FEATURES, **options)
    rng = np.random.default_rng(seed)
    norm.gamma[:] = rng.uniform(0.5, 2.0, FEATURES)
    norm.beta[:] = rng.standard_normal(FEATURES)
    for k in range(3):
        norm.forward(_batch(seed + 10 + k))
    return norm


def _snapshot(norm):
    return {name: value.copy() for name, value in
            [("gamma", norm.gamma), ("beta", norm.beta),
             ("running_mean", norm.running_mean), ("running_var", norm.running_var)]}


def _assert_unchanged(norm, snapshot):
    for name, before in snapshot.items():
        np.testing.assert_array_equal(getattr(norm, name), before, err_msg=f"{name} changed")


# --- gradients -------------------------------------------------------------------------------


@given(batch=training_batches, features=widths, training=booleans, seed=seeds)
def test_backward_matches_central_differences(batch, features, training, seed):
    rng = np.random.default_rng(seed)
    norm = BatchNorm(features)
    randomize(norm.parameters, rng)
    norm.running_mean[:], norm.running_var[:] = rng.standard_normal(features), rng.uniform(0.5, 2.0, features)
    norm.train(training)
    # features far from mean 0 and variance 1, each with an offset and a scale of its own
    x = normal(rng, batch, features) * rng.uniform(0.5, 3.0, features) + rng.standard_normal(features)
    R = normal(rng, batch, features)
    assume(np.min(x.var(axis=0)) > 1e-2)  # a small variance curves the loss too sharply for central differences
    assert_backward_matches_central_differences(
        norm, x, R, f"BatchNorm({features}), {'training' if training else 'evaluation'} mode, batch {batch}")


def test_training_mode_input_gradient_is_not_the_elementwise_one():
    # The batch mean and variance depend on every row, so dL/dx is not gamma * inv_std * R alone;
    # this is what makes the training-mode gradient check a real test of the full formula.
    norm = _norm()
    x = _batch(seed=2)
    R = np.random.default_rng(3).standard_normal((BATCH, FEATURES))
    norm.forward(x)
    input_delta = norm.backward(R)
    elementwise = R * norm.gamma / np.sqrt(x.var(axis=0) + norm.eps)
    assert relative_error(input_delta, elementwise) > 0.1


def test_training_mode_input_gradient_sums_to_zero_over_the_batch():
    # Shifting every row by the same amount leaves the normalised output unchanged.
    norm = _norm()
    norm.forward(_batch(seed=2))
    input_delta = norm.backward(np.random.default_rng(3).standard_normal((BATCH, FEATURES)))
    np.testing.assert_allclose(input_delta.sum(axis=0), 0.0, atol=1e-12)


# --- training mode ---------------------------------------------------------------------------


def test_training_output_has_zero_mean_and_unit_variance_per_feature_before_gamma_and_beta():
    norm = _norm()
    out = norm.forward(_batch(seed=2))
    x_hat = (out - norm.beta) / norm.gamma
    np.testing.assert_allclose(x_hat.mean(axis=0), 0.0, atol=1e-12)
    # The variance is var / (var + eps), 1 up to eps over the smallest variance (0.1**2 here).
    np.testing.assert_allclose(x_hat.var(axis=0), 1.0, atol=2e-3)


def test_training_output_is_gamma_times_the_normalised_input_plus_beta():
    norm = _norm()
    x = _batch(seed=2)
    expected = (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + norm.eps) * norm.gamma + norm.beta
    np.testing.assert_allclose(norm.forward(x), expected, rtol=1e-12, atol=1e-12)


def test_running_averages_follow_momentum_with_an_unbiased_variance():
    momentum = 0.3
    norm = BatchNorm(FEATURES, momentum=momentum)
    expected_mean, expected_var = np.zeros(FEATURES), np.ones(FEATURES)
    for seed, rows in [(0, 5), (1, 8), (2, 3)]:
        x = _batch(seed, rows)
        norm.forward(x)
        expected_mean = (1 - momentum) * expected_mean + momentum * x.mean(axis=0)
        expected_var = (1 - momentum) * expected_var + momentum * x.var(axis=0, ddof=1)
    np.testing.assert_allclose(norm.running_mean, expected_mean, rtol=1e-13)
    np.testing.assert_allclose(norm.running_var, expected_var, rtol=1e-13)


def test_running_averages_start_at_mean_zero_and_variance_one():
    norm = BatchNorm(FEATURES)
    np.testing.assert_array_equal(norm.running_mean, np.zeros(FEATURES))
    np.testing.assert_array_equal(norm.running_var, np.ones(FEATURES))


def test_momentum_one_keeps_only_the_last_batch():
    norm = BatchNorm(FEATURES, momentum=1.0)
    norm.forward(_batch(seed=0))
    x = _batch(seed=1)
    norm.forward(x)
    np.testing.assert_allclose(norm.running_mean, x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(norm.running_var, x.var(axis=0, ddof=1), rtol=1e-14)


# --- evaluation mode -------------------------------------------------------------------------


def test_evaluation_mode_normalises_with_the_running_averages():
    norm = _norm().eval()
    x = _batch(seed=2)
    expected = (x - norm.running_mean) / np.sqrt(norm.running_var + norm.eps) * norm.gamma + norm.beta
    np.testing.assert_allclose(norm.forward(x), expected, rtol=1e-14, atol=1e-14)


def test_evaluation_mode_leaves_the_running_averages_alone():
    norm = _norm().eval()
    before = _snapshot(norm)
    norm.forward(_batch(seed=2))
    _assert_unchanged(norm, before)


def test_evaluation_mode_treats_each_row_on_its_own():
    norm = _norm().eval()
    x = _batch(seed=2)
    np.testing.assert_allclose(norm.forward(x[:1]), norm.forward(x)[:1], rtol=1e-15)


# --- predict ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["training", "evaluation"])
def test_predict_equals_forward(mode):
    norm = _norm().train(mode == "training")
    x = _batch(seed=2)
    # the same numbers up to rounding (evaluation mode divides by the standard deviation in predict,
    # multiplies by its inverse in forward)
    np.testing.assert_array_equal(norm.predict(x), norm.forward(x))


@pytest.mark.parametrize("mode", ["training", "evaluation"])
def test_predict_has_no_side_effects(mode):
    norm = _norm().train(mode == "training")
    x = _batch(seed=2)
    R = np.random.default_rng(3).standard_normal((BATCH, FEATURES))
    reference = _norm().train(mode == "training")
    reference.forward(x)
    expected_delta = reference.backward(R)

    norm.forward(x)
    before = _snapshot(norm)
    norm.predict(_batch(seed=4, rows=3))

    _assert_unchanged(norm, before)
    # backward still runs through the last forward's batch, not the predicted one
    np.testing.assert_array_equal(norm.backward(R), expected_delta)


# --- dtype -----------------------------------------------------------------------------------


@given(dtype=dtypes, batch=training_batches, features=widths, training=booleans, rule=update_rules, seed=seeds)
def test_keeps_its_dtype_through_a_step(dtype, batch, features, training, rule, seed):
    rng = np.random.default_rng(seed)
    norm = BatchNorm(features, update_rule=rule, dtype=dtype).train(training)
    output = norm.forward(normal(rng, batch, features, dtype=dtype))
    input_delta = norm.backward(normal(rng, batch, features, dtype=dtype))
    assert_dtype(dtype, output=output, input_delta=input_delta,
                 **{f"gradient of {k}": g for k, g in norm.gradients.items()})
    norm.update(0.1)
    assert_tree_dtype(dtype, norm, "batch norm")  # gamma, beta, the running averages and the rule's state
    assert_dtype(dtype, single_example_output=norm.eval().forward(normal(rng, 1, features, dtype=dtype)))


def test_float32_output_matches_float64_to_single_precision():
    x = _batch(seed=2)
    out32 = BatchNorm(FEATURES, dtype=np.float32).forward(x.astype(np.float32))
    out64 = BatchNorm(FEATURES).forward(x)
    np.testing.assert_allclose(out32, out64, rtol=1e-4, atol=1e-5)


# --- the update step -------------------------------------------------------------------------


def test_default_update_is_plain_gradient_descent():
    norm = _norm()
    norm.forward(_batch(seed=2))
    norm.backward(np.random.default_rng(3).standard_normal((BATCH, FEATURES)))
    gamma_before, beta_before = norm.gamma.copy(), norm.beta.copy()
    dgamma, dbeta = norm.gradients["gamma"].copy(), norm.gradients["beta"].copy()
    norm.update(0.1)
    np.testing.assert_array_equal(norm.gamma, gamma_before - 0.1 * dgamma)
    np.testing.assert_array_equal(norm.beta, beta_before - 0.1 * dbeta)


def test_a_second_update_without_a_new_backward_raises():
    norm = _norm()
    norm.forward(_batch(seed=2))
    norm.backward(np.ones((BATCH, FEATURES)))
    norm.update(0.1)
    gamma_after_one_step = norm.gamma.copy()
    with pytest.raises(ValueError, match=r"call backward\(output_delta\) after forward\(x\) first"):
        norm.update(0.1)
    np.testing.assert_array_equal(norm.gamma, gamma_after_one_step)


# --- bad input -------------------------------------------------------------------------------


def _with_nan():
    x = _batch(seed=2)
    x[1, 0] = np.nan
    return x


BAD_INPUTS = [
    pytest.param("training", _with_nan, ValueError, r"input holds NaN or inf \(first in row 1\)",
                 id="nan_in_training"),
    pytest.param("evaluation", _with_nan, ValueError, r"input holds NaN or inf \(first in row 1\)",
                 id="nan_in_evaluation"),
]


@pytest.mark.parametrize("mode, make_input, error, message", BAD_INPUTS)
def test_bad_input_raises_and_changes_nothing(mode, make_input, error, message):
    norm = _norm().train(mode == "training")
    x = _batch(seed=2)
    R = np.random.default_rng(3).standard_normal((BATCH, FEATURES))
    norm.forward(x)
    norm.backward(R)
    before = _snapshot(norm)
    gradients_before = {name: g.copy() for name, g in norm.gradients.items()}

    with pytest.raises(error, match=message):
        norm.forward(make_input())

    _assert_unchanged(norm, before)
    # the pending step of the last backward is still there, and is still the same step
    norm.update(0.1)
    np.testing.assert_array_equal(norm.gamma, before["gamma"] - 0.1 * gradients_before["gamma"])


def test_output_delta_of_another_shape_raises():
    norm = _norm()
    norm.forward(_batch(seed=2))
    with pytest.raises(ValueError, match=r"output_delta must have the shape of the last output, \(6, 4\)"):
        norm.backward(np.ones((BATCH + 1, FEATURES)))


@pytest.mark.parametrize("momentum", [1.5, -0.1])
def test_momentum_outside_zero_to_one_raises(momentum):
    with pytest.raises(ValueError, match=r"momentum must be a finite number in \(0, 1\]"):
        BatchNorm(FEATURES, momentum=momentum)
