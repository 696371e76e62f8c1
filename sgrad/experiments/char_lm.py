"""Character-level language modelling with truncated BPTT, with or without recurrent DNI.

An LSTM core reads a text one character at a time (one-hot, V wide), a linear
readout gives the logits of the next character, and the loss is the softmax
cross-entropy of every step.  The training text is cut into ``batch_size``
contiguous streams (:func:`data_gen.text.stream_rows`); each training step takes
the next window of T = ``window`` characters of every stream and one
:func:`~sgrad.recurrent.tbptt.tbptt_step` over it, starting from the state the previous
window ended with, so each row reads one continuous text:

- ``bptt``: truncated BPTT.  The gradient stops at every window's end: nothing
  teaches the core to keep, for more than T steps, what only pays off later;
- ``dni``: at every window's end a linear generator ``ĝ = M(s)`` of the state
  s = [h, c], zero-initialised, stands in for the gradient from the future that
  truncation throws away, trained on bootstrapped targets (see ``tbptt_step``).

Each training step takes H = ``horizon`` consecutive windows (H * T characters)
and cuts the gradient after the last one: M's bootstrapped targets then sum the
gradient of at most H windows ahead.  Without that cut (``horizon=None``: one
window per step, ĝ at every boundary, ``sequence_ends=False``) the targets
bootstrap without end on a continuing text, like a value function without
discount: once the LSTM carries its cell state along (forget gates near 1),
nothing bounds them, and M's regression can grow until the model falls back to
the unigram's bits per character.  The cut makes training steadier, not safe: a
long horizon can diverge the same way.  The other bound is the discount:
``synthetic_scale`` γ < 1 weights each window further away by γ once more, so
the targets stay a convergent sum.

When a stream runs out, every row starts again from its beginning with a zero
state.  The figure of merit is bits per character on the held-out end of the
text (:func:`data_gen.text.split_ids`), read from a zero state without truncation.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from data_gen.text import encode, one_hot_ids, split_ids, stream_rows, vocabulary

from ..argument_checks import check_choice, check_integer, check_number
from ..nn.losses import softmax_cross_entropy
from ..recurrent.tbptt import Sequences, SyntheticGradient, tbptt_step
from ..training.batches import BatchOrder
from ..training.loop import RunName, train_loop
from ..training.settings import check_settings, learning_rates
from .lstm_model import check_recurrent_settings, lstm_model

CHAR_LM_METHODS = ("bptt", "dni")
LN2 = float(np.log(2.0))


@dataclasses.dataclass(frozen=True)
class CharLMConfig:
    """One run's settings.

    steps : the budget, in training steps; each takes one window of every stream.
    window : T, the characters between two boundaries of truncated BPTT.
    horizon : the windows each training step takes, H; the gradient from beyond them is cut
        (ĝ = 0 after the step's last window), so a synthetic gradient bridges at most H - 1
        boundaries.  None: one window per step and ĝ at every boundary, without end (see the
        module docstring for why that diverges on a long text).
    batch_size : the number of contiguous streams the training text is cut into.
    hidden : the LSTM's hidden_dim (its state [h, c] has 2 * hidden numbers).
    validation_fraction : the share of the text, at its end, held out for bits per character.
    eval_every : steps between two measurements on the held-out text (and once at the end).
    update_rule, alpha, generator_alpha : the core's, the readout's and the generator's
        update rule and learning rates (``generator_alpha=None``: alpha).
    synthetic_scale : γ, the weight of ĝ where it enters a window's backward (DNI; see
        :class:`~sgrad.recurrent.tbptt.SyntheticGradient`): below 1, a discount per window that bounds M's targets.
    dtype : 'float32' or 'float64'.
    seed : fixes the initial weights (the same for both methods).
    """

    steps: int = 2000
    window: int = 8
    horizon: int | None = 4
    batch_size: int = 32
    hidden: int = 128
    validation_fraction: float = 0.1
    eval_every: int = 100
    update_rule: str = "adam"
    alpha: float = 3e-3
    generator_alpha: float | None = 3e-4
    synthetic_scale: float = 1.0
    dtype: str = "float64"
    seed: int = 0

    def __post_init__(self) -> None:
        check_settings(self, {
            **check_recurrent_settings(self, scale_example="0.5"),
            "window": check_integer(self.window, "window (T)"),
            "horizon": None if self.horizon is None else check_integer(self.horizon, "horizon"),
            "validation_fraction": check_number(self.validation_fraction, "validation_fraction", above=0, below=1,
                                                example="0.1"),
        })


def build_model(method: str, vocab_size: int, config: CharLMConfig) -> list[Any]:
    """``[core, readout]``, plus the boundary generator for ``dni``; the weights depend on the seed, not the method."""
    check_choice(method, "method", CHAR_LM_METHODS)
    vocab_size = check_integer(vocab_size, "vocab_size")
    return lstm_model(vocab_size, vocab_size, config, generator=method == "dni")


def bits_per_character(model: Sequence[Any], ids: np.ndarray, vocab_size: int, *, rows: int = 8,
                       chunk: int = 256) -> float:
    """Mean -log2 p(next character) over ``ids`` (n,), read as ``rows`` streams from a zero state; no side effects.

    The streams are read ``chunk`` characters at a time, the state carried between chunks: untruncated,
    since nothing is backpropagated.
    """
    core, readout = model[0], model[1]
    streams = stream_rows(ids, min(rows, len(ids) // 2))
    state, total = None, 0.0
    for begin in range(0, streams.shape[1] - 1, chunk):
        end = min(begin + chunk, streams.shape[1] - 1)
        x = one_hot_ids(streams[:, begin:end], vocab_size, dtype=core.dtype)
        outputs, state = core.predict(x, state)
        logits = readout.predict(outputs.reshape(-1, core.hidden_dim))
        per_step, _ = softmax_cross_entropy(logits, streams[:, begin + 1:end + 1].reshape(-1), reduction="none")
        total += float(per_step.sum())
    return total / (streams.shape[0] * (streams.shape[1] - 1)) / LN2


def train_char_lm(method: str, text: str, config: CharLMConfig | None = None, *,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train ``method`` ('bptt' or 'dni') as a character-level model of ``text``; returns the history.

    The vocabulary is the text's characters (:func:`data_gen.text.vocabulary`); the last
    ``validation_fraction`` of the text is held out.  The history holds ``step``,
    ``train_bpc`` (bits per character of the training windows since the last measurement)
    and ``valid_bpc`` (of the held-out text) at every measurement, ``unigram_bpc`` (the
    held-out text's bits under the training text's character frequencies: what the model
    must beat), ``vocab``, ``generator_loss`` (dni: mean regression loss of M per
    measurement) and ``wall_time`` (seconds).

    Raises ``ValueError`` for a text too short for the streams and windows asked for, and
    :class:`~sgrad.TrainingDiverged` if a number turns non-finite.
    """
    config = CharLMConfig() if config is None else config
    if not isinstance(config, CharLMConfig):
        raise TypeError(f"config must be a CharLMConfig; got {type(config).__name__}")
    check_choice(method, "method", CHAR_LM_METHODS)
    vocab = vocabulary(text)
    train_ids, valid_ids = split_ids(encode(text, vocab), config.validation_fraction)
    streams = stream_rows(train_ids, config.batch_size)
    if streams.shape[1] - 1 < config.window * (config.horizon or 1):
        raise ValueError(f"the training text makes streams of {streams.shape[1]} characters for batch_size="
                         f"{config.batch_size}, too short for one step of {config.horizon or 1} window(s) of "
                         f"T={config.window} and its targets; use a longer text, a smaller batch_size, window or horizon")
    model = build_model(method, len(vocab), config)
    core, readout = model[0], model[1]
    synthetic = SyntheticGradient(model[2], config.generator_alpha, config.synthetic_scale) if method == "dni" else None
    chunk = config.window * (config.horizon or 1)  # the characters of one training step
    chunks_per_pass = (streams.shape[1] - 1) // chunk
    # What runs on from one step to the next: the state of every stream, the steps taken, M's losses.
    carried: dict[str, Any] = {"state": None, "chunks": 0, "generator_losses": []}

    def train_step(_indices, history):
        begin = (carried["chunks"] % chunks_per_pass) * chunk
        if begin == 0:  # each stream starts again from its beginning, with a fresh state
            carried["state"] = None
        x = one_hot_ids(streams[:, begin:begin + chunk], len(vocab), dtype=core.dtype)
        y = streams[:, begin + 1:begin + chunk + 1]
        sequences = Sequences(x, y, state=carried["state"], sequence_ends=config.horizon is not None)
        loss, carried["state"], generator_losses = tbptt_step(core, readout, sequences, softmax_cross_entropy,
                                                              config.alpha, window=config.window, synthetic=synthetic)
        carried["chunks"] += 1
        carried["generator_losses"].extend(generator_losses)
        return loss

    def evaluate(step, losses, history):
        history["step"].append(step)
        history["train_bpc"].append(float(np.mean(losses)) / chunk / LN2)
        history["valid_bpc"].append(bits_per_character(model, valid_ids, len(vocab)))
        if synthetic is not None:
            history["generator_loss"].append(float(np.mean(carried["generator_losses"]))
                                             if carried["generator_losses"] else None)
            carried["generator_losses"].clear()
        return (f"step {step}/{config.steps}  train {history['train_bpc'][-1]:.3f}  held-out "
                f"{history['valid_bpc'][-1]:.3f} bits/char (unigram {history['unigram_bpc']:.3f})  "
                f"({history['wall_time']:.0f} s)")

    frequencies = np.bincount(train_ids, minlength=len(vocab)) + 1  # add-one: a held-out character may be unseen
    history: dict[str, Any] = {
        "method": method, "window": config.window, "seed": config.seed, "vocab": vocab, "step": [],
        "train_bpc": [], "valid_bpc": [], "generator_loss": [], "wall_time": 0.0,
        "unigram_bpc": float(-np.log2(frequencies[valid_ids] / frequencies.sum()).mean()),
    }
    names = RunName(f"{method} (char LM, T={config.window})",
                    f"[char-lm, {method}, T={config.window}, seed {config.seed}]", learning_rates(config, method == "dni"))
    # The streams are read in order: the loop's rng orders a one-example "training set" and draws nothing that matters.
    return train_loop(model, train_step, evaluate, steps=config.steps, eval_every=config.eval_every,
                      batches=BatchOrder(1, 1, np.random.default_rng(config.seed)), history=history, names=names,
                      run={}, progress=progress)
