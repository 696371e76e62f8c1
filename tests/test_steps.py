"""The training steps (sgrad.steps): true gradients, true-gradient targets, and backprop's step as public calls."""

import numpy as np
import pytest

import sgrad
from data_gen import generate_split
from sgrad.experiments.binary_addition import TrainConfig, build_network
from sgrad.losses import bce_with_logits, mse, softmax_cross_entropy
from sgrad.steps import backprop_step, dni_step, true_gradients

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
