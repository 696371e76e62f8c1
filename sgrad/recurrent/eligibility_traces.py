"""Accumulate BP(λ) (Pemberton & Costa 2024): the boundary generator M learns online, from TD errors and
eligibility traces over its parameters, with no look ahead.  The backward view of
:class:`sgrad.recurrent.boundary_targets.LambdaReturn`.

Window k runs from the boundary s_k to s_{k+1}; J_k = ∂s_{k+1}/∂s_k (batch, state_dim, state_dim) is its
Jacobian, δ_k the gradient its backward leaves at s_k (the window's loss and γ ĝ_{k+1}).  The λ-return's
recursion, G_k^λ = dL_k/ds_k + ((1 - λ) γ M(s_{k+1}) + λ G_{k+1}^λ) J_k, makes its error a sum of one-window errors:

    G_k^λ - M(s_k) = Σ_{j >= k} λ^{j-k} ε_j J_{j-1} ... J_k,   ε_j = δ_j + λ (1 - γ) M(s_{j+1}) J_j - M(s_j)

(at the batch's last window ε_j = δ_j - M(s_j)).  So the forward view's step, Σ_k (G_k^λ - M(s_k)) ∂M(s_k)/∂θ,
regroups by j into Σ_j ε_j e_j with the eligibility trace e_j = λ J_{j-1} e_{j-1} + ∂M(s_j)/∂θ: each boundary
learns from its own ε_j at once.  With M and the core held over a batch the two views agree exactly; online
they differ by what M and the core learnt meanwhile.  γ = 1 is the authors' form (they also discount the
losses, γ^i, which the n-window targets here do not).
"""

import copy
from typing import Any

import numpy as np

from .. import argument_checks
from .boundary_targets import BoundaryTargets

Trace = dict[str, np.ndarray]
INTERFACE = ("parameters", "predict", "parameter_jacobians", "apply_gradients")


def window_jacobian(core: Any, x: np.ndarray, state: np.ndarray) -> np.ndarray:
    """J = ∂s_end/∂s_start through the window x from ``state``: (batch, state_dim, state_dim), J[b, i, m] =
    ∂s_end[b, i]/∂state[b, m]; on a copy of the core, so nothing changes.

    Each row i is the backward of the unit gradient at s_end's i-th entry, all rows in one batch.
    """
    batch, width = state.shape
    core = copy.deepcopy(core)
    outputs, _ = core.forward(np.repeat(x, width, axis=0), np.repeat(state, width, axis=0))
    unit_rows = np.tile(np.eye(width, dtype=state.dtype), (batch, 1))
    _, d_state = core.backward(np.zeros_like(outputs), unit_rows, input_delta=False)
    return d_state.reshape(batch, width, width)


def accumulate_trace(trace: Trace | None, generator: Any, state: np.ndarray, jacobian: np.ndarray | None,
                     lam: float) -> Trace:
    """e_k = λ J_{k-1} e_{k-1} + ∂M(s_k)/∂θ, each ``(batch, state_dim, *parameter.shape)``; None starts a trace.

    ``jacobian`` is J_{k-1} (batch, state_dim, state_dim), the window from the trace's last boundary to s_k.
    """
    gradients = generator.parameter_jacobians(state)
    if trace is None:
        return gradients
    check_trace(trace, gradients)
    batch, width = state.shape
    jacobian = argument_checks.check_array_type(jacobian, "jacobian", f"a NumPy array of shape ({batch}, {width}, {width})")
    if jacobian.shape != (batch, width, width):
        raise ValueError(f"jacobian must be J = ∂s_k/∂s_(k-1), shape ({batch}, {width}, {width}); "
                         f"got shape {jacobian.shape}")
    return {name: lam * np.matmul(jacobian, trace[name].reshape(batch, width, -1)).reshape(trace[name].shape)
            + gradient for name, gradient in gradients.items()}


def trace_gradients(trace: Trace, td_error: np.ndarray) -> dict[str, np.ndarray]:
    """dθ = -(1/batch) Σ_b ε_b · e_b for each parameter: the step's gradient, keyed as the trace."""
    batch, width = td_error.shape
    return {name: -np.tensordot(td_error, e.reshape(batch, width, -1), axes=([0, 1], [0, 1])).reshape(e.shape[2:])
            / batch for name, e in trace.items()}


def check_trace(trace: Any, gradients: Trace) -> None:
    """Check that ``trace`` holds an array for each of M's parameters, of the shape of dM/dθ (``gradients``)."""
    if not isinstance(trace, dict) or set(trace) != set(gradients):
        raise ValueError(f"a trace must hold one array per parameter of the synthesiser, {sorted(gradients)}; "
                         f"got {sorted(trace) if isinstance(trace, dict) else type(trace).__name__}")
    for name, gradient in gradients.items():
        if not isinstance(trace[name], np.ndarray) or trace[name].shape != gradient.shape:
            got = trace[name].shape if isinstance(trace[name], np.ndarray) else type(trace[name]).__name__
            raise ValueError(f"the trace of {name!r} must have shape (batch, state_dim, *{name}.shape) = "
                             f"{gradient.shape}, as the synthesiser's; got {got}")


class BPLambda(BoundaryTargets):
    """Accumulate BP(λ): at each boundary s_k of a batch, with the trace started at its first,

    1. e_k = λ J_{k-1} e_{k-1} + ∂M(s_k)/∂θ;
    2. ε_k = δ_k + λ (1 - γ) M(s_{k+1}) J_k - M(s_k)  (δ_k - M(s_k) at the batch's last window);
    3. M's parameters step with -(1/batch) Σ ε_k · e_k.

    λ = 0 is the one-window method; offline it is
    :class:`LambdaReturn(λ) <sgrad.recurrent.boundary_targets.LambdaReturn>`.  M needs ``parameter_jacobians(h)`` and
    ``apply_gradients(gradients, alpha)`` (:class:`~sgrad.LinearGenerator`).
    Returns, per boundary, M's one-window regression loss ``1/(2 batch) |M(s_k) - δ_k|²``, for comparison.
    """

    def __init__(self, lam: float) -> None:
        self.lam = argument_checks.check_number(lam, "λ (lam, the trace's decay)", at_least=0, at_most=1, example="0.5")
        self.trace: Trace | None = None
        self.jacobian: np.ndarray | None = None

    def check(self, generator: Any) -> None:
        missing = [name for name in INTERFACE if not hasattr(generator, name)]
        if missing:
            raise TypeError(f"BP(λ)'s traces need a synthesiser with {', '.join(INTERFACE)} (as LinearGenerator "
                            f"has); {type(generator).__name__} lacks {', '.join(missing)}")

    def learn(self, generator: Any, boundary: Any, alpha: float) -> float:
        b = boundary
        if b.first:
            self.trace, self.jacobian = None, None
        last = b.steps_left <= b.window
        jacobian = None if last else window_jacobian(b.core, b.x[:, :b.window], b.state)
        trace = accumulate_trace(self.trace, generator, b.state, self.jacobian, self.lam)       # 1.
        prediction = generator.predict(b.state)
        td_error = b.delta - prediction                                                        # 2.
        if jacobian is not None and self.lam > 0 and b.scale < 1:
            ahead = generator.predict(b.core.last_state)
            td_error = td_error + self.lam * (1 - b.scale) * np.einsum("bi,bim->bm", ahead, jacobian)
        generator.apply_gradients(trace_gradients(trace, td_error), alpha)                     # 3.
        self.trace, self.jacobian = trace, jacobian
        return 0.5 * float(np.sum((prediction - b.delta) ** 2)) / len(prediction)

    def __repr__(self) -> str:
        return f"BPLambda({self.lam:g})"
