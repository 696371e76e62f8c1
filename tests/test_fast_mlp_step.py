"""sgrad/nn/fast_mlp_step.py's sgd_step against the plain blog-style loop it replaces, on the same layers."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import batches, booleans, dtypes, seeds, widths

from sgrad import Layer
from sgrad.nn.fast_mlp_step import sgd_step
from sgrad.nn.losses import softmax_cross_entropy

NONLINS = ["relu", "tanh", "sigmoid", "identity"]


def stack(widths, nonlins, bias, dtype, seed, update_rule="sgd"):
    return [Layer(fan_in, fan_out, nonlin, bias=bias, init="pytorch", seed=seed + k, dtype=dtype,
                  update_rule=update_rule)
            for k, (fan_in, fan_out, nonlin) in enumerate(zip(widths[:-1], widths[1:], nonlins))]


def plain_step(layers, x, labels, alpha):
    h = x
    for layer in layers:
        h = layer.forward(h)
    loss, delta = softmax_cross_entropy(h, labels)
    for layer in layers[:0:-1]:
        delta = layer.backward(delta)
    layers[0].backward(delta, input_delta=False)
    for layer in layers:
        layer.update(alpha)
    return loss


@given(dtype=dtypes, batch=batches, hidden=st.lists(widths, min_size=0, max_size=3),
       nonlins=st.lists(st.sampled_from(NONLINS), min_size=4, max_size=4), bias=booleans, seed=seeds)
def test_sgd_step_is_the_plain_loop(dtype, batch, hidden, nonlins, bias, seed):
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, 6)), *hidden, int(rng.integers(2, 5))]
    kinds = nonlins[:len(sizes) - 2] + ["identity"]
    plain, fast = stack(sizes, kinds, bias, dtype, seed), stack(sizes, kinds, bias, dtype, seed)
    eps = np.finfo(dtype).eps
    for _ in range(3):
        x = rng.standard_normal((batch, sizes[0])).astype(dtype)
        labels = rng.integers(0, sizes[-1], batch)
        x_before = x.copy()
        loss_plain, loss_fast = plain_step(plain, x, labels, 0.5), sgd_step(fast, x, labels, 0.5)
        np.testing.assert_array_equal(x, x_before)  # the data is never written
        assert abs(loss_fast - loss_plain) <= 64 * eps * max(1.0, abs(loss_plain))
        for ours, theirs in zip(fast, plain):
            for name in ("weights", "bias", "output", "weight_output_delta"):
                mine, reference = getattr(ours, name), getattr(theirs, name)
                if reference is None:
                    assert mine is None, name
                    continue
                assert mine.dtype == reference.dtype and mine.shape == reference.shape, name
                # The bias gradient is summed in another order (the BLAS); everything downstream rounds apart.
                np.testing.assert_allclose(mine, reference, rtol=1e3 * eps, atol=1e3 * eps, err_msg=name)
            assert ours.weights_grad is None and ours.bias_grad is None
            assert ours.input is not None
        assert fast[0].input is x


def test_sgd_step_on_paper_widths_tracks_the_plain_loop_for_many_steps():
    rng = np.random.default_rng(0)
    plain = stack([784, 256, 256, 10], ["relu", "relu", "identity"], True, np.float32, 0)
    fast = stack([784, 256, 256, 10], ["relu", "relu", "identity"], True, np.float32, 0)
    losses = []
    x = rng.standard_normal((64, 784)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    for _ in range(40):
        losses.append((plain_step(plain, x, labels, 0.2), sgd_step(fast, x, labels, 0.2)))
    losses = np.array(losses)
    assert losses[-1, 1] < 0.2 * losses[0, 1]  # it learns the batch
    np.testing.assert_allclose(losses[:, 1], losses[:, 0], rtol=1e-4)
    # The two round apart; where a unit's z lies within that rounding of 0, it can be on for an example in one loop
    # and off in the other, and from then on a weight can differ by that example's share of a step's gradient,
    # alpha |h| |dz| / batch, where a wrong update would differ by whole steps.
    for ours, theirs in zip(fast, plain):
        np.testing.assert_allclose(ours.weights, theirs.weights, rtol=1e-4, atol=1e-4)


def test_a_plain_step_can_follow_a_fast_one():
    rng = np.random.default_rng(1)
    layers = stack([5, 4, 3], ["tanh", "identity"], True, np.float64, 0)
    x, labels = rng.standard_normal((6, 5)), rng.integers(0, 3, 6)
    sgd_step(layers, x, labels, 0.1)
    with pytest.raises(ValueError, match="forward"):  # the layers are stale, as after the plain loop's update
        layers[0].backward(np.zeros((6, 4)))
    plain_step(layers, x, labels, 0.1)


def bad_calls():
    rng = np.random.default_rng(2)
    x, labels = rng.standard_normal((4, 5)), rng.integers(0, 3, 4)
    good = stack([5, 4, 3], ["relu", "identity"], True, np.float64, 0)
    adam = stack([5, 4, 3], ["relu", "identity"], True, np.float64, 0, update_rule="adam")
    broken = stack([5, 4, 3], ["relu", "identity"], True, np.float64, 0)
    broken[1] = Layer(2, 3, "identity", seed=0)
    mixed = [good[0], Layer(4, 3, "identity", seed=0, dtype=np.float32)]
    return [
        ("adam", adam, x, labels, 0.1, ValueError, "plain SGD"),
        ("no chain", broken, x, labels, 0.1, ValueError, "do not chain"),
        ("dtypes", mixed, x, labels, 0.1, TypeError, "one dtype"),
        ("x width", good, x[:, :4], labels, 0.1, ValueError, r"\(batch, 5\)"),
        ("x dtype", good, x.astype(np.float32), labels, 0.1, TypeError, "dtype float64"),
        ("x nan", good, np.where(x > 1, np.nan, x), labels, 0.1, ValueError, "NaN"),
        ("labels range", good, x, labels + 3, 0.1, ValueError, r"\[0, 2\]"),
        ("labels float", good, x, labels.astype(float), 0.1, TypeError, "integers"),
        ("labels count", good, x, labels[:3], 0.1, ValueError, "one class per row"),
        ("alpha", good, x, labels, -1.0, ValueError, "learning rate"),
        ("not layers", [object()], x, labels, 0.1, TypeError, "Layer objects"),
        ("empty", [], x, labels, 0.1, TypeError, "non-empty"),
    ]


@pytest.mark.parametrize("case", bad_calls(), ids=lambda case: case[0])
def test_bad_input_is_refused_before_any_layer_changes(case):
    _, layers, x, labels, alpha, error, message = case
    before = [(layer.weights.copy(), layer.input) for layer in layers if isinstance(layer, Layer)]
    with pytest.raises(error, match=message):
        sgd_step(layers, x, labels, alpha)
    for (weights, input), layer in zip(before, [layer for layer in layers if isinstance(layer, Layer)]):
        np.testing.assert_array_equal(layer.weights, weights)
        assert layer.input is input


def test_sgd_step_steps_weights_and_biases_that_are_views_in_place():
    """A layer whose weights and bias are views into larger arrays (neither C- nor F-contiguous, so the product is
    added the NumPy way) steps them where they are, as the plain loop does."""
    rng = np.random.default_rng(3)
    plain = stack([5, 4, 3], ["relu", "identity"], True, np.float64, 0)
    fast = stack([5, 4, 3], ["relu", "identity"], True, np.float64, 0)
    bases = []
    for layer in fast:
        wide_weights = np.zeros((layer.weights.shape[0], 2 * layer.weights.shape[1]))
        wide_weights[:, ::2] = layer.weights
        wide_bias = np.zeros(2 * layer.bias.shape[0])
        wide_bias[::2] = layer.bias
        layer.weights, layer.bias = wide_weights[:, ::2], wide_bias[::2]
        bases.append((wide_weights, wide_bias))
    x, labels = rng.standard_normal((6, 5)), rng.integers(0, 3, 6)
    plain_step(plain, x, labels, 0.5)
    sgd_step(fast, x, labels, 0.5)
    for theirs, (wide_weights, wide_bias) in zip(plain, bases):
        np.testing.assert_allclose(wide_weights[:, ::2], theirs.weights, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(wide_bias[::2], theirs.bias, rtol=1e-12, atol=1e-12)
        assert not wide_weights[:, 1::2].any() and not wide_bias[1::2].any()  # nothing written between them
