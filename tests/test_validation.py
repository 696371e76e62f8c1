"""The checks at the public boundary (sgrad/argument_checks.py) on what NumPy lets through: ndarray subclasses,
numbers near the float maximum, and float64 data that does not fit a float32 network.

Most messages of the checks are specified where a public call meets them (test_bad_input.py); here are the
behaviours of the checks themselves.
"""

import numpy as np
import pytest

from sgrad import Layer, mse, softmax_cross_entropy
from sgrad.argument_checks import check_batch, check_feature_maps, check_fits_dtype, check_same_shape


def as_matrix(array):
    return array.view(np.matrix)  # a view, so NumPy's PendingDeprecationWarning for np.matrix(...) is not raised


def test_a_matrix_would_turn_the_elementwise_maths_into_matrix_products():
    """Why np.matrix is refused: with square shapes, * silently becomes a matrix product."""
    a = np.arange(4.0).reshape(2, 2)
    with pytest.warns(PendingDeprecationWarning):  # NumPy's own advice against np.matrix
        product = as_matrix(a) * as_matrix(a)
    assert product.tolist() == [[2.0, 3.0], [6.0, 11.0]]
    assert (a * a).tolist() == [[0.0, 1.0], [4.0, 9.0]]


def test_a_matrix_input_is_refused_with_np_asarray_advice():
    layer = Layer(2, 2, "tanh", seed=0)
    with pytest.raises(TypeError, match=r"input must be a NumPy array of shape \(batch, 2\); got a numpy.matrix, "
                                        r"whose \* is a matrix product.*; pass np.asarray\(input\)"):
        layer.forward(as_matrix(np.ones((2, 2))))
    assert layer.input is None


def test_a_masked_input_is_refused_with_advice_on_the_mask():
    x = np.ma.masked_array(np.ones((3, 2)), mask=[[0, 1], [0, 0], [0, 0]])
    with pytest.raises(TypeError, match=r"input must be .*; got a masked array, but sgrad reads every entry, masked "
                                        r"or not; pass input.filled\(value\).*or np.asarray\(input\)"):
        Layer(2, 2, "tanh", seed=0).forward(x)


def test_masked_labels_are_refused_by_the_loss():
    logits = np.zeros((3, 4))
    labels = np.ma.masked_array(np.array([0, 1, 2]), mask=[0, 1, 0])
    with pytest.raises(TypeError, match=r"labels must be a NumPy array of integer classes \(3,\) or one-hot rows "
                                        r"\(3, 4\); got a masked array"):
        softmax_cross_entropy(logits, labels)


def test_a_matrix_target_is_refused_by_the_loss():
    with pytest.raises(TypeError, match=r"target must be .*numpy.matrix.*np.asarray\(target\)"):
        mse(np.zeros((2, 2)), as_matrix(np.ones((2, 2))))


def test_another_subclass_is_refused_too():
    class Tagged(np.ndarray):
        pass

    with pytest.raises(TypeError, match=r"x must be .*; got a Tagged, a subclass of numpy.ndarray .*np.asarray\(x\)"):
        check_batch(np.ones((2, 2)).view(Tagged), "x")


def test_a_memmap_is_taken_and_trains_exactly_as_the_array_it_holds(tmp_path):
    """A dataset opened with np.load(mmap_mode='r') is an np.memmap: its operators are ndarray's, so it is taken."""
    x = np.random.default_rng(0).standard_normal((5, 3))
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert type(mapped) is np.memmap
    plain, from_file = Layer(3, 4, "tanh", seed=1), Layer(3, 4, "tanh", seed=1)
    for layer, data in ((plain, x), (from_file, mapped)):
        layer.forward(data)
        layer.backward(np.ones((5, 4)))
        layer.update(0.1)
    np.testing.assert_array_equal(from_file.weights, plain.weights)
    np.testing.assert_array_equal(from_file.bias, plain.bias)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_finite_check_does_not_overflow_at_the_float_maximum(dtype):
    """The loop trains with NumPy's overflow raising: the check itself must not overflow on finite input."""
    x = np.full((8, 3), np.finfo(dtype).max, dtype=dtype)
    x[::2] *= -1
    with np.errstate(all="raise"):
        assert check_batch(x, "x") is x


def test_float64_data_beyond_float32_is_refused_before_the_cast():
    x = np.array([[1.0, 1e39], [-2e39, 0.0]])
    with pytest.raises(ValueError, match=r"x holds 2e\+39, beyond the largest float32 \(3.40282e\+38\): cast to "
                                         r"float32 it would become inf. Scale the data down, or train in float64"):
        check_fits_dtype(x, "x", "float32")
    assert check_fits_dtype(x, "x", "float64") is x
    assert check_fits_dtype(np.full((2, 2), 3.4e38), "x", "float32") is not None


# --- feature maps: the 4-D twin of check_batch -----------------------------------------------------------


def test_check_feature_maps_returns_maps_and_names_the_channels_it_expected():
    maps = np.zeros((2, 3, 4, 5))
    assert check_feature_maps(maps, "h", 3) is maps
    with pytest.raises(ValueError, match=r"h must have shape \(batch, 4, height, width\) \(4 = the block's channels\); "
                                         r"got shape \(2, 3, 4, 5\), i\.e\. 3 channels"):
        check_feature_maps(maps, "h", 4, channels_name="the block's channels")


@pytest.mark.parametrize("reference, message", [
    (np.zeros((2, 3)), r"delta must have shape \(batch, 3\)"),
    (np.zeros((2, 3, 4, 5)), r"delta must have shape \(batch, 3, height, width\)"),
], ids=["rows-ask-for-rows", "maps-ask-for-maps"])
def test_check_same_shape_asks_for_the_rank_of_its_reference(reference, message):
    """Rows (batch, width) are never taken for maps, nor maps for rows: no silent reshaping either way."""
    other = np.zeros((2, 3, 4, 5)) if reference.ndim == 2 else np.zeros((2, 3))
    with pytest.raises(ValueError, match=message):
        check_same_shape(other, "delta", reference, "the last output")
    assert check_same_shape(reference.copy(), "delta", reference, "the last output").shape == reference.shape
