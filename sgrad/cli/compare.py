"""``sgrad compare``: backprop, no-bprop, DNI and cDNI side by side on binary addition
(:mod:`sgrad.experiments.binary_addition`)."""

import argparse
import os
from typing import Any

from data_gen.binary_addition import MAX_OUTPUT_DIM, MIN_OUTPUT_DIM

from ..experiments.binary_addition import METHODS, TARGETS, TrainConfig, compare, results_table
from ..nn.nonlinearities import NONLINEARITIES
from ..nn.optimizers import UPDATE_RULES
from ..training.settings import DTYPES
from .argument_types import subset_of, whole_number, widths
from .training_options import add_output, add_rates, print_progress, refuse_unused

__all__ = ["DEFAULTS", "add_parser", "run"]

DEFAULTS = TrainConfig()


def _bits(text: str) -> int:
    value = whole_number(MIN_OUTPUT_DIM)(text)
    if value > MAX_OUTPUT_DIM:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_OUTPUT_DIM}; got {value}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sgrad compare``'s parser, with its arguments, to ``subparsers``."""
    parser = subparsers.add_parser(
        "compare", help="compare backprop, no-bprop, DNI and cDNI on binary addition",
        description="Train every method from the same initial weights on the same batches of "
                    "binary addition; print a results table and write a figure and the histories. "
                    "Each method is checkpointed in --out, so a rerun carries on where it stopped.")
    parser.add_argument("--methods", type=subset_of(METHODS), default=METHODS,
                        help=f"comma-separated subset of {','.join(METHODS)} (default: all)")
    parser.add_argument("--bits", type=_bits, default=8,
                        help="bits of the sum; operands are below 2**(bits-1) (default 8)")
    parser.add_argument("--train", type=whole_number(1), default=1000, help="training pairs (default 1000)")
    parser.add_argument("--test", type=whole_number(1), default=1000,
                        help="held-out pairs, none shared with training (default 1000)")
    parser.add_argument("--epochs", type=whole_number(1), default=DEFAULTS.epochs, help=f"default {DEFAULTS.epochs}")
    parser.add_argument("--batch-size", type=whole_number(1), default=DEFAULTS.batch_size,
                        help=f"default {DEFAULTS.batch_size}")
    parser.add_argument("--hidden", type=widths, default=DEFAULTS.hidden,
                        help=f"comma-separated hidden widths (default {','.join(map(str, DEFAULTS.hidden))})")
    parser.add_argument("--nonlin", default=DEFAULTS.nonlin, choices=tuple(NONLINEARITIES),
                        help=f"hidden nonlinearity (default {DEFAULTS.nonlin})")
    parser.add_argument("--update-rule", default=DEFAULTS.update_rule, choices=tuple(UPDATE_RULES),
                        help=f"default {DEFAULTS.update_rule}")
    add_rates(parser, DEFAULTS, "the layers")
    parser.add_argument("--targets", default=DEFAULTS.generator_targets, choices=TARGETS,
                        help="what generators regress onto: 'bootstrap' (the method, default) or 'true' "
                             "(a teaching option: the true gradient)")
    parser.add_argument("--dtype", choices=DTYPES, default=DEFAULTS.dtype,
                        help=f"the networks' and the data's float type (default {DEFAULTS.dtype})")
    parser.add_argument("--seed", type=whole_number(0), default=DEFAULTS.seed,
                        help="fixes data, weights and batches (default 0)")
    parser.add_argument("--workers", type=whole_number(1), default=None,
                        help="methods trained at once, each in a process of its own with one BLAS thread "
                             "(default: one per core, at most one per method)")
    add_output(parser, "compare", unit="method", steps="steps", every=1000)
    return parser


def run(args: argparse.Namespace) -> str:
    """Train ``args.methods`` side by side as ``args`` says; return the results table."""
    refuse_unused(args, {"targets": DEFAULTS.generator_targets, "generator_lr": DEFAULTS.generator_alpha},
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
