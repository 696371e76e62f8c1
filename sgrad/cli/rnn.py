"""``sgrad rnn``: an LSTM on Copy and Repeat Copy with truncated BPTT, with and without DNI at the window
boundaries (:mod:`sgrad.experiments.rnn`)."""

import argparse
from typing import Any

from ..experiments.binary_addition import TARGETS
from ..experiments.rnn import DEFAULT_WINDOWS, RNN_METHODS, TASKS, RnnConfig, results_table, run_grid
from .argument_types import fraction, subset_of, weight, whole_number, whole_numbers
from .training_options import WRITES, add_output, add_rates, print_progress, refuse_unused

__all__ = ["RNN_DEFAULTS", "add_parser", "run"]

RNN_DEFAULTS = RnnConfig()


def _windows(text: str) -> tuple[int, ...]:
    return whole_numbers(text, "windows T of at least 1", "2,3,4,5,8", 1)


def _seeds(text: str) -> tuple[int, ...]:
    return whole_numbers(text, "seeds", "0,1", 0)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sgrad rnn``'s parser, with its arguments, to ``subparsers``."""
    parser = subparsers.add_parser(
        "rnn", help="truncated BPTT with and without DNI on Copy and Repeat Copy: the largest N solved per T",
        description="Train an LSTM on Copy and Repeat Copy under the DNI paper's curriculum (N goes up by one when "
                    "the error falls below 0.15 bits per sequence) with truncated BPTT over windows of T steps, "
                    "with (dni) and without (bptt) a synthetic gradient at each window's end. Finished cells are "
                    "cached in --out and the running one is checkpointed, so an interrupted grid resumes. Writes "
                    f"{WRITES['rnn']} (results.md: the largest N solved).")
    parser.add_argument("--tasks", type=subset_of(TASKS), default=TASKS,
                        help=f"comma-separated subset of {','.join(TASKS)} (default: both)")
    parser.add_argument("--methods", type=subset_of(RNN_METHODS), default=RNN_METHODS,
                        help=f"comma-separated subset of {','.join(RNN_METHODS)} (default: both)")
    parser.add_argument("--windows", type=_windows, default=DEFAULT_WINDOWS,
                        help=f"comma-separated truncation windows T (default {','.join(map(str, DEFAULT_WINDOWS))})")
    parser.add_argument("--seeds", type=_seeds, default=(0,),
                        help="comma-separated seeds; each fixes the initial weights and the sequences (default 0)")
    parser.add_argument("--steps", type=whole_number(1), default=RNN_DEFAULTS.steps,
                        help=f"the budget: training steps per cell (default {RNN_DEFAULTS.steps})")
    parser.add_argument("--batch-size", type=whole_number(1), default=RNN_DEFAULTS.batch_size,
                        help=f"sequences per step (default {RNN_DEFAULTS.batch_size})")
    parser.add_argument("--hidden", type=whole_number(1), default=RNN_DEFAULTS.hidden,
                        help=f"the LSTM's hidden units (default {RNN_DEFAULTS.hidden})")
    parser.add_argument("--bits", type=whole_number(1), default=RNN_DEFAULTS.bits,
                        help=f"bits per vector to copy (default {RNN_DEFAULTS.bits})")
    parser.add_argument("--max-repeats", type=whole_number(1), default=RNN_DEFAULTS.max_repeats,
                        help=f"Repeat Copy draws R from 1 to this (default {RNN_DEFAULTS.max_repeats})")
    add_rates(parser, RNN_DEFAULTS, "the LSTM and the readout (Adam)")
    parser.add_argument("--synthetic-scale", type=weight, default=RNN_DEFAULTS.synthetic_scale, metavar="GAMMA",
                        help="DNI: the weight γ in (0, 1] of the synthetic gradient where it enters a window's "
                             f"backward, a discount per window (default {RNN_DEFAULTS.synthetic_scale:g})")
    parser.add_argument("--targets", default=RNN_DEFAULTS.generator_targets, choices=TARGETS,
                        help="what the DNI generator regresses onto: 'bootstrap' (the method, default) or 'true' (a "
                             "teaching option: the untruncated gradient of the rest of the sequence)")
    parser.add_argument("--target-windows", type=whole_number(1), default=RNN_DEFAULTS.target_windows, metavar="N",
                        help="DNI: the windows a bootstrapped target spans: the loss of N windows backpropagated, "
                             "then ĝ at their end (default 1, the method; N > 1 is a teaching option, as n-step "
                             "returns in temporal-difference learning)")
    parser.add_argument("--lambda", dest="td_lambda", type=fraction, default=None, metavar="LAMBDA",
                        help="DNI: regress onto the λ-return, a mixture of every n-window target weighted by λ in "
                             "[0, 1] as in TD(λ) (0: the method's one-window target; default: not used)")
    parser.add_argument("--traces", action="store_true",
                        help="with --lambda: learn the λ-return online with eligibility traces over the generator's "
                             "parameters, accumulate BP(λ), instead of targets computed on copies")
    parser.add_argument("--core-traces", action="store_true",
                        help="the LSTM's weight gradient within each window by e-prop's eligibility traces, forward "
                             "in time, instead of backpropagation through the window (default: BPTT)")
    parser.add_argument("--eval-every", type=whole_number(1), default=RNN_DEFAULTS.eval_every,
                        help=f"steps between the curriculum's measurements (default {RNN_DEFAULTS.eval_every})")
    add_output(parser, "rnn", unit="cell", steps="steps", every=1000)
    return parser


def run(args: argparse.Namespace) -> str:
    """Train the grid of ``args.tasks``, methods, windows and seeds as ``args`` says; return the results table."""
    refuse_unused(args, {"target_windows": RNN_DEFAULTS.target_windows, "targets": RNN_DEFAULTS.generator_targets,
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
    results = run_grid(tasks=args.tasks, methods=args.methods, windows=args.windows, seeds=args.seeds,
                       config=config, out_dir=args.out, progress=None if args.quiet else print_progress,
                       checkpoint_every=args.checkpoint_every or None)
    return results_table(results)
