"""Properties over random shapes, nonlinearities and dtypes, drawn by Hypothesis.

1. Every backward pass agrees with central differences, in float64: Layer, the layer part of a DNI
   step, BatchNorm, blocks, the generators (parameter and input gradients) and the losses.
2. float32 in, float32 out: forward outputs, backward deltas, parameter gradients, updated
   parameters, optimizer state and generator outputs keep the dtype they were given.

Shapes go down to a batch of one (two where batch norm trains).  Each test draws a seed and builds
its arrays from it, so a failure prints the seed and the shapes that reproduce it.  The number of
examples comes from the Hypothesis profile in conftest.py.
"""

import copy

import numpy as np
from conftest import numerical_gradient, relative_error
from hypothesis import assume, given
from hypothesis import strategies as st

from sgrad import (DNI, Activation, BatchNorm, DNIBlock, Layer, LinearGenerator, MLPGenerator, Sequential,
                   SyntheticLossGenerator, bce_with_logits, dense_block, mse, softmax_cross_entropy)
from sgrad.generators import regression_loss
from sgrad.kernels import dense_forward
from sgrad.nonlinearities import NONLINEARITIES

TOLERANCE = 1e-6  # relative error: a correct float64 gradient is near 1e-9; a wrong one is off by far more
# Where the true gradient is itself tiny (batch norm over two rows nearly cancels it), the rounding
# error of the central difference, about 1e-16 * |L| / eps = 1e-10 * |L|, dominates the relative
# error: accept an absolute difference below this many times max(|L|, 1) instead.
ROUNDING_TOLERANCE = 1e-8
KINK = 1e-4  # ReLU is not differentiable at 0: keep pre-activations this far from it (eps is 1e-6)

seeds = st.integers(0, 2**32 - 1)
widths = st.integers(1, 4)
batches = st.integers(1, 5)
nonlinearities = st.sampled_from(sorted(NONLINEARITIES))
dtypes = st.sampled_from([np.float32, np.float64])
update_rules = st.sampled_from(["sgd", "momentum", "adam"])
hidden_widths = st.lists(st.integers(1, 4), max_size=2).map(tuple)


def normal(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def randomize(parameters, rng):
    """Give every parameter random values in place (zero-initialised output layers would hide gradients)."""
    for param in parameters.values():
        param[...] = 0.5 * rng.standard_normal(param.shape)


def assert_gradients_match(loss, mine, arrays, what):
    """Compare each analytic gradient in ``mine`` with the central difference of ``loss()`` in ``arrays``."""
    rounding = ROUNDING_TOLERANCE * max(abs(loss()), 1.0)
    for name, array in arrays.items():
        theirs = numerical_gradient(loss, array)
        error = relative_error(mine[name], theirs)
        difference = float(np.max(np.abs(np.asarray(mine[name], dtype=np.float64) - theirs)))
        assert error < TOLERANCE or difference < rounding, (
            f"{what}, dL/d{name}: relative error {error:.1e} (largest difference {difference:.1e}) "
            "between backward and central differences\n"
            f"  backward (mine):      {np.ravel(mine[name])[:6]}\n"
            f"  central differences:  {np.ravel(theirs)[:6]}")


def activation_inputs(module, x):
    """What each Activation inside ``module`` receives for input ``x`` (run with predict: no side effects)."""
    found = []

    def run(part, value):
        if isinstance(part, Sequential):
            for sub in part.modules:
                value = run(sub, value)
            return value
        if isinstance(part, Activation):
            found.append(value)
        return part.predict(value)

    run(module, x)
    return found


def away_from_kinks(module, x):
    return all(np.min(np.abs(z)) > KINK for z in activation_inputs(module, x))


# --- 1. backward passes against central differences (float64) ---------------------------------


@given(batch=batches, input_dim=widths, output_dim=widths, nonlin=nonlinearities, seed=seeds)
def test_layer_backward_matches_central_differences(batch, input_dim, output_dim, nonlin, seed):
    rng = np.random.default_rng(seed)
    layer = Layer(input_dim, output_dim, nonlin, rng=rng)
    randomize(layer.parameters, rng)
    x, R = normal(rng, batch, input_dim), normal(rng, batch, output_dim)
    assume(nonlin != "relu" or np.min(np.abs(x @ layer.weights + layer.bias)) > KINK)

    layer.forward(x)
    input_delta = layer.backward(R)
    mine = dict(layer.gradients, input=input_delta)
    assert_gradients_match(lambda: float(np.sum(layer.forward(x) * R)), mine, dict(layer.parameters, input=x),
                           f"{nonlin} Layer({input_dim}, {output_dim}), batch {batch}")


@given(batch=batches, input_dim=widths, output_dim=widths, condition_dim=st.integers(0, 2), nonlin=nonlinearities,
       seed=seeds)
def test_dni_step_descends_on_the_central_difference_gradient_of_its_synthetic_loss(
        batch, input_dim, output_dim, condition_dim, nonlin, seed):
    """With ĝ held fixed, the step is plain descent on L = sum(h * ĝ): check the input delta and the weight change."""
    rng = np.random.default_rng(seed)
    alpha = 0.1
    layer = DNI(input_dim, output_dim, nonlin, alpha=alpha, condition_dim=condition_dim, generator_init="blog",
                rng=rng)
    randomize(layer.parameters, rng)
    x = normal(rng, batch, input_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    start = {name: param.copy() for name, param in layer.parameters.items()}
    assume(nonlin != "relu" or np.min(np.abs(x @ start["weights"] + start["bias"])) > KINK)
    g_hat = layer.generator.predict(dense_forward(x, start["weights"], start["bias"], layer.nonlin), c)

    input_delta, _ = layer.forward_and_synthetic_update(x, c)
    mine = {name: (start[name] - param) / alpha for name, param in layer.parameters.items()}
    mine["input"] = input_delta
    assert_gradients_match(lambda: float(np.sum(dense_forward(x, start["weights"], start["bias"], layer.nonlin) * g_hat)),
                           mine, dict(start, input=x), f"{nonlin} DNI({input_dim}, {output_dim}), c of {condition_dim}")


@given(batch=st.integers(2, 5), features=widths, training=st.booleans(), seed=seeds)
def test_batchnorm_backward_matches_central_differences(batch, features, training, seed):
    rng = np.random.default_rng(seed)
    norm = BatchNorm(features)
    randomize(norm.parameters, rng)
    norm.running_mean[:], norm.running_var[:] = rng.standard_normal(features), rng.uniform(0.5, 2.0, features)
    norm.train(training)
    x, R = normal(rng, batch, features), normal(rng, batch, features)
    assume(np.min(x.var(axis=0)) > 1e-3)  # keep the batch variance well above eps, where it is well conditioned

    norm.forward(x)
    input_delta = norm.backward(R)
    mine = dict(norm.gradients, input=input_delta)
    assert_gradients_match(lambda: float(np.sum(norm.forward(x) * R)), mine, dict(norm.parameters, input=x),
                           f"BatchNorm({features}), {'training' if training else 'evaluation'} mode, batch {batch}")


@given(batch=st.integers(2, 5), input_dim=widths, output_dim=widths, nonlin=nonlinearities, batchnorm=st.booleans(),
       seed=seeds)
def test_dense_block_backward_matches_central_differences(batch, input_dim, output_dim, nonlin, batchnorm, seed):
    rng = np.random.default_rng(seed)
    block = dense_block(input_dim, output_dim, nonlin, batchnorm=batchnorm, rng=rng)
    randomize(block.parameters, rng)
    x, R = normal(rng, batch, input_dim), normal(rng, batch, output_dim)
    assume(nonlin != "relu" or away_from_kinks(block, x))
    if batchnorm:
        assume(np.min(block.modules[0].predict(x).var(axis=0)) > 1e-3)

    block.forward(x)
    input_delta = block.backward(R)
    mine = dict(block.gradients, input=input_delta)
    assert_gradients_match(lambda: float(np.sum(block.forward(x) * R)), mine, dict(block.parameters, input=x),
                           f"{block!r}, batch {batch}")


def make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng, dtype=np.float64):
    if kind == "linear":
        return LinearGenerator(output_dim, condition_dim, rng=rng, dtype=dtype)
    make = MLPGenerator if kind == "mlp" else SyntheticLossGenerator
    return make(output_dim, condition_dim, hidden=hidden, batchnorm=batchnorm, rng=rng, dtype=dtype)


generator_kinds = st.sampled_from(["linear", "mlp", "synthetic-loss"])


@given(kind=generator_kinds, batch=batches, output_dim=widths, condition_dim=st.integers(0, 2), hidden=hidden_widths,
       batchnorm=st.booleans(), seed=seeds)
def test_generator_parameter_gradients_match_central_differences(kind, batch, output_dim, condition_dim, hidden,
                                                                 batchnorm, seed):
    """``gradients`` after ``update`` are dL_M/d(parameter) for L_M = 1/(2 batch) sum((prediction - target)**2)."""
    assume(batch >= 2 or not (batchnorm and hidden and kind != "linear"))
    rng = np.random.default_rng(seed)
    generator = make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng)
    randomize(generator.parameters, rng)
    h = normal(rng, batch, output_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    joined = h if c is None else np.hstack([h, c])
    assume(away_from_kinks(generator.net, joined))
    target_width = 1 if kind == "synthetic-loss" else output_dim
    target = np.abs(normal(rng, batch, target_width))
    probe = copy.deepcopy(generator)

    def loss():
        probe.forward(h, c)
        prediction = probe.predicted_loss if kind == "synthetic-loss" else probe.synthetic_gradient
        return regression_loss(prediction, target)[0]

    generator.forward(h, c)
    generator.update(target, 0.1)
    assert_gradients_match(loss, generator.gradients, probe.parameters,
                           f"{kind} generator, hidden {hidden}, batch norm {batchnorm}, c of {condition_dim}")


@given(kind=st.sampled_from(["linear", "mlp"]), batch=batches, output_dim=widths, condition_dim=st.integers(0, 2),
       hidden=hidden_widths, batchnorm=st.booleans(), seed=seeds)
def test_generator_input_gradient_matches_central_differences(kind, batch, output_dim, condition_dim, hidden,
                                                              batchnorm, seed):
    """The generator's net backpropagates dL_M/dĝ to its input [h, c]."""
    assume(batch >= 2 or not (batchnorm and hidden and kind == "mlp"))
    rng = np.random.default_rng(seed)
    generator = make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng)
    randomize(generator.parameters, rng)
    h = normal(rng, batch, output_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    assume(away_from_kinks(generator.net, h if c is None else np.hstack([h, c])))
    target = normal(rng, batch, output_dim)

    def loss():
        return regression_loss(generator.forward(h, c), target)[0]

    dinput = generator.net.backward(regression_loss(generator.forward(h, c), target)[1])
    mine = {"h": dinput[:, :output_dim]}
    arrays = {"h": h}
    if c is not None:
        mine["c"], arrays["c"] = dinput[:, output_dim:], c
    assert_gradients_match(loss, mine, arrays, f"{kind} generator, hidden {hidden}, batch norm {batchnorm}")


@given(batch=batches, output_dim=widths, condition_dim=st.integers(0, 2), hidden=hidden_widths,
       batchnorm=st.booleans(), seed=seeds)
def test_synthetic_loss_gradient_is_the_central_difference_of_the_mean_predicted_loss(
        batch, output_dim, condition_dim, hidden, batchnorm, seed):
    """SyntheticLossGenerator's ĝ is dL̂/dh with L̂ the batch mean of the predicted loss ℓ̂."""
    assume(batch >= 2 or not (batchnorm and hidden))
    rng = np.random.default_rng(seed)
    generator = SyntheticLossGenerator(output_dim, condition_dim, hidden=hidden, batchnorm=batchnorm, rng=rng)
    randomize(generator.parameters, rng)
    h = normal(rng, batch, output_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    assume(away_from_kinks(generator.net, h if c is None else np.hstack([h, c])))

    def mean_predicted_loss():
        generator.forward(h, c)
        return float(generator.predicted_loss.mean())

    g_hat = generator.forward(h, c).copy()
    assert_gradients_match(mean_predicted_loss, {"h": g_hat}, {"h": h}, f"synthetic-loss generator, hidden {hidden}")


def loss_case(name, rng, batch, width):
    """``(loss function, its second argument)`` for one of the losses."""
    if name == "mse":
        return mse, normal(rng, batch, width)
    if name == "bce":
        return bce_with_logits, rng.uniform(0, 1, (batch, width))
    if name == "softmax_ce, class indices":
        return softmax_cross_entropy, rng.integers(0, width, batch)
    return softmax_cross_entropy, rng.dirichlet(np.ones(width), batch)  # probability rows


loss_names = st.sampled_from(["mse", "bce", "softmax_ce, class indices", "softmax_ce, probability rows"])


@given(name=loss_names, reduction=st.sampled_from(["mean", "sum", "none"]), batch=batches, width=widths, seed=seeds)
def test_loss_gradient_matches_central_differences(name, reduction, batch, width, seed):
    rng = np.random.default_rng(seed)
    loss_fn, target = loss_case(name, rng, batch, width)
    prediction = 3 * normal(rng, batch, width)

    def total():  # for reduction="none" the gradient is that of the sum of the per-example losses
        return float(np.sum(loss_fn(prediction, target, reduction)[0]))

    _, gradient = loss_fn(prediction, target, reduction)
    assert_gradients_match(total, {"prediction": gradient}, {"prediction": prediction},
                           f"{name}, reduction {reduction!r}, shape {prediction.shape}")


# --- 2. dtypes: what comes in float32 stays float32 ----------------------------------------------


def assert_dtype(dtype, **arrays):
    for name, array in arrays.items():
        assert array.dtype == dtype, f"{name} is {array.dtype}; expected {np.dtype(dtype)}, the dtype it was given"


def float_state(update_state):
    """The floating arrays of an optimizer state (Adam's step counter is an integer by design)."""
    return {f"state {name}": array for name, array in update_state.items() if array.dtype.kind == "f"}


def leaf_modules(module):
    """The modules inside nested Sequential blocks, in order."""
    if isinstance(module, Sequential):
        return [leaf for part in module.modules for leaf in leaf_modules(part)]
    return [module]


def assert_parameters_and_state(dtype, module, what):
    for name, param in module.parameters.items():
        assert_dtype(dtype, **{f"{what} {name}": param})
    for name, state in getattr(module, "update_state", {}).items():
        assert_dtype(dtype, **{f"{what} {name} {key}": value for key, value in float_state(state).items()})


@given(dtype=dtypes, batch=batches, input_dim=widths, output_dim=widths, nonlin=nonlinearities, rule=update_rules,
       seed=seeds)
def test_layer_keeps_its_dtype_through_a_training_step(dtype, batch, input_dim, output_dim, nonlin, rule, seed):
    rng = np.random.default_rng(seed)
    layer = Layer(input_dim, output_dim, nonlin, update_rule=rule, rng=rng, dtype=dtype)
    output = layer.forward(normal(rng, batch, input_dim, dtype=dtype))
    input_delta = layer.backward(normal(rng, batch, output_dim, dtype=dtype))
    assert_dtype(dtype, output=output, input_delta=input_delta, weight_output_delta=layer.weight_output_delta,
                 prediction=layer.predict(normal(rng, batch, input_dim, dtype=dtype)),
                 **{f"gradient of {k}": g for k, g in layer.gradients.items()})
    layer.update(0.1)
    assert_parameters_and_state(dtype, layer, "layer")


@given(dtype=dtypes, batch=batches, input_dim=widths, output_dim=widths, condition_dim=st.integers(0, 2),
       nonlin=nonlinearities, rule=update_rules, seed=seeds)
def test_dni_keeps_its_dtype_through_a_step(dtype, batch, input_dim, output_dim, condition_dim, nonlin, rule, seed):
    rng = np.random.default_rng(seed)
    layer = DNI(input_dim, output_dim, nonlin, condition_dim=condition_dim, generator_init="blog", update_rule=rule,
                rng=rng, dtype=dtype)
    c = normal(rng, batch, condition_dim, dtype=dtype) if condition_dim else None
    input_delta, output = layer.forward_and_synthetic_update(normal(rng, batch, input_dim, dtype=dtype), c)
    layer.update_synthetic_weights(normal(rng, batch, output_dim, dtype=dtype))
    assert_dtype(dtype, input_delta=input_delta, output=output, synthetic_gradient=layer.synthetic_gradient,
                 **{f"generator gradient of {k}": g for k, g in layer.generator.gradients.items()})
    assert_parameters_and_state(dtype, layer, "layer")
    assert_parameters_and_state(dtype, layer.generator.net, "generator")


@given(dtype=dtypes, batch=st.integers(2, 5), features=widths, rule=update_rules, seed=seeds)
def test_batchnorm_keeps_its_dtype_through_a_step(dtype, batch, features, rule, seed):
    rng = np.random.default_rng(seed)
    norm = BatchNorm(features, update_rule=rule, dtype=dtype)
    output = norm.forward(normal(rng, batch, features, dtype=dtype))
    input_delta = norm.backward(normal(rng, batch, features, dtype=dtype))
    assert_dtype(dtype, output=output, input_delta=input_delta, running_mean=norm.running_mean,
                 running_var=norm.running_var, **{f"gradient of {k}": g for k, g in norm.gradients.items()})
    norm.update(0.1)
    assert_parameters_and_state(dtype, norm, "batch norm")
    norm.eval()
    assert_dtype(dtype, evaluation_output=norm.forward(normal(rng, 1, features, dtype=dtype)))


@given(dtype=dtypes, kind=generator_kinds, batch=st.integers(2, 5), input_dim=widths, output_dim=widths,
       condition_dim=st.integers(0, 2), hidden=hidden_widths, batchnorm=st.booleans(), rule=update_rules, seed=seeds)
def test_dni_block_and_its_generator_keep_their_dtype(dtype, kind, batch, input_dim, output_dim, condition_dim,
                                                     hidden, batchnorm, rule, seed):
    rng = np.random.default_rng(seed)
    if kind == "synthetic-loss":
        condition_dim = 0
    block = dense_block(input_dim, output_dim, batchnorm=batchnorm, update_rule=rule, rng=rng, dtype=dtype)
    generator = make_generator(kind, output_dim, condition_dim, hidden, batchnorm, rng, dtype)
    randomize(generator.parameters, rng)
    decoupled = DNIBlock(block, generator, 0.1)
    c = normal(rng, batch, condition_dim, dtype=dtype) if condition_dim else None
    input_delta, output = decoupled.forward_and_synthetic_update(normal(rng, batch, input_dim, dtype=dtype), c)
    target_width = 1 if kind == "synthetic-loss" else output_dim
    decoupled.update_synthetic_weights(normal(rng, batch, target_width, dtype=dtype))
    arrays = dict(input_delta=input_delta, output=output, synthetic_gradient=decoupled.synthetic_gradient,
                  prediction=generator.predict(output, c),
                  **{f"block gradient of {k}": g for k, g in block.gradients.items() if g is not None},
                  **{f"generator gradient of {k}": g for k, g in generator.gradients.items()})
    if kind == "synthetic-loss":
        arrays["predicted_loss"] = generator.predicted_loss
    assert_dtype(dtype, **arrays)
    for where, module in (("block", block), ("generator", generator.net)):
        for k, part in enumerate(leaf_modules(module)):
            assert_parameters_and_state(dtype, part, f"{where} module {k}")


@given(dtype=dtypes, name=loss_names, reduction=st.sampled_from(["mean", "sum", "none"]), batch=batches,
       width=widths, seed=seeds)
def test_loss_gradient_keeps_the_dtype_of_the_prediction(dtype, name, reduction, batch, width, seed):
    rng = np.random.default_rng(seed)
    loss_fn, target = loss_case(name, rng, batch, width)
    if target.dtype.kind == "f":
        target = target.astype(dtype)
    value, gradient = loss_fn(normal(rng, batch, width, dtype=dtype), target, reduction)
    assert_dtype(dtype, gradient=gradient)
    if reduction == "none":
        assert_dtype(dtype, per_example_loss=value)


@given(dtype=dtypes, nonlin=nonlinearities, seed=seeds)
def test_nonlinearity_and_its_derivative_keep_the_dtype(dtype, nonlin, seed):
    f, out2deriv = NONLINEARITIES[nonlin]
    z = 10 * normal(np.random.default_rng(seed), 3, 4, dtype=dtype)
    assert_dtype(dtype, output=f(z), derivative=out2deriv(f(z)))
