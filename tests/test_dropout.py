"""Dropout and Dropout2d (sgrad/nn/dropout.py).

The backward pass against central differences in float64 (the mask fixed: the count of masks drawn is put
back before each forward, so every forward of the check draws the same one); the masks (which entries, how
often, the scale); evaluation mode; the count as a buffer (a checkpoint and a failed step carry it); bad input.
"""

import numpy as np
import pytest
from conftest import assert_gradients_match

from sgrad.nn.blocks import Sequential
from sgrad.nn.checkpoint import load_network_state, network_state
from sgrad.nn.conv import Conv2d
from sgrad.nn.dropout import Dropout, Dropout2d
from sgrad.nn.module import restored_on_error


def _rows(seed=0, shape=(6, 5)):
    return np.random.default_rng(seed).standard_normal(shape)


def _same_mask_every_time(module, x, R):
    """L = sum(module.forward(x) * R), each forward with the mask of the first."""
    drawn = int(module.masks_drawn)

    def loss():
        module.masks_drawn[...] = drawn
        return float(np.sum(module.forward(x) * R))
    return loss


@pytest.mark.parametrize("make, shape", [(lambda: Dropout(0.5, seed=0), (6, 5)),
                                         (lambda: Dropout(0.3, seed=1), (3, 2, 4, 4)),
                                         (lambda: Dropout2d(0.5, seed=2), (4, 3, 5, 4))],
                         ids=["dropout-rows", "dropout-maps", "dropout2d"])
def test_backward_matches_central_differences_with_the_mask_of_the_forward_pass(make, shape):
    module, x, R = make(), _rows(3, shape), _rows(4, shape)
    loss = _same_mask_every_time(module, x, R)
    loss()
    assert_gradients_match(loss, {"input": module.backward(R)}, {"input": x}, type(module).__name__)


def test_dropout_keeps_each_entry_with_probability_1_minus_p_and_scales_it_by_1_over_1_minus_p():
    module = Dropout(0.25, seed=0)
    x = np.ones((400, 50))
    h = module.forward(x)
    assert set(np.unique(h)) == {0.0, 1 / 0.75}
    assert abs(np.mean(h == 0) - 0.25) < 0.01  # 20,000 draws: the standard error is 0.003
    assert abs(h.mean() - 1.0) < 0.02, "the expected output is x"


def test_dropout2d_keeps_or_drops_whole_maps_of_each_example():
    module = Dropout2d(0.5, seed=0)
    h = module.forward(np.ones((50, 8, 3, 4)))
    per_map = h.reshape(50, 8, -1)
    assert np.all(per_map.min(axis=2) == per_map.max(axis=2)), "a map is kept or dropped whole"
    assert set(np.unique(per_map)) == {0.0, 2.0}
    assert 0.4 < np.mean(per_map[:, :, 0] == 0) < 0.6


def test_each_forward_draws_a_new_mask_and_the_same_seed_the_same_masks():
    a, b, x = Dropout(0.5, seed=7), Dropout(0.5, seed=7), np.ones((10, 10))
    first, second = a.forward(x), a.forward(x)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(b.forward(x), first)
    np.testing.assert_array_equal(b.forward(x), second)
    assert not np.array_equal(Dropout(0.5, seed=8).forward(x), first)


def test_in_evaluation_mode_and_in_predict_the_output_is_the_input_and_no_mask_is_drawn():
    module, x = Dropout(0.5, seed=0), _rows()
    np.testing.assert_array_equal(module.predict(x), x)
    module.eval()
    np.testing.assert_array_equal(module.forward(x), x)
    np.testing.assert_array_equal(module.backward(x + 1), x + 1)
    assert int(module.masks_drawn) == 0


def test_p_zero_changes_nothing():
    x = _rows()
    np.testing.assert_array_equal(Dropout(0.0, seed=0).forward(x), x)


def test_a_checkpoint_carries_the_count_so_a_restored_module_draws_the_masks_the_saved_one_would():
    module, x = Dropout(0.5, seed=3), np.ones((6, 6))
    module.forward(x)
    saved = network_state(module)
    expected = module.forward(x)
    restored = Dropout(0.5, seed=3)
    load_network_state(restored, saved)
    np.testing.assert_array_equal(restored.forward(x), expected)


def test_a_step_that_fails_puts_the_count_back():
    module, x = Dropout(0.5, seed=3), np.ones((4, 3, 2, 2))
    net = Sequential([module, Conv2d(2, 1, 1, seed=0)])  # refuses x's 3 channels after the dropout drew
    with pytest.raises(ValueError, match="2 = this layer's in_channels"), restored_on_error(net):
        net.forward(x)
    assert int(module.masks_drawn) == 0


@pytest.mark.parametrize("make, message", [(lambda: Dropout(1.0), "p must be"), (lambda: Dropout(-0.1), "p must be"),
                                           (lambda: Dropout("half"), "p must be")])
def test_bad_settings_are_refused(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


@pytest.mark.parametrize("module, x, message", [
    (Dropout(0.5, seed=0), np.ones(5), "shape"),
    (Dropout(0.5, seed=0), np.array([[1.0, np.nan]]), "NaN"),
    (Dropout2d(0.5, seed=0), np.ones((2, 3)), "shape"),
    (Dropout(0.5, seed=0), np.ones((2, 3), dtype=int), "floats")])
def test_bad_input_is_refused_before_a_mask_is_drawn(module, x, message):
    with pytest.raises((ValueError, TypeError), match=message):
        module.forward(x)
    assert int(module.masks_drawn) == 0


def test_backward_before_forward_and_with_another_shape_are_refused():
    module = Dropout(0.5, seed=0)
    with pytest.raises(ValueError, match="forward pass first"):
        module.backward(np.ones((2, 2)))
    module.forward(np.ones((2, 2)))
    with pytest.raises(ValueError, match="output_delta"):
        module.backward(np.ones((2, 3)))
