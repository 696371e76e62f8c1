"""Losses: gradients, values on tiny inputs, reductions, and stability for large logits."""

import warnings

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error

from sgrad.losses import bce_with_logits, get_loss, mse, softmax, softmax_cross_entropy


def _problem(kind, rng, batch=4, width=3):
    """A (prediction or logits, target) pair suited to the loss ``kind``."""
    x = rng.standard_normal((batch, width))
    if kind == "mse":
        return mse, x, rng.standard_normal((batch, width))
    if kind == "bce":
        return bce_with_logits, x, rng.uniform(0.0, 1.0, (batch, width))
    labels = rng.integers(0, width, size=batch)
    if kind == "softmax_ce_integer_labels":
        return softmax_cross_entropy, x, labels
    return softmax_cross_entropy, x, np.eye(width)[labels]


KINDS = ["mse", "bce", "softmax_ce_integer_labels", "softmax_ce_onehot_labels"]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("kind", KINDS)
def test_gradient_matches_central_differences(kind, reduction):
    loss, x, target = _problem(kind, np.random.default_rng(1))
    _, analytic = loss(x, target, reduction=reduction)
    numeric = numerical_gradient(lambda: loss(x, target, reduction=reduction)[0], x)
    error = relative_error(analytic, numeric)
    assert error <= 1e-6, f"{kind} ({reduction}): dL/dx (mine) vs central difference: error {error:.2e}"


@pytest.mark.parametrize("kind", KINDS)
def test_sum_reduction_is_batch_times_mean(kind):
    loss, x, target = _problem(kind, np.random.default_rng(2), batch=5)
    mean_value, mean_grad = loss(x, target, reduction="mean")
    sum_value, sum_grad = loss(x, target, reduction="sum")
    assert sum_value == pytest.approx(5 * mean_value, rel=1e-12)
    np.testing.assert_allclose(sum_grad, 5 * mean_grad, rtol=1e-12)


def test_mean_is_the_default_reduction():
    _, x, target = _problem("mse", np.random.default_rng(3))
    assert mse(x, target)[0] == mse(x, target, reduction="mean")[0]


def test_mse_value_and_gradient_by_hand():
    prediction = np.array([[1.0, 2.0], [3.0, 4.0]])
    target = np.array([[0.0, 0.0], [0.0, 6.0]])
    # squared errors 1, 4, 9, 4 -> sum 18; L_sum = 18 / 2 = 9, L_mean = 9 / 2 rows
    value, grad = mse(prediction, target, reduction="mean")
    assert value == pytest.approx(4.5, rel=1e-15)
    np.testing.assert_array_equal(grad, [[0.5, 1.0], [1.5, -1.0]])
    assert mse(prediction, target, reduction="sum")[0] == pytest.approx(9.0, rel=1e-15)


def test_mse_sum_gradient_is_the_blogs_delta():
    prediction = np.array([[0.25, 0.75]])
    target = np.array([[1.0, 0.0]])
    np.testing.assert_array_equal(mse(prediction, target, reduction="sum")[1], prediction - target)


def test_bce_value_and_gradient_by_hand():
    logits = np.array([[0.0, 2.0]])
    target = np.array([[1.0, 0.0]])
    # -log(sigmoid(0)) = log 2; -log(1 - sigmoid(2)) = log(1 + e^2)
    value, grad = bce_with_logits(logits, target, reduction="sum")
    assert value == pytest.approx(np.log(2.0) + np.log1p(np.exp(2.0)), rel=1e-14)
    np.testing.assert_allclose(grad, [[0.5 - 1.0, 1.0 / (1.0 + np.exp(-2.0))]], rtol=1e-14)


def test_softmax_cross_entropy_value_and_gradient_by_hand():
    logits = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    labels = np.array([0, 2])
    # row 0: -log(1/3) = log 3; row 1: -3 + log(e + e^2 + e^3)
    row1 = -3.0 + np.log(np.exp(1.0) + np.exp(2.0) + np.exp(3.0))
    value, grad = softmax_cross_entropy(logits, labels, reduction="mean")
    assert value == pytest.approx((np.log(3.0) + row1) / 2, rel=1e-14)
    p = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    expected = np.array([[1 / 3 - 1, 1 / 3, 1 / 3], [p[0], p[1], p[2] - 1]]) / 2
    np.testing.assert_allclose(grad, expected, rtol=1e-14, atol=1e-16)


def test_integer_and_onehot_labels_give_the_same_loss():
    _, logits, labels = _problem("softmax_ce_integer_labels", np.random.default_rng(4))
    value_int, grad_int = softmax_cross_entropy(logits, labels)
    value_hot, grad_hot = softmax_cross_entropy(logits, np.eye(3)[labels])
    assert value_int == pytest.approx(value_hot, rel=1e-15)
    np.testing.assert_allclose(grad_int, grad_hot, rtol=1e-15)


def test_softmax_cross_entropy_of_probability_rows_is_the_definition():
    # Soft labels whose rows sum to 1 only within the accepted 1e-5: the value is -sum(t * log softmax) as written,
    # rows of another mass included.
    rng = np.random.default_rng(6)
    logits = 3.0 * rng.standard_normal((5, 4))
    labels = rng.dirichlet(np.ones(4), size=5)
    labels[1] *= 1 + 8e-6
    labels[3] *= 1 - 8e-6
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    for reduction, scale in (("sum", 1.0), ("mean", 1 / 5)):
        value, grad = softmax_cross_entropy(logits, labels, reduction=reduction)
        assert value == pytest.approx(-scale * np.sum(labels * log_softmax), rel=1e-13)
        np.testing.assert_allclose(grad, scale * (np.exp(log_softmax) - labels), rtol=1e-12, atol=1e-15)


def test_softmax_rows_sum_to_one_for_huge_logits():
    p = softmax(np.array([[1e4, 0.0, -1e4], [3.0, 3.0, 3.0]]))
    np.testing.assert_allclose(p, [[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bce_is_finite_and_silent_for_logits_up_to_1e4(dtype):
    logits = np.array([[1e4, -1e4, 1e4, -1e4]], dtype=dtype)
    target = np.array([[0.0, 1.0, 1.0, 0.0]], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, grad = bce_with_logits(logits, target, reduction="sum")
    # two confidently wrong logits cost |z| each, two confidently right ones cost nothing
    assert value == pytest.approx(2e4, rel=1e-6)
    np.testing.assert_array_equal(grad, [[1.0, -1.0, 0.0, 0.0]])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softmax_cross_entropy_is_finite_and_silent_for_logits_up_to_1e4(dtype):
    logits = np.array([[1e4, -1e4], [-1e4, 1e4]], dtype=dtype)
    labels = np.array([1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, grad = softmax_cross_entropy(logits, labels, reduction="sum")
    # row 0 is wrong by a margin of 2e4, row 1 is right by the same margin
    assert value == pytest.approx(2e4, rel=1e-6)
    np.testing.assert_array_equal(grad, [[1.0, -1.0], [0.0, 0.0]])


def test_unknown_reduction_raises():
    x = np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"reduction must be one of \('mean', 'sum', 'none'\); got 'max'"):
        mse(x, x, reduction="max")


def test_bce_targets_outside_unit_interval_raise():
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]; got values from -0.5 to 1.0"):
        bce_with_logits(np.zeros((1, 2)), np.array([[-0.5, 1.0]]))


def test_labels_out_of_range_raise():
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\] for 3 classes; got values from 0 to 3"):
        softmax_cross_entropy(np.zeros((2, 3)), np.array([0, 3]))


def test_float_class_indices_raise_type_error():
    with pytest.raises(TypeError, match="1-D labels must be integer class indices; got dtype float64"):
        softmax_cross_entropy(np.zeros((2, 3)), np.array([0.0, 1.0]))


def test_target_of_another_shape_raises():
    with pytest.raises(ValueError, match=r"target must have the shape of the prediction, \(2, 3\); got shape \(1, 3\)"):
        mse(np.zeros((2, 3)), np.zeros((1, 3)))


def test_get_loss_by_name():
    assert get_loss("mse") is mse
    assert get_loss("bce") is bce_with_logits
    assert get_loss("softmax_ce") is softmax_cross_entropy
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        get_loss("hinge")


@pytest.mark.parametrize("rows", [[[3.0, -5.0]], [[0.2, 0.2]]], ids=["negative", "not-summing-to-one"])
def test_two_d_labels_must_be_distributions(rows):
    with pytest.raises(ValueError, match="non-negative, each row summing to 1"):
        softmax_cross_entropy(np.zeros((1, 2)), np.array(rows))


@pytest.mark.parametrize("loss", [mse, bce_with_logits, softmax_cross_entropy])
def test_none_reduction_gives_each_examples_loss_and_the_sum_gradient(loss):
    rng = np.random.default_rng(5)
    prediction = rng.standard_normal((4, 3))
    target = np.eye(3)[[0, 2, 1, 1]]
    values, grad = loss(prediction, target, reduction="none")
    assert values.shape == (4,)
    for i in range(4):
        assert values[i] == pytest.approx(loss(prediction[i:i + 1], target[i:i + 1], reduction="sum")[0], rel=1e-12)
    np.testing.assert_allclose(grad, loss(prediction, target, reduction="sum")[1], rtol=1e-15)


def _onehot_with(value, dtype=np.float64):
    labels = np.eye(3, dtype=dtype)[[0, 1, 2, 1]]
    labels[2, 1] = value
    return labels


@pytest.mark.parametrize("labels, error, fragment", [
    (_onehot_with(np.nan), ValueError, "labels holds NaN or inf (first in row 2)"),
    (_onehot_with(np.inf), ValueError, "labels holds NaN or inf (first in row 2)"),
    (_onehot_with(-np.inf), ValueError, "labels holds NaN or inf (first in row 2)"),
    (_onehot_with(-0.5), ValueError, "2-D labels must be one-hot or probability rows"),
    (_onehot_with(0.5), ValueError, "2-D labels must be one-hot or probability rows"),
    (np.eye(3, dtype=np.int64)[[0, 1, 2, 1]], TypeError, "labels must hold floats; got dtype int64"),
    (np.eye(4)[[0, 1, 2, 1]], ValueError, "labels must have shape (batch, 3) (3 = classes); got shape (4, 4)"),
    (np.eye(3)[[0, 1, 2]], ValueError, "one-hot labels must have the logits' shape (4, 3); got (3, 3)"),
], ids=["nan", "inf", "minus-inf", "negative", "row-not-summing-to-one", "integer", "too-wide", "too-few-rows"])
def test_softmax_cross_entropy_refuses_bad_one_hot_labels_in_the_users_words(labels, error, fragment):
    logits = np.random.default_rng(0).standard_normal((4, 3))
    with np.errstate(all="raise"):  # as in the training loops: a bad label must not surface as a FloatingPointError
        with pytest.raises(error) as raised:
            softmax_cross_entropy(logits, labels)
    assert fragment in str(raised.value)
