"""Copy and Repeat Copy (Graves et al. 2014), the recurrent tasks of the DNI paper (Jaderberg et al. 2016, 3.1).

Copy, with N = ``length`` vectors of ``bits`` random bits (B = ``bits``)::

    step          0 ... N-1         N            N+1 ... 2N
    x (B+1 ch.)   the N vectors     delimiter     blank
    y (B ch.)     0                 0             the N vectors again
    mask          0                 0             1

The delimiter is input channel B (the vectors' channel B is 0), so a net sees
where the sequence ends.  ``y[:, N + 1 + i] = x[:, i, :B]``: the answer to the
vector at step i comes N + 1 steps after it, so a net trained with truncated
BPTT over windows of T <= N steps never sees a gradient joining the two.

Repeat Copy, with R repeats (R <= ``max_repeats``, one R per sequence)::

    step          0 ... N-1         N                          N+1 ... N+RN        N+RN+1
    x (B+2 ch.)   the N vectors     delimiter, R / max_repeats  blank              blank
    y (B+1 ch.)   0                 0                          the vectors R times  end marker
    mask          0                 0                          1                    1

R is given as a number in input channel B+1 at the delimiter's step, scaled into
(0, 1] as ``R / max_repeats``; the end marker is output channel B, 1 at the step
after the R-th copy and 0 on the other scored steps.  Sequences with fewer
repeats than the batch's largest end early: their steps after the end marker
are blank, with mask 0.

Everything is vectorized over the batch; every generator takes ``seed=`` or ``rng=``.
"""

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .checks import Seed, check_bytes, check_integer, make_rng

DEFAULT_MAX_REPEATS = 10
# The DNI paper's curriculum (appendix, Copy and Repeat Copy): N goes up by one when the average error
# falls below 0.15 bits per sequence.
PAPER_THRESHOLD = 0.15


def copy_batch(batch: int, length: int, *, bits: int = 8, seed: Seed = None, rng: np.random.Generator | None = None,
               dtype: DTypeLike = np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch of Copy sequences of N = ``length`` vectors of ``bits`` bits (see the module's table).

    Returns ``(x, y, mask)``: x (batch, 2N + 1, bits + 1), y (batch, 2N + 1, bits),
    mask (batch, 2N + 1), 1 on the N steps that are scored and 0 elsewhere.
    """
    batch, length, bits = (check_integer(v, name) for v, name in ((batch, "batch"), (length, "length"),
                                                                    (bits, "bits")))
    dtype = _check_dtype(dtype)
    time = 2 * length + 1
    _check_batch_bytes(batch, length, bits, time, bits + 1, dtype, "Copy")
    vectors = make_rng(seed, rng).integers(0, 2, size=(batch, length, bits)).astype(dtype)
    x = np.zeros((batch, time, bits + 1), dtype=dtype)
    x[:, :length, :bits] = vectors
    x[:, length, bits] = 1.0
    y = np.zeros((batch, time, bits), dtype=dtype)
    y[:, length + 1:] = vectors
    mask = np.zeros((batch, time), dtype=dtype)
    mask[:, length + 1:] = 1.0
    return x, y, mask


def repeat_copy_batch(batch: int, length: int, repeats: int | ArrayLike, *, bits: int = 8,
                      max_repeats: int = DEFAULT_MAX_REPEATS, seed: Seed = None,
                      rng: np.random.Generator | None = None,
                      dtype: DTypeLike = np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch of Repeat Copy sequences: N = ``length`` vectors, to be reproduced R times, then an end marker.

    repeats: R, one int for every sequence, or (batch,) ints, each in [1, max_repeats].
    Returns ``(x, y, mask)``: x (batch, time, bits + 2), y (batch, time, bits + 1),
    mask (batch, time), with time = N + R_max * N + 2 for the batch's largest R_max
    (see the module's table for where everything goes).
    """
    batch, length, bits = (check_integer(v, name) for v, name in ((batch, "batch"), (length, "length"),
                                                                    (bits, "bits")))
    max_repeats = check_integer(max_repeats, "max_repeats")
    r = _check_repeats(repeats, batch, max_repeats)
    dtype = _check_dtype(dtype)
    time = length + int(r.max()) * length + 2
    _check_batch_bytes(batch, length, bits, time, bits + 2, dtype, "Repeat Copy")
    vectors = make_rng(seed, rng).integers(0, 2, size=(batch, length, bits)).astype(dtype)
    x = np.zeros((batch, time, bits + 2), dtype=dtype)
    x[:, :length, :bits] = vectors
    x[:, length, bits] = 1.0
    x[:, length, bits + 1] = r / max_repeats
    # Output step N + 1 + k holds vector k mod N for k < R N; step N + 1 + R N is the end marker.
    k = np.arange(time - length - 1)
    copying = k[None, :] < (r * length)[:, None]                                  # (batch, time - N - 1)
    y = np.zeros((batch, time, bits + 1), dtype=dtype)
    y[:, length + 1:, :bits] = vectors[:, k % length] * copying[:, :, None]
    rows = np.arange(batch)
    y[rows, length + 1 + r * length, bits] = 1.0
    mask = np.zeros((batch, time), dtype=dtype)
    mask[:, length + 1:] = k[None, :] <= (r * length)[:, None]
    return x, y, mask


def bits_error(logits: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The error of each sequence in bits: how many scored output bits the net gets wrong.

    logits: (batch, time, outputs), a bit read as 1 where its logit is > 0;
    y: (batch, time, outputs) targets 0/1; mask: (batch, time), the steps that count (> 0).
    Returns (batch,) floats: the number of wrong bits on the scored steps of each sequence.
    """
    for name, array in (("logits", logits), ("y", y)):
        if not isinstance(array, np.ndarray) or array.ndim != 3:
            raise ValueError(f"{name} must be a NumPy array of shape (batch, time, outputs); "
                             f"got {getattr(array, 'shape', type(array).__name__)}")
    if y.shape != logits.shape:
        raise ValueError(f"y must have the shape of the logits, {logits.shape}; got {y.shape}")
    if not isinstance(mask, np.ndarray) or mask.shape != logits.shape[:2]:
        raise ValueError(f"mask must be a NumPy array of shape {logits.shape[:2]} (batch, time); "
                         f"got {getattr(mask, 'shape', type(mask).__name__)}")
    wrong = (logits > 0) != (y > 0.5)
    return (wrong.sum(axis=2) * (mask > 0)).sum(axis=1).astype(np.float64)


class Curriculum:
    """The DNI paper's curriculum: N starts at ``start`` and goes up by one whenever the error falls below a threshold.

    The criterion (Jaderberg et al. 2016, appendix, Copy and Repeat Copy): the
    average error, in bits per sequence (:func:`bits_error` averaged over the
    sequences of an evaluation), below ``threshold`` = 0.15.  The figure of
    merit is :attr:`solved`, the largest N whose error fell below the threshold
    within the budget of steps (0 if none did).

    Attributes
    ----------
    length : the N to train on now
    solved : the largest N solved so far, ``length - 1`` once N=start is solved
    history : one ``(step, length, error)`` triple per :meth:`update`
    """

    def __init__(self, *, threshold: float = PAPER_THRESHOLD, start: int = 1) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0:
            raise ValueError(f"threshold must be a number of bits > 0, e.g. 0.15; got {threshold!r}")
        self.threshold = float(threshold)
        self.start = check_integer(start, "start")
        self.length = self.start
        self.history: list[tuple[int, int, float]] = []

    @property
    def solved(self) -> int:
        """The largest N whose average error fell below the threshold; 0 if none has yet."""
        return self.length - 1 if self.length > self.start else 0

    def update(self, step: int, errors: ArrayLike) -> bool:
        """Record the errors (bits per sequence, (batch,)) measured at N = :attr:`length` after ``step`` steps.

        Returns True (and raises N by one) if their average is below the threshold.
        """
        errors = np.asarray(errors, dtype=np.float64)
        if errors.ndim != 1 or errors.size == 0 or not np.isfinite(errors).all():
            raise ValueError(f"errors must be a non-empty 1-D array of finite bits per sequence; got {errors!r}")
        error = float(errors.mean())
        self.history.append((int(step), self.length, error))
        if error < self.threshold:
            self.length += 1
            return True
        return False

    def state(self) -> dict[str, Any]:
        """What :meth:`from_state` needs, JSON-ready (for a checkpoint)."""
        return {"threshold": self.threshold, "start": self.start, "length": self.length,
                "history": [list(entry) for entry in self.history]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "Curriculum":
        """A curriculum carrying on from :meth:`state`."""
        curriculum = cls(threshold=state["threshold"], start=state["start"])
        curriculum.length = check_integer(state["length"], "length")
        curriculum.history = [(int(s), int(n), float(e)) for s, n, e in state["history"]]
        return curriculum

    def __repr__(self) -> str:
        return f"Curriculum(length={self.length}, solved={self.solved}, threshold={self.threshold})"


def _check_batch_bytes(batch, length, bits, time, channels, dtype, task):
    """Refuse a batch whose arrays would not fit: the drawn bits (int64, then ``dtype``), and x, y and the mask."""
    nbytes = batch * length * bits * (8 + dtype.itemsize) + batch * time * (2 * channels) * dtype.itemsize
    check_bytes(nbytes, f"a batch of {batch} {task} sequences of {time} steps ({bits} bits each)",
                "use a smaller batch, length, bits or number of repeats")


def _check_repeats(repeats, batch, max_repeats):
    r = np.asarray(repeats)
    if r.dtype.kind not in "iu" or r.ndim > 1 or (r.ndim == 1 and r.shape != (batch,)):
        raise ValueError(f"repeats must be an integer, or ({batch},) integers (one per sequence); "
                         f"got {repeats!r}")
    if (r < 1).any() or (r > max_repeats).any():
        raise ValueError(f"repeats must lie in [1, max_repeats={max_repeats}]; got values from {r.min()} to "
                         f"{r.max()}. Raise max_repeats to allow more")
    return np.broadcast_to(r, (batch,)).astype(np.int64)


def _check_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"dtype must be a float type such as np.float64 or np.float32; got {dtype}")
    return dtype
