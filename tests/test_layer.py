"""The blog's Layer: gradients, construction, the update step, dtype, and errors at its boundary.

Bad arguments shared by the whole public API (widths, names, NaN input, learning rates...) are specified in
test_bad_input.py; the ones here are the Layer's own.
"""

import numpy as np
import pytest
from conftest import (assert_backward_matches_central_differences, assert_dtype, assert_tree_dtype, normal,
                      random_input_and_delta)
from hypothesis import given
from strategies import batches, booleans, dtypes, nonlinearities, seeds, update_rules, widths

from sgrad import Layer, sigmoid, sigmoid_out2deriv, tanh
from sgrad.nn.losses import mse


def _layer_and_batch(name, seed=0, batch=4, input_dim=3, output_dim=5):
    layer = Layer(input_dim, output_dim, name, init="he", seed=seed)
    rng = np.random.default_rng(seed + 100)
    layer.bias[:] = rng.standard_normal(output_dim)
    x = rng.standard_normal((batch, input_dim))
    return layer, x


# --- gradients -------------------------------------------------------------------------------


@given(batch=batches, input_dim=widths, output_dim=widths, nonlin=nonlinearities, bias=booleans, seed=seeds)
def test_backward_matches_central_differences(batch, input_dim, output_dim, nonlin, bias, seed):
    rng = np.random.default_rng(seed)
    layer = Layer(input_dim, output_dim, nonlin, bias=bias, rng=rng)
    x, R = random_input_and_delta(layer, rng, batch)
    assert_backward_matches_central_differences(layer, x, R, f"{layer!r}, batch {batch}")


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


def test_xavier_init_lies_within_the_glorot_limit():
    weights = Layer(100, 50, "tanh", init="xavier", seed=0).weights
    limit = np.sqrt(6.0 / 150)
    assert np.abs(weights).max() <= limit
    assert np.abs(weights).max() > 0.95 * limit


def test_he_init_has_standard_deviation_sqrt_2_over_fan_in():
    weights = Layer(200, 100, "relu", init="he", seed=0).weights
    assert weights.std() == pytest.approx(np.sqrt(2.0 / 200), rel=0.02)
    assert abs(weights.mean()) < 0.005


def test_pytorch_init_is_uniform_within_one_over_the_square_root_of_fan_in():
    weights = Layer(400, 100, "relu", init="pytorch", seed=0).weights
    assert np.abs(weights).max() <= 1 / 20
    assert np.abs(weights).max() > 0.99 / 20
    assert weights.std() == pytest.approx(1 / np.sqrt(3 * 400), rel=0.02)


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


# --- dtype -----------------------------------------------------------------------------------


@given(dtype=dtypes, batch=batches, input_dim=widths, output_dim=widths, nonlin=nonlinearities, rule=update_rules,
       seed=seeds)
def test_keeps_its_dtype_through_a_training_step(dtype, batch, input_dim, output_dim, nonlin, rule, seed):
    rng = np.random.default_rng(seed)
    layer = Layer(input_dim, output_dim, nonlin, update_rule=rule, rng=rng, dtype=dtype)
    output = layer.forward(normal(rng, batch, input_dim, dtype=dtype))
    input_delta = layer.backward(normal(rng, batch, output_dim, dtype=dtype))
    assert_dtype(dtype, output=output, input_delta=input_delta, weight_output_delta=layer.weight_output_delta,
                 prediction=layer.predict(normal(rng, batch, input_dim, dtype=dtype)),
                 **{f"gradient of {k}": g for k, g in layer.gradients.items()})
    layer.update(0.1)
    assert_tree_dtype(dtype, layer, "layer")


# --- bad input -------------------------------------------------------------------------------


def _fresh():
    return Layer(3, 2, "sigmoid", seed=0)


def _after_forward():
    layer = _fresh()
    layer.forward(np.ones((4, 3)))
    return layer


BAD_CALLS = [
    ("output_delta_of_wrong_width", _after_forward, lambda layer: layer.backward(np.ones((4, 3))),
     ValueError, r"output_delta must have shape \(batch, 2\).*got shape \(4, 3\)"),
    ("backward_before_forward", _fresh, lambda layer: layer.backward(np.ones((4, 2))),
     ValueError, r"call forward\(input\) first"),
    ("update_before_backward", _after_forward, lambda layer: layer.update(0.1),
     ValueError, r"call backward\(output_delta\) after forward\(input\) first"),
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


def test_name_and_deriv_function_together_raise():
    with pytest.raises(TypeError, match=r"given by name \('sigmoid'\) and a nonlin_deriv as well"):
        Layer(3, 2, "sigmoid", sigmoid_out2deriv)


def test_callable_nonlinearity_without_deriv_raises():
    with pytest.raises(TypeError, match="nonlin_deriv must be the function .* got NoneType"):
        Layer(3, 2, sigmoid)


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
    # update() steps the parameters with the stored gradients; it never scales those arrays in place.
    rng = np.random.default_rng(0)
    layer = Layer(4, 3, "tanh", update_rule=rule, seed=0)
    layer.forward(rng.random((5, 4)))
    layer.backward(rng.random((5, 3)))
    kept = {name: grad for name, grad in layer.gradients.items()}
    copies = {name: grad.copy() for name, grad in kept.items()}
    layer.update(0.1)
    for name in kept:
        np.testing.assert_array_equal(kept[name], copies[name], err_msg=name)


def test_pytorch_bias_init_is_uniform_within_one_over_the_square_root_of_fan_in_and_zeros_draws_nothing():
    bias = Layer(400, 1000, "relu", init="pytorch", bias_init="pytorch", seed=0).bias
    assert np.abs(bias).max() <= 1 / 20 and np.abs(bias).max() > 0.99 / 20
    assert abs(bias.std() - 1 / (20 * np.sqrt(3))) < 0.003
    np.testing.assert_array_equal(Layer(4, 3, "relu", seed=0).bias, np.zeros(3))
    np.testing.assert_array_equal(Layer(4, 3, "relu", seed=0).weights,
                                  Layer(4, 3, "relu", bias_init="pytorch", seed=0).weights,
                                  err_msg="the bias is drawn after the weights")
    with pytest.raises(ValueError, match="unknown bias_init 'he'; choose one of 'zeros', 'pytorch'"):
        Layer(4, 3, "relu", bias_init="he")


def test_parts_draw_each_parts_rows_and_a_bias_per_part_with_the_parts_own_fan_in():
    layer = Layer(794, 2000, "relu", init="pytorch", bias_init="pytorch", parts=(784, 10), seed=0)
    for rows, fan_in in ((layer.weights[:784], 784), (layer.weights[784:], 10)):
        assert 0.99 / np.sqrt(fan_in) < np.abs(rows).max() <= 1 / np.sqrt(fan_in)
        assert abs(rows.std() - 1 / np.sqrt(3 * fan_in)) < 0.02 / np.sqrt(fan_in)
    # the sum of U(±1/√784) and U(±1/√10): its variance is the sum of theirs, and it can pass either bound
    assert abs(layer.bias.std() - np.sqrt(1 / (3 * 784) + 1 / (3 * 10))) < 0.01
    assert 1 / np.sqrt(10) < np.abs(layer.bias).max() <= 1 / np.sqrt(784) + 1 / np.sqrt(10)


def test_one_part_is_the_layer_without_parts_bit_for_bit():
    for options in ({}, {"init": "pytorch", "bias_init": "pytorch"}):
        plain, one = Layer(7, 3, "relu", seed=4, **options), Layer(7, 3, "relu", parts=(7,), seed=4, **options)
        np.testing.assert_array_equal(one.weights, plain.weights)
        np.testing.assert_array_equal(one.bias, plain.bias)


@pytest.mark.parametrize("options, message", [
    ({"parts": (3, 3)}, r"parts must be the widths of the input's parts, summing to input_dim = 5, such as \(5,\); "
                        r"got \(3, 3\)"),
    ({"parts": ()}, "parts must be the widths of the input's parts, summing to input_dim = 5"),
    ({"parts": (5, 0)}, "every width in parts must be at least 1; got 0"),
    ({"parts": (4, 1), "init": np.zeros((5, 2))}, "parts draw each part's rows of the weights, but init is an array"),
])
def test_parts_that_do_not_fit_the_input_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Layer(5, 2, "relu", **options)
