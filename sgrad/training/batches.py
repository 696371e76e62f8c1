"""The order in which a training loop takes its batches: a new permutation for every pass over the training set.

Each pass over the ``examples`` training examples takes a new order ``rng.permutation(examples)``, and
batches are consecutive slices of ``batch_size`` of it; a last slice too short to fill a batch is
skipped, so every step's gradient has the same scale.  The single-process loop
(:func:`sgrad.training.loop.train_loop`) and the parallel pipeline's bottom worker draw their
batches here, so both see the same batches for the same ``rng``.
"""

from typing import Any

import numpy as np


class BatchOrder:
    """The batches of a training set of ``examples`` rows, ``batch_size`` at a time, drawn by ``rng``.

    ``order`` and ``position`` carry on a resumed run (with ``rng`` in the state it was saved in);
    a fresh run starts with an empty order, so its first batch starts a pass.
    """

    def __init__(self, examples: int, batch_size: int, rng: np.random.Generator, order: np.ndarray | None = None,
                 position: int = 0) -> None:
        self.examples, self.batch_size, self.rng = examples, batch_size, rng
        self.order = np.arange(0) if order is None else order
        self.position = position

    def next(self) -> np.ndarray:
        """The indices of the next batch, (batch_size,)."""
        if self.position + self.batch_size > len(self.order):  # a new pass over the training set, in a new order
            self.order, self.position = self.rng.permutation(self.examples), 0
        indices = self.order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return indices

    def state(self) -> dict[str, Any]:
        """What carries the order on: the rng's state, the pass's order (examples,) and the position in it."""
        return {"rng": self.rng.bit_generator.state, "order": self.order, "position": self.position}
