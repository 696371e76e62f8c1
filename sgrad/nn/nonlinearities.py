"""Nonlinearities and their derivatives, in the blog's pairs.

Each derivative takes the *output* of its nonlinearity, as in the blog post:
``sigmoid_out2deriv(sigmoid(z)) == d sigmoid / dz``.  That is why a layer only
needs to keep its output ``h`` to run its backward pass.

All functions are elementwise, keep the input's shape and dtype, and never
warn or overflow for large ``|z|``.
"""

from collections.abc import Callable

import numpy as np


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function ``1 / (1 + exp(-z))``, without overflow for any ``z``."""
    # exp(-|z|) is at most 1, so neither branch can overflow.
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_out2deriv(out: np.ndarray) -> np.ndarray:
    """Derivative of ``sigmoid`` given its output ``s``: ``s * (1 - s)``."""
    return out * (1.0 - out)


def tanh(z: np.ndarray) -> np.ndarray:
    """Hyperbolic tangent."""
    return np.tanh(z)


def tanh_out2deriv(out: np.ndarray) -> np.ndarray:
    """Derivative of ``tanh`` given its output ``t``: ``1 - t**2``."""
    return 1.0 - out * out


def relu(z: np.ndarray) -> np.ndarray:
    """Rectified linear unit ``max(z, 0)``."""
    return np.maximum(z, 0)


def relu_out2deriv(out: np.ndarray) -> np.ndarray:
    """Derivative of ``relu`` given its output: 1 where the output is positive, else 0."""
    return (out > 0).astype(out.dtype)


def identity(z: np.ndarray) -> np.ndarray:
    """The identity, for linear layers (e.g. a top layer that outputs logits)."""
    return z


def identity_out2deriv(out: np.ndarray) -> np.ndarray:
    """Derivative of ``identity``: ones of the output's shape."""
    return np.ones_like(out)


NONLINEARITIES = {
    "sigmoid": (sigmoid, sigmoid_out2deriv),
    "tanh": (tanh, tanh_out2deriv),
    "relu": (relu, relu_out2deriv),
    "identity": (identity, identity_out2deriv),
}


def get_nonlinearity(name: str) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Return the ``(nonlin, nonlin_out2deriv)`` pair registered under ``name``."""
    if not isinstance(name, str):
        raise TypeError(
            f"a nonlinearity name must be a string such as 'tanh'; got {type(name).__name__}"
        )
    try:
        return NONLINEARITIES[name]
    except KeyError:
        known = ", ".join(repr(k) for k in NONLINEARITIES)
        raise ValueError(
            f"unknown nonlinearity {name!r}; choose one of {known}, "
            "or pass a (nonlin, nonlin_deriv) pair of functions"
        ) from None


def resolve_nonlinearity(nonlin: str | Callable[[np.ndarray], np.ndarray],
                         nonlin_deriv: Callable[[np.ndarray], np.ndarray] | None
                         ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Turn the ``nonlin, nonlin_deriv`` arguments of a layer into a pair of functions.

    ``nonlin`` is a name from :data:`NONLINEARITIES` (then ``nonlin_deriv`` must
    be ``None``) or a callable (then ``nonlin_deriv`` must be its out2deriv).
    """
    if isinstance(nonlin, str):
        if nonlin_deriv is not None:
            raise TypeError(
                f"nonlinearity given by name ({nonlin!r}) and a nonlin_deriv as well; "
                "pass either a name alone or a (nonlin, nonlin_deriv) pair of functions"
            )
        return get_nonlinearity(nonlin)
    if not callable(nonlin):
        raise TypeError(
            f"nonlin must be a name such as 'tanh' or a function; got {type(nonlin).__name__}"
        )
    if not callable(nonlin_deriv):
        raise TypeError(
            "nonlin is a function, so nonlin_deriv must be the function that maps its "
            f"output to its derivative (e.g. sigmoid_out2deriv); got {type(nonlin_deriv).__name__}"
        )
    return nonlin, nonlin_deriv
