"""Figures comparing training methods.  Written with matplotlib's object API (no pyplot state)."""

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

COLORS = {"backprop": "tab:blue", "no-bprop": "tab:gray", "dni": "tab:orange", "cdni": "tab:green"}
LAYER_STYLES = ("-", "--", ":", "-.")


def plot_comparison(histories: Mapping[str, Mapping[str, Any]], path: str | os.PathLike[str] | None = None, *,
                    title: str | None = None) -> Figure:
    """A 2x2 figure: training loss, held-out bit accuracy, cos(ĝ_k, g_k) and generator loss per epoch.

    histories: ``{method: history}`` as returned by :func:`sgrad.train`.  A
    method that diverged (``history['diverged']``) is marked in the legend.
    Saves a PNG to ``path`` if given; returns the figure.
    """
    fig = Figure(figsize=(11, 8), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_acc, ax_cos, ax_gen = fig.subplots(2, 2).ravel()
    for method, history in histories.items():
        color = COLORS.get(method)
        label = method + (" (diverged)" if history.get("diverged") else "")
        epochs = np.arange(1, len(history["epoch_loss"]) + 1)
        ax_loss.plot(epochs, history["epoch_loss"], color=color, label=label)
        ax_acc.plot(epochs[:len(history["test_bit_accuracy"])], 100 * np.asarray(history["test_bit_accuracy"]),
                    color=color, label=label)
        for k, (cosines, gen_losses) in enumerate(zip(history["cosine_similarity"],
                                                      history["generator_epoch_loss"])):
            style = LAYER_STYLES[k % len(LAYER_STYLES)]
            ax_cos.plot(epochs[:len(cosines)], cosines, color=color, linestyle=style, label=f"{method}, layer {k + 1}")
            ax_gen.plot(epochs[:len(gen_losses)], gen_losses, color=color, linestyle=style,
                        label=f"{method}, layer {k + 1}")
    ax_loss.set(title="Training loss", xlabel="epoch", ylabel="loss (mean over the epoch's steps)", yscale="log")
    ax_acc.set(title="Held-out bit accuracy", xlabel="epoch", ylabel="% of bits right")
    ax_cos.set(title="Synthetic vs true gradient (probe batch)", xlabel="epoch", ylabel="cos(ĝ_k, g_k)")
    ax_cos.axhline(0.0, color="black", linewidth=0.5)
    ax_gen.set(title="Generator regression loss", xlabel="epoch", ylabel="½‖ĝ_k − target‖² / batch",
               yscale="log")
    for ax in (ax_loss, ax_acc, ax_cos, ax_gen):
        ax.grid(alpha=0.3)
        if ax.lines and ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


PAPER_COLORS = dict(COLORS, **{"synthetic-loss": "tab:red"})


def plot_paper(results: Mapping[tuple[str, int], Mapping[str, Any]], path: str | os.PathLike[str] | None = None, *,
               dataset: str = "MNIST") -> Figure:
    """Test accuracy against iterations, one panel per depth, one line per method.

    results: ``{(method, depth): history}`` from :func:`sgrad.experiments.mnist.run_grid`.
    dataset: what the panels' titles say the networks learned (a stand-in must not be called MNIST).
    Saves a PNG to ``path`` if given; returns the figure.
    """
    depths = sorted({d for _, d in results})
    fig = Figure(figsize=(4.5 * len(depths), 4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(depths), sharey=True))
    for ax, depth in zip(axes, depths):
        for (method, d), history in results.items():
            if d != depth:
                continue
            label = method + (" (diverged)" if history.get("diverged") else "")
            ax.plot(history["iteration"], 100 * np.asarray(history["test_accuracy"]),
                    color=PAPER_COLORS.get(method), label=label)
        ax.set(title=f"{dataset}, {depth} layers", xlabel="iteration")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend(fontsize="small", loc="lower right")
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


TIMELINE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "update": "tab:green", "dni": "tab:purple",
                   "synthetic input": "tab:red", "wait": "0.85"}


def plot_timeline(timelines: Mapping[str, Sequence[Any]], path: str | os.PathLike[str] | None = None) -> Figure:
    """What each worker did and when: one panel per run, one row per worker, a bar per event, coloured by its kind.

    timelines: ``{title: events}``, the events of :func:`sgrad.parallel.train_parallel` 's timeline
    (``(worker, kind, step, start, end)``, :mod:`sgrad.parallel.timeline`); each panel's clock starts
    at its first event.  Saves a PNG to ``path`` if given; returns the figure.
    """
    fig = Figure(figsize=(11, 1.2 + 1.3 * len(timelines)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(len(timelines), 1))
    for ax, (title, events) in zip(axes, timelines.items()):
        start = min(e.start for e in events)
        workers = sorted({e.worker for e in events})
        for row, worker in enumerate(workers):
            for kind, color in TIMELINE_COLORS.items():
                bars = [(1e3 * (e.start - start), 1e3 * (e.end - e.start)) for e in events
                        if e.worker == worker and e.kind == kind]
                ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=color, label=kind if row == 0 else None)
        ax.set_yticks(range(len(workers)), [f"worker {w}" for w in workers])
        ax.invert_yaxis()
        ax.set_title(title, loc="left", fontsize="medium")
        ax.set_xlabel("time (ms)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper right", ncols=len(TIMELINE_COLORS),
               fontsize="small")
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def plot_accuracy_against_time(histories: Mapping[str, Mapping[str, Any]],
                               path: str | os.PathLike[str] | None = None) -> Figure:
    """Test accuracy against wall-clock seconds, one line per run.

    histories: ``{label: history}``, each with ``evaluation_time`` (the wall-clock seconds at each
    evaluation, as :func:`sgrad.parallel.train_parallel` records them) and ``test_accuracy``.
    Saves a PNG to ``path`` if given; returns the figure.
    """
    fig = Figure(figsize=(6.5, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for label, history in histories.items():
        ax.plot(history["evaluation_time"], 100 * np.asarray(history["test_accuracy"]), marker=".", label=label)
    ax.set(xlabel="wall-clock time (s)", ylabel="test accuracy (%)", title="Test accuracy against wall-clock time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


RNN_COLORS = {"bptt": "tab:blue", "dni": "tab:orange"}


def plot_copy_lengths(results: Mapping[tuple[str, str, int, int], Mapping[str, Any]],
                      path: str | os.PathLike[str] | None = None) -> Figure:
    """The largest N solved against the window T: one panel per task, one line per method (median over seeds).

    results: ``{(task, method, T, seed): history}`` from :func:`sgrad.experiments.rnn.run_grid`; each
    seed's own N is a dot.  Saves a PNG to ``path`` if given; returns the figure.
    """
    tasks = list(dict.fromkeys(t for t, _, _, _ in results))
    fig = Figure(figsize=(4.5 * len(tasks), 4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(tasks)))
    for ax, task in zip(axes, tasks):
        for method in dict.fromkeys(m for t, m, _, _ in results if t == task):
            cells = [(w, h["solved"]) for (t, m, w, _), h in results.items() if (t, m) == (task, method)]
            windows = sorted({w for w, _ in cells})
            color = RNN_COLORS.get(method)
            ax.plot(windows, [np.median([n for w2, n in cells if w2 == w]) for w in windows], marker="o",
                    color=color, label=method)
            ax.scatter([w for w, _ in cells], [n for _, n in cells], color=color, alpha=0.4, s=12)
        ax.set(title=task, xlabel="window T (steps between boundaries)", ylabel="largest N solved")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def plot_curricula(results: Mapping[tuple[str, str, int, int], Mapping[str, Any]],
                   path: str | os.PathLike[str] | None = None) -> Figure:
    """Learning curves: the curriculum's N against training steps, one panel per task, a line per cell.

    results: as for :func:`plot_copy_lengths`; the colour is the method, the line's darkness the T.
    Saves a PNG to ``path`` if given; returns the figure.
    """
    tasks = list(dict.fromkeys(t for t, _, _, _ in results))
    windows = sorted({w for _, _, w, _ in results})
    fig = Figure(figsize=(5.5 * len(tasks), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(tasks)))
    for ax, task in zip(axes, tasks):
        for (t, method, window, seed), history in results.items():
            if t != task:
                continue
            shade = 0.35 + 0.65 * (windows.index(window) + 1) / len(windows)
            ax.step(history["step"], history["length"], where="post", color=RNN_COLORS.get(method), alpha=shade,
                    label=f"{method}, T = {window}" + (f", seed {seed}" if seed else ""))
        ax.set(title=task, xlabel="training step", ylabel="N (the curriculum's current length)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small", ncols=2)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
