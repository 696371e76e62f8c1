"""Synthetic inputs ĥ = I(x, c) and the complete unlock: the input generator's gradients against central
differences, its regression, bad input refused before anything changes, the step of a completely unlocked
stack as the paper (and koz4k/dni-pytorch's BidirectionalInterface) takes it, and a net that learns so."""

import copy

import numpy as np
import pytest
from conftest import assert_gradients_match, assert_same_state, away_from_kinks, normal, randomize, tree_state
from hypothesis import assume, given
from strategies import batches, booleans, condition_dims, dtypes, hidden_widths, seeds, update_rules, widths

import sgrad
from sgrad.dni.decoupled import DNIBlock
from sgrad.dni.generators import MLPGenerator, regression_loss
from sgrad.dni.steps import complete_unlock_step
from sgrad.dni.synthetic_inputs import InputGenerator, mean_squared_error
from sgrad.nn.blocks import Sequential, dense_block
from sgrad.nn.layers import Layer
from sgrad.nn.losses import softmax_cross_entropy

INPUT, WIDTH, CLASSES, BATCH = 6, 5, 3, 8


def _joined(x, c):
    return x if c is None else np.concatenate([x, c], axis=1)


def _drawn_generator(batch, input_dim, output_dim, condition_dim, hidden, batchnorm, seed):
    """A drawn input generator with random parameters and an input (x, c) that keeps its ReLUs off their kinks."""
    assume(batch >= 2 or not (batchnorm and hidden))
    rng = np.random.default_rng(seed)
    generator = InputGenerator(input_dim, output_dim, condition_dim, hidden=hidden, batchnorm=batchnorm, rng=rng)
    randomize(generator.parameters, rng)
    x = normal(rng, batch, input_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    assume(away_from_kinks(generator.net, _joined(x, c)))
    return generator, x, c, rng


# --- the loss and the gradients against central differences ---------------------------------------


@given(batch=batches, width=widths, seed=seeds)
def test_the_mean_squared_error_is_the_mean_over_every_entry_and_its_gradient_the_central_differences(
        batch, width, seed):
    rng = np.random.default_rng(seed)
    prediction, target = normal(rng, batch, width), normal(rng, batch, width)
    loss, gradient = mean_squared_error(prediction, target)
    assert loss == pytest.approx(np.mean((prediction - target) ** 2), rel=1e-12)
    assert_gradients_match(lambda: mean_squared_error(prediction, target)[0], {"prediction": gradient},
                           {"prediction": prediction}, "L_I = mean((ĥ - h)²)")


@given(batch=batches, input_dim=widths, output_dim=widths, condition_dim=condition_dims, hidden=hidden_widths,
       batchnorm=booleans, seed=seeds)
def test_parameter_gradients_match_central_differences(batch, input_dim, output_dim, condition_dim, hidden,
                                                       batchnorm, seed):
    """``gradients`` after ``update`` are dL_I/d(parameter) for L_I = 1/(batch · width) Σ (ĥ − h)², in float64."""
    generator, x, c, rng = _drawn_generator(batch, input_dim, output_dim, condition_dim, hidden, batchnorm, seed)
    h = normal(rng, batch, output_dim)
    probe = copy.deepcopy(generator)  # the generator before the step

    def loss():
        return mean_squared_error(probe.forward(x, c), h)[0]

    generator.forward(x, c)
    generator.update(h, 0.1)
    assert_gradients_match(loss, generator.gradients, probe.parameters,
                           f"input generator, hidden {hidden}, batch norm {batchnorm}, c of {condition_dim}")


@given(batch=batches, input_dim=widths, output_dim=widths, condition_dim=condition_dims, hidden=hidden_widths,
       batchnorm=booleans, seed=seeds)
def test_the_net_backpropagates_dl_i_to_x_and_c_as_central_differences_say(batch, input_dim, output_dim,
                                                                            condition_dim, hidden, batchnorm, seed):
    """The net's backward pass, the part of the update that the parameters' gradients come through."""
    generator, x, c, rng = _drawn_generator(batch, input_dim, output_dim, condition_dim, hidden, batchnorm, seed)
    h = normal(rng, batch, output_dim)

    def loss():
        return mean_squared_error(generator.forward(x, c), h)[0]

    dinput = generator.net.backward(mean_squared_error(generator.forward(x, c), h)[1])
    mine, arrays = {"x": dinput[:, :input_dim]}, {"x": x}
    if c is not None:
        mine["c"], arrays["c"] = dinput[:, input_dim:], c
    assert_gradients_match(loss, mine, arrays, f"input generator, hidden {hidden}, batch norm {batchnorm}")


# --- what it predicts and how it learns ---------------------------------------------------------------


@pytest.mark.parametrize("hidden", [(), (7,), (7, 7)])
def test_a_fresh_input_generator_predicts_zero(hidden):
    generator = InputGenerator(INPUT, WIDTH, CLASSES, hidden=hidden, seed=0)
    x, c = normal(np.random.default_rng(0), BATCH, INPUT), np.eye(CLASSES)[np.arange(BATCH) % CLASSES]
    np.testing.assert_array_equal(generator.forward(x, c), np.zeros((BATCH, WIDTH)))
    assert next(p.shape for p in generator.parameters.values()) == (INPUT + CLASSES, *((hidden or (WIDTH,))[:1]))


def test_the_label_enters_through_its_own_rows_of_the_first_weights():
    generator = InputGenerator(INPUT, WIDTH, CLASSES, hidden=(), seed=0)
    first = generator.net.modules[0]
    first.weights[:] = normal(np.random.default_rng(3), INPUT + CLASSES, WIDTH)
    x, c = normal(np.random.default_rng(0), BATCH, INPUT), np.eye(CLASSES)[np.arange(BATCH) % CLASSES]
    np.testing.assert_allclose(generator.predict(x, c), x @ first.weights[:INPUT] + c @ first.weights[INPUT:])


def test_pytorchs_start_draws_as_the_peers_forward_synthesizer_and_predicts_its_output_bias():
    """koz4k/dni-pytorch's BasicSynthesizer of x (784) and c (10), two hidden layers of 256: every nn.Linear drawn
    U(±1/√fan_in), c through a Linear of its own, the output's weights zero and its bias not."""
    generator = InputGenerator(784, 256, 10, hidden=(256, 256), init="pytorch", bias_init="pytorch", seed=0)
    first, second, out = (generator.net.modules[0].modules[0], generator.net.modules[1].modules[0],
                          generator.net.modules[2])
    for array, fan_in in ((first.weights[:784], 784), (first.weights[784:], 10), (second.weights, 256),
                          (second.bias, 256), (out.bias, 256)):
        assert 0.97 / np.sqrt(fan_in) < np.abs(array).max() <= 1 / np.sqrt(fan_in)
        assert abs(array.std() - 1 / np.sqrt(3 * fan_in)) < 0.1 / np.sqrt(fan_in)
    assert abs(first.bias.std() - np.sqrt(1 / (3 * 784) + 1 / (3 * 10))) < 0.02
    np.testing.assert_array_equal(out.weights, np.zeros((256, 256)))
    x, c = normal(np.random.default_rng(0), 5, 784), np.eye(10)[:5]
    np.testing.assert_array_equal(generator.forward(x, c), np.broadcast_to(out.bias, (5, 256)))


def test_the_default_start_draws_the_hidden_weights_as_init_says_and_no_bias():
    generator = InputGenerator(INPUT, WIDTH, CLASSES, hidden=(7,), init="pytorch", seed=2)
    block = dense_block(INPUT + CLASSES, 7, "relu", batchnorm=False, init="pytorch", seed=2)
    np.testing.assert_array_equal(generator.net.modules[0].modules[0].weights, block.modules[0].weights)
    np.testing.assert_array_equal(generator.net.modules[0].modules[0].bias, np.zeros(7))
    with pytest.raises(ValueError, match="unknown bias_init 'he'; choose one of 'zeros', 'pytorch'"):
        InputGenerator(INPUT, WIDTH, bias_init="he")

def test_same_seed_same_parameters_and_another_seed_others():
    a, b, other = (InputGenerator(INPUT, WIDTH, hidden=(7,), seed=s) for s in (4, 4, 5))
    for name in a.parameters:
        np.testing.assert_array_equal(a.parameters[name], b.parameters[name])
    assert not np.array_equal(a.parameters["0.0.weights"], other.parameters["0.0.weights"])


def test_update_returns_the_loss_before_the_step_and_sgd_lowers_it():
    rng = np.random.default_rng(0)
    generator = InputGenerator(INPUT, WIDTH, 2, hidden=(7,), rng=rng)
    randomize(generator.parameters, rng)
    x, c, h = normal(rng, BATCH, INPUT), normal(rng, BATCH, 2), normal(rng, BATCH, WIDTH)
    before = generator.forward(x, c).copy()
    assert generator.update(h, 0.05) == pytest.approx(np.mean((before - h) ** 2), rel=1e-12)
    assert mean_squared_error(generator.predict(x, c), h)[0] < mean_squared_error(before, h)[0]


@pytest.mark.parametrize("batchnorm", [False, True], ids=["plain", "batchnorm"])
def test_repeated_updates_fit_the_real_activation_a_hundredfold(batchnorm):
    """h a fixed function of (x, c): I, given both, learns it; Adam at 1e-2, 300 steps."""
    rng = np.random.default_rng(0)
    x = normal(rng, 32, INPUT)
    c = np.eye(CLASSES)[rng.integers(0, CLASSES, 32)]
    h = np.tanh(x @ normal(rng, INPUT, WIDTH)) + c @ normal(rng, CLASSES, WIDTH)
    generator = InputGenerator(INPUT, WIDTH, CLASSES, hidden=(32, 32), batchnorm=batchnorm, update_rule="adam",
                               seed=0)
    losses = []
    for _ in range(300):
        generator.forward(x, c)
        losses.append(generator.update(h, 1e-2))
    assert losses[-1] < losses[0] / 100, (losses[0], losses[-1])


@given(dtype=dtypes, rule=update_rules, seed=seeds)
def test_keeps_its_dtype_through_an_update(dtype, rule, seed):
    rng = np.random.default_rng(seed)
    generator = InputGenerator(INPUT, WIDTH, 2, hidden=(4,), batchnorm=True, update_rule=rule, rng=rng, dtype=dtype)
    x, c = normal(rng, BATCH, INPUT).astype(dtype), normal(rng, BATCH, 2).astype(dtype)
    h_hat = generator.forward(x, c)
    generator.update(normal(rng, BATCH, WIDTH).astype(dtype), 1e-3)
    assert h_hat.dtype == dtype
    assert all(p.dtype == dtype for p in generator.parameters.values())


def test_it_is_a_module_of_the_tree_and_at_sgrads_front():
    generator = sgrad.InputGenerator(INPUT, WIDTH, hidden=(7,), batchnorm=True, seed=0)
    assert "InputGenerator" in sgrad.__all__
    assert [path for path, _ in generator.submodules()][:2] == ["", "net"]
    generator.eval()
    assert all(not module.training for _, module in generator.submodules())


# --- bad input, refused before anything changes -----------------------------------------------------


def _fresh():
    generator = InputGenerator(INPUT, WIDTH, 2, hidden=(7,), batchnorm=True, seed=0)
    rng = np.random.default_rng(1)
    return generator, normal(rng, BATCH, INPUT), normal(rng, BATCH, 2)


@pytest.mark.parametrize("x, c, error, message", [
    (lambda x: x[:, :-1], lambda c: c, ValueError, r"x must have shape \(batch, 6\) \(6 = the input generator's "
                                                    r"input_dim\); got shape \(8, 5\)"),
    (lambda x: x[0], lambda c: c, ValueError, r"For a single example use x.reshape\(1, -1\)"),
    (lambda x: x.astype(np.float32), lambda c: c, TypeError,
     r"x must have the input generator's dtype, float64; got float32. Pass x.astype\(np.float64\)"),
    (lambda x: np.where(x > 1, np.nan, x), lambda c: c, ValueError, "x holds NaN or inf"),
    (lambda x: x.astype(int), lambda c: c, TypeError, "x must hold floats"),
    (lambda x: x, lambda c: None, ValueError, r"this input generator is conditioned \(condition_dim=2\): pass "
                                              "condition=c"),
    (lambda x: x, lambda c: c[:-1], ValueError, "condition must have one row per example: the input has 8 rows"),
    (lambda x: x[:1], lambda c: c[:1], ValueError, "batch norm in training mode needs a batch of at least 2 rows"),
])
def test_bad_x_or_condition_is_refused_before_anything_is_remembered(x, c, error, message):
    generator, good_x, good_c = _fresh()
    before = tree_state(generator)
    calls = ["forward"] if "batch norm" in message else ["forward", "predict"]  # predict takes one row
    for call in calls:
        with pytest.raises(error, match=message):
            getattr(generator, call)(x(good_x), c(good_c))
    assert_same_state(generator, before)


def test_an_unconditioned_generator_refuses_a_condition():
    generator = InputGenerator(INPUT, WIDTH, seed=0)
    with pytest.raises(ValueError, match=r"unconditioned \(condition_dim=0\) but a condition was given"):
        generator.forward(np.zeros((BATCH, INPUT)), np.zeros((BATCH, 2)))


@pytest.mark.parametrize("h, alpha, error, message", [
    (lambda h: h[:, :-1], 0.1, ValueError, r"h must have shape \(batch, 5\) \(5 = the width of the last synthetic "
                                           r"input\); got shape \(8, 4\)"),
    (lambda h: h[:-1], 0.1, ValueError, r"h must have the shape of the last synthetic input, \(8, 5\); got shape "
                                        r"\(7, 5\)"),
    (lambda h: h.astype(np.float32), 0.1, TypeError, "h must have the dtype of the last synthetic input, float64"),
    (lambda h: np.full_like(h, np.inf), 0.1, ValueError, "h holds NaN or inf"),
    (lambda h: h, -1.0, ValueError, "alpha"),
])
def test_a_bad_real_activation_or_rate_is_refused_and_changes_nothing(h, alpha, error, message):
    generator, x, c = _fresh()
    generator.forward(x, c)
    before = tree_state(generator)
    with pytest.raises(error, match=message):
        generator.update(h(normal(np.random.default_rng(2), BATCH, WIDTH)), alpha)
    assert_same_state(generator, before)


def test_an_update_needs_a_forward_first_and_only_one_per_forward():
    generator, x, c = _fresh()
    h = normal(np.random.default_rng(2), BATCH, WIDTH)
    with pytest.raises(ValueError, match=r"update\(h\) needs a synthetic input to correct; call forward\(x\) first"):
        generator.update(h, 0.1)
    generator.forward(x, c)
    generator.update(h, 0.1)
    before = tree_state(generator)
    with pytest.raises(ValueError, match=r"update\(\) after update\(\).*call forward\(x\) again first"):
        generator.update(h, 0.1)
    assert_same_state(generator, before)


def test_a_late_real_activation_is_regressed_onto_at_its_own_batch_which_counts_once_in_the_running_averages():
    """A pipeline's worker: batch 1's h comes after the generator has predicted for batch 2."""
    rng = np.random.default_rng(3)
    generator = InputGenerator(INPUT, WIDTH, 2, hidden=(7,), batchnorm=True, rng=rng)
    x1, c1, x2, c2 = normal(rng, BATCH, INPUT), normal(rng, BATCH, 2), normal(rng, BATCH, INPUT), normal(rng, BATCH, 2)
    h1 = normal(rng, BATCH, WIDTH)
    on_time = copy.deepcopy(generator)
    on_time.forward(x1, c1)
    generator.forward(x1, c1)
    generator.forward(x2, c2)
    running = {name: value for name, value in tree_state(generator).items() if "running" in name}
    assert running and generator.update(h1, 0.05, x=x1, condition=c1) == on_time.update(h1, 0.05)
    for name, value in tree_state(generator).items():  # the step is the on-time step, bit for bit
        if "running" in name:  # batch 1 counted once, when it was predicted for; batch 2 too
            np.testing.assert_array_equal(value, running[name], err_msg=name)
        else:
            np.testing.assert_array_equal(value, tree_state(on_time)[name], err_msg=name)


def test_a_late_real_activation_that_is_refused_changes_nothing():
    generator, x, c = _fresh()
    generator.forward(x, c)
    generator.forward(normal(np.random.default_rng(4), BATCH, INPUT), c)
    before = tree_state(generator)
    with pytest.raises(ValueError, match="h holds NaN or inf"):
        generator.update(np.full((BATCH, WIDTH), np.nan), 0.1, x=x, condition=c)
    assert_same_state(generator, before)


@pytest.mark.parametrize("options, error, message", [
    ({"input_dim": 0}, ValueError, "input_dim"),
    ({"output_dim": 2.5}, TypeError, "output_dim"),
    ({"condition_dim": -1}, ValueError, "condition_dim"),
    ({"hidden": (4, 0)}, ValueError, "hidden"),
    ({"dtype": np.int32}, TypeError, "dtype"),
    ({"init": "nonsense"}, ValueError, "init"),
])
def test_bad_settings_are_refused_when_it_is_built(options, error, message):
    settings = {"input_dim": INPUT, "output_dim": WIDTH, **options}
    with pytest.raises(error, match=message):
        InputGenerator(**settings)


# --- the complete unlock's step -----------------------------------------------------------------------


def _stack(condition_dim=CLASSES, rule="adam", seed=0):
    """B_1 (Linear→BatchNorm, the interface before the ReLU, as the peer's), the top (ReLU→Linear), and I_1."""
    rng = np.random.default_rng(seed)
    block = DNIBlock(Sequential(dense_block(INPUT, WIDTH, update_rule=rule, rng=rng).modules[:2]),
                     MLPGenerator(WIDTH, condition_dim, hidden=(7,), batchnorm=False, update_rule=rule, rng=rng),
                     1e-2)
    top = Sequential([sgrad.Activation("relu"), Layer(WIDTH, CLASSES, "identity", update_rule=rule, rng=rng)])
    input_generator = InputGenerator(INPUT, WIDTH, condition_dim, hidden=(7,), update_rule=rule, rng=rng)
    for module in (block.generator, input_generator):  # off the zero start, so that every part shows
        randomize(module.parameters, rng)
    return [block, top], [input_generator]


def _batch(seed=1, rows=BATCH):
    rng = np.random.default_rng(seed)
    return normal(rng, rows, INPUT), np.eye(CLASSES)[rng.integers(0, CLASSES, rows)]


def mean_ce(output, y):
    return softmax_cross_entropy(output, y, reduction="mean")


def test_the_step_trains_the_top_on_the_synthetic_input_and_each_generator_on_its_target():
    """What koz4k/dni-pytorch's BidirectionalInterface does: the block descends ĝ = M(h, c) at the real h; the top
    trains on ĥ = I(x, c); M regresses M(ĥ, c) onto dL/dĥ; I regresses ĥ onto the real h."""
    layers, (generator,) = _stack()
    x, y = _batch()
    before_layers, before_generator = copy.deepcopy(layers), copy.deepcopy(generator)
    h_hat = before_generator.predict(x, y)
    h = copy.deepcopy(before_layers[0]).forward(x)
    g_hat = before_layers[0].generator.predict(h, y)
    top = copy.deepcopy(before_layers[1])
    loss, dlogits = mean_ce(top.forward(h_hat), y)
    g_at_h_hat = top.backward(dlogits)
    g_hat_at_h_hat = before_layers[0].generator.predict(h_hat, y)

    step_loss, generator_losses, input_losses = complete_unlock_step(layers, [generator], x, y, mean_ce, 1e-2, 1e-2,
                                                                     condition=y)
    assert step_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(layers[1].modules[1].input, np.maximum(h_hat, 0), rtol=1e-12)  # the top took ĥ
    np.testing.assert_allclose(layers[0].synthetic_gradient, g_hat, rtol=1e-12)  # the block's ĝ, at the real h
    np.testing.assert_allclose(layers[0].generator.input, np.concatenate([h_hat, y], axis=1), rtol=1e-12)
    assert generator_losses == [pytest.approx(regression_loss(g_hat_at_h_hat, g_at_h_hat)[0], rel=1e-10)]
    assert input_losses == [pytest.approx(np.mean((h_hat - h) ** 2), rel=1e-12)]
    # Every part stepped.
    for now, then in ((layers[0], before_layers[0]), (layers[1], before_layers[1]), (generator, before_generator),
                      (layers[0].generator, before_layers[0].generator)):
        assert any(not np.array_equal(now.parameters[k], then.parameters[k]) for k in then.parameters)


def test_the_block_learns_from_its_synthetic_gradient_as_a_dni_step_does():
    layers, generators = _stack()
    twin = copy.deepcopy(layers[0])
    x, y = _batch()
    complete_unlock_step(layers, generators, x, y, mean_ce, 1e-2, 1e-2, condition=y)
    twin.forward_and_update(x, y, input_delta=False)
    for name, value in twin.parameters.items():
        np.testing.assert_array_equal(layers[0].parameters[name], value, err_msg=name)


def test_two_interfaces_feed_each_layer_above_the_bottom_its_own_synthetic_input():
    rng = np.random.default_rng(0)
    blocks = [DNIBlock(dense_block(a, WIDTH, update_rule="adam", rng=rng),
                       MLPGenerator(WIDTH, hidden=(7,), batchnorm=False, update_rule="adam", rng=rng), 1e-2)
              for a in (INPUT, WIDTH)]
    top = Layer(WIDTH, CLASSES, "identity", update_rule="adam", rng=rng)
    generators = [InputGenerator(INPUT, WIDTH, hidden=(7,), update_rule="adam", rng=rng) for _ in range(2)]
    for generator in generators:
        randomize(generator.parameters, rng)
    x, y = _batch()
    h_hats = [copy.deepcopy(g).predict(x) for g in generators]
    _, generator_losses, input_losses = complete_unlock_step(blocks + [top], generators, x, y, mean_ce, 1e-2, 1e-2)
    np.testing.assert_allclose(blocks[1].block.modules[0].input, h_hats[0], rtol=1e-12)
    np.testing.assert_allclose(top.input, h_hats[1], rtol=1e-12)
    assert len(generator_losses) == len(input_losses) == 2


@pytest.mark.parametrize("change, error, message", [
    (lambda layers, generators, x, y, c: (layers, generators + generators, x, y, c), ValueError,
     r"one input generator per DNI block: the stack has 1 block\(s\) below its top, and 2 input generator\(s\) came"),
    (lambda layers, generators, x, y, c: (layers, [InputGenerator(INPUT, WIDTH + 1, CLASSES, seed=0)], x, y, c),
     ValueError, "input generator 1 predicts 6 features, but layer 1 gives h_1 of 5; build it with output_dim=5"),
    (lambda layers, generators, x, y, c: ([layers[0].block] + layers[1:], generators, x, y, c), TypeError,
     "layer 1 must be a DNI block"),
    (lambda layers, generators, x, y, c: (layers, generators, x[:, :-1], y, c), ValueError,
     r"x must have shape \(batch, 6\)"),
    (lambda layers, generators, x, y, c: (layers, generators, x.astype(np.float32), y, c), TypeError,
     "x must have the input generator's dtype"),
    (lambda layers, generators, x, y, c: (layers, generators, x, y, None), ValueError,
     r"this input generator is conditioned \(condition_dim=3\)"),
    (lambda layers, generators, x, y, c: (layers, generators, x, y[:-1], c), ValueError,
     "y must have one row per example: x has 8 rows, y has 7"),
    (lambda layers, generators, x, y, c: (layers, generators, x[:1], y[:1], c[:1]), ValueError,
     "batch norm in training mode needs a batch of at least 2 rows"),
])
def test_bad_input_to_the_step_is_refused_before_anything_changes(change, error, message):
    layers, generators = _stack()
    x, y = _batch()
    before = [tree_state(module) for module in layers + generators]
    args = change(layers, generators, x, y, y)
    with pytest.raises(error, match=message):
        complete_unlock_step(args[0], args[1], args[2], args[3], mean_ce, 1e-2, 1e-2, condition=args[4])
    for module, state in zip(layers + generators, before):
        assert_same_state(module, state)


def test_a_condition_that_the_blocks_generator_does_not_take_is_refused_before_anything_changes():
    layers, _ = _stack(condition_dim=0)
    generators = [InputGenerator(INPUT, WIDTH, CLASSES, hidden=(7,), seed=0)]  # conditioned, the block's M is not
    x, y = _batch()
    before = [tree_state(module) for module in layers + generators]
    with pytest.raises(ValueError, match=r"layer 1's DNI is unconditioned \(condition_dim=0\)"):
        complete_unlock_step(layers, generators, x, y, mean_ce, 1e-2, 1e-2, condition=y)
    for module, state in zip(layers + generators, before):
        assert_same_state(module, state)


# --- a completely unlocked net learns -------------------------------------------------------------------


def _teacher_problem(rows, seed):
    """Points in 10 dimensions labelled by the largest of 3 outputs of a fixed random two-layer ReLU net."""
    teacher = np.random.default_rng(100)
    w1, w2 = teacher.standard_normal((10, 16)), teacher.standard_normal((16, 3))
    x = np.random.default_rng(seed).standard_normal((rows, 10))
    labels = (np.maximum(x @ w1, 0) @ w2).argmax(axis=1)
    return x, labels


@pytest.mark.parametrize("conditioned", [False, True], ids=["complete", "ccomplete"])
def test_a_completely_unlocked_net_learns_a_small_problem(conditioned):
    """10-32-3, the interface on the block's batch norm, before the ReLU (the peer's place); 1,500 steps of 32 at
    Adam 1e-3 (about 5 s).  Measured: test accuracy 0.894 unconditioned and 0.904 given the label, where a softmax
    regression on x reaches 0.823 and the most frequent class is 0.577; L_I falls from 0.98 to 0.08 (the mean of
    the first 10 steps, then of the last 100).  The test runs the real forward path."""
    x_train, labels = _teacher_problem(2000, 0)
    x_test, test_labels = _teacher_problem(1000, 1)
    onehot = np.eye(3)
    rng = np.random.default_rng(0)
    condition_dim = 3 if conditioned else 0
    block = DNIBlock(Sequential(dense_block(10, 32, update_rule="adam", rng=rng).modules[:2]),
                     MLPGenerator(32, condition_dim, hidden=(32,), batchnorm=False, update_rule="adam", rng=rng), 1e-3)
    top = Sequential([sgrad.Activation("relu"), Layer(32, 3, "identity", update_rule="adam", rng=rng)])
    generator = InputGenerator(10, 32, condition_dim, hidden=(32, 32), update_rule="adam", rng=rng)
    input_losses = []
    for _ in range(1500):
        rows = rng.integers(0, len(x_train), 32)
        y = onehot[labels[rows]]
        _, _, (input_loss,) = complete_unlock_step([block, top], [generator], x_train[rows], y, mean_ce, 1e-3, 1e-3,
                                                   condition=y if conditioned else None)
        input_losses.append(input_loss)
    block.eval(), top.eval()
    accuracy = float(np.mean(top.predict(block.predict(x_test)).argmax(axis=1) == test_labels))
    assert accuracy >= 0.86, accuracy  # above what a linear classifier on x reaches
    assert np.mean(input_losses[-100:]) < np.mean(input_losses[:10]) / 5, (input_losses[:10], input_losses[-100:])
