"""The ``sgrad`` command line.  ``sgrad compare`` trains backprop, no-bprop, DNI and cDNI side by side."""

import argparse
import sys

from .comparison import compare, print_progress, results_table
from .training import METHODS, TrainConfig

DEFAULTS = TrainConfig()


def build_parser():
    parser = argparse.ArgumentParser(prog="sgrad", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cmp = commands.add_parser(
        "compare", help="compare backprop, no-bprop, DNI and cDNI on binary addition",
        description="Train every method from the same initial weights on the same batches of "
                    "binary addition; print a results table and write a figure and the histories.")
    cmp.add_argument("--methods", default=",".join(METHODS),
                     help=f"comma-separated subset of {','.join(METHODS)} (default: all)")
    cmp.add_argument("--bits", type=int, default=8, help="bits of the sum; operands are below 2**(bits-1) (default 8)")
    cmp.add_argument("--train", type=int, default=1000, help="training pairs (default 1000)")
    cmp.add_argument("--test", type=int, default=1000, help="held-out pairs, none shared with training (default 1000)")
    cmp.add_argument("--epochs", type=int, default=DEFAULTS.epochs, help=f"default {DEFAULTS.epochs}")
    cmp.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size, help=f"default {DEFAULTS.batch_size}")
    cmp.add_argument("--hidden", default=",".join(map(str, DEFAULTS.hidden)),
                     help=f"comma-separated hidden widths (default {','.join(map(str, DEFAULTS.hidden))})")
    cmp.add_argument("--nonlin", default=DEFAULTS.nonlin, help=f"hidden nonlinearity (default {DEFAULTS.nonlin})")
    cmp.add_argument("--update-rule", default=DEFAULTS.update_rule, choices=("sgd", "momentum", "adam"),
                     help=f"default {DEFAULTS.update_rule}")
    cmp.add_argument("--lr", type=float, default=DEFAULTS.alpha, help=f"learning rate (default {DEFAULTS.alpha})")
    cmp.add_argument("--generator-lr", type=float, default=DEFAULTS.generator_alpha,
                     help="generators' learning rate (default: --lr)")
    cmp.add_argument("--targets", default=DEFAULTS.generator_targets, choices=("bootstrap", "true"),
                     help="what generators regress onto: 'bootstrap' (the method) or 'true' "
                          "(teaching option: the true gradient)")
    cmp.add_argument("--seed", type=int, default=DEFAULTS.seed, help="fixes data, weights and batches (default 0)")
    cmp.add_argument("--out", default="results/compare",
                     help="folder for history.json, compare.png, results.md (default results/compare)")
    cmp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        histories = compare(
            _split(args.methods, str), output_dim=args.bits, num_train=args.train, num_test=args.test,
            out_dir=args.out, progress=None if args.quiet else print_progress,
            epochs=args.epochs, batch_size=args.batch_size, hidden=_split(args.hidden, int),
            nonlin=args.nonlin, update_rule=args.update_rule, alpha=args.lr,
            generator_alpha=args.generator_lr, generator_targets=args.targets, seed=args.seed)
    except (ValueError, TypeError) as error:
        parser.exit(2, f"sgrad compare: error: {error}\n")
    print(results_table(histories))
    print(f"\nwrote {args.out}/history.json, compare.png and results.md", file=sys.stderr)
    return 0


def _split(text, kind):
    try:
        return tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"expected a comma-separated list of {kind.__name__}s; got {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())
