"""Benchmark: one LSTM training step in sgrad against PyTorch's CPU ``torch.nn.LSTM``, in the same process.

The step, on both sides (batch 64, 256 units, a window of T = 8 steps, 256 input features by default):

1. forward over the window from a zero state: every step's h_t;
2. the loss ``L = 1/(2 batch) * sum over steps and units of (h_t - y_t)**2`` (x and y random normal);
3. backward through time (no gradient for x, which is data, nor for the start state, zeros that nothing before
   the window learns from: PyTorch's autograd skips both);
4. one SGD step, learning rate 0.01.

sgrad runs :class:`sgrad.recurrent.layers.LSTM` (``forward``, ``backward(..., input_delta=False,
state_delta=False)``, ``update``),
whose windows run through :mod:`sgrad.recurrent.fast_lstm`.
PyTorch runs ``torch.nn.LSTM(batch_first=True)``, autograd and ``torch.optim.SGD`` in CPU eager mode; for
float32 it uses oneDNN's fused LSTM kernel when it has one.  Before timing, both sides start from the same
weights and take one step, and their losses and updated weights are compared.

Memory: the process keeps the memory it frees (:func:`sgrad.training.memory.keep_freed_memory`), as sgrad's
training loop makes a run's process do; both sides allocate through the same C library, so it holds for both.
Threads: ``OPENBLAS_NUM_THREADS`` (default 1, set here before numpy loads) and ``torch.set_num_threads``
with the same number.  Timing: rounds alternate sgrad, PyTorch and the products alone; each round times
``--steps`` steps of each.  The ratio is the median over rounds of sgrad's time over PyTorch's in the same
round, so a slow stretch of a shared machine hits both alike.  "Products alone" is the step's matrix
products (two per step forward, one per step back but the first, then the two weight gradients) back to back on
preallocated arrays: about the floor of any NumPy step with this BLAS (sgrad's window routine runs the same
arithmetic in fewer, larger products: x W_x for every step at once, the three weight gradients in one).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/lstm_step.py [--dtype float32 float64] [--rounds 15]
Exit status 0 if sgrad is within the target (1.0 times PyTorch's time: no slower) for every dtype measured.
"""

import os

# Before numpy is imported: OpenBLAS reads its thread count once, at load time.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
THREADS = int(os.environ["OPENBLAS_NUM_THREADS"])

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from machine import describe, write_record  # noqa: E402

from sgrad.recurrent.layers import LSTM  # noqa: E402
from sgrad.training.memory import keep_freed_memory  # noqa: E402

TARGET = 1.0  # sgrad's step time over PyTorch's
BATCH, HIDDEN, WINDOW, LEARNING_RATE = 64, 256, 8, 0.01


def sgrad_step(x, y, seed=0):
    """``(step, lstm)``: one training step of an sgrad LSTM on x: (batch, T, input_dim), y: (batch, T, hidden)."""
    lstm = LSTM(x.shape[2], HIDDEN, seed=seed, dtype=x.dtype)
    batch = x.shape[0]

    def step():
        outputs, _ = lstm.forward(x)
        diff = outputs - y
        loss = 0.5 * float(np.sum(diff * diff)) / batch
        lstm.backward(diff / batch, None, input_delta=False, state_delta=False)
        lstm.update(LEARNING_RATE)
        return loss

    return step, lstm


def torch_step(x, y, weights_from=None):
    """``(step, lstm)``: the same step in PyTorch; ``weights_from`` an sgrad LSTM to copy the weights of."""
    import torch

    dtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[x.dtype]
    lstm = torch.nn.LSTM(x.shape[2], HIDDEN, batch_first=True).to(dtype)
    if weights_from is not None:
        with torch.no_grad():
            lstm.weight_ih_l0.copy_(torch.from_numpy(weights_from.weights_x.T.copy()))
            lstm.weight_hh_l0.copy_(torch.from_numpy(weights_from.weights_h.T.copy()))
            lstm.bias_ih_l0.copy_(torch.from_numpy(weights_from.bias))
            lstm.bias_hh_l0.zero_()
    optimizer = torch.optim.SGD(lstm.parameters(), lr=LEARNING_RATE)
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    batch = x.shape[0]

    def step():
        optimizer.zero_grad(set_to_none=True)
        outputs, _ = lstm(x_t)
        loss = 0.5 * ((outputs - y_t) ** 2).sum() / batch
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step, lstm


def products_alone(x):
    """The step's matrix products alone, on preallocated arrays: what BLAS needs at least."""
    rng = np.random.default_rng(0)
    batch, window, input_dim = x.shape
    dtype, gates = x.dtype, 4 * HIDDEN
    w_x, w_h = rng.standard_normal((input_dim, gates)).astype(dtype), rng.standard_normal((HIDDEN, gates)).astype(dtype)
    h, z = np.zeros((batch, HIDDEN), dtype), np.empty((batch, gates), dtype)
    dz = rng.standard_normal((batch, gates)).astype(dtype)
    dh, x_rows = np.empty((batch, HIDDEN), dtype), x.reshape(batch * window, input_dim)
    h_rows, dz_rows = np.zeros((batch * window, HIDDEN), dtype), rng.standard_normal((batch * window, gates)).astype(dtype)
    dw_x, dw_h = np.empty_like(w_x), np.empty_like(w_h)

    def step():
        for t in range(window):
            np.matmul(x[:, t], w_x, out=z)
            np.matmul(h, w_h, out=z)
        for _ in range(window - 1):  # no dh_0: the start state learns nothing
            np.matmul(dz, w_h.T, out=dh)
        np.matmul(x_rows.T, dz_rows, out=dw_x)
        np.matmul(h_rows.T, dz_rows, out=dw_h)

    return step


def seconds_per_step(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def same_step(x, y):
    """Both sides from the same weights, one step: ``(|loss difference|, largest |weight difference|)``."""
    ours, lstm = sgrad_step(x, y)
    theirs, peer = torch_step(x, y, weights_from=lstm)
    loss_gap = abs(ours() - theirs())
    weight_gap = max(float(np.max(np.abs(lstm.weights_x - peer.weight_ih_l0.detach().numpy().T))),
                     float(np.max(np.abs(lstm.weights_h - peer.weight_hh_l0.detach().numpy().T))))
    return loss_gap, weight_gap


def measure(dtype, input_dim, rounds, steps, with_torch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WINDOW, input_dim)).astype(dtype)
    y = rng.standard_normal((BATCH, WINDOW, HIDDEN)).astype(dtype)
    sides = {"sgrad": sgrad_step(x, y)[0], "products alone": products_alone(x)}
    if with_torch:
        sides["PyTorch"] = torch_step(x, y)[0]
    for step in sides.values():  # warm up: first calls allocate and load kernels
        step()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, step in sides.items():
            times[name].append(seconds_per_step(step, steps))
    row = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    if with_torch:
        ratios = [a / b for a, b in zip(times["sgrad"], times["PyTorch"])]
        row["ratio"] = statistics.median(ratios)
        row["ratio range"] = (min(ratios), max(ratios))
    row["floor ratio"] = statistics.median(a / b for a, b in zip(times["sgrad"], times["products alone"]))
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    parser.add_argument("--input-dim", type=int, default=256, help="input features per step (default 256)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10, help="steps per side in each round")
    parser.add_argument("--out", help="write the run's record (JSON) here")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    kept = keep_freed_memory()  # as sgrad's training loop does, for both sides: the process keeps what it frees
    rows = {}
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch is not installed: timing sgrad and the products alone only.")
    print(describe())
    print(f"freed memory kept in the process (sgrad.training.memory, as sgrad's training loop does): "
          f"{'yes' if kept else 'no'}")
    if torch is not None:
        torch.set_num_threads(THREADS)
        print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s), "
              f"oneDNN {'available' if torch.backends.mkldnn.is_available() else 'absent'}")
    print(f"numpy {np.__version__}, OPENBLAS_NUM_THREADS={THREADS}; batch {BATCH}, {HIDDEN} units, T = {WINDOW}, "
          f"{args.input_dim} input features; loss 1/(2 batch) sum (h - y)^2; SGD, learning rate {LEARNING_RATE}")
    within = True
    for name in args.dtype:
        dtype = np.dtype(name)
        if torch is not None:
            rng = np.random.default_rng(1)
            x = rng.standard_normal((BATCH, WINDOW, args.input_dim)).astype(dtype)
            y = rng.standard_normal((BATCH, WINDOW, HIDDEN)).astype(dtype)
            loss_gap, weight_gap = same_step(x, y)
            print(f"{name}: same weights, one step: |loss difference| {loss_gap:.1e}, "
                  f"largest weight difference after the step {weight_gap:.1e}")
        row = measure(dtype, args.input_dim, args.rounds, args.steps, torch is not None)
        rows[name] = row
        if torch is not None:
            row["agreement"] = {"loss difference": float(loss_gap), "largest weight difference": float(weight_gap)}
        line = (f"{name}: sgrad {row['sgrad']:.2f} ms, products alone {row['products alone']:.2f} ms "
                f"(sgrad / products {row['floor ratio']:.2f})")
        if torch is not None:
            low, high = row["ratio range"]
            line += (f", PyTorch {row['PyTorch']:.2f} ms; sgrad / PyTorch {row['ratio']:.2f} "
                     f"(rounds {low:.2f} to {high:.2f}), target <= {TARGET}: "
                     f"{'met' if row['ratio'] <= TARGET else 'missed'}")
            within = within and row["ratio"] <= TARGET
        print(line)
    if args.out:
        write_record(args.out, load_before, freed_memory_kept=kept,
                     torch=torch.__version__ if torch is not None else None, threads=THREADS,
                     target=TARGET, rounds=args.rounds, steps=args.steps, dtypes=rows)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
