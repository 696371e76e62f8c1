"""``sgrad parallel``, run as a user runs it (the console script in a subprocess, on a tiny archive in the MNIST
layout): its table, figures and histories, its cache of finished runs, its refusals before any work, and Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_group_ends, started, tiny_mnist

from sgrad.experiments.parallel import NO_RATE, accuracy_at, examples_per_second, timeline_window
from sgrad.parallel import SCHEDULE_NAMES

SGRAD = Path(sys.executable).parent / "sgrad"
TINY = ["--iterations", "6", "--eval-every", "3", "--hidden", "16", "--generator-hidden", "8", "--batch-size", "8",
        "--workers", "1,2", "--budget", "1000", "--no-verify", "--dtype", "float64", "--schedules", ",".join(SCHEDULE_NAMES)]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_parallel(cwd, *args, timeout=300):
    return subprocess.run([str(SGRAD), "parallel", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Every schedule on one and two workers, once: ``(result, out_dir, cwd)``."""
    cwd = tmp_path_factory.mktemp("parallel")
    result = run_parallel(cwd, *TINY, "--data", str(tiny_mnist(cwd)), "--out", "out")
    return result, cwd / "out", cwd


def test_the_default_schedules_leave_the_complete_unlock_out():
    help_text = subprocess.run([sys.executable, "-m", "sgrad", "parallel", "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "(default: backprop,pipelined-backprop,dni,cdni;" in " ".join(help_text.split())


def table_rows(stdout):
    rows = [line for line in stdout.splitlines() if line.startswith("|")][2:]  # the header and the rule
    return [[cell.strip() for cell in row.split("|")[1:-1]] for row in rows]


def test_the_command_prints_a_row_per_schedule_and_worker_count_and_writes_its_files(tiny):
    result, out, _ = tiny
    assert result.returncode == 0, result.stderr
    assert [row[:2] for row in table_rows(result.stdout)] == [[s, k] for s in SCHEDULE_NAMES for k in ("1", "2")]
    for name in ("timeline.png", "accuracy_time.png"):
        assert (out / name).read_bytes().startswith(PNG_SIGNATURE)
    assert (out / "results.md").read_text().strip() == result.stdout.strip()
    assert result.stderr.splitlines()[-1] == (
        "wrote out/results.md, timeline.png, accuracy_time.png and histories.json")


def test_the_table_reads_each_runs_history(tiny):
    result, out, _ = tiny
    runs = {(r["schedule"], str(r["workers"])): r for r in json.loads((out / "histories.json").read_text())["runs"]}
    for schedule, workers, speed, early, final, wall in table_rows(result.stdout):
        history = runs[(schedule, workers)]["history"]
        assert speed == f"{examples_per_second(history, 8):,.0f}"
        assert early == f"{100 * accuracy_at(history, 1000):.2f}%"
        assert final == f"{100 * history['test_accuracy'][-1]:.2f}%"
        assert wall == f"{history['wall_time']:.1f} s"


def test_exact_schedules_learn_the_same_on_one_and_two_workers(tiny):
    _, out, _ = tiny
    runs = {(r["schedule"], r["workers"]): r["history"] for r in json.loads((out / "histories.json").read_text())["runs"]}
    for schedule in ("backprop", "dni", "cdni", "complete", "ccomplete"):
        assert runs[(schedule, 1)]["train_loss"] == runs[(schedule, 2)]["train_loss"], schedule
        assert runs[(schedule, 1)]["test_accuracy"] == runs[(schedule, 2)]["test_accuracy"], schedule


def test_every_run_records_the_timeline_of_the_steps_it_was_asked_for(tiny):
    _, out, _ = tiny
    first, last = timeline_window(6, 3)
    for run in json.loads((out / "histories.json").read_text())["runs"]:
        steps = {event["step"] for event in run["timeline"]}
        assert steps and min(steps) >= first and max(steps) <= min(last, 6)
        assert {event["worker"] for event in run["timeline"]} == set(range(run["workers"]))


def test_the_complete_unlock_records_its_synthetic_inputs_on_both_workers_and_dni_none(tiny):
    _, out, _ = tiny
    runs = {(r["schedule"], r["workers"]): r for r in json.loads((out / "histories.json").read_text())["runs"]}
    for schedule in ("complete", "ccomplete"):
        # Worker 0 holds the bottom block, whose input is data; worker 1 holds I_1 and I_2.
        assert {e["worker"] for e in runs[(schedule, 2)]["timeline"] if e["kind"] == "synthetic input"} == {1}
        assert {e["worker"] for e in runs[(schedule, 1)]["timeline"] if e["kind"] == "synthetic input"} == {0}
    assert not any(e["kind"] == "synthetic input" for e in runs[("dni", 2)]["timeline"])


def test_a_rerun_loads_the_finished_runs_instead_of_training_them_again(tiny):
    result, _, cwd = tiny
    again = run_parallel(cwd, *TINY, "--data", str(cwd / "mnist.npz"), "--out", "out")
    assert again.returncode == 0, again.stderr
    assert again.stdout == result.stdout
    loaded = [line for line in again.stderr.splitlines() if line.endswith("loaded from out")]
    assert len(loaded) == 2 * len(SCHEDULE_NAMES)


@pytest.mark.parametrize("args, message", [
    (["--workers", "1,3"], "sgrad parallel: error: 3 workers need at least 3 hidden blocks, one per worker; a net of "
                           "depth 3 has 2. Use fewer workers or a larger depth"),
    (["--ray-address", "10.0.0.1:6379"], "sgrad parallel: error: --ray-address is the address of a Ray cluster: use "
                                         "it with --engine ray"),
    (["--staleness", "-1"], "sgrad parallel: error: argument --staleness: must be at least 0; got -1"),
    (["--schedules", "complete,ccomplete", "--workers", "3"], "sgrad parallel: error: 3 workers need at least 3 hidden "
                                                              "blocks, one per worker; a net of depth 3 has 2. Use "
                                                              "fewer workers or a larger depth"),
    (["--schedules", "complete,dni,sgd"], "sgrad parallel: error: argument --schedules: expected a comma-separated "
                                          "subset of backprop,pipelined-backprop,dni,cdni,complete,ccomplete; got "
                                          "'complete,dni,sgd'"),
    (["--workers", "0"], "sgrad parallel: error: argument --workers: expected comma-separated numbers of workers "
                         "such as 1,2; got '0'"),
])
def test_bad_arguments_are_refused_before_any_work(tmp_path, args, message):
    result = run_parallel(tmp_path, "--data", str(tiny_mnist(tmp_path)), "--no-verify", "--out", "out", *args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [message + (" (see 'sgrad parallel --help')" if "argument" in message else "")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnist.npz"]


@pytest.mark.parametrize("schedule", ["dni", "complete"])
def test_ctrl_c_ends_with_one_line_status_130_and_no_worker_left(tmp_path, schedule):
    out = tmp_path / "out"
    with started([str(SGRAD), "parallel", *TINY, "--iterations", "1000000", "--schedules", schedule, "--workers", "2",
                  "--data", str(tiny_mnist(tmp_path)), "--out", str(out)], cwd=tmp_path) as run:
        first = run.stderr.readline()
        assert first.startswith(f"[{schedule}, 2 workers] iteration 3/1000000  train loss "), first
        os.killpg(run.pid, signal.SIGINT)
        stdout, rest = run.communicate(timeout=60)
    assert run.returncode == 130
    assert stdout == ""
    assert [line for line in rest.splitlines() if not line.startswith(f"[{schedule}, 2 workers] iteration")] == [
        f"sgrad parallel: interrupted; rerun the same command to resume from the checkpoints in {out}/checkpoints"]
    assert_group_ends(run.pid, "the command's group")  # no worker outlived the command, nor did its helpers


def test_a_run_resumed_with_a_larger_budget_keeps_the_timeline_and_late_targets_it_recorded_before(tmp_path):
    """The timeline's steps (near the middle of the run) are the same for 300 and 350 iterations, and lie before the
    checkpoint at 300 that the second command resumes from."""
    assert timeline_window(300, 100) == timeline_window(350, 100)
    data = str(tiny_mnist(tmp_path))
    common = [*TINY, "--eval-every", "100", "--checkpoint-every", "100", "--schedules", "dni", "--workers", "2",
              "--data", data]
    results = [run_parallel(tmp_path, *common, "--iterations", iterations, "--out", out)
               for out, iterations in (("broken", "300"), ("broken", "350"), ("unbroken", "350"))]
    assert [result.returncode for result in results] == [0, 0, 0], results
    assert ("[dni, 2 workers] resumed from broken/checkpoints/dni-2.npz at iteration 300 of 350"
            in results[1].stderr)
    runs = {out: json.loads((tmp_path / out / "histories.json").read_text())["runs"][0]
            for out in ("broken", "unbroken")}
    assert len(runs["unbroken"]["timeline"]) > 0
    assert (sorted((e["worker"], e["kind"], e["step"]) for e in runs["broken"]["timeline"])
            == sorted((e["worker"], e["kind"], e["step"]) for e in runs["unbroken"]["timeline"]))
    assert runs["broken"]["stale_targets"] == runs["unbroken"]["stale_targets"] == {"0": 2 * 350}  # 2 generators
    assert (tmp_path / "broken" / "timeline.png").read_bytes().startswith(PNG_SIGNATURE)


def test_a_comparison_without_backprop_or_dni_draws_the_timeline_of_what_it_ran_and_says_only_what_it_wrote(tmp_path):
    result = run_parallel(tmp_path, *TINY, "--schedules", "pipelined-backprop", "--workers", "2",
                          "--data", str(tiny_mnist(tmp_path)), "--out", "out")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "wrote out/results.md, timeline.png, accuracy_time.png and histories.json"
    assert (tmp_path / "out" / "timeline.png").read_bytes().startswith(PNG_SIGNATURE)


def test_a_run_too_short_for_a_rate_shows_a_dash_and_why_never_nan(tmp_path):
    result = run_parallel(tmp_path, *TINY, "--iterations", "2", "--schedules", "dni", "--workers", "2",
                          "--data", str(tiny_mnist(tmp_path)), "--out", "out")
    assert result.returncode == 0, result.stderr
    assert "nan" not in result.stdout
    [[schedule, workers, speed, *_]] = table_rows(result.stdout)
    assert (schedule, workers, speed) == ("dni", "2", "–")
    assert result.stdout.rstrip().endswith(NO_RATE)
    assert (tmp_path / "out" / "results.md").read_text().rstrip().endswith(NO_RATE)


def test_a_generator_option_without_a_dni_schedule_is_warned_of_and_the_run_goes_on(tmp_path):
    result = run_parallel(tmp_path, *TINY, "--schedules", "backprop", "--workers", "1", "--staleness", "2",
                          "--data", str(tiny_mnist(tmp_path)), "--out", "out")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[:2] == [
        "sgrad parallel: warning: --staleness 2 does nothing here: it sets the generators, and --schedules backprop "
        "trains none; add dni, cdni, complete or ccomplete to --schedules, or leave --staleness out",
        "sgrad parallel: warning: --generator-hidden 8 does nothing here: it sets the generators, and --schedules "
        "backprop trains none; add dni, cdni, complete or ccomplete to --schedules, or leave --generator-hidden out"]


def test_sigterm_ends_with_one_line_status_143_no_leaked_semaphore_and_no_worker_left(tmp_path):
    out = tmp_path / "out"
    with started([str(SGRAD), "parallel", *TINY, "--iterations", "1000000", "--schedules", "dni", "--workers", "2",
                  "--checkpoint-every", "3", "--data", str(tiny_mnist(tmp_path)), "--out", str(out)],
                 cwd=tmp_path) as run:
        run.stderr.readline()
        second = run.stderr.readline()  # after the checkpoint at iteration 3
        assert second.startswith("[dni, 2 workers] iteration 6/1000000  train loss "), second
        os.killpg(run.pid, signal.SIGTERM)  # as `timeout` sends it: to the whole group, the workers too
        stdout, rest = run.communicate(timeout=60)
    assert run.returncode == 143
    assert stdout == ""
    assert [line for line in rest.splitlines() if not line.startswith("[dni, 2 workers] iteration")] == [
        f"sgrad parallel: terminated; rerun the same command to resume from the checkpoints in {out}/checkpoints"]
    assert_group_ends(run.pid, "the command's group")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["dni-2.npz"]


def test_examples_per_second_count_from_the_first_evaluation_to_the_last():
    assert examples_per_second({"iteration": [100], "evaluation_time": [5.0]}, 256) is None
    history = {"iteration": [100, 200, 300], "evaluation_time": [5.0, 7.0, 9.0]}
    assert examples_per_second(history, 256) == pytest.approx(200 * 256 / 4.0)


def test_the_accuracy_after_a_budget_is_the_last_one_measured_within_it():
    history = {"test_accuracy": [0.5, 0.7, 0.9], "evaluation_time": [5.0, 7.0, 9.0]}
    assert accuracy_at(history, 8.0) == 0.7
    assert accuracy_at(history, 4.0) is None
