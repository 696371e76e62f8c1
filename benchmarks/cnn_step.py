"""Benchmark: one CNN training step in sgrad against PyTorch's CPU step on the same shapes, in the same process.

The net, on both sides: the 3-layer MNIST CNN (two conv blocks and a linear classifier), batch 64 by default::

    x (batch, 1, 28, 28)
    → Conv 5×5, 1→32, padding 2 → BatchNorm2d → ReLU → MaxPool 2×2     (batch, 32, 14, 14)
    → Conv 5×5, 32→64, padding 2 → BatchNorm2d → ReLU → MaxPool 2×2    (batch, 64, 7, 7)
    → Flatten → Linear 3136→10                                         (batch, 10)

The step: forward, softmax cross-entropy (batch mean) against one-hot labels, backward (no gradient for x: it
is data; PyTorch's autograd skips it too), one update of every parameter (Adam, learning rate 1e-3, by default).
sgrad runs :func:`sgrad.dni.steps.backprop_step` on :func:`sgrad.nn.conv.conv_block` blocks; PyTorch runs ``torch.nn``,
autograd and ``torch.optim`` in CPU eager mode (its convolutions go to oneDNN when it has them).  Before timing,
both sides start from the same weights and take one step, and their losses and updated weights are compared.

Memory: the process keeps the memory it frees (:func:`sgrad.training.memory.keep_freed_memory`), as sgrad's
training loop makes a run's process do; both sides allocate through the same C library, so it holds for both.
Threads: ``OPENBLAS_NUM_THREADS`` (default 1, set here before numpy loads) and ``torch.set_num_threads`` with the
same number.  Timing: rounds alternate sgrad, PyTorch and the plain im2col step's matrix products alone (eight:
each convolution's X_col W_colᵀ and dZᵀ X_col, the second's dZ W_col, the linear layer's three; back to back on
preallocated arrays: the floor of a step that multiplies whole im2col matrices with this BLAS; sgrad's convolutions
multiply pieces of a few examples that stay in the cache, which runs faster, and take the second convolution through
the frequency domain, :mod:`sgrad.nn.fast_dft`, with fewer multiplications); each round times ``--steps`` steps
of each.
The ratio is the median over rounds of sgrad's time over PyTorch's in the same round, so a slow stretch of a shared
machine hits both alike; the spread is the lowest and highest round.

OpenBLAS picks its kernels for the CPU it detects, and PyTorch's oneDNN picks its own, so the float32 ratio
depends on the machine (the matrix products are most of the step): the report's first line names the CPU,
whether it has AVX-512, and any ``OPENBLAS_CORETYPE`` override (see ``machine.py``).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/cnn_step.py [--dtype float32 float64] [--batch 64] [--rounds 15]
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

from sgrad import Layer, Sequential  # noqa: E402
from sgrad.dni.steps import backprop_step  # noqa: E402
from sgrad.nn.conv import Flatten, conv_block  # noqa: E402
from sgrad.nn.losses import softmax_cross_entropy  # noqa: E402
from sgrad.training.memory import keep_freed_memory  # noqa: E402

TARGET = 1.0  # sgrad's step time over PyTorch's
CLASSES, SIDE, LEARNING_RATE = 10, 28, 1e-3
# (in_channels, out_channels) of each conv block; every kernel is KERNEL × KERNEL, every pool 2×2.
CHANNELS, KERNEL = ((1, 32), (32, 64)), 5
FLAT = CHANNELS[-1][1] * (SIDE // 4) ** 2  # 64 × 7 × 7 = 3136


def sgrad_network(dtype, update_rule, seed=0):
    """The CNN as a list of sgrad modules: two conv blocks, then Flatten→Linear."""
    blocks = [conv_block(a, b, KERNEL, pool=2, update_rule=update_rule, seed=seed + k, dtype=dtype)
              for k, (a, b) in enumerate(CHANNELS)]
    top = Sequential([Flatten((CHANNELS[-1][1], SIDE // 4, SIDE // 4)),
                      Layer(FLAT, CLASSES, "identity", update_rule=update_rule, seed=seed + 9, dtype=dtype)])
    return blocks + [top]


def sgrad_step(x, y, update_rule):
    """``(step, network)``: one call of ``step()`` is one sgrad training step on the fixed batch (x, y)."""
    network = sgrad_network(x.dtype, update_rule)
    return (lambda: backprop_step(network, x, y, softmax_cross_entropy, LEARNING_RATE)), network


def torch_step(x, y, update_rule, weights_from=None):
    """``(step, net)``: the same step in PyTorch; ``weights_from`` an sgrad network to copy the weights of."""
    import torch
    from torch import nn

    dtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[x.dtype]
    parts = []
    for a, b in CHANNELS:
        parts += [nn.Conv2d(a, b, KERNEL, padding=KERNEL // 2, bias=False), nn.BatchNorm2d(b), nn.ReLU(),
                  nn.MaxPool2d(2)]
    net = nn.Sequential(*parts, nn.Flatten(), nn.Linear(FLAT, CLASSES)).to(dtype)
    if weights_from is not None:
        with torch.no_grad():
            convs = [m for m in net if isinstance(m, nn.Conv2d)]
            for conv, block in zip(convs, weights_from[:-1]):
                conv.weight.copy_(torch.from_numpy(block.modules[0].weights))
            linear = weights_from[-1].modules[1]
            net[-1].weight.copy_(torch.from_numpy(linear.weights.T.copy()))
            net[-1].bias.copy_(torch.from_numpy(linear.bias))
    optimizer = (torch.optim.SGD(net.parameters(), lr=LEARNING_RATE) if update_rule == "sgd"
                 else torch.optim.Adam(net.parameters(), lr=LEARNING_RATE))
    x_t, labels = torch.from_numpy(x), torch.from_numpy(y.argmax(axis=1))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x_t), labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step, net


def products_alone(batch, dtype):
    """The plain im2col step's matrix products alone, on preallocated arrays: per conv layer the forward X_col W_colᵀ,
    the weight gradient dZᵀ X_col and (but for the first, whose input is data) dZ W_col; the linear layer's three."""
    rng = np.random.default_rng(0)
    plan, side = [], SIDE
    for k, (a, b) in enumerate(CHANNELS):
        rows, width = batch * side * side, KERNEL * KERNEL * a
        columns, w, dz = (rng.standard_normal(shape).astype(dtype) for shape in ((rows, width), (b, width), (rows, b)))
        plan += [(columns, w.T), (dz.T, columns)] + ([(dz, w)] if k > 0 else [])
        side //= 2
    h, w, dz = (rng.standard_normal(shape).astype(dtype) for shape in ((batch, FLAT), (FLAT, CLASSES), (batch, CLASSES)))
    plan += [(h, w), (h.T, dz), (dz, w.T)]
    plan = [(a, b, np.empty((a.shape[0], b.shape[1]), dtype)) for a, b in plan]

    def step():
        for a, b, out in plan:
            np.matmul(a, b, out=out)

    return step


def batch_of(batch, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((batch, 1, SIDE, SIDE)).astype(dtype)
    y = np.eye(CLASSES, dtype=dtype)[rng.integers(0, CLASSES, batch)]
    return x, y


def same_step(x, y, update_rule):
    """Both sides from the same weights, one step: ``(|loss difference|, largest |weight difference| after it)``."""
    import torch

    ours, network = sgrad_step(x, y, update_rule)
    theirs, net = torch_step(x, y, update_rule, weights_from=network)
    loss_gap = abs(ours() - theirs())
    convs = [m for m in net if isinstance(m, torch.nn.Conv2d)]
    gaps = [np.max(np.abs(block.modules[0].weights - conv.weight.detach().numpy()))
            for block, conv in zip(network[:-1], convs)]
    gaps.append(np.max(np.abs(network[-1].modules[1].weights - net[-1].weight.detach().numpy().T)))
    return loss_gap, float(max(gaps))


def seconds_per_step(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def measure(dtype, batch, update_rule, rounds, steps, with_torch):
    x, y = batch_of(batch, dtype, seed=0)
    sides = {"sgrad": sgrad_step(x, y, update_rule)[0], "products alone": products_alone(batch, dtype)}
    if with_torch:
        sides["PyTorch"] = torch_step(x, y, update_rule)[0]
    for step in sides.values():  # warm up: first calls allocate and load kernels
        step()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, step in sides.items():
            times[name].append(seconds_per_step(step, steps))
    row = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    row["floor ratio"] = statistics.median(a / b for a, b in zip(times["sgrad"], times["products alone"]))
    if with_torch:
        ratios = [a / b for a, b in zip(times["sgrad"], times["PyTorch"])]
        row["ratio"] = statistics.median(ratios)
        row["ratio range"] = (min(ratios), max(ratios))
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--update-rule", default="adam", choices=["sgd", "adam"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=3, help="steps per side in each round")
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
    print(f"numpy {np.__version__}, OPENBLAS_NUM_THREADS={THREADS}; batch {args.batch} of 1×{SIDE}×{SIDE}; "
          f"conv {KERNEL}×{KERNEL} {CHANNELS[0][0]}→{CHANNELS[0][1]}→{CHANNELS[1][1]}, each with BatchNorm2d, ReLU and "
          f"2×2 max pooling; Linear {FLAT}→{CLASSES}; {args.update_rule}, learning rate {LEARNING_RATE}")
    within = True
    for name in args.dtype:
        dtype = np.dtype(name)
        if torch is not None:
            x, y = batch_of(args.batch, dtype, seed=1)
            loss_gap, weight_gap = same_step(x, y, args.update_rule)
            print(f"{name}: same weights, one step: |loss difference| {loss_gap:.1e}, "
                  f"largest weight difference after the step {weight_gap:.1e}")
        row = measure(dtype, args.batch, args.update_rule, args.rounds, args.steps, torch is not None)
        rows[name] = row
        if torch is not None:
            row["agreement"] = {"loss difference": float(loss_gap), "largest weight difference": float(weight_gap)}
        line = (f"{name}: sgrad {row['sgrad']:.1f} ms, products alone {row['products alone']:.1f} ms "
                f"(sgrad / products {row['floor ratio']:.2f})")
        if torch is not None:
            low, high = row["ratio range"]
            line += (f", PyTorch {row['PyTorch']:.1f} ms; sgrad / PyTorch {row['ratio']:.2f} "
                     f"(rounds {low:.2f} to {high:.2f}), target <= {TARGET}: "
                     f"{'met' if row['ratio'] <= TARGET else 'missed'}")
            within = within and row["ratio"] <= TARGET
        print(line, flush=True)
    if args.out:
        write_record(args.out, load_before, freed_memory_kept=kept,
                     torch=torch.__version__ if torch is not None else None, threads=THREADS,
                     target=TARGET, rounds=args.rounds, steps=args.steps, batch=args.batch,
                     update_rule=args.update_rule, dtypes=rows)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
