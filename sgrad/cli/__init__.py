"""The ``sgrad`` command line: the commands' parsers put together, and :func:`main`, which runs one.

Each command has a module here holding its parser (``add_parser``) and what it runs (``run``):
``sgrad compare`` trains backprop, no-bprop, DNI and cDNI side by side on binary addition (:mod:`.compare`);
``sgrad paper`` runs the paper's MNIST experiments over methods and depths (:mod:`.paper`);
``sgrad parallel`` trains the paper's net with every block in its own worker, by each schedule, against wall-clock
time (:mod:`.parallel`);
``sgrad rnn`` trains an LSTM on Copy and Repeat Copy with truncated BPTT, with and without DNI at the window
boundaries (:mod:`.rnn`);
``sgrad grade`` grades students' homework notebooks, one or a class (:mod:`.grade`);
``sgrad notebooks`` copies the course's notebooks into a folder for a student (:mod:`.notebooks`).
``sgrad --version`` prints sgrad's version (:mod:`sgrad.version`).  The argparse types they share are in
:mod:`.argument_types`, and what the four training commands share in :mod:`.training_options`.

The grader loads only when ``sgrad grade`` is the command (so its line of ``sgrad --help`` is written here, and
:mod:`.grade` gives the parser its arguments), and needs the notebook libraries, which the
plain install leaves out: without them ``sgrad grade`` ends in one line that says what to install.

Every argument is checked before any work starts.  Ctrl-C ends a command with one
line and exit status 130, and SIGTERM (from ``timeout`` or a job scheduler) the same way
with status 143; the checkpoints make a rerun carry on.
"""

import argparse
import importlib
import importlib.util
import pathlib
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from ..parallel.engines import WorkerFailed
from ..training.results_folder import CHECKPOINT_FOLDER, check_out_dir
from ..version import __version__
from . import compare, notebooks, paper, parallel, rnn
from .training_options import FILES

DESCRIPTION = ("sgrad compare trains backprop, no-bprop, DNI and cDNI side by side on binary addition; "
               "sgrad paper runs the paper's MNIST experiments over methods and depths; "
               "sgrad parallel trains every block in its own worker, by each schedule, against wall-clock time; "
               "sgrad rnn trains an LSTM on Copy and Repeat Copy with truncated BPTT, with and without DNI; "
               "sgrad grade grades students' homework notebooks; "
               "sgrad notebooks copies the course's notebooks into a folder.")
TRAINING = {"compare": compare, "paper": paper, "parallel": parallel, "rnn": rnn}  # each run returns a results table
INTERRUPTED = 130  # the shell's status for a process ended by Ctrl-C (128 + SIGINT)
TERMINATED = 143  # and by SIGTERM (128 + SIGTERM), which `timeout` and job schedulers send


_terminated: list[int] = []  # SIGTERM came: the KeyboardInterrupt that ends the command is its


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends a command as Ctrl-C does: every ``except KeyboardInterrupt`` and ``finally`` runs.

    (``sgrad grade`` has its own: :class:`sgrad.course.grader.Terminated`.)
    """
    _terminated.append(signum)
    raise KeyboardInterrupt


class _Parser(argparse.ArgumentParser):
    """Bad arguments end with one readable line on stderr and exit status 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``sgrad`` parser; ``command`` the subcommand about to be parsed (the grader's arguments need the grader)."""
    parser = _Parser(prog="sgrad", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sgrad {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for module in TRAINING.values():
        module.add_parser(commands)
    grade = commands.add_parser("grade", help="run students' homework notebooks and grade each exercise")
    if command == "grade":  # the grader's arguments, and so the grader, load only for its own command
        _grading().add_arguments(grade)
    notebooks.add_parser(commands)
    return parser


# What `sgrad grade` needs beyond the plain install: the notebook libraries and a Python kernel.
GRADING_NEEDS = ("nbformat", "jupyter_client", "ipykernel")


def _grading() -> Any:
    """The grader's command module (:mod:`sgrad.cli.grade`), imported when ``sgrad grade`` is the command."""
    return importlib.import_module("sgrad.cli.grade")


def missing_grading_libraries() -> list[str]:
    """Those of :data:`GRADING_NEEDS` that this Python cannot import."""
    return [name for name in GRADING_NEEDS if importlib.util.find_spec(name) is None]


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top level's options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(argv))
    args = parser.parse_args(argv)
    try:
        if args.command == "notebooks":
            return notebooks.run(args)
        if args.command == "grade":
            missing = missing_grading_libraries()
            if missing:
                parser.exit(2, f"sgrad grade: error: grading runs notebooks in a Jupyter kernel and needs "
                               f"{', '.join(GRADING_NEEDS)}; this Python has no {' and no '.join(missing)}: install "
                               f"them with 'python -m pip install {' '.join(GRADING_NEEDS)}' (or sgrad's notebooks "
                               f"extra, see the README)\n")
            grading = _grading()
            try:
                return grading.run(args)
            except grading.Terminated:
                parser.exit(TERMINATED, f"sgrad grade: terminated; {_after_interrupt(args)}\n")
        signal.signal(signal.SIGTERM, _terminate)
        started = time.time()
        check_out_dir(args.out, "--out")
        table = TRAINING[args.command].run(args)
    except (ValueError, TypeError, OSError, ImportError) as error:  # ImportError: a broken Ray, in its own words
        parser.exit(2, f"sgrad {args.command}: error: {error}\n")
    except WorkerFailed as error:  # a worker of sgrad parallel raised or died: every worker has stopped
        parser.exit(1, f"sgrad {args.command}: {error}\n")
    except KeyboardInterrupt:
        how, status = ("terminated", TERMINATED) if _terminated else ("interrupted", INTERRUPTED)
        parser.exit(status, f"sgrad {args.command}: {how}; {_after_interrupt(args)}\n")
    print(table)
    written = [name for name in FILES[args.command] if _written_since(pathlib.Path(args.out, name), started)]
    if written:
        print(f"wrote {args.out}/{', '.join(written[:-1])}{' and ' if len(written) > 1 else ''}{written[-1]}",
              file=sys.stderr)
    return 0


def _written_since(path: pathlib.Path, started: float) -> bool:
    """Whether ``path`` was written after ``started`` (``time.time()``): what a command says it wrote, it wrote."""
    try:
        return path.stat().st_mtime >= started - 0.05  # a file's time may lag the clock by a tick
    except FileNotFoundError:
        return False


def _after_interrupt(args: argparse.Namespace) -> str:
    """What a rerun of the interrupted command would do."""
    if args.command == "grade":
        if args.gradebook is None and len(args.notebooks) == 1 and args.notebooks[0].suffix == ".ipynb":
            return "nothing was graded; the notebook is as it was"
        return "nothing was graded; the notebooks are as they were, and no gradebook was written"
    if args.command == "notebooks":
        return f"some notebooks may be in {args.dest}; rerun with --force to copy them all"
    if args.checkpoint_every:
        return f"rerun the same command to resume from the checkpoints in {pathlib.Path(args.out, CHECKPOINT_FOLDER)}"
    return "no checkpoints were kept (--checkpoint-every 0)"


if __name__ == "__main__":
    sys.exit(main())
