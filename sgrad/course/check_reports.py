"""What a check tells the student: a :class:`CheckResult`, one ✓/✗ line and a message.

A failed check names the quantity that is wrong, shows what was expected and what came, and, for a mistake it
recognises, gives a hint.  A check never raises because of a bug in the code it checks: an exception from that
code (NotImplementedError included) becomes a failed result, which says where it was raised.  Everything that
came from the checked code is shown on one line (:func:`one_line`), so that nothing it holds can pass for a line
of the report.
"""

import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..nn import kernels
from . import exercise_runner
from .numerical_gradients import relative_error

TOLERANCE = 1e-6  # largest relative error accepted; a correct float64 answer is near 1e-9 or below

Hint = tuple[str, str]  # (its name, the advice)


@dataclass
class CheckResult:
    """The outcome of one check: its ``name``, whether it ``passed``, and a ``message`` for the student."""

    name: str
    passed: bool
    message: str

    def __str__(self) -> str:
        lines = [f"{'✓' if self.passed else '✗'} {self.name}"]
        lines += ["    " + line for line in self.message.splitlines()]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # a bare result in a notebook cell shows as if printed


class Failure(Exception):
    """Ends a check early; its text is the message for the student."""


class Raised(Failure):
    """A failure because the checked code raised an exception of type ``error`` (its name)."""

    def __init__(self, message: str, error: str) -> None:
        super().__init__(message)
        self.error = error


def result_of(name: str, check: Callable[[], str], raise_on_failure: bool) -> CheckResult:
    """Run ``check()`` (which returns the message of a pass, or raises :class:`Failure`) as the check ``name``.

    ``raise_on_failure=True`` raises an AssertionError carrying the message of a failed check, for pytest.
    """
    try:
        result = CheckResult(name, True, check())
    except Failure as failure:
        result = CheckResult(name, False, str(failure))
    except Exception as error:  # the checked object broke a convention the check relies on
        message = f"the check could not run: {type(error).__name__}: {one_line(str(error))}{_where(error)}"
        result = CheckResult(name, False, message)
    if raise_on_failure and not result.passed:
        raise AssertionError(str(result))
    return result


def call_checked(what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the checked code; an exception it raises becomes a failed check that says where."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise Failure(f"not implemented yet: fill in {what}") from None
    except Exception as error:
        raise Raised(f"{what} raised {type(error).__name__}: {one_line(str(error))}{_where(error)}",
                     type(error).__name__) from None


def raise_for_error(out: dict[str, Any]) -> None:
    """Fail as :func:`call_checked` does if the exercise runner's record ``out`` says a stage of the checked code
    raised."""
    error = out.get("error")
    if error is None:
        return
    stage = one_line(error["stage"])
    if error["not_implemented"]:
        raise Failure(f"not implemented yet: fill in {stage}")
    raise Raised(f"{stage} raised {one_line(error['type'])}: {one_line(error['message'])}{one_line(error['where'])}",
                 error["type"])


_LIBRARIES = tuple(os.path.dirname(str(module.__file__)) + os.sep for module in (kernels, np))


def _where(error: BaseException) -> str:
    """' (in backward, line 7)': the deepest frame of the traceback outside sgrad and NumPy, if any."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(_LIBRARIES)]
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


def one_line(text: Any, limit: int = 300) -> str:
    """``text`` (which came from the checked code) on one line: control characters shown as escapes, cut at
    ``limit`` characters, so that nothing it holds can pass for a line of the report."""
    text = str(text)
    shown = "".join(char if char.isprintable() and char not in "\u2028\u2029" else repr(char)[1:-1] for char in text)
    return shown if len(shown) <= limit else shown[:limit] + "…"


# One comparison: (label, received, expected, mistakes), where mistakes lists (wrong answer, hint) pairs to recognise.
Comparison = tuple[str, Any, Any, Sequence[tuple[Any, Hint | None]]]


def compare(checks: Sequence[Comparison], where: str = "") -> None:
    """Fail with a message about the first of ``checks`` whose received value does not match the expected one,
    naming the mistake it matches, if any, and the other checks that fail; return None if all match."""
    failures = []
    for label, received, expected, mistakes in checks:
        problem = _mismatch(received, expected)
        if problem:
            hint = next((hint for wrong, hint in mistakes if matches(received, wrong)), None)
            failures.append((label, received, expected, problem, hint))
    if not failures:
        return
    label, received, expected, problem, hint = failures[0]
    lines = [f"{label}{where} {problem}"]
    if problem.startswith("is wrong"):
        lines += [f"  expected: {_preview(expected)}", f"  received: {_preview(received)}"]
    if hint:
        lines.append(f"Hint ({hint[0]}): {hint[1]}")
    if len(failures) > 1:
        lines.append("Also wrong: " + ", ".join(label + (f" ({hint[0]})" if hint else "")
                                                for label, _, _, _, hint in failures[1:]))
    raise Failure("\n".join(lines))


def matches(received: Any, candidate: Any) -> bool:
    """Whether ``received`` is ``candidate`` (None), or an array of its shape within :data:`TOLERANCE` of it."""
    if candidate is None:
        return received is None
    return _mismatch(received, candidate) is None


def _mismatch(received, expected):
    """None if ``received`` matches ``expected``, else what is wrong with it, in a few words."""
    if received is None:
        return "is None; expected " + (f"an array of shape {expected.shape}" if expected.shape else "a number")
    if isinstance(received, dict):  # an exercise runner's record of an answer that is not an array
        return f"is {one_line(received.get('kind'))}; expected an array of numbers"
    try:
        received = np.asarray(received, dtype=np.float64)
    except (TypeError, ValueError):
        return f"is {_kind(received)}; expected an array of numbers"
    if received.shape != expected.shape:
        return f"has shape {received.shape}; expected {expected.shape}"
    error = relative_error(received, expected)
    if not error < TOLERANCE:  # also catches NaN
        return f"is wrong: relative error {error:.2g} (expected < {TOLERANCE:g})"
    return None


def _preview(values, count=4):
    flat = np.asarray(values, dtype=np.float64).ravel()
    shown = np.array2string(flat[:count], precision=4, suppress_small=True, separator=", ")
    return shown[:-1] + ", ...]" if flat.size > count else shown


_kind = exercise_runner._kind  # "a tuple of length 3", "a value of type str"
