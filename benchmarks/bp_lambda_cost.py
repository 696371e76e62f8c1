"""Benchmark: the cost of one training step of recurrent DNI with the λ-return and with BP(λ), against one-window DNI.

The step is ``sgrad rnn``'s (:func:`sgrad.recurrent.tbptt.tbptt_step` on Copy, an LSTM core, a linear readout and a linear
generator M of the state [h, c], Adam), at the default grid's size: 64 units (a state of 128), batch 32, 8 bits,
T = 2, on sequences of N = ``--length`` vectors (2N + 1 steps).  The three ways M learns:

- one-window DNI (the method): M(s_k) regresses onto δ_k, which the window's own backward gives;
- the λ-return (``--lambda``), the forward view: for every boundary, one extra forward and backward over the
  windows left, on copies;
- BP(λ), the backward view: the window's Jacobian J_k (one backward of state_dim unit gradients) and the
  eligibility trace, (batch, state_dim, state_dim² + state_dim) numbers, carried through J_k at each boundary.

Each round times ``--steps`` steps of each method on the same batch (the modules keep learning), the methods in
turn, so a slow stretch of a shared machine hits all alike; the ratio is the median over rounds of a method's
time over one-window DNI's in the same round, in wall-clock seconds and in the process's processor seconds (on
a crowded machine the second tells the work, the first also the waiting).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/bp_lambda_cost.py [--length 3] [--rounds 3] [--hidden 64] [--out FILE]
``--out`` writes every round's times as JSON, the record ``docs/tables.py`` draws the λ-return page's table from.
"""

import os

# Before numpy is imported: OpenBLAS reads its thread count once, at load time.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import datetime
import json
import pathlib
import statistics
import sys
import time

from machine import describe

from data_gen.copy_task import copy_batch
from sgrad import Layer, LinearGenerator
from sgrad.nn.losses import bce_with_logits
from sgrad.recurrent.boundary_targets import ONE_WINDOW, LambdaReturn
from sgrad.recurrent.eligibility_traces import BPLambda
from sgrad.recurrent.layers import LSTM
from sgrad.recurrent.tbptt import Sequences, SyntheticGradient, tbptt_step

BATCH, BITS, WINDOW = 32, 8, 2


def method_step(targets, hidden, batch):
    """One ``tbptt_step`` of a fresh model (the same weights for every method) with ``targets``, as a closure."""
    core = LSTM(BITS + 1, hidden, update_rule="adam", seed=0)
    readout = Layer(hidden, BITS, "identity", update_rule="adam", seed=1)
    synthetic = SyntheticGradient(LinearGenerator(core.state_dim, update_rule="adam"), generator_alpha=3e-4,
                                  targets=targets)
    sequences = Sequences(*batch)

    def step():
        return tbptt_step(core, readout, sequences, bce_with_logits, 1e-3, window=WINDOW, synthetic=synthetic)[0]

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=3, help="N, the vectors to copy (default 3: 7 steps)")
    parser.add_argument("--hidden", type=int, default=64, help="the LSTM's units (default 64)")
    parser.add_argument("--lambda", dest="lam", type=float, default=0.5, help="λ (default 0.5)")
    parser.add_argument("--steps", type=int, default=1, help="steps per method per round (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--out", type=pathlib.Path, help="write the settings and every round's times here (JSON)")
    args = parser.parse_args(argv)
    batch = copy_batch(BATCH, args.length, bits=BITS, seed=0)
    methods = {"one-window DNI": ONE_WINDOW, f"λ-return, λ = {args.lam:g}": LambdaReturn(args.lam),
               f"BP(λ), λ = {args.lam:g}": BPLambda(args.lam)}
    steps = {name: method_step(targets, args.hidden, batch) for name, targets in methods.items()}
    for step in steps.values():  # once untimed: every cache and trace allocated
        step()
    seconds = {name: [] for name in steps}
    processor = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                step()
            seconds[name].append((time.perf_counter() - start) / args.steps)
            processor[name].append((time.process_time() - start_cpu) / args.steps)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "command": "benchmarks/bp_lambda_cost.py", "date": datetime.date.today().isoformat(),
            "machine": describe(), "load_average": round(os.getloadavg()[0], 2),
            "settings": {"length": args.length, "hidden": args.hidden, "lambda": args.lam, "steps": args.steps,
                         "rounds": args.rounds, "batch": BATCH, "bits": BITS, "window": WINDOW},
            "seconds": seconds, "processor_seconds": processor}, indent=1, ensure_ascii=False) + "\n")
    print(describe())
    print(f"Copy, N = {args.length} ({2 * args.length + 1} steps), T = {WINDOW}, {args.hidden} units, batch {BATCH}; "
          f"median of {args.rounds} rounds of {args.steps} step(s)\n")
    print("| method | seconds per step | × one-window DNI | processor seconds per step | × one-window DNI |\n"
          "|---|---:|---:|---:|---:|")
    for name in steps:
        ratios = [statistics.median(t / b for t, b in zip(times[name], times["one-window DNI"]))
                  for times in (seconds, processor)]
        print(f"| {name} | {statistics.median(seconds[name]):.4f} | {ratios[0]:.1f} | "
              f"{statistics.median(processor[name]):.4f} | {ratios[1]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
