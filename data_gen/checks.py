"""Checks of the datasets' arguments: integers, flags, seeds, sizes, integers to encode, rows of bits.

Each check says what was expected, what came, and what to do.  sgrad's own
checks (:mod:`sgrad.argument_checks`) take the first five from here, so that
``data_gen`` needs nothing of sgrad's and every check is written once.
"""

import numbers
from typing import Any

import numpy as np

# What a ``seed=`` argument may be: None (fresh entropy), an integer >= 0, or a SeedSequence.
Seed = int | np.random.SeedSequence | None
# The most memory the arrays that one call makes may take (a batch of sequences, a layer's weights): far more than
# any of sgrad's tasks and layers need, and less than a laptop holds, so that an absurd size is refused at once
# instead of filling the memory until the system kills the process.
MAX_ARRAY_BYTES = 2 * 2**30


def check_integer(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int if it is an integer ``>= minimum`` (a bool is not an integer here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return int(value)


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool if it is True or False (a NumPy bool too): a string such as "no" is refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {value!r} ({type(value).__name__})")
    return bool(value)


def check_bytes(nbytes: int, what: str, fix: str) -> None:
    """Refuse, before anything is allocated, arrays of ``nbytes`` bytes in all if that is more than MAX_ARRAY_BYTES.

    ``what`` names the arrays in the message ("a batch of 1000000 Copy sequences"), ``fix`` says what to do.
    """
    if nbytes > MAX_ARRAY_BYTES:
        raise ValueError(f"{what} would take {nbytes:,} bytes ({nbytes / 2**30:,.1f} GiB), more than the "
                         f"{MAX_ARRAY_BYTES / 2**30:g} GiB that sgrad allows for the arrays of one call; {fix}")


def make_rng(seed: Seed, rng: np.random.Generator | None) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a ``seed`` or an ``rng``, never both.

    ``seed`` is None (fresh entropy), an integer >= 0 or a ``numpy.random.SeedSequence``.
    """
    if rng is not None:
        if seed is not None:
            raise ValueError("pass either seed or rng, not both")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)); "
                            f"got {type(rng).__name__}")
        return rng
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an integer such as 0, or None; got {seed!r} ({type(seed).__name__})")
        if seed < 0:
            raise ValueError(f"seed must be an integer >= 0; got {seed}")
    return np.random.default_rng(seed)



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
