"""The figures: the parallel engine's timeline (a row per worker, a bar per event) and accuracy against wall-clock time,
and the paper's accuracy curves."""

import numpy as np
import pytest

from sgrad.experiments.mnist import PaperConfig, build_network, summed_cross_entropy
from sgrad.experiments.plotting import TIMELINE_COLORS, plot_accuracy_against_time, plot_paper, plot_timeline
from sgrad.parallel import train_parallel

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CONFIG = PaperConfig(depth=3, hidden=16, generator_hidden=(8,), batch_size=8, dtype="float64", seed=0)


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(0)
    data = rng.random((64, 20)), rng.integers(0, 10, 64), rng.random((32, 20)), rng.integers(0, 10, 32)
    return {schedule: train_parallel(build_network(schedule, 20, CONFIG), data, schedule=schedule,
                                     loss_fn=summed_cross_entropy, alpha=1e-3, steps=8, batch_size=8,
                                     rng=np.random.default_rng(0), eval_every=2, timeline_steps=(3, 6))
            for schedule in ("backprop", "dni")}


def test_the_timeline_has_a_panel_per_run_a_row_per_worker_and_a_bar_per_event(runs, tmp_path):
    fig = plot_timeline({name: run.timeline for name, run in runs.items()}, tmp_path / "timeline.png")
    for ax, run in zip(fig.axes, runs.values()):
        assert [label.get_text() for label in ax.get_yticklabels()] == ["worker 0", "worker 1"]
        bars = sum(len(collection.get_paths()) for collection in ax.collections)
        assert bars == len(run.timeline)
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["backprop", "dni"]
    assert (tmp_path / "timeline.png").read_bytes().startswith(PNG_SIGNATURE)


def test_each_bar_spans_its_events_time_from_the_panels_first_event(runs):
    events = runs["dni"].timeline
    ax = plot_timeline({"dni": events}).axes[0]
    start = min(e.start for e in events)
    waits = [e for e in events if e.worker == 1 and e.kind == "wait"]
    collection = ax.collections[2 * len(TIMELINE_COLORS) - 1]  # worker 1's waits, the last collection drawn
    lefts = sorted(path.vertices[:, 0].min() for path in collection.get_paths())
    assert lefts == pytest.approx(sorted(1e3 * (e.start - start) for e in waits))


def test_accuracy_against_time_draws_each_runs_evaluations_at_their_wall_clock_time(runs, tmp_path):
    histories = {name: run.history for name, run in runs.items()}
    fig = plot_accuracy_against_time(histories, tmp_path / "accuracy.png")
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["backprop", "dni"]
    for line, history in zip(lines, histories.values()):
        np.testing.assert_allclose(line.get_xdata(), history["evaluation_time"])
        np.testing.assert_allclose(line.get_ydata(), 100 * np.asarray(history["test_accuracy"]))
    assert (tmp_path / "accuracy.png").read_bytes().startswith(PNG_SIGNATURE)


def test_the_paper_figure_names_its_dataset_in_every_panel_and_calls_it_mnist_only_by_default():
    history = {"iteration": [0, 10, 20], "test_accuracy": [0.1, 0.5, 0.8]}
    results = {("backprop", 3): history, ("dni", 3): history, ("backprop", 4): history}
    assert [ax.get_title() for ax in plot_paper(results).axes] == ["MNIST, 3 layers", "MNIST, 4 layers"]
    titles = [ax.get_title() for ax in plot_paper(results, dataset="stand-in digits, not MNIST").axes]
    assert titles == ["stand-in digits, not MNIST, 3 layers", "stand-in digits, not MNIST, 4 layers"]
