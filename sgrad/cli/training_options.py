"""What the training commands (``sgrad compare``, ``paper``, ``parallel`` and ``rnn``) share: the files each
writes, the options several of them take, the refusal of an option that would change nothing, and progress."""

import argparse
import sys
from typing import Any

from ..experiments.mnist import GENERATORS, PaperConfig
from ..training.results_folder import CHECKPOINT_FOLDER
from ..training.settings import DTYPES
from .argument_types import mnist_path, positive_float, whole_number

__all__ = ["FILES", "PAPER_DEFAULTS", "WRITES", "add_mnist_training", "add_output", "add_rates", "print_progress",
           "refuse_unused"]

PAPER_DEFAULTS = PaperConfig()
FILES = {  # what each command writes into its --out folder
    "compare": ("history.json", "compare.png", "results.md"),
    "paper": ("results.md", "paper.png", "histories.json"),
    "parallel": ("results.md", "timeline.png", "accuracy_time.png", "histories.json"),
    "rnn": ("results.md", "copy_length.png", "curriculum.png", "histories.json"),
}
WRITES = {command: f"{', '.join(names[:-1])} and {names[-1]}" for command, names in FILES.items()}


def print_progress(line: str) -> None:
    """Progress lines go to stderr, so stdout holds only the results table."""
    print(line, file=sys.stderr, flush=True)


def add_rates(parser: argparse.ArgumentParser, defaults: Any, learners: str) -> None:
    """--lr and --generator-lr: the learning rates of ``learners`` and of the generators."""
    parser.add_argument("--lr", type=positive_float, default=defaults.alpha,
                        help=f"learning rate of {learners} (default {defaults.alpha})")
    parser.add_argument("--generator-lr", type=positive_float, default=defaults.generator_alpha,
                        help=f"learning rate of the generators (default {defaults.generator_alpha or 'as --lr'})")


def add_output(parser: argparse.ArgumentParser, command: str, *, unit: str, steps: str, every: int) -> None:
    """--out, --checkpoint-every and --quiet: where ``command`` writes, how often it saves a ``unit`` of ``steps``."""
    out = f"results/{command}"
    parser.add_argument("--out", default=out, help=f"folder for {WRITES[command]}, the checkpoints and, for a grid, "
                                                   f"the finished cells (default {out})")
    parser.add_argument("--checkpoint-every", type=whole_number(0), default=every, metavar=steps.upper(),
                        help=f"save the running {unit}'s state in --out/{CHECKPOINT_FOLDER} every {steps.upper()} "
                             f"{steps}, so that a rerun of an interrupted {unit} carries on from there (default {every}; "
                             "0: no checkpoints)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def add_mnist_training(parser: argparse.ArgumentParser, command: str, *, iterations: int, eval_every: int,
                       unit: str) -> None:
    """The options that ``sgrad paper`` and ``sgrad parallel`` share: the net, its budget, rates, data and output."""
    parser.add_argument("--iterations", type=whole_number(1), default=iterations, help=f"default {iterations}")
    parser.add_argument("--batch-size", type=whole_number(2), default=PAPER_DEFAULTS.batch_size,
                        help=f"default {PAPER_DEFAULTS.batch_size}")
    parser.add_argument("--hidden", type=whole_number(1), default=PAPER_DEFAULTS.hidden,
                        help=f"width of each hidden block (default {PAPER_DEFAULTS.hidden})")
    parser.add_argument("--generator", choices=GENERATORS, default=PAPER_DEFAULTS.generator,
                        help=f"synthetic-gradient generator (default {PAPER_DEFAULTS.generator})")
    add_rates(parser, PAPER_DEFAULTS, "the blocks and the top layer (Adam)")
    parser.add_argument("--eval-every", type=whole_number(1), default=eval_every,
                        help=f"iterations between test-accuracy measurements (default {eval_every})")
    parser.add_argument("--train-subset", type=whole_number(1), default=None,
                        help="train on this many examples drawn with --seed (default: all 60000)")
    parser.add_argument("--no-verify", action="store_true",
                        help="accept an archive in the mnist.npz layout that is not the real MNIST (no hash check)")
    parser.add_argument("--dtype", choices=DTYPES, default=PAPER_DEFAULTS.dtype,
                        help=f"the networks' and the images' float type (default {PAPER_DEFAULTS.dtype})")
    parser.add_argument("--seed", type=whole_number(0), default=0,
                        help="fixes weights, generators and batches (default 0)")
    parser.add_argument("--data", type=mnist_path, default=None,
                        help="path to mnist.npz (default: $SGRAD_DATA_DIR, then the cache, then a download)")
    add_output(parser, command, unit=unit, steps="iterations", every=500)


def refuse_unused(args: argparse.Namespace, options: dict[str, Any], *, used: bool, reason: str, fix: str,
                  warn: bool = False) -> None:
    """Unless ``used``, refuse each option of ``options`` (its dest: its default) given another value than its default.

    An option that would change nothing must not look as if it did: ``reason`` says why it does nothing
    here, ``fix`` (with ``{flag}``) what to do.  ``warn``: say so in a line on stderr and carry on instead
    (for the generators' options, which a list of arguments shared between runs of several methods may hold).
    """
    if used:
        return
    for dest, default in options.items():
        value = getattr(args, dest)
        if value != default:
            flag = {"td_lambda": "--lambda"}.get(dest, "--" + dest.replace("_", "-"))
            shown = "" if isinstance(value, bool) else " " + (",".join(map(str, value)) if isinstance(value, tuple)
                                                               else str(value))
            message = f"{flag}{shown} does nothing here: {reason}; {fix.format(flag=flag)}"
            if not warn:
                raise ValueError(message)
            print(f"sgrad {args.command}: warning: {message}", file=sys.stderr)
