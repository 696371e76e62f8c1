"""Blocks (sgrad/nn/blocks.py): Activation, Sequential and dense_block, the paper's Linear→BatchNorm→nonlinearity.

DNIBlock, a block decoupled by a generator, is specified in test_dni.py; the module tree that train/eval and
the batch-size rule walk, in test_module.py; bad arguments shared by the whole public API, in test_bad_input.py.
"""

import numpy as np
import pytest
from conftest import (assert_backward_matches_central_differences, assert_dtype, assert_tree_dtype, normal,
                      random_input_and_delta)
from hypothesis import assume, given
from strategies import booleans, dtypes, nonlinearities, seeds, training_batches, update_rules, widths

from sgrad import Layer
from sgrad.nn.batchnorm import BatchNorm
from sgrad.nn.blocks import Activation, Sequential, dense_block
from sgrad.nn.nonlinearities import NONLINEARITIES

BATCH, IN, OUT = 6, 4, 5


def _x(seed=0, rows=BATCH, width=IN):
    return np.random.default_rng(seed).standard_normal((rows, width))


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
    z = _x(1)
    assert np.min(np.abs(z)) > 1e-3, "keep ReLU's kink out of reach of the finite difference"
    assert_backward_matches_central_differences(Activation(name), z, _x(2), f"Activation({name!r})")


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


def test_sequential_without_a_sized_module_raises():
    with pytest.raises(ValueError, match="Sequential needs at least one module with an input_dim"):
        Sequential([Activation("tanh")])


# --- dense_block -----------------------------------------------------------------------------


@given(batch=training_batches, input_dim=widths, output_dim=widths, nonlin=nonlinearities, batchnorm=booleans,
       seed=seeds)
def test_dense_block_backward_matches_central_differences(batch, input_dim, output_dim, nonlin, batchnorm, seed):
    rng = np.random.default_rng(seed)
    block = dense_block(input_dim, output_dim, nonlin, batchnorm=batchnorm, rng=rng)
    x, R = random_input_and_delta(block, rng, batch)
    if batchnorm:
        assume(np.min(block.modules[0].predict(x).var(axis=0)) > 1e-3)
    assert_backward_matches_central_differences(block, x, R, f"{block!r}, batch {batch}")


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


def test_dense_block_same_seed_gives_the_same_weights():
    a = dense_block(IN, OUT, seed=7).parameters["0.weights"]
    b = dense_block(IN, OUT, seed=7).parameters["0.weights"]
    c = dense_block(IN, OUT, seed=8).parameters["0.weights"]
    np.testing.assert_array_equal(a, b)
    assert np.all(a != c)


@given(dtype=dtypes, batch=training_batches, input_dim=widths, output_dim=widths, nonlin=nonlinearities,
       batchnorm=booleans, rule=update_rules, seed=seeds)
def test_dense_block_keeps_its_dtype_through_a_training_step(dtype, batch, input_dim, output_dim, nonlin, batchnorm,
                                                             rule, seed):
    rng = np.random.default_rng(seed)
    block = dense_block(input_dim, output_dim, nonlin, batchnorm=batchnorm, update_rule=rule, rng=rng, dtype=dtype)
    x = normal(rng, batch, input_dim, dtype=dtype)
    output = block.forward(x)
    input_delta = block.backward(normal(rng, batch, output_dim, dtype=dtype))
    assert_dtype(dtype, output=output, input_delta=input_delta, prediction=block.predict(x),
                 **{f"gradient of {k}": g for k, g in block.gradients.items()})
    block.update(0.1)
    assert_tree_dtype(dtype, block, "dense_block")



# --- Sequential: what one module hands the next is not scanned for NaN and inf again ---------------------------


def _two_layers(seed=0):
    return Sequential([Layer(IN, 3, "tanh", seed=seed), Layer(3, OUT, "identity", seed=seed + 1)])


@pytest.mark.parametrize("where", ["forward", "predict", "backward"])
def test_sequential_refuses_nan_where_it_comes_in_and_its_modules_check_again_when_called_alone(where):
    """The first module checks the input, the last the output delta, as ever; after the Sequential's call, and
    after a call that raised, a module called alone scans its input again."""
    net = _two_layers()
    bad = _x(3)
    bad[2, 1] = np.nan
    if where == "backward":
        net.forward(_x(3))
        bad = np.full((BATCH, OUT), np.inf)
        call, name = (lambda: net.backward(bad)), "output_delta"
    else:
        call, name = (lambda: getattr(net, where)(bad)), "input"
    with pytest.raises(ValueError, match=f"{name} holds NaN or inf"):
        call()
    net.forward(_x(3))
    net.backward(np.ones((BATCH, OUT)))
    with pytest.raises(ValueError, match="input holds NaN or inf \\(first in row 2\\)"):
        net.modules[1].forward(np.where(np.arange(BATCH)[:, None] == 2, np.nan, np.ones((BATCH, 3))))


def test_a_number_made_non_finite_inside_a_sequential_is_numpys_to_report():
    """Inside, the second module does not scan its input: an overflow in the first is reported by NumPy where
    it happens (the training loop makes every step raise), and the step stops there."""
    first = Layer(IN, 3, "identity", seed=0)
    first.weights[...] = 1e308
    net = Sequential([first, Layer(3, OUT, "identity", seed=1)])
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
        net.forward(np.full((BATCH, IN), 10.0))


def test_handed_on_ends_with_its_block_even_when_the_block_raises():
    """argument_checks.handed_on is on within, off after, also after an exception; nested, the outer stays on."""
    from sgrad import argument_checks
    nan_rows = np.full((2, 3), np.nan)
    with argument_checks.handed_on():
        assert argument_checks.check_batch(nan_rows, "h", 3) is nan_rows  # no scan within
        with argument_checks.handed_on():
            pass
        assert argument_checks.check_batch(nan_rows, "h", 3) is nan_rows  # the inner end leaves the outer on
    with pytest.raises(RuntimeError, match="inside"), argument_checks.handed_on():
        raise RuntimeError("inside")
    with pytest.raises(ValueError, match="h holds NaN or inf"):
        argument_checks.check_batch(nan_rows, "h", 3)
    with argument_checks.handed_on(), pytest.raises(ValueError, match="h must have shape \\(batch, 3\\)"):
        argument_checks.check_batch(np.ones((2, 4)), "h", 3)  # widths still checked within


# --- DNIBlock --------------------------------------------------------------------------------


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
