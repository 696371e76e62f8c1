"""Checks at the public boundary, with messages in the user's words.

Each check says what was expected, what came, and what to do, and returns the
value it checked, so a caller writes ``width = check_integer(width, "width")``.
Only public methods call these; the code they call trusts its inputs.

The checks of integers, flags, seeds and sizes are the datasets' own
(:mod:`data_gen.checks`, which needs nothing of sgrad's), imported here so
that the library has one place to look.
"""

import contextlib
import contextvars
import math
import numbers
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from data_gen.checks import MAX_ARRAY_BYTES, Seed, check_bool, check_bytes, check_integer, make_rng

__all__ = ["MAX_ARRAY_BYTES", "Seed", "check_array_type", "check_batch", "check_bool", "check_bytes", "check_choice",
           "check_condition", "check_feature_maps", "check_fits_dtype", "check_float_dtype", "check_integer",
           "check_labels", "check_learning_rate", "check_number", "check_record", "check_same_shape",
           "check_trainable_dtype", "check_widths", "damaged", "make_rng"]

# ---------------------------------------------------------------- numbers and flags

def check_number(value: Any, name: str, *, example: str, above: float = -math.inf, at_least: float = -math.inf,
                 below: float = math.inf, at_most: float = math.inf) -> float:
    """Return ``value`` as a float if it is a finite real number within the bounds given.

    ``above``/``below`` are strict bounds, ``at_least``/``at_most`` inclusive;
    ``example`` is a good value, shown in the message.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        interval = _interval(above, at_least, below, at_most)
        raise TypeError(f"{name} must be a number {interval}, e.g. {example}; got {value!r} ({type(value).__name__})")
    number = float(value)
    if not (math.isfinite(number) and above < number < below and at_least <= number <= at_most):
        interval = _interval(above, at_least, below, at_most)
        raise ValueError(f"{name} must be a finite number {interval}, e.g. {example}; got {number}")
    return number


def _interval(above, at_least, below, at_most):
    """The bounds in words for a message: 'in (0, 1]', '> 0', '<= 1'."""
    low, high = max(above, at_least), min(below, at_most)
    opening, closing = ("(" if above >= at_least else "["), (")" if below <= at_most else "]")
    if low > -math.inf and high < math.inf:
        return f"in {opening}{low:g}, {high:g}{closing}"
    if low > -math.inf:
        return f"{'>' if opening == '(' else '>='} {low:g}"
    return f"{'<' if closing == ')' else '<='} {high:g}"


def check_learning_rate(value: Any, name: str = "alpha") -> float:
    """Return a learning rate as a float if it is a finite number > 0."""
    return check_number(value, f"{name} (a learning rate)", above=0, example="0.01")


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices`` (names such as 'adam')."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, choices))}")
    return value


def check_widths(widths: Any, name: str) -> tuple[int, ...]:
    """Return ``widths`` as a tuple of ints >= 1, e.g. hidden layer widths ``(1024, 1024)``; ``()`` is allowed."""
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Iterable):
        raise TypeError(f"{name} must be a tuple of layer widths such as (256, 256), or () for none; "
                        f"got {widths!r} ({type(widths).__name__})")
    return tuple(check_integer(width, f"every width in {name}") for width in widths)


def check_float_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """Return ``np.dtype(dtype)`` if it is a floating type (float32, float64)."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a floating type such as np.float64; got {dtype!r}") from None
    if resolved.kind != "f":
        raise TypeError(f"{name} must be a floating type such as np.float64; got {resolved}")
    return resolved


def check_trainable_dtype(dtype: Any, what: str) -> np.dtype:
    """Return ``np.dtype(dtype)`` if ``what`` (e.g. 'an LSTM') can train in it: a floating type of 32 bits or more.

    float16's largest number is 65504: the sums of a recurrent or convolutional backward pass exceed it
    on ordinary data, and the update that follows writes NaN into the weights.
    """
    resolved = check_float_dtype(dtype)
    if resolved.itemsize < 4:
        raise TypeError(f"{what} cannot train in {resolved}: its largest number, {float(np.finfo(resolved).max):g}, is "
                        f"soon exceeded by the sums of a backward pass, and the update would then write NaN into the "
                        "weights; use np.float32 or np.float64")
    return resolved


# ---------------------------------------------------------------- arrays

def check_array_type(array: Any, name: str, expected: str) -> np.ndarray:
    """Check that ``array`` is a plain NumPy array (``expected`` describes it in the message); return it.

    Subclasses of ``np.ndarray`` are refused, because their operators are not
    ndarray's: ``np.matrix`` makes ``*`` a matrix product (so elementwise
    gradients come out silently wrong) and a masked array hides entries that
    sgrad's kernels would read anyway.  ``np.memmap`` is the exception: it is
    an ndarray whose bytes live in a file, with ndarray's operators, so a
    dataset opened with ``np.load(..., mmap_mode='r')`` is taken as it is.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be {expected}; got {type(array).__name__}. Convert it with np.asarray({name}).")
    if type(array) not in (np.ndarray, np.memmap):
        if isinstance(array, np.ma.MaskedArray):
            why = ("a masked array, but sgrad reads every entry, masked or not; pass "
                   f"{name}.filled(value) to choose what the masked entries hold, or np.asarray({name}) to keep "
                   "the values under the mask")
        elif isinstance(array, np.matrix):
            why = (f"a numpy.matrix, whose * is a matrix product, so sgrad's elementwise maths would go wrong; "
                   f"pass np.asarray({name})")
        else:
            why = (f"a {type(array).__name__}, a subclass of numpy.ndarray whose operators may differ from "
                   f"ndarray's; pass np.asarray({name})")
        raise TypeError(f"{name} must be {expected}; got {why}")
    return array


def check_fits_dtype(array: np.ndarray, name: str, dtype: Any) -> np.ndarray:
    """Check that the finite float ``array`` stays finite when cast to ``dtype`` (float64 data for float32 training).

    A value beyond the largest number of ``dtype`` would turn into inf, and
    training would then stop as if it had diverged.  Returns ``array``.
    """
    dtype = check_float_dtype(dtype)
    largest = float(np.finfo(dtype).max)
    if array.size and array.dtype.itemsize > dtype.itemsize:
        biggest = float(np.max(np.abs(array)))
        if biggest > largest:
            raise ValueError(f"{name} holds {biggest:g}, beyond the largest {dtype} ({largest:g}): cast to {dtype} "
                             f"it would become inf. Scale the data down, or train in float64 (dtype='float64')")
    return array


def check_batch(array: Any, name: str, width: int | None = None, *, width_name: str = "features") -> np.ndarray:
    """Check that ``array`` is a finite float array of shape ``(batch, width)``, batch >= 1; return it.

    ``width=None`` accepts any number of columns.
    """
    expected = "(batch, features)" if width is None else f"(batch, {width})"
    _check_float_array(array, name, expected)
    if array.ndim != 2:
        hint = ""
        if array.ndim == 1:
            hint = (f" For a column of {array.shape[0]} values use {name}.reshape(-1, 1)." if width == 1
                    else f" For a single example use {name}.reshape(1, -1).")
        raise ValueError(f"{name} must have shape {expected}; got shape {array.shape}.{hint}")
    if width is not None and array.shape[1] != width:
        raise ValueError(f"{name} must have shape {expected} ({width} = {width_name}); "
                         f"got shape {array.shape}, i.e. {array.shape[1]} columns")
    if array.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (shape {array.shape}); pass at least one row")
    return _check_finite(array, name, "row")


def check_feature_maps(array: Any, name: str, channels: int | None = None, *,
                       channels_name: str = "channels") -> np.ndarray:
    """Check that ``array`` is a finite float array of shape ``(batch, channels, height, width)``; return it.

    The 4-D twin of :func:`check_batch`, for convolutional modules (PyTorch's layout).
    Every axis must be at least 1; ``channels=None`` accepts any number of channels.
    """
    expected = "(batch, channels, height, width)" if channels is None else f"(batch, {channels}, height, width)"
    _check_float_array(array, name, expected)
    if array.ndim != 4:
        hint = ""
        if array.ndim == 3:
            hint = f" For a single example use {name}[None]."
        elif array.ndim == 2:
            hint = (f" Flat rows (batch, features) go to a dense Layer; images of one channel are "
                    f"{name}.reshape(batch, 1, height, width).")
        raise ValueError(f"{name} must have shape {expected}; got shape {array.shape}.{hint}")
    if channels is not None and array.shape[1] != channels:
        raise ValueError(f"{name} must have shape {expected} ({channels} = {channels_name}); "
                         f"got shape {array.shape}, i.e. {array.shape[1]} channels")
    if 0 in array.shape:
        raise ValueError(f"{name} is empty (shape {array.shape}); pass at least one example of at least one pixel")
    return _check_finite(array, name, "example")


def _check_float_array(array, name, expected):
    """A plain NumPy array of floats, as :func:`check_array_type` takes it; ``expected`` is its shape in words."""
    check_array_type(array, name, f"a NumPy array of shape {expected}")
    if array.dtype.kind != "f":
        raise TypeError(f"{name} must hold floats; got dtype {array.dtype}. Convert it with {name}.astype(np.float64).")


DOT_FROM = 4096  # the fewest numbers all_finite checks through a dot product


def all_finite(array: np.ndarray) -> bool:
    """Whether a float array holds no NaN and no inf: ``np.isfinite(array).all()``, mostly without its bool array.

    The sum of the squares, x · x, one pass in the BLAS, is finite whenever every number is (a NaN or an inf
    makes it NaN or inf); only when it is not, which an overflow of the squares can also cause, does the plain
    test decide.  The dot product runs on the memory as it lies (channels-last maps included); an array that
    is not one block of memory, or small (below ``DOT_FROM`` numbers, where the calls cost more than the
    pass), goes to the plain test at once.
    """
    if array.size >= DOT_FROM and array.dtype in (np.float32, np.float64):
        flat = np.ravel(array, order="K")
        if flat.base is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow here is the plain test's to judge
                squares = np.dot(flat, flat)
            if np.isfinite(squares):
                return True
    return bool(np.isfinite(array).all())



# True while the arrays checked are values that one of sgrad's modules made for the next: see handed_on.
_HANDED_ON = contextvars.ContextVar("sgrad_values_handed_on", default=False)


@contextlib.contextmanager
def handed_on() -> Iterator[None]:
    """Within: the arrays checked are values one module made for the next, as a Sequential hands them on.

    They come from numbers checked where they entered (the first module's input, the last one's
    output delta), and a step that turns a finite number into NaN or inf warns in NumPy (the training
    loop makes it raise), so the pass over every number for NaN and inf, a trip through memory for
    each large map, is left out.  Their types, shapes, widths and dtypes are checked as ever.
    """
    token = _HANDED_ON.set(True)
    try:
        yield
    finally:
        _HANDED_ON.reset(token)


def _check_finite(array, name, first):
    """``array`` if it holds no NaN or inf; else the message names the first ``first`` ('row', 'example') that does.

    Within :func:`handed_on`, ``array`` as it is.
    """
    if not _HANDED_ON.get() and not all_finite(array):
        index = int(np.argwhere(~np.isfinite(array))[0, 0])
        raise ValueError(f"{name} holds NaN or inf (first in {first} {index}); check the data, or lower the "
                         "learning rate if it came from a training run that diverged")
    return array


def check_labels(labels: Any, name: str, classes: int) -> np.ndarray:
    """Check that ``labels`` is a NumPy array of integer classes in [0, classes), shape (n,); return it.

    Floats are refused even when whole, so that 1.5 is never read as 1; and -1 is refused, which
    NumPy's indexing would read as the last class.
    """
    check_array_type(labels, name, "a NumPy array of integer labels, shape (n,)")
    if labels.ndim != 1:
        raise ValueError(f"{name} must have shape (n,), one integer class per example; got shape {labels.shape}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers; got dtype {labels.dtype}. Convert whole-number classes with "
                        f"{name}.astype(np.int64)")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{name} must lie in [0, {classes - 1}] for {classes} classes; got values from "
                         f"{labels.min()} to {labels.max()}")
    return labels


def check_same_shape(array: Any, name: str, reference: np.ndarray, reference_name: str, *,
                     same_dtype: bool = False) -> np.ndarray:
    """Check that ``array`` is a finite float array with the shape of ``reference``; return it.

    ``same_dtype=True`` also asks for the dtype of ``reference``.  A reference of
    feature maps (4-D) asks for feature maps; any other, for a ``(batch, width)`` array.
    """
    if reference.ndim == 4:
        check_feature_maps(array, name, reference.shape[1], channels_name=f"the channels of {reference_name}")
    else:
        check_batch(array, name, reference.shape[1], width_name=f"the width of {reference_name}")
    if array.shape != reference.shape:
        raise ValueError(f"{name} must have the shape of {reference_name}, {reference.shape}; got shape {array.shape}")
    if same_dtype and array.dtype != reference.dtype:
        raise TypeError(f"{name} must have the dtype of {reference_name}, {reference.dtype}; got {array.dtype}. "
                        f"Return it as {reference.dtype} (e.g. .astype(np.{reference.dtype}))")
    return array


def check_condition(condition: Any, condition_dim: int, batch: int, owner: str) -> None:
    """Check the conditioning c given to ``owner`` ('this DNI', 'this generator').

    An unconditioned owner (condition_dim=0) takes no condition; a conditioned
    one needs a float array of shape (batch, condition_dim).
    """
    if condition_dim == 0:
        if condition is not None:
            raise ValueError(f"{owner} is unconditioned (condition_dim=0) but a condition was given; "
                             "build it with condition_dim=<width of c> to condition on c")
        return
    if condition is None:
        raise ValueError(f"{owner} is conditioned (condition_dim={condition_dim}): pass condition=c "
                         f"of shape (batch, {condition_dim}), e.g. the batch's labels")
    check_batch(condition, "condition", condition_dim, width_name="condition_dim")
    if condition.shape[0] != batch:
        raise ValueError(f"condition must have one row per example: the input has {batch} rows, "
                         f"the condition has {condition.shape[0]}")


# ---------------------------------------------------------------- records read back from JSON

_NUMBERS = object()  # what an empty list of a template may hold: numbers, None, or lists of them


def check_record(value: Any, template: Any, name: str) -> None:
    """Check that ``value``, read back from JSON, has the shape of ``template`` (what a fresh record holds).

    A dict holds at least the template's keys (more are allowed), each value shaped like the
    template's; a list holds elements shaped like the template's first one, or, if the template's
    list is empty, numbers, None or lists of them (e.g. a curriculum's (step, N, error) triples);
    a number is a number (int or float, not a bool), a string a string, a bool a bool; the
    template's None takes anything.  Raises ValueError naming where, e.g.
    ``"history['curriculum']['length'] must be a number; got 'x' (str)"``.
    """
    def fail(what):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ValueError(f"{name} must be {what}; got {shown} ({type(value).__name__})")

    if template is None:
        return
    if isinstance(template, dict):
        if not isinstance(value, dict):
            fail("a JSON object")
        missing = [key for key in template if key not in value]
        if missing:
            raise ValueError(f"{name} has no {missing[0]!r}")
        for key, inner in template.items():
            check_record(value[key], inner, f"{name}[{key!r}]")
    elif isinstance(template, list):
        if not isinstance(value, list):
            fail("a list")
        for k, element in enumerate(value):
            check_record(element, template[0] if template else _NUMBERS, f"{name}[{k}]")
    elif template is _NUMBERS:
        if isinstance(value, list):
            for k, element in enumerate(value):
                check_record(element, _NUMBERS, f"{name}[{k}]")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            fail("a number, null or a list of them")
    elif isinstance(template, bool):
        if not isinstance(value, bool):
            fail("true or false")
    elif isinstance(template, numbers.Real):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            fail("a number")
    elif isinstance(template, str) and not isinstance(value, str):
        fail("a string")


def damaged(path: Any, what: str, fix: str, error: type[ValueError] = ValueError) -> ValueError:
    """The error for a file sgrad wrote that does not hold what it wrote (a checkpoint, a finished cell).

    ``what`` says which field and why (:func:`check_record`'s message, for one); ``fix`` what to do with the
    file; ``error`` the kind to raise (a checkpoint's is :class:`~sgrad.nn.checkpoint.CheckpointError`).
    """
    return error(f"{path} is damaged: {what}; {fix}")
