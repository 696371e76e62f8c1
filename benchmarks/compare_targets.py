"""Benchmark: does the default ``sgrad compare`` reach the learning targets, and how fast?

Targets (8-bit addition, 1000 training and 1000 held-out pairs, 300 epochs, batch 32,
Adam, tanh hidden layers 128 and 64, zero-initialised linear generators):

- backprop: held-out bit accuracy >= 99%;
- cdni: held-out bit accuracy within 1 point of backprop;
- dni: held-out bit accuracy at least 8 points above no-bprop;
- the whole run within 60 s.

Run:  python benchmarks/compare_targets.py [--seeds 0 1 2] [--out FILE]
Exit status 0 if every target holds for every seed.  ``--out`` writes each seed's held-out bit accuracies
and wall time as JSON, the record ``docs/tables.py`` draws the binary-addition page's table from.
"""

import argparse
import datetime
import json
import os
import pathlib
import time

import sgrad


def check(histories, wall_time):
    held_out = {m: 100 * h["test_bit_accuracy"][-1] for m, h in histories.items()}
    return [
        ("backprop held-out bits >= 99%", held_out["backprop"] >= 99.0, f"{held_out['backprop']:.2f}%"),
        ("cdni within 1 point of backprop", held_out["cdni"] >= held_out["backprop"] - 1.0,
         f"{held_out['cdni'] - held_out['backprop']:+.2f} points"),
        ("dni >= no-bprop + 8 points", held_out["dni"] >= held_out["no-bprop"] + 8.0,
         f"{held_out['dni'] - held_out['no-bprop']:+.2f} points"),
        ("whole run <= 60 s", wall_time <= 60.0, f"{wall_time:.1f} s"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", type=pathlib.Path, help="write each seed's figures here (JSON)")
    args = parser.parse_args()
    all_ok, record = True, {}
    for seed in args.seeds:
        start = time.perf_counter()
        histories = sgrad.compare(seed=seed)
        wall_time = time.perf_counter() - start
        record[str(seed)] = {"held_out_bit_accuracy": {m: h["test_bit_accuracy"][-1] for m, h in histories.items()},
                             "wall_time": wall_time, "load_average": round(os.getloadavg()[0], 2)}
        print(f"seed {seed}\n{sgrad.results_table(histories)}")
        for name, ok, figure in check(histories, wall_time):
            all_ok &= ok
            print(f"  {'PASS' if ok else 'FAIL'}  {name}: {figure}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": "benchmarks/compare_targets.py", "sgrad": sgrad.__version__,
                                        "date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
                                        "seeds": record}, indent=1) + "\n")
    raise SystemExit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
