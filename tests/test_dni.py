"""DNI (sgrad/dni/decoupled.py): the decoupled step ``synthetic_step``, the blog's ``DNI`` layer and ``DNIBlock``.

``synthetic_step`` is the DNI step written once, so each behaviour of the step is specified on it, for a
Layer and for a Linear→BatchNorm→ReLU block: the forward pass, ĝ = M(h, c), the input delta δ computed
with the parameters from before the update, one step of the module's update rule on ĝ's gradients, and
every check made before anything changes.  Its two halves (the forward pass, then ``update_module_from_synthetic_gradient``)
give it bit for bit, and a refused step leaves everything as it was.  ``DNI`` and ``DNIBlock`` are specified
by what they add: they run that step with their own alpha and keep ĝ, they train their generator with
generator_alpha (also on a late target, with the batch's h), they check a generator when it is attached, and
DNI's blog-style construction.  The last section runs the step over a convolutional block, whose h and ĝ are
feature maps.  Stacks of DNI layers (sgrad.dni.steps) are in test_steps.py.

The batch-size rule and train/eval over a DNI's tree are in test_module.py; bad arguments shared by the
whole public API (a cDNI without its condition, widths, NaN...) in test_bad_input.py.
"""

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import (RecordingGenerator, assert_dtype, assert_gradients_match, assert_same_state, assert_tree_dtype,
                      away_from_kinks, normal, random_batch, randomize, relative_error, tree_state)
from hypothesis import assume, given
from strategies import (MODULE_KINDS, batches, booleans, condition_dims, dtypes, module_kinds, nonlinearities, seeds,
                        update_rules, widths)

from sgrad import DNI, DNIBlock, Layer, LinearGenerator, MLPGenerator, dense_block, synthetic_step
from sgrad.dni.decoupled import update_module_from_synthetic_gradient
from sgrad.dni.generators import ConvGenerator
from sgrad.nn.batchnorm import BatchNorm
from sgrad.nn.conv import conv_block
from sgrad.nn.kernels import dense_forward

BATCH, IN, OUT, CONDITION = 6, 4, 5, 3
ALPHA = 0.1


def _x(seed=0, rows=BATCH, width=IN):
    return np.random.default_rng(seed).standard_normal((rows, width))


def _condition(seed=4, rows=BATCH, width=CONDITION):
    return np.random.default_rng(seed).standard_normal((rows, width))


def _module(kind, update_rule=None):
    """A tanh Layer with a non-zero bias, or the paper's Linear→BatchNorm→ReLU block: IN → OUT."""
    if kind == "dense_block":
        return dense_block(IN, OUT, "relu", batchnorm=True, update_rule=update_rule, seed=0)
    layer = Layer(IN, OUT, "tanh", update_rule=update_rule, seed=0)
    layer.bias[:] = np.random.default_rng(3).standard_normal(OUT)
    return layer


def _generator(condition_dim=CONDITION, init="blog"):
    """A linear generator with random weights and bias, so that every entry of ĝ is non-zero."""
    generator = LinearGenerator(OUT, condition_dim, init=init, seed=1)
    if init == "blog":
        generator.bias[:] = np.random.default_rng(2).standard_normal(OUT)
    return generator


def _reference_step(module, generator, x, condition, alpha=ALPHA):
    """What one synthetic step must do, done by hand on a copy of the module.

    h = f(x); ĝ = M(h, c); δ = ĝ backpropagated with the parameters before the update, and ĝ's gradients of
    the parameters; then one step of the module's update rule.
    """
    module = copy.deepcopy(module)
    before = {name: p.copy() for name, p in module.parameters.items()}
    h = module.forward(x)
    g_hat = generator.predict(h, condition)
    delta = module.backward(g_hat)
    gradients = {name: g.copy() for name, g in module.gradients.items()}
    module.update(alpha)
    return SimpleNamespace(before=before, h=h, g_hat=g_hat, delta=delta, gradients=gradients, module=module)


# --- synthetic_step: the DNI step, written once -------------------------------------------------


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_synthetic_step_returns_g_hat_backpropagated_with_the_pre_update_parameters(kind):
    module, generator = _module(kind), _generator()
    x, c = _x(), _condition()
    expected = _reference_step(module, generator, x, c)
    assert np.all(expected.g_hat != 0), "the test needs a non-zero ĝ"

    delta, h, g_hat = synthetic_step(module, generator, x, c, ALPHA)

    np.testing.assert_array_equal(h, expected.h)
    np.testing.assert_array_equal(g_hat, expected.g_hat)
    np.testing.assert_array_equal(delta, expected.delta)
    after = copy.deepcopy(module)
    after.forward(x)
    assert relative_error(delta, after.backward(g_hat)) > 1e-3, "δ must not come from the updated parameters"


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_synthetic_step_takes_one_descent_step_on_the_gradients_of_g_hat(kind):
    module, generator = _module(kind), _generator()
    x, c = _x(), _condition()
    expected = _reference_step(module, generator, x, c)

    synthetic_step(module, generator, x, c, ALPHA)

    for name, param in module.parameters.items():
        np.testing.assert_array_equal(param, expected.before[name] - ALPHA * expected.gradients[name], err_msg=name)
        assert np.any(param != expected.before[name]), f"{name} did not move"


@pytest.mark.parametrize("rule", ["momentum", "adam"])
@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_synthetic_step_steps_with_the_modules_own_update_rule(kind, rule):
    module, generator = _module(kind, update_rule=rule), _generator()
    x, c = _x(), _condition()
    expected = _reference_step(module, generator, x, c)
    synthetic_step(module, generator, x, c, ALPHA)
    for name, param in module.parameters.items():
        np.testing.assert_array_equal(param, expected.module.parameters[name], err_msg=name)


@given(kind=module_kinds, batch=batches, input_dim=widths, output_dim=widths,
       condition_dim=condition_dims, nonlin=nonlinearities, batchnorm=booleans, seed=seeds)
def test_synthetic_step_descends_on_the_central_difference_gradient_of_its_synthetic_loss(
        kind, batch, input_dim, output_dim, condition_dim, nonlin, batchnorm, seed):
    """With ĝ held fixed, the step is plain descent on L = sum(h * ĝ): check δ and every parameter's change."""
    assume(kind == "layer" or batch >= 2 or not batchnorm)
    rng = np.random.default_rng(seed)
    if kind == "layer":
        module = Layer(input_dim, output_dim, nonlin, rng=rng)
    else:
        module = dense_block(input_dim, output_dim, nonlin, batchnorm=batchnorm, rng=rng)
    randomize(module.parameters, rng)
    generator = LinearGenerator(output_dim, condition_dim, init="blog", rng=rng)
    x = normal(rng, batch, input_dim)
    c = normal(rng, batch, condition_dim) if condition_dim else None
    before = copy.deepcopy(module)
    assume(away_from_kinks(before, x))
    if kind == "dense_block" and batchnorm:
        assume(np.min(before.modules[0].predict(x).var(axis=0)) > 1e-3)
    g_hat = generator.predict(before.predict(x), c)

    delta, _, _ = synthetic_step(module, generator, x, c, ALPHA)

    mine = {name: (before.parameters[name] - param) / ALPHA for name, param in module.parameters.items()}
    mine["input"] = delta
    assert_gradients_match(lambda: float(np.sum(before.predict(x) * g_hat)), mine, dict(before.parameters, input=x),
                           f"synthetic step of {before!r}, c of {condition_dim}, batch {batch}")


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_synthetic_step_leaves_the_generators_parameters_alone(kind):
    module, generator = _module(kind), _generator()
    before = {name: p.copy() for name, p in generator.parameters.items()}
    synthetic_step(module, generator, _x(), _condition(), ALPHA)
    for name, param in generator.parameters.items():
        np.testing.assert_array_equal(param, before[name], err_msg=name)


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_a_zero_synthetic_gradient_moves_nothing(kind):
    module, generator = _module(kind), _generator(init="zeros")
    before = {name: p.copy() for name, p in module.parameters.items()}
    delta, _, g_hat = synthetic_step(module, generator, _x(), _condition(), ALPHA)
    np.testing.assert_array_equal(g_hat, np.zeros((BATCH, OUT)))
    np.testing.assert_array_equal(delta, np.zeros((BATCH, IN)))
    for name, param in module.parameters.items():
        np.testing.assert_array_equal(param, before[name], err_msg=name)


@pytest.mark.parametrize("condition_dim", [0, CONDITION], ids=["unconditioned", "conditioned"])
def test_synthetic_step_calls_the_generators_own_forward_with_the_condition(condition_dim):
    generator = RecordingGenerator(OUT, condition_dim, init="blog", seed=1)
    c = _condition() if condition_dim else None
    synthetic_step(_module("layer"), generator, _x(), c, ALPHA)
    assert len(generator.conditions) == 1 and generator.conditions[0] is c


def test_the_condition_changes_the_step():
    x, c = _x(), _condition()
    a, b = _module("layer"), _module("layer")
    synthetic_step(a, _generator(), x, c, ALPHA)
    synthetic_step(b, _generator(), x, -c, ALPHA)
    assert np.abs(a.weights - b.weights).max() > 1e-4


@pytest.mark.parametrize("condition_dim", [0, CONDITION], ids=["unconditioned", "conditioned"])
@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_skipping_the_input_delta_changes_nothing_else(kind, condition_dim):
    """A bottom module's δ feeds no generator; input_delta=False skips it and returns None."""
    x, c = _x(), _condition() if condition_dim else None
    full, lean = _module(kind), _module(kind)
    delta, h, g_hat = synthetic_step(full, _generator(condition_dim), x, c, ALPHA)
    none, lean_h, lean_g_hat = synthetic_step(lean, _generator(condition_dim), x, c, ALPHA, input_delta=False)
    assert delta.shape == (BATCH, IN) and none is None
    np.testing.assert_array_equal(lean_h, h)
    np.testing.assert_array_equal(lean_g_hat, g_hat)
    for name, param in lean.parameters.items():
        np.testing.assert_array_equal(param, full.parameters[name], err_msg=name)


def _step_parts(kind, condition_dim=CONDITION):
    """A module of ``kind`` ('layer', 'dense_block' or 'conv_block'), a generator that makes ĝ non-zero, x and c."""
    if kind == "conv_block":
        return _conv_step_parts(rule="adam")
    c = _condition() if condition_dim else None
    generator = MLPGenerator(OUT, condition_dim, hidden=(3,), seed=1)
    randomize(generator.parameters, np.random.default_rng(5))
    return _module(kind, update_rule="adam"), generator, _x(), c


@pytest.mark.parametrize("input_delta", [True, False])
@pytest.mark.parametrize("kind", [*MODULE_KINDS, "conv_block"])
def test_the_forward_pass_then_the_module_update_is_synthetic_step_bit_for_bit(kind, input_delta):
    """The two halves a pipeline's worker runs apart: h = module.forward(x), then ĝ, δ and the update."""
    module, generator, x, c = _step_parts(kind)
    halves_module, halves_generator = copy.deepcopy((module, generator))

    delta, h, g_hat = synthetic_step(module, generator, x, c, ALPHA, input_delta=input_delta)
    halves_h = halves_module.forward(x)
    halves_delta, halves_g_hat = update_module_from_synthetic_gradient(halves_module, halves_generator, halves_h, c, ALPHA,
                                                  input_delta=input_delta)

    assert np.any(g_hat != 0), "the test needs a non-zero ĝ"
    np.testing.assert_array_equal(halves_h, h)
    np.testing.assert_array_equal(halves_g_hat, g_hat)
    assert (halves_delta is None) == (delta is None) == (not input_delta)
    if input_delta:
        np.testing.assert_array_equal(halves_delta, delta)
    assert_same_state(halves_module, tree_state(module))  # parameters, Adam's moments, caches, running statistics
    assert_same_state(halves_generator, tree_state(generator))


def _nan_condition():
    c = _condition()
    c[2, 1] = np.nan
    return c


BAD_STEPS = [
    pytest.param("layer", _generator, _x(), None, r"this DNI is conditioned \(condition_dim=3\): pass condition=c",
                 id="missing-condition"),
    pytest.param("dense_block", _generator, _x(), _condition(rows=BATCH - 1),
                 "the input has 6 rows, the condition has 5", id="condition-of-another-row-count"),
    pytest.param("layer", _generator, _x(), np.zeros(BATCH * CONDITION), r"got shape \(18,\)",
                 id="one-dimensional-condition"),
    pytest.param("dense_block", _generator, _x(), _nan_condition(), r"condition holds NaN or inf \(first in row 2\)",
                 id="nan-condition"),
    pytest.param("dense_block", _generator, _x(width=IN + 1), _condition(),
                 r"input must have shape \(batch, 4\).*got shape \(6, 5\)", id="input-of-another-width"),
    pytest.param("dense_block", _generator, _x(rows=1), _condition(rows=1), "needs a batch of at least 2 rows",
                 id="one-row-under-batch-norm"),
    pytest.param("layer", lambda: MLPGenerator(OUT, CONDITION, hidden=(3,), seed=1), _x(rows=1), _condition(rows=1),
                 "needs a batch of at least 2 rows", id="one-row-for-a-batch-norm-generator"),
]


@pytest.mark.parametrize("kind, make_generator, x, condition, message", BAD_STEPS)
def test_a_bad_step_raises_before_anything_changes(kind, make_generator, x, condition, message):
    module, generator = _module(kind), make_generator()
    synthetic_step(module, generator, _x(5), _condition(6), ALPHA)  # a first, good step fills every cache
    before_module, before_generator = tree_state(module), tree_state(generator)

    with pytest.raises(ValueError, match=message):
        synthetic_step(module, generator, x, condition, ALPHA)

    assert_same_state(module, before_module)
    assert_same_state(generator, before_generator)


class MisshapenGenerator(LinearGenerator):
    """A user's generator whose prediction has one column too few."""

    def forward(self, h, condition=None):
        return super().forward(h, condition)[:, :-1]


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_a_prediction_that_does_not_fit_is_refused_before_the_parameters_move(kind):
    module = _module(kind)
    before = {name: p.copy() for name, p in module.parameters.items()}
    with pytest.raises(ValueError, match=r"the generator's synthetic gradient must have shape \(batch, 5\) "
                                         r"\(5 = the width of this layer's output\); got shape \(6, 4\)"):
        synthetic_step(module, MisshapenGenerator(OUT, init="blog", seed=1), _x(), None, ALPHA)
    for name, param in module.parameters.items():
        np.testing.assert_array_equal(param, before[name], err_msg=name)


def _dni(condition_dim=CONDITION, generator=None):
    return DNI(IN, OUT, "tanh", alpha=0.05, generator_alpha=0.02, condition_dim=condition_dim,
               generator_init="blog", generator=generator, seed=0)


def _dni_block(condition_dim=CONDITION, generator=None):
    return DNIBlock(dense_block(IN, OUT, seed=0), generator or _generator(condition_dim), 0.05, generator_alpha=0.02)


OWNERS = pytest.mark.parametrize("make", [_dni, _dni_block], ids=["DNI", "DNIBlock"])
OWNERS_OF_A_SPOILED_GENERATOR = pytest.mark.parametrize("make", [
    lambda: _dni(generator=SpoiledGenerator(OUT, CONDITION, init="blog", seed=1)),
    lambda: _dni_block(generator=SpoiledGenerator(OUT, CONDITION, init="blog", seed=1))], ids=["DNI", "DNIBlock"])


def test_input_delta_must_be_a_bool_and_is_checked_before_anything_changes():
    module, generator = _module("layer"), _generator()
    before = tree_state(module)
    with pytest.raises(TypeError, match="input_delta must be True or False; got 'no' \\(str\\)"):
        synthetic_step(module, generator, _x(), _condition(), ALPHA, input_delta="no")
    assert_same_state(module, before)


class Spoiled:
    """A user's generator whose prediction ``spoil`` turns bad (None: a good one), after its forward pass has run."""

    spoil = None

    def forward(self, h, condition=None):
        prediction = super().forward(h, condition)
        return prediction if self.spoil is None else self.spoil(prediction)


class SpoiledGenerator(Spoiled, LinearGenerator):
    pass


class SpoiledMLPGenerator(Spoiled, MLPGenerator):
    """With a batch-normalised hidden block, whose running statistics its forward pass moves."""


def _fail(g):
    raise RuntimeError("the user's generator failed")


def _with_nan(g):
    g = g.copy()
    g[3, 2] = np.nan
    return g


BAD_PREDICTIONS = [
    pytest.param(lambda g: g[:, :-1], ValueError, r"must have shape \(batch, 5\).*got shape \(6, 4\)", id="shape"),
    pytest.param(lambda g: g.astype(np.float32), TypeError,
                 r"the generator's synthetic gradient must have the dtype of this layer's output, float64; got float32",
                 id="dtype"),
    pytest.param(_with_nan, ValueError, r"the generator's synthetic gradient holds NaN or inf \(first in row 3\)",
                 id="nan"),
    pytest.param(lambda g: np.full_like(g, -np.inf), ValueError,
                 r"the generator's synthetic gradient holds NaN or inf \(first in row 0\)", id="inf"),
    pytest.param(_fail, RuntimeError, "the user's generator failed", id="raises"),
]


@pytest.mark.parametrize("kind", MODULE_KINDS)
@pytest.mark.parametrize("spoil, error, message", BAD_PREDICTIONS)
def test_a_bad_prediction_is_refused_and_module_and_generator_are_as_they_were(kind, spoil, error, message):
    """Parameters, update-rule state, caches (input, output, ĝ) and batch norm's running statistics alike."""
    module, generator = _module(kind, update_rule="adam"), SpoiledGenerator(OUT, CONDITION, init="blog", seed=1)
    synthetic_step(module, generator, _x(5), _condition(6), ALPHA)  # a first, good step fills every cache
    generator.spoil = spoil
    before_module, before_generator = tree_state(module), tree_state(generator)

    with pytest.raises(error, match=message):
        synthetic_step(module, generator, _x(), _condition(), ALPHA)

    assert_same_state(module, before_module)
    assert_same_state(generator, before_generator)


def _running_statistics(*trees):
    return [array.copy() for tree in trees for _, module in tree.submodules() if isinstance(module, BatchNorm)
            for array in module.buffers().values()]


@pytest.mark.parametrize("spoil, error, message", BAD_PREDICTIONS)
def test_a_refused_step_puts_back_the_running_statistics_of_the_block_and_of_the_generator(spoil, error, message):
    """Both forward passes have moved them in place by the time ĝ is refused."""
    module, generator = _module("dense_block", update_rule="adam"), SpoiledMLPGenerator(OUT, CONDITION, hidden=(3,),
                                                                                          seed=1)
    synthetic_step(module, generator, _x(5), _condition(6), ALPHA)
    generator.spoil = spoil
    running = _running_statistics(module, generator)
    before_module, before_generator = tree_state(module), tree_state(generator)

    with pytest.raises(error, match=message):
        synthetic_step(module, generator, _x(), _condition(), ALPHA)

    assert_same_state(module, before_module)
    assert_same_state(generator, before_generator)
    for after, before in zip(_running_statistics(module, generator), running):
        np.testing.assert_array_equal(after, before)
    generator.spoil = None
    synthetic_step(module, generator, _x(), _condition(), ALPHA)
    assert all(np.all(after != before) for after, before in zip(_running_statistics(module, generator), running)), \
        "the same step, unspoiled, moves every running statistic: the test needs that"


@pytest.mark.parametrize("spoil, error, message", BAD_PREDICTIONS)
@OWNERS_OF_A_SPOILED_GENERATOR
def test_a_refused_update_from_synthetic_gradient_leaves_the_module_as_its_forward_pass_left_it(make, spoil, error, message):
    owner = make()
    owner.forward_and_update(_x(5), _condition(6))
    h = owner.forward(_x())
    owner.generator.spoil = spoil
    before = tree_state(owner)
    with pytest.raises(error, match=message):
        owner.update_from_synthetic_gradient(h, _condition())
    assert_same_state(owner, before)


@OWNERS_OF_A_SPOILED_GENERATOR
def test_a_dni_whose_generator_predicts_nan_keeps_its_weights_and_its_last_g_hat(make):
    owner = make()
    owner.forward_and_update(_x(5), _condition(6))
    owner.generator.spoil = _with_nan
    before = tree_state(owner)
    with pytest.raises(ValueError, match="holds NaN or inf"):
        owner.forward_and_update(_x(), _condition())
    assert_same_state(owner, before)
    assert np.isfinite(owner.synthetic_gradient).all()


# --- DNI and DNIBlock: the step with their own alpha, the generator's with generator_alpha --------





@pytest.mark.parametrize("input_delta", [True, False])
@OWNERS
def test_forward_and_update_is_synthetic_step_with_its_own_alpha(make, input_delta):
    owner = make()
    x, c = _x(), _condition()
    reference = copy.deepcopy(owner)
    module = reference.block if isinstance(reference, DNIBlock) else reference
    expected_delta, expected_h, expected_g_hat = synthetic_step(module, reference.generator, x, c, owner.alpha,
                                                                input_delta=input_delta)

    delta, output = owner.forward_and_update(x, c, input_delta=input_delta)

    assert (delta is None) == (not input_delta)
    if input_delta:
        np.testing.assert_array_equal(delta, expected_delta)
    np.testing.assert_array_equal(output, expected_h)
    np.testing.assert_array_equal(owner.synthetic_gradient, expected_g_hat)
    for name, param in owner.parameters.items():
        np.testing.assert_array_equal(param, reference.parameters[name], err_msg=name)


@pytest.mark.parametrize("input_delta", [True, False])
@OWNERS
def test_forward_then_update_from_synthetic_gradient_is_forward_and_update_bit_for_bit(make, input_delta):
    whole, halves = make(), make()
    x, c = _x(), _condition()

    delta, output = whole.forward_and_update(x, c, input_delta=input_delta)
    h = halves.forward(x)
    halves_delta, g_hat = halves.update_from_synthetic_gradient(h, c, input_delta=input_delta)

    np.testing.assert_array_equal(h, output)
    np.testing.assert_array_equal(g_hat, whole.synthetic_gradient)
    assert halves.synthetic_gradient is g_hat
    if input_delta:
        np.testing.assert_array_equal(halves_delta, delta)
    assert_same_state(halves, tree_state(whole))


@OWNERS
def test_a_late_target_is_regressed_onto_after_the_generator_predicts_for_its_batch_again(make):
    """A pipeline's worker: the generator has predicted for a later batch before batch 1's target comes."""
    generator = MLPGenerator(OUT, CONDITION, hidden=(3,), seed=1)
    randomize(generator.parameters, np.random.default_rng(5))
    owner = make(generator=generator)
    h1, c1 = owner.forward(_x(1)), _condition(1)
    owner.update_from_synthetic_gradient(h1, c1)
    owner.forward_and_update(_x(2), _condition(2))  # batch 2's prediction
    running = _running_statistics(owner.generator)
    reference = copy.deepcopy(owner.generator)
    reference.forward(h1, c1)
    target = _x(7, width=OUT)

    loss = owner.update_generator(target, h=h1, condition=c1)

    assert loss == reference.update(target, 0.02)
    for name, param in owner.generator.parameters.items():
        np.testing.assert_array_equal(param, reference.parameters[name], err_msg=name)
    for after, before in zip(_running_statistics(owner.generator), running):
        np.testing.assert_array_equal(after, before)  # batch 1 counted once in them, when it was first predicted for


@OWNERS
def test_a_generator_is_checked_when_it_is_attached_and_a_refused_one_leaves_the_old(make):
    owner = make()
    old = owner.generator
    with pytest.raises(ValueError, match="generator.condition_dim must equal the layer's condition_dim, 3; got 0"):
        owner.generator = LinearGenerator(OUT, 0)
    with pytest.raises(TypeError, match="generator must have methods forward, update and predict.*lacks update"):
        owner.generator = SimpleNamespace(forward=len, predict=len, output_dim=OUT, condition_dim=CONDITION)
    assert owner.generator is old
    new = _generator()
    owner.generator = new
    assert owner.generator is new and owner.children()["generator"] is new
    owner.forward_and_update(_x(), _condition())
    assert new.synthetic_gradient is not None


@OWNERS
def test_update_generator_is_one_generator_update_with_generator_alpha(make):
    owner = make()
    target = _x(7, width=OUT)
    owner.forward_and_update(_x(), _condition())
    reference = copy.deepcopy(owner.generator)
    before = {name: p.copy() for name, p in owner.generator.parameters.items()}

    loss = owner.update_generator(target)

    assert loss == reference.update(target, 0.02)
    for name, param in owner.generator.parameters.items():
        np.testing.assert_array_equal(param, reference.parameters[name], err_msg=name)
        np.testing.assert_array_equal(param, before[name] - 0.02 * reference.gradients[name], err_msg=name)


@OWNERS
def test_update_generator_before_a_step_raises(make):
    with pytest.raises(ValueError, match=r"call forward_and_update\(input\) first"):
        make().update_generator(np.zeros((BATCH, OUT)))


@OWNERS
def test_update_generator_with_a_target_of_another_shape_raises_and_changes_nothing(make):
    owner = make()
    owner.forward_and_update(_x(), _condition())
    before = tree_state(owner)
    with pytest.raises(ValueError, match=r"target must have the shape of the last synthetic gradient, \(6, 5\)"):
        owner.update_generator(np.zeros((BATCH - 1, OUT)))
    assert_same_state(owner, before)


def test_a_generator_of_another_condition_dim_is_refused():
    with pytest.raises(ValueError, match="generator.condition_dim must equal the layer's condition_dim, 0; got 2"):
        DNI(5, 4, "tanh", generator=LinearGenerator(4, condition_dim=2))


# --- DNI: the blog's layer ------------------------------------------------------------------------


def test_a_fresh_dni_does_not_move_until_its_generator_has_learned():
    rng = np.random.default_rng(0)
    layer = DNI(5, 4, "tanh", seed=6)
    before = layer.weights.copy()
    input_delta, _ = layer.forward_and_update(random_batch(rng, 3, 5))
    np.testing.assert_array_equal(layer.weights, before)
    np.testing.assert_array_equal(input_delta, np.zeros((3, 5)))


def test_blog_positional_call_and_names_work():
    from sgrad import sigmoid, sigmoid_out2deriv

    layer = DNI(16, 128, sigmoid, sigmoid_out2deriv, 0.1, seed=0)
    assert layer.weights.shape == (16, 128)
    assert layer.alpha == 0.1 and layer.generator_alpha == 0.1
    assert layer.generator.weights.shape == (128, 128)
    assert DNI(16, 8, "relu", seed=0).nonlin.__name__ == "relu"


def test_forward_is_inference_only():
    rng = np.random.default_rng(0)
    layer = DNI(5, 4, "tanh", generator_init="blog", seed=5)
    before = layer.weights.copy()
    generator_before = layer.generator.weights.copy()
    out = layer.forward(random_batch(rng, 3, 5))
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(layer.weights, before)
    np.testing.assert_array_equal(layer.generator.weights, generator_before)


def test_dni_update_lowers_the_linearised_loss_and_the_blogs_sign_raises_it():
    # To first order the layer minimises <ĝ, h(W)>; descent lowers it, the blog's `+=` raises it.
    rng = np.random.default_rng(0)
    x = random_batch(rng, 8, 5)
    layer = DNI(5, 4, "sigmoid", alpha=1e-3, generator_init="blog", seed=2)
    w0 = layer.weights.copy()
    layer.forward_and_update(x)
    g_hat = layer.synthetic_gradient

    def surrogate(weights):
        return float(np.sum(g_hat * dense_forward(x, weights, layer.bias, layer.nonlin)))

    blog_weights = w0 + (layer.weights - w0) * -1  # the blog's weights += input.T.dot(delta) * alpha
    assert surrogate(layer.weights) < surrogate(w0) - 1e-6
    assert surrogate(blog_weights) > surrogate(w0) + 1e-6


def test_the_blogs_names_on_a_dni_are_its_acts_bit_for_bit():
    """forward_and_synthetic_update is forward_and_update, update_synthetic_weights is update_generator."""
    blog, acts = _dni(), _dni()
    x, c, target = _x(), _condition(), normal(np.random.default_rng(3), BATCH, OUT)
    blog_delta, blog_output = blog.forward_and_synthetic_update(x, c)
    delta, output = acts.forward_and_update(x, c)
    assert np.array_equal(blog_delta, delta) and np.array_equal(blog_output, output)
    assert blog.update_synthetic_weights(target) == acts.update_generator(target)
    assert all(np.array_equal(blog.parameters[name], acts.parameters[name]) for name in acts.parameters)
    assert all(np.array_equal(blog.generator.parameters[name], acts.generator.parameters[name])
               for name in acts.generator.parameters)


def test_update_from_true_gradient_backpropagates_the_true_gradient_and_steps_with_alpha():
    """The blog's top-layer step: the input delta from the pre-update weights, then one step with alpha."""
    layer = _dni(condition_dim=0)
    x, g = _x(), _x(7, width=OUT)
    reference = Layer(IN, OUT, "tanh", init=layer.weights.copy())
    reference.bias[:] = layer.bias
    reference.forward(x)
    expected_delta = reference.backward(g)
    reference.update(layer.alpha)

    layer.forward(x)
    delta = layer.update_from_true_gradient(g)

    np.testing.assert_array_equal(delta, expected_delta)
    np.testing.assert_array_equal(layer.weights, reference.weights)
    np.testing.assert_array_equal(layer.bias, reference.bias)


@given(dtype=dtypes, batch=batches, input_dim=widths, output_dim=widths, condition_dim=condition_dims,
       nonlin=nonlinearities, rule=update_rules, seed=seeds)
def test_keeps_its_dtype_through_a_step(dtype, batch, input_dim, output_dim, condition_dim, nonlin, rule, seed):
    """A DNI builds its default generator in its own dtype, and a step keeps it."""
    rng = np.random.default_rng(seed)
    layer = DNI(input_dim, output_dim, nonlin, condition_dim=condition_dim, generator_init="blog", update_rule=rule,
                rng=rng, dtype=dtype)
    c = normal(rng, batch, condition_dim, dtype=dtype) if condition_dim else None
    input_delta, output = layer.forward_and_update(normal(rng, batch, input_dim, dtype=dtype), c)
    layer.update_generator(normal(rng, batch, output_dim, dtype=dtype))
    assert_dtype(dtype, input_delta=input_delta, output=output, synthetic_gradient=layer.synthetic_gradient,
                 **{f"generator gradient of {k}": g for k, g in layer.generator.gradients.items()})
    assert_tree_dtype(dtype, layer, "DNI")  # the layer, its generator and the generator's net


# --- a convolutional block under DNIBlock: h and ĝ are feature maps -----------------------------------
# The step is synthetic_step, written once; these check that it takes (batch, channels, height, width).

MAPS_IN, MAPS_OUT = (BATCH, 2, 6, 5), (BATCH, 3, 3, 2)  # a conv block 2 → 3 channels with 2×2 pooling


def _conv_step_parts(seed=0, dtype=np.float64, rule=None):
    """A Conv→BatchNorm→ReLU→pool block, a cDNI ConvGenerator with every parameter random (so ĝ is not zero),
    maps x and one-hot labels c."""
    rng = np.random.default_rng(seed)
    block = conv_block(2, 3, 3, pool=2, update_rule=rule, rng=rng, dtype=dtype)
    generator = ConvGenerator(3, CONDITION, hidden=(4,), update_rule=rule, rng=rng, dtype=dtype)
    randomize(generator.parameters, rng)
    x = normal(rng, *MAPS_IN, dtype=dtype)
    c = np.eye(CONDITION, dtype=dtype)[rng.integers(0, CONDITION, BATCH)]
    return block, generator, x, c


def test_synthetic_step_over_a_conv_block_backpropagates_g_hat_and_steps_once():
    block, generator, x, c = _conv_step_parts()
    expected = _reference_step(block, generator, x, c)
    assert expected.h.shape == MAPS_OUT and np.all(expected.g_hat != 0), "the test needs a non-zero ĝ"

    delta, h, g_hat = synthetic_step(block, generator, x, c, ALPHA)

    np.testing.assert_array_equal(h, expected.h)
    np.testing.assert_array_equal(g_hat, expected.g_hat)
    np.testing.assert_array_equal(delta, expected.delta)
    assert delta.shape == MAPS_IN
    for name, param in block.parameters.items():
        np.testing.assert_array_equal(param, expected.before[name] - ALPHA * expected.gradients[name], err_msg=name)
        assert np.any(param != expected.before[name]), f"{name} did not move"


def test_a_dni_block_over_a_conv_block_takes_a_step_then_trains_its_generator_with_generator_alpha():
    block, generator, x, c = _conv_step_parts()
    owner = DNIBlock(block, generator, 0.05, generator_alpha=0.02)
    assert (owner.input_dim, owner.output_dim, owner.condition_dim) == (2, 3, CONDITION)
    delta, output = owner.forward_and_update(x, c)
    assert delta.shape == MAPS_IN and output.shape == MAPS_OUT
    target = normal(np.random.default_rng(9), *MAPS_OUT)
    reference = copy.deepcopy(owner.generator)

    loss = owner.update_generator(target)

    assert loss == reference.update(target, 0.02)
    for name, param in owner.generator.parameters.items():
        np.testing.assert_array_equal(param, reference.parameters[name], err_msg=name)


@pytest.mark.parametrize("x, condition, message", [
    (np.zeros(MAPS_IN), None, r"this DNI is conditioned \(condition_dim=3\): pass condition=c"),
    (np.zeros(MAPS_IN), _condition(rows=BATCH - 1), "the input has 6 rows, the condition has 5"),
    (np.zeros((BATCH, 1, 6, 5)), _condition(), r"\(2 = this layer's in_channels\); got shape \(6, 1, 6, 5\)"),
], ids=["missing-condition", "condition-of-another-row-count", "maps-of-another-channel-count"])
def test_a_bad_step_over_a_conv_block_raises_before_anything_changes(x, condition, message):
    block, generator, good_x, c = _conv_step_parts()
    synthetic_step(block, generator, good_x, c, ALPHA)  # a first, good step fills every cache
    before_block, before_generator = tree_state(block), tree_state(generator)
    with pytest.raises(ValueError, match=message):
        synthetic_step(block, generator, x, condition, ALPHA)
    assert_same_state(block, before_block)
    assert_same_state(generator, before_generator)


class TransposedMapsGenerator(ConvGenerator):
    """A user's generator whose ĝ has its maps' height and width swapped."""

    def forward(self, h, condition=None):
        return super().forward(h, condition).transpose(0, 1, 3, 2)


def test_maps_of_g_hat_that_do_not_fit_h_are_refused_and_block_and_generator_are_as_they_were():
    block, _, x, c = _conv_step_parts()
    generator = TransposedMapsGenerator(3, CONDITION, hidden=(4,), seed=1)
    before_block, before_generator = tree_state(block), tree_state(generator)
    with pytest.raises(ValueError, match=r"the generator's synthetic gradient must have the shape of this layer's "
                                         r"output, \(6, 3, 3, 2\); got shape \(6, 3, 2, 3\)"):
        synthetic_step(block, generator, x, c, ALPHA)
    assert_same_state(block, before_block)
    assert_same_state(generator, before_generator)


@pytest.mark.parametrize("rule", ["sgd", "adam"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_conv_dni_block_keeps_its_dtype_through_a_step(dtype, rule):
    block, generator, x, c = _conv_step_parts(dtype=dtype, rule=rule)
    owner = DNIBlock(block, generator, 0.05)
    delta, output = owner.forward_and_update(x, c)
    owner.update_generator(normal(np.random.default_rng(9), *MAPS_OUT, dtype=dtype))
    assert_dtype(dtype, input_delta=delta, output=output, synthetic_gradient=owner.synthetic_gradient)
    assert_tree_dtype(dtype, owner, "conv DNIBlock")
