"""Losses: gradients, values on tiny inputs, reductions, dtype, and stability for logits up to 1e4.

A naive ``log(sigmoid(z))`` takes the log of 0 and a naive softmax overflows in exp.  Every test runs with
floating-point errors raising (the autouse fixture in conftest.py) and warnings as errors (setup.cfg), so
any overflow, division by zero or NaN fails it.  Bad arguments shared by the whole public API (unknown
reductions, labels out of range, shapes...) are specified in test_bad_input.py.
"""

import numpy as np
import pytest
from conftest import assert_dtype, assert_gradients_match, normal
from hypothesis import given
from strategies import (LIMIT, LOSS_NAMES, batches, dtypes, logit_rows_with_targets, loss_names, reductions, seeds,
                        widths)

from sgrad.nn.losses import bce_with_logits, get_loss, mse, softmax, softmax_cross_entropy

DTYPES = [np.float32, np.float64]


def loss_case(name, rng, batch, width, dtype=np.float64):
    """``(loss function, its second argument)`` for one of LOSS_NAMES; float targets take ``dtype``."""
    if name == "mse":
        return mse, normal(rng, batch, width, dtype=dtype)
    if name == "bce":
        return bce_with_logits, rng.uniform(0, 1, (batch, width)).astype(dtype)
    if name == "softmax_ce, class indices":
        return softmax_cross_entropy, rng.integers(0, width, batch)
    return softmax_cross_entropy, rng.dirichlet(np.ones(width), batch).astype(dtype)  # probability rows


@given(name=loss_names, reduction=reductions, batch=batches, width=widths, seed=seeds)
def test_gradient_matches_central_differences(name, reduction, batch, width, seed):
    rng = np.random.default_rng(seed)
    loss_fn, target = loss_case(name, rng, batch, width)
    prediction = 3 * normal(rng, batch, width)

    def total():  # for reduction="none" the gradient is that of the sum of the per-example losses
        return float(np.sum(loss_fn(prediction, target, reduction)[0]))

    _, gradient = loss_fn(prediction, target, reduction)
    assert_gradients_match(total, {"prediction": gradient}, {"prediction": prediction},
                           f"{name}, reduction {reduction!r}, shape {prediction.shape}")


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_sum_reduction_is_batch_times_mean(name):
    rng = np.random.default_rng(2)
    loss, target = loss_case(name, rng, 5, 3)
    x = rng.standard_normal((5, 3))
    mean_value, mean_grad = loss(x, target, reduction="mean")
    sum_value, sum_grad = loss(x, target, reduction="sum")
    assert sum_value == pytest.approx(5 * mean_value, rel=1e-12)
    np.testing.assert_allclose(sum_grad, 5 * mean_grad, rtol=1e-12)


def test_mean_is_the_default_reduction():
    rng = np.random.default_rng(3)
    x, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
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
    rng = np.random.default_rng(4)
    logits, labels = rng.standard_normal((4, 3)), rng.integers(0, 3, size=4)
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


@given(dtype=dtypes, name=loss_names, reduction=reductions, batch=batches, width=widths, seed=seeds)
def test_gradient_keeps_the_dtype_of_the_prediction(dtype, name, reduction, batch, width, seed):
    rng = np.random.default_rng(seed)
    loss_fn, target = loss_case(name, rng, batch, width, dtype)
    value, gradient = loss_fn(normal(rng, batch, width, dtype=dtype), target, reduction)
    assert_dtype(dtype, gradient=gradient)
    if reduction == "none":
        assert_dtype(dtype, per_example_loss=value)


# --- stability -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_of_extreme_logits_is_a_distribution(dtype):
    logits = np.array([[LIMIT, -LIMIT, 0.0], [-LIMIT, -LIMIT, -LIMIT], [LIMIT, LIMIT, LIMIT - 1], [3.0, 3.0, 3.0]],
                      dtype=dtype)
    p = softmax(logits)
    assert_dtype(dtype, softmax=p)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=4 * np.finfo(dtype).eps)
    np.testing.assert_array_equal(p[0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(p[1], 1 / 3, rtol=4 * np.finfo(dtype).eps)
    np.testing.assert_allclose(p[3], 1 / 3, rtol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bce_with_logits_of_confident_logits_is_finite(dtype):
    """Binary cross-entropy is softplus(-z) for target 1 and softplus(z) for target 0: |z| when wrong, 0 when right."""
    z = np.array([[LIMIT, -LIMIT, LIMIT, -LIMIT]], dtype=dtype)
    target = np.array([[1.0, 0.0, 0.0, 1.0]], dtype=dtype)
    value, gradient = bce_with_logits(z, target, reduction="none")
    assert_dtype(dtype, loss=value, gradient=gradient)
    np.testing.assert_allclose(value, [2 * LIMIT])  # two right (0 each), two wrong (1e4 each)
    np.testing.assert_array_equal(gradient, [[0.0, 0.0, 1.0, -1.0]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", ["class indices", "one-hot"])
def test_softmax_cross_entropy_of_confident_logits_is_finite(dtype, labels):
    """Confidently right costs 0; confidently wrong by 2e4 in logits costs 2e4, not inf."""
    logits = np.array([[LIMIT, -LIMIT], [LIMIT, -LIMIT]], dtype=dtype)
    classes = np.array([0, 1])
    target = classes if labels == "class indices" else np.eye(2, dtype=dtype)[classes]
    per_example, gradient = softmax_cross_entropy(logits, target, reduction="none")
    assert_dtype(dtype, loss=per_example, gradient=gradient)
    np.testing.assert_allclose(per_example, [0.0, 2 * LIMIT])
    np.testing.assert_array_equal(gradient, [[0.0, 0.0], [1.0, -1.0]])


@given(row_and_targets=logit_rows_with_targets(), dtype=dtypes)
def test_log_losses_stay_finite_for_any_logits_up_to_1e4(row_and_targets, dtype):
    row, bits, label = row_and_targets
    z = np.array([row], dtype=dtype)
    for name, (value, gradient) in {"bce_with_logits": bce_with_logits(z, np.array([bits], dtype=dtype)),
                                    "softmax_cross_entropy": softmax_cross_entropy(z, np.array([label]))}.items():
        assert np.isfinite(value) and np.isfinite(gradient).all(), f"{name} is not finite: {value}, {gradient}"
        assert_dtype(dtype, **{f"{name} gradient": gradient})
        assert value >= 0, f"{name} is a cross-entropy, never negative; got {value}"
    p = softmax(z)
    assert np.isfinite(p).all()
    assert_dtype(dtype, softmax=p)


# --- names and errors ------------------------------------------------------------------------


def test_get_loss_by_name():
    assert get_loss("mse") is mse
    assert get_loss("bce") is bce_with_logits
    assert get_loss("softmax_ce") is softmax_cross_entropy


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
