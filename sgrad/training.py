"""Training a stack of layers by backprop, by no backprop, and by DNI or cDNI.

Every method starts from the same initial weights and sees the same batches
when given the same seed, so their curves differ only by the method.

A stack is a list of layers: hidden :class:`~sgrad.Layer` (or
:class:`~sgrad.DNI`) layers, then a linear top layer that outputs logits for
the binary cross-entropy (or sigmoid outputs for the blog's squared error).
"""

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _validation, kernels
from .blocks import update_module
from .checkpoint import fingerprint, resume_run, save_run
from .dni import DNI
from .layers import Layer
from .losses import bce_with_logits, mse
from .nonlinearities import get_nonlinearity
from .optimizers import get_update_rule

METHODS = ("backprop", "no-bprop", "dni", "cdni")
TARGETS = ("bootstrap", "true")
DTYPES = ("float32", "float64")
# The loss fixes the top layer's nonlinearity and how an output is read as a bit.
TASK_LOSSES = {
    "bce": (bce_with_logits, "identity", 0.0),
    "mse": (mse, "sigmoid", 0.5),
}


class TrainingDiverged(FloatingPointError):
    """Training produced a non-finite number; the message names the method, the step and the likely cause.

    ``history`` holds what was recorded up to the step that diverged.
    """

    def __init__(self, message: str, history: dict[str, Any]) -> None:
        super().__init__(message)
        self.history = history


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train.  The defaults are those of ``sgrad compare``.

    hidden : widths of the hidden layers.
    nonlin : the hidden layers' nonlinearity ('tanh', 'sigmoid', 'relu').
    update_rule : 'sgd', 'momentum' or 'adam', for layers and generators alike.
    alpha, generator_alpha : learning rates of the layers and of the generators
        (``generator_alpha=None``: the same as ``alpha``).
    loss : 'bce' (logits and binary cross-entropy) or 'mse' (sigmoid outputs, the blog's).
    generator_init : 'zeros' (the paper's) or 'blog' (the blog's random start).
    generator_targets : 'bootstrap' (the default, the method as published:
        each generator regresses onto the delta the layer above returned) or
        'true' (a teaching option: regress onto the true gradient dL/dh_k,
        which costs a full backward pass per step).
    batch_size : examples per step.  Each epoch reshuffles the training set
        and takes ``len(x_train) // batch_size`` full batches, so every step's
        gradients have the same scale; the few examples left over are seen in
        other epochs.
    probe_size : examples of the training set on which the synthetic gradients
        are compared to the true ones after every epoch (diagnostic only).
    dtype : 'float32' (the default, faster) or 'float64': the network's and the
        data's float type.
    seed : fixes the initial weights and the batch order.
    """

    hidden: tuple = (128, 64)
    nonlin: str = "tanh"
    epochs: int = 300
    batch_size: int = 32
    update_rule: str = "adam"
    alpha: float = 2e-3
    generator_alpha: float | None = None
    loss: str = "bce"
    generator_init: str = "zeros"
    generator_targets: str = "bootstrap"
    probe_size: int = 256
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.hidden, (tuple, list)) or not self.hidden:
            raise ValueError(f"hidden must be a non-empty sequence of layer widths; got {self.hidden!r}")
        for width in self.hidden:
            _validation.check_positive_int(width, "each hidden width")
        object.__setattr__(self, "hidden", tuple(int(w) for w in self.hidden))
        _validation.check_positive_int(self.epochs, "epochs")
        _validation.check_positive_int(self.batch_size, "batch_size")
        _validation.check_positive_int(self.probe_size, "probe_size")
        _validation.check_positive_int(self.seed, "seed", minimum=0)
        _validation.check_learning_rate(self.alpha, "alpha")
        if self.generator_alpha is not None:
            _validation.check_learning_rate(self.generator_alpha, "generator_alpha")
        _check_choice(self.loss, "loss", tuple(TASK_LOSSES))
        get_nonlinearity(self.nonlin)
        get_update_rule(self.update_rule)
        _check_choice(self.generator_targets, "generator_targets", TARGETS)
        _check_choice(self.generator_init, "generator_init", ("zeros", "blog"))
        _check_choice(self.dtype, "dtype", DTYPES)


def build_network(method: str, input_dim: int, output_dim: int, config: TrainConfig | None = None) -> list[Any]:
    """The stack for ``method``: hidden layers (DNI for 'dni' and 'cdni') and a linear top layer.

    The initial weights depend only on ``config.seed`` and the widths, never on
    the method, so every method starts from the same point.
    """
    config = TrainConfig() if config is None else config
    _check_choice(method, "method", METHODS)
    dims = (input_dim, *config.hidden, output_dim)
    layer_seeds = np.random.SeedSequence(config.seed).spawn(2)[0].spawn(len(dims) - 1)
    condition_dim = output_dim if method == "cdni" else 0
    _, top_nonlin, _ = TASK_LOSSES[config.loss]
    dtype = np.dtype(config.dtype)
    layers: list[Any] = []
    for k, (fan_in, fan_out) in enumerate(zip(dims[:-2], dims[1:-1])):
        rng = np.random.default_rng(layer_seeds[k])
        if method in ("dni", "cdni"):
            layers.append(DNI(fan_in, fan_out, config.nonlin, alpha=config.alpha,
                              generator_alpha=config.generator_alpha, condition_dim=condition_dim,
                              generator_init=config.generator_init,
                              update_rule=config.update_rule, rng=rng, dtype=dtype))
        else:
            layers.append(Layer(fan_in, fan_out, config.nonlin, update_rule=config.update_rule, rng=rng, dtype=dtype))
    layers.append(Layer(dims[-2], dims[-1], top_nonlin, update_rule=config.update_rule,
                        rng=np.random.default_rng(layer_seeds[-1]), dtype=dtype))
    return layers


def predict(layers: Sequence[Any], x: np.ndarray) -> np.ndarray:
    """The stack's output for x, computed with no side effects on the layers."""
    return forward_all(layers, x)[-1]


def forward_all(layers: Sequence[Any], x: np.ndarray) -> list[np.ndarray]:
    """``[x, h_1, ..., h_N]``: every layer's output, with no side effects."""
    hs = [x]
    for layer in layers:
        hs.append(kernels.dense_forward(hs[-1], layer.weights, layer.bias, layer.nonlin))
    return hs


def true_gradients(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Callable[..., Any]) -> list[Any]:
    """``[g_1, ..., g_{N-1}]``, the true dL/dh_k at every hidden layer, with no side effects."""
    hs = forward_all(layers, x)
    _, g = loss_fn(hs[-1], y)
    grads = []
    for k in range(len(layers) - 1, 0, -1):
        layer = layers[k]
        g, _, _, _ = kernels.dense_backward(g, hs[k], hs[k + 1], layer.weights, layer.nonlin_deriv,
                                            layer.bias is not None)
        grads.append(g)
    return grads[::-1]


def backprop_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Callable[..., Any], alpha: float, *,
                  trainable: int | None = None) -> float:
    """One step of backprop; only ``layers[trainable:]`` learn (default: all).  Returns the loss.

    The bottom layer checks ``x`` and the top layer checks the loss's gradient;
    in between, sgrad's own layers take what their neighbour made unchecked.
    """
    trainable = 0 if trainable is None else trainable
    h = layers[0].forward(x)
    for layer in layers[1:]:  # the bottom layer refused a one-row batch for its own batch norm, if any
        _validation.check_batch_rows(layer, h.shape[0])
    for layer in layers[1:]:
        h = _validation.forward_made_here(layer, h)
    loss, delta = loss_fn(h, y)
    top = len(layers) - 1
    for k in range(top, trainable - 1, -1):
        # The lowest learning layer's input delta would go nowhere: skip its matrix product.
        wanted = k > trainable
        if k < top:  # the delta came from the layer above
            delta = _validation.backward_made_here(layers[k], delta, wanted)
        else:
            delta = layers[k].backward(delta, input_delta=wanted)
        update_module(layers[k], alpha, spend=True)  # no one else has seen these gradients
    return loss


def dni_step(layers: Sequence[Any], x: np.ndarray, y: np.ndarray, loss_fn: Callable[..., Any], alpha: float, *,
             condition: np.ndarray | None = None,
             targets: Sequence[np.ndarray] | None = None) -> tuple[float, list[float]]:
    """One decoupled step of a stack whose hidden layers are DNI.

    Each hidden layer updates from its own ĝ_k as soon as it has computed h_k.
    The top layer alone sees the true gradient.  Each generator then regresses
    onto the delta that the layer above returned (bootstrapping), unless
    ``targets`` (one array per hidden layer, e.g. true gradients) is given.
    Returns ``(loss, generator_losses)``.
    """
    h = x
    deltas = []
    for k, layer in enumerate(layers[:-1]):
        inner = getattr(layer, "_forward_and_synthetic_update", None)
        if k == 0 or inner is None or h.shape[1] != layer.input_dim:
            # The bottom layer's input delta would have no generator to train: skip its matrix product.
            delta, h = layer.forward_and_synthetic_update(h, condition, input_delta=k > 0)
        else:  # h is what the layer below made: sgrad's DNI layers skip re-checking it
            delta, h = inner(h, condition, True)
        deltas.append(delta)
    top = layers[-1]
    _validation.check_batch_rows(top, h.shape[0])
    loss, g = loss_fn(_validation.forward_made_here(top, h), y)
    top_delta = top.backward(g)
    update_module(top, alpha, spend=True)  # no one else has seen these gradients
    if targets is None:
        # Layer k's target is what layer k+1 returned: ĝ_{k+1} backpropagated one layer.  sgrad made
        # these, so sgrad's DNI layers take them unchecked.
        targets = deltas[1:] + [top_delta]
        generator_losses = [getattr(layer, "_update_synthetic_weights", layer.update_synthetic_weights)(t)
                            for layer, t in zip(layers[:-1], targets)]
    else:
        generator_losses = [layer.update_synthetic_weights(t) for layer, t in zip(layers[:-1], targets)]
    return loss, generator_losses


def train(method: str, data: Sequence[np.ndarray], config: TrainConfig | None = None, *,
          progress: Callable[..., Any] | None = None, checkpoint: str | os.PathLike[str] | None = None,
          checkpoint_every: int | None = None) -> dict[str, Any]:
    """Train ``method`` on ``data = (x_train, y_train, x_test, y_test)`` and return its history.

    The history is a dict of plain lists and numbers (JSON-ready):

    - ``step_loss``: training loss of every step; ``epoch_loss``: their mean per epoch;
    - ``train_bit_accuracy``, ``test_bit_accuracy``, ``train_exact_accuracy``,
      ``test_exact_accuracy``, ``test_loss``: per epoch, on the whole sets;
    - ``generator_loss``: per hidden layer, every step's regression loss, and
      ``generator_epoch_loss``: their mean per epoch (DNI only);
    - ``cosine_similarity``: per hidden layer, per epoch, cos(ĝ_k, g_k) on a
      fixed probe batch (DNI only; a diagnostic never fed back into training).
      The cosine ignores scale: g_k on the probe batch is that of the mean
      loss over ``probe_size`` rows, while generators learn targets at the
      scale of ``batch_size`` rows (multiply g_k by probe_size / batch_size
      to compare magnitudes);
    - ``wall_time``: seconds (summed over resumed sessions).

    ``progress``, if given, is called with a one-line status after some epochs.

    ``checkpoint``, a path to an .npz file, makes the run resumable: every
    ``checkpoint_every`` steps (None: only at the end) the network, the update
    rules' state, the batch generator and the history are saved there (see
    :mod:`sgrad.checkpoint`).  If the file already holds this run (same method,
    data and settings, ``epochs`` aside) at a step within this run's budget,
    training carries on from it and ends bit for bit where an uninterrupted run
    would; otherwise it starts afresh and replaces the file.

    Raises :class:`TrainingDiverged` if a number turns non-finite; its history
    then holds ``diverged_at_step``.
    """
    config = TrainConfig() if config is None else config
    _check_choice(method, "method", METHODS)
    x_train, y_train, x_test, y_test = data
    _check_data(x_train, y_train, x_test, y_test, config.batch_size)
    # In the network's dtype: float64 data would turn every product of a float32 network into float64.
    x_train, y_train, x_test, y_test = (np.asarray(a, dtype=config.dtype) for a in data)
    if checkpoint_every is not None:
        _validation.check_positive_int(checkpoint_every, "checkpoint_every")
    loss_fn, _, threshold = TASK_LOSSES[config.loss]
    layers = build_network(method, x_train.shape[1], y_train.shape[1], config)
    decoupled = method in ("dni", "cdni")
    n_hidden = len(layers) - 1
    batch_rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(2)[1])
    n_batches = len(x_train) // config.batch_size
    total = config.epochs * n_batches
    probe = slice(0, min(config.probe_size, len(x_train)))

    run = {"trainer": "sgrad.train", "method": method, "data": fingerprint(*data),
           "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "epochs"}}
    saved = resume_run(checkpoint, layers, run, budget=total, rng=batch_rng,
                       progress=None if progress is None else lambda line: progress(f"[{method}] {line}"))
    if saved is None:
        order: Any
        step, order, history = 0, None, _new_history(method, n_hidden if decoupled else 0)
    else:
        step, order, history = saved.metadata["step"], saved.extra["order"], saved.metadata["history"]
        if progress is not None:
            progress(f"[{method}] resumed from {checkpoint} at step {step} of {total}")
    start = time.perf_counter() - history["wall_time"]
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            while step < total:
                if step % n_batches == 0:  # a new epoch: a new order of the training set
                    order = batch_rng.permutation(len(x_train))
                i = step % n_batches
                idx = order[i * config.batch_size:(i + 1) * config.batch_size]
                x, y = x_train[idx], y_train[idx]
                step += 1
                if decoupled:
                    condition = y if method == "cdni" else None
                    targets = (true_gradients(layers, x, y, loss_fn)
                               if config.generator_targets == "true" else None)
                    loss, generator_losses = dni_step(layers, x, y, loss_fn, config.alpha,
                                                      condition=condition, targets=targets)
                    for k, value in enumerate(generator_losses):
                        history["generator_loss"][k].append(value)
                else:
                    trainable = n_hidden if method == "no-bprop" else 0
                    loss = backprop_step(layers, x, y, loss_fn, config.alpha, trainable=trainable)
                if not np.isfinite(loss):
                    raise FloatingPointError(f"the loss became {loss}")
                history["step_loss"].append(loss)
                if step % n_batches == 0:
                    epoch = step // n_batches
                    _record_epoch(history, layers, data, loss_fn, threshold, n_batches, probe,
                                  method if decoupled else None)
                    if progress is not None and (epoch == 1 or epoch % max(1, config.epochs // 10) == 0
                                                 or epoch == config.epochs):
                        progress(f"[{method}] epoch {epoch}/{config.epochs}  loss {history['epoch_loss'][-1]:.4f}  "
                                 f"held-out bits {100 * history['test_bit_accuracy'][-1]:.1f}%")
                if checkpoint is not None and (step == total or (checkpoint_every and step % checkpoint_every == 0)):
                    history["wall_time"] = time.perf_counter() - start
                    save_run(checkpoint, layers, run, step=step, rng=batch_rng, history=history,
                             extra={"order": order})
    except FloatingPointError as error:
        history["wall_time"] = time.perf_counter() - start
        history["diverged_at_step"] = step
        raise TrainingDiverged(
            f"{method} diverged at step {step}: {error}. The learning rate (alpha={config.alpha}"
            + (f", generator_alpha={config.generator_alpha}" if config.generator_alpha else "")
            + ") is the likely cause; try a smaller one.",
            history,
        ) from error
    history["wall_time"] = time.perf_counter() - start
    return history


def _new_history(method, n_generators):
    return {"method": method, "step_loss": [], "epoch_loss": [], "test_loss": [],
            "train_bit_accuracy": [], "test_bit_accuracy": [],
            "train_exact_accuracy": [], "test_exact_accuracy": [],
            "generator_loss": [[] for _ in range(n_generators)],
            "generator_epoch_loss": [[] for _ in range(n_generators)],
            "cosine_similarity": [[] for _ in range(n_generators)],
            "wall_time": 0.0}


def _record_epoch(history, layers, data, loss_fn, threshold, n_batches, probe, decoupled_method):
    x_train, y_train, x_test, y_test = data
    history["epoch_loss"].append(float(np.mean(history["step_loss"][-n_batches:])))
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        out = predict(layers, x)
        correct = (out > threshold) == (y > 0.5)
        history[f"{split}_bit_accuracy"].append(float(correct.mean()))
        history[f"{split}_exact_accuracy"].append(float(correct.all(axis=1).mean()))
        if split == "test":
            history["test_loss"].append(loss_fn(out, y)[0])
    if decoupled_method is not None:
        x, y = x_train[probe], y_train[probe]
        hs = forward_all(layers, x)
        condition = y if decoupled_method == "cdni" else None
        for k, g in enumerate(true_gradients(layers, x, y, loss_fn)):
            synthetic = layers[k].generator.predict(hs[k + 1], condition)
            history["cosine_similarity"][k].append(kernels.cosine_similarity(synthetic, g))
        for k, losses in enumerate(history["generator_loss"]):
            history["generator_epoch_loss"][k].append(float(np.mean(losses[-n_batches:])))


def _check_data(x_train, y_train, x_test, y_test, batch_size):
    _validation.check_batch(x_train, "x_train")
    _validation.check_batch(y_train, "y_train")
    if len(x_train) != len(y_train):
        raise ValueError(f"x_train and y_train must have as many rows; got {len(x_train)} and {len(y_train)}")
    if len(x_train) < batch_size:
        raise ValueError(f"batch_size ({batch_size}) is larger than the training set ({len(x_train)} examples); "
                         "use a smaller batch_size or more training examples")
    _validation.check_batch(x_test, "x_test", x_train.shape[1])
    _validation.check_batch(y_test, "y_test", y_train.shape[1])
    if len(x_test) != len(y_test):
        raise ValueError(f"x_test and y_test must have as many rows; got {len(x_test)} and {len(y_test)}")


def _check_choice(value, name, choices):
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, choices))}")
