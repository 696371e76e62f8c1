"""Checks at the public boundary, with messages in the user's words.

Each check says what was expected, what came, and what to do.  Deeper code
trusts its inputs.
"""

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from data_gen._checks import Seed, check_bool, check_positive_int, make_rng

from .kernels import column_sums

__all__ = ["Seed", "check_batch", "check_batch_rows", "check_bool", "check_condition", "check_float_dtype",
           "check_learning_rate", "check_module", "check_number", "check_positive_int", "check_same_shape",
           "check_widths", "backward_made_here", "forward_made_here", "make_rng"]


def check_learning_rate(value: Any, name: str = "alpha") -> float:
    """Return ``value`` as a float if it is a finite number > 0."""
    if type(value) is float and 0.0 < value < np.inf:  # the usual case, a float in range: no slower checks
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} (a learning rate) must be a number such as 0.01; got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} (a learning rate) must be finite and > 0; got {value}. Try a small step such as 0.01")
    return value


def check_number(value: Any, name: str, *, above: float, at_most: float = np.inf, example: str) -> float:
    """Return ``value`` as a float if it is a finite number in ``(above, at_most]``; ``example`` shows a good one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number such as {example}; got {value!r} ({type(value).__name__})")
    value = float(value)
    if not (np.isfinite(value) and above < value <= at_most):
        interval = f"> {above:g}" if at_most == np.inf else f"in ({above:g}, {at_most:g}]"
        raise ValueError(f"{name} must be {interval}, a finite number such as {example}; got {value}")
    return value


def check_float_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """Return ``np.dtype(dtype)`` if it is a floating type (float32, float64)."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a floating type such as np.float64; got {dtype!r}") from None
    if resolved.kind != "f":
        raise TypeError(f"{name} must be a floating type such as np.float64; got {resolved}")
    return resolved


def check_widths(widths: Any, name: str) -> tuple[int, ...]:
    """Return ``widths`` as a tuple of ints >= 1, e.g. hidden layer widths ``(1024, 1024)``; ``()`` is allowed."""
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Iterable):
        raise TypeError(f"{name} must be a tuple of layer widths such as (256, 256), or () for none; "
                        f"got {widths!r} ({type(widths).__name__})")
    return tuple(check_positive_int(width, f"every width in {name}") for width in widths)


MODULE_METHODS = ("forward", "backward", "predict", "update")


def check_module(module: Any, name: str, *, sized: bool = False) -> None:
    """Check that ``module`` follows the Layer convention: forward, backward, predict, update and parameters.

    ``sized=True`` also asks for ``input_dim`` and ``output_dim``, as a block under a DNI needs.
    """
    missing = [method for method in MODULE_METHODS if not callable(getattr(module, method, None))]
    attributes = ("parameters", "input_dim", "output_dim") if sized else ("parameters",)
    missing += [attribute for attribute in attributes if not hasattr(module, attribute)]
    if missing:
        kind = "a Layer or a Sequential block" if sized else "a module such as a Layer, BatchNorm or Activation"
        raise TypeError(
            f"{name} must be {kind} (with {', '.join(MODULE_METHODS + attributes)}); "
            f"got {type(module).__name__}, which lacks {', '.join(missing)}"
        )


def check_batch_rows(module: Any, rows: int, name: str = "input") -> None:
    """Refuse a batch of one row for ``module`` if it holds a BatchNorm in training mode.

    Looks through blocks (``modules``), generators (``net``), DNI blocks
    (``block``) and DNI layers (``generator``), so that the whole call can be
    refused before any part of it changes.
    """
    if rows >= 2:
        return
    from .batchnorm import BatchNorm  # here, not at the top: batchnorm imports this module

    pending, seen = [module], set()
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        if isinstance(part, BatchNorm) and part.training:
            raise ValueError(
                f"{name} has {rows} row, but batch norm in training mode needs a batch of at least 2 rows; "
                "use eval() for single examples (training mode normalises with the batch's own statistics)"
            )
        pending.extend(getattr(part, "modules", ()))
        pending.extend(child for child in (getattr(part, attr, None) for attr in ("net", "block", "generator"))
                       if child is not None)


def forward_made_here(module: Any, x: np.ndarray) -> np.ndarray:
    """``module.forward(x)`` for an x that sgrad has just made and checked: its own modules skip re-checking it.

    sgrad's modules have an unchecked ``_forward``; any other module gets its
    public ``forward``.  Only the width is compared here, so a module that does
    not fit still gets the public forward's message.  Refusing one-row batches
    for batch norm is the caller's part (:func:`check_batch_rows`).
    """
    inner = getattr(module, "_forward", None)
    if inner is None or x.shape[1] != getattr(module, "input_dim", None):
        return module.forward(x)
    return inner(x)


def backward_made_here(module: Any, delta: np.ndarray, input_delta: bool = True) -> np.ndarray | None:
    """``module.backward(delta, input_delta=...)`` for a delta that sgrad has just made: its own modules take it
    unchecked (``_backward``); any other module gets its public ``backward``."""
    inner = getattr(module, "_backward", None)
    if inner is None:
        return module.backward(delta, input_delta=input_delta)
    return inner(delta, input_delta)


def check_batch(array: Any, name: str, width: int | None = None, *, width_name: str = "features") -> np.ndarray:
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
    if not all_finite(array):
        row = int(np.argwhere(~np.isfinite(array))[0, 0])
        raise ValueError(
            f"{name} holds NaN or inf (first in row {row}); check the data, or lower the "
            "learning rate if it came from a training run that diverged"
        )
    return array


def all_finite(array: np.ndarray) -> bool:
    """Whether a 2-D float array holds no NaN and no inf.

    A NaN or an inf makes its column's sum NaN or inf, so finite column sums
    (one BLAS pass, no boolean copy) prove the array finite; only sums that
    overflow, or a real NaN/inf, need the elementwise test.
    """
    return bool(np.isfinite(column_sums(array)).all()) or bool(np.isfinite(array).all())


def check_same_shape(array: Any, name: str, reference: np.ndarray, reference_name: str) -> np.ndarray:
    """Check that ``array`` is a finite float array with the shape of ``reference``."""
    check_batch(array, name, reference.shape[1], width_name=f"the width of {reference_name}")
    if array.shape != reference.shape:
        raise ValueError(
            f"{name} must have the shape of {reference_name}, {reference.shape}; "
            f"got shape {array.shape}"
        )
    return array


def check_condition(condition: Any, condition_dim: int, batch: int, owner: str) -> None:
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
