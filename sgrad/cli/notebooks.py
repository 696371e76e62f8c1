"""``sgrad notebooks``: the course's notebooks copied into a folder for a student (:mod:`sgrad.course.handout`)."""

import argparse
from typing import Any

from ..course.handout import add_notebooks_arguments, copy_notebooks

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sgrad notebooks``'s parser, with its arguments, to ``subparsers``."""
    return add_notebooks_arguments(subparsers.add_parser(
        "notebooks", help="copy the course's notebooks into a folder, for a student",
        description="Copy the course's notebooks (01 to 12, as the students get them: the homework's exercises "
                    "are stubs, and no solution is among them) into DEST, made if it does not exist. A notebook "
                    "of the same name already in DEST is a student's work: the command refuses to overwrite it "
                    "unless --force is given."))


def run(args: argparse.Namespace) -> int:
    """Copy the notebooks into ``args.dest``; return the exit status, 0."""
    return copy_notebooks(args.dest, force=args.force)
