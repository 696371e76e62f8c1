"""What the generator M at a window's boundary learns from: the strategies that :func:`sgrad.tbptt.tbptt_step`
calls once per boundary s_k.

M(s_k) stands in for the gradient that the steps after s_k send back.  Each strategy gives it a target,
from the boundary's :class:`~sgrad.tbptt.Boundary` (the modules before they step, the sequence from s_k on,
and δ_k, the gradient that reached s_k in the window's own backward), with γ the weight of ĝ where it
enters a backward (``synthetic_scale``):

- :data:`ONE_WINDOW`, the method: δ_k = the window's loss and γ ĝ_{k+1} backpropagated to s_k, a bootstrapped
  target, as one-step temporal-difference learning has;
- :class:`NWindows` (n): the loss of n windows and γ M(s_{k+n}) at their end, backpropagated to s_k, as an
  n-step return (a teaching option, computed on copies);
- :class:`Untruncated`: the loss of every later step, backpropagated without truncation (a teaching option:
  the gradient M stands in for, computed on copies).
"""

from typing import Any

import numpy as np

from . import validation


class BoundaryTargets:
    """A strategy for M at a boundary.  :meth:`learn` regresses M(s_k) onto :meth:`target` once per boundary."""

    def target(self, boundary: Any) -> np.ndarray:
        """M(s_k)'s target, (batch, state_dim), computed before the core and the readout step."""
        raise NotImplementedError

    def learn(self, generator: Any, boundary: Any, alpha: float) -> float:
        """One descent step of M on ``1/(2 batch) |M(s_k) - target|²``; returns that loss."""
        target = self.target(boundary)
        generator.forward(boundary.state)
        return generator.update(target, alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class OneWindow(BoundaryTargets):
    """The method's bootstrapped target: δ_k, the window's loss and γ ĝ_{k+1} backpropagated to s_k."""

    def target(self, boundary: Any) -> np.ndarray:
        return boundary.delta


class NWindows(BoundaryTargets):
    """G_k^(n): the loss of the n windows from s_k and γ M(s_{k+n}) at their end, backpropagated to s_k.

    n = 1 is δ_k.  Where the n windows reach the batch's end, M(s_{k+n}) is there only if the sequence goes
    on (``sequence_ends=False``); with it ending, an n that reaches the end gives the untruncated gradient.
    """

    def __init__(self, n: int) -> None:
        self.n = validation.check_integer(n, "n (the windows an n-window target spans)")

    def target(self, boundary: Any) -> np.ndarray:
        steps = min(self.n * boundary.window, boundary.steps_left)
        if steps <= boundary.window:  # the n windows end where this one does: δ_k already
            return boundary.delta
        bootstrap = steps < boundary.steps_left or not boundary.sequence_ends
        return boundary.state_gradient(steps, bootstrap=bootstrap)

    def __repr__(self) -> str:
        return f"NWindows({self.n})"


class Untruncated(BoundaryTargets):
    """dL/ds_k: the loss of every step from s_k to the batch's end, backpropagated without truncation."""

    def target(self, boundary: Any) -> np.ndarray:
        return boundary.state_gradient(boundary.steps_left, bootstrap=False)


ONE_WINDOW = OneWindow()
