"""The training steps of a stack (sgrad.dni.steps): true gradients, targets bootstrapped or given, oracle generators that
make DNI backprop, and each step as the layers' public calls.  (Recurrent layers' truncated BPTT: test_tbptt.py.)"""


import numpy as np
import pytest
from conftest import RecordingGenerator, assert_same_state, random_batch, tree_state

import sgrad
from data_gen import generate_split
from sgrad import DNI, DNIBlock, Layer, LinearGenerator, SyntheticLossGenerator, dense_block
from sgrad.dni.steps import (backprop_step, dni_step, forward_all, synthetic_loss_step, true_gradients,
                             true_gradients_at_outputs)
from sgrad.experiments.binary_addition import TrainConfig, build_network
from sgrad.nn.kernels import dense_backward, dense_forward
from sgrad.nn.losses import bce_with_logits, mse, softmax_cross_entropy

SMALL = TrainConfig(batch_size=16, alpha=0.01, generator_alpha=0.01, hidden=(32, 32), seed=0)


@pytest.fixture(scope="module")
def batch():
    x, y, _, _ = generate_split(5, 200, 50, seed=0)
    return x[:16], y[:16]


def test_true_gradients_match_the_layers_own_backprop(batch):
    x, y = batch
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


def test_forward_all_and_true_gradients_check_x_as_a_layers_forward_does(batch):
    x, y = batch
    layers = build_network("backprop", 10, 5, SMALL)
    wrong = np.hstack([x, x])
    message = r"x must have shape \(batch, 10\) \(10 = the first layer's input_dim\); got shape \(16, 20\)"
    with pytest.raises(ValueError, match=message):
        forward_all(layers, wrong)
    with pytest.raises(ValueError, match=message):
        true_gradients(layers, wrong, y, bce_with_logits)
    with pytest.raises(ValueError, match="x holds NaN or inf"):
        forward_all(layers, np.where(x == x.max(), np.nan, x))


def test_true_gradients_at_outputs_agree_with_the_dense_layers_own_on_a_dense_stack(batch):
    x, y = batch
    layers = build_network("dni", 10, 5, SMALL)
    for ours, reference in zip(true_gradients_at_outputs(layers, x, y, bce_with_logits),
                               true_gradients(layers, x, y, bce_with_logits)):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-7)


def test_true_gradients_at_outputs_match_central_differences_through_batch_norm_and_change_nothing():
    rng = np.random.default_rng(0)
    # As `sgrad paper --interface-position before` builds it: each block ends at its batch norm, so that no h_k
    # sits on a ReLU's kink, where a central difference is not a derivative.
    stack = [sgrad.Sequential([sgrad.Layer(6, 5, "identity", bias=False, seed=0), sgrad.BatchNorm(5)]),
             DNIBlock(sgrad.Sequential([sgrad.Activation("relu"), sgrad.Layer(5, 4, "identity", bias=False, seed=1),
                                        sgrad.BatchNorm(4)]), LinearGenerator(4), 0.01),
             sgrad.Sequential([sgrad.Activation("relu"), sgrad.Layer(4, 3, "identity", seed=2), sgrad.BatchNorm(3)])]
    x, y = rng.standard_normal((8, 6)), np.eye(3)[rng.integers(0, 3, 8)]
    before = [tree_state(module) for module in stack]
    grads = true_gradients_at_outputs(stack, x, y, softmax_cross_entropy)
    for module, state in zip(stack, before):
        assert_same_state(module, state)
    hs = [x]
    for module in stack:
        hs.append(module.predict(hs[-1]))  # training mode: batch norm normalises with the batch's statistics

    def loss_from(k, h):
        for module in stack[k:]:
            h = module.predict(h)
        return softmax_cross_entropy(h, y)[0]

    for k, g in enumerate(grads, start=1):
        numeric = np.zeros_like(g)
        for index in np.ndindex(g.shape):
            up, down = hs[k].copy(), hs[k].copy()
            up[index] += 1e-6
            down[index] -= 1e-6
            numeric[index] = (loss_from(k, up) - loss_from(k, down)) / 2e-6
        np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-9, err_msg=f"dL/dh_{k}")


def test_dni_step_trains_each_generator_on_the_targets_given(batch):
    x, y = batch
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


def test_backprop_step_explains_a_stack_whose_widths_do_not_fit():
    rng = np.random.default_rng(0)
    stack = [sgrad.Layer(4, 6, "tanh", seed=0), sgrad.Layer(5, 2, "identity", seed=1)]
    with pytest.raises(ValueError, match=r"input must have shape \(batch, 5\) \(5 = this layer's input_dim\)"):
        backprop_step(stack, rng.random((8, 4)), rng.random((8, 2)), mse, 0.1)


def test_backprop_step_refuses_one_row_for_batch_norm_above_the_bottom_layer():
    rng = np.random.default_rng(0)
    stack = [sgrad.Layer(4, 6, "tanh", seed=0), sgrad.dense_block(6, 5, seed=1), sgrad.Layer(5, 2, "identity", seed=2)]
    weights = stack[0].weights.copy()
    with pytest.raises(ValueError, match="needs a batch of at least 2 rows"):
        backprop_step(stack, rng.random((1, 4)), rng.random((1, 2)), mse, 0.1)
    np.testing.assert_array_equal(stack[0].weights, weights)


def test_backprop_step_equals_each_layers_public_forward_backward_and_update():
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        return [sgrad.dense_block(4, 6, seed=0), sgrad.dense_block(6, 5, batchnorm=False, seed=1),
                sgrad.Layer(5, 3, "identity", seed=2)]

    stepped, by_hand = stack(), stack()
    loss = backprop_step(stepped, x, y, softmax_cross_entropy, 0.1)
    h = x
    for layer in by_hand:
        h = layer.forward(h)
    expected, delta = softmax_cross_entropy(h, y)
    for k in (2, 1, 0):
        delta = by_hand[k].backward(delta, input_delta=k > 0)
        by_hand[k].update(0.1)
    assert loss == expected
    for a, b in zip(stepped, by_hand):
        for name in a.parameters:
            np.testing.assert_array_equal(a.parameters[name], b.parameters[name], err_msg=name)


class OracleGenerator:
    """A test-side generator whose ĝ is the true dL/dh, computed through the layers above."""

    condition_dim = 0

    def __init__(self, output_dim, upper_layers, loss_fn):
        self.output_dim = output_dim
        self.upper_layers = upper_layers
        self.loss_fn = loss_fn
        self.y = None

    def predict(self, h, condition=None):
        hs = [h]
        for layer in self.upper_layers:
            hs.append(dense_forward(hs[-1], layer.weights, layer.bias, layer.nonlin))
        _, g = self.loss_fn(hs[-1], self.y)
        for k in range(len(self.upper_layers) - 1, -1, -1):
            layer = self.upper_layers[k]
            g, _, _, _ = dense_backward(g, hs[k], hs[k + 1], layer.weights, layer.nonlin_deriv, True)
        return g

    forward = predict

    def update(self, target, alpha):
        return 0.0


# --- stacks of DNI layers (sgrad.dni.steps) -------------------------------------------------------


@pytest.mark.parametrize("update_rule", ["sgd", "adam"])
def test_dni_with_oracle_generators_matches_backprop_weights(update_rule):
    """With ĝ_k equal to the true gradient, decoupled updates are exactly backprop's."""
    rng = np.random.default_rng(0)
    x_all = random_batch(rng, 200, 6)
    y_all = np.tanh(x_all @ rng.standard_normal((6, 3)))
    dims, alpha = (6, 10, 8, 3), 0.05 if update_rule == "sgd" else 0.01

    backprop = [Layer(dims[k], dims[k + 1], "tanh" if k < 2 else "identity", update_rule=update_rule, seed=k)
                for k in range(3)]
    top = Layer(dims[2], dims[3], "identity", update_rule=update_rule, seed=2)
    oracle_2 = OracleGenerator(dims[2], [top], mse)
    layer_2 = DNI(dims[1], dims[2], "tanh", alpha=alpha, generator=oracle_2, update_rule=update_rule, seed=1)
    oracle_1 = OracleGenerator(dims[1], [layer_2, top], mse)
    layer_1 = DNI(dims[0], dims[1], "tanh", alpha=alpha, generator=oracle_1, update_rule=update_rule, seed=0)
    decoupled = [layer_1, layer_2, top]

    for step in range(25):
        x, y = x_all[8 * step:8 * step + 8], y_all[8 * step:8 * step + 8]
        oracle_1.y = oracle_2.y = y
        backprop_step(backprop, x, y, mse, alpha)
        dni_step(decoupled, x, y, mse, alpha)

    for ours, reference in zip(decoupled, backprop):
        np.testing.assert_allclose(ours.weights, reference.weights, rtol=0, atol=1e-10)
        np.testing.assert_allclose(ours.bias, reference.bias, rtol=0, atol=1e-10)
    assert np.abs(backprop[0].weights - Layer(6, 10, "tanh", seed=0).weights).max() > 1e-3


def test_each_generator_regresses_onto_what_the_layer_above_returned():
    rng = np.random.default_rng(0)
    dims = (6, 9, 8, 7, 3)
    layers = [DNI(dims[k], dims[k + 1], "tanh", alpha=0.05,
                  generator=RecordingGenerator(dims[k + 1], init="blog", seed=10 + k), seed=k)
              for k in range(3)]
    top = Layer(dims[3], dims[4], "identity", seed=3)
    stack = layers + [top]
    x, y = random_batch(rng, 5, 6), random_batch(rng, 5, 3)

    # Run the step by hand, keeping every returned delta and the top's pre-update weights.
    h, returned = x, []
    for layer in layers:
        delta, h = layer.forward_and_update(h)
        returned.append(delta)
    top_weights = top.weights.copy()
    top_output = top.forward(h)
    _, g = mse(top_output, y)
    true_gradient_at_h3 = g @ top_weights.T
    np.testing.assert_allclose(top.backward(g), true_gradient_at_h3, rtol=1e-13)
    top.update(0.05)
    for layer, target in zip(layers, returned[1:] + [true_gradient_at_h3]):
        layer.update_generator(target)

    for k, layer in enumerate(layers[:-1]):
        np.testing.assert_array_equal(layer.generator.targets[-1], returned[k + 1])
    np.testing.assert_allclose(layers[-1].generator.targets[-1], true_gradient_at_h3, rtol=1e-13)

    # The library's own training step wires the targets the same way.
    stack_targets_before = [len(layer.generator.targets) for layer in layers]
    x2, y2 = random_batch(rng, 5, 6), random_batch(rng, 5, 3)
    h, returned = x2, []
    for layer in layers:
        h_next = dense_forward(h, layer.weights, layer.bias, layer.nonlin)
        g_hat = layer.generator.predict(h_next)
        returned.append(dense_backward(g_hat, h, h_next, layer.weights, layer.nonlin_deriv, True)[0])
        h = h_next
    top_pre = top.weights.copy()
    _, g = mse(dense_forward(h, top_pre, top.bias, top.nonlin), y2)
    dni_step(stack, x2, y2, mse, 0.05)
    assert [len(layer.generator.targets) for layer in layers] == [n + 1 for n in stack_targets_before]
    np.testing.assert_allclose(layers[0].generator.targets[-1], returned[1], rtol=1e-12)
    np.testing.assert_allclose(layers[1].generator.targets[-1], returned[2], rtol=1e-12)
    np.testing.assert_allclose(layers[2].generator.targets[-1], g @ top_pre.T, rtol=1e-12)




def test_dni_step_equals_each_layers_public_calls():
    # dni_step is the layers' public calls in the order of the paper's algorithm, nothing more.
    from sgrad.nn.losses import softmax_cross_entropy

    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        hidden = [DNIBlock(dense_block(4, 6, seed=0), LinearGenerator(6, 3, init="blog", seed=1), 0.1),
                  DNI(6, 5, "relu", condition_dim=3, generator_init="blog", seed=2, alpha=0.1)]
        return hidden + [Layer(5, 3, "identity", seed=3)]

    fast, slow = stack(), stack()
    loss, generator_losses = dni_step(fast, x, y, softmax_cross_entropy, 0.1, condition=y)
    first, h = slow[0].forward_and_update(x, y, input_delta=False)
    second, h = slow[1].forward_and_update(h, y)
    expected, g = softmax_cross_entropy(slow[2].forward(h), y)
    top_delta = slow[2].backward(g)
    slow[2].update(0.1)
    expected_generator_losses = [slow[0].update_generator(second), slow[1].update_generator(top_delta)]
    assert first is None
    assert loss == expected and generator_losses == expected_generator_losses
    for a, b in zip(fast, slow):
        for owner_a, owner_b in ((a, b), (getattr(a, "generator", None), getattr(b, "generator", None))):
            if owner_a is None:
                continue
            for name, param in owner_a.parameters.items():
                np.testing.assert_array_equal(param, owner_b.parameters[name], err_msg=name)
    assert all(set(layer.generator.gradients) == {"weights", "bias"} for layer in fast[:2] + slow[:2])


def test_synthetic_loss_step_equals_each_blocks_public_calls_with_the_labels_for_conditioned_generators():
    # Block 0's generator is conditioned (it is given y), block 1's is not; block 0's ℓ̂ regresses onto
    # block 1's, block 1's onto the real per-example loss; no block computes an input delta.
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        generators = [SyntheticLossGenerator(6, 3, hidden=(5,), initial_loss=np.log(3.0), seed=1),
                      SyntheticLossGenerator(5, hidden=(4,), seed=2)]
        for generator in generators:  # off the zero start, so that every ĝ and update is non-trivial
            output_layer = generator.net.modules[-1]
            output_layer.weights[...] = np.random.default_rng(3).normal(size=output_layer.weights.shape)
        hidden = [DNIBlock(dense_block(4, 6, seed=0), generators[0], 0.1),
                  DNIBlock(dense_block(6, 5, seed=4), generators[1], 0.1)]
        return hidden + [Layer(5, 3, "identity", seed=5)]

    fast, slow = stack(), stack()
    loss, generator_losses = synthetic_loss_step(fast, x, y, 0.1)
    first, h = slow[0].forward_and_update(x, y, input_delta=False)
    second, h = slow[1].forward_and_update(h, input_delta=False)
    per_example, g = softmax_cross_entropy(slow[2].forward(h), y, reduction="none")
    slow[2].backward(g / len(x))
    slow[2].update(0.1)
    expected_generator_losses = [slow[0].update_generator(slow[1].generator.predicted_loss),
                                 slow[1].update_generator(per_example[:, None])]
    assert first is None and second is None
    assert loss == float(per_example.mean()) and generator_losses == expected_generator_losses
    assert np.abs(slow[0].synthetic_gradient).max() > 0 and np.abs(slow[1].synthetic_gradient).max() > 0
    for a, b in zip(fast, slow):
        for owner_a, owner_b in ((a, b), (getattr(a, "generator", None), getattr(b, "generator", None))):
            if owner_a is None:
                continue
            for name, param in owner_a.parameters.items():
                np.testing.assert_array_equal(param, owner_b.parameters[name], err_msg=name)


def test_synthetic_loss_step_refuses_a_block_whose_generator_expects_other_labels_and_changes_nothing():
    # A generator conditioned on 4 classes cannot take 3-class labels: refused before any block moves.
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]
    layers = [DNIBlock(dense_block(4, 6, seed=0), SyntheticLossGenerator(6, 4, hidden=(5,), seed=1), 0.1),
              Layer(6, 3, "identity", seed=2)]
    before = [tree_state(layer) for layer in layers]
    with pytest.raises(ValueError, match="condition"):
        synthetic_loss_step(layers, x, y, 0.1)
    for layer, state in zip(layers, before):
        assert_same_state(layer, state)
