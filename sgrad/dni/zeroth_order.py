"""Gradients through a black box: a zeroth-order estimate from queries alone.

When a model can only be *queried* (we see its outputs, never its weights),
there is no backward pass to call.  We can still estimate the gradient of any
per-example score ``f`` from forward differences along random directions, as
data-free model extraction does (DFME, Truong et al. 2021).  The estimate can
then be injected into a network we do own with ``Layer.backward(estimate)``,
exactly as a synthetic gradient ĝ is.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import argument_checks
from ..argument_checks import Seed


def estimate_gradient(f: Callable[[np.ndarray], ArrayLike], x: np.ndarray, *, num_directions: int, epsilon: float = 1e-3,
                      seed: Seed = None, rng: np.random.Generator | None = None) -> tuple[np.ndarray, int]:
    """Estimate ``g_i = df(x_i)/dx_i`` for each row of ``x`` from queries of ``f`` alone.

    For each row ``x_i`` draw ``m = num_directions`` directions ``u_ij``,
    uniform on the unit sphere in ``d`` dimensions, and average forward
    differences along them::

        ĝ_i = (d / m) * sum_j [(f(x_i + ε u_ij) - f(x_i)) / ε] * u_ij

    All ``batch * m`` perturbed rows and the ``batch`` unperturbed ones go to
    ``f`` in a single call, so the black box is queried
    ``batch * (m + 1)`` times in all.

    Parameters
    ----------
    f : callable
        The black box: maps an array of shape (n, d) to one score per row,
        shape (n,), each row scored on its own (row i's score may not depend on
        the other rows).  For a loss that averages over a batch,
        ``L = mean_i f(x_i)``, divide the estimate by ``batch`` to get dL/dx.
    x : (batch, d) float array
        The points at which to estimate the gradient.  Not changed.
    num_directions : int >= 1
        ``m``, the random directions per row: the query budget.
    epsilon : float > 0
        ``ε``, the step along each direction.
    seed, rng : int or numpy.random.Generator
        Where the directions come from; same seed, same estimate.

    Returns
    -------
    gradient_estimate : (batch, d) array of x's dtype
        ĝ_i in row i.
    queries_used : int
        ``batch * (num_directions + 1)``, the number of rows ``f`` scored.

    Notes
    -----
    Bias and variance: since ``E[d u uᵀ] = I`` for u uniform on the sphere, the ``d / m`` scaling
    makes the estimate unbiased for a linear ``f``.  Its squared error is then
    ``E|ĝ_i - g_i|² = (d - 1) / m * |g_i|²``: it falls like ``1/sqrt(m)``, and
    once ``m`` is of the order of ``d`` or more the cosine between ĝ_i and
    g_i is about ``1 / sqrt(1 + (d - 1) / m)``.  A good direction needs ``m``
    of the order of ``d``; a noisy one (m = 1) costs only two queries a row.

    For a curved ``f``, each forward difference misses the directional
    derivative ``g_i · u`` by ``O(ε)``, the curvature term ``ε/2 uᵀ H u``
    (H the Hessian of f at x_i).  Because ``u`` and ``-u`` are equally likely,
    that error adds variance but cancels in the mean (exactly, for a
    quadratic); what remains is a bias of order ``ε²`` for a smooth ``f``.
    Too small an ``ε`` has the opposite problem: each slope carries a
    rounding error of about ``1e-16 * |f| / ε`` in float64.
    """
    if not callable(f):
        raise TypeError(
            f"f must be a function that maps an (n, d) array to n scores; got {type(f).__name__}"
        )
    argument_checks.check_batch(x, "x")
    m = argument_checks.check_integer(num_directions, "num_directions")
    epsilon = argument_checks.check_number(epsilon, "epsilon (the finite-difference step)", above=0, example="1e-3")
    rng = argument_checks.make_rng(seed, rng)

    batch, d = x.shape
    # A normalised standard normal vector is uniform on the unit sphere.
    directions = rng.standard_normal((batch, m, d))
    directions /= np.linalg.norm(directions, axis=2, keepdims=True)
    directions = directions.astype(x.dtype, copy=False)

    perturbed = (x[:, None, :] + epsilon * directions).reshape(batch * m, d)
    scores = _check_scores(f(np.concatenate([x, perturbed])), batch * (m + 1))

    base, shifted = scores[:batch], scores[batch:].reshape(batch, m)
    slopes = (shifted - base[:, None]) / epsilon  # (batch, m): the slope of f along each u_ij
    gradient_estimate = (d / m) * np.einsum("bm,bmd->bd", slopes, directions)
    return gradient_estimate.astype(x.dtype, copy=False), batch * (m + 1)


def _check_scores(scores: Any, n: int) -> np.ndarray:
    scores = np.asarray(scores)
    if scores.shape != (n,):
        hint = " If f returns a column, return f(x)[:, 0] instead." if scores.shape == (n, 1) else ""
        raise ValueError(
            f"f must return one score per row, shape ({n},), for the {n} rows it was given; "
            f"got shape {scores.shape}.{hint}"
        )
    if scores.dtype.kind not in "fiu":
        raise TypeError(f"f must return real numbers; got dtype {scores.dtype}")
    if not np.isfinite(scores).all():
        row = int(np.argwhere(~np.isfinite(scores))[0, 0])
        raise ValueError(
            f"f returned NaN or inf (first for query row {row}); the black box must score every "
            "row it is given with a finite number. Try a smaller epsilon if x sits near the edge "
            "of f's domain."
        )
    return scores.astype(np.float64, copy=False)
