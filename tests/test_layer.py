"""The blog's Layer: construction, gradients, the update step, and errors at its boundary."""

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error

from sgrad import Layer, sigmoid, sigmoid_out2deriv, tanh
from sgrad.losses import mse
from sgrad.nonlinearities import NONLINEARITIES


def _layer_and_batch(name, seed=0, batch=4, input_dim=3, output_dim=5):
    layer = Layer(input_dim, output_dim, name, init="he", seed=seed)
    rng = np.random.default_rng(seed + 100)
    layer.bias[:] = rng.standard_normal(output_dim)
    x = rng.standard_normal((batch, input_dim))
    return layer, x


# --- gradients -------------------------------------------------------------------------------


@pytest.mark.parametrize("wrt", ["weights", "bias", "input"])
@pytest.mark.parametrize("name", sorted(NONLINEARITIES))
def test_backward_matches_central_differences(name, wrt):
    layer, x = _layer_and_batch(name)
    pre_activation = x @ layer.weights + layer.bias
    assert np.min(np.abs(pre_activation)) > 1e-3, "keep ReLU's kink out of reach of the finite difference"
    R = np.random.default_rng(7).standard_normal((4, 5))

    def loss():  # L = sum(h * R), so dL/dh = R
        return float(np.sum(layer.forward(x) * R))

    layer.forward(x)
    input_delta = layer.backward(R)
    analytic = {"weights": layer.weights_grad, "bias": layer.bias_grad, "input": input_delta}[wrt]
    target = {"weights": layer.weights, "bias": layer.bias, "input": x}[wrt]
    numeric = numerical_gradient(loss, target)

    error = relative_error(analytic, numeric)
    assert error <= 1e-6, f"{name} layer, dL/d{wrt}: backward (mine) vs central difference: error {error:.2e}"


def test_weight_output_delta_is_output_delta_times_derivative():
    layer = Layer(3, 2, sigmoid, sigmoid_out2deriv, seed=0)
    x = np.random.default_rng(1).standard_normal((4, 3))
    h = layer.forward(x)
    delta = np.random.default_rng(2).standard_normal((4, 2))
    layer.backward(delta)
    np.testing.assert_allclose(layer.weight_output_delta, delta * (h * (1 - h)), rtol=1e-15)


def test_layer_does_no_averaging_over_the_batch():
    layer = Layer(3, 2, "tanh", seed=0)
    x = np.array([[0.5, -1.0, 2.0]])
    delta = np.array([[1.5, -0.5]])
    layer.forward(x)
    layer.backward(delta)
    single = layer.weights_grad.copy()

    layer.forward(np.vstack([x, x]))
    layer.backward(np.vstack([delta, delta]))
    np.testing.assert_allclose(layer.weights_grad, 2 * single, rtol=1e-15)


# --- construction ----------------------------------------------------------------------------


def test_blog_positional_call_builds_a_sigmoid_layer():
    layer = Layer(16, 128, sigmoid, sigmoid_out2deriv)
    x = np.random.default_rng(0).standard_normal((2, 16))
    h = layer.forward(x)
    assert layer.weights.shape == (16, 128)
    np.testing.assert_array_equal(h, sigmoid(x @ layer.weights + layer.bias))


def test_a_name_stands_for_the_pair():
    layer = Layer(3, 2, "tanh", seed=0)
    x = np.random.default_rng(0).standard_normal((4, 3))
    np.testing.assert_array_equal(layer.forward(x), tanh(x @ layer.weights + layer.bias))


def test_forward_and_backward_set_the_blog_attributes():
    layer = Layer(3, 2, "sigmoid", seed=0)
    x = np.random.default_rng(0).standard_normal((4, 3))
    h = layer.forward(x)
    assert layer.weights.shape == (3, 2)
    assert layer.input is x
    assert layer.output is h and h.shape == (4, 2)
    assert layer.weight_output_delta is None
    layer.backward(np.ones((4, 2)))
    assert layer.weight_output_delta.shape == (4, 2)
    assert layer.weights_grad.shape == (3, 2) and layer.bias_grad.shape == (2,)


def test_bias_false_gives_no_bias():
    layer = Layer(3, 2, "identity", bias=False, seed=0)
    x = np.random.default_rng(0).standard_normal((4, 3))
    h = layer.forward(x)
    layer.backward(np.ones((4, 2)))
    assert layer.bias is None and layer.bias_grad is None
    assert set(layer.parameters) == {"weights"}
    np.testing.assert_array_equal(h, x @ layer.weights)


def test_bias_starts_at_zero():
    np.testing.assert_array_equal(Layer(3, 2, "tanh", seed=0).bias, [0.0, 0.0])


def test_same_seed_gives_identical_weights():
    np.testing.assert_array_equal(Layer(4, 3, "tanh", seed=42).weights, Layer(4, 3, "tanh", seed=42).weights)


def test_different_seeds_give_different_weights():
    a = Layer(4, 3, "tanh", seed=1).weights
    b = Layer(4, 3, "tanh", seed=2).weights
    assert np.all(a != b)


def test_rng_gives_the_same_weights_as_the_same_seed():
    from_rng = Layer(4, 3, "tanh", rng=np.random.default_rng(5)).weights
    np.testing.assert_array_equal(from_rng, Layer(4, 3, "tanh", seed=5).weights)


def test_seed_and_rng_together_raise():
    with pytest.raises(ValueError, match="either seed or rng, not both"):
        Layer(4, 3, "tanh", seed=1, rng=np.random.default_rng(1))


def test_xavier_init_lies_within_the_glorot_limit():
    weights = Layer(100, 50, "tanh", init="xavier", seed=0).weights
    limit = np.sqrt(6.0 / 150)
    assert np.abs(weights).max() <= limit
    assert np.abs(weights).max() > 0.95 * limit


def test_he_init_has_standard_deviation_sqrt_2_over_fan_in():
    weights = Layer(200, 100, "relu", init="he", seed=0).weights
    assert weights.std() == pytest.approx(np.sqrt(2.0 / 200), rel=0.02)
    assert abs(weights.mean()) < 0.005


def test_blog_init_is_shifted_towards_negative_weights():
    weights = Layer(200, 100, "sigmoid", init="blog", seed=0).weights
    assert weights.mean() == pytest.approx(-0.1, abs=0.005)
    assert weights.std() == pytest.approx(0.2, rel=0.02)


def test_zeros_init_is_all_zeros():
    np.testing.assert_array_equal(Layer(3, 2, "tanh", init="zeros").weights, np.zeros((3, 2)))


def test_explicit_init_array_is_copied():
    initial = np.arange(6.0).reshape(3, 2)
    layer = Layer(3, 2, "tanh", init=initial)
    initial[0, 0] = 99.0
    np.testing.assert_array_equal(layer.weights, np.arange(6.0).reshape(3, 2))


def test_init_array_of_the_wrong_shape_raises():
    with pytest.raises(ValueError, match=r"must have shape \(3, 2\); got \(2, 3\)"):
        Layer(3, 2, "tanh", init=np.zeros((2, 3)))


def test_unknown_init_name_raises():
    with pytest.raises(ValueError, match="unknown init 'glorot'"):
        Layer(3, 2, "tanh", init="glorot")


# --- the update step -------------------------------------------------------------------------


def test_default_update_is_plain_gradient_descent():
    layer, x = _layer_and_batch("tanh")
    layer.forward(x)
    layer.backward(np.random.default_rng(3).standard_normal((4, 5)))
    weights_before, bias_before = layer.weights.copy(), layer.bias.copy()
    weights_grad, bias_grad = layer.weights_grad.copy(), layer.bias_grad.copy()
    layer.update(0.1)
    np.testing.assert_array_equal(layer.weights, weights_before - 0.1 * weights_grad)
    np.testing.assert_array_equal(layer.bias, bias_before - 0.1 * bias_grad)


def test_a_small_step_lowers_the_loss():
    layer, x = _layer_and_batch("sigmoid")
    target = np.random.default_rng(4).uniform(0.0, 1.0, (4, 5))
    loss_before, dh = mse(layer.forward(x), target)
    layer.backward(dh)
    layer.update(0.01)
    loss_after, _ = mse(layer.forward(x), target)
    assert loss_after < loss_before


def test_update_uses_the_layers_update_rule():
    layer = Layer(3, 2, "identity", update_rule="momentum", seed=0)
    x = np.ones((1, 3))
    start = layer.weights.copy()
    for _ in range(2):
        layer.forward(x)
        layer.backward(np.ones((1, 2)))  # an identity layer: the same gradient, ones, both times
        layer.update(0.1)
    # velocity -0.1 then -0.19: the weights move by -0.29 in total
    np.testing.assert_allclose(layer.weights, start - 0.29, rtol=0, atol=1e-15)


# --- bad input -------------------------------------------------------------------------------


def _fresh():
    return Layer(3, 2, "sigmoid", seed=0)


def _after_forward():
    layer = _fresh()
    layer.forward(np.ones((4, 3)))
    return layer


def _after_backward():
    layer = _after_forward()
    layer.backward(np.ones((4, 2)))
    return layer


def _with_nan(shape, value=np.nan):
    a = np.ones(shape)
    a[1, 0] = value
    return a


BAD_CALLS = [
    ("input_of_wrong_width", _fresh, lambda layer: layer.forward(np.ones((4, 5))),
     ValueError, r"input must have shape \(batch, 3\).*got shape \(4, 5\)"),
    ("one_dimensional_input", _fresh, lambda layer: layer.forward(np.ones(3)),
     ValueError, r"shape \(batch, 3\); got shape \(3,\)\. For a single example use input\.reshape\(1, -1\)"),
    ("integer_input", _fresh, lambda layer: layer.forward(np.ones((4, 3), dtype=np.int64)),
     TypeError, "input must hold floats; got dtype int64"),
    ("list_input", _fresh, lambda layer: layer.forward([[1.0, 2.0, 3.0]]),
     TypeError, r"input must be a NumPy array of shape \(batch, 3\); got list"),
    ("nan_input", _fresh, lambda layer: layer.forward(_with_nan((4, 3))),
     ValueError, r"input holds NaN or inf \(first in row 1\)"),
    ("inf_input", _fresh, lambda layer: layer.forward(_with_nan((4, 3), np.inf)),
     ValueError, r"input holds NaN or inf \(first in row 1\)"),
    ("output_delta_of_wrong_width", _after_forward, lambda layer: layer.backward(np.ones((4, 3))),
     ValueError, r"output_delta must have shape \(batch, 2\).*got shape \(4, 3\)"),
    ("output_delta_of_wrong_batch", _after_forward, lambda layer: layer.backward(np.ones((5, 2))),
     ValueError, r"output_delta must have the shape of this layer's last output, \(4, 2\); got shape \(5, 2\)"),
    ("nan_output_delta", _after_forward, lambda layer: layer.backward(_with_nan((4, 2))),
     ValueError, r"output_delta holds NaN or inf \(first in row 1\)"),
    ("backward_before_forward", _fresh, lambda layer: layer.backward(np.ones((4, 2))),
     ValueError, r"call forward\(input\) first"),
    ("update_before_backward", _after_forward, lambda layer: layer.update(0.1),
     ValueError, r"call backward\(output_delta\) after forward\(input\) first"),
    ("zero_alpha", _after_backward, lambda layer: layer.update(0.0),
     ValueError, r"alpha \(a learning rate\) must be a finite number > 0, e.g. 0.01; got 0.0"),
    ("negative_alpha", _after_backward, lambda layer: layer.update(-0.1),
     ValueError, r"must be a finite number > 0, e.g. 0.01; got -0.1"),
]


@pytest.mark.parametrize("make_layer, call, error, message",
                         [case[1:] for case in BAD_CALLS], ids=[case[0] for case in BAD_CALLS])
def test_bad_call_raises_and_leaves_the_weights_alone(make_layer, call, error, message):
    layer = make_layer()
    weights_before, bias_before = layer.weights.copy(), layer.bias.copy()
    with pytest.raises(error, match=message):
        call(layer)
    np.testing.assert_array_equal(layer.weights, weights_before)
    np.testing.assert_array_equal(layer.bias, bias_before)


def test_unknown_nonlinearity_name_raises():
    with pytest.raises(ValueError, match=r"unknown nonlinearity 'swish'; choose one of 'sigmoid'"):
        Layer(3, 2, "swish")


def test_name_and_deriv_function_together_raise():
    with pytest.raises(TypeError, match=r"given by name \('sigmoid'\) and a nonlin_deriv as well"):
        Layer(3, 2, "sigmoid", sigmoid_out2deriv)


def test_callable_nonlinearity_without_deriv_raises():
    with pytest.raises(TypeError, match="nonlin_deriv must be the function .* got NoneType"):
        Layer(3, 2, sigmoid)


@pytest.mark.parametrize("dims, message", [
    ((0, 2), "input_dim must be at least 1; got 0"),
    ((3, 2.5), r"output_dim must be an integer; got 2.5 \(float\)"),
])
def test_bad_dimensions_raise(dims, message):
    with pytest.raises((ValueError, TypeError), match=message):
        Layer(*dims, "tanh")


def test_gradients_of_one_batch_are_never_applied_to_another():
    layer = Layer(2, 1, "identity", init=np.ones((2, 1)))
    layer.forward(np.array([[1.0, 0.0]]))
    layer.backward(np.array([[1.0]]))
    layer.forward(np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"call backward\(output_delta\) after forward\(input\) first"):
        layer.update(0.5)
    np.testing.assert_array_equal(layer.weights, np.ones((2, 1)))


def test_a_second_update_without_a_new_backward_raises():
    layer = Layer(2, 1, "identity", init=np.ones((2, 1)))
    layer.forward(np.array([[1.0, 0.0]]))
    layer.backward(np.array([[1.0]]))
    layer.update(0.5)
    with pytest.raises(ValueError, match="call backward"):
        layer.update(0.5)
    np.testing.assert_array_equal(layer.weights, [[0.5], [1.0]])


def test_backward_after_update_needs_a_new_forward():
    layer = Layer(2, 1, "identity", init=np.ones((2, 1)))
    layer.forward(np.array([[1.0, 0.0]]))
    layer.backward(np.array([[1.0]]))
    layer.update(0.5)
    with pytest.raises(ValueError, match=r"old weights; call forward\(input\) again"):
        layer.backward(np.array([[1.0]]))


@pytest.mark.parametrize("rule", ["sgd", "momentum", "adam"])
def test_update_leaves_a_gradient_the_caller_kept_alone(rule):
    # Inside sgrad's training steps plain SGD may scale the spent gradient in place; a public update never does.
    rng = np.random.default_rng(0)
    layer = Layer(4, 3, "tanh", update_rule=rule, seed=0)
    layer.forward(rng.random((5, 4)))
    layer.backward(rng.random((5, 3)))
    kept = {name: grad for name, grad in layer.gradients.items()}
    copies = {name: grad.copy() for name, grad in kept.items()}
    layer.update(0.1)
    for name in kept:
        np.testing.assert_array_equal(kept[name], copies[name], err_msg=name)
