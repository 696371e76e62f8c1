"""``sgrad compare``, run as a user runs it: the installed console script in a subprocess.

One tiny comparison of all four methods runs once per module; the tests read
its exit code, stdout, stderr and files.  5 bits gives 256 operand pairs,
enough for 64 training and 32 held-out ones.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_group_ends, started, tiny_mnist
from matplotlib.image import imread

import sgrad
from sgrad.experiments.binary_addition import METHODS
from sgrad.nn.checkpoint import load_checkpoint

SGRAD = Path(sys.executable).parent / "sgrad"
EPOCHS, TRAIN, TEST, BATCH_SIZE, HIDDEN = 3, 64, 32, 16, (8, 8)
TINY = ["--bits", "5", "--train", str(TRAIN), "--test", str(TEST), "--epochs", str(EPOCHS),
        "--hidden", ",".join(map(str, HIDDEN)), "--batch-size", str(BATCH_SIZE)]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(command, cwd, *args):
    return subprocess.run([*command, "compare", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def run_sgrad(cwd, *args):
    return run([str(SGRAD)], cwd, *args)


def table_methods(stdout):
    """The method named in each row of the markdown table on stdout."""
    rows = [line for line in stdout.splitlines() if line.startswith("|")][2:]  # skip header and rule
    return [row.split("|")[1].strip() for row in rows]


def histories_without_wall_time(out):
    histories = json.loads((out / "history.json").read_text())["histories"]
    return {method: {k: v for k, v in h.items() if k != "wall_time"} for method, h in histories.items()}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """All four methods, compared once with the tiny budget: ``(result, out_dir)``."""
    cwd = tmp_path_factory.mktemp("tiny")
    result = run_sgrad(cwd, *TINY, "--out", "out")
    return result, cwd / "out"


@pytest.fixture(scope="module")
def record(tiny):
    result, out = tiny
    assert result.returncode == 0, result.stderr
    return json.loads((out / "history.json").read_text())


# --- the run and its streams --------------------------------------------------------


def test_console_script_is_installed_next_to_python():
    assert SGRAD.is_file()


def test_compare_exits_with_zero(tiny):
    result, _ = tiny
    assert result.returncode == 0, result.stderr


def test_stdout_holds_a_table_row_per_method(tiny):
    result, _ = tiny
    assert result.stdout.startswith("| method | held-out bit acc. |")
    assert table_methods(result.stdout) == list(METHODS)


def test_stdout_holds_only_the_table(tiny):
    result, _ = tiny
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 + len(METHODS)
    assert all(line.startswith("|") for line in lines), result.stdout


def test_progress_lines_go_to_stderr(tiny):
    result, _ = tiny
    for method in METHODS:
        assert f"[{method}] epoch 1/{EPOCHS}" in result.stderr
        assert f"[{method}] epoch {EPOCHS}/{EPOCHS}" in result.stderr
        assert f"[{method}] done in" in result.stderr
    assert "epoch" not in result.stdout


def test_the_progress_line_says_its_loss_is_the_training_loss(tiny):
    result, _ = tiny
    epoch_lines = [line for line in result.stderr.splitlines() if line.startswith("[dni] epoch 1/")]
    assert len(epoch_lines) == 1
    assert re.fullmatch(r"\[dni\] epoch 1/3  train loss \d+\.\d{4}  held-out bits \d+\.\d%", epoch_lines[0])


def test_results_md_equals_the_table_on_stdout(tiny):
    result, out = tiny
    assert (out / "results.md").read_text() == result.stdout


# --- the figure ------------------------------------------------------------------------


def test_compare_png_starts_with_the_png_signature(tiny):
    _, out = tiny
    assert (out / "compare.png").read_bytes()[:8] == PNG_SIGNATURE


def test_compare_png_is_an_image_of_plausible_size(tiny):
    _, out = tiny
    image = imread(out / "compare.png")
    assert image.ndim == 3
    height, width, channels = image.shape
    assert height > 100 and width > 100, image.shape
    assert channels in (3, 4)


def test_compare_png_is_not_a_single_flat_colour(tiny):
    _, out = tiny
    image = imread(out / "compare.png")
    rgb = image[..., :3]
    background = rgb[0, 0]
    drawn = np.any(rgb != background, axis=2).mean()
    assert 0.01 < drawn < 0.99, f"{100 * drawn:.2f}% of pixels differ from the corner's colour"
    assert rgb.min() < 0.5 < rgb.max()


# --- history.json ---------------------------------------------------------------------


def test_history_json_records_task_config_and_histories(record):
    assert record["task"] == {"name": "binary_addition", "output_dim": 5, "num_train": TRAIN, "num_test": TEST}
    assert record["config"]["hidden"] == list(HIDDEN)
    assert (record["config"]["epochs"], record["config"]["batch_size"]) == (EPOCHS, BATCH_SIZE)
    assert list(record["histories"]) == list(METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_history_has_a_loss_per_step_and_per_epoch(record, method):
    history = record["histories"][method]
    assert len(history["step_loss"]) == EPOCHS * (TRAIN // BATCH_SIZE)
    assert len(history["epoch_loss"]) == EPOCHS
    assert len(history["test_loss"]) == EPOCHS
    assert all(np.isfinite(history["step_loss"] + history["epoch_loss"] + history["test_loss"]))


@pytest.mark.parametrize("method", METHODS)
def test_history_has_accuracies_per_epoch_between_zero_and_one(record, method):
    history = record["histories"][method]
    for key in ("train_bit_accuracy", "test_bit_accuracy", "train_exact_accuracy", "test_exact_accuracy"):
        assert len(history[key]) == EPOCHS, key
        assert all(0.0 <= value <= 1.0 for value in history[key]), (key, history[key])


@pytest.mark.parametrize("method", METHODS)
def test_history_has_a_positive_wall_time(record, method):
    assert record["histories"][method]["wall_time"] > 0


@pytest.mark.parametrize("method", ["dni", "cdni"])
def test_decoupled_history_has_generator_records_per_hidden_layer(record, method):
    history = record["histories"][method]
    steps = EPOCHS * (TRAIN // BATCH_SIZE)
    assert [len(losses) for losses in history["generator_loss"]] == [steps] * len(HIDDEN)
    assert [len(losses) for losses in history["generator_epoch_loss"]] == [EPOCHS] * len(HIDDEN)
    assert [len(cosines) for cosines in history["cosine_similarity"]] == [EPOCHS] * len(HIDDEN)


@pytest.mark.parametrize("method", ["dni", "cdni"])
def test_decoupled_history_cosines_lie_between_minus_one_and_one(record, method):
    cosines = np.array(record["histories"][method]["cosine_similarity"])
    assert np.all((-1.0 <= cosines) & (cosines <= 1.0)), cosines


@pytest.mark.parametrize("method", ["backprop", "no-bprop"])
def test_backprop_history_has_no_generator_records(record, method):
    history = record["histories"][method]
    assert (history["generator_loss"], history["generator_epoch_loss"], history["cosine_similarity"]) == ([], [], [])


# --- options ---------------------------------------------------------------------------


def test_methods_option_selects_a_subset(tmp_path):
    result = run_sgrad(tmp_path, *TINY, "--epochs", "1", "--methods", "cdni,backprop", "--out", "out")
    assert result.returncode == 0, result.stderr
    assert table_methods(result.stdout) == ["cdni", "backprop"]
    assert list(json.loads((tmp_path / "out" / "history.json").read_text())["histories"]) == ["cdni", "backprop"]


def test_python_dash_m_sgrad_runs_compare(tmp_path):
    result = run([sys.executable, "-m", "sgrad"], tmp_path, *TINY, "--epochs", "1", "--methods", "dni",
                 "--out", "out")
    assert result.returncode == 0, result.stderr
    assert table_methods(result.stdout) == ["dni"]
    assert (tmp_path / "out" / "history.json").is_file()


def test_same_seed_gives_identical_histories(tiny, tmp_path):
    """Run after run, one seed gives bit-identical histories (wall times aside)."""
    _, first = tiny
    result = run_sgrad(tmp_path, *TINY, "--seed", "0", "--out", "out")  # 0 is the default the fixture used
    assert result.returncode == 0, result.stderr
    assert histories_without_wall_time(tmp_path / "out") == histories_without_wall_time(first)


@pytest.mark.parametrize("args, fragment", [
    (["--methods", "dni,sgd"], "argument --methods: expected a comma-separated subset of backprop,no-bprop,dni,cdni"),
    (["--bits", "1"], "argument --bits: must be at least 2; got 1"),
    (["--bits", "63"], "argument --bits: must be at most 62; got 63"),
    (["--epochs", "0"], "argument --epochs: must be at least 1; got 0"),
    (["--hidden", "8,x"], "argument --hidden: expected comma-separated positive widths such as 128,64; got '8,x'"),
    (["--lr", "-1"], "argument --lr: must be a finite number > 0, e.g. 0.01; got -1.0"),
    (["--nonlin", "softsign"], "argument --nonlin: invalid choice: 'softsign'"),
    (["--batch-size", "500"], "batch_size (500) is larger than the training set"),
    (["--workers", "0"], "argument --workers: must be at least 1; got 0"),
], ids=["unknown-method", "bits-1", "bits-63", "epochs-0", "hidden-not-int", "negative-lr", "unknown-nonlin",
        "batch-larger-than-train", "workers-0"])
def test_bad_argument_exits_non_zero_with_one_readable_line(tmp_path, args, fragment):
    result = run_sgrad(tmp_path, *TINY, *args, "--out", "out")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith("sgrad compare: error: ")
    assert fragment in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()


# --- the Python function ----------------------------------------------------------------


def test_compare_function_returns_a_history_per_requested_method(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    histories = sgrad.compare(["dni", "backprop"], output_dim=5, num_train=TRAIN, num_test=TEST, out_dir=None,
                              progress=None, epochs=2, batch_size=BATCH_SIZE, hidden=HIDDEN)
    assert list(histories) == ["dni", "backprop"]
    assert [len(h["epoch_loss"]) for h in histories.values()] == [2, 2]
    assert [h["method"] for h in histories.values()] == ["dni", "backprop"]
    assert list(tmp_path.iterdir()) == []  # out_dir=None writes nothing


TINY_COMMANDS = {
    "paper": ["--methods", "backprop", "--depths", "2", "--iterations", "4", "--eval-every", "2", "--batch-size", "8",
              "--hidden", "16", "--no-verify", "--data", "mnist.npz"],
    "parallel": ["--schedules", "backprop", "--workers", "1", "--iterations", "4", "--eval-every", "2", "--batch-size",
                 "8", "--hidden", "16", "--no-verify", "--data", "mnist.npz"],
    "rnn": ["--tasks", "copy", "--methods", "bptt", "--windows", "2", "--steps", "4", "--eval-every", "2", "--hidden",
            "8", "--bits", "3", "--batch-size", "4"],
}


@pytest.mark.parametrize("command", TINY_COMMANDS)
def test_a_truncated_cell_is_refused_in_one_line_naming_the_file_and_what_to_do(tmp_path, command):
    tiny_mnist(tmp_path)
    arguments = [str(SGRAD), command, *TINY_COMMANDS[command], "--out", "out"]
    first = subprocess.run(arguments, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    [cell] = (tmp_path / "out" / "cells").iterdir()
    cell.write_text(cell.read_text()[:100])
    again = subprocess.run(arguments, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2
    [line] = again.stderr.splitlines()
    assert line.startswith(f"sgrad {command}: error: out/cells/{cell.name} is damaged: it is not JSON ("), line
    assert line.endswith("; delete it to train the cell again")


# --- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["compare"], ["paper"]], ids=["sgrad", "compare", "paper"])
def test_help_is_plain_text_without_restructuredtext_markup(command):
    result = subprocess.run([str(SGRAD), *command, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "`" not in result.stdout, result.stdout
    assert "usage: sgrad" in result.stdout


def test_version_prints_the_version_module_s_and_exits_0():
    from sgrad.version import __version__

    result = subprocess.run([str(SGRAD), "--version"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"sgrad {__version__}\n", "")
    assert __version__ == "0.1.0"


def test_the_version_is_written_once_and_the_package_metadata_reads_it():
    from sgrad.version import __version__

    root = Path(__file__).parent.parent
    assert "version = attr: sgrad.version.__version__" in (root / "setup.cfg").read_text().splitlines()
    assert [p.name for p in (root / "sgrad").rglob("*.py") if f'"{__version__}"' in p.read_text()] == ["version.py"]


def test_every_option_of_paper_has_a_help_text():
    from sgrad.cli import build_parser

    parser = build_parser()
    paper = parser._subparsers._group_actions[0].choices["paper"]
    assert [action.dest for action in paper._actions if not action.help] == []
    result = subprocess.run([str(SGRAD), "paper", "--help"], capture_output=True, text=True, timeout=60)
    assert "the networks' and the images' float type (default float32)" in " ".join(result.stdout.split())


# --- arguments refused before any work, in the command line's words ---------------------------------------


@pytest.mark.parametrize("args, message", [
    (["paper", "--depths", "3,0"], "sgrad paper: error: argument --depths: expected comma-separated depths of at "
                                   "least 2 (a hidden block and the top) such as 3,4,5,6; got '3,0'"),
    (["paper", "--data", "{tmp}/missing.npz"], "sgrad paper: error: argument --data: no mnist.npz at "
                                               "{tmp}/missing.npz; give the path of the archive or of a folder "
                                               "holding it, or leave --data out to use $SGRAD_DATA_DIR, then the "
                                               "cache, then a download"),
    (["compare", "--out", "{tmp}/notes.txt/out"], "sgrad compare: error: --out {tmp}/notes.txt/out cannot be made: "
                                                  "{tmp}/notes.txt is a file, not a folder; choose another folder"),
    (["paper", "--out", "{tmp}/notes.txt/out"], "sgrad paper: error: --out {tmp}/notes.txt/out cannot be made: "
                                                "{tmp}/notes.txt is a file, not a folder; choose another folder"),
    (["paper", "--data", "{tmp}/mnist.npz", "--no-verify", "--train-subset", "100", "--out", "{tmp}/out"],
     "sgrad paper: error: batch_size (256) is larger than the training set (100 examples); use a smaller "
     "batch_size or more training examples"),
    (["compare", "--hidden", "10000000", "--out", "{tmp}/out"],
     "sgrad compare: error: the backprop network would need 4,000,000,128 bytes (3.7 GiB) for its 250,000,008 "
     "parameters, their gradients and adam's state, more than the 2 GiB that sgrad allows "
     "(sgrad.training.settings.MAX_NETWORK_BYTES); use smaller widths"),
    (["paper", "--channels", "32", "--out", "{tmp}/out"],
     "sgrad paper: error: --channels 32 does nothing here: it sets the CNN's conv blocks, and --arch mlp builds fully "
     "connected ones; add --arch cnn, or leave --channels out"),
    (["paper", "--arch", "cnn", "--hidden", "100", "--out", "{tmp}/out"],
     "sgrad paper: error: --hidden 100 does nothing here: it sets the width of fully connected blocks, and --arch cnn "
     "builds conv blocks of --channels filters; leave --hidden out"),
    (["paper", "--arch", "peer-cnn", "--channels", "32", "--out", "{tmp}/out"],
     "sgrad paper: error: --channels 32 does nothing here: it sets the CNN's conv blocks, and --arch peer-cnn builds "
     "the peer's conv blocks, fixed; add --arch cnn, or leave --channels out"),
    (["paper", "--arch", "peer-cnn", "--no-batchnorm", "--out", "{tmp}/out"],
     "sgrad paper: error: batchnorm shapes sgrad's own networks, but arch='peer-cnn' is koz4k/dni-pytorch's MNIST CNN "
     "example whole, its layers, synthesizer and interface fixed; leave batchnorm at True, or use arch='cnn'"),
    (["paper", "--interfaces", "0"], "sgrad paper: error: argument --interfaces: expected comma-separated "
                                     "hidden-block numbers (1 is the lowest) or 'every' such as 2 or 1,2; got '0'"),
    (["paper", "--interfaces", "3"], "sgrad paper: error: interfaces must be 'every', or the numbers of hidden blocks "
                                     "from 1 to 2 such as (2,), each once and in increasing order; got (3,) at depth 3"),
    (["paper", "--interface-position", "middle"], "sgrad paper: error: argument --interface-position: invalid "
                                                  "choice: 'middle' (choose from 'after', 'before')"),
    (["paper", "--targets", "oracle"], "sgrad paper: error: argument --targets: invalid choice: 'oracle' (choose from "
                                       "'bootstrap', 'true')"),
    (["paper", "--loss", "max"], "sgrad paper: error: argument --loss: invalid choice: 'max' (choose from 'sum', "
                                 "'mean')"),
    (["paper", "--init", "xavier"], "sgrad paper: error: argument --init: invalid choice: 'xavier' (choose from 'he', "
                                    "'pytorch')"),
    (["paper", "--methods", "synthetic-loss", "--targets", "true"],
     "sgrad paper: error: generator_targets='true' regresses generators onto true gradients, but the synthetic loss's "
     "generators predict losses. Leave 'synthetic-loss' out of the methods, or use generator_targets='bootstrap'"),
    (["paper", "--arch", "cnn", "--logit-batchnorm"],
     "sgrad paper: error: logit_batchnorm shapes the fully connected nets only (arch='mlp'); the CNN has an interface "
     "after every conv block. Leave logit_batchnorm at False, or use arch='mlp'"),
], ids=["depth-0", "missing-data", "compare-out-below-a-file", "paper-out-below-a-file", "batch-over-subset",
        "hidden-ten-million", "channels-with-mlp", "hidden-with-cnn", "channels-with-peer-cnn",
        "no-batchnorm-with-peer-cnn", "interface-block-0",
        "interface-above-the-blocks", "interface-position", "targets", "loss", "init",
        "synthetic-loss-true-targets", "cnn-logit-batchnorm"])
def test_a_bad_argument_is_refused_at_once_in_one_line_that_says_what_to_do(tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("a file\n")
    tiny_mnist(tmp_path)
    start = time.perf_counter()
    result = subprocess.run([str(SGRAD), *(arg.format(tmp=tmp_path) for arg in args)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert time.perf_counter() - start < 20  # refused, not trained or allocated
    assert result.returncode == 2
    assert result.stderr.splitlines() == [message.format(tmp=tmp_path) + (
        f" (see 'sgrad {args[0]} --help')" if "argument" in message else "")]
    assert "load_mnist" not in result.stderr and "Errno" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnist.npz", "notes.txt"]


# --- Ctrl-C -----------------------------------------------------------------------------------


def test_ctrl_c_ends_with_one_line_status_130_and_no_process_left(tmp_path):
    out = tmp_path / "out"
    with started([str(SGRAD), "compare", *TINY, "--methods", "dni", "--epochs", "100000", "--checkpoint-every", "2",
                  "--out", str(out)], cwd=tmp_path) as run:
        first = run.stderr.readline()
        assert first.startswith("[dni] epoch 1/100000  train loss "), first
        run.send_signal(signal.SIGINT)
        stdout, rest = run.communicate(timeout=60)
    assert run.returncode == 130
    assert stdout == ""
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert [line for line in rest.splitlines() if not line.startswith("[dni] epoch")] == [
        f"sgrad compare: interrupted; rerun the same command to resume from the checkpoints in {out}/checkpoints"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["dni.npz"]  # whole: no temporary file left
    assert_group_ends(run.pid, "the command")  # the command's process group empties: no child outlived it


def test_sigterm_to_the_command_alone_stops_its_workers_with_status_143_and_whole_checkpoints(tmp_path):
    """As ``kill <pid>`` sends it: the command alone gets it, and stops the workers that train its methods."""
    out = tmp_path / "out"
    with started([str(SGRAD), "compare", *TINY, "--methods", "dni,cdni", "--workers", "2", "--epochs", "100000",
                  "--checkpoint-every", "2", "--out", str(out)], cwd=tmp_path) as run:
        labels = set()
        while labels != {"[dni]", "[cdni]"}:  # both methods are training, each in its worker
            labels.add(run.stderr.readline().split(" ")[0])
        deadline = time.monotonic() + 60
        while len(list(out.glob("checkpoints/*.npz"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        stdout, rest = run.communicate(timeout=60)
    assert run.returncode == 143
    assert stdout == ""
    assert [line for line in rest.splitlines() if not line.startswith("[")] == [
        f"sgrad compare: terminated; rerun the same command to resume from the checkpoints in {out}/checkpoints"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["cdni.npz", "dni.npz"]  # no temporary file
    assert_group_ends(run.pid, "the command")  # no worker outlived it


def test_an_error_in_a_worker_ends_the_command_in_one_line_of_its_own_words(tmp_path):
    arguments = [str(SGRAD), "compare", *TINY, "--methods", "backprop,dni", "--workers", "2", "--checkpoint-every",
                 "2", "--out", "out"]
    first = subprocess.run(arguments, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    checkpoint = tmp_path / "out" / "checkpoints" / "dni.npz"
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    again = subprocess.run(arguments, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2
    errors = [line for line in again.stderr.splitlines() if not line.startswith("[")]
    assert errors == [errors[0]] and errors[0].startswith("sgrad compare: error: out/checkpoints/dni.npz "), errors


@pytest.mark.parametrize("command", ["compare", "rnn"])
def test_sigterm_ends_a_command_as_ctrl_c_does_with_status_143_and_a_whole_checkpoint(tmp_path, command):
    """As `timeout` or a job scheduler sends it: to the whole process group."""
    out = tmp_path / "out"
    arguments = ({"compare": [*TINY, "--methods", "dni", "--epochs", "100000", "--checkpoint-every", "2"],
                  "rnn": [*TINY_COMMANDS["rnn"], "--steps", "100000000", "--checkpoint-every", "2"]}[command])
    with started([str(SGRAD), command, *arguments, "--out", str(out)], cwd=tmp_path) as run:
        first = run.stderr.readline()
        assert first.startswith("[dni] epoch 1/100000" if command == "compare" else "[copy, bptt, T=2, seed 0] step 2/")
        deadline = time.monotonic() + 60
        while not list(out.glob("checkpoints/*.npz")) and time.monotonic() < deadline:  # a checkpoint to keep whole
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGTERM)
        stdout, rest = run.communicate(timeout=60)
    assert run.returncode == 143
    assert stdout == ""
    assert [line for line in rest.splitlines() if not line.startswith("[")] == [
        f"sgrad {command}: terminated; rerun the same command to resume from the checkpoints in {out}/checkpoints"]
    [checkpoint] = (out / "checkpoints").iterdir()  # whole: no temporary file left
    assert load_checkpoint(checkpoint).metadata["step"] > 0
    assert_group_ends(run.pid, "the command")
