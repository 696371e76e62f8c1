"""The tables of the results pages and the README, written from the committed run records.

A generated table sits in its page between two comments, which the rendered page does not show::

    <!-- table: NAME -->
    | ... the table ... |
    <!-- end table -->

and the function registered here under NAME writes it from the records it names: the files that sgrad's
commands and the scripts in ``benchmarks/`` write (cells and histories as JSON, a command's ``results.md``),
committed under ``docs/``.  Nothing in a generated table is typed by hand; a number that has no record is
not on the pages.

    python docs/tables.py           # rewrite every marked table in README.md and docs/**/*.md
    python docs/tables.py --check   # change nothing; exit status 1 and the tables that differ from their records

``tests/test_docs_tables.py`` runs the check.
"""

import argparse
import json
import math
import pathlib
import re
import statistics
import sys
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKED = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end table -->)", re.DOTALL)
TABLES: dict[str, Callable[[str], str]] = {}  # a table's name: its function, given the text now between the markers


def table(name: str) -> Callable:
    """Register the decorated function as the writer of the table ``name``."""
    def register(function: Callable) -> Callable:
        TABLES[name] = function
        return function
    return register


# --- reading records ---------------------------------------------------------------------------------


def read_json(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def markdown_tables(path: str) -> list[str]:
    """The tables of the markdown file at ``path`` (a command's ``results.md``), each as its lines joined."""
    blocks, current = [], []
    for line in (ROOT / path).read_text().splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    return blocks


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a markdown table, each as its cells."""
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()[2:]]


def cells(folder: str) -> dict[str, dict]:
    """A ``sgrad paper`` run's cached cells in ``folder/cells``, by file stem (``dni-depth3``)."""
    return {path.stem: json.loads(path.read_text()) for path in sorted((ROOT / folder / "cells").glob("*.json"))}


def paper_results(folder: str) -> dict[tuple[str, int], dict]:
    """``{(method, depth): history}`` of a ``sgrad paper`` run's cells, as ``sgrad.experiments.mnist`` keys them."""
    return {(cell["method"], cell["config"]["depth"]): cell["history"] for cell in cells(folder).values()}


def percent(fraction: float) -> str:
    return f"{100 * fraction:.2f}%"


def final(history: dict) -> float:
    return history["test_accuracy"][-1]


def seconds(value: float) -> str:
    return f"{value:,.0f} s"


def signed(value: float, unit: str = "") -> str:
    """``+0.27`` or ``−0.06`` (a minus sign, not a hyphen), then ``unit``."""
    return f"{value:+.2f}".replace("-", "−") + unit


def row(*values: object) -> str:
    return "| " + " | ".join(str(v) for v in values) + " |"


def ran(record: dict) -> str:
    """A benchmark record's command, date, machine and NumPy, as a page's line under its table says them."""
    return f"`{record['command']}` on {record['date']}: {record['machine']}; numpy {record['numpy']}"


def load(record: dict) -> str:
    return f"load average {record['load'][0]:.2f} before, {record['load'][1]:.2f} after."


def sorted_by(results: dict[tuple[str, int], dict], methods: tuple[str, ...]) -> dict[tuple[str, int], dict]:
    return {key: results[key] for method in methods for key in sorted(results) if key[0] == method}


# --- binary addition ---------------------------------------------------------------------------------


def compare_final() -> dict[str, float]:
    """Held-out bit accuracy (%) of each method in ``docs/compare/results.md``, ``sgrad compare``'s table."""
    return {r[0]: float(r[1].rstrip("%")) for r in table_rows(markdown_tables("docs/compare/results.md")[0])}


@table("compare")
def compare_table(_: str) -> str:
    return markdown_tables("docs/compare/results.md")[0]


@table("compare-seeds")
def compare_seeds(_: str) -> str:
    record = read_json("docs/compare-seeds/targets.json")["seeds"]
    seeds = list(record)
    bits = {seed: {m: 100 * a for m, a in record[seed]["held_out_bit_accuracy"].items()} for seed in seeds}
    lines = [row("target", *(f"seed {s}" for s in seeds)), "|---|" + "---:|" * len(seeds),
             row("backprop held-out bit accuracy ≥ 99%", *(f"{bits[s]['backprop']:.2f}%" for s in seeds)),
             row("cdni within 1 point of backprop", *(signed(bits[s]["cdni"] - bits[s]["backprop"], " points")
                                                      for s in seeds)),
             row("dni at least 8 points above no-bprop", *(signed(bits[s]["dni"] - bits[s]["no-bprop"], " points")
                                                           for s in seeds)),
             row("the whole run within 60 s (2 cores)", *(f"{record[s]['wall_time']:.1f} s" for s in seeds))]
    return "\n".join(lines)


# --- MNIST: the reproduction and the depth sweeps ----------------------------------------------------

# The public TensorFlow reproduction's figures (r2rt, "Synthetic Gradients with Tensorflow", 2016), and the
# targets sgrad set itself against them: what the table compares with, not measurements of sgrad.
R2RT = {"backprop": 0.9801, "no-bprop": 0.8890, "dni": 0.9777, "cdni": 0.9801, "synthetic-loss": 0.8429}
TARGETS = {"backprop": (0.978, None), "no-bprop": (0.85, 0.92), "dni": (0.975, None), "cdni": (0.978, None),
           "synthetic-loss": (0.843, None)}
PAPER_NAMES = {"backprop": "backprop", "no-bprop": "no backprop", "dni": "synthetic gradients (`dni`)",
               "cdni": "conditioned (`cdni`)", "synthetic-loss": "synthetic loss (conditioned on the label)"}


def target_text(method: str, accuracy: float) -> str:
    low, high = TARGETS[method]
    met = accuracy >= low and (high is None or accuracy <= high)
    bound = f"≥ {100 * low:g}%" if high is None else f"{100 * low:g}–{100 * high:g}%"
    margin = f", by {100 * (accuracy - low):.2f} points" if met and high is None else ""
    return f"{bound} ({'met' if met else 'missed'}{margin})"


@table("mnist-reproduction")
def mnist_reproduction(_: str) -> str:
    results = paper_results("docs/paper/reproduction")
    lines = ["| method | test accuracy after 25,000 iterations | lowest and highest of the last ten evaluations "
             "| cell wall time | r2rt's figure | target |", "|---|---:|---:|---:|---:|---|"]
    for method in PAPER_NAMES:
        history = results[(method, 3)]
        last = history["test_accuracy"][-10:]
        lines.append(row(PAPER_NAMES[method], percent(final(history)), f"{percent(min(last))} to {percent(max(last))}",
                         seconds(history["wall_time"]), percent(R2RT[method]), target_text(method, final(history))))
    return "\n".join(lines)


@table("mnist-depth-sweep")
def mnist_depth_sweep(_: str) -> str:
    from sgrad.experiments.mnist import results_table

    return results_table(sorted_by(paper_results("docs/paper/depth-sweep"), ("backprop", "no-bprop", "dni", "cdni")))


@table("mnist-depth-sweep-mlp")
def mnist_depth_sweep_mlp(_: str) -> str:
    from sgrad.experiments.mnist import results_table

    results = sorted_by(paper_results("docs/paper/depth-sweep-mlp"), ("backprop", "dni"))
    depths = sorted({d for _, d in results})
    gaps = [100 * (final(results[("backprop", d)]) - final(results[("dni", d)])) for d in depths]
    return results_table(results) + "\n" + row("gap, backprop − dni (points)", *(signed(g) for g in gaps))


# --- convolutional nets ------------------------------------------------------------------------------


@table("cnn-16-channels")
def cnn_16_channels(_: str) -> str:
    results = sorted_by(paper_results("docs/paper/cnn"), ("backprop", "cdni", "dni", "no-bprop"))
    iterations = next(iter(results.values()))["iteration"]
    lines = [f"| method | test accuracy after {' / '.join(f'{i:,}' for i in iterations)} steps | wall time |",
             "|---|---|---:|"]
    for (method, _), history in results.items():
        lines.append(row(method, " / ".join(percent(a) for a in history["test_accuracy"]),
                         seconds(history["wall_time"])))
    return "\n".join(lines)


PEER_CNN = "docs/paper/peer-cnn"


def peer_cnn_runs() -> dict[str, dict[int, dict]]:
    """``{method: {seed: history}}`` of the ``sgrad paper --arch peer-cnn`` runs in ``docs/paper/peer-cnn/seed<s>``."""
    runs = paper_seed_runs(PEER_CNN)
    return {method: runs[method] for method in ("backprop", "dni", "cdni") if method in runs}


@table("peer-cnn-epochs")
def peer_cnn_epochs(_: str) -> str:
    runs = peer_cnn_runs()
    iterations = next(iter(next(iter(runs.values())).values()))["iteration"]
    lines = ["| method, seed | " + " | ".join(f"{i:,}" for i in iterations) + " |",
             "|---|" + "---:|" * len(iterations)]
    for method, by_seed in runs.items():
        for seed, history in sorted(by_seed.items()):
            lines.append(row(f"{METHOD_NAMES[method]}, {seed}", *(f"{100 * a:.2f}" for a in history["test_accuracy"])))
    return "\n".join(lines)


# --- performance -------------------------------------------------------------------------------------


@table("performance-steps")
def performance_steps(_: str) -> str:
    return markdown_tables("docs/performance/results.md")[0]


@table("performance-targets")
def performance_targets(_: str) -> str:
    record = read_json("docs/performance/results.json")
    steps, data = record["steps"], record["data_generation"]
    bn, plain, dni = steps["backprop, BN, f32"], steps["backprop, no BN, f32"], steps["dni, linear gen."]
    rss = record["peak_rss_mb"]
    array_mb = 60_000 * 784 * 4 / 1e6  # the float32 training images

    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    lines = ["| target | this run | |", "|---|---:|---|",
             row("backprop step ≤ 1.0× PyTorch's", f"{bn['ratios']['torch']:.2f}× (BN), "
                 f"{plain['ratios']['torch']:.2f}× (no BN)", verdict(max(bn['ratios']['torch'],
                                                                         plain['ratios']['torch']) <= 1.0)),
             row("backprop step ≤ 1.3× its matrix products", f"{bn['ratios']['limit']:.2f}× (BN), "
                 f"{plain['ratios']['limit']:.2f}× (no BN)", verdict(max(bn['ratios']['limit'],
                                                                         plain['ratios']['limit']) <= 1.3)),
             row("DNI (linear generators) ≤ 1.5× backprop", f"{dni['ratios']['backprop']:.2f}×",
                 verdict(dni["ratios"]["backprop"] <= 1.5)),
             row("data generation ≥ 50× the per-example loop", f"{data['speedup']:.0f}× ({1000 * data['sgrad']:.2f} ms "
                 f"against {1000 * data['loop']:.1f} ms for 20,000 additions)", verdict(data["speedup"] >= 50)),
             row(f"full-MNIST training peak RSS ≤ 2.5× the {array_mb:.0f} MB array",
                 f"{rss:.0f} MB = {rss / array_mb:.2f}×", verdict(rss <= 2.5 * array_mb)),
             row("(no target) the BN step written out flat in NumPy, against its matrix products",
                 f"{bn['ratios']['fused NumPy / limit']:.2f}×", "")]
    return "\n".join(lines)


@table("layer-step")
def layer_step(_: str) -> str:
    record = read_json("docs/performance/layer_step.json")
    lines = ["| threads | step | time | / PyTorch | rounds' range |", "|---:|---|---:|---:|---|"]
    for threads, run in record["threads"].items():
        for name, milliseconds in run["ms"].items():
            if name in run["ratio"]:
                low, high = run["ratio range"][name]
                lines.append(row(threads, name, f"{milliseconds:.2f} ms", f"{run['ratio'][name]:.2f}×",
                                 f"{low:.2f}–{high:.2f}"))
            else:
                lines.append(row(threads, name, f"{milliseconds:.2f} ms", "", ""))
    met = all(run["ratio"][record["targeted"]] <= record["target"] for run in record["threads"].values())
    lines += ["", f"Target: {record['targeted']} ≤ {record['target']}× PyTorch's at every thread count: "
              f"{'met' if met else 'missed'}.  {ran(record)}, PyTorch {record['torch']}; {record['rounds']} rounds "
              f"of {record['steps per round']} steps; {load(record)}"]
    return "\n".join(lines)


@table("performance-lstm-cnn")
def performance_lstm_cnn(_: str) -> str:
    """``benchmarks/lstm_step.py`` and ``cnn_step.py --out``: each kernel setting's run, each dtype a row."""
    lines = ["| step | OpenBLAS kernels | dtype | sgrad | PyTorch | products alone | sgrad ÷ PyTorch (rounds' range) "
             "| sgrad ÷ products | ≤ target |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    runs = []
    for name, label in (("lstm_step", "LSTM, batch 64, 256 units, T = 8, SGD"), ("cnn_step", "CNN, batch 64, Adam")):
        for path in sorted((ROOT / "docs/performance").glob(f"{name}*.json"), key=lambda p: (p.stem != name, p.stem)):
            record = json.loads(path.read_text())
            runs.append(record)
            kernels = record["machine"].split("OPENBLAS_CORETYPE=")[1]
            for dtype, run in record["dtypes"].items():
                low, high = run["ratio range"]
                lines.append(row(label, "default (unset)" if kernels == "unset" else kernels, dtype,
                                 f"{run['sgrad']:.2f} ms", f"{run['PyTorch']:.2f} ms", f"{run['products alone']:.2f} ms",
                                 f"{run['ratio']:.2f}× ({low:.2f}–{high:.2f})", f"{run['floor ratio']:.2f}×",
                                 f"{record['target']:g}×: {'met' if run['ratio'] <= record['target'] else 'missed'}"))
    lines.append("")
    lines += [f"- `{r['command']}` on {r['date']}: {r['machine']}; numpy {r['numpy']}, PyTorch {r['torch']}; "
              f"{r['threads']} thread; freed memory {'kept' if r.get('freed_memory_kept') else 'not kept'}; "
              f"{r['rounds']} rounds; load average {r['load'][0]:.2f} before, {r['load'][1]:.2f} after." for r in runs]
    return "\n".join(lines)


@table("performance-conv-paths")
def performance_conv_paths(_: str) -> str:
    """``benchmarks/conv_paths.py --out``: each convolution through the frequency domain and through the other path."""
    record = json.loads((ROOT / "docs/performance/conv_paths.json").read_text())
    lines = ["| batch, C_in, C_out, side, k, p | frame | r | r · min(C_in, C_out) | the rule takes | frequency domain "
             "| other path | frequency ÷ other |", "|---|---|---:|---:|---|---:|---:|---:|"]
    for run in record["rows"]:
        lines.append(row(", ".join(map(str, run["shape"])), "×".join(map(str, run["frame"])), f"{run['r']:.2f}",
                         f"{run['r times channels']:.1f}", "frequency domain" if run["rule"] else "other path",
                         f"{run['frequency domain ms']:.2f} ms", f"{run['other path ms']:.2f} ms",
                         f"{run['ratio']:.2f}×"))
    slower = [run for run in record["rows"] if run["rule"] and run["ratio"] > record["tolerance"]]
    lines += ["", f"Taken by the rule and more than {record['tolerance']:g}× slower there: "
              f"{len(slower) or 'none'}.  {ran(record)}; {record['dtype']}, {record['threads']} thread, freed memory "
              f"{'kept' if record['freed_memory_kept'] else 'not kept'}; {record['rounds']} rounds of "
              f"{record['repeats']} runs; {load(record)}"]
    return "\n".join(lines)


# --- parallel workers --------------------------------------------------------------------------------


@table("parallel-wall-clock")
def parallel_wall_clock(_: str) -> str:
    return markdown_tables("docs/parallel/wall-clock/results.md")[0]


@table("parallel-wall-clock-target")
def parallel_wall_clock_target(_: str) -> str:
    runs = {name: cell["history"] for name, cell in cells("docs/parallel/wall-clock").items()}
    backprop, cdni = runs["backprop-2"], runs["cdni-2"]
    target = backprop["test_accuracy"][-1] - 0.005
    reached = next(((i, t) for i, a, t in zip(cdni["iteration"], cdni["test_accuracy"], cdni["evaluation_time"])
                    if a >= target), None)
    when = "not within the run" if reached is None else f"at {reached[1]:.1f} s (iteration {reached[0]:,})"
    return "\n".join(["| target | cDNI reached it | locked backprop finished |", "|---|---:|---:|",
                      row(f"backprop's final test accuracy less 0.5 point: {percent(target)}", when,
                          f"at {backprop['wall_time']:.1f} s")])


@table("parallel-throughput")
def parallel_throughput(_: str) -> str:
    """``benchmarks/parallel.py --out docs/parallel/throughput``: its runs, the machine, the targets, the split."""
    record = read_json("docs/parallel/throughput/results.json")
    tables = markdown_tables("docs/parallel/throughput/results.md")
    text = (ROOT / "docs/parallel/throughput/results.md").read_text().splitlines()
    targets = [line for line in text if line.startswith(("- met:", "- MISSED:"))]
    split = next(line for line in text if line.startswith("Where a step's time goes"))
    return "\n\n".join([tables[0], tables[1], "\n".join(targets), split, tables[2],
                         f"`{record['command']}` on {record['date']}: {record['cpu']}; {record['cores']} cores; load "
                         f"average {record['load_average'][0]:.2f} before, {record['load_average'][1]:.2f} after."])


@table("parallel-speedup")
def parallel_speedup(_: str) -> str:
    """``benchmarks/parallel_speedup.py --out docs/parallel/speedup``: the speedup round by round, and its ceiling."""
    record = read_json("docs/parallel/speedup/results.json")
    text = (ROOT / "docs/parallel/speedup/results.md").read_text().splitlines()
    targets = [line for line in text if line.startswith(("- met:", "- MISSED:"))]
    return "\n\n".join([*markdown_tables("docs/parallel/speedup/results.md"), "\n".join(targets),
                         f"`{record['command']}` on {record['date']}: {len(record['rounds'])} rounds of "
                         f"{record['steps']} steps; {record['cpu']}; {record['cores']} cores; load average "
                         f"{record['load_average'][0]:.2f} before, {record['load_average'][1]:.2f} after."])


@table("parallel-forward-unlock")
def parallel_forward_unlock(_: str) -> str:
    return markdown_tables("docs/parallel/forward-unlock/results.md")[0]


@table("parallel-forward-unlock-simulator")
def parallel_forward_unlock_simulator(_: str) -> str:
    record = read_json("docs/parallel/forward-unlock/simulator.json")
    lines = ["| schedule | workers | measured examples/s | simulator's examples/s | simulator / measured |",
             "|---|---:|---:|---:|---:|"]
    for run in record["runs"]:
        lines.append(row(run["schedule"], run["workers"], f"{run['measured']:,.0f}", f"{run['predicted']:,.0f}",
                         f"{run['predicted'] / run['measured']:.2f}"))
    lines += ["", f"A message's transfer {1e3 * record['transfer']:.2f} ms and processor time "
                  f"{1e3 * record['message_cpu']:.2f} ms, {record['cores']} cores; load average "
                  f"{record['load'][0]:.2f} before the measurements, {record['load'][1]:.2f} after."]
    return "\n".join(lines)


@table("parallel-forward-unlock-steps")
def parallel_forward_unlock_steps(_: str) -> str:
    """Each schedule's rerun with every step's events (``benchmarks/parallel_steps.py``), worker by worker."""
    simulated = {run["schedule"]: run for run in read_json("docs/parallel/forward-unlock/simulator.json")["runs"]}
    lines = ["| schedule | worker | median step | mean step | computing | waiting | between events | slow steps "
             "(after an evaluation or the start) | what the slow steps add | the simulator's step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for schedule in ("backprop", "dni", "complete", "ccomplete"):
        record = read_json(f"docs/parallel/forward-unlock/steps-{schedule}.json")
        batch = record["config"]["batch_size"]
        for worker in record["per_worker"]:
            events = worker["events_ms"]
            computing = sum(ms for kind, ms in events.items() if kind != "wait")
            lines.append(row(schedule, worker["worker"], f"{worker['median_ms']:.2f} ms", f"{worker['mean_ms']:.2f} ms",
                             f"{computing:.2f} ms", f"{events.get('wait', 0.0):.2f} ms",
                             f"{worker['between_events_ms']:.2f} ms",
                             f"{worker['slow_steps']} ({worker['slow_after_evaluations']})",
                             f"{worker['slow_excess_ms']:.2f} ms",
                             f"{1e3 * batch / simulated[schedule]['predicted']:.2f} ms"))
        notes.append(f"{schedule}: `{record['command']}` on {record['date']}, {record['examples_per_second']:,.0f} "
                     f"examples/s (the comparison's run: {record['recorded_examples_per_second']:,.0f}), load average "
                     f"{record['load'][0]:.2f} before, {record['load'][1]:.2f} after")
    machines = {read_json(f"docs/parallel/forward-unlock/steps-{s}.json")["machine"]
                for s in ("backprop", "dni", "complete", "ccomplete")}
    return "\n".join(lines) + "\n\n" + "; ".join(notes) + ". " + "; ".join(sorted(machines)) + "."


# --- recurrent DNI -----------------------------------------------------------------------------------


@table("rnn-64")
def rnn_64(_: str) -> str:
    return markdown_tables("docs/rnn/results.md")[0]


@table("rnn-128")
def rnn_128(_: str) -> str:
    return markdown_tables("docs/rnn-h128/results.md")[0]


@table("char-lm")
def char_lm(_: str) -> str:
    runs = read_json("docs/rnn-char-lm/results.json")["runs"]
    columns = [("bptt", 1.0, "bptt"), ("dni", 1.0, "dni, γ = 1"), ("dni", 0.5, "dni, γ = 0.5")]
    lines = [row("seed", *(name for _, _, name in columns)), "|---:|" + "---|" * len(columns)]
    for seed in sorted({r["seed"] for r in runs}):
        found = {(r["method"], r["synthetic_scale"]): r for r in runs if r["seed"] == seed}
        lines.append(row(seed, *(" / ".join(f"{b:.3f}" for b in found[(m, g)]["valid_bpc"]) for m, g, _ in columns)))
    # M's regression loss: the highest of its means over the spans between measurements, per run.
    peaks = {g: [max(r["generator_loss"]) for r in runs if r["method"] == "dni" and r["synthetic_scale"] == g]
             for g in (1.0, 0.5)}
    lines += ["", f"Bits per character on the held-out text after {' / '.join(f'{s:,}' for s in runs[0]['step'])} "
                  "steps. M's regression loss, the highest of its means between two measurements, over the seeds: "
                  + "; ".join(f"{min(p):.3g} to {max(p):.3g} with γ = {g:g}" for g, p in peaks.items()) + "."]
    return "\n".join(lines)


@table("bp-lambda-cost")
def bp_lambda_cost(_: str) -> str:
    record = read_json("docs/rnn-lambda/cost.json")
    wall, cpu = record["seconds"], record["processor_seconds"]
    base = "one-window DNI"
    lines = ["| method | seconds per step | × one-window DNI | processor seconds per step | × one-window DNI |",
             "|---|---:|---:|---:|---:|"]
    for name in wall:
        ratios = [statistics.median(t / b for t, b in zip(times[name], times[base])) for times in (wall, cpu)]
        lines.append(row(name, f"{statistics.median(wall[name]):.4f}", f"{ratios[0]:,.1f}",
                         f"{statistics.median(cpu[name]):.4f}", f"{ratios[1]:,.1f}"))
    return "\n".join(lines)


# --- side by side with koz4k/dni-pytorch -------------------------------------------------------------


def ablation() -> dict:
    return read_json("docs/dni-pytorch/ablation.json")


def seeds_text(accuracies: list[float]) -> str:
    return f"{percent(statistics.mean(accuracies))} ({', '.join(f'{100 * a:.2f}' for a in accuracies)})"


def rows_of(method: str) -> list[dict]:
    return [r for r in ablation()["rows"] if r["method"] == method]


METHOD_NAMES = {"backprop": "backprop", "dni": "DNI", "cdni": "cDNI"}


@table("dni-pytorch-comparison")
def dni_pytorch_comparison(_: str) -> str:
    peer = ablation()["peer"]
    lines = ["| method | the peer | `sgrad paper` at the peer's setting | difference | `sgrad paper`'s default |",
             "|---|---:|---:|---:|---:|"]
    for method, name in METHOD_NAMES.items():
        ours, default = rows_of(method)[-1]["accuracy"], rows_of(method)[0]["accuracy"]
        difference = 100 * (statistics.mean(ours) - statistics.mean(peer[method]))
        lines.append(row(name, seeds_text(peer[method]), seeds_text(ours), signed(difference), seeds_text(default)))
    return "\n".join(lines)


@table("dni-pytorch-ablation")
def dni_pytorch_ablation(_: str) -> str:
    changes = [(r["change"], r["option"]) for r in rows_of("dni")]  # DNI takes every step of the ablation
    lines = ["| change | option | backprop | DNI | cDNI |", "|---|---|---:|---:|---:|"]
    for change, option in changes:
        found = {r["method"]: r["accuracy"] for r in ablation()["rows"] if r["change"] == change}
        lines.append(row(change, f"`{option}`" if option else "",
                         *(percent(statistics.mean(found[m])) if m in found else "" for m in METHOD_NAMES)))
    peer = ablation()["peer"]
    lines.append(row("the peer", "", *(percent(statistics.mean(peer[m])) for m in METHOD_NAMES)))
    return "\n".join(lines)


@table("dni-pytorch-interfaces")
def dni_pytorch_interfaces(_: str) -> str:
    dni = {r["change"]: r["accuracy"] for r in rows_of("dni")}
    other = {r["change"]: r["accuracy"] for r in ablation()["other"]}
    every_before = "an interface at every block, before the ReLU (the summed loss, sgrad's other defaults)"
    return "\n".join([
        "| DNI, `sgrad paper` | after the ReLU (ĝ = M(h)) | before the ReLU (ĝ = M(BN(z))) |", "|---|---:|---:|",
        row("one interface, at block 2 (`--interfaces 2`)", seeds_text(dni["+ one interface, at block 2"]),
            seeds_text(dni["+ before the ReLU"])),
        row("an interface at every block (`--interfaces every`, the default)", seeds_text(dni["sgrad paper's default"]),
            seeds_text(other[every_before]))])


@table("dni-pytorch-more")
def dni_pytorch_more(_: str) -> str:
    dni = {r["change"]: r["accuracy"] for r in rows_of("dni")}
    other = {r["change"]: r["accuracy"] for r in ablation()["other"]}
    return "\n".join([
        "| DNI, `sgrad paper`, seeds 0 to 2 | test accuracy |", "|---|---:|",
        row("one interface, before the ReLU, at the peer's whole setting (the ablation's last row)",
            seeds_text(dni["+ PyTorch's initial weights"])),
        row("an interface at every block, before the ReLU, at the peer's setting otherwise",
            seeds_text(other["an interface at every block, at the peer's setting otherwise"])),
        row("an interface at every block, after the ReLU, bootstrapped targets (the default)",
            seeds_text(dni["sgrad paper's default"])),
        row("the same with the true gradient as the targets (`--targets true`)",
            seeds_text(other["an interface at every block, after the ReLU, true-gradient targets"]))])


# --- koz4k/dni-pytorch's CNN and full-unlock examples, and the complete unlock ----------------------------

# Each example: the peer's records (``dni_pytorch_peer.py accuracy --out``), sgrad's ``sgrad paper`` folders
# (``seed<s>``), and the methods with their names on the page.
PEER_EXAMPLES = {
    "cnn": ("docs/dni-pytorch/cnn", PEER_CNN, {"backprop": "backprop", "dni": "DNI", "cdni": "cDNI"}),
    "full-unlock": ("docs/dni-pytorch/full-unlock", "docs/paper/full-unlock",
                    {"backprop": "backprop", "complete": "complete unlock", "ccomplete": "conditioned complete unlock"}),
}
# Runs of an example's methods with one setting changed, each a row under its method: (folder, what changed).
VARIANTS = {"full-unlock": [("docs/paper/full-unlock-peer-init",
                             "with the peer's generator start (`--generator-init pytorch`)")]}
WITHIN = 0.5  # points: the target for each method's mean final test accuracy against the peer's
TARGET_SEEDS = (0, 1, 2)  # the seeds the target is about; a method run on more gets a second row with all of them
LAST = 3  # the tests (one per epoch) at the end of a run whose mean shows a gap beside the last test's noise


def peer_records(folder: str) -> dict[str, dict[int, dict]]:
    """``{method: {seed: record}}`` of the peer's runs, one ``METHOD-seedS.json`` each in ``folder``."""
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted((ROOT / folder).glob("*-seed*.json")):
        record = json.loads(path.read_text())
        runs.setdefault(record["method"], {})[record["seed"]] = record
    return runs


def paper_seed_runs(folder: str) -> dict[str, dict[int, dict]]:
    """``{method: {seed: history}}`` of the ``sgrad paper`` runs in ``folder/seed<s>``."""
    runs: dict[str, dict[int, dict]] = {}
    for seed_folder in sorted((ROOT / folder).glob("seed*")):
        for cell in cells(str(seed_folder.relative_to(ROOT))).values():
            runs.setdefault(cell["settings"]["method"], {})[cell["settings"]["config"]["seed"]] = cell["history"]
    return runs


def side_by_side(example: str) -> str:
    peer_folder, sgrad_folder, names = PEER_EXAMPLES[example]
    peer, ours = peer_records(peer_folder), paper_seed_runs(sgrad_folder)
    lines = ["| method | the peer, seeds | the peer | `sgrad paper`, seeds | `sgrad paper` | difference "
             f"| its standard error | within {WITHIN:g} points | difference, mean of the last {LAST} tests |",
             "|---|---|---:|---|---:|---:|---:|---|---:|"]
    variants = [(paper_seed_runs(folder), change) for folder, change in VARIANTS.get(example, [])]
    for method, name in names.items():
        for runs, label in [(ours, name)] + [(v, f"{name}, {change}") for v, change in variants if method in v]:
            lines.append(side_by_side_row(label, only(peer[method], TARGET_SEEDS), only(runs[method], TARGET_SEEDS)))
            if set(peer[method]) | set(runs[method]) != set(TARGET_SEEDS):
                lines.append(side_by_side_row(f"{label}, every seed run", peer[method], runs[method]))
    return "\n".join(lines)


def only(runs: dict[int, dict], seeds: tuple[int, ...]) -> dict[int, dict]:
    return {seed: run for seed, run in runs.items() if seed in seeds}


def side_by_side_row(label: str, peer: dict[int, dict], ours: dict[int, dict]) -> str:
    """A method's row: each side's seeds and final test accuracy, the difference of the means and the target.

    The difference's standard error is the seeds' spread on each side, sqrt(s_peer² / n_peer + s_sgrad² / n_sgrad)
    with each side's sample standard deviation s over its n seeds: how far apart two means of so few seeds fall
    by the seeds alone.
    """
    theirs = [peer[s]["test_accuracy"] for s in sorted(peer)]
    mine = [final(ours[s]) for s in sorted(ours)]
    difference = 100 * (statistics.mean(mine) - statistics.mean(theirs))
    error = (100 * math.sqrt(statistics.variance(theirs) / len(theirs) + statistics.variance(mine) / len(mine))
             if min(len(theirs), len(mine)) > 1 else None)
    late = 100 * (statistics.mean(a for h in ours.values() for a in h["test_accuracy"][-LAST:])
                  - statistics.mean(t["test_accuracy"] for r in peer.values() for t in r["tests"][-LAST:]))
    return row(label, ", ".join(map(str, sorted(peer))), seeds_text(theirs), ", ".join(map(str, sorted(ours))),
               seeds_text(mine), signed(difference), "" if error is None else f"{error:.2f}",
               "met" if abs(difference) <= WITHIN else "missed", signed(late))


@table("complete-unlock-cnn")
def complete_unlock_cnn(_: str) -> str:
    return side_by_side("cnn")


@table("complete-unlock-full-unlock")
def complete_unlock_full_unlock(_: str) -> str:
    return side_by_side("full-unlock")


STEP_TIMES = {"cnn": "docs/dni-pytorch/step-time-cnn.json", "full-unlock": "docs/dni-pytorch/step-time-full-unlock.json"}


@table("complete-unlock-step-time")
def complete_unlock_step_time(_: str) -> str:
    """sgrad's step against the peer's, each example's record of ``dni_pytorch_peer.py time --out``."""
    lines = ["| example | method | `sgrad paper`, ms per step | the peer, ms per step | sgrad ÷ peer, wall "
             "(rounds' range; pairs' medians) | sgrad ÷ peer, processor time | ≤ 1.0× |",
             "|---|---|---:|---:|---:|---:|---|"]
    notes = []
    for example, path in STEP_TIMES.items():
        record = read_json(path)
        names = PEER_EXAMPLES[example][2]
        for measured in record["methods"]:
            ours = measured["sgrad"][0]
            wall = [a / b for a, b in zip(ours["seconds"], measured["peer_seconds"])]
            cpu = [a / b for a, b in zip(ours["processor_seconds"], measured["peer_processor_seconds"])]
            ratio = statistics.median(wall)
            spread = f"{min(wall):.2f}–{max(wall):.2f}"
            pair_of_round = measured.get("pair", [0] * len(wall))
            if len(set(pair_of_round)) > 1:  # each pair's own median, to show how much a fresh process moves it
                medians = [statistics.median(r for r, p in zip(wall, pair_of_round) if p == pair)
                           for pair in sorted(set(pair_of_round))]
                spread += f"; pairs {min(medians):.2f}–{max(medians):.2f}"
            lines.append(row(example, names[measured["method"]], f"{1e3 * statistics.median(ours['seconds']):.2f}",
                             f"{1e3 * statistics.median(measured['peer_seconds']):.2f}",
                             f"{ratio:.2f}× ({spread})", f"{statistics.median(cpu):.2f}×",
                             "met" if ratio <= 1.0 else "missed"))
        pairs = record.get("processes", 1)
        in_pairs = f"{pairs} pairs of fresh processes, one after the other, each " if pairs > 1 else ""
        notes.append(f"{example}: `{record['command']}` on {record['date']}, {in_pairs}{record['rounds']} rounds of "
                     f"{record['seconds_per_side']:g} s a side, load average {record['load_average_before'][0]:.2f} "
                     f"before and {record['load_average_after'][0]:.2f} after")
    machine = {read_json(path)["machine"] for path in STEP_TIMES.values()}
    versions = {(read_json(path)["numpy"], read_json(path)["torch"]) for path in STEP_TIMES.values()}
    return "\n".join(lines) + ("\n\n" + "; ".join(notes) + ". " + "; ".join(sorted(machine))
                               + "; " + "; ".join(f"NumPy {n}, PyTorch {t}" for n, t in sorted(versions)) + ".")


@table("complete-unlock-wall-clock")
def complete_unlock_wall_clock(_: str) -> str:
    """Each schedule of ``docs/parallel/forward-unlock`` against locked backprop: its wall time, and its accuracy
    at the last evaluation before locked backprop had finished."""
    runs = {cell["history"]["schedule"]: cell["history"] for cell in cells("docs/parallel/forward-unlock").values()}
    backprop = runs["backprop"]
    lines = ["| schedule, 2 workers | wall time to "
             f"{backprop['iteration'][-1]:,} steps | × locked backprop's | test accuracy at {backprop['iteration'][-1]:,} "
             f"steps | test accuracy when locked backprop finished ({backprop['wall_time']:.1f} s) |",
             "|---|---:|---:|---:|---:|"]
    for schedule in [s for s in ("backprop", "dni", "cdni", "complete", "ccomplete") if s in runs]:
        history = runs[schedule]
        by_then = [a for a, t in zip(history["test_accuracy"], history["evaluation_time"]) if t <= backprop["wall_time"]]
        lines.append(row(schedule, f"{history['wall_time']:.1f} s", f"{history['wall_time'] / backprop['wall_time']:.2f}×",
                         percent(history["test_accuracy"][-1]), percent(by_then[-1]) if by_then else ""))
    return "\n".join(lines)


# --- the README ----------------------------------------------------------------------------------------


@table("grade-class")
def grade_class(_: str) -> str:
    """A class graded with and without the sandbox, from ``benchmarks/grade_class.py --out``."""
    record = read_json("docs/grading/class.json")
    sandboxed, bare = record["sandboxed_seconds"], record["unsandboxed_seconds"]
    cost = [(s - b) * record["jobs"] / record["notebooks"] for s, b in zip(sandboxed, bare)]
    lines = [f"| grading, {record['notebooks']} notebooks, `--jobs {record['jobs']}` | "
             + " | ".join(f"round {n + 1}" for n in range(len(sandboxed))) + " | median |",
             "|---|" + "---:|" * (len(sandboxed) + 1)]
    for label, times in (("in the sandbox", sandboxed), ("`--no-sandbox`", bare)):
        lines.append(f"| {label} | " + " | ".join(f"{t:.1f} s" for t in times) + f" | {statistics.median(times):.1f} s |")
    lines.append("| the sandbox's cost per notebook, a core's time | " + " | ".join(f"{c:.2f} s" for c in cost)
                 + f" | {statistics.median(cost):.2f} s |")
    return "\n".join(lines) + (f"\n\n`{record['command']}` on {record['date']}: {record['machine']}; load average "
                                f"{record['load_average'][0]} before, {record['load_average'][1]} after.")


def notebook_time(seconds_taken: float) -> str:
    return f"{seconds_taken:.0f} s" if seconds_taken < 90 else f"{seconds_taken / 60:.1f} min"


@table("readme-notebooks")
def readme_notebooks(current: str) -> str:
    """The course's table as it stands, its last column (the time at full size) from docs/notebook-times.json."""
    times = read_json("docs/notebook-times.json")["notebooks"]
    lines = current.strip().splitlines()
    out = lines[:2]
    for line in lines[2:]:
        notebook, *middle, _ = [cell.strip() for cell in line.strip().strip("|").split("|")]
        stem = re.match(r"`(\w+)`", notebook).group(1)
        out.append(row(notebook, *middle, notebook_time(times[stem]["seconds"])))
    return "\n".join(out)


@table("readme-results")
def readme_results(_: str) -> str:
    compare = compare_final()
    reproduction = {m: final(h) for (m, _), h in paper_results("docs/paper/reproduction").items()}
    mlp = paper_results("docs/paper/depth-sweep-mlp")
    depths = sorted({d for _, d in mlp})
    gap = max(final(mlp[("backprop", d)]) - final(mlp[("dni", d)]) for d in depths)
    cnn = {m: final(h) for (m, _), h in paper_results("docs/paper/cnn").items()}
    rnn = {(r[0], r[1]): [c.split(" ")[0] for c in r[2:]] for r in table_rows(markdown_tables("docs/rnn/results.md")[0])}
    windows = [c.strip().removeprefix("T = ") for c in markdown_tables("docs/rnn/results.md")[0].splitlines()[0]
               .strip("|").split("|")[2:]]
    parallel = {r[0]: r for r in table_rows(markdown_tables("docs/parallel/wall-clock/results.md")[0])}
    peer, ours = ablation()["peer"], {m: rows_of(m)[-1]["accuracy"] for m in METHOD_NAMES}
    steps = read_json("docs/performance/results.json")["steps"]["backprop, BN, f32"]["ratios"]
    cnn_peer, cnn_ours = peer_records(PEER_EXAMPLES["cnn"][0]), paper_seed_runs(PEER_EXAMPLES["cnn"][1])
    unlock_peer = peer_records(PEER_EXAMPLES["full-unlock"][0])
    unlock_ours = paper_seed_runs(VARIANTS["full-unlock"][0][0])

    def mean(values: list[float]) -> str:
        return percent(statistics.mean(values))

    def peer_mean(records: dict[int, dict]) -> str:  # over the target's seeds, as the page's first rows
        return mean([record["test_accuracy"] for record in only(records, TARGET_SEEDS).values()])

    def our_mean(histories: dict[int, dict]) -> str:
        return mean([final(history) for history in only(histories, TARGET_SEEDS).values()])

    lines = ["| page | command | what it found |", "|---|---|---|",
             row("[Binary addition](docs/results/compare.md)", "`sgrad compare`",
                 f"held-out bits: backprop {compare['backprop']}%, no backprop {compare['no-bprop']}%, "
                 f"DNI {compare['dni']}%, cDNI {compare['cdni']}%"),
             row("[MNIST](docs/results/mnist.md)", "`sgrad paper`",
                 f"the paper's 3-layer net, 25,000 iterations: backprop {percent(reproduction['backprop'])}, "
                 f"cDNI {percent(reproduction['cdni'])}, DNI {percent(reproduction['dni'])}, no backprop "
                 f"{percent(reproduction['no-bprop'])}; DNI within {100 * gap:.2f} points of backprop at every depth "
                 f"from {depths[0]} to {depths[-1]} (generators at 3e-4)"),
             row("[Convolutional nets](docs/results/convolution.md)", "`sgrad paper --arch cnn`",
                 f"16 channels, 1,500 steps: backprop {percent(cnn['backprop'])}, cDNI {percent(cnn['cdni'])}, "
                 f"DNI {percent(cnn['dni'])}, no backprop {percent(cnn['no-bprop'])}"),
             row("[Recurrent DNI](docs/results/recurrent.md)", "`sgrad rnn`",
                 f"Copy: the most vectors N copied (median of 3 seeds), with truncation windows of T = "
                 f"{', '.join(windows)} steps: truncated BPTT {', '.join(rnn[('copy', 'bptt')])}; DNI "
                 f"{', '.join(rnn[('copy', 'dni')])}"),
             row("[Parallel workers](docs/results/parallel.md)", "`sgrad parallel`",
                 f"2 workers, 5,000 steps: cDNI {parallel['cdni'][2]} examples/s against locked backprop's "
                 f"{parallel['backprop'][2]}, ending at {parallel['cdni'][4]} and {parallel['backprop'][4]}"),
             row("[Side by side with koz4k/dni-pytorch](docs/results/dni-pytorch.md)", "`sgrad paper` at its setting",
                 f"backprop {mean(ours['backprop'])}, DNI {mean(ours['dni'])}, cDNI {mean(ours['cdni'])} against its "
                 f"{mean(peer['backprop'])}, {mean(peer['dni'])}, {mean(peer['cdni'])}"),
             row("[The complete unlock, beside koz4k/dni-pytorch's CNN and full-unlock examples]"
                 "(docs/results/complete-unlock.md)", "`sgrad paper --arch peer-cnn`; `--methods complete,ccomplete`",
                 f"CNN: DNI {our_mean(cnn_ours['dni'])}, cDNI {our_mean(cnn_ours['cdni'])} against its "
                 f"{peer_mean(cnn_peer['dni'])}, {peer_mean(cnn_peer['cdni'])}; complete unlock "
                 f"{our_mean(unlock_ours['complete'])}, conditioned {our_mean(unlock_ours['ccomplete'])} against its "
                 f"{peer_mean(unlock_peer['complete'])}, {peer_mean(unlock_peer['ccomplete'])} (generators started as "
                 "PyTorch starts them)"),
             row("[Performance](docs/results/performance.md)", "`benchmarks/performance.py`",
                 f"a backprop step in {steps['torch']:.2f}× PyTorch's time and {steps['limit']:.2f}× its matrix "
                 f"products")]
    return "\n".join(lines)


# --- the pages ---------------------------------------------------------------------------------------------


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def rewrite(text: str) -> str:
    """``text`` with every marked table written from its records; KeyError for a table with no writer."""
    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in TABLES:
            raise KeyError(f"no table named {name!r} in docs/tables.py")
        return f"{match.group(1)}{TABLES[name](match.group('body')).strip()}\n{match.group(4)}"
    return MARKED.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit status 1 if a table differs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # sgrad's own formatting of a command's table, from this checkout
    stale, used = [], set()
    for page in pages():
        text = page.read_text()
        used.update(match.group("name") for match in MARKED.finditer(text))
        try:
            new = rewrite(text)
        except KeyError as error:
            print(f"{page.relative_to(ROOT)}: {error.args[0]}", file=sys.stderr)
            return 1
        if new != text:
            stale.append(page.relative_to(ROOT))
            if not args.check:
                page.write_text(new)
    unused = sorted(set(TABLES) - used)
    if unused:
        print(f"no page marks the tables {', '.join(unused)}", file=sys.stderr)
    if stale:
        print(f"{'differ from their records' if args.check else 'rewrote'}: {', '.join(map(str, stale))}",
              file=sys.stderr)
    return 1 if (unused or (stale and args.check)) else 0


if __name__ == "__main__":
    sys.exit(main())
