"""Argument checks shared by data_gen and sgrad (data_gen sits below sgrad, so they live here)."""

import numbers

import numpy as np


def check_positive_int(value, name, *, minimum=1):
    """Return ``value`` as an int if it is an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return int(value)


def make_rng(seed, rng):
    """Return a ``numpy.random.Generator`` from a ``seed`` or an ``rng``, never both."""
    if rng is not None:
        if seed is not None:
            raise ValueError("pass either seed or rng, not both")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rng must be a numpy.random.Generator (np.random.default_rng(seed)); "
                f"got {type(rng).__name__}"
            )
        return rng
    return np.random.default_rng(seed)
