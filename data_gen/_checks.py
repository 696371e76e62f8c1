"""Checks of the datasets' own arguments (integers to encode, rows of bits).

The general checks (numbers, flags, seeds) are :mod:`sgrad.validation`'s.
Each check says what was expected, what came, and what to do.
"""

from typing import Any

import numpy as np


def check_integers(values: Any, name: str, *, below: int) -> np.ndarray:
    """Return ``values`` as a 1-D int64 array if every entry is an integer in ``[0, below)``.

    Accepts a list or an array of integers, shape (n,).  Floats are refused even
    when whole, so that 1.5 is never silently read as 1.
    """
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of integers, shape (n,); got shape {array.shape}. "
                         f"For one value write [{name}].")
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers; got dtype {array.dtype}. "
                        f"Convert whole numbers with {name}.astype(np.int64).")
    if array.size and (array.min() < 0 or array.max() >= below):
        raise ValueError(f"{name} must lie in [0, {below - 1}]; got values from {array.min()} to {array.max()}")
    return array.astype(np.int64, copy=False)


def check_bit_rows(bits: Any, name: str) -> np.ndarray:
    """Return ``bits`` as an array if it is a 2-D array of finite numbers, shape (n, width)."""
    array = np.asarray(bits)
    if array.ndim != 2:
        raise ValueError(f"{name} must have shape (n, width); got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold numbers (0/1 bits or probabilities); got dtype {array.dtype}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"{name} holds NaN or inf; every bit must be a number, read as 1 when >= 0.5")
    return array
