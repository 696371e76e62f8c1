"""Generators ĝ = M(h, c) (sgrad/dni/generators.py): LinearGenerator, MLPGenerator, SyntheticLossGenerator and ConvGenerator.

Initialisation, gradients against central differences, the update, predict, conditioning, learning,
stability and dtype.  What every generator of rows shares is specified once over the three kinds; what one kind
adds (MLPGenerator's zero output layer, SyntheticLossGenerator's predicted loss ℓ̂ = softplus(net([h, c])),
of which ĝ = dL̂/dh is the gradient) has a test of its own; ConvGenerator, whose h and ĝ are feature maps
(batch, channels, height, width), has the last section.  Reaching the batch norms inside with train/eval
is the Module tree's, in test_module.py; bad arguments shared by the whole public API are in test_bad_input.py.
"""

import copy

import numpy as np
import pytest
from conftest import (assert_dtype, assert_gradients_match, assert_same_state, assert_tree_dtype, away_from_kinks,
                      normal, randomize, tree_state)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import (LIMIT, batches, booleans, condition_dims, dtypes, generator_kinds, gradient_generator_kinds,
                        hidden_widths, seeds, training_batches, update_rules, widths)

from sgrad.dni.generators import (CONV_CONDITIONING, ConvGenerator, LinearGenerator, MLPGenerator, SyntheticLossGenerator,
                                  regression_loss)
from sgrad.nn.conditioned_conv import ConditionedConv2d
from sgrad.nn.conv import Conv2d
from sgrad.nn.layers import Layer

BATCH, WIDTH, CONDITION, HIDDEN = 6, 4, 3, (16, 16)
CLASSES = {"linear": LinearGenerator, "mlp": MLPGenerator, "synthetic-loss": SyntheticLossGenerator}
# The fixed cases: each kind, the two with hidden blocks with and without batch norm.
KINDS = [pytest.param("linear", True, id="linear"),
         pytest.param("mlp", True, id="mlp-batchnorm"), pytest.param("mlp", False, id="mlp-plain"),
         pytest.param("synthetic-loss", True, id="synthetic-loss-batchnorm"),
         pytest.param("synthetic-loss", False, id="synthetic-loss-plain")]
BATCHNORM = pytest.mark.parametrize("batchnorm", [True, False], ids=["batchnorm", "plain"])


def _h(seed=0, rows=BATCH):
    return np.random.default_rng(seed).standard_normal((rows, WIDTH))


def _condition(seed=1, rows=BATCH, width=CONDITION):
    return np.random.default_rng(seed).standard_normal((rows, width))


def _generator(kind="mlp", batchnorm=True, condition_dim=CONDITION, randomise=True, **options):
    """A float64 generator of WIDTH outputs (hidden=(16, 16) but for the linear one).

    Randomised, every parameter is off its initial value: the zero-initialised output layer would hide every
    other gradient, and a zero synthetic gradient would make many tests pass for the wrong reason.
    """
    if kind == "linear":
        generator = LinearGenerator(WIDTH, condition_dim, seed=0, **options)
    else:
        generator = CLASSES[kind](WIDTH, condition_dim, hidden=HIDDEN, batchnorm=batchnorm, seed=0, **options)
    if randomise:
        rng = np.random.default_rng(10)
        for name, param in generator.parameters.items():
            if name.endswith("gamma"):
                param[:] = rng.uniform(0.5, 1.5, param.shape)
            elif kind == "linear" or name.startswith(f"{len(HIDDEN)}.") or not name.endswith("weights"):
                param[:] = 0.5 * rng.standard_normal(param.shape)
    return generator


def _target(kind, seed=2, rows=BATCH):
    """A regression target: a predicted loss (rows, 1) for the synthetic-loss generator, else a gradient."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 2.0, (rows, 1)) if kind == "synthetic-loss" else rng.standard_normal((rows, WIDTH))


def _prediction(generator):
    """What the generator regresses onto its target: ℓ̂ for the synthetic-loss generator, else ĝ."""
    if isinstance(generator, SyntheticLossGenerator):
        return generator.predicted_loss
    return generator.synthetic_gradient


def make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng, dtype=np.float64, update_rule=None):
    """A generator of the kind drawn by a property; ``hidden`` and ``batchnorm`` do not apply to the linear one."""
    options = dict(update_rule=update_rule, rng=rng, dtype=dtype)
    if kind == "linear":
        return LinearGenerator(output_dim, condition_dim, **options)
    return CLASSES[kind](output_dim, condition_dim, hidden=hidden, batchnorm=batchnorm, **options)


def _joined(h, c):
    return h if c is None else np.concatenate([h, c], axis=1)


def _drawn_generator(kind, batch, output_dim, condition_dim, hidden, batchnorm, seed):
    """A drawn generator with random parameters and an input (h, c) that keeps its ReLUs off their kinks; the rng."""
    assume(batch >= 2 or not (batchnorm and hidden and kind != "linear"))
    rng = np.random.default_rng(seed)
    generator = make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng)
    randomize(generator.parameters, rng)
    h = normal(rng, batch, output_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    assume(away_from_kinks(generator.net, _joined(h, c)))
    return generator, h, c, rng


# --- initialisation ----------------------------------------------------------------------------


def test_linear_zeros_is_the_default_init_and_predicts_zero():
    generator = LinearGenerator(WIDTH, CONDITION)
    np.testing.assert_array_equal(generator.weights, np.zeros((WIDTH + CONDITION, WIDTH)))
    np.testing.assert_array_equal(generator.predict(_h(), _condition()), np.zeros((BATCH, WIDTH)))


@BATCHNORM
def test_mlp_output_layer_starts_at_zero_so_the_synthetic_gradient_is_zero(batchnorm):
    generator = _generator(batchnorm=batchnorm, randomise=False)
    output_layer = generator.net.modules[-1]
    np.testing.assert_array_equal(output_layer.weights, np.zeros((HIDDEN[-1], WIDTH)))
    np.testing.assert_array_equal(output_layer.bias, np.zeros(WIDTH))
    np.testing.assert_array_equal(generator.forward(_h(), _condition()), np.zeros((BATCH, WIDTH)))


@BATCHNORM
def test_the_default_start_is_he_normal_hidden_weights_from_the_seed_and_every_bias_and_the_output_zero(batchnorm):
    generator = MLPGenerator(WIDTH, CONDITION, hidden=HIDDEN, batchnorm=batchnorm, seed=0)
    rng = np.random.default_rng(0)
    for (a, b), block in zip(((WIDTH + CONDITION, 16), (16, 16)), generator.net.modules[:-1]):
        np.testing.assert_array_equal(block.modules[0].weights, rng.standard_normal((a, b)) * np.sqrt(2.0 / a))
        if not batchnorm:
            np.testing.assert_array_equal(block.modules[0].bias, np.zeros(b))
    np.testing.assert_array_equal(generator.net.modules[-1].weights, np.zeros((16, WIDTH)))
    np.testing.assert_array_equal(generator.net.modules[-1].bias, np.zeros(WIDTH))


def test_pytorchs_start_draws_as_the_peers_synthesizer_with_the_label_through_a_linear_of_its_own():
    """koz4k/dni-pytorch's BasicSynthesizer: Linear(h) + Linear(c) → ReLU → Linear → ReLU → Linear with zero weights,
    every nn.Linear drawn U(±1/√fan_in), weights and bias alike."""
    generator = MLPGenerator(256, 10, hidden=(256, 256), batchnorm=False, init="pytorch", bias_init="pytorch", seed=0)
    first, second, out = generator.net.modules[0].modules[0], generator.net.modules[1].modules[0], generator.net.modules[2]
    for array, fan_in in ((first.weights[:256], 256), (first.weights[256:], 10), (second.weights, 256),
                          (second.bias, 256), (out.bias, 256)):
        assert 0.97 / np.sqrt(fan_in) < np.abs(array).max() <= 1 / np.sqrt(fan_in)
        assert abs(array.std() - 1 / np.sqrt(3 * fan_in)) < 0.1 / np.sqrt(fan_in)
    assert abs(first.bias.std() - np.sqrt(1 / (3 * 256) + 1 / (3 * 10))) < 0.02  # one bias for h's Linear, one for c's
    np.testing.assert_array_equal(out.weights, np.zeros((256, 256)))
    h, c = np.random.default_rng(1).standard_normal((5, 256)), np.eye(10)[:5]
    np.testing.assert_array_equal(generator.forward(h, c), np.broadcast_to(out.bias, (5, 256)))  # ĝ starts at the bias


def test_a_linear_generators_pytorch_bias_is_one_per_part_and_the_start_of_g_hat():
    generator = LinearGenerator(256, 10, bias_init="pytorch", seed=0)
    np.testing.assert_array_equal(generator.weights, np.zeros((266, 256)))
    assert abs(generator.bias.std() - np.sqrt(1 / (3 * 256) + 1 / (3 * 10))) < 0.02
    assert np.abs(generator.bias).max() <= 1 / np.sqrt(256) + 1 / np.sqrt(10)
    h = np.random.default_rng(1).standard_normal((5, 256))
    np.testing.assert_array_equal(generator.forward(h, np.eye(10)[:5]), np.broadcast_to(generator.bias, (5, 256)))


def test_without_a_label_pytorchs_start_draws_the_first_layer_as_one_linear():
    generator, layer = (MLPGenerator(WIDTH, hidden=(16,), batchnorm=False, init="pytorch", bias_init="pytorch", seed=3),
                        Layer(WIDTH, 16, "identity", init="pytorch", bias_init="pytorch", seed=3))
    np.testing.assert_array_equal(generator.net.modules[0].modules[0].weights, layer.weights)
    np.testing.assert_array_equal(generator.net.modules[0].modules[0].bias, layer.bias)


@pytest.mark.parametrize("make", [lambda: MLPGenerator(WIDTH, bias_init="he"),
                                  lambda: LinearGenerator(WIDTH, bias_init="uniform"),
                                  lambda: SyntheticLossGenerator(WIDTH, bias_init="one")])
def test_an_unknown_bias_init_is_refused(make):
    with pytest.raises(ValueError, match="unknown bias_init '.*'; choose one of 'zeros', 'pytorch'"):
        make()

def test_fresh_synthetic_loss_generator_predicts_log_two_and_a_zero_synthetic_gradient():
    generator = _generator("synthetic-loss", randomise=False)
    synthetic_gradient = generator.forward(_h(), _condition())
    np.testing.assert_allclose(generator.predicted_loss, np.full((BATCH, 1), np.log(2.0)), rtol=1e-15)
    np.testing.assert_array_equal(synthetic_gradient, np.zeros((BATCH, WIDTH)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("initial_loss", [np.log(10.0), 1e-6, 800.0], ids=["ln_10", "tiny", "huge"])
def test_fresh_synthetic_loss_generator_predicts_its_initial_loss_and_a_zero_synthetic_gradient(initial_loss, dtype):
    """softplus⁻¹ of the initial loss in the output bias neither overflows (800) nor loses a tiny loss (1e-6)."""
    generator = _generator("synthetic-loss", randomise=False, initial_loss=initial_loss, dtype=dtype)
    synthetic_gradient = generator.forward(_h().astype(dtype), _condition().astype(dtype))
    assert_dtype(dtype, predicted_loss=generator.predicted_loss, synthetic_gradient=synthetic_gradient)
    np.testing.assert_allclose(generator.predicted_loss, np.full((BATCH, 1), initial_loss),
                               rtol=1e-6 if dtype == np.float32 else 1e-13)
    np.testing.assert_array_equal(synthetic_gradient, np.zeros((BATCH, WIDTH)))


@pytest.mark.parametrize("initial_loss, error", [(0.0, ValueError), (-1.0, ValueError), (np.nan, ValueError),
                                                 (np.inf, ValueError), ("2.3", TypeError)],
                         ids=["zero", "negative", "nan", "inf", "text"])
def test_synthetic_loss_generator_refuses_an_initial_loss_that_softplus_cannot_give(initial_loss, error):
    with pytest.raises(error, match=r"initial_loss must be .*> 0.*ln 10"):
        SyntheticLossGenerator(WIDTH, CONDITION, hidden=HIDDEN, initial_loss=initial_loss)


@pytest.mark.parametrize("make, random_weights", [
    (lambda seed: LinearGenerator(WIDTH, init="blog", seed=seed), ["weights"]),
    (lambda seed: MLPGenerator(WIDTH, CONDITION, hidden=HIDDEN, seed=seed), ["0.0.weights", "1.0.weights"]),
], ids=["linear-blog", "mlp"])
def test_same_seed_gives_the_same_parameters_and_random_weights_differ_with_the_seed(make, random_weights):
    a, b, c = make(3).parameters, make(3).parameters, make(4).parameters
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    for name in random_weights:
        assert np.all(a[name] != 0), f"{name} should be randomly initialised"
        assert np.all(a[name] != c[name]), f"{name} should change with the seed"


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_condition_is_concatenated_to_h(kind):
    generator = _generator(kind)
    h, c = _h(), _condition()
    generator.forward(h, c)
    np.testing.assert_array_equal(generator.input, np.concatenate([h, c], axis=1))
    first_weights = next(iter(generator.parameters.values()))
    assert first_weights.shape[0] == WIDTH + CONDITION, "a row of the first weights per column of h and of c"


# --- gradients against central differences ---------------------------------------------------


@given(kind=generator_kinds, batch=batches, output_dim=widths, condition_dim=condition_dims, hidden=hidden_widths,
       batchnorm=booleans, seed=seeds)
def test_parameter_gradients_match_central_differences(kind, batch, output_dim, condition_dim, hidden,
                                                       batchnorm, seed):
    """``gradients`` after ``update`` are dL_M/d(parameter) for L_M = 1/(2 batch) sum((prediction - target)**2)."""
    generator, h, c, rng = _drawn_generator(kind, batch, output_dim, condition_dim, hidden, batchnorm, seed)
    target = np.abs(normal(rng, batch, 1 if kind == "synthetic-loss" else output_dim))
    probe = copy.deepcopy(generator)  # the generator before the step

    def loss():
        probe.forward(h, c)
        return regression_loss(_prediction(probe), target)[0]

    generator.forward(h, c)
    generator.update(target, 0.1)
    assert_gradients_match(loss, generator.gradients, probe.parameters,
                           f"{kind} generator, hidden {hidden}, batch norm {batchnorm}, c of {condition_dim}")


@given(kind=gradient_generator_kinds, batch=batches, output_dim=widths, condition_dim=condition_dims,
       hidden=hidden_widths, batchnorm=booleans, seed=seeds)
def test_input_gradient_of_the_net_matches_central_differences(kind, batch, output_dim, condition_dim, hidden,
                                                               batchnorm, seed):
    """The generator's net backpropagates dL_M/dĝ to its input [h, c]."""
    generator, h, c, rng = _drawn_generator(kind, batch, output_dim, condition_dim, hidden, batchnorm, seed)
    target = normal(rng, batch, output_dim)

    def loss():
        return regression_loss(generator.forward(h, c), target)[0]

    dinput = generator.net.backward(regression_loss(generator.forward(h, c), target)[1])
    mine = {"h": dinput[:, :output_dim]}
    arrays = {"h": h}
    if c is not None:
        mine["c"], arrays["c"] = dinput[:, output_dim:], c
    assert_gradients_match(loss, mine, arrays, f"{kind} generator, hidden {hidden}, batch norm {batchnorm}")


@given(batch=batches, output_dim=widths, condition_dim=condition_dims, hidden=hidden_widths,
       batchnorm=booleans, seed=seeds)
def test_synthetic_loss_gradient_is_the_central_difference_of_the_mean_predicted_loss(
        batch, output_dim, condition_dim, hidden, batchnorm, seed):
    """SyntheticLossGenerator's ĝ is dL̂/dh with L̂ the batch mean of the predicted loss ℓ̂."""
    generator, h, c, _ = _drawn_generator("synthetic-loss", batch, output_dim, condition_dim, hidden, batchnorm, seed)

    def mean_predicted_loss():
        generator.forward(h, c)
        return float(generator.predicted_loss.mean())

    g_hat = generator.forward(h, c).copy()
    assert g_hat.shape == (batch, output_dim)
    assert_gradients_match(mean_predicted_loss, {"h": g_hat}, {"h": h}, f"synthetic-loss generator, hidden {hidden}")


# --- the update --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, batchnorm", KINDS)
def test_update_returns_the_loss_before_the_step(kind, batchnorm):
    generator = _generator(kind, batchnorm)
    target = _target(kind)
    generator.forward(_h(), _condition())
    expected = 0.5 * np.sum((_prediction(generator) - target) ** 2) / BATCH
    assert generator.update(target, alpha=0.1) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("kind, batchnorm", KINDS)
def test_update_with_sgd_steps_against_the_gradient(kind, batchnorm):
    generator = _generator(kind, batchnorm)
    before = {name: p.copy() for name, p in generator.parameters.items()}
    generator.forward(_h(), _condition())
    generator.update(_target(kind), alpha=0.1)
    for name, param in generator.parameters.items():
        np.testing.assert_array_equal(param, before[name] - 0.1 * generator.gradients[name], err_msg=name)


def test_a_linear_generators_weights_and_bias_are_its_layers_to_read_and_to_set():
    generator = _generator("linear")
    assert generator.weights is generator.net.weights and generator.bias is generator.net.bias
    assert generator.update_rule is generator.net.update_rule
    generator.weights -= 1.0  # a homework's in-place step
    np.testing.assert_array_equal(generator.net.weights, generator.weights)
    generator.weights = np.zeros_like(generator.weights)
    generator.bias = np.ones_like(generator.bias)
    np.testing.assert_array_equal(generator.predict(_h(), _condition()), np.ones((BATCH, WIDTH)))


def test_linear_weights_grad_and_bias_grad_are_the_gradients_of_the_last_update():
    generator = _generator("linear")
    generator.forward(_h(), _condition())
    generator.update(_target("linear"), alpha=0.1)
    assert generator.weights_grad is generator.gradients["weights"]
    assert generator.bias_grad is generator.gradients["bias"]


def test_one_step_lowers_the_regression_loss_and_the_blogs_sign_raises_it():
    rng = np.random.default_rng(0)
    h, target = rng.standard_normal((8, WIDTH)), rng.standard_normal((8, WIDTH))
    generator = LinearGenerator(WIDTH, init="blog", seed=3)
    w0, b0 = generator.weights.copy(), generator.bias.copy()

    def loss(weights, bias):
        return 0.5 * np.sum((h @ weights + bias - target) ** 2) / len(h)

    generator.forward(h)
    first = generator.update(target, 0.05)
    assert first == pytest.approx(loss(w0, b0), rel=1e-12)
    blog = loss(2 * w0 - generator.weights, 2 * b0 - generator.bias)  # the blog's `+=`: the same step, upwards
    assert loss(generator.weights, generator.bias) < first < blog


def _linear_problem(rows, width, seed=0):
    """h and an exactly linear target of it, ``h @ A + b``."""
    rng = np.random.default_rng(seed)
    h = np.tanh(rng.standard_normal((rows, width)) @ rng.standard_normal((width, width)))
    return h, h @ rng.standard_normal((width, width)) + rng.standard_normal(width)


def _tanh_problem(rows, width, seed=0):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((rows, width))
    return h, np.tanh(h @ rng.standard_normal((width, width)))


def _loss_problem(rows, width, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, width)), rng.uniform(0.1, 2.0, (rows, 1))


@pytest.mark.parametrize("make, problem, alpha, steps", [
    (lambda: LinearGenerator(5), lambda: _linear_problem(32, 5), 0.2, 300),
    (lambda: LinearGenerator(WIDTH, update_rule="adam"), lambda: _linear_problem(8, WIDTH), 0.05, 200),
    (lambda: MLPGenerator(WIDTH, hidden=HIDDEN, update_rule="adam", seed=0), lambda: _tanh_problem(8, WIDTH),
     1e-2, 300),
    (lambda: MLPGenerator(WIDTH, hidden=HIDDEN, batchnorm=False, update_rule="adam", seed=0),
     lambda: _tanh_problem(8, WIDTH), 1e-2, 300),
    (lambda: SyntheticLossGenerator(WIDTH, hidden=HIDDEN, update_rule="adam", seed=0),
     lambda: _loss_problem(8, WIDTH), 1e-2, 300),
    (lambda: SyntheticLossGenerator(WIDTH, hidden=HIDDEN, batchnorm=False, update_rule="adam", seed=0),
     lambda: _loss_problem(8, WIDTH), 1e-2, 300),
], ids=["linear-sgd-linear-target", "linear-adam-linear-target", "mlp-batchnorm-adam", "mlp-plain-adam",
        "synthetic-loss-batchnorm-adam", "synthetic-loss-plain-adam"])
def test_repeated_updates_fit_a_fixed_target_a_hundredfold(make, problem, alpha, steps):
    generator = make()
    h, target = problem()
    losses = []
    for _ in range(steps):
        generator.forward(h)
        losses.append(generator.update(target, alpha))
    generator.forward(h)
    final = regression_loss(_prediction(generator), target)[0]
    assert losses[0] / final >= 100, f"the regression loss fell only from {losses[0]:.3g} to {final:.3g}"


@pytest.mark.parametrize("kind, batchnorm", KINDS)
def test_a_second_update_without_a_forward_is_refused_and_changes_nothing(kind, batchnorm):
    generator = _generator(kind, batchnorm)
    generator.forward(_h(), _condition())
    generator.update(_target(kind), 0.1)
    before = tree_state(generator)
    with pytest.raises(ValueError, match=r"after update\(\).*call forward\(\w+\) again first"):
        generator.update(_target(kind), 0.1)
    assert_same_state(generator, before)


@pytest.mark.parametrize("kind, rows, columns, message", [
    ("linear", BATCH + 1, WIDTH, r"target must have the shape of the last synthetic gradient, \(6, 4\); "
                                 r"got shape \(7, 4\)"),
    ("mlp", BATCH + 1, WIDTH, r"target must have the shape of the last synthetic gradient, \(6, 4\); "
                              r"got shape \(7, 4\)"),
    ("synthetic-loss", BATCH + 1, 1, r"target must have the shape of the last predicted loss, \(6, 1\); "
                                     r"got shape \(7, 1\)"),
    ("synthetic-loss", BATCH, None, r"target must have shape \(batch, 1\).*got shape \(6,\)"),
], ids=["linear", "mlp", "synthetic-loss-wrong-row-count", "synthetic-loss-one-dimensional"])
def test_target_of_another_shape_raises_and_changes_nothing(kind, rows, columns, message):
    generator = _generator(kind)
    generator.forward(_h(), _condition())
    before = tree_state(generator)
    with pytest.raises(ValueError, match=message):
        generator.update(np.ones((rows,) if columns is None else (rows, columns)), alpha=0.1)
    assert_same_state(generator, before)


# --- predict -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, batchnorm", KINDS)
def test_predict_has_no_side_effects(kind, batchnorm):
    generator = _generator(kind, batchnorm)
    generator.forward(_h(), _condition())
    before = tree_state(generator)
    generator.predict(_h(5, rows=3), _condition(6, rows=3))
    assert_same_state(generator, before)


@pytest.mark.parametrize("kind, batchnorm", KINDS)
def test_predict_equals_forward(kind, batchnorm):
    generator = _generator(kind, batchnorm)
    h, c = _h(), _condition()
    np.testing.assert_array_equal(generator.predict(h, c), generator.forward(h, c))


# --- conditioning ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, batchnorm", KINDS[:3])
def test_condition_changes_the_prediction(kind, batchnorm):
    generator = _generator(kind, batchnorm)
    h = _h()
    assert np.all(generator.predict(h, _condition(seed=1)) != generator.predict(h, _condition(seed=2)))


def test_condition_enters_through_its_own_rows_of_the_linear_weights():
    generator = _generator("linear")
    h, c = _h(), _condition()
    expected = h @ generator.weights[:WIDTH] + c @ generator.weights[WIDTH:] + generator.bias
    np.testing.assert_allclose(generator.predict(h, c), expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("condition, message", [
    (_condition(width=2), r"condition must have shape \(batch, 3\).*got shape \(6, 2\)"),
    (_condition(rows=3), "the input has 6 rows, the condition has 3"),
], ids=["wrong_width", "wrong_row_count"])
def test_bad_condition_raises_before_anything_is_remembered(condition, message):
    generator = _generator("linear")
    with pytest.raises(ValueError, match=message):
        generator.forward(_h(), condition)
    assert generator.input is None and generator.synthetic_gradient is None


def test_seed_and_rng_together_raise():
    with pytest.raises(ValueError, match="either seed or rng, not both"):
        LinearGenerator(WIDTH, seed=0, rng=np.random.default_rng(0))


# --- the synthetic-loss generator's predicted loss ---------------------------------------------


@BATCHNORM
def test_predicted_loss_is_softplus_of_the_net_with_one_column(batchnorm):
    generator = _generator("synthetic-loss", batchnorm)
    h, c = _h(), _condition()
    generator.forward(h, c)
    z = generator.net.predict(_joined(h, c))
    assert generator.predicted_loss.shape == (BATCH, 1)
    np.testing.assert_allclose(generator.predicted_loss, np.log1p(np.exp(z)), rtol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sign", [-1.0, 1.0], ids=["very_negative", "very_positive"])
def test_predicted_loss_is_finite_and_non_negative_for_extreme_outputs(dtype, sign):
    """ℓ̂ = softplus(z) must not overflow when the net's output z is ±1e4: it is z, or 0."""
    generator = _generator("synthetic-loss", dtype=dtype)
    generator.net.modules[-1].bias[:] = sign * LIMIT
    h, c = _h().astype(dtype), _condition().astype(dtype)
    synthetic_gradient = generator.forward(h, c)
    predicted_loss = generator.predicted_loss
    assert_dtype(dtype, predicted_loss=predicted_loss, synthetic_gradient=synthetic_gradient)
    assert np.isfinite(predicted_loss).all() and np.isfinite(synthetic_gradient).all()
    assert np.all(predicted_loss >= 0)
    np.testing.assert_allclose(predicted_loss, np.maximum(generator.net.predict(_joined(h, c)), 0), rtol=1e-6)


# --- dtype ---------------------------------------------------------------------------------------


@given(dtype=dtypes, kind=generator_kinds, batch=training_batches, output_dim=widths, condition_dim=condition_dims,
       hidden=hidden_widths, batchnorm=booleans, rule=update_rules, seed=seeds)
def test_keeps_its_dtype_through_an_update(dtype, kind, batch, output_dim, condition_dim, hidden, batchnorm, rule,
                                          seed):
    rng = np.random.default_rng(seed)
    generator = make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng, dtype, rule)
    randomize(generator.parameters, rng)
    h = normal(rng, batch, output_dim, dtype=dtype)
    c = normal(rng, batch, condition_dim, dtype=dtype) if condition_dim else None
    arrays = {"synthetic_gradient": generator.forward(h, c), "prediction": generator.predict(h, c)}
    if kind == "synthetic-loss":
        arrays["predicted_loss"] = generator.predicted_loss
    generator.update(normal(rng, batch, 1 if kind == "synthetic-loss" else output_dim, dtype=dtype), 0.1)
    assert_dtype(dtype, **arrays, **{f"gradient of {k}": g for k, g in generator.gradients.items()})
    assert_tree_dtype(dtype, generator, f"{kind} generator")


# --- the convolutional generator: ĝ for feature maps ------------------------------------------------------

MAPS = (BATCH, WIDTH, 5, 4)  # h: (batch, channels, height, width); the generator's output_dim is WIDTH channels


def _maps(seed=0, shape=MAPS):
    return np.random.default_rng(seed).standard_normal(shape)


def _conv_generator(condition_dim=CONDITION, randomise=True, **options):
    """A float64 ConvGenerator of WIDTH channels, hidden (3, 3); randomised, its output conv is off zero too."""
    generator = ConvGenerator(WIDTH, condition_dim, hidden=(3, 3), seed=0, **options)
    if randomise:
        randomize(generator.parameters, np.random.default_rng(10))
    return generator


def _drawn_conv_generator(batch, condition_dim, hidden, kernel, batchnorm, seed, condition="channels"):
    """A drawn ConvGenerator with random parameters, and (h, c) that keep its ReLUs off their kinks."""
    rng = np.random.default_rng(seed)
    generator = ConvGenerator(2, condition_dim, hidden=hidden, kernel_size=kernel, batchnorm=batchnorm,
                              condition=condition, rng=rng)
    randomize(generator.parameters, rng)
    h = normal(rng, batch, 2, 3, 4)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    assume(away_from_kinks(generator.net, generator._join(h, c)))
    return generator, h, c, rng


def test_conv_generator_output_layer_starts_at_zero_so_the_synthetic_gradient_is_zero():
    generator = _conv_generator(randomise=False)
    output_layer = generator.net.modules[-1]
    np.testing.assert_array_equal(output_layer.weights, np.zeros((WIDTH, 3, 3, 3)))
    np.testing.assert_array_equal(output_layer.bias, np.zeros(WIDTH))
    np.testing.assert_array_equal(generator.forward(_maps(), _condition()), np.zeros(MAPS))


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
def test_conv_generator_predicts_maps_of_the_shape_of_h_with_padded_conv_batchnorm_relu_blocks(kernel_size):
    generator = _conv_generator(kernel_size=kernel_size)
    assert generator.predict(_maps(), _condition()).shape == MAPS
    first_block = generator.net.modules[0]
    assert [type(m).__name__ for m in first_block.modules] == ["Conv2d", "BatchNorm2d", "Activation2d"]
    assert first_block.modules[0].in_channels == WIDTH + CONDITION, "c enters as condition_dim extra channels"
    assert all(conv.padding == kernel_size // 2 for _, conv in generator.submodules() if isinstance(conv, Conv2d))


def test_conv_generator_broadcasts_the_condition_over_the_maps_as_extra_channels():
    generator = _conv_generator()
    h, c = _maps(), _condition()
    generator.forward(h, c)
    np.testing.assert_array_equal(generator.input[:, :WIDTH], h)
    np.testing.assert_array_equal(generator.input[:, WIDTH:], np.broadcast_to(c[:, :, None, None], (BATCH, CONDITION,
                                                                                                    5, 4)))


@settings(max_examples=30)
@given(batch=st.integers(1, 3), condition_dim=condition_dims, hidden=hidden_widths, kernel=st.sampled_from([1, 3]),
       batchnorm=booleans, seed=seeds, condition=st.sampled_from(CONV_CONDITIONING))
def test_conv_generator_parameter_gradients_match_central_differences(batch, condition_dim, hidden, kernel, batchnorm,
                                                                      seed, condition):
    """``gradients`` after ``update`` are dL_M/d(parameter), L_M = 1/(2 batch) sum((ĝ - target)**2) over the maps."""
    generator, h, c, rng = _drawn_conv_generator(batch, condition_dim, hidden, kernel, batchnorm, seed, condition)
    target = normal(rng, *h.shape)
    probe = copy.deepcopy(generator)

    def loss():
        return regression_loss(probe.forward(h, c), target)[0]

    generator.forward(h, c)
    generator.update(target, 0.1)
    assert_gradients_match(loss, generator.gradients, probe.parameters,
                           f"conv generator, hidden {hidden}, {kernel}×{kernel}, batch norm {batchnorm}")


@settings(max_examples=30)
@given(batch=st.integers(1, 3), condition_dim=condition_dims, hidden=hidden_widths, kernel=st.sampled_from([1, 3]),
       batchnorm=booleans, seed=seeds, condition=st.sampled_from(CONV_CONDITIONING))
def test_conv_generator_net_backpropagates_to_h_and_to_the_broadcast_condition(batch, condition_dim, hidden, kernel,
                                                                                batchnorm, seed, condition):
    """dL_M/dh is the net's input delta on h's channels; dL_M/dc sums the delta of c's channels over the map."""
    generator, h, c, rng = _drawn_conv_generator(batch, condition_dim, hidden, kernel, batchnorm, seed, condition)
    target = normal(rng, *h.shape)

    def loss():
        return regression_loss(generator.forward(h, c), target)[0]

    dinput = generator.net.backward(regression_loss(generator.forward(h, c), target)[1])
    mine, arrays = {"h": dinput[:, :2]}, {"h": h}
    if c is not None:
        mine["c"], arrays["c"] = dinput[:, 2:].sum(axis=(2, 3)), c
    assert_gradients_match(loss, mine, arrays, f"conv generator, hidden {hidden}, {kernel}×{kernel}")


def test_conv_generator_repeated_updates_fit_a_fixed_target_a_hundredfold():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((8, 2, 6, 6))
    target = np.tanh(h[:, ::-1] + 0.5 * np.roll(h, 1, axis=3))  # a local function of h: what a 3×3 net can fit
    generator = ConvGenerator(2, hidden=(8, 8), update_rule="adam", seed=0)
    losses = []
    for _ in range(300):
        generator.forward(h)
        losses.append(generator.update(target, 1e-2))
    final = regression_loss(generator.forward(h), target)[0]
    assert losses[0] / final >= 100, f"the regression loss fell only from {losses[0]:.3g} to {final:.3g}"


@pytest.mark.parametrize("h, condition, message", [
    (_h(), _condition(), r"h must have shape \(batch, 4, height, width\); got shape \(6, 4\)"),
    (_maps(shape=(BATCH, 3, 5, 4)), _condition(), r"\(4 = the generator's output_dim\); got shape \(6, 3, 5, 4\)"),
    (_maps(), _condition(rows=3), "the input has 6 rows, the condition has 3"),
    (_maps(), None, r"this generator is conditioned \(condition_dim=3\)"),
], ids=["rows", "channels", "condition-rows", "no-condition"])
def test_conv_generator_bad_input_raises_before_anything_is_remembered(h, condition, message):
    generator = _conv_generator()
    with pytest.raises(ValueError, match=message):
        generator.forward(h, condition)
    assert generator.input is None and generator.synthetic_gradient is None


def test_conv_generator_target_of_another_shape_raises_and_changes_nothing():
    generator = _conv_generator()
    generator.forward(_maps(), _condition())
    before = tree_state(generator)
    with pytest.raises(ValueError, match=r"target must have the shape of the last synthetic gradient, \(6, 4, 5, 4\); "
                                         r"got shape \(6, 4, 4, 5\)"):
        generator.update(_maps(shape=(BATCH, WIDTH, 4, 5)), 0.1)
    assert_same_state(generator, before)


def test_conv_generator_needs_an_odd_kernel_to_keep_the_maps_size():
    with pytest.raises(ValueError, match="kernel_size must be odd, so that padding keeps the maps' size.*got 4"):
        ConvGenerator(WIDTH, kernel_size=4)


@settings(max_examples=20)
@given(dtype=dtypes, condition_dim=condition_dims, rule=update_rules, seed=seeds)
def test_conv_generator_keeps_its_dtype_through_an_update(dtype, condition_dim, rule, seed):
    rng = np.random.default_rng(seed)
    generator = ConvGenerator(3, condition_dim, hidden=(2,), update_rule=rule, rng=rng, dtype=dtype)
    randomize(generator.parameters, rng)
    h = normal(rng, 2, 3, 4, 4, dtype=dtype)
    c = normal(rng, 2, condition_dim, dtype=dtype) if condition_dim else None
    arrays = {"synthetic_gradient": generator.forward(h, c), "prediction": generator.predict(h, c)}
    generator.update(normal(rng, *h.shape, dtype=dtype), 0.1)
    assert_dtype(dtype, **arrays, **{f"gradient of {k}": g for k, g in generator.gradients.items()})
    assert_tree_dtype(dtype, generator, "conv generator")


def test_with_linear_conditioning_the_label_adds_the_same_at_every_position_and_as_channels_not_at_the_border():
    """With no hidden layer ĝ is the first layer's output: c's part of it is constant over each map for
    condition='linear', and smaller at the border for 'channels' (part of the kernel falls on the padding)."""
    h, c = _maps(), _condition()
    changes = {}
    for condition in CONV_CONDITIONING:
        generator = ConvGenerator(WIDTH, CONDITION, hidden=(), kernel_size=3, condition=condition, seed=0)
        randomize(generator.parameters, np.random.default_rng(3))
        changes[condition] = generator.predict(h, c) - generator.predict(h, np.zeros_like(c))
    linear, channels = changes["linear"], changes["channels"]
    np.testing.assert_allclose(linear, np.broadcast_to(linear[:, :, :1, :1], linear.shape), atol=1e-12)
    assert not np.allclose(channels, np.broadcast_to(channels[:, :, 1:2, 1:2], channels.shape))


def test_linear_conditioning_builds_a_conditioned_first_convolution_and_pytorch_init_starts_at_the_output_bias():
    generator = ConvGenerator(WIDTH, CONDITION, hidden=(3, 3), kernel_size=5, batchnorm=False, condition="linear",
                              init="pytorch", seed=0)
    first = generator.net.modules[0].modules[0]
    assert isinstance(first, ConditionedConv2d) and (first.in_channels, first.input_dim) == (WIDTH, WIDTH + CONDITION)
    output = generator.net.modules[-1]
    np.testing.assert_array_equal(output.weights, np.zeros_like(output.weights))
    assert 0 < np.abs(output.bias).max() <= 1 / np.sqrt(3 * 25)
    np.testing.assert_array_equal(generator.forward(_maps(), _condition()),
                                  np.broadcast_to(output.bias[None, :, None, None], MAPS))
    unconditioned = ConvGenerator(WIDTH, 0, hidden=(3,), condition="linear", seed=0)
    assert type(unconditioned.net.modules[0].modules[0]) is Conv2d, "no label, nothing to map"


@pytest.mark.parametrize("options, message", [({"condition": "bias"}, "unknown condition 'bias'"),
                                              ({"init": "xavier"}, "unknown init 'xavier'; choose one of 'he', 'pytorch'")])
def test_conv_generator_refuses_unknown_conditioning_and_init(options, message):
    with pytest.raises(ValueError, match=message):
        ConvGenerator(WIDTH, CONDITION, **options)
