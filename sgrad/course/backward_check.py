"""The gradient check of a backward pass: ``layer.backward`` against central differences, for any layer.

    print(gradient_check(layer, x))                          # in a notebook
    gradient_check(layer, x, raise_on_failure=True)          # in a test

Exercise 1's checker (:mod:`sgrad.course.exercise_layer_backward`) judges a student's ``Layer.backward`` the same
way, on layers it builds itself, and tells a backward that changed the weights as this check does
(:func:`compare_backward`).
"""

import copy
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .check_reports import TOLERANCE, CheckResult, Comparison, Failure, call_checked, compare, result_of
from .numerical_gradients import numerical_gradient, relative_error


def gradient_check(layer: Any, x: ArrayLike, *, seed: int = 0, eps: float = 1e-6,
                   raise_on_failure: bool = False) -> CheckResult:
    """Check ``layer.backward`` against central differences, for the input and every parameter.

    ``layer`` follows sgrad's Layer convention: ``forward(x)`` returns h,
    ``backward(output_delta)`` returns the input delta and fills the
    ``gradients`` dict, keyed as the ``parameters`` dict (float64 arrays).
    x: (batch, input_dim).  The loss is ``L = sum(h * R)`` with R drawn from
    ``seed``, so ``dL/dh = R`` is what backward receives.  The central
    differences are taken at the parameters of the forward pass, and backward
    must leave those unchanged.  Every relative error must be below 1e-6.
    """
    def check():
        gradients, changed = _run_backward(layer, np.array(x, dtype=np.float64), seed, eps)
        compare_backward([(label, mine, theirs, ()) for label, (mine, theirs) in gradients.items()], changed)
        return ", ".join(f"{label} {relative_error(*pair):.1e}" for label, pair in gradients.items()) + (
            f": every relative error below {TOLERANCE:g}")
    return result_of(f"gradient check of {type(layer).__name__}", check, raise_on_failure)


def _run_backward(layer, x, seed, eps):
    """Run forward and backward, and take central differences at the forward pass's parameters; returns
    ``({label: (from backward, from central differences)}, the parameters that backward changed)``."""
    h = np.array(call_checked("forward()", layer.forward, x), dtype=np.float64)
    reference = copy.deepcopy(layer)  # the layer as the forward pass left it
    R = np.random.default_rng(seed).standard_normal(h.shape)
    input_delta = call_checked("backward()", layer.backward, R.copy())
    parameters = reference.parameters
    received = {name: _copy(layer.gradients.get(name)) for name in parameters}
    received["input"] = _copy(input_delta)
    for name, param in parameters.items():
        if param.dtype != np.float64:
            raise Failure(f"{name} is {param.dtype}: a gradient check needs float64 parameters "
                          "(build the layer with dtype=np.float64)")

    def loss():
        return float(np.sum(reference.forward(x) * R))

    expected = {name: numerical_gradient(loss, param, eps) for name, param in parameters.items()}
    expected["input"] = numerical_gradient(loss, x, eps)
    now = layer.parameters
    changed = [name for name, param in parameters.items()
               if not (np.shape(now.get(name)) == param.shape and np.array_equal(now.get(name), param))]
    return {f"dL/d{name}": (received[name], expected[name]) for name in expected}, changed


def _copy(value):
    return None if value is None else np.array(value, dtype=np.float64)


BACKWARD_STEPPED = (
    "backward took a step",
    "backward computes and stores the gradients at the weights the forward pass used, and leaves the "
    "weights as they are; update() takes the step.")


def compare_backward(checks: list[Comparison], changed: list[str], where: str = "") -> None:
    """As :func:`~sgrad.course.check_reports.compare`, but first refuse a backward that changed the parameters
    ``changed``, saying whether its gradients hold."""
    if not changed:
        compare(checks, where)
        return
    try:
        compare(checks, where)
        verdict = "Your gradients themselves are right (checked at the weights of the forward pass)."
    except Failure as failure:
        verdict = f"Your gradients, checked at the weights of the forward pass:\n{failure}"
    names = " and ".join(f"self.{name}" for name in changed)
    raise Failure(f"backward(){where} changed {names}: backward must not change the parameters.\n"
                  f"Hint ({BACKWARD_STEPPED[0]}): {BACKWARD_STEPPED[1]}\n{verdict}")
