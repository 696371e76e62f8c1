"""What the generator M at a window's boundary learns from: the strategies that :func:`sgrad.recurrent.tbptt.tbptt_step`
calls once per boundary s_k.

M(s_k) stands in for the gradient that the steps after s_k send back.  Each strategy gives it a target,
from the boundary's :class:`~sgrad.recurrent.tbptt.Boundary` (the modules before they step, the sequence from s_k on,
and δ_k, the gradient that reached s_k in the window's own backward), with γ the weight of ĝ where it
enters a backward (:class:`~sgrad.recurrent.tbptt.SyntheticGradient`'s ``synthetic_scale``):

- :data:`ONE_WINDOW`, the method: δ_k = the window's loss and γ ĝ_{k+1} backpropagated to s_k, a bootstrapped
  target, as one-step temporal-difference learning has;
- :class:`NWindows` (n): the loss of n windows and γ M(s_{k+n}) at their end, backpropagated to s_k, as an
  n-step return (a teaching option, computed on copies);
- :class:`Untruncated`: the loss of every later step, backpropagated without truncation (a teaching option:
  the gradient M stands in for, computed on copies);
- :class:`LambdaReturn` (λ): the λ-return, a mixture of every n-window target, as TD(λ)'s forward view
  (Pemberton & Costa 2024, BP(λ)); :class:`sgrad.recurrent.eligibility_traces.BPLambda` is its backward view, online.
"""

from typing import Any

import numpy as np

from .. import argument_checks


class BoundaryTargets:
    """A strategy for M at a boundary.  :meth:`learn` regresses M(s_k) onto :meth:`target` once per boundary."""

    def target(self, boundary: Any) -> np.ndarray:
        """M(s_k)'s target, (batch, state_dim), computed before the core and the readout step."""
        raise NotImplementedError

    def check(self, generator: Any) -> None:
        """Refuse a generator this strategy cannot teach, before anything changes (all of sgrad's generators pass)."""

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
    on (``Sequences(..., sequence_ends=False)``); with it ending, an n that reaches the end gives the untruncated gradient.
    """

    def __init__(self, n: int) -> None:
        self.n = argument_checks.check_integer(n, "n (the windows an n-window target spans)")

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


class LambdaReturn(BoundaryTargets):
    """G_k^λ = (1 - λ) Σ_{n<m} λ^{n-1} G_k^(n) + λ^{m-1} G_k^(m), over the m windows left from s_k.

    A mixture of the n-window targets of :class:`NWindows`: λ = 0 is δ_k (the method), λ = 1 the last target,
    which reaches the batch's end (the untruncated gradient where the sequence ends).  Computed on copies in
    one sweep back over the windows left, with G^(0)_{k+1} = γ M(s_{k+1}) (the bootstrap):

        G_j^λ = dL_j/ds_j + ((1 - λ) γ M(s_{j+1}) + λ G_{j+1}^λ) ∂s_{j+1}/∂s_j,

    the last window taking γ M(s) at the end only if the sequence goes on.
    """

    def __init__(self, lam: float) -> None:
        self.lam = argument_checks.check_number(lam, "λ (lam, the weight of each longer target)", at_least=0, at_most=1,
                                                example="0.5")

    def target(self, boundary: Any) -> np.ndarray:
        if self.lam == 0:
            return boundary.delta
        b, lam = boundary, self.lam
        runs, start = [], b.state
        for begin in range(0, b.steps_left, b.window):
            core, d_outputs, start = b.run_copy(begin, min(begin + b.window, b.steps_left), start)
            runs.append((core, d_outputs, start))
        g_lambda: Any = None
        for j, (core, d_outputs, end_state) in reversed(list(enumerate(runs))):
            if j == len(runs) - 1:
                end_gradient = None if b.sequence_ends else b.scale * b.generator.predict(end_state)
            else:
                end_gradient = (1 - lam) * b.scale * b.generator.predict(end_state) + lam * g_lambda
            g_lambda = core.backward(d_outputs, end_gradient, input_delta=False)[1]
        return g_lambda

    def __repr__(self) -> str:
        return f"LambdaReturn({self.lam:g})"


ONE_WINDOW = OneWindow()
