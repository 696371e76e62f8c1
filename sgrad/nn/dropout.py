"""Dropout (Srivastava et al., 2014): in training, each unit is kept with probability 1 - p and scaled by 1 / (1 - p).

``h = x * m / (1 - p)`` with ``m ~ Bernoulli(1 - p)`` drawn afresh at every forward pass in training mode,
so that the expected h is x; in evaluation mode ``h = x``.  The backward pass sends the gradient through the
same mask, ``dL/dx = dL/dh * m / (1 - p)``.  :class:`Dropout` draws one m per entry, on rows (batch, features)
or maps alike (PyTorch's ``F.dropout``); :class:`Dropout2d` one per channel of each example, so that a whole
map is kept or dropped (PyTorch's ``nn.Dropout2d``), on maps (batch, channels, height, width).

The masks come from the module's seed and a count of the masks drawn so far: the n-th mask is drawn by a
generator seeded with (seed, n).  The count is a buffer (:meth:`~sgrad.nn.module.Module.buffers`), so a
checkpoint carries it, a run carried on from one draws the masks it would have drawn, and a step that
fails puts it back (:func:`~sgrad.nn.module.restored_on_error`).
"""

from typing import Any

import numpy as np

from .. import argument_checks
from .module import NothingToLearn


class Dropout(NothingToLearn):
    """Zero each entry with probability ``p`` in training mode, scaling the rest by 1 / (1 - p); h = x in evaluation.

    p : float in [0, 1), the probability of dropping an entry (default 0.5, PyTorch's).
    seed, rng : where the module's seed comes from (an int, a SeedSequence, or drawn from ``rng``).

    ``predict`` never drops: drawing a mask would change the count, a side effect, so it gives
    the expected output, x, as evaluation mode does.  Attributes: ``mask``, the last forward's
    m / (1 - p) (None in evaluation mode); ``masks_drawn``, a 0-d int64 array.
    """

    backward_needs = ("output",)

    def __init__(self, p: float = 0.5, *, seed: argument_checks.Seed = None, rng: np.random.Generator | None = None
                 ) -> None:
        self.p = argument_checks.check_number(p, "p", at_least=0, below=1, example="0.5")
        self.seed = int(argument_checks.make_rng(seed, rng).integers(2**63))
        self.masks_drawn = np.zeros((), dtype=np.int64)
        self.update_state = {}
        self.mask: np.ndarray | None = None
        self.output: np.ndarray | None = None

    def buffers(self) -> dict[str, np.ndarray]:
        return {"masks_drawn": self.masks_drawn}

    def _check(self, x: Any) -> None:
        if isinstance(x, np.ndarray) and x.ndim == 4:
            argument_checks.check_feature_maps(x, "input")
        else:
            argument_checks.check_batch(x, "input")

    def _mask_shape(self, x: np.ndarray) -> tuple[int, ...]:
        """The shape of m: one entry per entry of x."""
        return x.shape

    def forward(self, x: np.ndarray) -> np.ndarray:
        """h = x m / (1 - p) in training mode (a new mask m each call), h = x in evaluation mode."""
        self._check(x)
        if not self.training or self.p == 0:
            self.mask, self.output = None, x
            return x
        rng = np.random.default_rng([self.seed, int(self.masks_drawn)])
        keep = rng.random(self._mask_shape(x)) >= self.p
        self.masks_drawn += 1
        self.mask = keep.astype(x.dtype) / x.dtype.type(1 - self.p)
        self.output = x * self.mask
        return self.output

    def predict(self, x: np.ndarray) -> np.ndarray:
        """x itself: the expected output, with no mask drawn."""
        self._check(x)
        return x

    def backward(self, output_delta: np.ndarray, *, input_delta: bool = True) -> np.ndarray | None:
        """dL/dx = dL/dh m / (1 - p), through the last forward's mask (dL/dh itself in evaluation mode)."""
        [output] = self.forward_cache()
        argument_checks.check_same_shape(output_delta, "output_delta", output, "the last output")
        if not argument_checks.check_bool(input_delta, "input_delta"):
            return None
        return output_delta if self.mask is None else output_delta * self.mask

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p})"


class Dropout2d(Dropout):
    """Dropout of whole maps: each channel of each example is kept or zeroed as one, on (batch, channels, height, width).

    Neighbouring pixels of a map are strongly correlated, so dropping them one by one hides little;
    dropping the whole map (Tompson et al., 2015) makes the next layer do without that feature.
    """

    def _check(self, x: Any) -> None:
        argument_checks.check_feature_maps(x, "input")

    def _mask_shape(self, x: np.ndarray) -> tuple[int, ...]:
        """One entry per channel of each example, (batch, channels, 1, 1), broadcast over the map."""
        return x.shape[:2] + (1, 1)
