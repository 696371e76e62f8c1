"""Blocks (Activation, Sequential, dense_block) and DNIBlock, a block decoupled by a generator."""

import copy

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error

from sgrad import Layer
from sgrad.batchnorm import BatchNorm
from sgrad.blocks import Activation, Sequential, dense_block
from sgrad.dni import DNIBlock
from sgrad.generators import LinearGenerator
from sgrad.nonlinearities import NONLINEARITIES

BATCH, IN, OUT, CONDITION = 6, 4, 5, 3


def _x(seed=0, rows=BATCH, width=IN):
    return np.random.default_rng(seed).standard_normal((rows, width))


def _pre_activation(block, x):
    """What the block's last module (its nonlinearity) receives for x."""
    for module in block.modules[:-1]:
        x = module.predict(x)
    return x


# --- Activation ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NONLINEARITIES))
def test_activation_backward_is_delta_times_the_derivative_at_the_output(name):
    nonlin, nonlin_deriv = NONLINEARITIES[name]
    activation = Activation(name)
    z = _x(1)
    delta = _x(2)
    out = activation.forward(z)
    np.testing.assert_array_equal(out, nonlin(z))
    np.testing.assert_array_equal(activation.backward(delta), delta * nonlin_deriv(nonlin(z)))


@pytest.mark.parametrize("name", sorted(NONLINEARITIES))
def test_activation_backward_matches_central_differences(name):
    activation = Activation(name)
    z = _x(1)
    assert np.min(np.abs(z)) > 1e-3, "keep ReLU's kink out of reach of the finite difference"
    R = _x(2)
    activation.forward(z)
    analytic = activation.backward(R)
    numeric = numerical_gradient(lambda: float(np.sum(activation.predict(z) * R)), z)
    error = relative_error(analytic, numeric)
    assert error <= 1e-6, f"Activation({name!r}) dL/dz: backward (mine) vs central difference: error {error:.2e}"


def test_activation_has_no_parameters_and_update_does_nothing():
    activation = Activation("tanh")
    activation.forward(_x())
    activation.backward(_x(1))
    activation.update(0.1)
    assert activation.parameters == {} and activation.gradients == {}


def test_activation_backward_before_forward_raises():
    with pytest.raises(ValueError, match=r"backward\(\) needs a forward pass first; call forward\(x\)"):
        Activation("relu").backward(_x())


# --- Sequential ------------------------------------------------------------------------------


def _chain(seed=0):
    """Layer(4→3, identity), tanh, Layer(3→5, identity), with non-zero biases."""
    rng = np.random.default_rng(seed)
    first = Layer(IN, 3, "identity", rng=rng)
    second = Layer(3, OUT, "identity", rng=rng)
    first.bias[:] = rng.standard_normal(3)
    second.bias[:] = rng.standard_normal(OUT)
    return Sequential([first, Activation("tanh"), second])


def test_sequential_forward_applies_the_modules_in_order():
    chain = _chain()
    first, _, second = chain.modules
    x = _x()
    expected = np.tanh(x @ first.weights + first.bias) @ second.weights + second.bias
    np.testing.assert_allclose(chain.forward(x), expected, rtol=1e-14, atol=1e-14)


def test_sequential_backward_runs_the_modules_in_reverse():
    chain = _chain()
    first, _, second = chain.modules
    x = _x()
    delta = _x(1, width=OUT)
    chain.forward(x)
    input_delta = chain.backward(delta)

    hidden = np.tanh(x @ first.weights + first.bias)
    dhidden = delta @ second.weights.T
    dz = dhidden * (1 - hidden**2)
    np.testing.assert_allclose(second.weights_grad, hidden.T @ delta, rtol=1e-13)
    np.testing.assert_allclose(first.weights_grad, x.T @ dz, rtol=1e-13)
    np.testing.assert_allclose(input_delta, dz @ first.weights.T, rtol=1e-13)


def test_sequential_update_steps_every_module_with_parameters():
    chain = _chain()
    chain.forward(_x())
    chain.backward(_x(1, width=OUT))
    before = {name: p.copy() for name, p in chain.parameters.items()}
    gradients = {name: g.copy() for name, g in chain.gradients.items()}
    chain.update(0.1)
    for name, param in chain.parameters.items():
        np.testing.assert_array_equal(param, before[name] - 0.1 * gradients[name], err_msg=name)


def test_sequential_parameters_are_keyed_index_dot_name():
    chain = _chain()
    first, _, second = chain.modules
    parameters = chain.parameters
    assert list(parameters) == ["0.weights", "0.bias", "2.weights", "2.bias"]
    assert parameters["0.weights"] is first.weights and parameters["2.bias"] is second.bias


def test_sequential_gradients_are_keyed_as_the_parameters():
    chain = _chain()
    chain.forward(_x())
    chain.backward(_x(1, width=OUT))
    first, _, second = chain.modules
    gradients = chain.gradients
    assert list(gradients) == list(chain.parameters)
    assert gradients["0.weights"] is first.weights_grad and gradients["2.bias"] is second.bias_grad


def test_sequential_predict_equals_forward_and_remembers_nothing():
    chain = _chain()
    x = _x()
    predicted = chain.predict(x)
    assert all(m.output is None for m in chain.modules)
    np.testing.assert_array_equal(predicted, chain.forward(x))


def test_sequential_takes_its_widths_from_the_first_and_last_layer():
    chain = Sequential([Activation("tanh"), Layer(IN, 3, "identity", seed=0), Layer(3, OUT, "relu", seed=1)])
    assert (chain.input_dim, chain.output_dim) == (IN, OUT)


def test_sequential_input_of_the_wrong_width_raises():
    with pytest.raises(ValueError, match=r"input must have shape \(batch, 4\) \(4 = this layer's input_dim\)"):
        _chain().forward(_x(width=IN + 1))


@pytest.mark.parametrize("modules, message", [
    ([], "Sequential needs at least one module"),
    ([Activation("tanh")], "Sequential needs at least one module with an input_dim"),
], ids=["empty", "no_sized_module"])
def test_sequential_without_a_sized_module_raises(modules, message):
    with pytest.raises(ValueError, match=message):
        Sequential(modules)


# --- dense_block -----------------------------------------------------------------------------


GRADIENT_CASES = [(True, wrt) for wrt in ["0.weights", "1.gamma", "1.beta", "input"]] + [
    (False, wrt) for wrt in ["0.weights", "0.bias", "input"]]


@pytest.mark.parametrize("batchnorm, wrt", GRADIENT_CASES,
                         ids=[f"{'batchnorm' if bn else 'plain'}-{wrt}" for bn, wrt in GRADIENT_CASES])
def test_dense_block_backward_matches_central_differences(batchnorm, wrt):
    block = dense_block(IN, OUT, "relu", batchnorm=batchnorm, seed=0)
    rng = np.random.default_rng(1)
    for name, param in block.parameters.items():  # move gamma, beta and the bias off their defaults
        if name != "0.weights":
            param[:] = rng.uniform(0.5, 1.5, param.shape) if name == "1.gamma" else rng.standard_normal(param.shape)
    x = _x(2)
    assert np.min(np.abs(_pre_activation(block, x))) > 1e-3, "keep ReLU's kink out of reach of the difference"
    R = _x(3, width=OUT)

    def loss():  # L = sum(h * R), so dL/dh = R
        return float(np.sum(block.forward(x) * R))

    block.forward(x)
    input_delta = block.backward(R)
    analytic = input_delta if wrt == "input" else block.gradients[wrt]
    numeric = numerical_gradient(loss, x if wrt == "input" else block.parameters[wrt])

    error = relative_error(analytic, numeric)
    assert error <= 1e-6, f"dense_block(batchnorm={batchnorm}), dL/d{wrt}: backward (mine) vs central difference: " \
                          f"error {error:.2e}"


def test_dense_block_with_batchnorm_is_linear_without_bias_then_batchnorm_then_nonlinearity():
    block = dense_block(IN, OUT, "relu", batchnorm=True, seed=0)
    linear, norm, activation = block.modules
    assert isinstance(linear, Layer) and linear.bias is None and linear.nonlin is NONLINEARITIES["identity"][0]
    assert isinstance(norm, BatchNorm) and norm.input_dim == OUT
    assert isinstance(activation, Activation) and activation.nonlin is NONLINEARITIES["relu"][0]
    assert list(block.parameters) == ["0.weights", "1.gamma", "1.beta"]


def test_relu_after_batchnorm_reuses_the_norms_output_and_leaves_every_kept_array_alone():
    # Sequential lets the ReLU overwrite batch norm's fresh output in place; nothing the modules keep may change.
    block = dense_block(IN, OUT, "relu", batchnorm=True, seed=0)
    linear, norm, activation = block.modules
    x = _x()
    x_before = x.copy()
    out = block.forward(x)
    z = x @ linear.weights
    normed = (z - z.mean(axis=0)) / np.sqrt(z.var(axis=0) + norm.eps) * norm.gamma + norm.beta
    np.testing.assert_allclose(out, np.maximum(normed, 0), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(linear.output, z)  # the linear layer's kept output is untouched
    assert activation.output is out and (out >= 0).all()
    assert out.min() == 0.0 and np.sum(out == 0) < out.size  # some units cut, some passed


def test_dense_block_without_batchnorm_is_linear_with_bias_then_nonlinearity():
    block = dense_block(IN, OUT, "tanh", batchnorm=False, seed=0)
    assert list(block.parameters) == ["0.weights", "0.bias"]
    x = _x()
    linear = block.modules[0]
    np.testing.assert_allclose(block.forward(x), np.tanh(x @ linear.weights + linear.bias), rtol=1e-14)


def test_dense_block_train_and_eval_reach_the_batchnorm_inside():
    block = dense_block(IN, OUT, seed=0)
    norm = block.modules[1]
    assert block.eval() is block and not norm.training
    block.forward(_x())
    np.testing.assert_array_equal(norm.running_mean, np.zeros(OUT))
    assert block.train() is block and norm.training
    block.forward(_x())
    assert np.all(norm.running_mean != 0)


def test_dense_block_same_seed_gives_the_same_weights():
    a = dense_block(IN, OUT, seed=7).parameters["0.weights"]
    b = dense_block(IN, OUT, seed=7).parameters["0.weights"]
    c = dense_block(IN, OUT, seed=8).parameters["0.weights"]
    np.testing.assert_array_equal(a, b)
    assert np.all(a != c)


def test_dense_block_float32_in_gives_float32_out():
    block = dense_block(IN, OUT, seed=0, dtype=np.float32)
    out = block.forward(_x().astype(np.float32))
    assert out.dtype == np.float32
    assert block.backward(np.ones_like(out)).dtype == np.float32


# --- DNIBlock --------------------------------------------------------------------------------


def _dni_block(condition_dim=0, init="blog", alpha=0.1, generator_alpha=None):
    block = dense_block(IN, OUT, "relu", batchnorm=True, seed=0)
    generator = LinearGenerator(OUT, condition_dim, init=init, seed=1)
    generator.bias[:] = np.random.default_rng(2).standard_normal(OUT)
    return DNIBlock(block, generator, alpha, generator_alpha=generator_alpha)


def _condition(seed=4, rows=BATCH, width=CONDITION):
    return np.random.default_rng(seed).standard_normal((rows, width))


def _reference_step(dni, x, condition=None):
    """What one synthetic step must do, on a deep copy: ĝ from the block's output, backward, one SGD step."""
    block = copy.deepcopy(dni.block)
    before = {name: p.copy() for name, p in block.parameters.items()}
    output = block.forward(x)
    synthetic_gradient = dni.generator.predict(output, condition)
    input_delta = block.backward(synthetic_gradient)
    gradients = {name: g.copy() for name, g in block.gradients.items()}
    block.update(dni.alpha)
    return block, before, gradients, synthetic_gradient, input_delta, output


def test_synthetic_update_moves_every_block_parameter_by_one_descent_step_on_the_synthetic_gradient():
    dni = _dni_block()
    x = _x()
    reference, before, gradients, synthetic_gradient, _, _ = _reference_step(dni, x)
    assert np.all(synthetic_gradient != 0), "the test needs a non-zero ĝ"

    dni.forward_and_synthetic_update(x)

    for name, param in dni.parameters.items():
        np.testing.assert_array_equal(param, reference.parameters[name], err_msg=name)
        np.testing.assert_array_equal(param, before[name] - 0.1 * gradients[name], err_msg=name)
        assert np.any(param != before[name]), f"{name} did not move"


def test_synthetic_update_returns_the_input_delta_of_the_pre_update_parameters():
    dni = _dni_block()
    x = _x()
    _, _, _, synthetic_gradient, expected_delta, expected_output = _reference_step(dni, x)

    input_delta, output = dni.forward_and_synthetic_update(x)

    np.testing.assert_array_equal(output, expected_output)
    np.testing.assert_array_equal(input_delta, expected_delta)
    after = copy.deepcopy(dni.block)
    after.forward(x)
    assert relative_error(input_delta, after.backward(synthetic_gradient)) > 1e-3, \
        "the input delta must not come from the updated parameters"


def test_synthetic_update_keeps_the_synthetic_gradient():
    dni = _dni_block()
    x = _x()
    _, _, _, synthetic_gradient, _, _ = _reference_step(dni, x)
    dni.forward_and_synthetic_update(x)
    np.testing.assert_array_equal(dni.synthetic_gradient, synthetic_gradient)


def test_synthetic_update_leaves_the_generator_alone():
    dni = _dni_block()
    weights_before = dni.generator.weights.copy()
    dni.forward_and_synthetic_update(_x())
    np.testing.assert_array_equal(dni.generator.weights, weights_before)


def test_zero_generator_moves_nothing():
    dni = _dni_block(init="zeros")
    dni.generator.bias[:] = 0.0
    before = {name: p.copy() for name, p in dni.parameters.items()}
    input_delta, _ = dni.forward_and_synthetic_update(_x())
    np.testing.assert_array_equal(input_delta, np.zeros((BATCH, IN)))
    for name, param in dni.parameters.items():
        np.testing.assert_array_equal(param, before[name], err_msg=name)


def test_conditioned_block_passes_the_condition_to_the_generator():
    dni = _dni_block(condition_dim=CONDITION)
    x, c = _x(), _condition()
    _, _, _, synthetic_gradient, expected_delta, _ = _reference_step(dni, x, c)
    input_delta, _ = dni.forward_and_synthetic_update(x, c)
    np.testing.assert_array_equal(dni.synthetic_gradient, synthetic_gradient)
    np.testing.assert_array_equal(input_delta, expected_delta)


def _nan_condition():
    c = _condition()
    c[2, 1] = np.nan
    return c


BAD_CONDITIONS = [
    pytest.param(CONDITION, None, r"this DNI is conditioned \(condition_dim=3\): pass condition=c", id="missing"),
    pytest.param(CONDITION, _condition(width=2), r"condition must have shape \(batch, 3\).*got shape \(6, 2\)",
                 id="wrong_width"),
    pytest.param(CONDITION, _condition(rows=BATCH - 1), "the input has 6 rows, the condition has 5",
                 id="wrong_row_count"),
    pytest.param(CONDITION, _nan_condition(), r"condition holds NaN or inf \(first in row 2\)", id="nan"),
    pytest.param(0, _condition(), r"this DNI is unconditioned \(condition_dim=0\) but a condition was given",
                 id="unexpected"),
]


@pytest.mark.parametrize("condition_dim, condition, message", BAD_CONDITIONS)
def test_bad_condition_raises_before_anything_changes(condition_dim, condition, message):
    dni = _dni_block(condition_dim=condition_dim)
    norm = dni.block.modules[1]
    dni.forward_and_synthetic_update(_x(5), _condition(6) if condition_dim else None)  # a first, good step
    before = {name: p.copy() for name, p in dni.parameters.items()}
    running = norm.running_mean.copy(), norm.running_var.copy()
    generator_before = dni.generator.weights.copy(), dni.generator.input.copy()
    synthetic_gradient = dni.synthetic_gradient.copy()

    with pytest.raises(ValueError, match=message):
        dni.forward_and_synthetic_update(_x(), condition)

    for name, param in dni.parameters.items():
        np.testing.assert_array_equal(param, before[name], err_msg=name)
    np.testing.assert_array_equal(norm.running_mean, running[0])
    np.testing.assert_array_equal(norm.running_var, running[1])
    np.testing.assert_array_equal(dni.generator.weights, generator_before[0])
    np.testing.assert_array_equal(dni.generator.input, generator_before[1])
    np.testing.assert_array_equal(dni.synthetic_gradient, synthetic_gradient)


def test_input_of_the_wrong_width_raises_before_anything_changes():
    dni = _dni_block()
    norm = dni.block.modules[1]
    before = {name: p.copy() for name, p in dni.parameters.items()}
    with pytest.raises(ValueError, match=r"input must have shape \(batch, 4\).*got shape \(6, 5\)"):
        dni.forward_and_synthetic_update(_x(width=IN + 1))
    for name, param in dni.parameters.items():
        np.testing.assert_array_equal(param, before[name], err_msg=name)
    np.testing.assert_array_equal(norm.running_mean, np.zeros(OUT))


def test_update_synthetic_weights_takes_one_generator_step_towards_the_target():
    dni = _dni_block(generator_alpha=0.05)
    x = _x()
    target = _x(7, width=OUT)
    dni.forward_and_synthetic_update(x)
    reference = copy.deepcopy(dni.generator)
    weights_before = dni.generator.weights.copy()

    loss = dni.update_synthetic_weights(target)

    assert loss == reference.update(target, 0.05)
    np.testing.assert_array_equal(dni.generator.weights, reference.weights)
    np.testing.assert_array_equal(dni.generator.bias, reference.bias)
    np.testing.assert_array_equal(dni.generator.weights, weights_before - 0.05 * reference.weights_grad)


def test_update_synthetic_weights_with_a_target_of_another_shape_raises():
    dni = _dni_block()
    dni.forward_and_synthetic_update(_x())
    weights_before = dni.generator.weights.copy()
    with pytest.raises(ValueError, match=r"target must have the shape of the last synthetic gradient, \(6, 5\)"):
        dni.update_synthetic_weights(np.zeros((BATCH - 1, OUT)))
    np.testing.assert_array_equal(dni.generator.weights, weights_before)


def test_update_synthetic_weights_before_a_step_raises():
    with pytest.raises(ValueError, match=r"call forward_and_synthetic_update\(input\) first"):
        _dni_block().update_synthetic_weights(np.zeros((BATCH, OUT)))


def test_dni_block_train_and_eval_reach_the_batchnorm_inside():
    dni = _dni_block()
    assert dni.eval() is dni and not dni.block.modules[1].training
    assert dni.train() is dni and dni.block.modules[1].training


def test_generator_of_another_width_raises():
    with pytest.raises(ValueError, match=r"generator.output_dim must equal the layer's output_dim, 5; got 4"):
        DNIBlock(dense_block(IN, OUT, seed=0), LinearGenerator(OUT - 1), 0.1)


def test_a_block_refuses_backward_after_update_and_checks_only_its_top_delta():
    block = dense_block(4, 3, seed=0)
    x = np.random.default_rng(0).random((5, 4))
    with pytest.raises(ValueError, match="needs a forward pass first"):
        block.backward(np.ones((5, 3)))
    block.forward(x)
    with pytest.raises(ValueError, match="output_delta"):
        block.backward(np.ones((5, 2)))  # the top module still checks what comes in
    block.backward(np.ones((5, 3)))
    block.update(0.1)
    with pytest.raises(ValueError, match="after update"):
        block.backward(np.ones((5, 3)))
    block.forward(x)
    assert block.backward(np.ones((5, 3)), input_delta=False) is None
