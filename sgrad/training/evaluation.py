"""Measuring a trained stack: its output over a whole set in evaluation mode, and its accuracy; and how
close a synthetic gradient is to the true one (:func:`cosine_similarity`).

A test set goes through the layers a chunk of rows at a time (so that no intermediate array holds
the whole set), in evaluation mode: batch norm uses its running statistics, and nothing that
training changes moves.  The single-process experiments and the parallel workers measure here.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

EVALUATION_ROWS = 2000  # rows per predict call


def predict_in_eval_mode(layers: Sequence[Any], x: np.ndarray, rows: int = EVALUATION_ROWS) -> np.ndarray:
    """The output of ``layers`` for ``x`` (n, ...), ``rows`` rows at a time, in evaluation mode.

    The layers are back in training mode afterwards, also if a layer raises.
    """
    for layer in layers:
        layer.eval()
    try:
        outputs = []
        for i in range(0, len(x), rows):
            h = x[i:i + rows]
            for layer in layers:
                h = layer.predict(h)
            outputs.append(h)
    finally:
        for layer in layers:
            layer.train()
    return np.concatenate(outputs)


def accuracy(layers: Sequence[Any], x: np.ndarray, labels: np.ndarray, batch: int = EVALUATION_ROWS) -> float:
    """Fraction of rows whose largest output is the label, in evaluation mode (running batch-norm statistics).

    x: (n, features) or images (n, channels, height, width); labels: integer classes (n,).
    ``batch`` rows go through the layers at a time.  The layers are back in training mode afterwards.
    """
    return float(np.mean(predict_in_eval_mode(layers, x, batch).argmax(axis=1) == labels))

def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two arrays, flattened; 0.0 if either is all zeros."""
    a = a.ravel()
    b = b.ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm > 0 else 0.0

