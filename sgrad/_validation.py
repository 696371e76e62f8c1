"""Checks at the public boundary, with messages in the user's words.

Each check says what was expected, what came, and what to do.  Deeper code
trusts its inputs.
"""

import numbers

import numpy as np

from data_gen._checks import check_positive_int, make_rng  # noqa: F401  (re-exported)


def check_learning_rate(value, name="alpha"):
    """Return ``value`` as a float if it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} (a learning rate) must be a number; got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} (a learning rate) must be finite and > 0; got {value}")
    return value


def check_batch(array, name, width=None, *, width_name="features"):
    """Check that ``array`` is a finite float array of shape ``(batch, width)``, batch >= 1.

    ``width=None`` accepts any number of columns.

    Returns ``array`` unchanged, so callers can write ``x = check_batch(x, ...)``.
    """
    expected = "(batch, features)" if width is None else f"(batch, {width})"
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"{name} must be a NumPy array of shape {expected}; got {type(array).__name__}. "
            "Convert it with np.asarray(..., dtype=float)."
        )
    if array.dtype.kind != "f":
        raise TypeError(
            f"{name} must hold floats; got dtype {array.dtype}. "
            f"Convert it with {name}.astype(np.float64)."
        )
    if array.ndim != 2:
        hint = ""
        if array.ndim == 1:
            hint = (f" For a column of {array.shape[0]} values use {name}.reshape(-1, 1)." if width == 1
                    else f" For a single example use {name}.reshape(1, -1).")
        raise ValueError(f"{name} must have shape {expected}; got shape {array.shape}.{hint}")
    if width is not None and array.shape[1] != width:
        raise ValueError(
            f"{name} must have shape {expected} ({width} = {width_name}); "
            f"got shape {array.shape}, i.e. {array.shape[1]} columns"
        )
    if array.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (shape {array.shape}); pass at least one row")
    if not np.isfinite(array).all():
        row = int(np.argwhere(~np.isfinite(array))[0, 0])
        raise ValueError(
            f"{name} holds NaN or inf (first in row {row}); check the data, or lower the "
            "learning rate if it came from a training run that diverged"
        )
    return array


def check_same_shape(array, name, reference, reference_name):
    """Check that ``array`` is a finite float array with the shape of ``reference``."""
    check_batch(array, name, reference.shape[1], width_name=f"the width of {reference_name}")
    if array.shape != reference.shape:
        raise ValueError(
            f"{name} must have the shape of {reference_name}, {reference.shape}; "
            f"got shape {array.shape}"
        )
    return array


def check_condition(condition, condition_dim, batch, owner):
    """Check the conditioning c given to ``owner`` ('this DNI', 'this generator').

    An unconditioned owner (condition_dim=0) takes no condition; a conditioned
    one needs a float array of shape (batch, condition_dim).
    """
    if condition_dim == 0:
        if condition is not None:
            raise ValueError(
                f"{owner} is unconditioned (condition_dim=0) but a condition was given; "
                "build it with condition_dim=<width of c> to condition on c"
            )
        return
    if condition is None:
        raise ValueError(
            f"{owner} is conditioned (condition_dim={condition_dim}): pass condition=c "
            f"of shape (batch, {condition_dim}), e.g. the batch's labels"
        )
    check_batch(condition, "condition", condition_dim, width_name="condition_dim")
    if condition.shape[0] != batch:
        raise ValueError(
            f"condition must have one row per example: the input has {batch} rows, "
            f"the condition has {condition.shape[0]}"
        )
