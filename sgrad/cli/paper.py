"""``sgrad paper``: the paper's MNIST experiments over methods and depths (:mod:`sgrad.experiments.mnist`)."""

import argparse
from typing import Any

from ..experiments.binary_addition import TARGETS
from ..experiments.mnist import (ARCHITECTURES, COMPLETE, GENERATOR_INITS, INTERFACE_POSITIONS, LOSS_REDUCTIONS,
                                 PAPER_METHODS, WEIGHT_INITS, PaperConfig, check_grid, results_table, run_grid)
from ..training.settings import DECOUPLED
from .argument_types import subset_of, whole_number, whole_numbers, widths
from .training_options import PAPER_DEFAULTS, WRITES, add_mnist_training, print_progress, refuse_unused

__all__ = ["add_parser", "run"]


def _interfaces(text: str) -> str | tuple[int, ...]:
    if text.strip() == "every":
        return "every"
    return whole_numbers(text, "hidden-block numbers (1 is the lowest) or 'every'", "2 or 1,2", 1)


def _depths(text: str) -> tuple[int, ...]:
    return whole_numbers(text, "depths of at least 2 (a hidden block and the top)", "3,4,5,6", 2)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sgrad paper``'s parser, with its arguments, to ``subparsers``."""
    parser = subparsers.add_parser(
        "paper", help="the paper's MNIST experiments: methods x depths",
        description="Train fully connected MNIST nets (Linear-BatchNorm-ReLU blocks) by every method at "
                    "every depth; finished cells are cached in --out and the running one is checkpointed, so an "
                    f"interrupted grid resumes. Writes {WRITES['paper']}. "
                    "--arch cnn trains the paper's MNIST CNN instead (conv blocks, convolutional generators); "
                    "--arch peer-cnn trains koz4k/dni-pytorch's MNIST CNN example, whole.")
    parser.add_argument("--arch", choices=ARCHITECTURES, default=PAPER_DEFAULTS.arch,
                        help="mlp: fully connected blocks; cnn: conv blocks of --channels --kernel-size filters, the "
                             "first two max-pooled; peer-cnn: koz4k/dni-pytorch's MNIST CNN example, its layers, "
                             "synthesizer and interface fixed (two valid 5x5 conv blocks, the interface before the "
                             "second one's ReLU, a 320-50-10 top; its setting adds --loss mean --batch-size 64 --lr "
                             f"1e-3) (default {PAPER_DEFAULTS.arch})")
    parser.add_argument("--channels", type=whole_number(1), default=PAPER_DEFAULTS.channels,
                        help=f"--arch cnn: filters of each conv block (default {PAPER_DEFAULTS.channels})")
    parser.add_argument("--kernel-size", type=whole_number(1), default=PAPER_DEFAULTS.kernel_size,
                        help=f"--arch cnn: k of the k x k kernels, odd (default {PAPER_DEFAULTS.kernel_size})")
    parser.add_argument("--methods", type=subset_of(PAPER_METHODS), default=None,
                        help=f"comma-separated subset of {','.join(PAPER_METHODS)} (default: all; with a CNN, "
                             "all but synthetic-loss, complete and ccomplete, which are built for fully connected "
                             "nets only). complete and ccomplete are the complete unlock: each interface also "
                             "predicts its h from the image (and, for ccomplete, the label), and the layers above it "
                             "train on that synthetic input; the input generators take the generators' options")
    parser.add_argument("--depths", type=_depths, default=(PAPER_DEFAULTS.depth,),
                        help="comma-separated numbers of layers, e.g. 3,4,5,6 (default 3)")
    parser.add_argument("--no-batchnorm", action="store_true",
                        help="Linear-ReLU blocks instead of Linear-BatchNorm-ReLU")
    parser.add_argument("--generator-hidden", type=widths, default=None,
                        help="hidden widths of the mlp generator (default "
                             f"{','.join(map(str, PAPER_DEFAULTS.generator_hidden))}); with --arch cnn, hidden "
                             "channels of the convolutional generator (default: two of --channels)")
    parser.add_argument("--no-generator-batchnorm", action="store_true", help="mlp generator without batch norm")
    parser.add_argument("--interfaces", type=_interfaces, default=PAPER_DEFAULTS.interfaces,
                        help="every: a DNI interface at every hidden block (default); or the comma-separated numbers "
                             "of the blocks that get one, e.g. 2 (1 is the lowest): a block without one learns from "
                             "the synthetic gradient of the interface above it, and blocks above the highest learn "
                             "with the top layer")
    parser.add_argument("--interface-position", choices=INTERFACE_POSITIONS,
                        default=PAPER_DEFAULTS.interface_position,
                        help="after: the interface sits on the block's output h = relu(BN(z)); before: on BN(z), "
                             f"before the ReLU (default {PAPER_DEFAULTS.interface_position})")
    parser.add_argument("--targets", choices=TARGETS, default=PAPER_DEFAULTS.generator_targets,
                        help="what the generators regress onto: bootstrap (the synthetic gradient of the interface "
                             "above, backpropagated; the method, default) or true (the true gradient: a teaching "
                             "option that costs a second forward and backward pass per step)")
    parser.add_argument("--loss", choices=LOSS_REDUCTIONS, default=PAPER_DEFAULTS.loss,
                        help=f"the cross-entropy summed over the batch, or its mean (default {PAPER_DEFAULTS.loss})")
    parser.add_argument("--logit-batchnorm", action="store_true",
                        help="batch-normalise the 10 logits (the top layer's linear map then has no bias)")
    parser.add_argument("--init", choices=WEIGHT_INITS, default=PAPER_DEFAULTS.init,
                        help="the weights of the blocks and the top: he (He normal, a Xavier top; default) or "
                             "pytorch (uniform within 1/sqrt(fan_in), PyTorch's default for nn.Linear)")
    parser.add_argument("--generator-init", choices=GENERATOR_INITS, default=PAPER_DEFAULTS.generator_init,
                        help="how the generators start: sgrad (He normal hidden weights, or --init's for the input "
                             "generators, and zero biases: they predict 0 at first; default) or pytorch "
                             "(koz4k/dni-pytorch's synthesizer: PyTorch's nn.Linear start, weights and biases "
                             "uniform within 1/sqrt(fan_in), the label through a Linear of its own, output weights "
                             "zero and output biases uniform)")
    add_mnist_training(parser, "paper", iterations=PAPER_DEFAULTS.iterations, eval_every=PAPER_DEFAULTS.eval_every,
                       unit="cell")
    return parser


def run(args: argparse.Namespace) -> str:
    """Train the grid of ``args.methods`` by ``args.depths`` on MNIST as ``args`` says; return the results table."""
    from data_gen.mnist import IMAGE_SHAPE, load_mnist, prepare_mnist  # here: `sgrad compare` needs no MNIST loader

    builds = {"mlp": "fully connected ones", "cnn": "conv blocks of --channels filters",
              "peer-cnn": "the peer's conv blocks, fixed"}[args.arch]
    refuse_unused(args, {"channels": PAPER_DEFAULTS.channels, "kernel_size": PAPER_DEFAULTS.kernel_size},
                  used=args.arch == "cnn", reason=f"it sets the CNN's conv blocks, and --arch {args.arch} builds {builds}",
                  fix="add --arch cnn, or leave {flag} out")
    refuse_unused(args, {"hidden": PAPER_DEFAULTS.hidden}, used=args.arch == "mlp",
                  reason=f"it sets the width of fully connected blocks, and --arch {args.arch} builds {builds}",
                  fix="leave {flag} out")
    refuse_unused(args, {"generator": PAPER_DEFAULTS.generator, "generator_hidden": None,
                         "no_generator_batchnorm": False, "generator_lr": PAPER_DEFAULTS.generator_alpha,
                         "generator_init": PAPER_DEFAULTS.generator_init},
                  used=args.methods is None or any(method in DECOUPLED for method in args.methods),
                  reason=f"it sets the generators, and --methods {','.join(args.methods or ())} trains none",
                  fix="add dni, cdni, synthetic-loss, complete or ccomplete to --methods, or leave {flag} out",
                  warn=True)
    generator_hidden = args.generator_hidden
    if generator_hidden is None:
        generator_hidden = (args.channels, args.channels) if args.arch == "cnn" else PAPER_DEFAULTS.generator_hidden
    methods = args.methods
    if methods is None:
        methods = tuple(m for m in PAPER_METHODS if args.arch == "mlp" or m not in ("synthetic-loss", *COMPLETE))
    config = PaperConfig(
        iterations=args.iterations, batch_size=args.batch_size, hidden=args.hidden,
        batchnorm=not args.no_batchnorm, generator=args.generator, generator_hidden=generator_hidden,
        generator_batchnorm=not args.no_generator_batchnorm, alpha=args.lr, generator_alpha=args.generator_lr,
        eval_every=args.eval_every, dtype=args.dtype, seed=args.seed, arch=args.arch, channels=args.channels,
        kernel_size=args.kernel_size, depth=args.depths[0], interfaces=args.interfaces,
        interface_position=args.interface_position, generator_targets=args.targets, loss=args.loss,
        logit_batchnorm=args.logit_batchnorm, init=args.init, generator_init=args.generator_init)
    # Before MNIST is loaded (or downloaded); run_grid checks again against the data it gets.
    check_grid(methods, args.depths, config, input_dim=IMAGE_SHAPE[0] * IMAGE_SHAPE[1],
               train_examples=args.train_subset, checkpoint_every=args.checkpoint_every or None)
    data = prepare_mnist(load_mnist(args.data, verify=not args.no_verify), dtype=args.dtype, subset=args.train_subset,
                         seed=args.seed if args.train_subset else None)
    results = run_grid(tuple(data), methods=methods, depths=args.depths, config=config, out_dir=args.out,
                       progress=None if args.quiet else print_progress, checkpoint_every=args.checkpoint_every or None)
    return results_table(results)
