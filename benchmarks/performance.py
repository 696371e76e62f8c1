"""Benchmark: how fast is a training step, against PyTorch and against the BLAS limit?

Measured in one process, on the same shapes (the paper's MNIST net 784-256-256-10,
batch 256; x random in [0, 1), one-hot labels):

1. sgrad's backprop step (``sgrad.dni.steps.backprop_step`` on the net that
   ``sgrad paper`` builds), with and without BatchNorm, float32 and float64;
2. sgrad's DNI and cDNI steps (``sgrad.dni.steps.dni_step``) with linear generators
   and with the reproduction's 1024-1024 BatchNorm generators;
3. the same nets and steps in PyTorch, CPU eager mode (skipped, with a message,
   when PyTorch is not installed);
4. the limit: the step's matrix products alone, run back to back on
   preallocated arrays (``np.matmul(..., out=...)``);
5. binary-addition data generation (``data_gen.generate_dataset``) against the
   blog's per-example Python loop;
6. the peak memory (VmHWM) of a short ``sgrad paper`` run on the full MNIST
   training set, in a subprocess;
7. NumPy's own floor: the backprop BN f32 step written out flat
   (:func:`fused_numpy_step`: no modules, no checks, updates in place).

Every timing is the median over rounds that alternate sgrad, PyTorch and the
limit, and every ratio is the median over rounds of the ratio within a round:
a slow stretch of a shared machine then hits both sides of a ratio alike.  A
DNI row also times sgrad's backprop step (BN, f32) in its rounds, for the
DNI-to-backprop ratio.  The step's time
is split into matrix products (the limit), the optimizer's array work, Python
overhead (the same step on a net of width 4) and the rest (elementwise work
and reductions); ``--out`` gets that as ``step_breakdown.png``, with
``results.json`` and ``results.md``.

Threads: numpy's BLAS and PyTorch both use ``$OPENBLAS_NUM_THREADS`` threads
(default 1, set here before numpy loads).

Run:  python benchmarks/performance.py [--out docs/performance] [--quick]
Exit status 0 if every target holds.
"""

import os

# Before numpy is imported: OpenBLAS reads its thread count once, at load time.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
THREADS = int(os.environ["OPENBLAS_NUM_THREADS"])

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from data_gen import generate_dataset  # noqa: E402
from sgrad import Layer  # noqa: E402
from sgrad.dni.steps import backprop_step, dni_step  # noqa: E402
from sgrad.experiments.mnist import PaperConfig, build_network  # noqa: E402
from sgrad.nn.losses import softmax_cross_entropy  # noqa: E402

try:
    import torch

    import torch_peers
    torch.set_num_threads(THREADS)
except ImportError:
    torch = None

INPUT_DIM, CLASSES, BATCH, LR = 784, 10, 256, 1e-3
TRAINING_ARRAY_MB = 60_000 * 784 * 4 / 1e6  # the MNIST training images in float32


@dataclasses.dataclass(frozen=True)
class Case:
    """One row of the table: a method, a net and a dtype."""

    name: str
    method: str = "backprop"
    batchnorm: bool = True
    dtype: str = "float32"
    generator: str = "linear"
    update_rule: str = "sgd"

    def paper_config(self, width=256, generator_hidden=(1024, 1024)):
        return PaperConfig(batchnorm=self.batchnorm, dtype=self.dtype, generator=self.generator, hidden=width,
                           generator_hidden=generator_hidden, update_rule=self.update_rule, alpha=LR)


CASES = [
    Case("backprop, BN, f32"),
    Case("backprop, no BN, f32", batchnorm=False),
    Case("backprop, BN, f64", dtype="float64"),
    Case("backprop, no BN, f64", batchnorm=False, dtype="float64"),
    Case("backprop, BN, f32, Adam", update_rule="adam"),
    Case("dni, linear gen.", method="dni"),
    Case("dni, MLP gen.", method="dni", generator="mlp"),
    Case("cdni, linear gen.", method="cdni"),
    Case("cdni, MLP gen.", method="cdni", generator="mlp"),
]


# ----------------------------------------------------------------------------- the steps

def sgrad_step(case, *, input_dim=INPUT_DIM, width=256, generator_hidden=(1024, 1024), batch=BATCH, seed=0):
    """``(step, network)``: one call of ``step()`` is one sgrad training step of ``case`` on a fixed batch."""
    x, y = batch_of(case.dtype, batch, input_dim, seed)
    layers = build_network(case.method, input_dim, case.paper_config(width, generator_hidden))
    if case.method == "backprop":
        def step():
            return backprop_step(layers, x, y, softmax_cross_entropy, LR)
    else:
        condition = y if case.method == "cdni" else None

        def step():
            return dni_step(layers, x, y, softmax_cross_entropy, LR, condition=condition)
    return step, layers


def torch_step(case, seed=0):
    """One PyTorch training step of ``case`` on a fixed batch, or None without PyTorch."""
    if torch is None:
        return None
    x, y = (torch.from_numpy(a) for a in batch_of(case.dtype, BATCH, INPUT_DIM, seed))
    dtype = getattr(torch, case.dtype)
    torch.manual_seed(seed)
    if case.method == "backprop":
        step = torch_peers.backprop_step(batchnorm=case.batchnorm, dtype=dtype, update_rule=case.update_rule, lr=LR)
    else:
        step = torch_peers.dni_step(conditioned=case.method == "cdni", dtype=dtype, update_rule=case.update_rule,
                                    generator_hidden=(1024, 1024) if case.generator == "mlp" else (), lr=LR)
    return lambda: step(x, y)


def batch_of(dtype, batch, input_dim, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((batch, input_dim)).astype(dtype)
    y = np.eye(CLASSES, dtype=dtype)[rng.integers(0, CLASSES, batch)]
    return x, y


def fused_numpy_step(seed=0):
    """The backprop BN f32 step written out flat in NumPy: no modules, no checks, everything in place.

    Not sgrad: a floor for what NumPy can do on this net, so the table can say
    how much of sgrad's distance from the limit is NumPy's own and how much
    is sgrad's (its modules, checks and out-of-place updates).
    """
    f32 = np.float32
    x, y = batch_of("float32", BATCH, INPUT_DIM, seed)
    rng = np.random.default_rng(seed)
    w1, w2, w3 = ((rng.standard_normal(shape) * np.sqrt(2 / shape[0])).astype(f32)
                  for shape in ((INPUT_DIM, 256), (256, 256), (256, CLASSES)))
    b3 = np.zeros(CLASSES, f32)
    norms = [(np.ones(256, f32), np.zeros(256, f32)) for _ in range(2)]
    ones, zeros, class_ones = np.ones(BATCH, f32), np.zeros(256, f32), np.ones(CLASSES, f32)

    def norm_relu(z, gamma, beta):
        centred = z - (ones @ z) / BATCH
        inv_std = 1 / np.sqrt(np.einsum("ij,ij->j", centred, centred) / BATCH + 1e-5)
        h = centred * (gamma * inv_std)
        h += beta
        return np.maximum(h, zeros, out=h), centred, inv_std

    def norm_relu_backward(d, h, centred, inv_std, gamma):
        np.multiply(d, h > 0, out=d)
        dbeta, dgamma = ones @ d, np.einsum("ij,ij->j", d, centred) * inv_std
        dx = centred * (inv_std * dgamma / BATCH)
        np.subtract(d, dx, out=dx)
        dx -= dbeta / BATCH
        dx *= gamma * inv_std
        return dx, dgamma, dbeta

    def descend(param, grad):
        grad *= LR  # the gradient is scaled in place: nothing else holds it here
        param -= grad

    def step():
        """One step; returns the parameters (for a check against sgrad's step)."""
        h1, c1, s1 = norm_relu(x @ w1, *norms[0])
        h2, c2, s2 = norm_relu(h1 @ w2, *norms[1])
        logits = h2 @ w3
        logits += b3
        exp = np.exp(logits - np.ascontiguousarray(logits.T).max(axis=0)[:, None])
        g = exp / (exp @ class_ones)[:, None]
        g -= y
        g /= BATCH
        d2 = g @ w3.T
        descend(w3, h2.T @ g)
        descend(b3, ones @ g)
        dz2, dgamma2, dbeta2 = norm_relu_backward(d2, h2, c2, s2, norms[1][0])
        d1 = dz2 @ w2.T
        for param, grad in zip((w2, *norms[1]), (h1.T @ dz2, dgamma2, dbeta2)):
            descend(param, grad)
        dz1, dgamma1, dbeta1 = norm_relu_backward(d1, h1, c1, s1, norms[0][0])
        for param, grad in zip((w1, *norms[0]), (x.T @ dz1, dgamma1, dbeta1)):
            descend(param, grad)
        return w1, norms[0], w2, norms[1], w3, b3
    return step


# ----------------------------------------------------------------------------- the limit

def dense_layers(network):
    """``(layer, input_kind)`` for every :class:`~sgrad.Layer` in a network (a list of modules), generators included.

    ``input_kind`` is "data" for the network's bottom layer, "generator" for the
    bottom layer of a generator (whose input [h, c] is data to it), else None:
    the layers whose input delta nothing needs.  The walk is the modules' own
    (:meth:`sgrad.nn.module.Module.submodules`), parents first, bottom layer first.
    """
    bottoms_seen = set()
    for k, top in enumerate(network):
        for path, module in top.submodules():
            if not isinstance(module, Layer):
                continue
            scope = (k, path[:path.index("generator")]) if "generator" in path else "network"
            if scope in bottoms_seen:
                yield module, None
            else:
                bottoms_seen.add(scope)
                yield module, "data" if scope == "network" else "generator"


def matmul_plan(network, batch, dtype):
    """The matrix products of one step as ``[(a, b, out)]`` on preallocated arrays, and their GFLOP.

    Per dense layer (in, out): the forward ``x @ W``, the weight gradient
    ``x.T @ dz`` and the input delta ``dz @ W.T``, except where the input is
    data (the network's bottom layer, a generator's first layer): nothing needs
    that delta, and sgrad's steps skip it (``input_delta=False``), as PyTorch's autograd does.
    """
    skipped = ("generator", "data")
    rng = np.random.default_rng(0)
    plan, flop = [], 0
    for layer, input_kind in dense_layers(network):
        fan_in, fan_out = layer.weights.shape
        x, w, dz = (rng.random(shape).astype(dtype) for shape in
                    ((batch, fan_in), (fan_in, fan_out), (batch, fan_out)))
        products = [(x, w), (x.T, dz)]
        if input_kind not in skipped:
            products.append((dz, w.T))
        for a, b in products:
            plan.append((a, b, np.empty((a.shape[0], b.shape[1]), dtype=dtype)))
            flop += 2 * a.shape[0] * a.shape[1] * b.shape[1]
    return plan, flop / 1e9


def run_plan(plan):
    for a, b, out in plan:
        np.matmul(a, b, out=out)


# ----------------------------------------------------------------------------- the parts of a step

def optimizer_sweep(network, dtype):
    """One update of every parameter of ``network`` with fixed random gradients: the optimizer alone."""
    rng = np.random.default_rng(0)
    work = []
    for owner in parametrised(network):
        for name, param in owner.parameters.items():
            grad = (1e-3 * rng.standard_normal(param.shape)).astype(dtype)
            work.append((owner.update_rule, param, grad, owner.update_state[name]))

    def sweep():
        for rule, param, grad, state in work:
            rule.step(param, grad, state, LR)
    return sweep


def parametrised(network):
    """Every module in the network that owns parameters and their update state (Layer, BatchNorm)."""
    return [module for top in network for _, module in top.submodules() if module.own_parameters()]


# ----------------------------------------------------------------------------- timing

def time_rounds(candidates, *, rounds, seconds):
    """Seconds per call of each candidate, one sample a round: ``{name: [seconds, ...]}``.

    Rounds alternate between the candidates, so sample k of every candidate
    comes from the same stretch of time.
    """
    calls = {}
    for name, fn in candidates.items():
        for _ in range(3):  # warm-up: first-call allocations, caches, the generators leaving zero
            fn()
        start = time.perf_counter()
        fn()
        calls[name] = max(1, math.ceil(seconds / max(time.perf_counter() - start, 1e-7)))
    samples = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / calls[name])
    return {name: np.array(times) for name, times in samples.items()}


def medians(samples):
    return {name: float(np.median(times)) for name, times in samples.items()}


def paired_ratio(samples, numerator, denominator):
    """The median over rounds of ``numerator / denominator`` measured in the same round."""
    return float(np.median(samples[numerator] / samples[denominator]))


def measure_case(case, *, rounds, seconds):
    """Every time of one row, in seconds, and the GFLOP of its products."""
    step, network = sgrad_step(case)
    dtype = np.dtype(case.dtype)
    plan, gflop = matmul_plan(network, BATCH, dtype)
    tiny_step, tiny_network = sgrad_step(case, input_dim=4, width=4, generator_hidden=(4, 4), batch=4)
    candidates = {"sgrad": step, "limit": lambda: run_plan(plan),
                  "optimizer": optimizer_sweep(network, dtype), "tiny optimizer": optimizer_sweep(tiny_network, dtype),
                  "python": tiny_step}
    peer = torch_step(case)
    if peer is not None:
        candidates["torch"] = peer
    if case.method != "backprop":
        candidates["backprop"] = sgrad_step(CASES[0])[0]
    if case == CASES[0]:
        candidates["fused NumPy"] = fused_numpy_step()
    samples = time_rounds(candidates, rounds=rounds, seconds=seconds)
    times = medians(samples)
    times["ratios"] = {other: paired_ratio(samples, "sgrad", other) for other in ("limit", "torch", "backprop")
                       if other in samples}
    if "fused NumPy" in samples:
        times["ratios"]["fused NumPy / limit"] = paired_ratio(samples, "fused NumPy", "limit")
    times["gflop"] = gflop
    # The parts of the step: the rest is elementwise work, reductions, and what the limit's
    # back-to-back products gain from warm caches.
    optimizer = max(times["optimizer"] - times["tiny optimizer"], 0.0)
    rest = max(times["sgrad"] - times["limit"] - optimizer - times["python"], 0.0)
    times["parts"] = {"matrix products": times["limit"], "elementwise and reductions": rest,
                      "optimizer": optimizer, "Python overhead": times["python"]}
    return times


# ----------------------------------------------------------------------------- data and memory

def blog_generate_dataset(output_dim, num_examples, rng):
    """The blog's data generator, a Python loop over examples, on the operands ``generate_dataset`` draws."""
    def int2vec(value):
        out = np.zeros(output_dim)
        binrep = np.array(list(np.binary_repr(value))).astype("int")
        out[-len(binrep):] = binrep
        return out

    a, b = rng.integers(0, 2 ** (output_dim - 1), size=(2, num_examples), dtype=np.int64)
    x = np.array([np.concatenate((int2vec(a[i]), int2vec(b[i]))) for i in range(num_examples)])
    y = np.array([int2vec(a[i] + b[i]) for i in range(num_examples)])
    return x, y


def measure_data_generation(num_examples, *, rounds):
    loop_x, loop_y = blog_generate_dataset(8, num_examples, np.random.default_rng(0))
    x, y = generate_dataset(8, num_examples, seed=0)
    if not (np.array_equal(loop_x, x) and np.array_equal(loop_y, y)):
        raise AssertionError("generate_dataset and the per-example loop disagree on the same operands")
    samples = time_rounds({"loop": lambda: blog_generate_dataset(8, num_examples, np.random.default_rng(0)),
                           "sgrad": lambda: generate_dataset(8, num_examples, seed=0)},
                          rounds=rounds, seconds=0.2)
    return dict(medians(samples), speedup=paired_ratio(samples, "loop", "sgrad"))


# The child runs `sgrad paper` and reports its own peak RSS.  VmHWM, not ru_maxrss: a child's
# ru_maxrss starts from its parent's resident size at the fork, which here includes PyTorch.
MEMORY_CHILD = """
import sys
from sgrad.cli import main
main(sys.argv[1:])
with open("/proc/self/status") as status:
    print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


def measure_memory(iterations, data):
    """Peak RSS (MB) of ``sgrad paper`` training backprop for ``iterations`` on the full set, or None."""
    if not pathlib.Path("/proc/self/status").exists():
        print("memory: skipped, this needs Linux's /proc/self/status")
        return None
    command = [sys.executable, "-c", MEMORY_CHILD, "paper", "--methods", "backprop", "--iterations", str(iterations),
               "--eval-every", str(iterations), "--quiet"]
    if data is not None:
        command += ["--data", str(data)]
    with tempfile.TemporaryDirectory() as out:
        result = subprocess.run(command + ["--out", out], capture_output=True, text=True)
    if result.returncode != 0:
        print(f"memory: skipped, `sgrad paper` failed: {result.stderr.strip().splitlines()[-1:]}")
        return None
    return int(result.stdout.split()[-1]) * 1024 / 1e6  # VmHWM is in kB (KiB)


# ----------------------------------------------------------------------------- report

def table(results):
    lines = ["| step | sgrad | PyTorch | products (limit) | sgrad / PyTorch | sgrad / limit | sgrad / backprop "
             "| sgrad GFLOP/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, t in results.items():
        ratios = t["ratios"]
        peer = f"{1e3 * t['torch']:.2f} ms" if "torch" in t else "n/a"
        vs_torch = f"{ratios['torch']:.2f}×" if "torch" in ratios else "n/a"
        vs_backprop = f"{ratios['backprop']:.2f}×" if "backprop" in ratios else ""
        lines.append(f"| {name} | {1e3 * t['sgrad']:.2f} ms | {peer} | {1e3 * t['limit']:.2f} ms "
                     f"| {vs_torch} | {ratios['limit']:.2f}× | {vs_backprop} | {t['gflop'] / t['sgrad']:.0f} |")
    return "\n".join(lines)


def targets(results, data_speedup, peak_mb):
    """``[(target, passed, figure)]``; a target that could not be measured is left out."""
    checks = []
    for name in ("backprop, BN, f32", "backprop, no BN, f32"):
        if name not in results:
            continue
        ratios = results[name]["ratios"]
        if "torch" in ratios:
            checks.append((f"{name}: sgrad <= 1.0x PyTorch", ratios["torch"] <= 1.0, f"{ratios['torch']:.2f}x"))
        checks.append((f"{name}: sgrad <= 1.3x its matrix products", ratios["limit"] <= 1.3,
                       f"{ratios['limit']:.2f}x"))
    if "dni, linear gen." in results:
        ratio = results["dni, linear gen."]["ratios"]["backprop"]
        checks.append(("dni (linear gen.) <= 1.5x backprop (BN, f32)", ratio <= 1.5, f"{ratio:.2f}x"))
    checks.append(("data generation >= 50x the per-example loop", data_speedup >= 50, f"{data_speedup:.0f}x"))
    if peak_mb is not None:
        ratio = peak_mb / TRAINING_ARRAY_MB
        checks.append((f"full-MNIST training peak RSS <= 2.5x the {TRAINING_ARRAY_MB:.0f} MB training array",
                       ratio <= 2.5, f"{peak_mb:.0f} MB = {ratio:.2f}x"))
    return checks


def plot_breakdown(results, path):
    """Stacked bars: where each sgrad step's time goes, with PyTorch's time marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [[n for n in results if n.startswith("backprop")], [n for n in results if not n.startswith("backprop")]]
    groups = [g for g in groups if g]
    colours = {"matrix products": "#4c72b0", "elementwise and reductions": "#dd8452", "optimizer": "#55a868",
               "Python overhead": "#8c8c8c"}
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 3.6), squeeze=False)
    for ax, names in zip(axes[0], groups):
        rows = np.arange(len(names))[::-1]
        left = np.zeros(len(names))
        for part, colour in colours.items():
            widths = np.array([1e3 * results[n]["parts"][part] for n in names])
            ax.barh(rows, widths, left=left, color=colour, label=part, height=0.6)
            left += widths
        for row, name in zip(rows, names):
            if "torch" in results[name]:
                ax.plot(1e3 * results[name]["torch"], row, marker="|", markersize=22, mew=2.5, color="black",
                        label="PyTorch eager" if row == rows[0] else None, linestyle="none")
        ax.set_yticks(rows, names)
        ax.set_xlabel("milliseconds per training step (batch 256)")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"Where a step's time goes: MNIST 784-256-256-10, {THREADS} BLAS thread(s)", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="folder for results.json, results.md and step_breakdown.png")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds (a smoke run, noisier)")
    parser.add_argument("--cases", default=None,
                        help="comma-separated row numbers to run (default: all), e.g. 0,5 for the first and sixth")
    parser.add_argument("--data", default=os.environ.get("SGRAD_DATA_DIR"),
                        help="mnist.npz or its folder, for the memory run (default: $SGRAD_DATA_DIR)")
    parser.add_argument("--memory-iterations", type=int, default=200,
                        help="iterations of the memory run; 0 skips it (default 200)")
    args = parser.parse_args()
    rounds, seconds = (3, 0.08) if args.quick else (21, 0.06)
    cases = CASES if args.cases is None else [CASES[int(i)] for i in args.cases.split(",")]

    print(f"numpy {np.__version__}, {THREADS} BLAS thread(s); "
          + (f"PyTorch {torch.__version__}" if torch is not None else "PyTorch not installed: no peer column"))
    results = {}
    for case in cases:
        results[case.name] = measure_case(case, rounds=rounds, seconds=seconds)
        t = results[case.name]
        print(f"  {case.name}: sgrad {1e3 * t['sgrad']:.2f} ms, limit {1e3 * t['limit']:.2f} ms"
              + (f", PyTorch {1e3 * t['torch']:.2f} ms" if "torch" in t else ""), flush=True)
    generation = measure_data_generation(20_000, rounds=rounds)
    data_speedup = generation["speedup"]
    peak_mb = measure_memory(args.memory_iterations, args.data) if args.memory_iterations > 0 else None

    report = [table(results), "",
              f"Data generation, 20,000 8-bit additions: per-example loop {1e3 * generation['loop']:.1f} ms, "
              f"generate_dataset {1e3 * generation['sgrad']:.2f} ms ({data_speedup:.0f}x)."]
    if "fused NumPy / limit" in results.get(CASES[0].name, {}).get("ratios", {}):
        t = results[CASES[0].name]
        report.insert(1, f"\nThe {CASES[0].name} step written out flat in NumPy (no modules, no checks, updates in "
                         f"place): {1e3 * t['fused NumPy']:.2f} ms, {t['ratios']['fused NumPy / limit']:.2f}x the "
                         f"limit; sgrad's step is {t['ratios']['limit']:.2f}x.")
    if peak_mb is not None:
        report.append(f"Peak RSS of `sgrad paper --methods backprop --iterations {args.memory_iterations}` on the "
                      f"full set: {peak_mb:.0f} MB ({peak_mb / TRAINING_ARRAY_MB:.2f}x the float32 training array).")
    print("\n" + "\n".join(report) + "\n")
    checks = targets(results, data_speedup, peak_mb)
    for name, ok, figure in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {figure}")
    if torch is None:
        print("  (PyTorch is not installed: the PyTorch targets were skipped)")

    if args.out is not None:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text("\n".join(report) + "\n\n" + "\n".join(
            f"- {'PASS' if ok else 'FAIL'} {name}: {figure}" for name, ok, figure in checks) + "\n")
        (out / "results.json").write_text(json.dumps(
            {"threads": THREADS, "numpy": np.__version__, "torch": torch.__version__ if torch else None,
             "steps": results, "data_generation": generation, "peak_rss_mb": peak_mb}, indent=1))
        plot_breakdown(results, out / "step_breakdown.png")
        print(f"wrote {out}/results.md, results.json and step_breakdown.png")
    raise SystemExit(0 if all(ok for _, ok, _ in checks) else 1)


if __name__ == "__main__":
    main()
