"""``sgrad grade``'s arguments, and which grader they call: one notebook's (:mod:`sgrad.course.grader`), or a
class's (:mod:`sgrad.course.gradebook`)."""

import argparse
import pathlib
import sys

from ..course import gradebook, grader
from ..course.grader import Terminated
from .argument_types import whole_number

__all__ = ["DESCRIPTION", "Terminated", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` (``sgrad grade``'s) the grader's description and arguments."""
    parser.description = DESCRIPTION
    parser.add_argument("notebooks", type=pathlib.Path, nargs="+", metavar="NOTEBOOK",
                        help="the students' notebooks (.ipynb files), or folders holding them")
    parser.add_argument("--timeout", type=_positive_int, default=grader.TIMEOUT, metavar="SECONDS",
                        help=f"the wall-clock time for the whole grading of one notebook: its exercises, then its "
                             f"cells; what still runs then is killed (default {grader.TIMEOUT})")
    parser.add_argument("--memory", type=_mebibytes, default=grader.MEMORY, metavar="MIB",
                        help=f"the memory all the processes of one notebook's sandbox may take together, in MiB "
                             f"(default {grader.MEMORY}; at least {grader.MIN_MEMORY}, or {grader.MIN_ADDRESS_SPACE} "
                             "where no cgroup can be made and each process's address space is limited instead; 0: no "
                             "limit)")
    parser.add_argument("--seed", type=_seed, metavar="N",
                        help="the seed of the inputs the exercises are driven on (default: drawn afresh for each "
                             "notebook; the report and the gradebook give it, so that a grading can be repeated)")
    parser.add_argument("--no-sandbox", dest="sandboxed", action="store_false",
                        help="grade without a sandbox, where none can be made (no bubblewrap, macOS, Windows): the "
                             "notebook can then read and change anything you can; for notebooks you trust only")
    parser.add_argument("--jobs", type=_jobs, default=2, metavar="N",
                        help="with many notebooks: grade N at a time, each in a grader process and kernel of its "
                             "own (default 2)")
    parser.add_argument("--gradebook", type=pathlib.Path, metavar="FILE",
                        help="write a CSV gradebook: a row per notebook with its score, each exercise's verdict "
                             "(pass or fail) and a message")
    parser.add_argument("--record", type=pathlib.Path, help=argparse.SUPPRESS)  # a grader's verdicts, as JSON
    return parser


DESCRIPTION = ("Grade students' homework notebooks (07_homework.ipynb), each in a sandbox of its own (bubblewrap: "
               "no network, no other notebook, none of sgrad's reference code), on inputs drawn afresh. One "
               "notebook: its report. Many, or a folder: a report each, a progress bar on stderr, and --gradebook. "
               "Exit status: 0 if every exercise passed, 1 if any failed, 2 if a notebook could not be graded.")


def run(args: argparse.Namespace) -> int:
    """Grade ``args.notebooks``, print the reports, and return the exit status (0, 1 or 2).

    Ctrl-C raises KeyboardInterrupt and SIGTERM :class:`Terminated` (a KeyboardInterrupt), once every
    kernel and every process a notebook started has ended.
    """
    notebooks = gradebook.notebooks_in(args.notebooks)
    if len(notebooks) == 1 and args.notebooks[0].suffix == ".ipynb" and args.gradebook is None:
        return grader.run_one(notebooks[0], timeout=args.timeout, memory=args.memory, seed=args.seed,
                              sandboxed=args.sandboxed, record=args.record)
    if not notebooks:
        print(f"sgrad grade: error: no notebook (.ipynb) in {', '.join(map(str, args.notebooks))}", file=sys.stderr)
        return 2
    try:
        grader.check_sandbox(args.sandboxed)
        grader.check_memory(args.memory, args.sandboxed)
    except grader.GradingError as error:
        print(f"sgrad grade: error: {error}", file=sys.stderr)
        return 2
    return gradebook.grade_class(notebooks, jobs=args.jobs, timeout=args.timeout, memory=args.memory,
                                 seed=args.seed, sandboxed=args.sandboxed, gradebook=args.gradebook)


_positive_int = whole_number(1, units="seconds", expected="at least 1 second")
_jobs = whole_number(1, units="notebooks at a time", expected="at least 1 notebook at a time")
_mebibytes = whole_number(grader.MIN_MEMORY, units="MiB", zero_allowed=True,
                          expected=f"0 (no limit) or at least {grader.MIN_MEMORY} MiB (the least with which a kernel "
                                   "starts)")
_seed = whole_number(0, expected="at least 0")
