"""Benchmark: the schedule simulator's throughput for locked backprop, DNI and the complete unlock, against a run.

Reads a finished ``sgrad parallel`` comparison (its ``histories.json``: the settings and each run's examples
per second between its first and last evaluations), then measures what the simulator needs for that
comparison's net, in a process set up as a local worker is (one BLAS thread, malloc keeping freed memory):
each hidden block's forward, backward and update, its generator's prediction and regression, and its input
generator's ĥ = I(x, c) and regression (the complete unlock's); the top layer's step; and a message's
transfer time and processor time between two local processes (``benchmarks/parallel.py``'s round trip).
It prints, for every run of the comparison, the measured examples per second beside the simulator's on a
machine with the cores this one has, and writes them with the load average to ``simulator.json`` in the
comparison's folder.  Nothing is fitted to the measured runs.

Run:  python benchmarks/parallel_unlock.py docs/parallel/forward-unlock
"""

import os

# Before numpy is imported: one BLAS thread, as every worker has.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import dataclasses
import importlib.util
import json
import pathlib
import sys


from sgrad.experiments.mnist import PaperConfig
from sgrad.experiments.parallel import examples_per_second, network_method
from sgrad.parallel.simulator import throughput

HERE = pathlib.Path(__file__).resolve().parent
ROUNDS, MESSAGES = 40, 400


def parallel_benchmark():
    """``benchmarks/parallel.py`` as a module: its worker-like processes and its round trip between two of them.

    Imported by its name from this folder, which the spawned processes that run its functions find too.
    """
    sys.path.insert(0, str(HERE))
    return importlib.import_module("parallel")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", help="the --out folder of a finished sgrad parallel comparison")
    args = parser.parse_args()
    folder = pathlib.Path(args.comparison)
    record = json.loads((folder / "histories.json").read_text())
    config = PaperConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["config"].items()})
    load_before = os.getloadavg()
    bench = parallel_benchmark()
    seconds, busy = bench.local_round_trip(MESSAGES)
    transfer, message_cpu = seconds / 2, busy / 2
    rows = []
    for run in record["runs"]:
        schedule, workers = run["schedule"], run["workers"]
        blocks, top = bench.in_workers(1, bench.block_times, network_method(schedule), bench.data()[:2], ROUNDS,
                                       config, schedule)[0]
        predicted = throughput(schedule, blocks, top, workers, transfer=transfer, message_cpu=message_cpu,
                               cores=os.cpu_count(), batch=config.batch_size)
        measured = examples_per_second(run["history"], config.batch_size)
        rows.append({"schedule": schedule, "workers": workers, "measured": measured, "predicted": predicted,
                     "blocks": [b._asdict() for b in blocks], "top": top})
    result = {"config": dataclasses.asdict(config), "transfer": transfer, "message_cpu": message_cpu,
              "cores": os.cpu_count(), "load": [load_before[0], os.getloadavg()[0]], "runs": rows}
    (folder / "simulator.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"transfer {1e3 * transfer:.2f} ms, processor time per message {1e3 * message_cpu:.2f} ms, "
          f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("| schedule | workers | measured examples/s | simulator | simulator / measured |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['schedule']} | {row['workers']} | {row['measured']:,.0f} | {row['predicted']:,.0f} | "
              f"{row['predicted'] / row['measured']:.2f} |")


if __name__ == "__main__":
    main()
