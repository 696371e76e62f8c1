"""Nonlinearities: derivatives from the output, shape and dtype, stability for |z| up to 1e4, the name registry.

A naive ``1 / (1 + exp(-z))`` overflows in exp for z = -1e4 (float64 overflows past 709, float32 past 88).
Every test runs with floating-point errors raising (the autouse fixture in conftest.py) and warnings as
errors (setup.cfg), so any overflow, division by zero or NaN fails it.
"""

import numpy as np
import pytest
from conftest import assert_dtype, normal, numerical_gradient, relative_error
from hypothesis import given
from strategies import LIMIT, batches, dtypes, logits, nonlinearities, seeds, widths

from sgrad.nn.nonlinearities import (NONLINEARITIES, get_nonlinearity, identity, identity_out2deriv, relu, relu_out2deriv,
                                     sigmoid, sigmoid_out2deriv, tanh, tanh_out2deriv)

EXTREMES = [-LIMIT, -1e3, -800.0, -100.0, -89.0, -40.0, -20.0, -1.0, 0.0, 1.0, 20.0, 40.0, 89.0, 100.0, 800.0, 1e3,
            LIMIT]
DTYPES = [np.float32, np.float64]


def _inputs_away_from_zero(rng, shape):
    """Pre-activations with |z| >= 0.1, so that ReLU's kink is never within a finite difference."""
    magnitude = 0.1 + rng.uniform(0.0, 3.0, size=shape)
    return np.where(rng.random(shape) < 0.5, -magnitude, magnitude)


# --- derivatives -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NONLINEARITIES))
def test_derivative_of_output_matches_central_differences(name):
    nonlin, out2deriv = get_nonlinearity(name)
    rng = np.random.default_rng(0)
    z = _inputs_away_from_zero(rng, (4, 5))
    weights = rng.standard_normal(z.shape)

    analytic = weights * out2deriv(nonlin(z))
    numeric = numerical_gradient(lambda: float(np.sum(nonlin(z) * weights)), z)

    error = relative_error(analytic, numeric)
    assert error <= 1e-6, f"{name}: d{name}/dz from its output (mine) vs central difference: error {error:.2e}"


@pytest.mark.parametrize("out2deriv, output, expected", [
    (sigmoid_out2deriv, sigmoid(np.array([0.0])), 0.25),
    (tanh_out2deriv, tanh(np.array([0.0])), 1.0),
    (relu_out2deriv, relu(np.array([-2.0])), 0.0),
    (relu_out2deriv, relu(np.array([2.0])), 1.0),
    (identity_out2deriv, identity(np.array([-3.0])), 1.0),
])
def test_derivative_at_known_points(out2deriv, output, expected):
    assert out2deriv(output)[0] == expected


@given(dtype=dtypes, name=nonlinearities, batch=batches, width=widths, seed=seeds)
def test_nonlinearity_and_its_derivative_keep_the_shape_and_dtype(dtype, name, batch, width, seed):
    nonlin, out2deriv = NONLINEARITIES[name]
    h = nonlin(10 * normal(np.random.default_rng(seed), batch, width, dtype=dtype))
    derivative = out2deriv(h)
    assert h.shape == derivative.shape == (batch, width)
    assert_dtype(dtype, output=h, derivative=derivative)


# --- stability -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_sigmoid_saturates_to_exactly_0_and_1_without_overflow(dtype):
    z = np.array([EXTREMES], dtype=dtype)
    s = sigmoid(z)
    derivative = sigmoid_out2deriv(s)
    assert_dtype(dtype, sigmoid=s, derivative=derivative)
    assert np.isfinite(s).all() and np.isfinite(derivative).all()
    assert s[0, 0] == 0.0 and s[0, -1] == 1.0
    assert s[0, EXTREMES.index(0.0)] == 0.5
    assert np.all((s >= 0) & (s <= 1))
    assert np.all(np.diff(s[0]) >= 0), "sigmoid must not decrease"
    np.testing.assert_allclose(s + sigmoid(-z), 1.0, rtol=0, atol=np.finfo(dtype).eps)


@given(z=logits, dtype=dtypes)
def test_sigmoid_lies_in_the_unit_interval_and_matches_its_mirror(z, dtype):
    s, mirror = sigmoid(np.array([z, -z], dtype=dtype))
    assert_dtype(dtype, sigmoid=s)
    assert 0.0 <= s <= 1.0
    assert abs(s + mirror - 1.0) <= 4 * np.finfo(dtype).eps


def test_sigmoid_is_relatively_accurate_in_the_lower_tail():
    z = np.array([-40.0, -300.0, -700.0])
    assert relative_error(sigmoid(z), np.exp(z)) < 1e-15


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_saturates_without_overflow(dtype):
    t = tanh(np.array([EXTREMES], dtype=dtype))
    derivative = tanh_out2deriv(t)
    assert_dtype(dtype, tanh=t, derivative=derivative)
    assert np.isfinite(t).all() and np.isfinite(derivative).all()
    assert t[0, 0] == -1.0 and t[0, -1] == 1.0


# --- the registry ----------------------------------------------------------------------------


def test_registry_maps_names_to_the_blog_pairs():
    assert get_nonlinearity("sigmoid") == (sigmoid, sigmoid_out2deriv)
    assert get_nonlinearity("tanh") == (tanh, tanh_out2deriv)
    assert get_nonlinearity("relu") == (relu, relu_out2deriv)
    assert get_nonlinearity("identity") == (identity, identity_out2deriv)


def test_non_string_name_raises_type_error():
    with pytest.raises(TypeError, match="must be a string.*got int"):
        get_nonlinearity(3)
