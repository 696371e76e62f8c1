"""The argparse types that the commands share: each turns an argument's text into a value, or refuses it.

A refusal is an ``argparse.ArgumentTypeError``, which argparse prints after "argument --name:"; so the
messages name no argument of their own.
"""

import argparse
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from ..argument_checks import check_integer, check_number

__all__ = ["checked", "fraction", "mnist_path", "positive_float", "subset_of", "weight", "whole_number",
           "whole_numbers", "widths"]


def checked(convert: Callable[[str], Any], kind: str, check: Callable[[Any], Any]) -> Callable[[str], Any]:
    """An argparse type: the text as ``kind`` (``convert``), then sgrad's own ``check`` of the value."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}; got {text!r}") from None
        try:
            return check(value)
        except (TypeError, ValueError) as error:
            raise argparse.ArgumentTypeError(str(error).strip()) from None
    return parse


def whole_number(least: int, *, units: str = "", expected: str = "", zero_allowed: bool = False) -> Callable[[str], int]:
    """An argparse type: a whole number (of ``units``) of at least ``least``, or 0 as well if ``zero_allowed``.

    A number too small is refused with "expected {expected}; got N" where ``expected`` is given (``sgrad
    grade`` says what it expected in its units), else with :func:`check_integer`'s "must be at least
    {least}; got N".
    """
    def check(value: int) -> int:
        if zero_allowed and value == 0:
            return value
        if expected and value < least:
            raise ValueError(f"expected {expected}; got {value}")
        return check_integer(value, "", minimum=least)
    return checked(int, f"a whole number of {units}" if units else "a whole number", check)


positive_float = checked(float, "a number", lambda value: check_number(value, "", above=0, example="0.01"))
weight = checked(float, "a number", lambda value: check_number(value, "", above=0, at_most=1, example="0.1"))
fraction = checked(float, "a number", lambda value: check_number(value, "", at_least=0, at_most=1, example="0.5"))


def whole_numbers(text: str, what: str, example: str, minimum: int) -> tuple[int, ...]:
    """``text``, comma-separated whole numbers of at least ``minimum``, as a tuple; ``what`` and ``example``
    say in the refusal what was expected."""
    parts = text.split(",")
    if not all(part.strip().isdigit() and int(part) >= minimum for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated {what} such as {example}; got {text!r}")
    return tuple(int(part) for part in parts)


def widths(text: str) -> tuple[int, ...]:
    """Comma-separated widths of hidden layers, each at least 1."""
    return whole_numbers(text, "positive widths", "128,64", 1)


def subset_of(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated subset of ``choices``, as a tuple in the order given."""
    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(part.strip() for part in text.split(",") if part.strip())
        if not chosen or any(c not in choices for c in chosen):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(choices)}; got {text!r}")
        return chosen
    return parse


def mnist_path(text: str) -> str:
    """The path of an existing mnist.npz, or of a folder holding one."""
    from data_gen.mnist import DATA_DIR_VARIABLE, FILENAME  # here: `sgrad compare` needs no MNIST loader

    path = pathlib.Path(text).expanduser()
    if not (path / FILENAME if path.is_dir() else path).is_file():
        raise argparse.ArgumentTypeError(
            f"no {FILENAME} at {text}; give the path of the archive or of a folder holding it, or leave --data out "
            f"to use ${DATA_DIR_VARIABLE}, then the cache, then a download")
    return text
