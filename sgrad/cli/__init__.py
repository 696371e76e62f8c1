"""The ``sgrad`` command line.

``sgrad compare`` trains backprop, no-bprop, DNI and cDNI side by side on binary addition;
``sgrad paper`` runs the paper's MNIST experiments over methods and depths;
``sgrad parallel`` trains the paper's net with every block in its own worker, by each schedule, against wall-clock time;
``sgrad rnn`` trains an LSTM on Copy and Repeat Copy with truncated BPTT, with and without DNI at the window boundaries;
``sgrad grade`` grades students' homework notebooks, one or a class (:mod:`sgrad.cli.grade`);
``sgrad notebooks`` copies the course's notebooks into a folder for a student (:mod:`sgrad.course.handout`).
``sgrad --version`` prints sgrad's version (:mod:`sgrad.version`).

The grader loads only when ``sgrad grade`` is the command, and needs the notebook libraries, which the
plain install leaves out: without them ``sgrad grade`` ends in one line that says what to install.

Every argument is checked before any work starts.  Ctrl-C ends a command with one
line and exit status 130, and SIGTERM (from ``timeout`` or a job scheduler) the same way
with status 143; the checkpoints make a rerun carry on.
"""

import argparse
import importlib
import importlib.util
import os
import pathlib
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from data_gen.binary_addition import MAX_OUTPUT_DIM, MIN_OUTPUT_DIM

from ..argument_checks import check_integer, check_number
from ..course.handout import add_notebooks_arguments, copy_notebooks
from ..experiments.binary_addition import METHODS, TARGETS, TrainConfig, compare, results_table
from ..experiments.mnist import (ARCHITECTURES, GENERATORS, INTERFACE_POSITIONS, LOSS_REDUCTIONS, PAPER_METHODS,
                                 WEIGHT_INITS, PaperConfig, check_grid, run_grid)
from ..experiments.mnist import results_table as paper_table
from ..experiments.parallel import ENGINES, check_runs, compare_parallel
from ..experiments.parallel import results_table as parallel_table
from ..experiments.rnn import DEFAULT_WINDOWS, RNN_METHODS, TASKS, RnnConfig
from ..experiments.rnn import results_table as rnn_table
from ..experiments.rnn import run_grid as run_rnn_grid
from ..nn.nonlinearities import NONLINEARITIES
from ..nn.optimizers import UPDATE_RULES
from ..parallel.engines import WorkerFailed
from ..parallel.pipeline import SCHEDULE_NAMES
from ..training.results_folder import CHECKPOINT_FOLDER, check_out_dir
from ..training.settings import DECOUPLED, DTYPES
from ..version import __version__

DEFAULTS = TrainConfig()
PAPER_DEFAULTS = PaperConfig()
DESCRIPTION = ("sgrad compare trains backprop, no-bprop, DNI and cDNI side by side on binary addition; "
               "sgrad paper runs the paper's MNIST experiments over methods and depths; "
               "sgrad parallel trains every block in its own worker, by each schedule, against wall-clock time; "
               "sgrad rnn trains an LSTM on Copy and Repeat Copy with truncated BPTT, with and without DNI; "
               "sgrad grade grades students' homework notebooks; "
               "sgrad notebooks copies the course's notebooks into a folder.")
RNN_DEFAULTS = RnnConfig()
FILES = {  # what each command writes into its --out folder
    "compare": ("history.json", "compare.png", "results.md"),
    "paper": ("results.md", "paper.png", "histories.json"),
    "parallel": ("results.md", "timeline.png", "accuracy_time.png", "histories.json"),
    "rnn": ("results.md", "copy_length.png", "curriculum.png", "histories.json"),
}
WRITES = {command: f"{', '.join(names[:-1])} and {names[-1]}" for command, names in FILES.items()}
INTERRUPTED = 130  # the shell's status for a process ended by Ctrl-C (128 + SIGINT)
TERMINATED = 143  # and by SIGTERM (128 + SIGTERM), which `timeout` and job schedulers send


_terminated: list[int] = []  # SIGTERM came: the KeyboardInterrupt that ends the command is its


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends a command as Ctrl-C does: every ``except KeyboardInterrupt`` and ``finally`` runs.

    (``sgrad grade`` has its own: :class:`sgrad.course.grader.Terminated`.)
    """
    _terminated.append(signum)
    raise KeyboardInterrupt


def print_progress(line: str) -> None:
    """Progress lines go to stderr, so stdout holds only the results table."""
    print(line, file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    """Bad arguments end with one readable line on stderr and exit status 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _checked(convert, kind, check):
    """An argparse type: the text as ``kind`` (``convert``), then sgrad's own ``check`` of the value.

    The check's message follows argparse's "argument --name:", so the check is given no name of its own.
    """
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}; got {text!r}") from None
        try:
            return check(value)
        except (TypeError, ValueError) as error:
            raise argparse.ArgumentTypeError(str(error).strip()) from None
    return parse


def _int_at_least(minimum):
    return _checked(int, "a whole number", lambda value: check_integer(value, "", minimum=minimum))


_positive_float = _checked(float, "a number", lambda value: check_number(value, "", above=0, example="0.01"))
_weight = _checked(float, "a number", lambda value: check_number(value, "", above=0, at_most=1, example="0.1"))
_fraction = _checked(float, "a number", lambda value: check_number(value, "", at_least=0, at_most=1, example="0.5"))


def _bits(text):
    value = _int_at_least(MIN_OUTPUT_DIM)(text)
    if value > MAX_OUTPUT_DIM:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_OUTPUT_DIM}; got {value}")
    return value


def _whole_numbers(text, what, example, minimum):
    parts = text.split(",")
    if not all(part.strip().isdigit() and int(part) >= minimum for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated {what} such as {example}; got {text!r}")
    return tuple(int(part) for part in parts)


def _widths(text):
    return _whole_numbers(text, "positive widths", "128,64", 1)


def _subset_of(choices):
    def parse(text):
        chosen = tuple(part.strip() for part in text.split(",") if part.strip())
        if not chosen or any(c not in choices for c in chosen):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(choices)}; got {text!r}")
        return chosen
    return parse


def _interfaces(text):
    if text.strip() == "every":
        return "every"
    return _whole_numbers(text, "hidden-block numbers (1 is the lowest) or 'every'", "2 or 1,2", 1)


def _worker_counts(text):
    return _whole_numbers(text, "numbers of workers", "1,2", 1)


def _depths(text):
    return _whole_numbers(text, "depths of at least 2 (a hidden block and the top)", "3,4,5,6", 2)


def _mnist_path(text):
    from data_gen.mnist import DATA_DIR_VARIABLE, FILENAME  # here: `sgrad compare` needs no MNIST loader

    path = pathlib.Path(text).expanduser()
    if not (path / FILENAME if path.is_dir() else path).is_file():
        raise argparse.ArgumentTypeError(
            f"no {FILENAME} at {text}; give the path of the archive or of a folder holding it, or leave --data out "
            f"to use ${DATA_DIR_VARIABLE}, then the cache, then a download")
    return text


def _add_rates(parser: argparse.ArgumentParser, defaults, learners: str) -> None:
    """--lr and --generator-lr: the learning rates of ``learners`` and of the generators."""
    parser.add_argument("--lr", type=_positive_float, default=defaults.alpha,
                        help=f"learning rate of {learners} (default {defaults.alpha})")
    parser.add_argument("--generator-lr", type=_positive_float, default=defaults.generator_alpha,
                        help=f"learning rate of the generators (default {defaults.generator_alpha or 'as --lr'})")


def _add_output(parser: argparse.ArgumentParser, command: str, *, unit: str, steps: str, every: int) -> None:
    """--out, --checkpoint-every and --quiet: where ``command`` writes, how often it saves a ``unit`` of ``steps``."""
    out = f"results/{command}"
    parser.add_argument("--out", default=out, help=f"folder for {WRITES[command]}, the checkpoints and, for a grid, "
                                                   f"the finished cells (default {out})")
    parser.add_argument("--checkpoint-every", type=_int_at_least(0), default=every, metavar=steps.upper(),
                        help=f"save the running {unit}'s state in --out/{CHECKPOINT_FOLDER} every {steps.upper()} "
                             f"{steps}, so that a rerun of an interrupted {unit} carries on from there (default {every}; "
                             "0: no checkpoints)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _add_mnist_training(parser: argparse.ArgumentParser, command: str, *, iterations: int, eval_every: int,
                        unit: str) -> None:
    """The options that ``sgrad paper`` and ``sgrad parallel`` share: the net, its budget, rates, data and output."""
    parser.add_argument("--iterations", type=_int_at_least(1), default=iterations, help=f"default {iterations}")
    parser.add_argument("--batch-size", type=_int_at_least(2), default=PAPER_DEFAULTS.batch_size,
                        help=f"default {PAPER_DEFAULTS.batch_size}")
    parser.add_argument("--hidden", type=_int_at_least(1), default=PAPER_DEFAULTS.hidden,
                        help=f"width of each hidden block (default {PAPER_DEFAULTS.hidden})")
    parser.add_argument("--generator", choices=GENERATORS, default=PAPER_DEFAULTS.generator,
                        help=f"synthetic-gradient generator (default {PAPER_DEFAULTS.generator})")
    _add_rates(parser, PAPER_DEFAULTS, "the blocks and the top layer (Adam)")
    parser.add_argument("--eval-every", type=_int_at_least(1), default=eval_every,
                        help=f"iterations between test-accuracy measurements (default {eval_every})")
    parser.add_argument("--train-subset", type=_int_at_least(1), default=None,
                        help="train on this many examples drawn with --seed (default: all 60000)")
    parser.add_argument("--no-verify", action="store_true",
                        help="accept an archive in the mnist.npz layout that is not the real MNIST (no hash check)")
    parser.add_argument("--dtype", choices=DTYPES, default=PAPER_DEFAULTS.dtype,
                        help=f"the networks' and the images' float type (default {PAPER_DEFAULTS.dtype})")
    parser.add_argument("--seed", type=_int_at_least(0), default=0,
                        help="fixes weights, generators and batches (default 0)")
    parser.add_argument("--data", type=_mnist_path, default=None,
                        help="path to mnist.npz (default: $SGRAD_DATA_DIR, then the cache, then a download)")
    _add_output(parser, command, unit=unit, steps="iterations", every=500)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``sgrad`` parser; ``command`` the subcommand about to be parsed (the grader's arguments need the grader)."""
    parser = _Parser(prog="sgrad", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sgrad {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    cmp = commands.add_parser(
        "compare", help="compare backprop, no-bprop, DNI and cDNI on binary addition",
        description="Train every method from the same initial weights on the same batches of "
                    "binary addition; print a results table and write a figure and the histories. "
                    "Each method is checkpointed in --out, so a rerun carries on where it stopped.")
    cmp.add_argument("--methods", type=_subset_of(METHODS), default=METHODS,
                     help=f"comma-separated subset of {','.join(METHODS)} (default: all)")
    cmp.add_argument("--bits", type=_bits, default=8,
                     help="bits of the sum; operands are below 2**(bits-1) (default 8)")
    cmp.add_argument("--train", type=_int_at_least(1), default=1000, help="training pairs (default 1000)")
    cmp.add_argument("--test", type=_int_at_least(1), default=1000,
                     help="held-out pairs, none shared with training (default 1000)")
    cmp.add_argument("--epochs", type=_int_at_least(1), default=DEFAULTS.epochs, help=f"default {DEFAULTS.epochs}")
    cmp.add_argument("--batch-size", type=_int_at_least(1), default=DEFAULTS.batch_size,
                     help=f"default {DEFAULTS.batch_size}")
    cmp.add_argument("--hidden", type=_widths, default=DEFAULTS.hidden,
                     help=f"comma-separated hidden widths (default {','.join(map(str, DEFAULTS.hidden))})")
    cmp.add_argument("--nonlin", default=DEFAULTS.nonlin, choices=tuple(NONLINEARITIES),
                     help=f"hidden nonlinearity (default {DEFAULTS.nonlin})")
    cmp.add_argument("--update-rule", default=DEFAULTS.update_rule, choices=tuple(UPDATE_RULES),
                     help=f"default {DEFAULTS.update_rule}")
    _add_rates(cmp, DEFAULTS, "the layers")
    cmp.add_argument("--targets", default=DEFAULTS.generator_targets, choices=TARGETS,
                     help="what generators regress onto: 'bootstrap' (the method, default) or 'true' "
                          "(a teaching option: the true gradient)")
    cmp.add_argument("--dtype", choices=DTYPES, default=DEFAULTS.dtype,
                     help=f"the networks' and the data's float type (default {DEFAULTS.dtype})")
    cmp.add_argument("--seed", type=_int_at_least(0), default=DEFAULTS.seed,
                     help="fixes data, weights and batches (default 0)")
    cmp.add_argument("--workers", type=_int_at_least(1), default=None,
                     help="methods trained at once, each in a process of its own with one BLAS thread "
                          "(default: one per core, at most one per method)")
    _add_output(cmp, "compare", unit="method", steps="steps", every=1000)

    pap = commands.add_parser(
        "paper", help="the paper's MNIST experiments: methods x depths",
        description="Train fully connected MNIST nets (Linear-BatchNorm-ReLU blocks) by every method at "
                    "every depth; finished cells are cached in --out and the running one is checkpointed, so an "
                    f"interrupted grid resumes. Writes {WRITES['paper']}. "
                    "--arch cnn trains the paper's MNIST CNN instead (conv blocks, convolutional generators).")
    pap.add_argument("--arch", choices=ARCHITECTURES, default=PAPER_DEFAULTS.arch,
                     help="mlp: fully connected blocks; cnn: conv blocks of --channels --kernel-size filters, the "
                          f"first two max-pooled (default {PAPER_DEFAULTS.arch})")
    pap.add_argument("--channels", type=_int_at_least(1), default=PAPER_DEFAULTS.channels,
                     help=f"--arch cnn: filters of each conv block (default {PAPER_DEFAULTS.channels})")
    pap.add_argument("--kernel-size", type=_int_at_least(1), default=PAPER_DEFAULTS.kernel_size,
                     help=f"--arch cnn: k of the k x k kernels, odd (default {PAPER_DEFAULTS.kernel_size})")
    pap.add_argument("--methods", type=_subset_of(PAPER_METHODS), default=None,
                     help=f"comma-separated subset of {','.join(PAPER_METHODS)} (default: all; with --arch cnn, "
                          "all but synthetic-loss, which is built for fully connected nets only)")
    pap.add_argument("--depths", type=_depths, default=(PAPER_DEFAULTS.depth,),
                     help="comma-separated numbers of layers, e.g. 3,4,5,6 (default 3)")
    pap.add_argument("--no-batchnorm", action="store_true", help="Linear-ReLU blocks instead of Linear-BatchNorm-ReLU")
    pap.add_argument("--generator-hidden", type=_widths, default=None,
                     help="hidden widths of the mlp generator (default "
                          f"{','.join(map(str, PAPER_DEFAULTS.generator_hidden))}); with --arch cnn, hidden "
                          "channels of the convolutional generator (default: two of --channels)")
    pap.add_argument("--no-generator-batchnorm", action="store_true", help="mlp generator without batch norm")
    pap.add_argument("--interfaces", type=_interfaces, default=PAPER_DEFAULTS.interfaces,
                     help="every: a DNI interface at every hidden block (default); or the comma-separated numbers of "
                          "the blocks that get one, e.g. 2 (1 is the lowest): a block without one learns from the "
                          "synthetic gradient of the interface above it, and blocks above the highest learn with the "
                          "top layer")
    pap.add_argument("--interface-position", choices=INTERFACE_POSITIONS, default=PAPER_DEFAULTS.interface_position,
                     help="after: the interface sits on the block's output h = relu(BN(z)); before: on BN(z), before "
                          f"the ReLU (default {PAPER_DEFAULTS.interface_position})")
    pap.add_argument("--targets", choices=TARGETS, default=PAPER_DEFAULTS.generator_targets,
                     help="what the generators regress onto: bootstrap (the synthetic gradient of the interface above, "
                          "backpropagated; the method, default) or true (the true gradient: a teaching option that "
                          "costs a second forward and backward pass per step)")
    pap.add_argument("--loss", choices=LOSS_REDUCTIONS, default=PAPER_DEFAULTS.loss,
                     help=f"the cross-entropy summed over the batch, or its mean (default {PAPER_DEFAULTS.loss})")
    pap.add_argument("--logit-batchnorm", action="store_true",
                     help="batch-normalise the 10 logits (the top layer's linear map then has no bias)")
    pap.add_argument("--init", choices=WEIGHT_INITS, default=PAPER_DEFAULTS.init,
                     help="the weights of the blocks and the top: he (He normal, a Xavier top; default) or pytorch "
                          "(uniform within 1/sqrt(fan_in), PyTorch's default for nn.Linear)")
    _add_mnist_training(pap, "paper", iterations=PAPER_DEFAULTS.iterations, eval_every=PAPER_DEFAULTS.eval_every,
                        unit="cell")

    par = commands.add_parser(
        "parallel", help="every block in its own worker: backprop, pipelined backprop, DNI and cDNI in wall-clock time",
        description="Train the paper's MNIST net with every block in its own worker (local processes, or Ray actors), "
                    "by each schedule on each number of workers, from the same initial weights on the same batches; "
                    "finished runs are cached in --out and the running one is checkpointed, so an interrupted "
                    f"comparison resumes. Writes {WRITES['parallel']}.")
    par.add_argument("--schedules", type=_subset_of(SCHEDULE_NAMES), default=SCHEDULE_NAMES,
                     help=f"comma-separated subset of {','.join(SCHEDULE_NAMES)} (default: all)")
    par.add_argument("--workers", type=_worker_counts, default=(1, 2),
                     help="comma-separated numbers of workers, at most --depth - 1 each (default 1,2)")
    par.add_argument("--staleness", type=_int_at_least(0), default=0,
                     help="DNI: how many batches a generator may predict for before regressing onto an earlier "
                          "batch's target (default 0: exactly the single-process DNI step)")
    par.add_argument("--engine", choices=ENGINES, default="local",
                     help="local processes (default) or Ray actors (pip install 'ray>=2.60', sgrad's ray extra)")
    par.add_argument("--ray-address", default=None,
                     help="the Ray cluster to run on, e.g. HEAD_NODE:6379 (default: a Ray started for each run "
                          "on this machine); with Ray's token authentication, the token in RAY_AUTH_TOKEN, "
                          "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token is used")
    par.add_argument("--budget", type=_positive_float, default=60.0,
                     help="wall-clock seconds at which the table reads each run's test accuracy (default 60)")
    par.add_argument("--depth", type=_int_at_least(2), default=PAPER_DEFAULTS.depth,
                     help=f"layers in all: hidden blocks and the top (default {PAPER_DEFAULTS.depth})")
    par.add_argument("--generator-hidden", type=_widths, default=PAPER_DEFAULTS.generator_hidden,
                     help="hidden widths of the mlp generator (default "
                          f"{','.join(map(str, PAPER_DEFAULTS.generator_hidden))})")
    _add_mnist_training(par, "parallel", iterations=1000, eval_every=100, unit="run")

    rnn = commands.add_parser(
        "rnn", help="truncated BPTT with and without DNI on Copy and Repeat Copy: the largest N solved per T",
        description="Train an LSTM on Copy and Repeat Copy under the DNI paper's curriculum (N goes up by one when "
                    "the error falls below 0.15 bits per sequence) with truncated BPTT over windows of T steps, "
                    "with (dni) and without (bptt) a synthetic gradient at each window's end. Finished cells are "
                    "cached in --out and the running one is checkpointed, so an interrupted grid resumes. Writes "
                    f"{WRITES['rnn']} (results.md: the largest N solved).")
    rnn.add_argument("--tasks", type=_subset_of(TASKS), default=TASKS,
                     help=f"comma-separated subset of {','.join(TASKS)} (default: both)")
    rnn.add_argument("--methods", type=_subset_of(RNN_METHODS), default=RNN_METHODS,
                     help=f"comma-separated subset of {','.join(RNN_METHODS)} (default: both)")
    rnn.add_argument("--windows", type=lambda text: _whole_numbers(text, "windows T of at least 1", "2,3,4,5,8", 1),
                     default=DEFAULT_WINDOWS, help="comma-separated truncation windows T (default "
                                                   f"{','.join(map(str, DEFAULT_WINDOWS))})")
    rnn.add_argument("--seeds", type=lambda text: _whole_numbers(text, "seeds", "0,1", 0), default=(0,),
                     help="comma-separated seeds; each fixes the initial weights and the sequences (default 0)")
    rnn.add_argument("--steps", type=_int_at_least(1), default=RNN_DEFAULTS.steps,
                     help=f"the budget: training steps per cell (default {RNN_DEFAULTS.steps})")
    rnn.add_argument("--batch-size", type=_int_at_least(1), default=RNN_DEFAULTS.batch_size,
                     help=f"sequences per step (default {RNN_DEFAULTS.batch_size})")
    rnn.add_argument("--hidden", type=_int_at_least(1), default=RNN_DEFAULTS.hidden,
                     help=f"the LSTM's hidden units (default {RNN_DEFAULTS.hidden})")
    rnn.add_argument("--bits", type=_int_at_least(1), default=RNN_DEFAULTS.bits,
                     help=f"bits per vector to copy (default {RNN_DEFAULTS.bits})")
    rnn.add_argument("--max-repeats", type=_int_at_least(1), default=RNN_DEFAULTS.max_repeats,
                     help=f"Repeat Copy draws R from 1 to this (default {RNN_DEFAULTS.max_repeats})")
    _add_rates(rnn, RNN_DEFAULTS, "the LSTM and the readout (Adam)")
    rnn.add_argument("--synthetic-scale", type=_weight, default=RNN_DEFAULTS.synthetic_scale, metavar="GAMMA",
                     help="DNI: the weight γ in (0, 1] of the synthetic gradient where it enters a window's "
                          f"backward, a discount per window (default {RNN_DEFAULTS.synthetic_scale:g})")
    rnn.add_argument("--targets", default=RNN_DEFAULTS.generator_targets, choices=TARGETS,
                     help="what the DNI generator regresses onto: 'bootstrap' (the method, default) or 'true' (a "
                          "teaching option: the untruncated gradient of the rest of the sequence)")
    rnn.add_argument("--target-windows", type=_int_at_least(1), default=RNN_DEFAULTS.target_windows, metavar="N",
                     help="DNI: the windows a bootstrapped target spans: the loss of N windows backpropagated, "
                          "then ĝ at their end (default 1, the method; N > 1 is a teaching option, as n-step "
                          "returns in temporal-difference learning)")
    rnn.add_argument("--lambda", dest="td_lambda", type=_fraction, default=None, metavar="LAMBDA",
                     help="DNI: regress onto the λ-return, a mixture of every n-window target weighted by λ in "
                          "[0, 1] as in TD(λ) (0: the method's one-window target; default: not used)")
    rnn.add_argument("--traces", action="store_true",
                     help="with --lambda: learn the λ-return online with eligibility traces over the generator's "
                          "parameters, accumulate BP(λ), instead of targets computed on copies")
    rnn.add_argument("--core-traces", action="store_true",
                     help="the LSTM's weight gradient within each window by e-prop's eligibility traces, forward in "
                          "time, instead of backpropagation through the window (default: BPTT)")
    rnn.add_argument("--eval-every", type=_int_at_least(1), default=RNN_DEFAULTS.eval_every,
                     help=f"steps between the curriculum's measurements (default {RNN_DEFAULTS.eval_every})")
    _add_output(rnn, "rnn", unit="cell", steps="steps", every=1000)

    grade = commands.add_parser("grade", help="run students' homework notebooks and grade each exercise")
    if command == "grade":  # the grader's arguments, and so the grader, load only for its own command
        grading = _grading()
        grade.description = grading.DESCRIPTION
        grading.add_arguments(grade)
    add_notebooks_arguments(commands.add_parser(
        "notebooks", help="copy the course's notebooks into a folder, for a student",
        description="Copy the course's notebooks (01 to 12, as the students get them: the homework's exercises "
                    "are stubs, and no solution is among them) into DEST, made if it does not exist. A notebook "
                    "of the same name already in DEST is a student's work: the command refuses to overwrite it "
                    "unless --force is given."))
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
            return copy_notebooks(args.dest, force=args.force)
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
        command = {"compare": _compare, "paper": _paper, "parallel": _parallel, "rnn": _rnn}[args.command]
        started = time.time()
        check_out_dir(args.out, "--out")
        table = command(args)
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


def _refuse_unused(args: argparse.Namespace, options: dict[str, Any], *, used: bool, reason: str, fix: str,
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


def _compare(args: argparse.Namespace) -> str:
    _refuse_unused(args, {"targets": DEFAULTS.generator_targets, "generator_lr": DEFAULTS.generator_alpha},
                   used=any(method in ("dni", "cdni") for method in args.methods),
                   reason=f"it sets the generators, and --methods {','.join(args.methods)} trains none",
                   fix="add dni or cdni to --methods, or leave {flag} out", warn=True)
    histories = compare(
        args.methods, output_dim=args.bits, num_train=args.train, num_test=args.test,
        out_dir=args.out, progress=None if args.quiet else print_progress,
        epochs=args.epochs, batch_size=args.batch_size, hidden=args.hidden, nonlin=args.nonlin,
        update_rule=args.update_rule, alpha=args.lr, generator_alpha=args.generator_lr,
        generator_targets=args.targets, dtype=args.dtype, seed=args.seed,
        checkpoint_every=args.checkpoint_every or None,
        workers=min(len(args.methods), _cores()) if args.workers is None else args.workers)
    return results_table(histories)


def _cores() -> int:
    """The cores this process may run on (those the system lets it use, where it says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _paper(args: argparse.Namespace) -> str:
    from data_gen.mnist import IMAGE_SHAPE, load_mnist, prepare_mnist  # here: `sgrad compare` needs no MNIST loader

    _refuse_unused(args, {"channels": PAPER_DEFAULTS.channels, "kernel_size": PAPER_DEFAULTS.kernel_size},
                   used=args.arch == "cnn", reason="it sets the CNN's conv blocks, and --arch mlp builds fully "
                                                   "connected ones", fix="add --arch cnn, or leave {flag} out")
    _refuse_unused(args, {"hidden": PAPER_DEFAULTS.hidden}, used=args.arch == "mlp",
                   reason="it sets the width of fully connected blocks, and --arch cnn builds conv blocks of "
                          "--channels filters", fix="leave {flag} out")
    _refuse_unused(args, {"generator": PAPER_DEFAULTS.generator, "generator_hidden": None,
                          "no_generator_batchnorm": False, "generator_lr": PAPER_DEFAULTS.generator_alpha},
                   used=args.methods is None or any(method in DECOUPLED for method in args.methods),
                   reason=f"it sets the generators, and --methods {','.join(args.methods or ())} trains none",
                   fix="add dni, cdni or synthetic-loss to --methods, or leave {flag} out", warn=True)
    generator_hidden = args.generator_hidden
    if generator_hidden is None:
        generator_hidden = (args.channels, args.channels) if args.arch == "cnn" else PAPER_DEFAULTS.generator_hidden
    methods = args.methods
    if methods is None:
        methods = tuple(m for m in PAPER_METHODS if args.arch == "mlp" or m != "synthetic-loss")
    config = PaperConfig(
        iterations=args.iterations, batch_size=args.batch_size, hidden=args.hidden,
        batchnorm=not args.no_batchnorm, generator=args.generator, generator_hidden=generator_hidden,
        generator_batchnorm=not args.no_generator_batchnorm, alpha=args.lr, generator_alpha=args.generator_lr,
        eval_every=args.eval_every, dtype=args.dtype, seed=args.seed, arch=args.arch, channels=args.channels,
        kernel_size=args.kernel_size, depth=args.depths[0], interfaces=args.interfaces,
        interface_position=args.interface_position, generator_targets=args.targets, loss=args.loss,
        logit_batchnorm=args.logit_batchnorm, init=args.init)
    # Before MNIST is loaded (or downloaded); run_grid checks again against the data it gets.
    check_grid(methods, args.depths, config, input_dim=IMAGE_SHAPE[0] * IMAGE_SHAPE[1],
               train_examples=args.train_subset, checkpoint_every=args.checkpoint_every or None)
    data = prepare_mnist(load_mnist(args.data, verify=not args.no_verify), dtype=args.dtype, subset=args.train_subset,
                         seed=args.seed if args.train_subset else None)
    results = run_grid(tuple(data), methods=methods, depths=args.depths, config=config, out_dir=args.out,
                       progress=None if args.quiet else print_progress, checkpoint_every=args.checkpoint_every or None)
    return paper_table(results)


def _parallel(args: argparse.Namespace) -> str:
    import importlib.util

    from data_gen.mnist import load_mnist, prepare_mnist  # here: `sgrad compare` needs no MNIST loader

    _refuse_unused(args, {"staleness": 0, "generator": PAPER_DEFAULTS.generator,
                          "generator_hidden": PAPER_DEFAULTS.generator_hidden,
                          "generator_lr": PAPER_DEFAULTS.generator_alpha},
                   used=any(schedule in ("dni", "cdni") for schedule in args.schedules),
                   reason=f"it sets the generators, and --schedules {','.join(args.schedules)} trains none",
                   fix="add dni or cdni to --schedules, or leave {flag} out", warn=True)
    config = PaperConfig(
        depth=args.depth, iterations=args.iterations, batch_size=args.batch_size, hidden=args.hidden,
        generator=args.generator, generator_hidden=args.generator_hidden, alpha=args.lr,
        generator_alpha=args.generator_lr, eval_every=args.eval_every, dtype=args.dtype, seed=args.seed)
    checkpoint_every = args.checkpoint_every or None
    # Before MNIST is loaded (or downloaded); compare_parallel checks again against the data it gets.
    check_runs(args.schedules, args.workers, config, staleness=args.staleness, budget=args.budget, engine=args.engine,
               train_examples=args.train_subset, out_dir=args.out, checkpoint_every=checkpoint_every)
    if args.ray_address is not None and args.engine != "ray":
        raise ValueError("--ray-address is the address of a Ray cluster: use it with --engine ray")
    if args.engine == "ray" and importlib.util.find_spec("ray") is None:
        raise ValueError("--engine ray needs Ray: install it with pip install 'ray>=2.60' (sgrad's ray extra)")
    data = prepare_mnist(load_mnist(args.data, verify=not args.no_verify), dtype=args.dtype, subset=args.train_subset,
                         seed=args.seed if args.train_subset else None)
    results = compare_parallel(tuple(data), schedules=args.schedules, workers=args.workers, config=config,
                               staleness=args.staleness, budget=args.budget, engine=args.engine,
                               ray_address=args.ray_address, out_dir=args.out, checkpoint_every=checkpoint_every,
                               progress=None if args.quiet else print_progress)
    return parallel_table(results, config, args.budget)


def _rnn(args: argparse.Namespace) -> str:
    _refuse_unused(args, {"target_windows": RNN_DEFAULTS.target_windows, "targets": RNN_DEFAULTS.generator_targets,
                          "td_lambda": None, "traces": False, "synthetic_scale": RNN_DEFAULTS.synthetic_scale,
                          "generator_lr": RNN_DEFAULTS.generator_alpha},
                   used="dni" in args.methods,
                   reason=f"it sets the DNI generator, and --methods {','.join(args.methods)} trains none",
                   fix="add dni to --methods, or leave {flag} out")
    config = RnnConfig(steps=args.steps, batch_size=args.batch_size, hidden=args.hidden, bits=args.bits,
                       max_repeats=args.max_repeats, alpha=args.lr, generator_alpha=args.generator_lr,
                       synthetic_scale=args.synthetic_scale, generator_targets=args.targets,
                       target_windows=args.target_windows, td_lambda=args.td_lambda, traces=args.traces,
                       core_traces=args.core_traces, eval_every=args.eval_every)
    results = run_rnn_grid(tasks=args.tasks, methods=args.methods, windows=args.windows, seeds=args.seeds,
                           config=config, out_dir=args.out, progress=None if args.quiet else print_progress,
                           checkpoint_every=args.checkpoint_every or None)
    return rnn_table(results)


if __name__ == "__main__":
    sys.exit(main())
