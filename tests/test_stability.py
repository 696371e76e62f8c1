"""Numerical stability: sigmoid, softmax and the log losses stay finite and silent for |z| up to 1e4.

A naive ``1 / (1 + exp(-z))`` overflows in exp for z = -1e4 (float64 overflows past 709, float32
past 88), and a naive ``log(sigmoid(z))`` takes the log of 0.  Each test runs in float32 and float64
with floating-point errors raising (the autouse fixture in conftest.py) and warnings as errors
(setup.cfg), so any overflow, division by zero or NaN fails it.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sgrad import (SyntheticLossGenerator, bce_with_logits, sigmoid, sigmoid_out2deriv, softmax, softmax_cross_entropy,
                   tanh, tanh_out2deriv)

LIMIT = 1e4
EXTREMES = [-LIMIT, -1e3, -100.0, -89.0, -20.0, -1.0, 0.0, 1.0, 20.0, 89.0, 100.0, 1e3, LIMIT]
DTYPES = [np.float32, np.float64]


def assert_finite(dtype, **arrays):
    for name, value in arrays.items():
        value = np.asarray(value)
        assert np.isfinite(value).all(), f"{name} is not finite: {value}"
        if value.ndim:
            assert value.dtype == dtype, f"{name} is {value.dtype}; expected {np.dtype(dtype)}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_sigmoid_saturates_to_exactly_0_and_1_without_overflow(dtype):
    z = np.array([EXTREMES], dtype=dtype)
    s = sigmoid(z)
    assert_finite(dtype, sigmoid=s, derivative=sigmoid_out2deriv(s))
    assert s[0, 0] == 0.0 and s[0, -1] == 1.0
    assert np.all((s >= 0) & (s <= 1))
    assert np.all(np.diff(s[0]) >= 0), "sigmoid must not decrease"
    np.testing.assert_allclose(s + sigmoid(-z), 1.0, rtol=0, atol=np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_saturates_without_overflow(dtype):
    t = tanh(np.array([EXTREMES], dtype=dtype))
    assert_finite(dtype, tanh=t, derivative=tanh_out2deriv(t))
    assert t[0, 0] == -1.0 and t[0, -1] == 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_of_extreme_logits_is_a_distribution(dtype):
    logits = np.array([[LIMIT, -LIMIT, 0.0], [-LIMIT, -LIMIT, -LIMIT], [LIMIT, LIMIT, LIMIT - 1]], dtype=dtype)
    p = softmax(logits)
    assert_finite(dtype, softmax=p)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=4 * np.finfo(dtype).eps)
    np.testing.assert_array_equal(p[0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(p[1], 1 / 3, rtol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", ["class indices", "one-hot"])
def test_softmax_cross_entropy_of_confident_logits_is_finite(dtype, labels):
    """Confidently right costs 0; confidently wrong by 2e4 in logits costs 2e4, not inf."""
    logits = np.array([[LIMIT, -LIMIT], [LIMIT, -LIMIT]], dtype=dtype)
    classes = np.array([0, 1])
    target = classes if labels == "class indices" else np.eye(2, dtype=dtype)[classes]
    per_example, gradient = softmax_cross_entropy(logits, target, reduction="none")
    assert_finite(dtype, loss=per_example, gradient=gradient)
    np.testing.assert_allclose(per_example, [0.0, 2 * LIMIT])
    np.testing.assert_allclose(gradient, [[0.0, 0.0], [1.0, -1.0]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_bce_with_logits_of_confident_logits_is_finite(dtype):
    """Binary cross-entropy is softplus(-z) for target 1 and softplus(z) for target 0: |z| when wrong, 0 when right."""
    z = np.array([[LIMIT, -LIMIT, LIMIT, -LIMIT]], dtype=dtype)
    target = np.array([[1.0, 0.0, 0.0, 1.0]], dtype=dtype)
    value, gradient = bce_with_logits(z, target, reduction="none")
    assert_finite(dtype, loss=value, gradient=gradient)
    np.testing.assert_allclose(value, [2 * LIMIT])  # two right (0 each), two wrong (1e4 each)
    np.testing.assert_allclose(gradient, [[0.0, 0.0, 1.0, -1.0]])


logits = st.floats(min_value=-LIMIT, max_value=LIMIT, allow_nan=False, width=32)
logit_rows = st.lists(logits, min_size=1, max_size=6)


@given(row=logit_rows, dtype=st.sampled_from(DTYPES), data=st.data())
def test_log_losses_stay_finite_for_any_logits_up_to_1e4(row, dtype, data):
    z = np.array([row], dtype=dtype)
    bits = np.array([data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=len(row), max_size=len(row)))],
                    dtype=dtype)
    label = np.array([data.draw(st.integers(0, len(row) - 1))])
    for name, (value, gradient) in {"bce_with_logits": bce_with_logits(z, bits),
                                    "softmax_cross_entropy": softmax_cross_entropy(z, label)}.items():
        assert_finite(dtype, **{f"{name} value": value, f"{name} gradient": gradient})
        assert value >= 0, f"{name} is a cross-entropy, never negative; got {value}"
    assert_finite(dtype, sigmoid=sigmoid(z), softmax=softmax(z))


@pytest.mark.parametrize("dtype", DTYPES)
def test_synthetic_loss_generator_softplus_is_finite_for_extreme_outputs(dtype):
    """The predicted loss is softplus(z): it must not overflow when the generator's output is huge."""
    generator = SyntheticLossGenerator(2, hidden=(), dtype=dtype)
    generator.net.modules[-1].bias[:] = LIMIT
    g_hat = generator.forward(np.ones((3, 2), dtype=dtype))
    assert_finite(dtype, predicted_loss=generator.predicted_loss, synthetic_gradient=g_hat)
    np.testing.assert_allclose(generator.predicted_loss, LIMIT)
    generator.net.modules[-1].bias[:] = -LIMIT
    generator.forward(np.ones((3, 2), dtype=dtype))
    assert_finite(dtype, predicted_loss=generator.predicted_loss)
    assert np.all(generator.predicted_loss >= 0)
