"""Update rules: SGD, momentum and Adam, behind one interface.

An update rule holds only its hyperparameters, never per-parameter state, so
one rule object can be shared by every layer and generator.  The owner of a
parameter keeps the state that the rule creates::

    state = rule.init_state(param)
    rule.step(param, grad, state, lr)   # descends: param moves against grad

``step`` changes ``param`` and ``state`` in place.  The learning rate is passed
on every step (the blog's ``alpha``), so the owner decides it.
"""

import math

import numpy as np

from ..argument_checks import check_number


class UpdateRule:
    """Interface of an update rule.  Subclasses implement ``init_state`` and ``step``."""

    def init_state(self, param: np.ndarray) -> dict[str, np.ndarray]:
        """Return the state this rule needs for ``param`` (a dict of arrays)."""
        return {}

    def step(self, param: np.ndarray, grad: np.ndarray, state: dict[str, np.ndarray], lr: float) -> None:
        """Take one descent step on ``param`` (in place) with gradient ``grad`` of its shape."""
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class SGD(UpdateRule):
    """Plain gradient descent, the blog's rule: ``param -= lr * grad``."""

    def step(self, param: np.ndarray, grad: np.ndarray, state: dict[str, np.ndarray], lr: float) -> None:
        _check_gradient(param, grad)
        param -= lr * grad


class Momentum(UpdateRule):
    """Heavy-ball momentum: ``v = momentum * v - lr * grad; param += v``."""

    def __init__(self, momentum: float = 0.9) -> None:
        self.momentum = check_number(momentum, "momentum", at_least=0, below=1, example="0.9")

    def init_state(self, param: np.ndarray) -> dict[str, np.ndarray]:
        return {"velocity": np.zeros_like(param)}

    def step(self, param: np.ndarray, grad: np.ndarray, state: dict[str, np.ndarray], lr: float) -> None:
        _check_gradient(param, grad)
        velocity = state["velocity"]
        velocity *= self.momentum
        velocity -= lr * grad
        param += velocity


class Adam(UpdateRule):
    """Adam (Kingma & Ba, 2015) with bias-corrected first and second moments."""

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        self.beta1 = check_number(beta1, "beta1", at_least=0, below=1, example="0.9")
        self.beta2 = check_number(beta2, "beta2", at_least=0, below=1, example="0.999")
        self.eps = check_number(eps, "eps", above=0, example="1e-8")

    def init_state(self, param: np.ndarray) -> dict[str, np.ndarray]:
        return {"m": np.zeros_like(param), "v": np.zeros_like(param), "t": np.zeros((), dtype=np.int64)}

    def step(self, param: np.ndarray, grad: np.ndarray, state: dict, lr: float) -> None:
        _check_gradient(param, grad)
        m, v = state["m"], state["v"]
        state["t"] += 1
        t = int(state["t"])
        # One scratch array of param's shape serves every intermediate: no other temporaries.
        scratch = np.multiply(grad, 1.0 - self.beta1)
        m *= self.beta1
        m += scratch
        np.multiply(grad, grad, out=scratch)
        scratch *= 1.0 - self.beta2
        v *= self.beta2
        v += scratch
        # The bias-corrected step lr * m_hat / (sqrt(v_hat) + eps), with m_hat = m / (1 - beta1**t)
        # and v_hat = v / (1 - beta2**t), arranged as PyTorch's Adam arranges it.
        denominator = np.sqrt(v, out=scratch)
        denominator /= math.sqrt(1.0 - self.beta2**t)
        denominator += self.eps
        step = np.divide(m, denominator, out=scratch)
        step *= lr / (1.0 - self.beta1**t)
        param -= step


UPDATE_RULES = {"sgd": SGD, "momentum": Momentum, "adam": Adam}


def get_update_rule(rule: str | UpdateRule | None) -> UpdateRule:
    """Return an :class:`UpdateRule` from a name ('sgd', 'momentum', 'adam'), an instance, or None (SGD)."""
    if rule is None:
        return SGD()
    if isinstance(rule, UpdateRule):
        return rule
    if isinstance(rule, str) and rule in UPDATE_RULES:
        return UPDATE_RULES[rule]()
    known = ", ".join(repr(k) for k in UPDATE_RULES)
    raise ValueError(
        f"unknown update rule {rule!r}; pass one of {known} or an UpdateRule such as Adam(beta1=0.9)"
    )


def _check_gradient(param, grad):
    """A gradient of another shape would be broadcast onto the parameter: refuse it."""
    if not isinstance(grad, np.ndarray) or grad.shape != param.shape:
        got = f"shape {grad.shape}" if isinstance(grad, np.ndarray) else type(grad).__name__
        raise ValueError(f"grad must be an array of the parameter's shape {param.shape}; got {got}")
