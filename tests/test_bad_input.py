"""Bad input across the public API: each raises ValueError or TypeError in the user's words, and changes nothing.

Every case names the exception it expects and fragments of its message: what
was expected, what came, and (where the fix is not obvious) what to do.  A
failed call on an object must leave it bit for bit as it was: every array
reachable from it (weights, biases, generator parameters, optimizer state,
the cached input and output of the last forward pass) and every flag.
"""

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from strategies import draws, float_dtypes, indices, matrix_sides, non_finite, orders

import data_gen
from data_gen.mnist import MnistNotFoundError, load_mnist, prepare_mnist
from sgrad import (DNI, Activation, Adam, BatchNorm, DNIBlock, Layer, LinearGenerator, MLPGenerator, Momentum, Sequential,
                   SyntheticLossGenerator, bce_with_logits, dense_block, mse, softmax, softmax_cross_entropy)
from sgrad.nn.losses import get_loss
from sgrad.nn.optimizers import get_update_rule

SGRAD = Path(sys.executable).parent / "sgrad"
BATCH = 4


def state(obj):
    """Everything reachable from ``obj``'s attributes, by path: arrays as (dtype, shape, bytes), the rest by repr."""
    found, seen = {}, set()

    def visit(value, path):
        if isinstance(value, np.ndarray):
            found[path] = (value.dtype.str, value.shape, value.tobytes())
        elif isinstance(value, (dict, list, tuple)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            found[path] = f"{type(value).__name__} of {len(value)}"
            for key, item in items:
                visit(item, f"{path}[{key!r}]")
        elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)):
            found[path] = value.__name__
        elif hasattr(value, "__dict__"):
            if id(value) not in seen:  # a shared update rule is recorded once, under its first path
                seen.add(id(value))
                found[path] = type(value).__name__
                for name, attribute in vars(value).items():
                    visit(attribute, f"{path}.{name}")
        else:
            found[path] = repr(value)

    visit(obj, "")
    return found


def changes(before, after):
    """The paths whose value differs between two ``state`` records."""
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def rows(*shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def with_value(array, value, row=1):
    array = array.copy()
    array[row, 0] = value
    return array


# --- objects in the middle of training: parameters, optimizer state and caches all filled --------


def trained_layer():
    """A 3 → 2 tanh Layer with Adam after one full step, then a forward and backward of a new batch."""
    layer = Layer(3, 2, "tanh", update_rule="adam", seed=0)
    for seed in (1, 2):
        layer.forward(rows(BATCH, 3, seed=seed))
        layer.backward(rows(BATCH, 2, seed=seed + 10))
        if seed == 1:
            layer.update(0.1)
    return layer


def trained_dni(condition_dim=0):
    """A 3 → 2 DNI (a cDNI with condition_dim > 0) after one synthetic step and one generator step."""
    layer = DNI(3, 2, "tanh", alpha=0.1, condition_dim=condition_dim, generator_init="blog", update_rule="adam",
                seed=0)
    condition = rows(BATCH, condition_dim, seed=3) if condition_dim else None
    layer.forward_and_update(rows(BATCH, 3), condition)
    layer.update_generator(rows(BATCH, 2, seed=4))
    return layer


def dni_after_forward():
    """A trained DNI that has just run forward, as the top layer of a stack does before update_from_true_gradient."""
    layer = trained_dni()
    layer.forward(rows(BATCH, 3, seed=5))
    return layer


def trained_dni_block(batchnorm_in_block=True, batchnorm_in_generator=False):
    """A DNIBlock over Linear(→BatchNorm)→ReLU 3 → 4 with an MLP generator, after one step of each."""
    block = dense_block(3, 4, batchnorm=batchnorm_in_block, update_rule="adam", seed=0)
    generator = MLPGenerator(4, hidden=(5,), batchnorm=batchnorm_in_generator, update_rule="adam", seed=1)
    decoupled = DNIBlock(block, generator, 0.1)
    decoupled.forward_and_update(rows(BATCH, 3))
    decoupled.update_generator(rows(BATCH, 4, seed=5))
    return decoupled


def generator_after_forward(make):
    def build():
        generator = make()
        condition = rows(BATCH, generator.condition_dim, seed=6) if generator.condition_dim else None
        generator.forward(rows(BATCH, generator.output_dim), condition)
        return generator
    return build


def batchnorm_after_backward():
    norm = BatchNorm(3, update_rule="momentum")
    norm.forward(rows(BATCH, 3))
    norm.backward(rows(BATCH, 3, seed=1))
    return norm


def block_after_backward():
    block = dense_block(3, 4, update_rule="adam", seed=0)
    block.forward(rows(BATCH, 3))
    block.backward(rows(BATCH, 4, seed=1))
    return block


def activation_after_forward():
    activation = Activation("tanh")
    activation.forward(rows(BATCH, 3))
    return activation


# --- calls on objects: (make the object, the bad call, exception, message fragments) --------------


def case(id, make, call, error, *fragments):
    return pytest.param(make, call, error, fragments, id=id)


CALLS = [
    # Layer
    case("layer-input-of-wrong-width", trained_layer, lambda m: m.forward(rows(BATCH, 5)),
         ValueError, "input must have shape (batch, 3)", "got shape (4, 5)"),
    case("layer-one-dimensional-input", trained_layer, lambda m: m.forward(np.ones(3)),
         ValueError, "got shape (3,)", "For a single example use input.reshape(1, -1)"),
    case("layer-batch-of-zero", trained_layer, lambda m: m.forward(np.ones((0, 3))),
         ValueError, "input is an empty batch (shape (0, 3))", "pass at least one row"),
    case("layer-nan-input", trained_layer, lambda m: m.forward(with_value(rows(BATCH, 3), np.nan)),
         ValueError, "input holds NaN or inf (first in row 1)", "check the data"),
    case("layer-inf-input", trained_layer, lambda m: m.forward(with_value(rows(BATCH, 3), -np.inf, row=2)),
         ValueError, "input holds NaN or inf (first in row 2)"),
    case("layer-integer-input", trained_layer, lambda m: m.forward(np.ones((BATCH, 3), dtype=np.int64)),
         TypeError, "input must hold floats; got dtype int64", "input.astype(np.float64)"),
    case("layer-object-input", trained_layer, lambda m: m.forward(np.ones((BATCH, 3), dtype=object)),
         TypeError, "input must hold floats; got dtype object"),
    case("layer-list-input", trained_layer, lambda m: m.forward([[1.0, 2.0, 3.0]]),
         TypeError, "input must be a NumPy array of shape (batch, 3); got list", "np.asarray"),
    case("layer-predict-one-dimensional", trained_layer, lambda m: m.predict(np.ones(3)),
         ValueError, "input must have shape (batch, 3); got shape (3,)"),
    case("layer-output-delta-of-wrong-shape", trained_layer, lambda m: m.backward(rows(BATCH + 1, 2)),
         ValueError, "output_delta must have the shape of this layer's last output, (4, 2); got shape (5, 2)"),
    case("layer-nan-output-delta", trained_layer, lambda m: m.backward(with_value(rows(BATCH, 2), np.nan)),
         ValueError, "output_delta holds NaN or inf"),
    case("layer-zero-learning-rate", trained_layer, lambda m: m.update(0.0),
         ValueError, "alpha (a learning rate) must be a finite number > 0, e.g. 0.01; got 0.0"),
    case("layer-negative-learning-rate", trained_layer, lambda m: m.update(-0.1),
         ValueError, "must be a finite number > 0, e.g. 0.01; got -0.1"),
    case("layer-nan-learning-rate", trained_layer, lambda m: m.update(float("nan")),
         ValueError, "must be a finite number > 0, e.g. 0.01; got nan"),
    case("layer-learning-rate-as-text", trained_layer, lambda m: m.update("0.1"),
         TypeError, "alpha (a learning rate) must be a number > 0, e.g. 0.01; got '0.1' (str)"),
    # DNI and cDNI
    case("cdni-without-condition", lambda: trained_dni(2), lambda m: m.forward_and_update(rows(BATCH, 3)),
         ValueError, "this DNI is conditioned (condition_dim=2)", "pass condition=c of shape (batch, 2)"),
    case("dni-given-a-condition", trained_dni, lambda m: m.forward_and_update(rows(BATCH, 3), rows(BATCH, 2)),
         ValueError, "this DNI is unconditioned (condition_dim=0) but a condition was given",
         "build it with condition_dim=<width of c>"),
    case("cdni-condition-of-wrong-width", lambda: trained_dni(2),
         lambda m: m.forward_and_update(rows(BATCH, 3), rows(BATCH, 3)),
         ValueError, "condition must have shape (batch, 2) (2 = condition_dim); got shape (4, 3)"),
    case("cdni-condition-with-too-few-rows", lambda: trained_dni(2),
         lambda m: m.forward_and_update(rows(BATCH, 3), rows(BATCH - 1, 2)),
         ValueError, "condition must have one row per example: the input has 4 rows, the condition has 3"),
    case("cdni-integer-labels-as-condition", lambda: trained_dni(2),
         lambda m: m.forward_and_update(rows(BATCH, 3), np.ones((BATCH, 2), dtype=np.int64)),
         TypeError, "condition must hold floats; got dtype int64"),
    case("dni-input-of-wrong-width", trained_dni, lambda m: m.forward_and_update(rows(BATCH, 2)),
         ValueError, "input must have shape (batch, 3) (3 = this layer's input_dim); got shape (4, 2)"),
    case("dni-target-of-wrong-shape", trained_dni, lambda m: m.update_generator(rows(BATCH, 3)),
         ValueError, "target must have shape (batch, 2)", "got shape (4, 3)"),
    case("dni-nan-target", trained_dni, lambda m: m.update_generator(with_value(rows(BATCH, 2), np.nan)),
         ValueError, "target holds NaN or inf"),
    case("dni-true-gradient-of-wrong-shape", dni_after_forward, lambda m: m.update_from_true_gradient(rows(BATCH, 3)),
         ValueError, "output_delta must have shape (batch, 2)"),
    # DNIBlock
    case("dni-block-batch-of-one-under-batch-norm", trained_dni_block,
         lambda m: m.forward_and_update(rows(1, 3)),
         ValueError, "input has 1 row", "needs a batch of at least 2 rows; use eval() for single examples"),
    case("dni-block-batch-of-one-for-a-batch-norm-generator",
         lambda: trained_dni_block(batchnorm_in_block=False, batchnorm_in_generator=True),
         lambda m: m.forward_and_update(rows(1, 3)),
         ValueError, "needs a batch of at least 2 rows"),
    case("dni-block-input-of-wrong-width", trained_dni_block, lambda m: m.forward_and_update(rows(BATCH, 4)),
         ValueError, "input must have shape (batch, 3)"),
    # generators
    case("generator-input-of-wrong-width", generator_after_forward(lambda: LinearGenerator(2, init="blog", seed=0)),
         lambda m: m.forward(rows(BATCH, 3)), ValueError, "h must have shape (batch, 2)", "got shape (4, 3)"),
    case("conditioned-generator-without-condition",
         generator_after_forward(lambda: LinearGenerator(2, 3, init="blog", seed=0)),
         lambda m: m.forward(rows(BATCH, 2)), ValueError, "this generator is conditioned (condition_dim=3)"),
    case("unconditioned-generator-given-a-condition",
         generator_after_forward(lambda: MLPGenerator(2, hidden=(4,), seed=0)),
         lambda m: m.forward(rows(BATCH, 2), rows(BATCH, 1)), ValueError, "this generator is unconditioned"),
    case("generator-update-before-forward", lambda: LinearGenerator(2), lambda m: m.update(rows(BATCH, 2), 0.1),
         ValueError, "update() needs a prediction to correct; call forward(h) first"),
    case("generator-target-of-wrong-shape", generator_after_forward(lambda: LinearGenerator(2, seed=0)),
         lambda m: m.update(rows(BATCH, 1), 0.1), ValueError, "target must have shape (batch, 2)"),
    case("generator-zero-learning-rate", generator_after_forward(lambda: MLPGenerator(2, hidden=(4,), seed=0)),
         lambda m: m.update(rows(BATCH, 2), 0), ValueError,
         "alpha (a learning rate) must be a finite number > 0, e.g. 0.01; got 0.0"),
    case("batch-norm-generator-batch-of-one", generator_after_forward(lambda: MLPGenerator(2, hidden=(4,), seed=0)),
         lambda m: m.forward(rows(1, 2)), ValueError, "needs a batch of at least 2 rows"),
    case("synthetic-loss-target-of-gradient-shape",
         generator_after_forward(lambda: SyntheticLossGenerator(2, hidden=(4,), seed=0)),
         lambda m: m.update(rows(BATCH, 2), 0.1),
         ValueError, "target must have shape (batch, 1) (1 = the width of the last predicted loss)"),
    case("generator-integer-input", generator_after_forward(lambda: LinearGenerator(2, seed=0)),
         lambda m: m.predict(np.ones((BATCH, 2), dtype=np.int32)), TypeError, "h must hold floats; got dtype int32"),
    # BatchNorm and blocks
    case("batch-norm-batch-of-one-in-training", batchnorm_after_backward, lambda m: m.forward(rows(1, 3)),
         ValueError, "needs a batch of at least 2 rows; use eval() for single examples"),
    case("batch-norm-input-of-wrong-width", batchnorm_after_backward, lambda m: m.forward(rows(BATCH, 2)),
         ValueError, "input must have shape (batch, 3) (3 = features); got shape (4, 2)"),
    case("batch-norm-predict-one-dimensional", batchnorm_after_backward, lambda m: m.predict(np.ones(3)),
         ValueError, "input must have shape (batch, 3); got shape (3,)"),
    case("batch-norm-output-delta-of-wrong-shape", batchnorm_after_backward, lambda m: m.backward(rows(BATCH, 2)),
         ValueError, "output_delta must have shape (batch, 3)"),
    case("batch-norm-backward-before-forward", lambda: BatchNorm(3), lambda m: m.backward(rows(BATCH, 3)),
         ValueError, "backward() needs a forward pass first; call forward(x)"),
    case("batch-norm-negative-learning-rate", batchnorm_after_backward, lambda m: m.update(-1.0),
         ValueError, "must be a finite number > 0, e.g. 0.01; got -1.0"),
    case("block-input-of-wrong-width", block_after_backward, lambda m: m.forward(rows(BATCH, 4)),
         ValueError, "input must have shape (batch, 3) (3 = this layer's input_dim); got shape (4, 4)"),
    case("block-zero-learning-rate", block_after_backward, lambda m: m.update(0.0),
         ValueError, "must be a finite number > 0, e.g. 0.01; got 0.0"),
    case("activation-output-delta-that-would-broadcast", activation_after_forward,
         lambda m: m.backward(rows(1, 3)),
         ValueError, "output_delta must have the shape of the last output, (4, 3); got shape (1, 3)"),
    case("activation-integer-input", activation_after_forward, lambda m: m.forward(np.ones((2, 3), dtype=np.int64)),
         TypeError, "input must hold floats; got dtype int64"),
]


@pytest.mark.parametrize("make, call, error, fragments", CALLS)
def test_bad_call_raises_in_the_users_words_and_changes_nothing(make, call, error, fragments):
    obj = make()
    before = state(obj)
    with pytest.raises(error) as raised:
        call(obj)
    for fragment in fragments:
        assert fragment in str(raised.value), f"expected {fragment!r} in the message:\n{raised.value}"
    changed = changes(before, state(obj))
    assert not changed, f"the failed call changed {', '.join(changed)}"


def test_the_state_record_sees_every_array_that_a_step_changes():
    """The check above is only as good as ``state``: a real step must show up in it."""
    layer = trained_dni(2)
    before = state(layer)
    layer.forward_and_update(rows(BATCH, 3, seed=7), rows(BATCH, 2, seed=8))
    layer.update_generator(rows(BATCH, 2, seed=9))
    changed = changes(before, state(layer))
    for path in (".weights", ".bias", ".input", ".output", ".synthetic_gradient", ".generator.net.weights",
                 ".update_state['weights']['m']", ".generator.net.update_state['weights']['v']"):
        assert path in changed


# --- constructors, pure functions and data: (the bad call, exception, message fragments) ---------


def bad(id, call, error, *fragments):
    return pytest.param(call, error, fragments, id=id)


def written(tmp, name, content):
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.savez(path, **content)
    return path


SMALL_MNIST = {"x_train": np.zeros((2, 28, 28), np.uint8), "y_train": np.zeros(2, np.uint8),
               "x_test": np.zeros((1, 28, 28), np.uint8), "y_test": np.zeros(1, np.uint8)}

FUNCTION_CALLS = [
    # construction: sizes, names, learning rates, hyperparameters, dtypes, seeds
    bad("layer-zero-width", lambda: Layer(0, 2, "tanh"), ValueError, "input_dim must be at least 1; got 0"),
    bad("layer-negative-width", lambda: Layer(3, -2, "tanh"), ValueError, "output_dim must be at least 1; got -2"),
    bad("layer-fractional-width", lambda: Layer(3, 2.5, "tanh"), TypeError, "output_dim must be an integer; got 2.5"),
    bad("unknown-nonlinearity", lambda: Layer(3, 2, "swish"),
        ValueError, "unknown nonlinearity 'swish'; choose one of 'sigmoid', 'tanh', 'relu', 'identity'"),
    bad("nonlinearity-neither-name-nor-function", lambda: Layer(3, 2, 3),
        TypeError, "nonlin must be a name such as 'tanh' or a function; got int"),
    bad("unknown-update-rule", lambda: Layer(3, 2, "tanh", update_rule="rmsprop"),
        ValueError, "unknown update rule 'rmsprop'; pass one of 'sgd', 'momentum', 'adam'"),
    bad("unknown-update-rule-by-lookup", lambda: get_update_rule("adagrad"), ValueError, "unknown update rule 'adagrad'"),
    bad("update-rule-of-a-number", lambda: get_update_rule(3), ValueError, "or an UpdateRule such as Adam(beta1=0.9)"),
    bad("integer-dtype", lambda: Layer(3, 2, "tanh", dtype=np.int64),
        TypeError, "dtype must be a floating type such as np.float64; got int64"),
    bad("unknown-init", lambda: Layer(3, 2, "tanh", init="glorot"), ValueError, "unknown init 'glorot'; choose one of"),
    bad("init-array-of-wrong-shape", lambda: Layer(3, 2, "tanh", init=np.ones((2, 3))),
        ValueError, "an initial weight array must have shape (3, 2); got (2, 3)"),
    bad("seed-as-text", lambda: Layer(3, 2, "tanh", seed="42"),
        TypeError, "seed must be an integer such as 0, or None; got '42' (str)"),
    bad("negative-seed", lambda: Layer(3, 2, "tanh", seed=-1), ValueError, "seed must be an integer >= 0; got -1"),
    bad("seed-and-rng", lambda: Layer(3, 2, "tanh", seed=1, rng=np.random.default_rng(1)),
        ValueError, "pass either seed or rng, not both"),
    bad("dni-zero-learning-rate", lambda: DNI(3, 2, "tanh", alpha=0),
        ValueError, "alpha (a learning rate) must be a finite number > 0, e.g. 0.01; got 0.0"),
    bad("dni-negative-generator-learning-rate", lambda: DNI(3, 2, "tanh", generator_alpha=-1e-3),
        ValueError, "generator_alpha (a learning rate) must be a finite number > 0, e.g. 0.01; got -0.001"),
    bad("dni-negative-condition-dim", lambda: DNI(3, 2, "tanh", condition_dim=-1),
        ValueError, "condition_dim must be at least 0; got -1"),
    bad("dni-generator-of-wrong-width", lambda: DNI(3, 2, "tanh", generator=LinearGenerator(3)),
        ValueError, "generator.output_dim must equal the layer's output_dim, 2; got 3"),
    bad("dni-generator-without-the-interface", lambda: DNI(3, 2, "tanh", generator=object()),
        TypeError, "generator must have methods forward, update and predict", "object lacks forward, update, predict"),
    bad("dni-block-of-text", lambda: DNIBlock("dense", LinearGenerator(4)),
        TypeError, "block must be a Layer or a Sequential block", "got str, which lacks forward"),
    bad("dni-block-without-widths", lambda: DNIBlock(Activation("relu"), LinearGenerator(4)),
        TypeError, "got Activation, which lacks input_dim, output_dim"),
    bad("dni-block-generator-of-wrong-width", lambda: DNIBlock(dense_block(3, 4, seed=0), LinearGenerator(3)),
        ValueError, "generator.output_dim must equal the layer's output_dim, 4; got 3"),
    bad("generator-zero-width", lambda: LinearGenerator(0), ValueError, "output_dim must be at least 1; got 0"),
    bad("generator-negative-condition-dim", lambda: LinearGenerator(2, -3),
        ValueError, "condition_dim must be at least 0; got -3"),
    bad("mlp-generator-hidden-not-a-tuple", lambda: MLPGenerator(4, hidden=64),
        TypeError, "hidden must be a tuple of layer widths such as (256, 256), or () for none; got 64 (int)"),
    bad("mlp-generator-zero-hidden-width", lambda: MLPGenerator(4, hidden=(8, 0)),
        ValueError, "every width in hidden must be at least 1; got 0"),
    bad("batch-norm-zero-features", lambda: BatchNorm(0), ValueError, "features must be at least 1; got 0"),
    bad("batch-norm-momentum-as-text", lambda: BatchNorm(3, momentum="0.1"),
        TypeError, "momentum must be a number in (0, 1], e.g. 0.1; got '0.1' (str)"),
    bad("batch-norm-zero-momentum", lambda: BatchNorm(3, momentum=0),
        ValueError, "momentum must be a finite number in (0, 1], e.g. 0.1; got 0.0"),
    bad("batch-norm-negative-eps", lambda: BatchNorm(3, eps=-1e-5),
        ValueError, "eps must be a finite number > 0, e.g. 1e-5; got -1e-05"),
    bad("batch-norm-integer-dtype", lambda: BatchNorm(3, dtype=np.int32), TypeError, "dtype must be a floating type"),
    bad("sequential-of-nothing", lambda: Sequential([]), ValueError, "Sequential needs at least one module"),
    bad("sequential-widths-that-do-not-chain", lambda: Sequential([Layer(3, 4, "tanh"), Layer(5, 2, "tanh")]),
        ValueError, "takes 5 input features, but Layer(3, 4, nonlin=tanh, bias=True) before it gives 4"),
    bad("sequential-of-a-non-module", lambda: Sequential([Layer(3, 4, "tanh"), "relu"]),
        TypeError, "module 1 of the Sequential must be a module such as a Layer", "got str"),
    bad("activation-unknown-name", lambda: Activation("gelu"), ValueError, "unknown nonlinearity 'gelu'"),
    bad("dense-block-zero-width", lambda: dense_block(0, 4), ValueError, "input_dim must be at least 1; got 0"),
    bad("dense-block-batchnorm-as-a-string", lambda: dense_block(3, 4, batchnorm="no"),
        TypeError, "batchnorm must be True or False; got 'no' (str)"),
    bad("layer-bias-as-a-string", lambda: Layer(3, 4, "tanh", bias="no"),
        TypeError, "bias must be True or False; got 'no' (str)"),
    bad("generator-bias-as-a-number", lambda: LinearGenerator(3, bias=0),
        TypeError, "bias must be True or False; got 0 (int)"),
    bad("load-mnist-verify-as-a-string", lambda: load_mnist("nowhere", verify="no"),
        TypeError, "verify must be True or False; got 'no' (str)"),
    bad("load-mnist-download-as-a-number", lambda: load_mnist(download=0),
        TypeError, "download must be True or False; got 0 (int)"),
    # update rules
    bad("momentum-of-one-and-a-half", lambda: Momentum(1.5), ValueError,
        "momentum must be a finite number in [0, 1), e.g. 0.9; got 1.5"),
    bad("adam-beta1-of-one", lambda: Adam(beta1=1.0), ValueError,
        "beta1 must be a finite number in [0, 1), e.g. 0.9; got 1.0"),
    bad("adam-zero-eps", lambda: Adam(eps=0), ValueError, "eps must be a finite number > 0, e.g. 1e-8; got 0"),
    # losses: shapes, dtypes, labels, names
    bad("mse-target-that-would-broadcast", lambda: mse(rows(BATCH, 3), rows(1, 3)),
        ValueError, "target must have the shape of the prediction, (4, 3); got shape (1, 3)"),
    bad("mse-nan-prediction", lambda: mse(with_value(rows(BATCH, 3), np.nan), rows(BATCH, 3)),
        ValueError, "prediction holds NaN or inf"),
    bad("mse-integer-target", lambda: mse(rows(BATCH, 3), np.ones((BATCH, 3), dtype=np.int64)),
        TypeError, "target must hold floats; got dtype int64"),
    bad("mse-unknown-reduction", lambda: mse(rows(BATCH, 3), rows(BATCH, 3), reduction="avg"),
        ValueError, "reduction must be one of ('mean', 'sum', 'none'); got 'avg'"),
    bad("bce-targets-outside-0-1", lambda: bce_with_logits(rows(BATCH, 3), np.full((BATCH, 3), 2.0)),
        ValueError, "bce_with_logits targets must lie in [0, 1]; got values from 2.0 to 2.0"),
    bad("softmax-ce-label-out-of-range", lambda: softmax_cross_entropy(rows(BATCH, 3), np.array([0, 1, 2, 3])),
        ValueError, "labels must lie in [0, 2] for 3 classes; got values from 0 to 3"),
    bad("softmax-ce-negative-label", lambda: softmax_cross_entropy(rows(BATCH, 3), np.array([0, -1, 2, 1])),
        ValueError, "got values from -1 to 2"),
    bad("softmax-ce-float-class-indices", lambda: softmax_cross_entropy(rows(BATCH, 3), np.array([0.0, 1, 2, 1])),
        TypeError, "1-D labels must be integer class indices; got dtype float64", "Pass one-hot rows"),
    bad("softmax-ce-one-hot-that-is-not", lambda: softmax_cross_entropy(rows(BATCH, 3), np.ones((BATCH, 3))),
        ValueError, "2-D labels must be one-hot or probability rows: non-negative, each row summing to 1"),
    bad("softmax-ce-labels-for-another-batch", lambda: softmax_cross_entropy(rows(BATCH, 3), np.array([0, 1])),
        ValueError, "labels must have shape (4,) to match the logits; got (2,)"),
    bad("softmax-ce-labels-of-rank-three", lambda: softmax_cross_entropy(rows(BATCH, 3), np.ones((BATCH, 3, 1))),
        ValueError, "labels must be integer classes of shape (4,) or one-hot rows of shape (4, 3); got shape (4, 3, 1)"),
    bad("softmax-one-dimensional", lambda: softmax(np.ones(3)),
        ValueError, "logits must have shape (batch, features); got shape (3,)"),
    bad("unknown-loss", lambda: get_loss("hinge"), ValueError, "unknown loss 'hinge'; choose one of 'mse', 'bce'"),
    # data_gen
    bad("addition-of-one-bit", lambda: data_gen.generate_dataset(1), ValueError, "output_dim must be between 2 and 62"),
    bad("addition-of-fractional-bits", lambda: data_gen.generate_dataset(8.0),
        TypeError, "output_dim must be an integer; got 8.0"),
    bad("addition-of-no-examples", lambda: data_gen.generate_dataset(8, 0),
        ValueError, "num_examples must be at least 1; got 0"),
    bad("addition-rng-not-a-generator", lambda: data_gen.generate_dataset(8, 5, rng=np.random.RandomState(0)),
        TypeError, "rng must be a numpy.random.Generator (np.random.default_rng(seed)); got RandomState"),
    bad("split-larger-than-the-task", lambda: data_gen.generate_split(3, 10, 10),
        ValueError, "output_dim=3 has only 16 distinct operand pairs, but num_train + num_test = 20"),
    bad("bits-of-a-negative-number", lambda: data_gen.int_to_bits([3, -1], 4),
        ValueError, "values must lie in [0, 15]; got values from -1 to 3"),
    bad("bits-of-a-fraction", lambda: data_gen.int_to_bits(np.array([1.5]), 4),
        TypeError, "values must hold integers; got dtype float64"),
    bad("bits-of-a-number-too-wide", lambda: data_gen.int_to_bits([16], 4), ValueError, "values must lie in [0, 15]"),
    bad("bits-of-a-bare-number", lambda: data_gen.int_to_bits(5, 4),
        ValueError, "values must be a 1-D sequence of integers, shape (n,); got shape ()", "write [values]"),
    bad("integers-from-nan-bits", lambda: data_gen.bits_to_int(np.full((2, 3), np.nan)),
        ValueError, "bits holds NaN or inf"),
    bad("integers-from-text", lambda: data_gen.bits_to_int(np.array([["1", "0"]])),
        TypeError, "bits must hold numbers (0/1 bits or probabilities); got dtype <U1"),
    bad("operands-of-odd-width", lambda: data_gen.split_operands(np.ones((2, 3))),
        ValueError, "x must have shape (n, 2 * output_dim); got shape (2, 3)"),
    bad("one-hot-label-out-of-range", lambda: data_gen.one_hot(np.array([3, 10])),
        ValueError, "labels must lie in 0..9; got values from 3 to 10"),
    bad("prepare-something-else", lambda: prepare_mnist([1, 2, 3, 4]),
        TypeError, "data must be the MnistData that load_mnist() returns", "got list"),
    bad("prepare-integer-dtype", lambda: prepare_mnist(tuple(SMALL_MNIST.values()), dtype=np.uint8),
        TypeError, "dtype must be a floating type such as np.float32; got uint8"),
]


@pytest.mark.parametrize("call, error, fragments", FUNCTION_CALLS)
def test_bad_argument_raises_in_the_users_words(call, error, fragments):
    with pytest.raises(error) as raised:
        call()
    for fragment in fragments:
        assert fragment in str(raised.value), f"expected {fragment!r} in the message:\n{raised.value}"


def test_a_failed_loss_leaves_its_arguments_alone():
    logits, labels = rows(BATCH, 3), np.array([0, 1, 2, 3])
    copies = logits.copy(), labels.copy()
    with pytest.raises(ValueError):
        softmax_cross_entropy(logits, labels)
    np.testing.assert_array_equal(logits, copies[0])
    np.testing.assert_array_equal(labels, copies[1])


# --- the MNIST loader ---------------------------------------------------------------------------

MNIST_PATHS = [
    bad("path-of-a-number", lambda tmp: 42, TypeError,
        "path must be the path of an mnist.npz archive or of a folder holding one, as a str or pathlib.Path; got int"),
    bad("folder-without-the-archive", lambda tmp: tmp, MnistNotFoundError, "no file at", "mnist.npz. Pass the path of"),
    bad("missing-file", lambda tmp: tmp / "mnsit.npz", MnistNotFoundError, "no file at", "mnsit.npz"),
    bad("text-file", lambda tmp: written(tmp, "mnist.npz", b"x_train,y_train\n1,2\n"), ValueError,
        "is not a usable mnist.npz", "an .npz archive is a zip file, starting with b'PK'; this one starts with b'x_trai'",
        "Replace it with a good copy"),
    bad("empty-file", lambda tmp: written(tmp, "mnist.npz", b""), ValueError, "probably truncated or damaged"),
    bad("archive-without-labels", lambda tmp: written(tmp, "mnist.npz", {"x_train": SMALL_MNIST["x_train"]}),
        ValueError, "it has no y_train, x_test, y_test (it holds: x_train)"),
    bad("archive-of-floats", lambda tmp: written(tmp, "mnist.npz", dict(SMALL_MNIST, x_test=np.zeros((1, 28, 28)))),
        ValueError, "x_test has dtype float64, expected uint8"),
]


@pytest.mark.parametrize("path, error, fragments", MNIST_PATHS)
def test_load_mnist_refuses_a_path_it_cannot_use(path, error, fragments, tmp_path):
    with pytest.raises(error) as raised:
        load_mnist(path(tmp_path), verify=False)
    for fragment in fragments:
        assert fragment in str(raised.value), f"expected {fragment!r} in the message:\n{raised.value}"


# --- the command line ----------------------------------------------------------------------------

COMMAND_LINES = [
    pytest.param([], "sgrad: error: the following arguments are required: COMMAND", id="no-command"),
    pytest.param(["train"], "argument COMMAND: invalid choice: 'train'", id="unknown-command"),
    pytest.param(["compare", "--lr", "nan"], "argument --lr: must be a finite number > 0, e.g. 0.01; got nan", id="nan-lr"),
    pytest.param(["compare", "--update-rule", "rmsprop"], "argument --update-rule: invalid choice: 'rmsprop'",
                 id="unknown-update-rule"),
    pytest.param(["compare", "--seed", "-1"], "argument --seed: must be at least 0; got -1", id="negative-seed"),
    pytest.param(["paper", "--depths", "1"], "argument --depths: expected comma-separated depths of at least 2",
                 id="depth-1"),
    pytest.param(["paper", "--data", "{tmp}/missing.npz"], "sgrad paper: error: argument --data: no mnist.npz at",
                 id="missing-data"),
    pytest.param(["paper", "--data", "{tmp}/notes.npz"], "is not a usable mnist.npz", id="data-not-an-archive"),
]


@pytest.mark.parametrize("args, fragment", COMMAND_LINES)
def test_bad_command_line_exits_2_with_one_readable_line(args, fragment, tmp_path):
    (tmp_path / "notes.npz").write_text("not an archive\n")
    args = [arg.format(tmp=tmp_path) for arg in args]
    command = [str(SGRAD), *args]
    if args[:1] in (["compare"], ["paper"]):
        command += ["--out", str(tmp_path / "out")]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert fragment in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@given(rows=matrix_sides, columns=matrix_sides, dtype=float_dtypes, order=orders, bad=non_finite, data=draws)
def test_a_single_nan_or_inf_anywhere_in_a_layers_input_is_found(rows, columns, dtype, order, bad, data):
    # check_batch first tests the column sums, which a NaN or inf always spoils: this pins that shortcut.
    row = data.draw(indices(rows), label="row")
    column = data.draw(indices(columns), label="column")
    x = np.asarray(np.random.default_rng(rows * columns).random((rows, columns)), dtype=dtype, order=order)
    x[row, column] = bad
    with pytest.raises(ValueError, match=rf"input holds NaN or inf \(first in row {row}\)"):
        Layer(columns, 2, "relu", seed=0, dtype=dtype).forward(x)


@pytest.mark.parametrize("dtype, huge", [(np.float16, 6e4), (np.float32, 3e38), (np.float64, 1.7e308)])
def test_finite_input_whose_column_sums_overflow_is_accepted(dtype, huge):
    x = np.full((8, 3), huge, dtype=dtype)
    with np.errstate(over="ignore"):
        assert Layer(3, 2, "identity", seed=0, dtype=dtype).predict(x).shape == (8, 2)
