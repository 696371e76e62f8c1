"""``sgrad grade``'s arguments, and which grader they call: one notebook's (:mod:`sgrad.course.grader`), or a
class's (:mod:`sgrad.course.gradebook`)."""

import argparse
import pathlib
import sys
from typing import Any

from . import gradebook, grader
from .grader import Terminated

__all__ = ["DESCRIPTION", "Terminated", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` (``sgrad grade``'s) the grader's arguments."""
    parser.add_argument("notebooks", type=pathlib.Path, nargs="+", metavar="NOTEBOOK",
                        help="the students' notebooks (.ipynb files), or folders holding them")
    parser.add_argument("--timeout", type=_positive_int, default=grader.TIMEOUT, metavar="SECONDS",
                        help=f"interrupt a cell still running after this many seconds, and kill its kernel {grader.GRACE} s "
                             f"later if it still runs (default {grader.TIMEOUT})")
    parser.add_argument("--memory", type=_mebibytes, default=grader.MEMORY, metavar="MIB",
                        help=f"the address space each kernel may take, in MiB: a cell that allocates more raises "
                             f"MemoryError (default {grader.MEMORY}; 0: no limit)")
    parser.add_argument("--jobs", type=_jobs, default=2, metavar="N",
                        help="with many notebooks: grade N at a time, each in a grader process and kernel of its "
                             "own (default 2)")
    parser.add_argument("--gradebook", type=pathlib.Path, metavar="FILE",
                        help="write a CSV gradebook: a row per notebook with its score, each exercise's verdict "
                             "(pass or fail) and a message")
    parser.add_argument("--record", type=pathlib.Path, help=argparse.SUPPRESS)  # a grader's verdicts, as JSON
    return parser


DESCRIPTION = ("Run students' homework notebooks (08_homework.ipynb) in Jupyter kernels and grade each exercise "
               "on the classes they define. One notebook: its report. Many, or a folder: a report each, a "
               "progress bar on stderr, and --gradebook. Exit status: 0 if every exercise passed, 1 if any "
               "failed, 2 if a notebook could not be graded. Not a security boundary: grade untrusted notebooks "
               "in a container.")


def run(args: argparse.Namespace) -> int:
    """Grade ``args.notebooks``, print the reports, and return the exit status (0, 1 or 2).

    Ctrl-C raises KeyboardInterrupt and SIGTERM :class:`Terminated` (a KeyboardInterrupt), once every
    kernel and every process a notebook started has ended.
    """
    notebooks = gradebook.notebooks_in(args.notebooks)
    if len(notebooks) == 1 and args.notebooks[0].suffix == ".ipynb" and args.gradebook is None:
        return grader.run_one(notebooks[0], timeout=args.timeout, memory=args.memory, record=args.record)
    if not notebooks:
        print(f"sgrad grade: error: no notebook (.ipynb) in {', '.join(map(str, args.notebooks))}", file=sys.stderr)
        return 2
    return gradebook.grade_class(notebooks, jobs=args.jobs, timeout=args.timeout, memory=args.memory,
                                 gradebook=args.gradebook)


def _whole(unit: str, units: str, least: int, *, zero_allowed: bool = False, why: str = "") -> Any:
    """An argparse type: a whole number of ``units``, at least ``least`` (or 0, if ``zero_allowed``)."""
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of {units}; got {text!r}") from None
        if value < least and not (zero_allowed and value == 0):
            allowed = f"0 (no limit) or at least {least} {units}" if zero_allowed else f"at least {least} {unit}"
            raise argparse.ArgumentTypeError(f"expected {allowed}{why}; got {value}")
        return value
    return convert


_positive_int = _whole("second", "seconds", 1)
_jobs = _whole("notebook at a time", "notebooks at a time", 1)
_mebibytes = _whole("MiB", "MiB", 256, zero_allowed=True, why=" (a kernel needs that much)")
