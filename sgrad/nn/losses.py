"""Losses.  Each returns ``(value, gradient)``: the loss and dL/d(what it takes).

The reduction decides the scale of every gradient in the network (layers do
no averaging of their own):

- ``reduction="mean"`` (default): sum over features, mean over the batch;
- ``reduction="sum"``: sum over everything.  The blog's ``delta = output - y``
  is the gradient of :func:`mse` with this reduction;
- ``reduction="none"``: one value per example, shape (batch,); the gradient is
  that of each example's own loss (as for ``"sum"``).
"""

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import argument_checks
from .nonlinearities import sigmoid

REDUCTIONS = ("mean", "sum", "none")
# What every loss returns: the value (a float, or an array of one per example for reduction="none")
# and dL/d(its input).
LossResult = tuple[Any, np.ndarray]


def mse(prediction: np.ndarray, target: np.ndarray, reduction: str = "mean") -> LossResult:
    """Squared error ``L = 1/2 * sum((prediction - target)**2)``, reduced over the batch.

    prediction, target: (batch, features).  Returns ``(L, dL/dprediction)``.
    """
    _check_pair(prediction, target)
    diff = prediction - target
    value, scale = _reduce(0.5 * np.sum(diff * diff, axis=1), reduction)
    return value, scale * diff


def bce_with_logits(logits: np.ndarray, target: np.ndarray, reduction: str = "mean") -> LossResult:
    """Binary cross-entropy of ``sigmoid(logits)`` against targets in [0, 1].

    logits, target: (batch, features).  Returns ``(L, dL/dlogits)`` where
    ``dL/dlogits = sigmoid(logits) - target`` (times the reduction's scale).
    Stable for any logit: uses ``max(z, 0) - z*y + log(1 + exp(-|z|))``.
    """
    _check_pair(logits, target)
    if np.any((target < 0) | (target > 1)):
        raise ValueError(
            f"bce_with_logits targets must lie in [0, 1]; got values from {target.min()} to {target.max()}"
        )
    per_element = np.maximum(logits, 0) - logits * target + np.log1p(np.exp(-np.abs(logits)))
    value, scale = _reduce(per_element.sum(axis=1), reduction)
    return value, scale * (sigmoid(logits) - target)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits: (batch, classes), stable for any logit."""
    argument_checks.check_batch(logits, "logits")
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, reduction: str = "mean") -> LossResult:
    """Cross-entropy of ``softmax(logits)`` against class labels.

    logits: (batch, classes).  labels: integer classes of shape (batch,), or
    one-hot / probability rows of shape (batch, classes).  Returns
    ``(L, dL/dlogits)`` with ``dL/dlogits = softmax(logits) - onehot``
    (times the reduction's scale).
    """
    argument_checks.check_batch(logits, "logits")
    target = _as_target_distribution(labels, logits)
    shifted = logits - logits.max(axis=1, keepdims=True)  # softmax is unchanged by a shift; exp cannot overflow
    exp = np.exp(shifted)
    sums = exp.sum(axis=1, keepdims=True)
    log_softmax = shifted - np.log(sums)
    value, scale = _reduce(-(target * log_softmax).sum(axis=1), reduction)
    gradient = (exp / sums - target) * scale
    return value, gradient


LOSSES = {"mse": mse, "bce": bce_with_logits, "softmax_ce": softmax_cross_entropy}


def get_loss(name: str) -> Callable[..., LossResult]:
    """Return the loss function registered under ``name`` ('mse', 'bce', 'softmax_ce')."""
    try:
        return LOSSES[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(k) for k in LOSSES)
        raise ValueError(f"unknown loss {name!r}; choose one of {known}") from None


def _reduce(per_example, reduction):
    """The reduced value of per-example losses, and the factor that scales each example's gradient."""
    if reduction == "mean":
        return float(per_example.sum()) / per_example.shape[0], 1.0 / per_example.shape[0]
    if reduction == "sum":
        return float(per_example.sum()), 1.0
    if reduction == "none":
        return per_example, 1.0
    raise ValueError(f"reduction must be one of {REDUCTIONS}; got {reduction!r}")


def _check_pair(prediction, target):
    argument_checks.check_batch(prediction, "prediction")
    argument_checks.check_same_shape(target, "target", prediction, "the prediction")


def _as_target_distribution(labels, logits):
    """The labels as rows of class probabilities (batch, classes), checked."""
    shape = logits.shape
    batch, classes = shape
    argument_checks.check_array_type(labels, "labels",
                                     f"a NumPy array of integer classes ({batch},) or one-hot rows {shape}")
    if labels.ndim not in (1, 2):
        raise ValueError(
            f"labels must be integer classes of shape ({batch},) or one-hot rows of shape {shape}; "
            f"got shape {labels.shape}"
        )
    if labels.ndim == 1:
        if labels.dtype.kind not in "iu":
            raise TypeError(
                f"1-D labels must be integer class indices; got dtype {labels.dtype}. "
                "Pass one-hot rows of shape (batch, classes) for float targets."
            )
        if labels.shape[0] != batch:
            raise ValueError(f"labels must have shape ({batch},) to match the logits; got {labels.shape}")
        if labels.min() < 0 or labels.max() >= classes:
            raise ValueError(
                f"labels must lie in [0, {classes - 1}] for {classes} classes; "
                f"got values from {labels.min()} to {labels.max()}"
            )
        onehot = np.zeros(shape, dtype=logits.dtype)
        onehot[np.arange(batch), labels] = 1.0
        return onehot
    if labels.dtype.kind != "f" or labels.shape != shape:
        argument_checks.check_batch(labels, "labels", classes, width_name="classes")  # its message for dtype and width
        raise ValueError(f"one-hot labels must have the logits' shape {shape}; got {labels.shape}")
    # Non-negative rows that sum to 1 within allclose's default tolerance (1e-5 + 1e-8).  NaN or inf fails
    # one of the two (a NaN minimum or row sum compares false; -inf is caught by the minimum first).
    mass = labels.sum(axis=1)
    if not (labels.min() >= 0 and np.abs(mass - 1.0).max() <= 1e-5 + 1e-8):
        argument_checks.check_batch(labels, "labels", classes, width_name="classes")  # NaN or inf: its message
        raise ValueError("2-D labels must be one-hot or probability rows: non-negative, each row summing to 1")
    return labels
