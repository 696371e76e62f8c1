"""Benchmark: the blog-style ``Layer`` MLP step against PyTorch, at one BLAS thread and at two, in alternating rounds.

The step is the one a student writes from the blog post with :class:`sgrad.Layer` (784-256-256-10, ReLU,
float32, batch 256, softmax cross-entropy averaged over the batch, plain SGD at 0.01)::

    h1 = layer_1.forward(x); h2 = layer_2.forward(h1); logits = layer_3.forward(h2)
    loss, delta = softmax_cross_entropy(logits, labels)
    layer_1.backward(layer_2.backward(layer_3.backward(delta)), input_delta=False)
    for layer in layers: layer.update(0.01)

``input_delta=False`` on the bottom layer: its input is data, so nothing needs dL/dx, and PyTorch's autograd
skips it too.  The rows: :func:`sgrad.nn.fast_mlp_step.sgd_step`, the same step in one function; the plain
loop above; the loop as the blog writes it, which computes the bottom layer's input delta anyway; and the eight
matrix products of ``sgd_step`` alone, the same NumPy and BLAS calls back to back on preallocated arrays: no
NumPy step can be faster than its products, so this row is how far below PyTorch's step sgrad's could go with
NumPy's BLAS.
PyTorch runs ``nn.Sequential`` of the same layers, ``F.cross_entropy`` and ``optim.SGD`` in CPU eager mode.
Before timing, both sides start from the same weights and take one step, and their losses and weights after it
are compared.

Threads: a child process per thread count and side (``OPENBLAS_NUM_THREADS`` is read once, when NumPy loads;
``torch.set_num_threads`` gets the same number), so that neither side's idle threads, which spin for a while
after each call, take a core from the other's.  The parent drives the children round by round, one after
the other with a pause between turns for those threads to go to sleep, so a slow stretch of a shared
machine hits every candidate alike; in each round every candidate takes one untimed step before its timed
ones, so that none is timed from the cold caches a pause leaves.  Each ratio is the median over
rounds of the ratio within a round.

Run:  python benchmarks/layer_step.py [--threads 1 2] [--rounds 15] [--out docs/performance/layer_step.json]
PyTorch must be importable (``pip install torch``: optional, sgrad never imports it).  Exit status 0 if
:func:`sgrad.nn.fast_mlp_step.sgd_step` (the loop above in one function, tested against it) is within the target
(0.9 times PyTorch's) at every thread count.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

TARGET = 0.9  # sgrad's step time over PyTorch's
BATCH, WIDTHS, LEARNING_RATE = 256, (784, 256, 256, 10), 0.01
PRODUCTS = "sgrad's matrix products alone"
CANDIDATES = ("sgrad, fast_mlp_step.sgd_step", "sgrad, the plain loop", "sgrad, as the blog writes it", PRODUCTS,
              "PyTorch")
TARGETED = CANDIDATES[0]
PAUSE = 0.5  # seconds between two processes' turns: OpenBLAS's and OpenMP's idle threads spin for up to ~0.2 s


def build(seed=0):
    """``{candidate: step}`` on one batch of random data, and the one-step agreement of sgrad and PyTorch."""
    import numpy as np
    import torch

    from sgrad import Layer
    from sgrad.nn.blas import add_product
    from sgrad.nn.fast_mlp_step import sgd_step
    from sgrad.nn.losses import softmax_cross_entropy

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, WIDTHS[0])).astype(np.float32)
    labels = rng.integers(0, WIDTHS[-1], BATCH)

    def layers():
        kinds = ["relu"] * (len(WIDTHS) - 2) + ["identity"]
        return [Layer(fan_in, fan_out, kind, init="pytorch", seed=seed + k, dtype=np.float32)
                for k, (fan_in, fan_out, kind) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:], kinds))]

    def sgrad_step(stack, bottom_delta):
        def step():
            h = x
            for layer in stack:
                h = layer.forward(h)
            loss, delta = softmax_cross_entropy(h, labels)
            for layer in stack[:0:-1]:
                delta = layer.backward(delta)
            stack[0].backward(delta, input_delta=bottom_delta)
            for layer in stack:
                layer.update(LEARNING_RATE)
            return loss
        return step

    def torch_step(stack):
        modules = []
        for layer in stack:
            linear = torch.nn.Linear(layer.input_dim, layer.output_dim)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(layer.weights.T.copy()))
                linear.bias.copy_(torch.from_numpy(layer.bias))
            modules += [linear, torch.nn.ReLU()]
        net = torch.nn.Sequential(*modules[:-1])
        optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
        x_t, labels_t = torch.from_numpy(x), torch.from_numpy(labels)

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(x_t), labels_t)
            loss.backward()
            optimizer.step()
            return float(loss.detach())
        return step, net

    def fast_step(stack):
        return lambda: sgd_step(stack, x, labels, LEARNING_RATE)

    def products_alone(stack):
        """The eight matrix products of ``sgd_step``, the same calls, on preallocated arrays and copies of the weights."""
        weights = [layer.weights.copy() for layer in stack]
        activations = [x] + [np.empty((BATCH, width), np.float32) for width in WIDTHS[1:]]
        deltas = [rng.standard_normal((BATCH, width)).astype(np.float32) for width in WIDTHS[1:]]
        below = [np.empty((BATCH, width), np.float32) for width in WIDTHS[1:-1]]
        sign = [1.0]

        def step():
            for k, w in enumerate(weights):
                np.matmul(activations[k], w, out=activations[k + 1])
            sign[0] = -sign[0]  # the updates alternate in sign, so the weights' copies stay where they started
            for k in range(len(weights) - 1, -1, -1):
                if k:
                    np.matmul(deltas[k], weights[k].T, out=below[k - 1])
                add_product(weights[k], activations[k].T, deltas[k], sign[0] * LEARNING_RATE)
        return step

    stack = layers()
    theirs, net = torch_step(stack)
    ours = fast_step(stack)
    loss_gap = abs(ours() - theirs())
    linears = [module for module in net if isinstance(module, torch.nn.Linear)]
    weight_gap = max(float(np.max(np.abs(layer.weights - linear.weight.detach().numpy().T)))
                     for layer, linear in zip(stack, linears))
    steps = {TARGETED: ours, "sgrad, the plain loop": sgrad_step(layers(), False),
             "sgrad, as the blog writes it": sgrad_step(layers(), True), PRODUCTS: products_alone(layers()),
             "PyTorch": theirs}
    return steps, {"loss difference": loss_gap, "largest weight difference": weight_gap}


def child(threads, side):
    """Serve rounds on stdin/stdout: a line with a step count in, a JSON line of seconds per step out.

    ``side`` is 'sgrad' or 'PyTorch': a process times one side's steps only, so that neither side's idle
    threads (OpenBLAS's and PyTorch's spin a while after each call) take a core from the other's.
    """
    import torch
    torch.set_num_threads(threads)
    steps, agreement = build()
    steps = {name: step for name, step in steps.items() if (name == "PyTorch") == (side == "PyTorch")}
    for step in steps.values():  # warm up: first calls allocate and load kernels
        for _ in range(3):
            step()
    print(json.dumps(agreement), flush=True)
    for line in sys.stdin:
        count = int(line)
        times = {}
        for name, step in steps.items():
            step()  # untimed: a round starts after a pause, with cold caches, and each candidate starts alike
            start = time.perf_counter()
            for _ in range(count):
                step()
            times[name] = (time.perf_counter() - start) / count
        print(json.dumps(times), flush=True)


def start_child(threads, side):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    process = subprocess.Popen([sys.executable, __file__, "--child", str(threads), side], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env)
    line = process.stdout.readline()
    if not line:
        process.wait()
        raise SystemExit(f"layer_step: the {threads}-thread {side} process stopped before its first round "
                         f"(exit {process.returncode}); is PyTorch installed in this environment?")
    return process, json.loads(line)


def measure(thread_counts, rounds, steps):
    """``{threads: row}``: a process per thread count and side, driven round by round in turn."""
    children, rows = {}, {}
    try:
        for threads in thread_counts:
            for side in ("sgrad", "PyTorch"):
                children[threads, side], agreement = start_child(threads, side)
            rows[threads] = {"agreement": agreement, "samples": {name: [] for name in CANDIDATES}}
        for _ in range(rounds):
            for (threads, _side), process in children.items():
                time.sleep(PAUSE)  # the last process's idle threads stop spinning before this one starts
                process.stdin.write(f"{steps}\n")
                process.stdin.flush()
                for name, seconds in json.loads(process.stdout.readline()).items():
                    rows[threads]["samples"][name].append(seconds)
    finally:
        for process in children.values():
            process.stdin.close()
            process.wait()
    for row in rows.values():
        samples = row["samples"]
        row["ms"] = {name: 1e3 * statistics.median(values) for name, values in samples.items()}
        for name in CANDIDATES[:-1]:
            ratios = [a / b for a, b in zip(samples[name], samples["PyTorch"])]
            row.setdefault("ratio", {})[name] = statistics.median(ratios)
            row.setdefault("ratio range", {})[name] = (min(ratios), max(ratios))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20, help="steps per candidate in each round")
    parser.add_argument("--out", type=pathlib.Path, help="write the run's record (JSON) here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return child(int(args.child[0]), args.child[1])
    try:
        import numpy as np
        import torch
    except ImportError as error:
        raise SystemExit(f"layer_step: PyTorch is the benchmark's peer and is not importable here ({error}); "
                         "install it in this environment (pip install torch)") from None
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from machine import describe
    load_before = os.getloadavg()[0]
    rows = measure(args.threads, args.rounds, args.steps)
    command = "python benchmarks/layer_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
    record = {"command": command.strip(), "machine": describe(), "numpy": np.__version__, "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "load": [load_before, os.getloadavg()[0]], "batch": BATCH,
              "widths": WIDTHS, "rounds": args.rounds, "steps per round": args.steps, "target": TARGET,
              "targeted": TARGETED, "threads": {str(k): v for k, v in rows.items()}}
    print(record["machine"], f"numpy {record['numpy']}, PyTorch {record['torch']}")
    within = True
    for threads, row in rows.items():
        agreement = row["agreement"]
        print(f"{threads} thread(s): one step from the same weights: |loss difference| "
              f"{agreement['loss difference']:.1e}, largest weight difference {agreement['largest weight difference']:.1e}")
        for name in CANDIDATES:
            line = f"  {name:32s} {row['ms'][name]:6.2f} ms"
            if name != "PyTorch":
                low, high = row["ratio range"][name]
                line += f"   / PyTorch {row['ratio'][name]:.2f} (rounds {low:.2f} to {high:.2f})"
            print(line)
        met = row["ratio"][TARGETED] <= TARGET
        within = within and met
        print(f"  target sgrad / PyTorch <= {TARGET}: {'met' if met else 'missed'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
