"""Diagnosis: where recurrent DNI loses on Copy, at a fixed N (no curriculum), against three references.

Four ways to train the same LSTM (64 units, a linear readout, Adam) on Copy sequences of N vectors, cut
into windows of T steps (:func:`sgrad.recurrent.tbptt.tbptt_step`), from the same weights and the same batches:

- ``bptt``: truncated BPTT, the gradient stopped at every window's end;
- ``dni``: a linear generator ĝ = M(s) at every window's end, regressed onto bootstrapped targets;
- ``dni-true``: the same, regressed onto the untruncated gradient dL/ds (the teaching option ``targets=Untruncated()``);
- ``full``: one window over the whole sequence (full BPTT).

Every ``--every`` steps a fresh batch of 256 sequences is scored: the mean error in bits per sequence (the
curriculum of ``sgrad rnn`` raises N when it falls below 0.15).  With ``--ceiling``, after training the
script also asks how much of the true gradient at each boundary state s_k *any* linear map of s_k could
predict: a least-squares fit on 3,000 sequences, scored by its cosine with the truth on 1,000 others,
beside the cosine of the trained generator's ĝ.

``--scale λ`` (for the DNI methods): ĝ enters the window's backward weighted by λ, the ``synthetic_scale`` of
:func:`~sgrad.recurrent.tbptt.tbptt_step` (the bootstrapped targets then discount each window further away by λ).

``--hold H --ramp R`` (a warm-up, for the DNI methods): ĝ enters the window's backward with a weight β
that is 0 for the first H steps (truncated BPTT while M learns), then rises linearly to 1 over the next
R steps.  The bootstrapped target is what then reaches s_k, so it holds β·ĝ too.

After training, each method's row is followed by what its core's state looks like after the delimiter
(on 256 fresh sequences): the mean |h|, the share of h's entries beyond ±0.95 (tanh saturated), and the
mean |c|.  Saturated units carry little gradient and little information; a synthetic gradient that keeps
pushing the state along one direction drives them there.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/copy_diagnosis.py [--length 3] [--window 2] [--steps 5000]
      [--methods bptt,dni,dni-true,full] [--seed 0] [--ceiling] [--scale 1] [--hold 0 --ramp 0]
"""

import argparse
import copy
import time

import numpy as np

from data_gen.copy_task import bits_error, copy_batch
from sgrad import Layer
from sgrad.dni.generators import LinearGenerator
from sgrad.nn.losses import bce_with_logits
from sgrad.recurrent.boundary_targets import ONE_WINDOW, Untruncated
from sgrad.recurrent.layers import LSTM
from sgrad.recurrent.tbptt import Sequences, SyntheticGradient, tbptt_step

METHODS = ("bptt", "dni", "dni-true", "full")
BITS, HIDDEN, BATCH, SCORED = 8, 64, 32, 256


def build(method, seed):
    """``(core, readout, generator or None)``; the core and readout depend on the seed alone."""
    core_seed, readout_seed = np.random.SeedSequence(seed).spawn(2)
    core = LSTM(BITS + 1, HIDDEN, update_rule="adam", seed=core_seed)
    readout = Layer(HIDDEN, BITS, "identity", update_rule="adam", seed=readout_seed)
    generator = LinearGenerator(core.state_dim, update_rule="adam") if method.startswith("dni") else None
    return core, readout, generator


class WarmingUp:
    """M, with its ĝ weighted by β = clip((step - hold) / ramp, 0, 1) when it enters a backward (set ``step``)."""

    def __init__(self, generator, hold, ramp):
        self.generator, self.hold, self.ramp, self.step = generator, hold, ramp, 0
        self.output_dim, self.condition_dim = generator.output_dim, 0

    def weight(self):
        return float(np.clip((self.step - self.hold) / max(self.ramp, 1), 0.0, 1.0))

    def predict(self, state):
        return self.weight() * self.generator.predict(state)

    def forward(self, state):
        return self.generator.forward(state)

    def update(self, target, alpha):
        return self.generator.update(target, alpha)


def error(core, readout, x, y, mask):
    """Mean wrong bits per sequence, with no side effects."""
    outputs, _ = core.predict(x)
    logits = readout.predict(outputs.reshape(-1, HIDDEN)).reshape(y.shape)
    return float(bits_error(logits, y, mask).mean())


def state_statistics(core, length, rng):
    """``(mean |h|, share of |h| > 0.95, mean |c|)`` of the state after the delimiter, on fresh sequences."""
    x, _, _ = copy_batch(SCORED, length, bits=BITS, rng=rng)
    _, state = core.predict(x[:, :length + 1])
    h, c = state[:, :core.hidden_dim], state[:, core.hidden_dim:]
    return float(np.abs(h).mean()), float((np.abs(h) > 0.95).mean()), float(np.abs(c).mean())


def future_gradient(core, readout, x, y, mask, state):
    """dL/d(state) of the loss of every step of x after ``state``, untruncated (on copies: nothing changes)."""
    core, readout = copy.deepcopy((core, readout))
    batch = x.shape[0]
    outputs, _ = core.forward(x, state)
    logits = readout.forward(outputs.reshape(-1, HIDDEN))
    _, d_logits = bce_with_logits(logits, y.reshape(-1, BITS), reduction="none")
    d_outputs = readout.backward(d_logits * mask.reshape(-1, 1) / batch).reshape(outputs.shape)
    return core.backward(d_outputs, None, input_delta=False)[1]


def cosine(a, b):
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b)))


def ceiling(core, readout, generator, length, window, rng):
    """Per boundary: the held-out cosine of the best linear map of s_k, and of the generator's ĝ, with dL/ds_k."""
    x, y, mask = copy_batch(4000, length, bits=BITS, rng=rng)
    rows = []
    state = core.initial_state(len(x))
    for begin in range(window, x.shape[1], window):
        _, state = core.predict(x[:, begin - window:begin], state)
        truth = future_gradient(core, readout, x[:, begin:], y[:, begin:], mask[:, begin:], state)
        design = np.hstack([state, np.ones((len(x), 1))])
        fit, *_ = np.linalg.lstsq(design[:3000], truth[:3000], rcond=None)
        row = f"s_{begin}: best linear map {cosine(design[3000:] @ fit, truth[3000:]):.2f}"
        if generator is not None:
            row += f", the generator {cosine(generator.generator.predict(state[3000:]), truth[3000:]):.2f}"
        rows.append(row)
    return "; ".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=3, help="N, the vectors to copy (default 3)")
    parser.add_argument("--window", type=int, default=2, help="T, steps per window (default 2)")
    parser.add_argument("--steps", type=int, default=5000, help="training steps of 32 sequences (default 5000)")
    parser.add_argument("--every", type=int, default=500, help="steps between scores (default 500)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--alpha", type=float, default=3e-3, help="the core's and readout's Adam rate (3e-3)")
    parser.add_argument("--generator-alpha", type=float, default=3e-4, help="the generator's Adam rate (3e-4)")
    parser.add_argument("--scale", type=float, default=1.0, help="DNI: λ, the weight of ĝ in the backward (1)")
    parser.add_argument("--hold", type=int, default=0, help="DNI: steps before ĝ enters the backward (default 0)")
    parser.add_argument("--ramp", type=int, default=0, help="DNI: steps over which ĝ's weight then rises to 1 (0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ceiling", action="store_true", help="after training, the linear-fit ceiling per boundary")
    args = parser.parse_args(argv)
    print(f"Copy, N = {args.length}, T = {args.window}, {args.steps} steps of {BATCH} sequences, seed {args.seed}; "
          f"mean error in bits per sequence on {SCORED} fresh sequences every {args.every} steps")
    for method in args.methods.split(","):
        if method not in METHODS:
            parser.error(f"--methods: unknown method {method!r}; choose from {', '.join(METHODS)}")
        core, readout, generator = build(method, args.seed)
        synthetic = None
        if generator is not None:
            generator = WarmingUp(generator, args.hold, args.ramp)
            synthetic = SyntheticGradient(generator, args.generator_alpha, args.scale,
                                          Untruncated() if method == "dni-true" else ONE_WINDOW)
        rng = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(3)[2])
        scores, start = [], time.perf_counter()
        for step in range(1, args.steps + 1):
            if generator is not None:
                generator.step = step
            x, y, mask = copy_batch(BATCH, args.length, bits=BITS, rng=rng)
            tbptt_step(core, readout, Sequences(x, y, mask), bce_with_logits, args.alpha,
                       window=x.shape[1] if method == "full" else args.window, synthetic=synthetic)
            if step % args.every == 0:
                scores.append(error(core, readout, *copy_batch(SCORED, args.length, bits=BITS, rng=rng)))
        print(f"{method:9s} " + " ".join(f"{s:5.2f}" for s in scores) + f"   ({time.perf_counter() - start:.0f} s)",
              flush=True)
        print("          state after the delimiter: mean |h| {:.2f}, |h| > 0.95: {:.0%}, mean |c| {:.2f}".format(
            *state_statistics(core, args.length, rng)), flush=True)
        if args.ceiling and method != "full":
            print("          cosine with the true gradient: "
                  + ceiling(core, readout, generator, args.length, args.window, rng), flush=True)


if __name__ == "__main__":
    main()
