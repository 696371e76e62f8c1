"""The ``sgrad`` command line.  ``sgrad compare`` trains backprop, no-bprop, DNI and cDNI side by side."""

import argparse
import sys

from data_gen.binary_addition import MAX_OUTPUT_DIM, MIN_OUTPUT_DIM

from .comparison import compare, print_progress, results_table
from .nonlinearities import NONLINEARITIES
from .training import METHODS, TrainConfig

DEFAULTS = TrainConfig()


class _Parser(argparse.ArgumentParser):
    """Bad arguments end with one readable line on stderr and exit status 2, no usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}; got {value}")
        return value
    return parse


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0; got {text}")
    return value


def _bits(text):
    value = _int_at_least(MIN_OUTPUT_DIM)(text)
    if value > MAX_OUTPUT_DIM:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_OUTPUT_DIM}; got {value}")
    return value


def _widths(text):
    parts = text.split(",")
    if not all(part.strip().isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive widths such as 128,64; got {text!r}")
    return tuple(int(part) for part in parts)


def _methods(text):
    methods = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(METHODS)}; got {text!r}")
    return methods


def build_parser():
    parser = _Parser(prog="sgrad", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    cmp = commands.add_parser(
        "compare", help="compare backprop, no-bprop, DNI and cDNI on binary addition",
        description="Train every method from the same initial weights on the same batches of "
                    "binary addition; print a results table and write a figure and the histories.")
    cmp.add_argument("--methods", type=_methods, default=METHODS,
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
    cmp.add_argument("--update-rule", default=DEFAULTS.update_rule, choices=("sgd", "momentum", "adam"),
                     help=f"default {DEFAULTS.update_rule}")
    cmp.add_argument("--lr", type=_positive_float, default=DEFAULTS.alpha,
                     help=f"learning rate of the layers (default {DEFAULTS.alpha})")
    cmp.add_argument("--generator-lr", type=_positive_float, default=DEFAULTS.generator_alpha,
                     help=f"learning rate of the generators (default {DEFAULTS.generator_alpha or 'as --lr'})")
    cmp.add_argument("--targets", default=DEFAULTS.generator_targets, choices=("bootstrap", "true"),
                     help="what generators regress onto: 'bootstrap' (the method, default) or 'true' "
                          "(a teaching option: the true gradient)")
    cmp.add_argument("--seed", type=_int_at_least(0), default=DEFAULTS.seed,
                     help="fixes data, weights and batches (default 0)")
    cmp.add_argument("--out", default="results/compare",
                     help="folder for history.json, compare.png and results.md (default results/compare)")
    cmp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        histories = compare(
            args.methods, output_dim=args.bits, num_train=args.train, num_test=args.test,
            out_dir=args.out, progress=None if args.quiet else print_progress,
            epochs=args.epochs, batch_size=args.batch_size, hidden=args.hidden, nonlin=args.nonlin,
            update_rule=args.update_rule, alpha=args.lr, generator_alpha=args.generator_lr,
            generator_targets=args.targets, seed=args.seed)
    except (ValueError, TypeError, OSError) as error:
        parser.exit(2, f"sgrad compare: error: {error}\n")
    print(results_table(histories))
    print(f"wrote {args.out}/history.json, compare.png and results.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
