"""The zeroth-order gradient estimate: its numbers on functions whose gradient we know, its query
count, its seeding, and the errors at its boundary."""

import numpy as np
import pytest

from sgrad.dni.zeroth_order import estimate_gradient

D = 10


def _linear():
    """f(x) = x · w, with gradient w everywhere."""
    w = np.random.default_rng(0).standard_normal(D)
    return (lambda x: x @ w), w


def _quadratic():
    """f(x) = ½ xᵀAx + bᵀx with A symmetric, so df/dx = Ax + b."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((D, D))
    a = a @ a.T / D
    b = rng.standard_normal(D)
    return (lambda x: 0.5 * np.einsum("nd,de,ne->n", x, a, x) + x @ b), (lambda x: x @ a + b)


def _points(batch, seed=2):
    return np.random.default_rng(seed).standard_normal((batch, D))


def _relative_rms_error(estimate, true):
    """sqrt(mean over rows of |ĝ_i - g_i|² / |g_i|²)."""
    return float(np.sqrt(np.mean(np.sum((estimate - true) ** 2, axis=1) / np.sum(true**2, axis=1))))


def _mean_row_cosine(estimate, true):
    cos = np.sum(estimate * true, axis=1) / (np.linalg.norm(estimate, axis=1) * np.linalg.norm(true, axis=1))
    return float(np.mean(cos))


# --- the numbers -----------------------------------------------------------------------------


def test_estimate_of_a_linear_function_is_unbiased():
    f, w = _linear()
    x = _points(1)
    estimates = [estimate_gradient(f, x, num_directions=50, seed=s)[0][0] for s in range(400)]
    mean = np.mean(estimates, axis=0)
    # 400 seeds x 50 directions: the noise of the mean is sqrt((d-1)/20000) = 2.1% of |w|.
    error = np.linalg.norm(mean - w) / np.linalg.norm(w)
    assert error < 0.05, f"mean of 400 estimates is {error:.1%} of |w| away from w; expected ~2%"


def test_error_on_a_linear_function_matches_sqrt_of_d_minus_1_over_m():
    f, w = _linear()
    x = _points(300)
    for m in (5, 50, 500):
        estimate, _ = estimate_gradient(f, x, num_directions=m, seed=m)
        error = _relative_rms_error(estimate, np.broadcast_to(w, x.shape))
        theory = np.sqrt((D - 1) / m)
        assert abs(error / theory - 1) < 0.1, f"m={m}: RMS relative error {error:.3f}, theory {theory:.3f}"


def test_estimate_of_a_quadratic_points_along_the_gradient_with_enough_directions():
    f, gradient = _quadratic()
    x = _points(20)
    estimate, _ = estimate_gradient(f, x, num_directions=50 * D, seed=0)
    cosine = _mean_row_cosine(estimate, gradient(x))
    assert cosine > 0.99, f"mean cosine with the true gradient at m = 50 d: {cosine:.4f}, expected > 0.99"


def test_error_on_a_quadratic_falls_like_one_over_sqrt_m():
    f, gradient = _quadratic()
    x = _points(200)
    errors = {m: _relative_rms_error(estimate_gradient(f, x, num_directions=m, seed=0)[0], gradient(x))
              for m in (10, 400)}
    ratio = errors[10] / errors[400]
    # sqrt(400 / 10) = 6.3
    assert 5.0 < ratio < 8.0, f"error at m=10 ({errors[10]:.3f}) / at m=400 ({errors[400]:.3f}) = {ratio:.2f}"


def test_curvature_error_cancels_in_the_mean_even_for_a_large_step():
    f, gradient = _quadratic()
    x = _points(3)
    mean = np.mean([estimate_gradient(f, x, num_directions=100, epsilon=0.5, seed=s)[0]
                    for s in range(200)], axis=0)
    error = _relative_rms_error(mean, gradient(x))
    assert error < 0.05, f"mean of 200 estimates with epsilon=0.5 is off by {error:.1%}; expected ~2%"


def test_estimate_has_the_shape_and_dtype_of_x():
    f, _ = _linear()
    x = _points(4).astype(np.float32)
    estimate, _ = estimate_gradient(f, x, num_directions=3, seed=0)
    assert estimate.shape == (4, D) and estimate.dtype == np.float32


def test_x_is_not_changed():
    f, _ = _quadratic()
    x = _points(4)
    before = x.copy()
    estimate_gradient(f, x, num_directions=5, seed=0)
    np.testing.assert_array_equal(x, before)


# --- queries ---------------------------------------------------------------------------------


def test_f_is_called_once_with_every_query_and_the_count_is_returned():
    calls = []

    def f(rows):
        calls.append(rows.shape)
        return rows.sum(axis=1)

    _, queries = estimate_gradient(f, _points(7), num_directions=4, seed=0)
    assert calls == [(7 * 5, D)], f"f was called with {calls}; expected one call with 35 rows"
    assert queries == 7 * (4 + 1)


def test_queries_are_the_points_and_steps_of_length_epsilon_from_them():
    seen = []

    def f(rows):
        seen.append(rows.copy())
        return rows.sum(axis=1)

    x = _points(2)
    estimate_gradient(f, x, num_directions=3, epsilon=0.01, seed=0)
    queries = seen[0]
    np.testing.assert_array_equal(queries[:2], x)
    steps = queries[2:].reshape(2, 3, D) - x[:, None, :]
    np.testing.assert_allclose(np.linalg.norm(steps, axis=2), 0.01, rtol=1e-12)


# --- seeding ---------------------------------------------------------------------------------


def test_same_seed_same_estimate():
    f, _ = _quadratic()
    x = _points(5)
    first, _ = estimate_gradient(f, x, num_directions=8, seed=42)
    second, _ = estimate_gradient(f, x, num_directions=8, seed=42)
    np.testing.assert_array_equal(first, second)


def test_a_seed_and_a_generator_from_that_seed_give_the_same_estimate():
    f, _ = _quadratic()
    x = _points(5)
    from_seed, _ = estimate_gradient(f, x, num_directions=8, seed=42)
    from_rng, _ = estimate_gradient(f, x, num_directions=8, rng=np.random.default_rng(42))
    np.testing.assert_array_equal(from_seed, from_rng)


def test_different_seeds_give_different_estimates():
    f, _ = _quadratic()
    x = _points(5)
    first, _ = estimate_gradient(f, x, num_directions=8, seed=1)
    second, _ = estimate_gradient(f, x, num_directions=8, seed=2)
    assert not np.allclose(first, second)


# --- errors at the boundary ------------------------------------------------------------------


def _sum(rows):
    return rows.sum(axis=1)


@pytest.mark.parametrize("x, error, fragment", [
    ([[1.0, 2.0]], TypeError, "NumPy array"),
    (np.ones((2, 3), dtype=int), TypeError, "must hold floats"),
    (np.ones(3), ValueError, "reshape(1, -1)"),
    (np.ones((0, 3)), ValueError, "empty batch"),
    (np.array([[1.0, np.nan]]), ValueError, "NaN or inf"),
], ids=["list", "integers", "1-D", "empty", "nan"])
def test_bad_x_is_refused(x, error, fragment):
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        estimate_gradient(_sum, x, num_directions=2, seed=0)


@pytest.mark.parametrize("m, error, fragment", [
    (0, ValueError, "num_directions must be at least 1"),
    (2.5, TypeError, "num_directions must be an integer"),
    (True, TypeError, "num_directions must be an integer"),
])
def test_bad_num_directions_is_refused(m, error, fragment):
    with pytest.raises(error, match=fragment):
        estimate_gradient(_sum, np.ones((2, 3)), num_directions=m, seed=0)


@pytest.mark.parametrize("epsilon, error, fragment", [
    (0.0, ValueError, "a finite number > 0"),
    (-1e-3, ValueError, "a finite number > 0"),
    (np.inf, ValueError, "a finite number > 0"),
    ("1e-3", TypeError, "must be a number"),
])
def test_bad_epsilon_is_refused(epsilon, error, fragment):
    with pytest.raises(error, match=fragment):
        estimate_gradient(_sum, np.ones((2, 3)), num_directions=2, epsilon=epsilon, seed=0)


def test_f_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="f must be a function"):
        estimate_gradient(np.ones(3), np.ones((2, 3)), num_directions=2, seed=0)


def test_f_returning_a_column_is_refused_with_a_hint():
    with pytest.raises(ValueError, match=r"shape \(6,\).*got shape \(6, 1\).*f\(x\)\[:, 0\]"):
        estimate_gradient(lambda rows: rows[:, :1], np.ones((2, 3)), num_directions=2, seed=0)


def test_f_returning_one_number_for_the_whole_batch_is_refused():
    with pytest.raises(ValueError, match="one score per row"):
        estimate_gradient(lambda rows: rows.sum(), np.ones((2, 3)), num_directions=2, seed=0)


def test_f_returning_nan_is_refused():
    with pytest.raises(ValueError, match=r"f returned NaN or inf \(first for query row 1\)"):
        estimate_gradient(lambda rows: np.where(np.arange(len(rows)) == 1, np.nan, 0.0), np.ones((2, 3)),
                          num_directions=2, seed=0)


def test_f_returning_strings_is_refused():
    with pytest.raises(TypeError, match="real numbers"):
        estimate_gradient(lambda rows: np.array(["a"] * len(rows)), np.ones((2, 3)), num_directions=2, seed=0)


def test_seed_and_rng_together_are_refused():
    with pytest.raises(ValueError, match="either seed or rng"):
        estimate_gradient(_sum, np.ones((2, 3)), num_directions=2, seed=0, rng=np.random.default_rng(0))
