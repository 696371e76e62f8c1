"""Side by side with the authors' code: BP(λ) on their copy-repeat task, their script and sgrad, at their defaults.

The peer is the public repository neuralml/bp_lambda (Pemberton & Costa 2024), checked out at ``--peer-dir`` and
run by ``--peer-python``, a Python of its own environment (PyTorch, pytorch-ignite, sacred, numpy, pyyaml, tqdm);
it is never a dependency of sgrad, and none of its code is kept here.  This script runs it as a subprocess in
that environment (``--as-peer``, below), then sgrad at the same setting in this process, and draws both
curricula, the sequence length (R + 1) N + 3 trained on against the step, in ``copy_repeat.png``.

The setting, the peer's copy-repeat defaults (scripts/configs/*_copy_repeat.yaml) with BP(λ) switched on
(``model.apply_sg=True``, a sacred config update on its command line): an LSTM of 100 units read out to 9 logits,
batch 100, Adam at 1e-3 for the core and the readout and 1e-5 for a linear synthesiser of the state [h, c] (200),
γ = 0.9, λ = 1, every time step a boundary (T = 1, fully online), binary cross-entropy averaged over the scored
steps and channels; N and R start at 1 and step up (R first, up to N) whenever a training batch's loss falls
below 0.15 bits.  Their config's ``clip: 1.0`` reaches no code (the trainer's argument is ``grad_clip``).

What ``--as-peer`` changes of the peer, all plumbing; its model, task, optimiser and curriculum run as written:

- ``torchvision`` is replaced by an empty module: the peer's dataset package imports it for MNIST, unused here;
- sacred's ``add_package_dependency`` is a no-op: it refuses PyTorch's version string ``2.13.0+cpu``;
- ``Optimizer.zero_grad`` keeps gradients as zero arrays (``set_to_none=False``): the peer was written for
  PyTorch 1.7, whose default that was, and adds into ``.grad`` in place;
- ``BatchGenerator.next_batch`` and ``increment`` are wrapped to count the steps and record each increment;
- the budget: ``training.epochs`` = steps / 10 (the peer's epoch is 10 batches of 100), and ``seed``.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/bp_lambda_peer.py --peer-python /work/peers/venv-bp/bin/python
      --peer-dir /work/peers/bp_lambda --steps 100 --out results/bp-lambda-peer
"""

import argparse
import json
import math
import os
import pathlib
import runpy
import subprocess
import sys
import time
import types

LN2 = math.log(2.0)
BITS, HIDDEN, BATCH, THRESHOLD = 8, 100, 100, 0.15


def run_peer(peer_dir, steps, seed, record):
    """In the peer's environment: its copy-repeat script, with the plumbing above; the curriculum goes to ``record``."""
    import torch  # the peer's environment has it; sgrad's need not

    torchvision = types.ModuleType("torchvision")
    for name in ("transforms", "datasets"):
        setattr(torchvision, name, types.ModuleType(f"torchvision.{name}"))
        sys.modules[f"torchvision.{name}"] = getattr(torchvision, name)
    sys.modules["torchvision"] = torchvision
    import sacred.ingredient
    sacred.ingredient.Ingredient.add_package_dependency = lambda self, *args: None
    zero_grad = torch.optim.Optimizer.zero_grad
    torch.optim.Optimizer.zero_grad = lambda self, set_to_none=False: zero_grad(self, set_to_none=False)
    torch.set_num_threads(1)
    scripts = pathlib.Path(peer_dir) / "scripts"
    os.chdir(scripts)
    sys.path[:0] = [str(scripts), str(pathlib.Path(peer_dir) / "src")]
    from dataset.copy_repeat import BatchGenerator

    curve = {"step": [0], "N": [1], "R": [1], "seconds": [0.0]}
    counter = {"steps": 0, "start": time.perf_counter()}
    next_batch, increment = BatchGenerator.next_batch, BatchGenerator.increment

    def counted_next_batch(self):
        if self.batch_size == BATCH:  # the training set's batches (validation and test sets are drawn apart)
            counter["steps"] += 1
        return next_batch(self)

    def recorded_increment(self):
        increment(self)
        curve["step"].append(counter["steps"])
        curve["N"].append(self.N)
        curve["R"].append(self.R)
        curve["seconds"].append(time.perf_counter() - counter["start"])
        pathlib.Path(record).write_text(json.dumps(curve))

    BatchGenerator.next_batch, BatchGenerator.increment = counted_next_batch, recorded_increment
    sys.argv = ["copy-repeat.py", "with", "model.apply_sg=True", f"training.epochs={max(1, steps // 10)}",
                f"seed={seed}"]
    runpy.run_path("copy-repeat.py", run_name="__main__")
    curve["last_step"], curve["wall_time"] = counter["steps"], time.perf_counter() - counter["start"]
    pathlib.Path(record).write_text(json.dumps(curve))


def copy_repeat_batch(n, r, rng):
    """The peer's task in NumPy: ``(x, y, mask)``; x (batch, L, bits + 2), y (batch, L, bits + 1), L = (r + 1) n + 3.

    Step 0 holds the start delimiter, steps 1..n the vectors, step n + 1 the repeat count r / 10; from step n + 2
    the targets: the vectors r times, then the end marker.  The mask weights each scored step and channel so
    that sgrad's loss is the peer's mean over the batch, the scored steps and the channels.
    """
    import numpy as np

    length = (r + 1) * n + 3
    x, y = np.zeros((BATCH, length, BITS + 2)), np.zeros((BATCH, length, BITS + 1))
    vectors = rng.integers(0, 2, (BATCH, n, BITS)).astype(float)
    x[:, 0, BITS] = 1.0
    x[:, 1:n + 1, :BITS] = vectors
    x[:, n + 1, BITS + 1] = r / 10
    y[:, n + 2:-1, :BITS] = np.tile(vectors, (1, r, 1))
    y[:, -1, BITS] = 1.0
    mask = np.zeros((BATCH, length))
    mask[:, n + 2:] = 1.0 / ((length - n - 2) * (BITS + 1))
    return x, y, mask


def run_sgrad(steps, seed, lam, gamma):
    """sgrad at the peer's setting: an LSTM, BP(λ)'s targets as the λ-return at T = 1, the same curriculum."""
    import numpy as np

    from sgrad import Layer, LinearGenerator
    from sgrad.boundary_targets import LambdaReturn
    from sgrad.losses import bce_with_logits
    from sgrad.recurrent import LSTM
    from sgrad.tbptt import tbptt_step

    rng = np.random.default_rng(seed)
    core = LSTM(BITS + 2, HIDDEN, update_rule="adam", rng=rng)
    readout = Layer(HIDDEN, BITS + 1, "identity", update_rule="adam", rng=rng)
    generator = LinearGenerator(core.state_dim, update_rule="adam")
    n, r = 1, 1
    curve = {"step": [0], "N": [1], "R": [1], "seconds": [0.0]}
    start = time.perf_counter()
    for step in range(1, steps + 1):
        x, y, mask = copy_repeat_batch(n, r, rng)
        loss, _, _ = tbptt_step(core, readout, x, y, bce_with_logits, 1e-3, window=1, mask=mask, generator=generator,
                                generator_alpha=1e-5, synthetic_scale=gamma, targets=LambdaReturn(lam))
        if loss / LN2 < THRESHOLD:
            n, r = (n, r + 1) if r < n else (n + 1, r)
            for key, value in (("step", step), ("N", n), ("R", r), ("seconds", time.perf_counter() - start)):
                curve[key].append(value)
    curve["last_step"], curve["wall_time"] = steps, time.perf_counter() - start
    return curve


def draw(curves, steps, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for (name, curve), color in zip(curves.items(), ("tab:orange", "tab:blue")):
        lengths = [(r + 1) * n + 3 for n, r in zip(curve["N"], curve["R"])]
        ax.step(curve["step"] + [curve["last_step"]], lengths + lengths[-1:], where="post", color=color, label=name)
    ax.set_xlim(0, steps)
    ax.set_xlabel("training step (batch of 100)")
    ax.set_ylabel("sequence length (R + 1) N + 3")
    ax.set_title("Copy-repeat curriculum, BP(λ) at the peer's defaults")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer-python", help="the Python of the peer's own environment")
    parser.add_argument("--peer-dir", required=True, help="a checkout of neuralml/bp_lambda")
    parser.add_argument("--steps", type=int, default=100, help="the budget, in training steps (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lam", type=float, default=1.0, help="λ (the peer's default 1)")
    parser.add_argument("--gamma", type=float, default=0.9, help="γ (the peer's default 0.9)")
    parser.add_argument("--out", default="results/bp-lambda-peer")
    parser.add_argument("--as-peer", metavar="RECORD", help="(internal) run the peer here, recording to RECORD")
    parser.add_argument("--skip-peer", action="store_true", help="reuse OUT/peer.json from an earlier run")
    args = parser.parse_args(argv)
    if args.as_peer:
        run_peer(args.peer_dir, args.steps, args.seed, args.as_peer)
        return 0
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.skip_peer:
        subprocess.run([args.peer_python, __file__, "--as-peer", str((out / "peer.json").resolve()), "--peer-dir",
                        str(pathlib.Path(args.peer_dir).resolve()), "--steps", str(args.steps), "--seed",
                        str(args.seed)], check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    curves = {"peer (PyTorch, traces)": json.loads((out / "peer.json").read_text()),
              f"sgrad (λ-return, λ = {args.lam:g})": run_sgrad(args.steps, args.seed, args.lam, args.gamma)}
    (out / "sgrad.json").write_text(json.dumps(curves[f"sgrad (λ-return, λ = {args.lam:g})"]))
    draw(curves, args.steps, out / "copy_repeat.png")
    for name, curve in curves.items():
        print(f"{name}: increments at steps {curve['step'][1:]}, (N, R) reached {(curve['N'][-1], curve['R'][-1])}, "
              f"{curve['wall_time']:.0f} s for {curve['last_step']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
