"""Figures comparing training methods.  Written with matplotlib's object API (no pyplot state)."""

import os
from collections.abc import Mapping
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


def plot_paper(results: Mapping[tuple[str, int], Mapping[str, Any]], path: str | os.PathLike[str] | None = None) -> Figure:
    """Test accuracy against iterations, one panel per depth, one line per method.

    results: ``{(method, depth): history}`` from :func:`sgrad.experiments.mnist.run_grid`.
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
        ax.set(title=f"MNIST, {depth} layers", xlabel="iteration")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend(fontsize="small", loc="lower right")
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
