"""ConditionedConv2d (sgrad/nn/conditioned_conv.py): z = W ⋆ h + b + (c V + a), c's map added at every position.

The backward pass against central differences in float64 for every parameter and the input; the linear map of
c the same at every position, and equal to c V + a; the tree; bad input refused.  ConvGenerator's
``condition='linear'`` built on it is in test_generators.py.
"""

import numpy as np
import pytest
from conftest import assert_backward_matches_central_differences, randomize

from sgrad.nn.conditioned_conv import ConditionedConv2d
from sgrad.nn.conv import Conv2d

BATCH, CHANNELS, CONDITION, OUT = 3, 2, 4, 3


def _module(padding=2, kernel=5, bias=True):
    module = ConditionedConv2d(CHANNELS, CONDITION, OUT, kernel, padding=padding, bias=bias, seed=0)
    randomize(module.parameters, np.random.default_rng(1))
    return module


def _input(seed=2, height=4, width=5):
    """[h, c] as the generator joins them: h's maps, then c broadcast over maps of h's size."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((BATCH, CHANNELS, height, width))
    c = rng.standard_normal((BATCH, CONDITION))
    return np.concatenate([h, np.broadcast_to(c[:, :, None, None], (BATCH, CONDITION, height, width))], axis=1), c


@pytest.mark.parametrize("padding, kernel, bias", [(2, 5, True), (0, 3, True), (1, 3, False)])
def test_backward_matches_central_differences_for_every_parameter_and_the_input(padding, kernel, bias):
    module = _module(padding, kernel, bias)
    x, _ = _input()
    R = np.random.default_rng(3).standard_normal(module.predict(x).shape)
    assert_backward_matches_central_differences(module, x, R, f"ConditionedConv2d padding {padding}")


def test_the_conditions_map_adds_c_V_plus_a_at_every_position_border_or_not():
    module = _module()
    x, c = _input()
    h_only = Conv2d(CHANNELS, OUT, 5, padding=2, seed=0)
    h_only.weights[...], h_only.bias[...] = module.conv.weights, module.conv.bias
    added = module.forward(x) - h_only.forward(x[:, :CHANNELS])
    expected = c @ module.condition.weights + module.condition.bias
    np.testing.assert_allclose(added, np.broadcast_to(expected[:, :, None, None], added.shape), atol=1e-12)


def test_the_tree_names_both_maps_and_update_steps_both():
    module = _module()
    assert sorted(module.parameters) == ["condition.bias", "condition.weights", "conv.bias", "conv.weights"]
    assert module.input_dim == CHANNELS + CONDITION and module.output_dim == OUT
    x, _ = _input()
    before = {name: p.copy() for name, p in module.parameters.items()}
    module.forward(x)
    module.backward(np.ones_like(module.output), input_delta=False)
    module.update(0.1)
    assert all(not np.array_equal(before[name], p) for name, p in module.parameters.items())


def test_pytorch_init_draws_weights_and_biases_within_1_over_sqrt_fan_in():
    module = ConditionedConv2d(20, 10, 20, 5, padding=2, init="pytorch", bias_init="pytorch", seed=0)
    for array, fan_in in ((module.conv.weights, 500), (module.conv.bias, 500), (module.condition.weights, 10),
                          (module.condition.bias, 10)):
        limit = 1 / np.sqrt(fan_in)
        assert np.abs(array).max() <= limit and np.abs(array).max() > 0.8 * limit


@pytest.mark.parametrize("x, message", [(np.ones((2, CHANNELS, 4, 4)), f"{CHANNELS + CONDITION} = in_channels"),
                                        (np.ones((2, 6, 4)), "shape"),
                                        (np.full((1, CHANNELS + CONDITION, 4, 4), np.inf), "inf")])
def test_bad_input_is_refused_before_anything_is_remembered(x, message):
    module = _module()
    with pytest.raises(ValueError, match=message):
        module.forward(x)
    assert module.output is None and module.conv.input is None


def test_backward_before_forward_is_refused():
    with pytest.raises(ValueError, match="forward pass first"):
        _module().backward(np.ones((BATCH, OUT, 4, 5)))
