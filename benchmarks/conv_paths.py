"""Benchmark: where the frequency domain pays, convolution by convolution: the rule of ``sgrad.nn.fast_dft.pays``.

For each shape (batch, C_in, C_out, side, k, padding; stride 1; float32 by default), one convolution's forward and
backward passes (z, then dL/dx, dL/dW and dL/db) through :mod:`sgrad.nn.fast_kernels` twice, whatever the rule
says: through the frequency domain (``frequency_domain=True``), and through the path it takes without it (``False``:
the strips or im2col).  Rounds alternate the two; the ratio is the median over rounds of the frequency domain's
time over the other's.  The input is channels-last in memory, as a convolution block's output is, and the process
keeps the memory it frees (:func:`sgrad.training.memory.keep_freed_memory`), as sgrad's training loop does: the
frequency domain's spectra are fresh arrays of a few MB at each call, which would otherwise cost page faults.

The report gives each shape's frame, r (im2col's multiplications over the frequency domain's) and r min(C_in,
C_out), what the rule chose, and both times.  The shapes: the MNIST CNN's second convolution and others of 3 × 3,
5 × 5 and 7 × 7 kernels from 1 to 128 channels, on either side of the rule's two thresholds.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/conv_paths.py [--rounds 3] [--repeats 5] [--out FILE]
Exit status 0 if no convolution the rule sends to the frequency domain runs more than 5% slower there than on the
other path.
"""

import os

# Before numpy is imported: OpenBLAS reads its thread count once, at load time.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time

import numpy as np
from machine import describe, write_record

from sgrad.nn import fast_dft, fast_kernels
from sgrad.training.memory import keep_freed_memory

TOLERANCE = 1.05  # the frequency domain's time over the other path's, at most, where the rule takes it
SHAPES = [  # (batch, in_channels, out_channels, side, kernel, padding)
    (64, 32, 64, 14, 5, 2),   # the MNIST CNN's second convolution
    (64, 64, 64, 14, 5, 2), (64, 64, 64, 7, 5, 2),  # the paper CNN's, at 64 channels
    (64, 16, 16, 14, 5, 2), (64, 24, 24, 14, 5, 2), (64, 16, 48, 14, 5, 2), (64, 16, 32, 28, 5, 2),
    (64, 20, 20, 12, 5, 0), (32, 64, 64, 16, 7, 3),
    (64, 32, 32, 14, 3, 1), (64, 64, 64, 14, 3, 1), (64, 16, 16, 28, 3, 1), (64, 64, 128, 7, 3, 1),
    (64, 32, 32, 8, 3, 1), (64, 128, 128, 4, 3, 1), (64, 32, 32, 5, 3, 1), (64, 64, 64, 5, 3, 1),
    (64, 16, 32, 14, 3, 1), (64, 32, 16, 14, 3, 1), (64, 8, 8, 14, 3, 1),
    (64, 64, 64, 4, 3, 0), (64, 10, 20, 12, 5, 0), (64, 1, 32, 28, 5, 2),
]


def arrays(shape, dtype, seed=0):
    """x (channels-last in memory), W, b and dz for a convolution of ``shape``."""
    batch, in_channels, out_channels, side, kernel, padding = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, side, side, in_channels)).astype(dtype).transpose(0, 3, 1, 2)
    weights = (rng.standard_normal((out_channels, in_channels, kernel, kernel)) / kernel).astype(dtype)
    bias = rng.standard_normal(out_channels).astype(dtype)
    out = side + 2 * padding - kernel + 1
    dz = rng.standard_normal((batch, out, out, out_channels)).astype(dtype).transpose(0, 3, 1, 2)
    return x, weights, bias, dz


def both_passes(x, weights, bias, dz, padding, frequency_domain):
    """One convolution forward and back through fast_kernels: ``(z, dL/dx, dL/dW, dL/db)``."""
    z, columns = fast_kernels.conv2d_forward(x, weights, bias, 1, padding, frequency_domain=frequency_domain)
    return (z, *fast_kernels.conv2d_backward(dz, x, columns, weights, 1, padding, True, True,
                                              frequency_domain=frequency_domain))


def measure(shape, dtype="float32", rounds=3, repeats=5):
    """One shape's row: the rule's choice and each path's time (ms, the median of ``repeats`` in each round)."""
    _, in_channels, out_channels, side, kernel, padding = shape
    x, weights, bias, dz = arrays(shape, np.dtype(dtype))
    times = {True: [], False: []}
    for _ in range(rounds):
        for frequency_domain in (True, False):
            both_passes(x, weights, bias, dz, padding, frequency_domain)  # not timed: the caches warm
            runs = []
            for _ in range(repeats):
                start = time.perf_counter()
                both_passes(x, weights, bias, dz, padding, frequency_domain)
                runs.append(time.perf_counter() - start)
            times[frequency_domain].append(statistics.median(runs) * 1e3)
    height, width = fast_dft.frame((side, side), (kernel, kernel), padding)
    out = side + 2 * padding - kernel + 1
    fewer = out * out * kernel * kernel / (4 * height * (width // 2 + 1))
    return {"shape": list(shape), "frame": [height, width], "r": fewer, "r times channels":
            fewer * min(in_channels, out_channels),
            "rule": fast_dft.pays(in_channels, out_channels, (kernel, kernel), 1, (side, side), padding),
            "frequency domain ms": statistics.median(times[True]), "other path ms": statistics.median(times[False]),
            "ratio": statistics.median(a / b for a, b in zip(times[True], times[False]))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each path in each round")
    parser.add_argument("--out", help="write the run's record (JSON) here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        parser.error(f"--rounds and --repeats are at least 1; got {args.rounds} and {args.repeats}")
    load = os.getloadavg()[0]
    kept = keep_freed_memory()
    print(describe())
    print(f"numpy {np.__version__}, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, {args.dtype}; "
          f"freed memory kept: {'yes' if kept else 'no'}; "
          f"rule: r >= {fast_dft.FEWER_AT_LEAST:g} and r min(C_in, C_out) >= {fast_dft.BY_CHANNELS:g}")
    print(f"{'batch, C_in, C_out, side, k, p':>32} {'frame':>8} {'r':>6} {'r·min C':>8} {'rule':>6} "
          f"{'frequency':>10} {'other':>9} {'ratio':>6}")
    rows = []
    for shape in SHAPES:
        row = measure(shape, args.dtype, args.rounds, args.repeats)
        rows.append(row)
        print(f"{tuple(shape)!s:>32} {'x'.join(map(str, row['frame'])):>8} {row['r']:6.2f} "
              f"{row['r times channels']:8.1f} {'dft' if row['rule'] else 'other':>6} "
              f"{row['frequency domain ms']:8.2f}ms {row['other path ms']:7.2f}ms {row['ratio']:6.2f}")
    slower = [row["shape"] for row in rows if row["rule"] and row["ratio"] > TOLERANCE]
    print(f"taken by the rule and more than {TOLERANCE:g}x slower there: {slower or 'none'}")
    if args.out:
        write_record(args.out, load, dtype=args.dtype, rounds=args.rounds, repeats=args.repeats, freed_memory_kept=kept,
                     threads=int(os.environ["OPENBLAS_NUM_THREADS"]), tolerance=TOLERANCE, rows=rows)
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
