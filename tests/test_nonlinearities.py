"""Nonlinearities: derivatives from the output, stability for large |z|, the name registry."""

import warnings

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error
from hypothesis import given, settings
from hypothesis import strategies as st

from sgrad.nonlinearities import (NONLINEARITIES, get_nonlinearity, identity, identity_out2deriv, relu,
                                  relu_out2deriv, sigmoid, sigmoid_out2deriv, tanh, tanh_out2deriv)


def _inputs_away_from_zero(rng, shape):
    """Pre-activations with |z| >= 0.1, so that ReLU's kink is never within a finite difference."""
    magnitude = 0.1 + rng.uniform(0.0, 3.0, size=shape)
    return np.where(rng.random(shape) < 0.5, -magnitude, magnitude)


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


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sigmoid_is_finite_and_silent_for_large_inputs(dtype):
    z = np.array([-1e4, -800.0, -40.0, 0.0, 40.0, 800.0, 1e4], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = sigmoid(z)
    assert s.dtype == dtype
    assert np.isfinite(s).all()
    assert s[0] == 0.0 and s[-1] == 1.0
    assert s[3] == 0.5


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=-1e4, max_value=1e4))
def test_sigmoid_lies_in_the_unit_interval_and_matches_its_mirror(z):
    s, mirror = sigmoid(np.array([z, -z]))
    assert 0.0 <= s <= 1.0
    assert s + mirror == pytest.approx(1.0, rel=1e-15)


def test_sigmoid_is_relatively_accurate_in_the_lower_tail():
    z = np.array([-40.0, -300.0, -700.0])
    assert relative_error(sigmoid(z), np.exp(z)) < 1e-15


def test_sigmoid_is_symmetric_about_one_half():
    z = np.linspace(-30.0, 30.0, 61)
    np.testing.assert_allclose(sigmoid(z) + sigmoid(-z), 1.0, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", sorted(NONLINEARITIES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nonlinearity_and_derivative_keep_shape_and_dtype(name, dtype):
    nonlin, out2deriv = get_nonlinearity(name)
    z = np.linspace(-2.0, 2.0, 6, dtype=dtype).reshape(2, 3)
    h = nonlin(z)
    assert h.shape == (2, 3) and h.dtype == dtype
    d = out2deriv(h)
    assert d.shape == (2, 3) and d.dtype == dtype


def test_registry_maps_names_to_the_blog_pairs():
    assert get_nonlinearity("sigmoid") == (sigmoid, sigmoid_out2deriv)
    assert get_nonlinearity("tanh") == (tanh, tanh_out2deriv)
    assert get_nonlinearity("relu") == (relu, relu_out2deriv)
    assert get_nonlinearity("identity") == (identity, identity_out2deriv)


def test_unknown_name_raises_value_error_listing_the_known_names():
    with pytest.raises(ValueError, match=r"unknown nonlinearity 'swish'.*'sigmoid'"):
        get_nonlinearity("swish")


def test_non_string_name_raises_type_error():
    with pytest.raises(TypeError, match="must be a string.*got int"):
        get_nonlinearity(3)
