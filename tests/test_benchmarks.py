"""The benchmarks' own pieces: the flat NumPy floor computes sgrad's step, the limit counts the products, the
profiling loop runs a row and sums a profile, the CNN benchmark's two sides take the same step, the copy diagnosis
and the parallel benchmark run and print what they say they do."""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import assert_group_ends, started

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
performance = pytest.importorskip("performance")


def test_the_fused_numpy_floor_takes_the_same_step_as_sgrad():
    fused = performance.fused_numpy_step(seed=0)
    cells = dict(zip(fused.__code__.co_freevars, (cell.cell_contents for cell in fused.__closure__)))
    step, layers = performance.sgrad_step(performance.CASES[0], seed=0)
    layers[0].modules[0].weights[...] = cells["w1"]
    layers[1].modules[0].weights[...] = cells["w2"]
    layers[2].weights[...] = cells["w3"]
    w3_before = cells["w3"].copy()
    w1, norm1, w2, norm2, w3, b3 = fused()
    step()
    pairs = [(layers[0].modules[0].weights, w1), (layers[1].modules[0].weights, w2), (layers[2].weights, w3),
             (layers[2].bias, b3), (layers[0].modules[1].gamma, norm1[0]), (layers[0].modules[1].beta, norm1[1]),
             (layers[1].modules[1].gamma, norm2[0]), (layers[1].modules[1].beta, norm2[1])]
    for k, (mine, floor) in enumerate(pairs):
        np.testing.assert_allclose(mine, floor, rtol=1e-5, atol=1e-7, err_msg=f"parameter {k}")
    assert np.abs(w3 - w3_before).max() > 1e-6  # the step moved the weights


def test_the_limit_counts_the_products_sgrads_backprop_step_does():
    _, layers = performance.sgrad_step(performance.CASES[0])
    plan, gflop = performance.matmul_plan(layers, performance.BATCH, np.dtype("float32"))
    # 784-256 (forward, weight gradient; its input is data), 256-256 and 256-10 (three each).
    assert len(plan) == 8
    batch = performance.BATCH
    expected = 2 * batch * (2 * 784 * 256 + 3 * 256 * 256 + 3 * 256 * 10) / 1e9
    assert gflop == pytest.approx(expected, rel=1e-12)


def test_the_profiling_loop_runs_a_benchmark_row_and_reports_its_time():
    script = pathlib.Path(performance.__file__).with_name("profile_step.py")
    result = subprocess.run([sys.executable, str(script), "--case", "1", "--steps", "3"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"\d+\.\d{3} ms per step\n", result.stdout), result.stdout


def test_profile_shares_count_the_innermost_sgrad_line_of_each_sample_inside_a_step():
    profile_step = pytest.importorskip("profile_step")
    step = "<module> (profile_step.py:9);backprop_step (/x/sgrad/dni/steps.py:36)"
    lines = [f"{step};linear_forward (/x/sgrad/nn/kernels.py:51) 6",
             f"{step};Sequential.forward (/x/sgrad/blocks.py:109);batchnorm_forward (/x/sgrad/batchnorm.py:28);"
             "einsum (/x/numpy/_core/einsumfunc.py:1610) 3",
             f"{step} 1",
             "<module> (profile_step.py:3);_find_and_load (<frozen importlib._bootstrap>:1176) 50"]
    total, rows = profile_step.shares(lines)
    assert total == 10
    assert rows == [(0.6, "linear_forward (kernels.py:51)"), (0.3, "batchnorm_forward (batchnorm.py:28)"),
                    (0.1, "backprop_step (steps.py:36)")]


def test_the_compare_step_benchmark_times_each_methods_step_and_evaluation():
    script = pathlib.Path(performance.__file__).with_name("compare_step.py")
    result = subprocess.run([sys.executable, str(script), "--methods", "no-bprop", "cdni", "--steps", "3",
                             "--evaluations", "1"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["no-bprop", "cdni"]
    assert all(float(value) > 0 for row in rows for value in row[1:])


def test_compare_step_shares_go_to_the_kind_of_the_innermost_sgrad_frame_that_names_one():
    compare_step = pytest.importorskip("compare_step")
    kernels = pathlib.Path(compare_step.SOURCE, "sgrad", "nn", "kernels.py").read_text().splitlines()
    product = next(k for k, line in enumerate(kernels, start=1) if " @ " in line)
    bias = next(k for k, line in enumerate(kernels, start=1) if "z += bias" in line)
    step = "<module> (compare_step.py:9);dni_step (sgrad/dni/steps.py:60);Layer.forward (sgrad/nn/layers.py:81)"
    lines = [f"{step};linear_forward (sgrad/nn/kernels.py:{product}) 5",
             f"{step};linear_forward (sgrad/nn/kernels.py:{bias}) 1",
             f"{step};check_batch (sgrad/argument_checks.py:150);_all (numpy/_core/_methods.py:70) 2",
             "<module> (compare_step.py:9);dni_step (sgrad/dni/steps.py:60);OwnParameters.update (sgrad/nn/module.py:143);"
             "Adam.step (sgrad/nn/optimizers.py:80);_check_gradient (sgrad/nn/optimizers.py:115) 1",
             f"{step} 1",
             "<module> (compare_step.py:3);_find_and_load (<frozen importlib._bootstrap>:1176) 50"]
    total, rows = compare_step.shares(lines)
    assert total == 10
    assert rows == [(0.5, "matrix products"), (0.3, "input checks"), (0.1, "elementwise maths"),
                    (0.1, compare_step.OTHER)]


def test_the_cnn_benchmark_times_the_same_step_on_both_sides():
    """From the same weights, sgrad's CNN step and PyTorch's reach the same loss and the same weights."""
    pytest.importorskip("torch")
    cnn_step = pytest.importorskip("cnn_step")
    for rule in ("sgd", "adam"):
        x, y = cnn_step.batch_of(4, np.dtype(np.float64), seed=0)
        loss_gap, weight_gap = cnn_step.same_step(x, y, rule)
        assert loss_gap < 1e-12 and weight_gap < 1e-12, f"{rule}: loss {loss_gap:.1e}, weights {weight_gap:.1e} apart"


def test_the_convolution_paths_benchmark_times_two_paths_that_compute_the_same_convolution():
    """conv_paths' two sides: the frequency domain where the rule takes it, and the path without it, give the same
    z and gradients (within float64 rounding); a row names the rule's choice and both times."""
    conv_paths = pytest.importorskip("conv_paths")
    shape = (2, 16, 32, 8, 5, 2)  # the rule takes it: r = 64 * 25 / (4 * 10 * 6), times 16
    x, weights, bias, dz = conv_paths.arrays(shape, np.dtype(np.float64))
    frequency = conv_paths.both_passes(x, weights, bias, dz, 2, True)
    other = conv_paths.both_passes(x, weights, bias, dz, 2, False)
    for name, ours, theirs in zip(("z", "dL/dx", "dL/dW", "dL/db"), frequency, other):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-10 * float(np.max(np.abs(theirs))), err_msg=name)
    row = conv_paths.measure(shape, "float64", rounds=1, repeats=1)
    assert row["rule"] and row["frame"] == [10, 10] and abs(row["r"] - 1600 / 240) < 1e-12
    assert row["frequency domain ms"] > 0 and row["other path ms"] > 0 and row["ratio"] > 0


@pytest.mark.skipif(not pathlib.Path("/proc/cpuinfo").exists(), reason="reads the CPU's flags from /proc/cpuinfo")
def test_the_machine_line_says_whether_the_cpu_has_avx512_as_its_flags_do(monkeypatch):
    import machine

    flags = next(line for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    line = machine.describe()
    assert f"(AVX-512: {'yes' if 'avx512f' in flags.split() else 'no'})" in line
    assert line.endswith("; OPENBLAS_CORETYPE=Haswell")
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert machine.describe().endswith("; OPENBLAS_CORETYPE=unset")


def test_the_copy_diagnosis_prints_a_row_of_scores_per_method_and_the_linear_ceiling(capsys):
    copy_diagnosis = pytest.importorskip("copy_diagnosis")
    copy_diagnosis.main(["--length", "2", "--window", "2", "--steps", "20", "--every", "10", "--ceiling"])
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in copy_diagnosis.METHODS}
    assert list(rows) == list(copy_diagnosis.METHODS)
    for row in rows.values():
        scores = [float(value) for value in row.split()[1:3]]
        assert all(0 <= score <= 2 * 8 for score in scores), row  # wrong bits of 2 vectors of 8 bits
    ceilings = [line for line in lines if "cosine with the true gradient" in line]
    cosines = [float(c) for line in ceilings for c in re.findall(r"(?:best linear map|the generator) (-?[\d.]+)", line)]
    assert len(cosines) == 2 + 4 + 4  # boundaries s_2 and s_4 of a 5-step sequence: bptt 1 each, the DNIs 2 each
    assert all(-1 <= c <= 1 for c in cosines)
    assert len(ceilings) == 3  # every method but full BPTT, which has no boundary
    assert all("s_2: best linear map" in line for line in ceilings)
    assert "the generator" not in ceilings[0] and "the generator" in ceilings[1]  # bptt has no generator
    states = [re.search(r"mean \|h\| ([\d.]+), \|h\| > 0.95: (\d+)%, mean \|c\| ([\d.]+)", line)
              for line in lines if "state after the delimiter" in line]
    assert len(states) == len(copy_diagnosis.METHODS) and all(states)
    for found in states:
        mean_h, saturated, mean_c = float(found[1]), int(found[2]), float(found[3])
        assert 0 < mean_h < 1 and 0 <= saturated <= 100 and mean_c > 0


def test_the_copy_diagnosis_dni_held_for_every_step_trains_exactly_as_truncated_bptt(capsys):
    copy_diagnosis = pytest.importorskip("copy_diagnosis")

    def rows(*extra):
        copy_diagnosis.main(["--length", "2", "--window", "2", "--steps", "40", "--every", "10",
                             "--methods", "bptt,dni", *extra])
        lines = capsys.readouterr().out.splitlines()
        return {line.split()[0]: line.split()[1:5] for line in lines if line.split()[:1] in (["bptt"], ["dni"])}

    held = rows("--hold", "40")
    assert held["dni"] == held["bptt"]  # ĝ weighted 0 at every step: the same core, the same scores
    warmed = rows("--hold", "10", "--ramp", "10")
    assert warmed["dni"][0] == warmed["bptt"][0]  # the same until step 10
    assert warmed["dni"][1:] != warmed["bptt"][1:]  # then ĝ enters


def test_the_parallel_benchmark_writes_its_table_and_leaves_no_worker_behind(tmp_path):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "parallel.py"
    with started([sys.executable, str(script), "--steps", "16", "--repeats", "1", "--out", str(tmp_path)]) as run:
        _, stderr = run.communicate(timeout=600)
    assert run.returncode in (0, 1), stderr  # 1: a target missed, which 16 steps say nothing about
    assert_group_ends(run.pid, "the benchmark's group")  # no worker outlived it
    rows = {cells[0]: cells[1:] for cells in (line.strip("| ").split(" | ") for line in
                                              (tmp_path / "results.md").read_text().splitlines())
            if cells[0].endswith(("one process", "worker", "workers"))}
    assert sorted(rows) == ["backprop, local, 1 worker", "backprop, local, 2 workers", "backprop, one process",
                            "dni, local, 1 worker", "dni, local, 2 workers", "dni, one process"]
    for name, cells in rows.items():
        assert float(cells[0].split()[0].replace(",", "")) > 0, name  # examples per second
        if name.endswith("1 worker"):
            # One worker has no message to wait for and no neighbour: its steady state is the compute the simulator is
            # given.  16 steps on a shared machine say little about the simulator's precision (the benchmark's own
            # target, on a quiet machine); a wrong unit would be off by a factor of a thousand.
            assert -90 < float(cells[2].rstrip("%")) < 900, (name, cells)
    measured = json.loads((tmp_path / "results.json").read_text())
    machine = measured["machine"]["local"]
    assert machine["transfer"] > 0 and machine["message_cpu"] > 0
    assert set(machine["wake"]) == set(machine["contention"]) == {"dni", "backprop"}
    assert all(value >= 0 for value in [*machine["wake"].values(), *machine["contention"].values()])
    assert "| local | " in (tmp_path / "results.md").read_text()  # the machine's table
    assert len(measured["runs"]) == 6 and len(measured["computing_seconds_per_step"]) == 4
    # Where the 2 workers' DNI step goes: each worker's events and the rest add up to the step the run measured.
    where = {(w["method"], w["workers"]): w["seconds_per_step"][0] for w in measured["where_the_time_goes"]}
    assert sorted(where) == [("backprop", 1), ("backprop", 2), ("dni", 1), ("dni", 2)]
    rate = {(r["method"], r["workers"]): r["examples_per_second"][0] for r in measured["runs"] if r["engine"] == "local"}
    [rate_one_process] = [r["examples_per_second"][0] for r in measured["runs"]
                          if (r["method"], r["engine"]) == ("dni", "one process")]
    for key, workers in where.items():
        assert sorted(workers) == [str(k) for k in range(key[1])], key  # JSON's keys
        for shares in workers.values():
            assert abs(sum(shares.values()) - 256 / rate[key]) < 1e-9, (key, shares)
            assert min(shares[kind] for kind in shares if kind != "other") > 0, (key, shares)
    assert where[("dni", 2)]["0"]["dni"] > 0 and where[("dni", 2)]["1"]["update"] > 0
    table = (tmp_path / "results.md").read_text().split("Where a step's time goes")[1]
    assert "| worker 0 | " in table and "| worker 1 | " in table and "| half the single-process step |" in table
    # Each worker's share of the work outside the pipeline, alone and both at once: a step of its own, in the table's
    # step column, and the single-process step over it in the last.
    single = 256 / rate_one_process
    for label, key in (("alone", "dni_shares_alone"), ("both at once", "dni_shares_outside_the_pipeline")):
        shares = measured[key]
        assert len(shares) == 1 and sorted(shares[0]) == ["0", "1"] and min(shares[0].values()) > 0, shares
        for worker, seconds in shares[0].items():
            cells = table.split(f"| worker {worker}'s share outside the pipeline, {label} |")[1].split("\n")[0]
            assert cells.strip(" |").split(" | ")[-2:] == [f"{1e3 * seconds:.2f}", f"{single / seconds:.2f}"], cells
    for worker in "01":
        cells = table.split(f"| worker {worker} |")[1].split("\n")[0].strip(" |").split(" | ")
        assert abs(float(cells[-1]) - single / float(cells[-2]) * 1e3) < 0.01, cells  # the step is rounded to 0.01 ms
    assert table.split("| half the single-process step |")[1].split("\n")[0].strip(" |").split(" | ")[-2:] == [
        f"{1e3 * single / 2:.2f}", "2.00"]
    # The simulator's input: each block's times, measured in every repeat (here one), 2 hidden blocks and the top.
    timed = measured["block_times"]
    assert sorted(timed) == ["backprop", "dni"] and all(len(repeats) == 1 for repeats in timed.values()), timed
    for method, [repeat] in timed.items():
        assert len(repeat["blocks"]) == 2 and repeat["top"] > 0, (method, repeat)
        assert all(block["forward"] > 0 and block["update"] > 0 for block in repeat["blocks"]), (method, repeat)
    assert all(block["generator"] > 0 and block["regression"] > 0 for block in timed["dni"][0]["blocks"])
    assert all(block["generator"] == 0 for block in timed["backprop"][0]["blocks"])


def test_the_speedup_benchmark_pairs_its_rounds_and_reports_them_as_measured_leaving_no_worker_behind(tmp_path):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "parallel_speedup.py"
    with started([sys.executable, str(script), "--rounds", "2", "--steps", "16", "--out", str(tmp_path)]) as run:
        stdout, stderr = run.communicate(timeout=600)
    assert run.returncode in (0, 1), stderr  # 1: the target missed, which 16 steps say nothing about
    assert_group_ends(run.pid, "the benchmark's group")  # no worker outlived it
    record = json.loads((tmp_path / "results.json").read_text())
    rounds = record["rounds"]
    assert len(rounds) == 2 and all(sorted(r) == ["2 workers", "one process", "shares at once"] for r in rounds)
    assert all(rate > 0 for r in rounds for rate in r.values())
    speedups = [r["2 workers"] / r["one process"] for r in rounds]
    assert record["ratios"]["2 workers / one process"] == speedups
    assert record["ratios"]["2 workers / shares at once"] == [r["2 workers"] / r["shares at once"] for r in rounds]
    assert stderr.count("round ") == 2 and f"speedup {speedups[1]:.3f}" in stderr
    text = (tmp_path / "results.md").read_text()
    assert text == stdout
    row = text.split("| 2 workers / one process | ")[1].split("\n")[0].strip(" |").split(" | ")
    low, high = sorted(speedups)
    assert row[0] == f"{np.median(speedups):.3f}" and row[2] == f"{low:.3f}-{high:.3f}", row
    assert row[3] == f"{sum(s >= 1.9 for s in speedups)} of 2", row
    verdict = "met" if np.median(speedups) >= 1.9 else "MISSED"
    assert f"- {verdict}: the median speedup" in text and run.returncode == (0 if verdict == "met" else 1)
    for kind in ("one process", "2 workers", "shares at once"):
        rates = [r[kind] for r in rounds]
        assert f"| {kind} | {np.median(rates):,.0f} | {min(rates):,.0f}-{max(rates):,.0f} |" in text
    bad = subprocess.run([sys.executable, str(script), "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "--rounds: expected a whole number of at least 1, got '0'" in bad.stderr


def tiny_comparison(tmp_path, schedules, iterations, eval_every):
    """The folder of a finished ``sgrad parallel`` comparison on 2 workers, tiny MNIST, hidden 16, batch 8."""
    from conftest import tiny_mnist

    sgrad_command = pathlib.Path(sys.executable).parent / "sgrad"
    comparison = subprocess.run(
        [str(sgrad_command), "parallel", "--schedules", schedules, "--workers", "2", "--iterations", str(iterations),
         "--eval-every", str(eval_every), "--hidden", "16", "--batch-size", "8", "--no-verify", "--data",
         str(tiny_mnist(tmp_path)), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert comparison.returncode == 0, comparison.stderr
    return tmp_path / "out"


def test_the_simulator_against_a_comparison_reads_its_runs_and_predicts_each_leaving_no_worker_behind(tmp_path):
    tiny_comparison(tmp_path, "backprop,dni,complete", 6, 3)
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "parallel_unlock.py"
    with started([sys.executable, str(script), str(tmp_path / "out")]) as run:
        stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr
    assert_group_ends(run.pid, "the benchmark's group")  # no worker-like process outlived it
    record = json.loads((tmp_path / "out" / "simulator.json").read_text())
    histories = json.loads((tmp_path / "out" / "histories.json").read_text())
    assert [(r["schedule"], r["workers"]) for r in record["runs"]] == [("backprop", 2), ("dni", 2), ("complete", 2)]
    assert record["transfer"] > 0 and len(record["load"]) == 2
    for run_record, history in zip(record["runs"], histories["runs"]):
        steps = history["history"]["iteration"][-1] - history["history"]["iteration"][0]
        seconds = history["history"]["evaluation_time"][-1] - history["history"]["evaluation_time"][0]
        assert run_record["measured"] == pytest.approx(steps * 8 / seconds)
        assert run_record["predicted"] > 0
        inputs = [b["synthetic_input"] > 0 and b["input_regression"] > 0 for b in run_record["blocks"]]
        assert inputs == [run_record["schedule"] == "complete"] * 2  # only the complete unlock has input generators
    assert "| complete | 2 | " in stdout


def test_the_step_by_step_timeline_reruns_a_schedule_and_accounts_for_every_step_leaving_no_worker_behind(tmp_path):
    tiny_comparison(tmp_path, "backprop,dni", 12, 4)
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "parallel_steps.py"
    command = [sys.executable, str(script), str(tmp_path / "out"), "--schedule", "dni", "--examples", "64", "--test", "16"]
    with started(command) as run:
        stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr
    assert_group_ends(run.pid, "the benchmark's group")  # no worker outlived it
    record = json.loads((tmp_path / "out" / "steps-dni.json").read_text())
    assert record["schedule"] == "dni" and record["workers"] == 2 and len(record["per_worker"]) == 2
    for worker in record["per_worker"]:
        assert worker["steps"] == 11  # 12 steps: the time from each step's start to the next one's
        assert worker["median_ms"] > 0 and worker["mean_ms"] > 0
        assert worker["between_events_ms"] >= 0  # a step's events lie within its span: none counted twice
        assert worker["percentiles_ms"]["10"] <= worker["median_ms"] <= worker["percentiles_ms"]["90"]
        assert 0 <= worker["slow_after_evaluations"] <= worker["slow_steps"] <= 11
    assert {"forward", "update", "dni"} <= set(record["per_worker"][0]["events_ms"])
    assert "| 0 | " in stdout and "| 1 | " in stdout
    with started([sys.executable, str(script), str(tmp_path / "out"), "--schedule", "complete"]) as run:
        _, stderr = run.communicate(timeout=60)
    assert run.returncode != 0 and stderr.strip().splitlines()[-1].startswith("parallel_steps.py: ")
    assert "no run of 'complete'" in stderr


# --- the peer koz4k/dni-pytorch (its code and PyTorch run in an environment of their own; here only the adapter) ---


@pytest.mark.parametrize("command", ["accuracy", "time"])
def test_the_peer_adapter_without_the_peer_ends_in_one_line_that_says_what_to_give(tmp_path, command):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    env = {key: value for key, value in os.environ.items() if key not in ("DNI_PYTORCH", "DNI_PYTORCH_PYTHON")}
    result = subprocess.run([sys.executable, str(script), command, "--peer", str(tmp_path / "absent"),
                             "--data", str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"dni_pytorch_peer: no peer at '{tmp_path / 'absent'}': give --peer (or $DNI_PYTORCH), the folder of a "
        "checkout of koz4k/dni-pytorch holding examples/mnist-mlp/main.py"]


def test_the_peer_adapters_sgrad_side_builds_the_peers_network_and_steps_it():
    peer = pytest.importorskip("dni_pytorch_peer")
    rng = np.random.default_rng(0)
    x, labels = rng.random((256, 784), dtype=np.float32), rng.integers(0, 10, 256)
    for setting, blocks in (("default", 2), ("peer", 1), ("peer, every block", 2)):
        step = peer.sgrad_step("dni", x, labels, setting)
        loss, generator_losses = step()
        assert len(generator_losses) == blocks, setting
        # The peer's setting descends the batch mean, the default the sum: about ln 10 per example at the start.
        assert 1.5 < (loss if setting != "default" else loss / 256) < 3.5, (setting, loss)


@pytest.mark.parametrize("setting, method, interfaces, input_generators", [
    ("peer-cnn", "backprop", 0, None), ("peer-cnn", "cdni", 1, None),
    ("full-unlock", "backprop", 0, None), ("full-unlock", "ccomplete", 1, 1)])
def test_the_peer_adapters_sgrad_side_steps_the_cnn_and_full_unlock_examples_as_sgrad_paper_does(
        setting, method, interfaces, input_generators):
    peer = pytest.importorskip("dni_pytorch_peer")
    rng = np.random.default_rng(0)
    x, labels = rng.random((64, 784), dtype=np.float32), rng.integers(0, 10, 64)
    assert peer.SGRAD_SETTINGS[setting].example == {"peer-cnn": "cnn", "full-unlock": "full-unlock"}[setting]
    result = peer.sgrad_step(method, x, labels, setting)()
    assert len(result[1]) == interfaces  # a generator's regression loss per interface
    if input_generators is not None:  # complete_unlock_step's: an input generator's loss per interface
        assert len(result[2]) == input_generators
    assert 1.5 < result[0] < 3.5, result[0]  # the batch-mean loss: about ln 10 at the start


def test_the_peer_adapter_draws_each_seeds_curve_from_the_committed_records(tmp_path):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    docs = pathlib.Path(__file__).resolve().parents[1] / "docs"
    out = tmp_path / "curves.png"
    result = subprocess.run([sys.executable, str(script), "curves", "--example", "full-unlock",
                             "--records", str(docs / "dni-pytorch" / "full-unlock"),
                             "--sgrad", str(docs / "paper" / "full-unlock"), "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not (os.environ.get("DNI_PYTORCH") and os.environ.get("DNI_PYTORCH_PYTHON")
                         and os.environ.get("SGRAD_DATA_DIR")),
                    reason="set DNI_PYTORCH, DNI_PYTORCH_PYTHON (a checkout of koz4k/dni-pytorch and its "
                           "environment's python) and SGRAD_DATA_DIR to time the peer")
def test_the_peer_adapter_times_each_sgrad_setting_in_the_same_rounds_as_the_peer():
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    result = subprocess.run([sys.executable, str(script), "time", "--methods", "dni", "--rounds", "2",
                             "--seconds", "0.05", "--warmup", "2", "--sgrad-setting", "peer",
                             "--sgrad-setting", "peer, every block"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [line.strip("| ").split(" | ") for line in result.stdout.splitlines() if line.startswith("| dni")]
    assert [row[1] for row in rows] == ["peer", "peer, every block"]
    assert rows[0][3] == rows[1][3]  # one peer, timed once per round for both settings
    assert rows[0][5] == "1.00×"  # the first setting against itself
    # No speed is asserted: timings belong to the benchmark's runs, not to a test.
    for row in rows:
        sgrad_ms, peer_ms, ratio = float(row[2]), float(row[3]), float(row[4].rstrip("×"))
        assert sgrad_ms > 0 and peer_ms > 0 and ratio > 0


@pytest.mark.skipif(not (os.environ.get("DNI_PYTORCH") and os.environ.get("DNI_PYTORCH_PYTHON")
                         and os.environ.get("SGRAD_DATA_DIR")),
                    reason="set DNI_PYTORCH, DNI_PYTORCH_PYTHON (a checkout of koz4k/dni-pytorch and its "
                           "environment's python) and SGRAD_DATA_DIR to time the peer")
@pytest.mark.parametrize("processes", [1, 2])
def test_the_peer_adapter_records_each_round_of_the_complete_unlocks_step_time(tmp_path, processes):
    """With --processes 2, the rounds of two pairs of fresh processes, each round with its pair's number."""
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    out = tmp_path / "step-time.json"
    result = subprocess.run([sys.executable, str(script), "time", "--example", "full-unlock", "--methods", "complete",
                             "--rounds", "3", "--seconds", "0.05", "--warmup", "2", "--processes", str(processes),
                             "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("| complete | full-unlock | ")]
    record = json.loads(out.read_text())
    assert record["example"] == "full-unlock" and record["batch_size"] == 64
    assert record["rounds"] == 3 and record["processes"] == processes
    assert len(record["load_average_before"]) == 3 and record["machine"].startswith("CPU: ")
    [measured] = record["methods"]
    assert measured["method"] == "complete" and measured["sgrad"][0]["setting"] == "full-unlock"
    assert measured["pair"] == [pair for pair in range(processes) for _ in range(3)]
    if processes > 1:
        assert len(measured["steps_per_round"]) == processes and min(measured["steps_per_round"]) >= 1
    for times in (measured["peer_seconds"], measured["peer_processor_seconds"], measured["sgrad"][0]["seconds"],
                  measured["sgrad"][0]["processor_seconds"]):
        assert len(times) == 3 * processes and min(times) > 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-time.json"]  # the pairs' files are gone


def test_the_peer_adapter_refuses_fewer_than_one_pair_of_processes_in_one_line(tmp_path):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    result = subprocess.run([sys.executable, str(script), "time", "--processes", "0", "--peer", str(tmp_path),
                             "--data", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["dni_pytorch_peer: --processes must be at least 1 (pairs of fresh "
                                          "processes, one after the other); got 0"]


def test_the_peer_adapter_draws_its_ablation_as_a_png(tmp_path):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    table = {"peer": {"dni": [0.97, 0.971, 0.969]},
             "rows": [{"method": "dni", "change": "default", "accuracy": [0.90, 0.91, 0.92]},
                      {"method": "dni", "change": "before the ReLU", "accuracy": [0.965, 0.97, 0.96]}]}
    (tmp_path / "table.json").write_text(json.dumps(table))
    result = subprocess.run([sys.executable, str(script), "figure", "--table", str(tmp_path / "table.json"),
                             "--out", str(tmp_path / "ablation.png")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


PEER_PYTHON = os.environ.get("DNI_PYTORCH_PYTHON")
needs_the_peers_environment = pytest.mark.skipif(
    not (PEER_PYTHON and pathlib.Path(PEER_PYTHON).is_file()),
    reason="set DNI_PYTORCH_PYTHON (the python of an environment with torch and numpy) to run the adapter's parts "
           "that need PyTorch")


def peer_example_text(relative):
    """The peer's own text of ``relative``: from the checkout at $DNI_PYTORCH, else from a git directory of
    koz4k/dni-pytorch at $DNI_PYTORCH_GIT; skip if neither is set and has it."""
    checkout = os.environ.get("DNI_PYTORCH")
    if checkout and (pathlib.Path(checkout) / relative).is_file():
        return (pathlib.Path(checkout) / relative).read_text()
    git_dir = os.environ.get("DNI_PYTORCH_GIT")
    if git_dir and pathlib.Path(git_dir).is_dir():
        shown = subprocess.run(["git", "-C", git_dir, "show", f"HEAD:{relative}"], capture_output=True, text=True)
        if shown.returncode == 0:
            return shown.stdout
    pytest.skip(f"no copy of koz4k/dni-pytorch's {relative}: set DNI_PYTORCH (a checkout) or DNI_PYTORCH_GIT "
                "(a git directory)")


@pytest.mark.parametrize("example", ["mlp", "cnn", "full-unlock"])
def test_the_peer_adapter_changes_only_the_indexed_losses_and_the_epoch_loop_of_each_example(example):
    import difflib

    peer = pytest.importorskip("dni_pytorch_peer")
    original = peer_example_text(peer.EXAMPLES[example].path.as_posix())
    adapted = peer.adapted_source(original)
    diff = list(difflib.ndiff(original.splitlines(), adapted.splitlines()))
    removed = [line[2:].strip() for line in diff if line.startswith("- ")]
    added = [line[2:].strip() for line in diff if line.startswith("+ ")]
    assert removed == ["100. * batch_idx / len(train_loader), loss.data[0]))",
                       "test_loss += F.nll_loss(output, target, size_average=False).data[0] # sum up batch loss",
                       "for epoch in range(1, args.epochs + 1):", "train(epoch)", "test()"]
    assert added == ["100. * batch_idx / len(train_loader), loss.item()))",
                     "test_loss += F.nll_loss(output, target, size_average=False).item() # sum up batch loss"]
    compile(adapted, example, "exec")


def test_the_peer_adapter_refuses_in_one_line_an_example_it_does_not_know():
    peer = pytest.importorskip("dni_pytorch_peer")
    with pytest.raises(SystemExit) as refused:
        peer.adapted_source("print(loss.data[0]))\n", "main.py")
    assert str(refused.value) == ("dni_pytorch_peer: main.py is not the version this adapter knows: "
                                  "'size_average=False).data[0]' occurs 0 times, expected 1")


@needs_the_peers_environment
def test_the_peer_adapters_stand_in_torchvision_normalises_a_whole_split_as_torchvision_does_each_image(tmp_path):
    images = np.array([[[0, 255], [51, 102]], [[255, 0], [0, 204]]], dtype=np.uint8)  # two 2×2 images
    labels = np.array([7, 3], dtype=np.uint8)
    np.savez(tmp_path / "tiny.npz", x_train=images, y_train=labels, x_test=images[:1], y_test=labels[:1])
    program = f"""
import json, sys
sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")!r})
import dni_pytorch_peer
tv = dni_pytorch_peer.stand_in_torchvision({str(tmp_path / "tiny.npz")!r})
transform = tv.transforms.Compose([tv.transforms.ToTensor(), tv.transforms.Normalize((0.1307,), (0.3081,))])
train, test = tv.datasets.MNIST("unused", train=True, transform=transform), tv.datasets.MNIST("unused", train=False)
image, label = train[1]
print(json.dumps({{"data": train.data.tolist(), "dtype": str(train.data.dtype), "len": [len(train), len(test)],
                  "item": [list(image.shape), label, type(label).__name__], "test": test.data.tolist()}}))
"""
    result = subprocess.run([PEER_PYTHON, "-c", program], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    expected = ((images.astype(np.float32) / 255 - np.float32(0.1307)) / np.float32(0.3081))[:, None]
    np.testing.assert_allclose(np.array(seen["data"]), expected, rtol=1e-6, atol=1e-6)
    assert seen["dtype"] == "torch.float32"
    assert seen["len"] == [2, 1]
    assert seen["item"] == [[1, 2, 2], 3, "int"]  # one image (channels, height, width) and its label
    assert seen["test"] == images[:1].tolist()  # no transform: the raw pixels


@needs_the_peers_environment
@pytest.mark.parametrize("example, method", [("cnn", "cdni"), ("full-unlock", "ccomplete")])
def test_the_peer_adapter_tests_after_each_epoch_and_records_the_run(tmp_path, example, method):
    peer_source = os.environ.get("DNI_PYTORCH")
    if not (peer_source and (pathlib.Path(peer_source) / "dni.py").is_file()):
        pytest.skip("set DNI_PYTORCH (a checkout of koz4k/dni-pytorch) to run the peer's examples")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "mnist.npz", x_train=rng.integers(0, 256, (128, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, 128, dtype=np.uint8),
             x_test=rng.integers(0, 256, (50, 28, 28), dtype=np.uint8), y_test=rng.integers(0, 10, 50, dtype=np.uint8))
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    result = subprocess.run([sys.executable, str(script), "accuracy", "--example", example, "--methods", method,
                             "--seeds", "3", "--epochs", "2", "--data", str(tmp_path / "mnist.npz"),
                             "--out", str(tmp_path / "runs")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "runs" / f"{method}-seed3.json").read_text())
    assert (record["example"], record["method"], record["seed"], record["batch_size"], record["lr"]) == (
        example, method, 3, 64, 1e-3)
    # 128 training images in batches of 64: two steps an epoch, and a test of the 50 test images after each epoch.
    assert [(test["epoch"], test["iterations"]) for test in record["tests"]] == [(1, 2), (2, 4)]
    assert (record["epochs"], record["iterations"]) == (2, 4)
    assert all(round(50 * test["test_accuracy"]) == 50 * test["test_accuracy"] for test in record["tests"])
    assert record["test_accuracy"] == record["tests"][-1]["test_accuracy"]
    assert 0 < record["train_seconds"] < record["seconds"]
    rows = [line for line in result.stdout.splitlines() if line.startswith(f"| {method} |")]
    assert rows == [f"| {method} | {100 * record['test_accuracy']:.2f}% | {100 * record['test_accuracy']:.2f}% |"]


def test_the_peer_adapter_refuses_a_method_its_example_does_not_have(tmp_path):
    script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "dni_pytorch_peer.py"
    result = subprocess.run([sys.executable, str(script), "accuracy", "--example", "full-unlock", "--methods",
                             "backprop,dni", "--peer", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["dni_pytorch_peer: the full-unlock example has no method dni: give "
                                          "--methods from backprop,complete,ccomplete"]


def test_the_bp_lambda_cost_benchmark_prints_a_row_per_method_against_one_window_dni(capsys):
    bp_lambda_cost = pytest.importorskip("bp_lambda_cost")
    assert bp_lambda_cost.main(["--hidden", "4", "--length", "2", "--rounds", "1"]) == 0
    rows = [line.strip("| ").split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [row[0] for row in rows[1:]] == ["one-window DNI", "λ-return, λ = 0.5", "BP(λ), λ = 0.5"]
    assert rows[1][2] == rows[1][4] == "1.0"
    assert all(float(cell) > 0 for row in rows[1:] for cell in row[1:])


def test_the_peer_adapter_builds_the_peers_copy_repeat_task_and_trains_sgrad_at_its_setting():
    bp_lambda_peer = pytest.importorskip("bp_lambda_peer")
    x, y, mask = bp_lambda_peer.copy_repeat_batch(2, 3, np.random.default_rng(0))
    assert x.shape == (100, 11, 10) and y.shape == (100, 11, 9) and mask.shape == (100, 11)
    assert (x[:, 0, 8] == 1).all() and np.allclose(x[:, 3, 9], 0.3) and (y[:, -1, 8] == 1).all()
    for repeat in range(3):  # the vectors of steps 1 and 2, three times from step 4
        np.testing.assert_array_equal(y[:, 4 + 2 * repeat:6 + 2 * repeat, :8], x[:, 1:3, :8])
    assert mask[:, :4].sum() == 0 and np.allclose(mask.sum(axis=1) * 9, 1.0)  # the mean over scored steps, channels
    curve = bp_lambda_peer.run_sgrad(2, 0, 1.0, 0.9)
    assert curve["last_step"] == 2 and curve["N"][0] == curve["R"][0] == 1


def test_the_peer_adapters_per_sequence_step_descends_the_sum_of_each_steps_own_truncated_gradient():
    """sequence_step's one step is -α Σ_t dL_t/dθ with s_{t-1} held: checked by central differences."""
    bp_lambda_peer = pytest.importorskip("bp_lambda_peer")
    from sgrad import Layer
    from sgrad.nn.losses import bce_with_logits
    from sgrad.recurrent.layers import LSTM
    from sgrad.recurrent.tbptt import window_loss

    rng = np.random.default_rng(1)
    x, y, mask = bp_lambda_peer.copy_repeat_batch(1, 2, rng, batch=3)
    core, readout = LSTM(10, 3, update_rule="sgd", seed=2), Layer(3, 9, "identity", update_rule="sgd", seed=3)
    states = [core.initial_state(3)]
    for t in range(x.shape[1]):
        states.append(core.forward(x[:, t:t + 1], states[-1])[1])

    def truncated_loss():  # Σ_t L_t, each step from the state the unperturbed pass reached: T = 1
        return sum(window_loss(readout, core.forward(x[:, t:t + 1], states[t])[0], y[:, t:t + 1], mask[:, t:t + 1],
                               bce_with_logits, 3)[0] for t in range(x.shape[1]))

    expected = {}
    for module in (core, readout):
        for name, value in module.parameters.items():
            gradient = np.zeros_like(value)
            for index in np.ndindex(value.shape):
                kept = value[index]
                value[index] = kept + 1e-6
                up = truncated_loss()
                value[index] = kept - 1e-6
                gradient[index] = (up - truncated_loss()) / 2e-6
                value[index] = kept
            expected[module, name] = value - 0.5 * gradient
    before = truncated_loss()
    assert bp_lambda_peer.sequence_step(core, readout, x, y, mask, 0.5) == pytest.approx(before, rel=1e-12)
    for (module, name), value in expected.items():
        np.testing.assert_allclose(module.parameters[name], value, rtol=0, atol=1e-8, err_msg=name)


def test_the_peer_adapter_combines_saved_runs_into_one_figure_a_panel_per_run(tmp_path):
    """--combine reads each folder's peer.json and sgrad.json (here: sgrad's own curves in the peer's place)."""
    bp_lambda_peer = pytest.importorskip("bp_lambda_peer")
    import json

    folders = []
    for seed in (0, 1):
        folder = tmp_path / f"seed-{seed}"
        folder.mkdir()
        curve = bp_lambda_peer.run_sgrad(3, seed, batch=4)
        (folder / "peer.json").write_text(json.dumps(curve))
        (folder / "sgrad.json").write_text(json.dumps({"sgrad (truncated BPTT, T = 1)": curve}))
        folders.append(str(folder))
    assert bp_lambda_peer.main(["--combine", *folders, "--out", str(tmp_path / "both"), "--title", "two runs"]) == 0
    head = (tmp_path / "both" / "copy_repeat_runs.png").read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width > 2 * height  # two panels side by side
    runs = bp_lambda_peer.combine(folders, tmp_path / "again.png")
    assert [list(run) for run in runs] == [["peer (no synthetic gradients)", "sgrad (truncated BPTT, T = 1)"]] * 2
    assert runs[0]["sgrad (truncated BPTT, T = 1)"]["last_step"] == 3


def test_two_versions_of_the_same_checkout_give_the_same_figures_and_a_record_of_each_round(tmp_path):
    script = pathlib.Path(performance.__file__).with_name("two_versions.py")
    root = pathlib.Path(performance.__file__).resolve().parents[1]
    out = tmp_path / "record.json"
    result = subprocess.run([sys.executable, str(script), "--before", str(root), "--after", str(root), "--rounds", "2",
                             "--workloads", "blog,rnn", "--blog-iterations", "2", "--rnn-args",
                             "--tasks copy --methods dni --windows 2 --seeds 0 --steps 20 --eval-every 10",
                             "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [row["workload"] for row in rows] == ["blog", "rnn"]
    assert all(len(row["before"]) == len(row["after"]) == 2 and row["largest_difference"] == 0 for row in rows)
    assert "| blog | " in result.stdout and "| rnn | " in result.stdout


def test_two_versions_finds_the_largest_difference_and_leaves_out_a_setting_only_one_record_has():
    two_versions = pytest.importorskip("two_versions")
    older = {"config": {"alpha": 0.1}, "cells": [{"test_accuracy": [0.5, 0.75], "wall_time": 3.0}]}
    newer = {"config": {"alpha": 0.1, "added": "x"}, "cells": [{"test_accuracy": [0.5, 0.7501], "wall_time": 9.0}]}
    assert two_versions.largest_difference(two_versions.without_wall_times(older),
                                           two_versions.without_wall_times(newer)) == pytest.approx(1e-4)
    assert two_versions.largest_difference({"cells": [1, 2]}, {"cells": [1]}) == float("inf")
