"""The convolutional modules (sgrad/nn/conv.py): Conv2d, MaxPool2d, BatchNorm2d, Activation2d, Flatten and conv_block.

Every backward pass against central differences in float64 (``L = sum(output * R)``, so that dL/doutput = R),
and against PyTorch's ``conv2d``, ``max_pool2d`` and ``batch_norm`` over random shapes where PyTorch is installed;
shapes and the module tree; bad input refused with nothing changed; dtypes.  The plain kernels (the windows and
their adjoint) are checked in test_kernels.py, the fast pooling against the plain one in test_fast.py, a DNIBlock
over a conv block in test_dni.py, and ConvGenerator in test_generators.py.
"""

import re

import numpy as np
import pytest
from conftest import (assert_backward_matches_central_differences, assert_dtype, assert_same_state,
                      assert_tree_dtype, away_from_kinks, normal, randomize, tree_state)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import booleans, dtypes, seeds, update_rules

from sgrad import BatchNorm, Layer, Sequential
from sgrad.nn import kernels
from sgrad.nn.conv import Activation2d, BatchNorm2d, Conv2d, Flatten, MaxPool2d, conv_block

small = st.integers(1, 3)  # batch, channels, kernel sides, strides
sides = st.integers(1, 6)  # height and width of the maps
paddings = st.integers(0, 2)


def _distinct(rng, *shape):
    """Values at least 0.01 apart, in random order: no two entries of a pooling window tie, even nudged by 1e-6."""
    return rng.permutation(int(np.prod(shape))).reshape(shape) * 0.01 - 0.5


def _conv(seed=0, **options):
    """A Conv2d 2 → 3 channels, 3×3, stride 2, padding 1, with random weights and bias."""
    rng = np.random.default_rng(seed)
    conv = Conv2d(2, 3, 3, stride=2, padding=1, rng=rng, **options)
    randomize(conv.parameters, rng)
    return conv


def _maps(seed=1, batch=4, channels=2, height=5, width=6):
    return np.random.default_rng(seed).standard_normal((batch, channels, height, width))


def _pool_windows_are_decided(module, x):
    """Whether every pooling window in ``module`` (a conv block) has a clear winner: its largest positive value
    at least 1e-4 above the next, so that nudging a parameter by 1e-6 cannot change which input wins."""
    if not isinstance(module.modules[-1], MaxPool2d):
        return True
    pool, before_pool = module.modules[-1], x
    for part in module.modules[:-1]:
        before_pool = part.predict(before_pool)
    windows = kernels.sliding_windows(before_pool, pool.kernel_size, pool.stride, pool.padding, fill=-np.inf)
    flat = np.sort(windows.reshape(*windows.shape[:3], -1, windows.shape[5]), axis=3)
    if flat.shape[3] < 2:
        return True
    top, second = flat[:, :, :, -1], flat[:, :, :, -2]
    return bool(np.all((top <= 0) | (top - second > 1e-4)))


# --- gradients against central differences (float64) ------------------------------------------------


@settings(max_examples=40)
@given(batch=small, in_channels=small, out_channels=small, height=sides, width=sides, kernel_height=small,
       kernel_width=small, stride=small, padding=paddings, bias=booleans, seed=seeds)
def test_conv2d_backward_matches_central_differences_for_the_weights_the_bias_and_the_input(
        batch, in_channels, out_channels, height, width, kernel_height, kernel_width, stride, padding, bias, seed):
    assume(kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    rng = np.random.default_rng(seed)
    conv = Conv2d(in_channels, out_channels, (kernel_height, kernel_width), stride=stride, padding=padding, bias=bias,
                  rng=rng)
    randomize(conv.parameters, rng)
    x = normal(rng, batch, in_channels, height, width)
    R = normal(rng, *conv.predict(x).shape)
    assert_backward_matches_central_differences(conv, x, R, repr(conv))


@settings(max_examples=40)
@given(batch=small, channels=small, height=sides, width=sides, kernel=small, stride=small, padding=st.integers(0, 1),
       seed=seeds)
def test_maxpool2d_backward_matches_central_differences(batch, channels, height, width, kernel, stride, padding,
                                                        seed):
    assume(2 * padding <= kernel and kernel <= min(height, width) + 2 * padding)
    pool = MaxPool2d(kernel, stride=stride, padding=padding)
    rng = np.random.default_rng(seed)
    x = _distinct(rng, batch, channels, height, width)
    R = normal(rng, *pool.predict(x).shape)
    assert_backward_matches_central_differences(pool, x, R, repr(pool))


@settings(max_examples=40)
@given(batch=small, channels=small, height=sides, width=sides, training=booleans, seed=seeds)
def test_batchnorm2d_backward_matches_central_differences_in_both_modes(batch, channels, height, width, training,
                                                                        seed):
    assume(batch * height * width >= 2)
    rng = np.random.default_rng(seed)
    norm = BatchNorm2d(channels)
    randomize(norm.parameters, rng)
    norm.running_mean[:], norm.running_var[:] = rng.standard_normal(channels), rng.uniform(0.5, 2.0, channels)
    norm.train(training)
    # each channel with an offset and a scale of its own, far from mean 0 and variance 1
    x = normal(rng, batch, channels, height, width) * rng.uniform(0.5, 3.0, (channels, 1, 1)) + normal(rng, channels, 1, 1)
    assume(np.min(x.var(axis=(0, 2, 3))) > 1e-2)  # a small variance curves the loss too sharply for central differences
    assert_backward_matches_central_differences(norm, x, normal(rng, *x.shape), f"{norm!r}")


@settings(max_examples=30)
@given(batch=st.integers(1, 2), in_channels=small, out_channels=small, side=st.integers(3, 6), kernel=small,
       batchnorm=booleans, pool=st.sampled_from([None, 2]), seed=seeds)
def test_conv_block_backward_matches_central_differences_for_every_parameter_and_the_input(
        batch, in_channels, out_channels, side, kernel, batchnorm, pool, seed):
    assume(not batchnorm or batch * side * side >= 2)
    rng = np.random.default_rng(seed)
    block = conv_block(in_channels, out_channels, kernel, batchnorm=batchnorm, pool=pool, rng=rng)
    randomize(block.parameters, rng)
    x = normal(rng, batch, in_channels, side, side)
    assume(away_from_kinks(block, x) and _pool_windows_are_decided(block, x))
    R = normal(rng, *block.predict(x).shape)
    assert_backward_matches_central_differences(block, x, R, repr(block))


# --- against PyTorch, over random shapes ------------------------------------------------------------


@settings(max_examples=25)
@given(batch=small, in_channels=small, out_channels=small, height=sides, width=sides, kernel_height=small,
       kernel_width=small, stride=small, padding=paddings, bias=booleans, seed=seeds)
def test_conv2d_matches_pytorch_forward_and_gradients(batch, in_channels, out_channels, height, width, kernel_height,
                                                      kernel_width, stride, padding, bias, seed):
    torch = pytest.importorskip("torch")
    assume(kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    rng = np.random.default_rng(seed)
    conv = Conv2d(in_channels, out_channels, (kernel_height, kernel_width), stride=stride, padding=padding, bias=bias,
                  rng=rng)
    randomize(conv.parameters, rng)
    x = normal(rng, batch, in_channels, height, width)
    mine = conv.forward(x)
    R = normal(rng, *mine.shape)
    my_dx = conv.backward(R)

    x_t, w_t = torch.tensor(x, requires_grad=True), torch.tensor(conv.weights, requires_grad=True)
    b_t = torch.tensor(conv.bias, requires_grad=True) if bias else None
    theirs = torch.nn.functional.conv2d(x_t, w_t, b_t, stride=stride, padding=padding)
    (theirs * torch.tensor(R)).sum().backward()
    pairs = [("output", mine, theirs.detach()), ("dL/dx", my_dx, x_t.grad), ("dL/dW", conv.weights_grad, w_t.grad)]
    if bias:
        pairs.append(("dL/db", conv.bias_grad, b_t.grad))
    for name, ours, peer in pairs:
        np.testing.assert_allclose(ours, peer.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name} of {conv!r}: sgrad (mine) against torch.nn.functional.conv2d")


@settings(max_examples=25)
@given(batch=small, channels=small, height=sides, width=sides, kernel=small, stride=small, padding=st.integers(0, 1),
       seed=seeds)
def test_maxpool2d_matches_pytorch_forward_and_gradient(batch, channels, height, width, kernel, stride, padding, seed):
    torch = pytest.importorskip("torch")
    assume(2 * padding <= kernel and kernel <= min(height, width) + 2 * padding)
    pool = MaxPool2d(kernel, stride=stride, padding=padding)
    rng = np.random.default_rng(seed)
    x = normal(rng, batch, channels, height, width)
    mine = pool.forward(x)
    R = normal(rng, *mine.shape)
    my_dx = pool.backward(R)

    x_t = torch.tensor(x, requires_grad=True)
    theirs = torch.nn.functional.max_pool2d(x_t, kernel, stride=stride, padding=padding)
    (theirs * torch.tensor(R)).sum().backward()
    np.testing.assert_array_equal(mine, theirs.detach().numpy(), err_msg=f"output of {pool!r}: sgrad against torch")
    np.testing.assert_allclose(my_dx, x_t.grad.numpy(), rtol=1e-12, atol=1e-14,  # overlapping windows add up
                               err_msg=f"dL/dx of {pool!r}: sgrad (mine) against torch.nn.functional.max_pool2d")


@settings(max_examples=25)
@given(batch=small, channels=small, height=sides, width=sides, seed=seeds)
def test_batchnorm2d_matches_pytorch_in_training_then_in_evaluation(batch, channels, height, width, seed):
    """Output, gradients and running statistics (unbiased variance over batch × height × width) of one training
    step; then the output in evaluation mode, from those running statistics."""
    torch = pytest.importorskip("torch")
    assume(batch * height * width >= 2)
    rng = np.random.default_rng(seed)
    norm = BatchNorm2d(channels, momentum=0.3)
    randomize(norm.parameters, rng)
    x = normal(rng, batch, channels, height, width) * 2.0 + 1.0
    R = normal(rng, *x.shape)
    mine = norm.forward(x)
    my_dx = norm.backward(R)

    peer = torch.nn.BatchNorm2d(channels, momentum=0.3).double()
    with torch.no_grad():
        peer.weight.copy_(torch.tensor(norm.gamma))
        peer.bias.copy_(torch.tensor(norm.beta))
    x_t = torch.tensor(x, requires_grad=True)
    theirs = peer(x_t)
    (theirs * torch.tensor(R)).sum().backward()
    for name, ours, peer_value in [("output", mine, theirs.detach()), ("dL/dx", my_dx, x_t.grad),
                                   ("dL/dgamma", norm.gradients["gamma"], peer.weight.grad),
                                   ("dL/dbeta", norm.gradients["beta"], peer.bias.grad),
                                   ("running_mean", norm.running_mean, peer.running_mean),
                                   ("running_var", norm.running_var, peer.running_var)]:
        np.testing.assert_allclose(ours, peer_value.numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=f"{name}: sgrad's BatchNorm2d (mine) against torch.nn.BatchNorm2d")
    norm.eval()
    peer.eval()
    np.testing.assert_allclose(norm.predict(x), peer(torch.tensor(x)).detach().numpy(), rtol=1e-10, atol=1e-12,
                               err_msg="evaluation mode: sgrad (mine) against torch")


def test_flatten_orders_the_rows_as_pytorch_does_and_backward_undoes_it():
    torch = pytest.importorskip("torch")
    x = _maps(height=3, width=2)
    flatten = Flatten((2, 3, 2))
    rows = flatten.forward(x)
    np.testing.assert_array_equal(rows, torch.flatten(torch.tensor(x), 1).numpy())
    np.testing.assert_array_equal(flatten.backward(rows), x)


# --- shapes, the block, initialisation -----------------------------------------------------------------


@pytest.mark.parametrize("side, kernel, stride, padding, expected", [
    (28, 5, 1, 2, 28), (28, 3, 2, 1, 14), (7, 3, 2, 0, 3), (5, 5, 1, 0, 1), (4, 2, 3, 0, 1)])
def test_conv2d_output_size_is_the_floor_formula(side, kernel, stride, padding, expected):
    conv = Conv2d(1, 2, kernel, stride=stride, padding=padding, seed=0)
    assert conv.forward(np.zeros((3, 1, side, side))).shape == (3, 2, expected, expected)


def test_conv_block_is_conv_batchnorm_relu_pool_and_keeps_the_maps_size_before_the_pool():
    block = conv_block(3, 8, 5, pool=2, seed=0)
    conv, norm, activation, pool = block.modules
    assert isinstance(conv, Conv2d) and conv.bias is None and conv.padding == 2, "beta of the norm plays the bias"
    assert isinstance(norm, BatchNorm2d) and norm.input_dim == 8
    assert isinstance(activation, Activation2d) and activation.nonlin.__name__ == "relu"
    assert isinstance(pool, MaxPool2d) and pool.kernel_size == (2, 2) and pool.stride == 2
    assert (block.input_dim, block.output_dim) == (3, 8), "a conv block's widths are its channels"
    assert block.forward(_maps(channels=3, height=8, width=6)).shape == (4, 8, 4, 3)


def test_conv_block_without_batchnorm_is_conv_with_a_bias_then_the_nonlinearity():
    block = conv_block(2, 3, 3, "tanh", batchnorm=False, seed=0)
    assert [type(m) for m in block.modules] == [Conv2d, Activation2d]
    assert block.modules[0].bias is not None
    np.testing.assert_allclose(block.predict(_maps()), np.tanh(block.modules[0].predict(_maps())), rtol=1e-15)


def test_a_small_cnn_chains_conv_blocks_into_a_dense_top_layer():
    net = Sequential([conv_block(1, 4, 3, pool=2, seed=0), conv_block(4, 6, 3, pool=2, seed=1), Flatten((6, 2, 2)),
                      Layer(24, 10, "identity", seed=2)])
    x = _maps(channels=1, height=8, width=8)
    assert net.forward(x).shape == (4, 10)
    assert net.backward(np.ones((4, 10))).shape == x.shape


def test_he_init_has_standard_deviation_sqrt_2_over_fan_in():
    conv = Conv2d(16, 64, 5, seed=0)  # fan_in = 16 * 5 * 5 = 400
    assert conv.weights.shape == (64, 16, 5, 5)
    assert conv.weights.std() == pytest.approx(np.sqrt(2 / 400), rel=0.03)
    np.testing.assert_array_equal(conv.bias, np.zeros(64))


def test_same_seed_gives_the_same_weights_and_another_seed_others():
    a, b, c = (Conv2d(2, 3, 3, seed=s).weights for s in (5, 5, 6))
    np.testing.assert_array_equal(a, b)
    assert np.all(a != c)


def test_conv2d_sums_over_the_batch_with_no_averaging():
    conv, x = _conv(), _maps(batch=2)
    R = normal(np.random.default_rng(3), *conv.predict(x).shape)
    conv.forward(np.concatenate([x, x]))
    conv.backward(np.concatenate([R, R]))
    doubled = {name: grad.copy() for name, grad in conv.gradients.items()}
    conv.forward(x)
    conv.backward(R)
    for name, grad in conv.gradients.items():
        np.testing.assert_allclose(doubled[name], 2 * grad, rtol=1e-13, err_msg=name)


def test_conv2d_update_is_one_step_of_its_update_rule():
    conv = _conv()
    before = {name: p.copy() for name, p in conv.parameters.items()}
    conv.forward(_maps())
    conv.backward(np.ones(conv.output.shape))
    gradients = {name: g.copy() for name, g in conv.gradients.items()}
    conv.update(0.1)
    for name, param in conv.parameters.items():
        np.testing.assert_allclose(param, before[name] - 0.1 * gradients[name], rtol=1e-15, err_msg=name)


@pytest.mark.parametrize("make", [_conv, lambda: MaxPool2d(2), lambda: conv_block(2, 3, 3, pool=2, seed=0)],
                         ids=["conv", "pool", "block"])
def test_predict_equals_forward_and_changes_nothing(make):
    module, x = make(), _maps()
    before = tree_state(module)
    predicted = module.predict(x)
    assert_same_state(module, before)
    np.testing.assert_array_equal(predicted, module.forward(x))


def test_batchnorm2d_takes_one_example_whose_maps_have_two_pixels_and_refuses_a_single_value():
    norm = BatchNorm2d(2)
    assert norm.forward(_maps(batch=1, height=1, width=2)).shape == (1, 2, 1, 2)
    before = tree_state(norm)
    with pytest.raises(ValueError, match=r"one value per channel \(shape \(1, 2, 1, 1\)\).*use eval\(\)"):
        norm.forward(_maps(batch=1, height=1, width=1))
    assert_same_state(norm, before)
    norm.eval()
    assert norm.forward(_maps(batch=1, height=1, width=1)).shape == (1, 2, 1, 1)


def test_batchnorm2d_in_evaluation_treats_each_example_on_its_own():
    norm = BatchNorm2d(2)
    for seed in range(3):
        norm.forward(_maps(seed) * 3 + 1)  # move the running statistics
    norm.eval()
    x = _maps(7)
    np.testing.assert_allclose(norm.predict(x[1:2]), norm.predict(x)[1:2], rtol=1e-15)


# --- bad input: refused with a clear message, nothing changed ----------------------------------------


def _with_nan(x):
    x = x.copy()
    x[1, 0, 2, 3] = np.nan
    return x


MODULES = {"conv": _conv, "conv-5x5": lambda: Conv2d(2, 3, 5, padding=1, seed=0),
           "pool": lambda: MaxPool2d(3, stride=2), "batchnorm": lambda: BatchNorm2d(2),
           "activation": lambda: Activation2d("relu"), "block": lambda: conv_block(2, 3, 3, pool=2, seed=0)}
BAD_INPUTS = [
    pytest.param("conv", np.zeros((4, 2)), ValueError,
                 r"input must have shape \(batch, 2, height, width\); got shape \(4, 2\)\. Flat rows", id="rows"),
    pytest.param("pool", np.zeros((2, 5, 6)), ValueError, r"got shape \(2, 5, 6\)\. For a single example use input\[None\]",
                 id="one-example-without-its-batch-axis"),
    pytest.param("conv", _maps(channels=3), ValueError, r"\(2 = this layer's in_channels\); got shape \(4, 3, 5, 6\)",
                 id="conv-channels"),
    pytest.param("batchnorm", _maps(channels=3), ValueError, r"\(2 = this batch norm's channels\)",
                 id="batchnorm-channels"),
    pytest.param("block", _maps(channels=1), ValueError, r"i\.e\. 1 channels", id="block-channels"),
    pytest.param("conv-5x5", _maps(height=2, width=6), ValueError,
                 r"the 5×5 kernel of this Conv2d does not fit the input: its maps are 2×6, 4×8 with a padding of 1",
                 id="kernel-larger-than-the-padded-input"),
    pytest.param("pool", _maps(height=2), ValueError, r"the 3×3 kernel of this MaxPool2d does not fit", id="pool-window"),
    pytest.param("activation", _with_nan(_maps()), ValueError, r"input holds NaN or inf \(first in example 1\)",
                 id="nan"),
    pytest.param("conv", np.zeros((4, 2, 5, 6), dtype=np.int64), TypeError, "input must hold floats", id="integers"),
    pytest.param("block", np.zeros((0, 2, 5, 6)), ValueError, r"input is empty \(shape \(0, 2, 5, 6\)\)", id="empty"),
]


@pytest.mark.parametrize("kind, x, error, message", BAD_INPUTS)
def test_bad_input_is_refused_and_changes_nothing(kind, x, error, message):
    module = MODULES[kind]()
    module.forward(_maps(5))  # a first, good forward fills every cache
    module.backward(np.ones(module.forward(_maps(5)).shape))
    before = tree_state(module)
    with pytest.raises(error, match=message):
        module.forward(x)
    with pytest.raises(error, match=message):
        module.predict(x)
    assert_same_state(module, before)


@pytest.mark.parametrize("kind", sorted(MODULES))
def test_output_delta_of_another_shape_is_refused_and_changes_nothing(kind):
    module = MODULES[kind]()
    shape = module.forward(_maps()).shape
    before = tree_state(module)
    wrong = np.ones((shape[0], shape[1], shape[2] + 1, shape[3]))
    with pytest.raises(ValueError, match=rf"output_delta must have the shape of .*{re.escape(str(shape))}; got shape"):
        module.backward(wrong)
    assert_same_state(module, before)


@pytest.mark.parametrize("make, error, message", [
    (lambda: Conv2d(1, 2, 3, stride=0), ValueError, "stride must be at least 1; got 0"),
    (lambda: Conv2d(1, 2, 3, stride=-2), ValueError, "stride must be at least 1; got -2"),
    (lambda: Conv2d(1, 2, 3, stride=1.5), TypeError, r"stride must be an integer; got 1.5"),
    (lambda: MaxPool2d(2, stride=0), ValueError, "stride must be at least 1; got 0"),
    (lambda: Conv2d(1, 2, 3, padding=-1), ValueError, "padding must be at least 0; got -1"),
    (lambda: Conv2d(1, 2, 0), ValueError, "kernel_size must be at least 1; got 0"),
    (lambda: Conv2d(1, 2, (3, 3, 3)), ValueError, r"kernel_size must be an int or a pair \(height, width\)"),
    (lambda: Conv2d(0, 2, 3), ValueError, "in_channels must be at least 1; got 0"),
    (lambda: Conv2d(1, 2, 3, init="glorot"), ValueError, "unknown init 'glorot'"),
    (lambda: MaxPool2d(2, padding=2), ValueError, r"padding must be at most half the kernel, 1 for a 2×2 kernel"),
    (lambda: Flatten((64, 7)), ValueError, r"shape must be \(channels, height, width\)"),
    (lambda: conv_block(1, 2, 3, pool=0), ValueError, "pool must be at least 1; got 0"),
], ids=["stride-zero", "stride-negative", "stride-fraction", "pool-stride-zero", "padding-negative", "kernel-zero",
        "kernel-of-three-sides", "no-channels", "unknown-init", "pool-padding", "flatten-shape", "block-pool"])
def test_bad_settings_are_refused_at_construction(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_flatten_refuses_maps_of_another_shape():
    flatten = Flatten((2, 5, 6))
    with pytest.raises(ValueError, match=r"input must have shape \(batch, 2, 5, 6\), the shape this Flatten was built "
                                         r"for; got shape \(4, 2, 6, 5\)"):
        flatten.forward(_maps(height=6, width=5))


def test_a_cnn_whose_dense_batch_norm_needs_two_examples_refuses_one_before_any_module_remembers_it():
    # The conv block could take one example (BatchNorm2d counts positions too), the dense batch norm after the
    # Flatten cannot: the Sequential refuses the batch at its door, so the conv block caches nothing.
    net = Sequential([conv_block(2, 3, 3, pool=2, seed=0), Flatten((3, 2, 3)), Layer(18, 4, "identity", seed=1),
                      BatchNorm(4)])
    before = tree_state(net)
    with pytest.raises(ValueError, match="batch norm in training mode needs a batch of at least 2 rows"):
        net.forward(_maps(batch=1, height=5, width=6))
    assert_same_state(net, before)
    assert net.forward(_maps(batch=2, height=5, width=6)).shape == (2, 4)


def test_conv2d_backward_before_forward_and_after_update_raise():
    conv = _conv()
    with pytest.raises(ValueError, match=r"backward\(\) needs a forward pass first"):
        conv.backward(np.ones((4, 3, 3, 3)))
    conv.forward(_maps())
    with pytest.raises(ValueError, match=r"update\(\) needs the gradients"):
        conv.update(0.1)
    conv.backward(np.ones(conv.output.shape))
    conv.update(0.1)
    with pytest.raises(ValueError, match=r"backward\(\) after update\(\)"):
        conv.backward(np.ones(conv.output.shape))


# --- dtype ---------------------------------------------------------------------------------------------


@settings(max_examples=20)
@given(dtype=dtypes, rule=update_rules, batchnorm=booleans, seed=seeds)
def test_a_conv_block_keeps_its_dtype_through_a_step(dtype, rule, batchnorm, seed):
    rng = np.random.default_rng(seed)
    block = conv_block(2, 3, 3, batchnorm=batchnorm, pool=2, update_rule=rule, rng=rng, dtype=dtype)
    x = normal(rng, 2, 2, 6, 5, dtype=dtype)
    h = block.forward(x)
    delta = block.backward(normal(rng, *h.shape, dtype=dtype))
    assert_dtype(dtype, output=h, input_delta=delta, **{f"gradient of {k}": g for k, g in block.gradients.items()})
    block.update(0.01)
    assert_tree_dtype(dtype, block, "conv block")


def test_weights_too_large_for_memory_are_refused_before_anything_is_allocated():
    with pytest.raises(ValueError, match=re.escape(
            "the weights of Conv2d(1000000, 1000000, 3x3) would take 72,000,000,000,000 bytes (67,055.2 GiB), more "
            "than the 2 GiB that sgrad allows for the arrays of one call; use fewer channels or a smaller kernel")):
        Conv2d(10**6, 10**6, 3)


def test_float16_is_refused_where_a_backward_pass_would_overflow_it_into_nan_weights():
    with pytest.raises(TypeError, match=re.escape(
            "a Conv2d cannot train in float16: its largest number, 65504, is soon exceeded by the sums of a backward "
            "pass, and the update would then write NaN into the weights; use np.float32 or np.float64")):
        Conv2d(3, 8, 3, dtype=np.float16)
