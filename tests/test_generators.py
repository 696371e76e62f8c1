"""LinearGenerator ĝ = [h, c] @ weights + bias: initialisation, gradients, learning, conditioning."""

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error

from sgrad.generators import LinearGenerator, MLPGenerator, regression_loss

BATCH, WIDTH, CONDITION = 5, 4, 3


def _h(seed=0):
    return np.random.default_rng(seed).standard_normal((BATCH, WIDTH))


def _condition(seed=1, rows=BATCH, width=CONDITION):
    return np.random.default_rng(seed).standard_normal((rows, width))


# --- initialisation and predict --------------------------------------------------------------


def test_zeros_init_predicts_zero():
    generator = LinearGenerator(WIDTH, init="zeros")
    np.testing.assert_array_equal(generator.predict(_h()), np.zeros((BATCH, WIDTH)))


def test_zeros_is_the_default_init():
    np.testing.assert_array_equal(LinearGenerator(WIDTH, CONDITION).weights, np.zeros((WIDTH + CONDITION, WIDTH)))


def test_blog_init_is_random_and_seeded():
    a = LinearGenerator(WIDTH, init="blog", seed=3).weights
    b = LinearGenerator(WIDTH, init="blog", seed=3).weights
    c = LinearGenerator(WIDTH, init="blog", seed=4).weights
    np.testing.assert_array_equal(a, b)
    assert np.all(a != c)
    assert np.all(a != 0)


def test_conditioned_weights_have_a_row_per_input_and_condition_column():
    assert LinearGenerator(WIDTH, CONDITION).weights.shape == (WIDTH + CONDITION, WIDTH)


def test_predict_has_no_side_effects():
    generator = LinearGenerator(WIDTH, init="blog", seed=0)
    h = _h(0)
    generator.forward(h)
    remembered_input = generator.input
    remembered_prediction = generator.synthetic_gradient.copy()
    weights_before = generator.weights.copy()

    generator.predict(_h(1))

    assert generator.input is remembered_input
    np.testing.assert_array_equal(generator.input, h)
    np.testing.assert_array_equal(generator.synthetic_gradient, remembered_prediction)
    np.testing.assert_array_equal(generator.weights, weights_before)


def test_predict_equals_forward():
    generator = LinearGenerator(WIDTH, CONDITION, init="blog", seed=0)
    h, c = _h(), _condition()
    np.testing.assert_array_equal(generator.predict(h, c), generator.forward(h, c))


# --- gradients and the update ----------------------------------------------------------------


@pytest.mark.parametrize("condition_dim", [0, CONDITION], ids=["unconditioned", "conditioned"])
def test_parameter_gradients_match_central_differences(condition_dim):
    generator = LinearGenerator(WIDTH, condition_dim, init="blog", seed=0)
    generator.bias[:] = np.random.default_rng(5).standard_normal(WIDTH)
    h = _h()
    c = _condition() if condition_dim else None
    target = np.random.default_rng(6).standard_normal((BATCH, WIDTH))
    weights, bias = generator.weights.copy(), generator.bias.copy()
    joined = h if c is None else np.concatenate([h, c], axis=1)

    def loss():  # L_M at the copies of the pre-update parameters
        return regression_loss(joined @ weights + bias, target)[0]

    generator.forward(h, c)
    generator.update(target, alpha=0.1)

    for name, analytic, param in [("weights", generator.weights_grad, weights), ("bias", generator.bias_grad, bias)]:
        error = relative_error(analytic, numerical_gradient(loss, param))
        assert error <= 1e-6, f"generator dL_M/d{name}: update (mine) vs central difference: error {error:.2e}"


def test_update_returns_the_loss_before_the_step():
    generator = LinearGenerator(WIDTH, init="blog", seed=0)
    h = _h()
    target = np.ones((BATCH, WIDTH))
    prediction = generator.forward(h).copy()
    expected = 0.5 * np.sum((prediction - target) ** 2) / BATCH
    assert generator.update(target, alpha=0.1) == pytest.approx(expected, rel=1e-15)


def test_update_with_sgd_steps_against_the_gradient():
    generator = LinearGenerator(WIDTH, init="blog", seed=0)
    weights_before = generator.weights.copy()
    generator.forward(_h())
    generator.update(np.ones((BATCH, WIDTH)), alpha=0.1)
    np.testing.assert_array_equal(generator.weights, weights_before - 0.1 * generator.weights_grad)


def test_adam_fits_an_exactly_linear_target_a_hundredfold_in_200_steps():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((8, WIDTH))
    target = h @ rng.standard_normal((WIDTH, WIDTH)) + rng.standard_normal(WIDTH)
    generator = LinearGenerator(WIDTH, update_rule="adam")

    first_loss = regression_loss(generator.predict(h), target)[0]
    for _ in range(200):
        generator.forward(h)
        generator.update(target, alpha=0.05)
    final_loss = regression_loss(generator.predict(h), target)[0]

    assert first_loss / final_loss >= 100, f"loss fell only from {first_loss:.3g} to {final_loss:.3g}"


def test_update_before_forward_raises():
    with pytest.raises(ValueError, match=r"call forward\(h\) first"):
        LinearGenerator(WIDTH).update(np.zeros((BATCH, WIDTH)), alpha=0.1)


def test_target_of_another_shape_raises_and_leaves_the_weights_alone():
    generator = LinearGenerator(WIDTH, init="blog", seed=0)
    weights_before = generator.weights.copy()
    generator.forward(_h())
    with pytest.raises(ValueError, match=r"target must have the shape of the last synthetic gradient, \(5, 4\)"):
        generator.update(np.zeros((BATCH + 1, WIDTH)), alpha=0.1)
    np.testing.assert_array_equal(generator.weights, weights_before)


def test_bad_alpha_raises_and_leaves_the_weights_alone():
    generator = LinearGenerator(WIDTH, init="blog", seed=0)
    weights_before = generator.weights.copy()
    generator.forward(_h())
    with pytest.raises(ValueError, match=r"alpha \(a learning rate\) must be a finite number > 0, e.g. 0.01; got 0.0"):
        generator.update(np.zeros((BATCH, WIDTH)), alpha=0.0)
    np.testing.assert_array_equal(generator.weights, weights_before)


# --- conditioning ----------------------------------------------------------------------------


def test_condition_changes_the_prediction():
    generator = LinearGenerator(WIDTH, CONDITION, init="blog", seed=0)
    h = _h()
    first = generator.predict(h, _condition(seed=1))
    second = generator.predict(h, _condition(seed=2))
    assert np.all(first != second)


def test_condition_enters_through_its_own_rows_of_the_weights():
    generator = LinearGenerator(WIDTH, CONDITION, init="blog", seed=0)
    h, c = _h(), _condition()
    expected = h @ generator.weights[:WIDTH] + c @ generator.weights[WIDTH:] + generator.bias
    np.testing.assert_allclose(generator.predict(h, c), expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("condition_dim, condition, message", [
    (CONDITION, None, r"is conditioned \(condition_dim=3\): pass condition=c of shape \(batch, 3\)"),
    (0, _condition(), r"is unconditioned \(condition_dim=0\) but a condition was given"),
    (CONDITION, _condition(width=2), r"condition must have shape \(batch, 3\).*got shape \(5, 2\)"),
    (CONDITION, _condition(rows=3), "the input has 5 rows, the condition has 3"),
], ids=["missing", "unexpected", "wrong_width", "wrong_row_count"])
def test_bad_condition_raises(condition_dim, condition, message):
    generator = LinearGenerator(WIDTH, condition_dim, init="blog", seed=0)
    with pytest.raises(ValueError, match=message):
        generator.forward(_h(), condition)
    assert generator.input is None and generator.synthetic_gradient is None


def test_seed_and_rng_together_raise():
    with pytest.raises(ValueError, match="either seed or rng, not both"):
        LinearGenerator(WIDTH, seed=0, rng=np.random.default_rng(0))


@pytest.mark.parametrize("make", [lambda: LinearGenerator(WIDTH, init="blog", seed=0),
                                  lambda: MLPGenerator(WIDTH, hidden=(4,), seed=0)], ids=["linear", "mlp"])
def test_a_second_update_without_a_forward_is_refused(make):
    generator = make()
    h = _h(0)
    generator.forward(h)
    generator.update(np.ones_like(h), 0.1)
    weights = {name: p.copy() for name, p in generator.parameters.items()}
    with pytest.raises(ValueError, match=r"update\(\) after update\(\).*call forward\(h\) again first"):
        generator.update(np.ones_like(h), 0.1)
    for name, p in generator.parameters.items():
        np.testing.assert_array_equal(p, weights[name])
