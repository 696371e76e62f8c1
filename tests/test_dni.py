"""DNI: descent on ĝ, pre-update deltas, bootstrapped targets, conditioning, and oracle equivalence to backprop."""

import numpy as np
import pytest

from sgrad import DNI, Layer, LinearGenerator
from sgrad.kernels import dense_backward, dense_forward
from sgrad.losses import mse
from sgrad.steps import backprop_step, dni_step


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


class RecordingGenerator(LinearGenerator):
    """A LinearGenerator that remembers every condition and target it was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conditions = []
        self.targets = []

    def forward(self, h, condition=None):
        self.conditions.append(condition)
        return super().forward(h, condition)

    def update(self, target, alpha):
        self.targets.append(target.copy())
        return super().update(target, alpha)


def random_batch(rng, batch, width):
    return rng.standard_normal((batch, width))


def test_dni_weight_update_descends_on_the_synthetic_gradient():
    rng = np.random.default_rng(0)
    layer = DNI(5, 4, "tanh", alpha=0.01, generator_init="blog", seed=1)
    x = random_batch(rng, 6, 5)
    before = layer.weights.copy()
    layer.forward_and_synthetic_update(x)
    g_hat = layer.synthetic_gradient
    expected_step = x.T @ (g_hat * (1 - layer.output**2))
    np.testing.assert_allclose(layer.weights, before - 0.01 * expected_step, rtol=0, atol=1e-15)


def test_dni_update_lowers_the_linearised_loss_and_the_blogs_sign_raises_it():
    # To first order the layer minimises <ĝ, h(W)>; descent lowers it, the blog's `+=` raises it.
    rng = np.random.default_rng(0)
    x = random_batch(rng, 8, 5)
    layer = DNI(5, 4, "sigmoid", alpha=1e-3, generator_init="blog", seed=2)
    w0 = layer.weights.copy()
    layer.forward_and_synthetic_update(x)
    g_hat = layer.synthetic_gradient

    def surrogate(weights):
        return float(np.sum(g_hat * dense_forward(x, weights, layer.bias, layer.nonlin)))

    blog_weights = w0 + (layer.weights - w0) * -1  # the blog's weights += input.T.dot(delta) * alpha
    assert surrogate(layer.weights) < surrogate(w0) - 1e-6
    assert surrogate(blog_weights) > surrogate(w0) + 1e-6


def test_generator_update_lowers_its_loss_and_the_blogs_sign_raises_it():
    rng = np.random.default_rng(0)
    x = random_batch(rng, 8, 5)
    target = random_batch(rng, 8, 4)
    layer = DNI(5, 4, "tanh", alpha=1e-12, generator_alpha=0.05, generator_init="blog", seed=3)
    layer.forward_and_synthetic_update(x)
    generator = layer.generator
    w0, b0 = generator.weights.copy(), generator.bias.copy()

    def regression_loss(weights, bias):
        return 0.5 * np.sum((layer.output @ weights + bias - target) ** 2) / len(x)

    first = layer.update_synthetic_weights(target)
    assert first == pytest.approx(regression_loss(w0, b0), rel=1e-12)
    after = regression_loss(generator.weights, generator.bias)
    blog = regression_loss(2 * w0 - generator.weights, 2 * b0 - generator.bias)
    assert after < first
    assert blog > first


def test_input_delta_uses_the_weights_from_before_the_update():
    rng = np.random.default_rng(0)
    x = random_batch(rng, 6, 5)
    layer = DNI(5, 4, "tanh", alpha=0.5, generator_init="blog", seed=4)
    before = layer.weights.copy()
    input_delta, output = layer.forward_and_synthetic_update(x)
    dz = layer.synthetic_gradient * (1 - output**2)
    np.testing.assert_allclose(input_delta, dz @ before.T, rtol=1e-13, atol=0)
    assert np.abs(input_delta - dz @ layer.weights.T).max() > 1e-3


def test_forward_is_inference_only():
    rng = np.random.default_rng(0)
    layer = DNI(5, 4, "tanh", generator_init="blog", seed=5)
    before = layer.weights.copy()
    generator_before = layer.generator.weights.copy()
    out = layer.forward(random_batch(rng, 3, 5))
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(layer.weights, before)
    np.testing.assert_array_equal(layer.generator.weights, generator_before)


def test_zero_initialised_generator_leaves_a_fresh_layer_unchanged():
    rng = np.random.default_rng(0)
    layer = DNI(5, 4, "tanh", seed=6)
    before = layer.weights.copy()
    input_delta, _ = layer.forward_and_synthetic_update(random_batch(rng, 3, 5))
    np.testing.assert_array_equal(layer.weights, before)
    np.testing.assert_array_equal(input_delta, np.zeros((3, 5)))


def test_blog_positional_call_and_names_work():
    from sgrad import sigmoid, sigmoid_out2deriv

    layer = DNI(16, 128, sigmoid, sigmoid_out2deriv, 0.1, seed=0)
    assert layer.weights.shape == (16, 128)
    assert layer.alpha == 0.1 and layer.generator_alpha == 0.1
    assert layer.generator.weights.shape == (128, 128)
    assert DNI(16, 8, "relu", seed=0).nonlin.__name__ == "relu"


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
        delta, h = layer.forward_and_synthetic_update(h)
        returned.append(delta)
    top_weights = top.weights.copy()
    top_output = top.forward(h)
    _, g = mse(top_output, y)
    true_gradient_at_h3 = g @ top_weights.T
    np.testing.assert_allclose(top.backward(g), true_gradient_at_h3, rtol=1e-13)
    top.update(0.05)
    for layer, target in zip(layers, returned[1:] + [true_gradient_at_h3]):
        layer.update_synthetic_weights(target)

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


def test_repeated_generator_updates_fit_a_linear_target_100_fold():
    rng = np.random.default_rng(0)
    x = random_batch(rng, 32, 6)
    # alpha ~ 0 keeps h fixed, so the generator sees one (h, target) pair over and over.
    layer = DNI(6, 5, "tanh", alpha=1e-300, generator_alpha=0.2, seed=0)
    h = layer.forward(x)
    target = h @ rng.standard_normal((5, 5)) + rng.standard_normal(5)
    losses = []
    for _ in range(300):
        layer.forward_and_synthetic_update(x)
        losses.append(layer.update_synthetic_weights(target))
    np.testing.assert_array_equal(layer.output, h)
    assert losses[0] / losses[-1] >= 100


def test_condition_reaches_the_generator():
    rng = np.random.default_rng(0)
    generator = RecordingGenerator(4, condition_dim=3, init="blog", seed=0)
    layer = DNI(5, 4, "tanh", condition_dim=3, generator=generator, seed=0)
    x, c = random_batch(rng, 6, 5), random_batch(rng, 6, 3)
    layer.forward_and_synthetic_update(x, c)
    assert generator.conditions[-1] is c
    expected = np.concatenate([layer.output, c], axis=1) @ generator.weights + generator.bias
    np.testing.assert_allclose(layer.synthetic_gradient, expected, rtol=1e-13)


def test_condition_changes_the_update():
    rng = np.random.default_rng(0)
    x, c = random_batch(rng, 6, 5), random_batch(rng, 6, 3)
    a = DNI(5, 4, "tanh", condition_dim=3, generator_init="blog", seed=7)
    b = DNI(5, 4, "tanh", condition_dim=3, generator_init="blog", seed=7)
    a.forward_and_synthetic_update(x, c)
    b.forward_and_synthetic_update(x, -c)
    assert np.abs(a.weights - b.weights).max() > 1e-4


@pytest.mark.parametrize(
    "condition, fragment",
    [(None, "conditioned (condition_dim=3)"),
     (np.zeros((6, 2)), "(batch, 3)"),
     (np.zeros((5, 3)), "the input has 6 rows, the condition has 5"),
     (np.zeros(6 * 3), "got shape (18,)"),
     (np.full((6, 3), np.nan), "NaN or inf")])
def test_bad_condition_for_cdni_raises_and_leaves_weights_alone(condition, fragment):
    rng = np.random.default_rng(0)
    layer = DNI(5, 4, "tanh", condition_dim=3, generator_init="blog", seed=0)
    weights, generator_weights = layer.weights.copy(), layer.generator.weights.copy()
    with pytest.raises(ValueError, match=None) as info:
        layer.forward_and_synthetic_update(random_batch(rng, 6, 5), condition)
    assert fragment in str(info.value)
    np.testing.assert_array_equal(layer.weights, weights)
    np.testing.assert_array_equal(layer.generator.weights, generator_weights)


def test_condition_given_to_an_unconditioned_dni_raises():
    layer = DNI(5, 4, "tanh", seed=0)
    with pytest.raises(ValueError, match="unconditioned"):
        layer.forward_and_synthetic_update(np.zeros((2, 5)), np.zeros((2, 3)))


def test_update_synthetic_weights_checks_its_target():
    layer = DNI(5, 4, "tanh", seed=0)
    with pytest.raises(ValueError, match="forward_and_synthetic_update"):
        layer.update_synthetic_weights(np.zeros((2, 4)))
    layer.forward_and_synthetic_update(np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"\(batch, 4\).*got shape \(2, 3\)"):
        layer.update_synthetic_weights(np.zeros((2, 3)))


def test_a_generator_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="output_dim"):
        DNI(5, 4, "tanh", generator=LinearGenerator(3))
    with pytest.raises(ValueError, match="condition_dim"):
        DNI(5, 4, "tanh", generator=LinearGenerator(4, condition_dim=2))
    with pytest.raises(TypeError, match="lacks"):
        DNI(5, 4, "tanh", generator=object())


@pytest.mark.parametrize("condition_dim", [0, 3])
def test_skipping_the_input_delta_changes_nothing_else(condition_dim):
    """A bottom layer's input delta feeds no generator; input_delta=False skips it and returns None."""
    rng = np.random.default_rng(0)
    x, c = rng.normal(size=(6, 4)), rng.normal(size=(6, 3)) if condition_dim else None
    full, lean = (DNI(4, 5, "tanh", alpha=0.05, condition_dim=condition_dim, generator_init="blog", seed=2)
                  for _ in range(2))
    delta, out = full.forward_and_synthetic_update(x, c)
    none, lean_out = lean.forward_and_synthetic_update(x, c, input_delta=False)
    assert delta.shape == (6, 4) and none is None
    np.testing.assert_array_equal(lean_out, out)
    np.testing.assert_array_equal(lean.weights, full.weights)
    np.testing.assert_array_equal(lean.synthetic_gradient, full.synthetic_gradient)


class MisshapenGenerator(LinearGenerator):
    """A user's generator whose prediction has one column too few."""

    def forward(self, h, condition=None):
        return super().forward(h, condition)[:, :-1]


def test_a_generator_whose_prediction_does_not_fit_is_refused_before_the_layer_moves():
    layer = DNI(5, 4, "tanh", generator=MisshapenGenerator(4, init="blog", seed=1), seed=0)
    weights = layer.weights.copy()
    with pytest.raises(ValueError, match=r"the generator's synthetic gradient must have shape \(batch, 4\) "
                                         r"\(4 = the width of this layer's output\); got shape \(6, 3\)"):
        layer.forward_and_synthetic_update(np.random.default_rng(0).random((6, 5)))
    np.testing.assert_array_equal(layer.weights, weights)


def test_a_subclassed_generators_forward_is_still_called():
    generator = RecordingGenerator(4, init="blog", seed=1)
    layer = DNI(5, 4, "tanh", generator=generator, seed=0)
    layer.forward_and_synthetic_update(np.random.default_rng(0).random((6, 5)))
    assert generator.conditions == [None]


def test_dni_step_equals_each_layers_public_calls():
    # dni_step is the layers' public calls in the order of the paper's algorithm, nothing more.
    from sgrad import DNIBlock, dense_block
    from sgrad.losses import softmax_cross_entropy

    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        hidden = [DNIBlock(dense_block(4, 6, seed=0), LinearGenerator(6, 3, init="blog", seed=1), 0.1),
                  DNI(6, 5, "relu", condition_dim=3, generator_init="blog", seed=2, alpha=0.1)]
        return hidden + [Layer(5, 3, "identity", seed=3)]

    fast, slow = stack(), stack()
    loss, generator_losses = dni_step(fast, x, y, softmax_cross_entropy, 0.1, condition=y)
    first, h = slow[0].forward_and_synthetic_update(x, y, input_delta=False)
    second, h = slow[1].forward_and_synthetic_update(h, y)
    expected, g = softmax_cross_entropy(slow[2].forward(h), y)
    top_delta = slow[2].backward(g)
    slow[2].update(0.1)
    expected_generator_losses = [slow[0].update_synthetic_weights(second), slow[1].update_synthetic_weights(top_delta)]
    assert first is None
    assert loss == expected and generator_losses == expected_generator_losses
    for a, b in zip(fast, slow):
        for owner_a, owner_b in ((a, b), (getattr(a, "generator", None), getattr(b, "generator", None))):
            if owner_a is None:
                continue
            for name, param in owner_a.parameters.items():
                np.testing.assert_array_equal(param, owner_b.parameters[name], err_msg=name)
    assert all(set(layer.generator.gradients) == {"weights", "bias"} for layer in fast[:2] + slow[:2])
