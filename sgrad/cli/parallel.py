"""``sgrad parallel``: the paper's MNIST net with every block in its own worker, by each schedule, against
wall-clock time (:mod:`sgrad.experiments.parallel`)."""

import argparse
import importlib.util
from typing import Any

from ..experiments.mnist import PaperConfig
from ..experiments.parallel import DECOUPLED_SCHEDULES, ENGINES, check_runs, compare_parallel, results_table
from ..parallel.pipeline import SCHEDULE_NAMES
from .argument_types import positive_float, subset_of, whole_number, whole_numbers, widths
from .training_options import PAPER_DEFAULTS, WRITES, add_mnist_training, print_progress, refuse_unused

__all__ = ["add_parser", "run"]


def _worker_counts(text: str) -> tuple[int, ...]:
    return whole_numbers(text, "numbers of workers", "1,2", 1)


DEFAULT_SCHEDULES = tuple(name for name in SCHEDULE_NAMES if name not in ("complete", "ccomplete"))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sgrad parallel``'s parser, with its arguments, to ``subparsers``."""
    parser = subparsers.add_parser(
        "parallel", help="every block in its own worker: backprop, pipelined backprop, DNI, cDNI and the complete unlock "
                         "in wall-clock time",
        description="Train the paper's MNIST net with every block in its own worker (local processes, or Ray actors), "
                    "by each schedule on each number of workers, from the same initial weights on the same batches; "
                    "finished runs are cached in --out and the running one is checkpointed, so an interrupted "
                    f"comparison resumes. Writes {WRITES['parallel']}.")
    parser.add_argument("--schedules", type=subset_of(SCHEDULE_NAMES), default=DEFAULT_SCHEDULES,
                        help=f"comma-separated subset of {','.join(SCHEDULE_NAMES)} (default: "
                             f"{','.join(DEFAULT_SCHEDULES)}; the complete unlock's input generators double a run)")
    parser.add_argument("--workers", type=_worker_counts, default=(1, 2),
                        help="comma-separated numbers of workers, at most --depth - 1 each (default 1,2)")
    parser.add_argument("--staleness", type=whole_number(0), default=0,
                        help="DNI and the complete unlock: how many batches a generator may predict for before "
                             "regressing onto an earlier batch's target (default 0: exactly the single-process step)")
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local processes (default) or Ray actors (pip install 'ray>=2.60', sgrad's ray extra)")
    parser.add_argument("--ray-address", default=None,
                        help="the Ray cluster to run on, e.g. HEAD_NODE:6379 (default: a Ray started for each run "
                             "on this machine); with Ray's token authentication, the token in RAY_AUTH_TOKEN, "
                             "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token is used")
    parser.add_argument("--budget", type=positive_float, default=60.0,
                        help="wall-clock seconds at which the table reads each run's test accuracy (default 60)")
    parser.add_argument("--depth", type=whole_number(2), default=PAPER_DEFAULTS.depth,
                        help=f"layers in all: hidden blocks and the top (default {PAPER_DEFAULTS.depth})")
    parser.add_argument("--generator-hidden", type=widths, default=PAPER_DEFAULTS.generator_hidden,
                        help="hidden widths of the mlp generator (default "
                             f"{','.join(map(str, PAPER_DEFAULTS.generator_hidden))})")
    add_mnist_training(parser, "parallel", iterations=1000, eval_every=100, unit="run")
    return parser


def run(args: argparse.Namespace) -> str:
    """Train every schedule on every number of workers as ``args`` says; return the results table."""
    from data_gen.mnist import load_mnist, prepare_mnist  # here: `sgrad compare` needs no MNIST loader

    refuse_unused(args, {"staleness": 0, "generator": PAPER_DEFAULTS.generator,
                         "generator_hidden": PAPER_DEFAULTS.generator_hidden,
                         "generator_lr": PAPER_DEFAULTS.generator_alpha},
                  used=any(schedule in DECOUPLED_SCHEDULES for schedule in args.schedules),
                  reason=f"it sets the generators, and --schedules {','.join(args.schedules)} trains none",
                  fix="add dni, cdni, complete or ccomplete to --schedules, or leave {flag} out", warn=True)
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
    return results_table(results, config, args.budget)
