"""Side by side with the authors' code: their copy-repeat script and sgrad at the same setting and budget.

The peer is the public repository neuralml/bp_lambda (Pemberton & Costa 2024), checked out at ``--peer-dir`` and
run by ``--peer-python``, a Python of its own environment (PyTorch, pytorch-ignite, sacred, numpy, pyyaml, tqdm);
it is never a dependency of sgrad, and none of its code is kept here.  This script runs it as a subprocess in
that environment (``--as-peer``, below), then sgrad at the same setting for as many steps as the peer took, and
draws both curricula, the sequence length (R + 1) N + 3 trained on against the step, in ``copy_repeat.png``.

The setting is the peer's copy-repeat defaults (scripts/configs/*_copy_repeat.yaml): an LSTM of 100 units read
out to 9 logits, batch 100, Adam (β₂ = 0.98, ε = 1e-9) at 1e-3 for the core and the readout, binary
cross-entropy averaged over the scored steps and channels; N and R start at 1 and step up (R first, up to N)
whenever a training batch's loss falls below 0.15 bits.  The core learns online, every time step a boundary
(T = 1).  Their config's ``clip: 1.0`` reaches no code (the trainer's argument is ``grad_clip``).

- By default, as their config has it (``apply_sg: False``), without synthetic gradients: each step's weight
  gradient is that step's own loss through that step alone, summed over the sequence, one Adam step per
  sequence.  sgrad's counterpart is truncated BPTT at T = 1 (``tbptt_step(window=1)``, no generator), which
  steps after every window; a second sgrad run sums the same windows' gradients and steps once per sequence,
  as the peer does, to tell the schedule's part from the rest.
- ``--synthetic-gradients``: BP(λ) switched on (``model.apply_sg=True`` on their command line): a linear
  synthesiser of the state [h, c] (200), zero at the start, Adam at 1e-5, learning by eligibility traces with
  γ = 0.9, λ = 1.  sgrad's counterpart is the λ-return (``--lam``, ``--gamma``) at T = 1, the same M.
- ``--batch``: another batch size (their ``training.batch_size``), for a run that is not the defaults.

sgrad's modules start as PyTorch starts the peer's (uniform in ±1/√100, the LSTM's bias the sum of two such
draws, no forget-gate bias), so that the runs differ in what the two codes compute, not in where they start.

What ``--as-peer`` changes of the peer, all plumbing; its model, task, optimiser and curriculum run as written:

- ``torchvision`` is replaced by an empty module: the peer's dataset package imports it for MNIST, unused here;
- sacred's ``add_package_dependency`` is a no-op: it refuses PyTorch's version string ``2.13.0+cpu``;
- ``Optimizer.zero_grad`` keeps gradients as zero arrays (``set_to_none=False``): the peer was written for
  PyTorch 1.7, whose default that was, and adds into ``.grad`` in place;
- ``BatchGenerator.next_batch`` and ``increment`` are wrapped to count the steps and record each increment;
- the budget: ``training.epochs`` large enough for ``--steps`` (an epoch is 1000 / batch batches); the
  training ends before step ``--steps`` + 1, or at the first step after ``--minutes`` of the process's
  processor time (a core's minutes, however crowded the machine), by the KeyboardInterrupt that the script's
  own handler takes as the end of training; ``seed`` is passed on.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/bp_lambda_peer.py --peer-python /work/peers/venv-bp/bin/python
      --peer-dir /work/peers/bp_lambda --steps 3000 --out results/bp-lambda-peer
      (``--synthetic-gradients --batch 10 --steps 100000 --minutes 60``: BP(λ) at a tenth of the batch)
      ``--seed S`` a run per seed, each with its own ``--out``; then ``--combine OUT0 OUT1 OUT2 --out OUT`` draws
      them, a panel per run, in OUT/copy_repeat_runs.png (training nothing)
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
BITS, HIDDEN, BATCH, THRESHOLD, TRAINING_SIZE = 8, 100, 100, 0.15, 1000


def run_peer(peer_dir, steps, seed, record, *, synthetic_gradients=False, batch=BATCH, minutes=None):
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
    counter = {"steps": 0, "start": time.perf_counter(), "processor": time.process_time()}
    deadline = None if minutes is None else counter["processor"] + 60 * minutes
    next_batch, increment = BatchGenerator.next_batch, BatchGenerator.increment

    def counted_next_batch(self):
        if self.batch_size == batch:  # the training set's batches (validation and test sets are drawn apart)
            if counter["steps"] >= steps or (deadline is not None and time.process_time() > deadline):
                raise KeyboardInterrupt  # the script's handler ends the training here
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
    per_epoch = math.ceil(TRAINING_SIZE / batch)
    sys.argv = ["copy-repeat.py", "with", f"training.epochs={math.ceil(steps / per_epoch) + 1}",
                f"training.batch_size={batch}", f"seed={seed}"]
    if synthetic_gradients:
        sys.argv.insert(2, "model.apply_sg=True")
    runpy.run_path("copy-repeat.py", run_name="__main__")
    curve["last_step"], curve["wall_time"] = counter["steps"], time.perf_counter() - counter["start"]
    curve["processor_time"] = time.process_time() - counter["processor"]
    pathlib.Path(record).write_text(json.dumps(curve))


def copy_repeat_batch(n, r, rng, batch=BATCH):
    """The peer's task in NumPy: ``(x, y, mask)``; x (batch, L, bits + 2), y (batch, L, bits + 1), L = (r + 1) n + 3.

    Step 0 holds the start delimiter, steps 1..n the vectors, step n + 1 the repeat count r / 10; from step n + 2
    the targets: the vectors r times, then the end marker.  The mask weights each scored step and channel so
    that sgrad's loss is the peer's mean over the batch, the scored steps and the channels.
    """
    import numpy as np

    length = (r + 1) * n + 3
    x, y = np.zeros((batch, length, BITS + 2)), np.zeros((batch, length, BITS + 1))
    vectors = rng.integers(0, 2, (batch, n, BITS)).astype(float)
    x[:, 0, BITS] = 1.0
    x[:, 1:n + 1, :BITS] = vectors
    x[:, n + 1, BITS + 1] = r / 10
    y[:, n + 2:-1, :BITS] = np.tile(vectors, (1, r, 1))
    y[:, -1, BITS] = 1.0
    mask = np.zeros((batch, length))
    mask[:, n + 2:] = 1.0 / ((length - n - 2) * (BITS + 1))
    return x, y, mask


def start_as_pytorch(core, readout, rng):
    """Redraw sgrad's LSTM and readout as PyTorch initialises the peer's: uniform in ±1/√hidden, bias u + u'."""
    bound = 1 / math.sqrt(HIDDEN)
    for array in (core.weights_x, core.weights_h, readout.weights, readout.bias):
        array[...] = rng.uniform(-bound, bound, array.shape)
    core.bias[...] = rng.uniform(-bound, bound, core.bias.shape) + rng.uniform(-bound, bound, core.bias.shape)


def run_sgrad(steps, seed, lam=None, gamma=0.9, batch=BATCH, per_sequence=False):
    """sgrad at the peer's setting, T = 1: truncated BPTT (``lam=None``) or the λ-return; the same curriculum.

    ``tbptt_step`` steps the core and the readout after every window (here every time step); with
    ``per_sequence`` (truncated BPTT only) the windows' gradients are summed and applied once per sequence,
    the peer's schedule (:func:`sequence_step`).
    """
    import numpy as np

    from sgrad import Layer, LinearGenerator
    from sgrad.recurrent.boundary_targets import LambdaReturn
    from sgrad.nn.losses import bce_with_logits
    from sgrad.nn.optimizers import Adam
    from sgrad.recurrent.layers import LSTM
    from sgrad.recurrent.tbptt import Sequences, SyntheticGradient, tbptt_step

    def adam():
        return Adam(beta2=0.98, eps=1e-9)  # the peer's

    rng = np.random.default_rng(seed)
    core = LSTM(BITS + 2, HIDDEN, update_rule=adam(), rng=rng)
    readout = Layer(HIDDEN, BITS + 1, "identity", update_rule=adam(), rng=rng)
    start_as_pytorch(core, readout, rng)
    synthetic = None if lam is None else SyntheticGradient(LinearGenerator(core.state_dim, update_rule=adam()), 1e-5,
                                                           gamma, LambdaReturn(lam))
    n, r = 1, 1
    curve = {"step": [0], "N": [1], "R": [1], "seconds": [0.0]}
    start, processor = time.perf_counter(), time.process_time()
    for step in range(1, steps + 1):
        x, y, mask = copy_repeat_batch(n, r, rng, batch)
        if per_sequence:
            loss = sequence_step(core, readout, x, y, mask, 1e-3)
        else:
            loss, _, _ = tbptt_step(core, readout, Sequences(x, y, mask), bce_with_logits, 1e-3, window=1,
                                    synthetic=synthetic)
        if loss / LN2 < THRESHOLD:
            n, r = (n, r + 1) if r < n else (n + 1, r)
            for key, value in (("step", step), ("N", n), ("R", r), ("seconds", time.perf_counter() - start)):
                curve[key].append(value)
    curve["last_step"], curve["wall_time"] = steps, time.perf_counter() - start
    curve["processor_time"] = time.process_time() - processor
    return curve


def sequence_step(core, readout, x, y, mask, alpha):
    """Truncated BPTT at T = 1 on the peer's schedule: each step's own gradient, summed, one step per sequence.

    Returns the sequence's loss L.  The same windows as ``tbptt_step(window=1)`` without a generator, but the
    core and the readout step once, with Σ_t of the windows' gradients, as the peer's trainer does.
    """
    from sgrad.nn.losses import bce_with_logits
    from sgrad.recurrent.tbptt import window_loss

    batch, length, _ = x.shape
    state, total, sums = core.initial_state(batch), 0.0, {}
    for t in range(length):
        outputs, next_state = core.forward(x[:, t:t + 1], state)
        loss, d_outputs = window_loss(readout, outputs, y[:, t:t + 1], mask[:, t:t + 1], bce_with_logits, batch)
        core.backward(d_outputs, None, input_delta=False)
        for module in (core, readout):
            for name, gradient in module.gradients.items():
                sums[module, name] = sums.get((module, name), 0) + gradient
        total, state = total + loss, next_state
    for (module, name), gradient in sums.items():
        setattr(module, name + "_grad", gradient)
    core.update(alpha)
    readout.update(alpha)
    return total


COLORS = ("tab:orange", "tab:blue", "tab:green")


def draw_curves(ax, curves, steps, title):
    """On ``ax``: each curve's sequence length (R + 1) N + 3 against the training step, to step ``steps``."""
    for (name, curve), color in zip(curves.items(), COLORS):
        lengths = [(r + 1) * n + 3 for n, r in zip(curve["N"], curve["R"])]
        ax.step(curve["step"] + [curve["last_step"]], lengths + lengths[-1:], where="post", color=color, label=name)
    ax.set_xlim(0, steps)
    ax.set_xlabel("training step")
    ax.set_title(title, fontsize=10)


def draw(curves, steps, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    draw_curves(ax, curves, steps, title)
    ax.set_ylabel("sequence length (R + 1) N + 3")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def combine(folders, path, title=None):
    """One figure, a panel per earlier run's folder (its peer.json and sgrad.json), sharing the length axis.

    Trains nothing.  Returns the runs' curves, ``[{name: curve}]``, in the folders' order.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, titles = [], []
    for folder in map(pathlib.Path, folders):
        peer, ours = (json.loads((folder / name).read_text()) for name in ("peer.json", "sgrad.json"))
        setting = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else {}
        label = "peer (BP(λ), traces)" if setting.get("synthetic_gradients") else "peer (no synthetic gradients)"
        runs.append({label: peer, **ours})
        titles.append(f"seed {setting['seed']}" if "seed" in setting else folder.name.replace("-", " "))
    fig, axes = plt.subplots(1, len(runs), figsize=(4.4 * len(runs), 4.1), sharey=True, squeeze=False)
    for ax, panel, curves in zip(axes[0], titles, runs):
        draw_curves(ax, curves, max(curve["last_step"] for curve in curves.values()), panel)
    axes[0][0].set_ylabel("sequence length (R + 1) N + 3")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9)
    if title is not None:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer-python", help="the Python of the peer's own environment")
    parser.add_argument("--peer-dir", help="a checkout of neuralml/bp_lambda (needed unless --combine)")
    parser.add_argument("--steps", type=int, default=1000, help="the budget, in training steps (default 1000)")
    parser.add_argument("--minutes", type=float,
                        help="end the peer's training after this many minutes of its processor time, if sooner")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synthetic-gradients", action="store_true",
                        help="BP(λ) on (the peer's model.apply_sg=True; its copy-repeat defaults have it off)")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"the batch size (the peer's default {BATCH})")
    parser.add_argument("--lam", type=float, default=1.0, help="λ (the peer's default 1)")
    parser.add_argument("--gamma", type=float, default=0.9, help="γ (the peer's default 0.9)")
    parser.add_argument("--out", default="results/bp-lambda-peer")
    parser.add_argument("--as-peer", metavar="RECORD", help="(internal) run the peer here, recording to RECORD")
    parser.add_argument("--skip-peer", action="store_true", help="reuse OUT/peer.json from an earlier run")
    parser.add_argument("--title", help="with --combine: the figure's title")
    parser.add_argument("--combine", nargs="+", metavar="FOLDER",
                        help="train nothing: draw the runs saved in these folders (an --out each), a panel per run, "
                             "in OUT/copy_repeat_runs.png")
    args = parser.parse_args(argv)
    if args.combine:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        combine(args.combine, pathlib.Path(args.out) / "copy_repeat_runs.png", args.title)
        return 0
    if args.as_peer:
        run_peer(args.peer_dir, args.steps, args.seed, args.as_peer, synthetic_gradients=args.synthetic_gradients,
                 batch=args.batch, minutes=args.minutes)
        return 0
    if args.peer_dir is None:
        parser.error("--peer-dir is needed to run the peer (or --combine FOLDER ... to draw saved runs)")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.skip_peer:
        command = [args.peer_python, __file__, "--as-peer", str((out / "peer.json").resolve()), "--peer-dir",
                   str(pathlib.Path(args.peer_dir).resolve()), "--steps", str(args.steps), "--seed", str(args.seed),
                   "--batch", str(args.batch)]
        command += ["--synthetic-gradients"] if args.synthetic_gradients else []
        command += [] if args.minutes is None else ["--minutes", str(args.minutes)]
        subprocess.run(command, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    peer = json.loads((out / "peer.json").read_text())
    if peer.get("last_step", 0) < 1:
        raise SystemExit(f"the peer's run in {out} recorded no training step; see its output above")
    curves = {"peer (BP(λ), traces)" if args.synthetic_gradients else "peer (no synthetic gradients)": peer}
    if args.synthetic_gradients:
        curves[f"sgrad (λ-return, λ = {args.lam:g}, γ = {args.gamma:g})"] = run_sgrad(
            peer["last_step"], args.seed, args.lam, args.gamma, args.batch)
    else:
        curves["sgrad (truncated BPTT, T = 1)"] = run_sgrad(peer["last_step"], args.seed, batch=args.batch)
        curves["sgrad (the same, one step per sequence)"] = run_sgrad(peer["last_step"], args.seed, batch=args.batch,
                                                                      per_sequence=True)
    (out / "sgrad.json").write_text(json.dumps({name: curve for name, curve in curves.items() if curve is not peer}))
    (out / "run.json").write_text(json.dumps({"seed": args.seed, "batch": args.batch,
                                              "synthetic_gradients": args.synthetic_gradients}))
    setting = "BP(λ)" if args.synthetic_gradients else "no synthetic gradients"
    title = (f"Copy-repeat, {setting}, batch {args.batch}, seed {args.seed}"
             + (" (the peer's defaults)" if args.batch == BATCH and not args.synthetic_gradients else " (not the defaults)"))
    draw(curves, peer["last_step"], title, out / "copy_repeat.png")
    for name, curve in curves.items():
        print(f"{name}: increments at steps {curve['step'][1:]}, (N, R) reached {(curve['N'][-1], curve['R'][-1])}, "
              f"{curve['wall_time']:.0f} s ({curve.get('processor_time', float('nan')):.0f} s of processor time) "
              f"for {curve['last_step']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
