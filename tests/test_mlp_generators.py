"""MLPGenerator ĝ = MLP([h, c]) and SyntheticLossGenerator ℓ̂ = softplus(MLP([h, c])), ĝ = dL̂/dh."""

import copy

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error

from sgrad.generators import MLPGenerator, SyntheticLossGenerator, regression_loss

BATCH, WIDTH, CONDITION, HIDDEN = 6, 4, 3, (16, 16)
BATCHNORM = pytest.mark.parametrize("batchnorm", [True, False], ids=["batchnorm", "plain"])


def _h(seed=0, rows=BATCH):
    return np.random.default_rng(seed).standard_normal((rows, WIDTH))


def _condition(seed=1, rows=BATCH):
    return np.random.default_rng(seed).standard_normal((rows, CONDITION))


def _generator(kind=MLPGenerator, batchnorm=True, condition_dim=CONDITION, randomise=True, **options):
    """A float64 generator with hidden=(16, 16); randomised, every parameter is off its initial value.

    The output layer starts at zero, which would make every hidden gradient zero: a gradient check
    needs it randomised.
    """
    generator = kind(WIDTH, condition_dim, hidden=HIDDEN, batchnorm=batchnorm, seed=0, **options)
    if randomise:
        rng = np.random.default_rng(10)
        for name, param in generator.parameters.items():
            if name.endswith("gamma"):
                param[:] = rng.uniform(0.5, 1.5, param.shape)
            elif name.startswith(f"{len(HIDDEN)}.") or not name.endswith("weights"):
                param[:] = 0.5 * rng.standard_normal(param.shape)
    return generator


def _joined(h, c):
    return h if c is None else np.concatenate([h, c], axis=1)


def _smallest_pre_activation(net, x):
    """The smallest |value| that reaches a ReLU of the hidden blocks, for input x."""
    smallest = np.inf
    for block in net.modules[:-1]:
        for module in block.modules[:-1]:
            x = module.predict(x)
        smallest = min(smallest, float(np.min(np.abs(x))))
        x = block.modules[-1].predict(x)
    return smallest


def _parameter_cases(batchnorm):
    names = list(_generator(batchnorm=batchnorm, randomise=False).parameters)
    return [pytest.param(batchnorm, name, id=f"{'batchnorm' if batchnorm else 'plain'}-{name}") for name in names]


PARAMETER_CASES = _parameter_cases(True) + _parameter_cases(False)


def _snapshot(generator):
    """Copies of everything a side-effect-free call must leave alone."""
    state = {f"parameter {name}": p.copy() for name, p in generator.parameters.items()}
    for i, block in enumerate(generator.net.modules[:-1]):
        for module in block.modules:
            if hasattr(module, "running_mean"):
                state[f"block {i} running_mean"] = module.running_mean.copy()
                state[f"block {i} running_var"] = module.running_var.copy()
    for name in ("input", "synthetic_gradient", "predicted_loss"):
        if getattr(generator, name, None) is not None:
            state[name] = getattr(generator, name).copy()
    return state


def _assert_same_state(generator, before):
    after = _snapshot(generator)
    assert after.keys() == before.keys()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=f"{name} changed")


# === MLPGenerator =============================================================================


@BATCHNORM
def test_output_layer_starts_at_zero_so_the_synthetic_gradient_is_zero(batchnorm):
    generator = _generator(batchnorm=batchnorm, randomise=False)
    output_layer = generator.net.modules[-1]
    np.testing.assert_array_equal(output_layer.weights, np.zeros((HIDDEN[-1], WIDTH)))
    np.testing.assert_array_equal(output_layer.bias, np.zeros(WIDTH))
    np.testing.assert_array_equal(generator.forward(_h(), _condition()), np.zeros((BATCH, WIDTH)))


@BATCHNORM
def test_hidden_layers_start_random(batchnorm):
    generator = _generator(batchnorm=batchnorm, randomise=False)
    for name, param in generator.parameters.items():
        if name.endswith("weights") and not name.startswith(f"{len(HIDDEN)}."):
            assert np.all(param != 0), f"{name} should be randomly initialised"


def test_same_seed_gives_the_same_parameters():
    a = _generator(randomise=False).parameters
    b = _generator(randomise=False).parameters
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("batchnorm, name", PARAMETER_CASES)
def test_parameter_gradients_match_central_differences_of_the_regression_loss(batchnorm, name):
    generator = _generator(batchnorm=batchnorm)
    h, c = _h(), _condition()
    target = np.random.default_rng(2).standard_normal((BATCH, WIDTH))
    assert _smallest_pre_activation(generator.net, _joined(h, c)) > 1e-3, "keep ReLU's kinks out of reach"
    before = copy.deepcopy(generator)

    def loss():  # L_M at the pre-update generator
        return regression_loss(before.predict(h, c), target)[0]

    generator.forward(h, c)
    generator.update(target, alpha=0.1)

    error = relative_error(generator.gradients[name], numerical_gradient(loss, before.parameters[name]))
    assert error <= 1e-6, f"MLPGenerator dL_M/d{name}: update (mine) vs central difference: error {error:.2e}"


@BATCHNORM
def test_input_gradient_of_the_net_matches_central_differences(batchnorm):
    generator = _generator(batchnorm=batchnorm)
    x = _joined(_h(), _condition())
    R = np.random.default_rng(3).standard_normal((BATCH, WIDTH))
    generator.net.forward(x)
    analytic = generator.net.backward(R)
    numeric = numerical_gradient(lambda: float(np.sum(generator.net.predict(x) * R)), x)
    error = relative_error(analytic, numeric)
    assert error <= 1e-6, f"MLPGenerator net dL/d[h, c]: backward (mine) vs central difference: error {error:.2e}"


@BATCHNORM
def test_update_with_sgd_steps_against_the_gradient(batchnorm):
    generator = _generator(batchnorm=batchnorm)
    before = {name: p.copy() for name, p in generator.parameters.items()}
    generator.forward(_h(), _condition())
    generator.update(np.ones((BATCH, WIDTH)), alpha=0.1)
    for name, param in generator.parameters.items():
        np.testing.assert_array_equal(param, before[name] - 0.1 * generator.gradients[name], err_msg=name)


def test_update_returns_the_loss_before_the_step():
    generator = _generator()
    target = np.ones((BATCH, WIDTH))
    prediction = generator.forward(_h(), _condition()).copy()
    expected = 0.5 * np.sum((prediction - target) ** 2) / BATCH
    assert generator.update(target, alpha=0.1) == pytest.approx(expected, rel=1e-15)


def test_condition_is_concatenated_to_h():
    generator = _generator()
    h, c = _h(), _condition()
    generator.forward(h, c)
    np.testing.assert_array_equal(generator.input, np.concatenate([h, c], axis=1))
    assert generator.parameters["0.0.weights"].shape == (WIDTH + CONDITION, HIDDEN[0])


@BATCHNORM
def test_condition_changes_the_prediction_once_the_weights_are_not_zero(batchnorm):
    generator = _generator(batchnorm=batchnorm)
    h = _h()
    first = generator.predict(h, _condition(seed=1))
    second = generator.predict(h, _condition(seed=2))
    assert np.all(first != second)


@BATCHNORM
def test_adam_lowers_the_regression_loss_a_hundredfold_in_300_updates(batchnorm):
    rng = np.random.default_rng(0)
    h = rng.standard_normal((8, WIDTH))
    target = np.tanh(h @ rng.standard_normal((WIDTH, WIDTH)))
    generator = MLPGenerator(WIDTH, hidden=HIDDEN, batchnorm=batchnorm, update_rule="adam", seed=0)

    first_loss = regression_loss(generator.predict(h), target)[0]
    for _ in range(300):
        generator.forward(h)
        generator.update(target, alpha=1e-2)
    final_loss = regression_loss(generator.predict(h), target)[0]

    assert first_loss / final_loss >= 100, f"L_M fell only from {first_loss:.3g} to {final_loss:.3g}"


@BATCHNORM
def test_predict_has_no_side_effects(batchnorm):
    generator = _generator(batchnorm=batchnorm)
    generator.forward(_h(), _condition())
    before = _snapshot(generator)
    generator.predict(_h(5, rows=3), _condition(6, rows=3))
    _assert_same_state(generator, before)


@BATCHNORM
def test_predict_equals_forward(batchnorm):
    generator = _generator(batchnorm=batchnorm)
    h, c = _h(), _condition()
    np.testing.assert_array_equal(generator.predict(h, c), generator.forward(h, c))


def test_target_of_another_shape_raises_and_changes_nothing():
    generator = _generator()
    generator.forward(_h(), _condition())
    before = _snapshot(generator)
    with pytest.raises(ValueError, match=r"target must have the shape of the last synthetic gradient, \(6, 4\); "
                                         r"got shape \(7, 4\)"):
        generator.update(np.zeros((BATCH + 1, WIDTH)), alpha=0.1)
    _assert_same_state(generator, before)


def test_update_before_forward_raises():
    with pytest.raises(ValueError, match=r"call forward\(h\) first"):
        _generator().update(np.zeros((BATCH, WIDTH)), alpha=0.1)


def test_eval_reaches_every_batchnorm_inside():
    generator = _generator().eval()
    norms = [m for block in generator.net.modules[:-1] for m in block.modules if hasattr(m, "running_mean")]
    assert len(norms) == len(HIDDEN) and not any(norm.training for norm in norms)


# === SyntheticLossGenerator ===================================================================


def _loss_generator(batchnorm=True, condition_dim=CONDITION, **options):
    return _generator(SyntheticLossGenerator, batchnorm=batchnorm, condition_dim=condition_dim, **options)


def _mean_predicted_loss(generator, h, c):
    """L̂ = mean over the batch of softplus(net([h, c])), without side effects."""
    return float(np.mean(np.logaddexp(0.0, generator.net.predict(_joined(h, c)))))


@BATCHNORM
def test_predicted_loss_is_softplus_of_the_net_with_one_column(batchnorm):
    generator = _loss_generator(batchnorm=batchnorm)
    h, c = _h(), _condition()
    generator.forward(h, c)
    z = generator.net.predict(_joined(h, c))
    assert generator.predicted_loss.shape == (BATCH, 1)
    np.testing.assert_allclose(generator.predicted_loss, np.log1p(np.exp(z)), rtol=1e-14)


@pytest.mark.parametrize("shift", [-1000.0, 1000.0], ids=["very_negative", "very_positive"])
def test_predicted_loss_is_non_negative_and_finite_for_extreme_outputs(shift):
    generator = _loss_generator()
    generator.net.modules[-1].bias[:] = shift
    synthetic_gradient = generator.forward(_h(), _condition())
    assert np.all(generator.predicted_loss >= 0)
    assert np.all(np.isfinite(generator.predicted_loss)) and np.all(np.isfinite(synthetic_gradient))


def test_fresh_generator_predicts_log_two_and_a_zero_synthetic_gradient():
    generator = _loss_generator(randomise=False)
    synthetic_gradient = generator.forward(_h(), _condition())
    np.testing.assert_allclose(generator.predicted_loss, np.full((BATCH, 1), np.log(2.0)), rtol=1e-15)
    np.testing.assert_array_equal(synthetic_gradient, np.zeros((BATCH, WIDTH)))


@pytest.mark.parametrize("condition_dim", [0, CONDITION], ids=["unconditioned", "conditioned"])
@BATCHNORM
def test_synthetic_gradient_is_the_gradient_of_the_mean_predicted_loss(batchnorm, condition_dim):
    generator = _loss_generator(batchnorm=batchnorm, condition_dim=condition_dim)
    h = _h()
    c = _condition() if condition_dim else None
    assert _smallest_pre_activation(generator.net, _joined(h, c)) > 1e-3, "keep ReLU's kinks out of reach"

    synthetic_gradient = generator.forward(h, c)
    numeric = numerical_gradient(lambda: _mean_predicted_loss(generator, h, c), h)

    assert synthetic_gradient.shape == (BATCH, WIDTH)
    error = relative_error(synthetic_gradient, numeric)
    assert error <= 1e-6, f"SyntheticLossGenerator ĝ = dL̂/dh: forward (mine) vs central difference: {error:.2e}"


@pytest.mark.parametrize("batchnorm, name", PARAMETER_CASES)  # the same parameter names as MLPGenerator
def test_update_gradients_match_central_differences_of_the_loss_regression(batchnorm, name):
    generator = _loss_generator(batchnorm=batchnorm)
    h, c = _h(), _condition()
    target = np.random.default_rng(2).uniform(0.0, 2.0, (BATCH, 1))
    assert _smallest_pre_activation(generator.net, _joined(h, c)) > 1e-3, "keep ReLU's kinks out of reach"
    before = copy.deepcopy(generator)

    def loss():  # 1/(2 batch) sum((ℓ̂ - target)^2) at the pre-update generator
        predicted_loss = np.logaddexp(0.0, before.net.predict(_joined(h, c)))
        return regression_loss(predicted_loss, target)[0]

    generator.forward(h, c)
    generator.update(target, alpha=0.1)

    error = relative_error(generator.gradients[name], numerical_gradient(loss, before.parameters[name]))
    assert error <= 1e-6, f"SyntheticLossGenerator d/d{name}: update (mine) vs central difference: error {error:.2e}"


def test_update_returns_the_loss_regression_before_the_step():
    generator = _loss_generator()
    target = np.ones((BATCH, 1))
    generator.forward(_h(), _condition())
    expected = 0.5 * np.sum((generator.predicted_loss - target) ** 2) / BATCH
    assert generator.update(target, alpha=0.1) == pytest.approx(expected, rel=1e-15)


@BATCHNORM
def test_repeated_updates_fit_a_fixed_loss_target_a_hundredfold(batchnorm):
    rng = np.random.default_rng(0)
    h = rng.standard_normal((8, WIDTH))
    target = rng.uniform(0.1, 2.0, (8, 1))
    generator = SyntheticLossGenerator(WIDTH, hidden=HIDDEN, batchnorm=batchnorm, update_rule="adam", seed=0)

    generator.forward(h)
    first_loss = regression_loss(generator.predicted_loss, target)[0]
    for _ in range(300):
        generator.forward(h)
        generator.update(target, alpha=1e-2)
    generator.forward(h)
    final_loss = regression_loss(generator.predicted_loss, target)[0]

    assert first_loss / final_loss >= 100, f"loss fell only from {first_loss:.3g} to {final_loss:.3g}"


@pytest.mark.parametrize("shape, message", [
    ((BATCH, WIDTH), r"target must have shape \(batch, 1\)"),
    ((BATCH + 1, 1), r"target must have the shape of the last predicted loss, \(6, 1\); got shape \(7, 1\)"),
    ((BATCH,), r"target must have shape \(batch, 1\).*got shape \(6,\)"),
], ids=["a_gradient_shaped_target", "wrong_row_count", "one_dimensional"])
def test_target_of_the_wrong_shape_raises_and_changes_nothing(shape, message):
    generator = _loss_generator()
    generator.forward(_h(), _condition())
    before = _snapshot(generator)
    with pytest.raises(ValueError, match=message):
        generator.update(np.ones(shape), alpha=0.1)
    _assert_same_state(generator, before)


@BATCHNORM
def test_loss_generator_predict_returns_the_synthetic_gradient_without_side_effects(batchnorm):
    generator = _loss_generator(batchnorm=batchnorm)
    generator.forward(_h(), _condition())
    before = _snapshot(generator)
    h, c = _h(5), _condition(6)
    predicted = generator.predict(h, c)
    _assert_same_state(generator, before)
    np.testing.assert_array_equal(predicted, copy.deepcopy(generator).forward(h, c))
