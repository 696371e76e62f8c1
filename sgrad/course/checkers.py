"""The homework's checkers: a numerical gradient check, and checks of the three updates.

Each checker returns a :class:`CheckResult` that prints as one ✓/✗ line and a
message written for a student: the quantity that is wrong, what was expected
and what came, and, for the usual mistakes, a hint.  A checker never raises
because of a bug in the code it checks: an exception from that code
(NotImplementedError included) becomes a failed result.  For pytest, pass
``raise_on_failure=True`` to get an AssertionError carrying the message::

    print(check_layer_backward(MyLayer))                   # in a notebook
    check_layer_backward(MyLayer, raise_on_failure=True)   # in a test

What is checked, in the paper's notation (h = f(x W + b) a layer's output,
ĝ = M(h, c) the synthetic gradient, alpha a learning rate):

- ``check_layer_backward``: ``backward(dL/dh)`` against central differences
  taken at the weights of the forward pass, which backward must not change;
  dL/dz stored in ``weight_output_delta``.
- ``check_dni_update``: ``forward_and_synthetic_update`` against one descent
  step ``W <- W - alpha * x.T @ (ĝ * f'(h))``, returning ``(ĝ * f'(h)) @ W.T``
  with the weights from before the step.
- ``check_generator_update``: ``update_synthetic_weights(target)`` against one
  descent step on ``L_M = 1/(2 batch) * sum((ĝ - target)**2)``, returning L_M
  from before the step.

The last two are homework on writing a step with arrays: a method written
outside sgrad fails if it calls what would do the step for it
(``self.backward``, ``self.update``, ``self.generator.update``).  The calls are
seen by wrapping those methods on the checked object while it runs; a call
through ``super().backward`` alone is not seen.  sgrad's own classes take the
one public path, and pass.
"""

import copy
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..dni.decoupled import DNI
from ..dni.generators import regression_loss
from ..nn import kernels
from ..nn.layers import Layer
from . import exercise_runner

TOLERANCE = 1e-6  # largest relative error accepted; a correct float64 answer is near 1e-9 or below
BATCH = 8
# (nonlinearity, input_dim, output_dim): unequal widths expose transposes; the square one too, by value.
BACKWARD_CASES = (("tanh", 3, 5), ("sigmoid", 5, 2), ("relu", 4, 4))
# (nonlinearity, input_dim, output_dim, condition_dim): one plain DNI and one cDNI.
DNI_CASES = (("tanh", 3, 5, 0), ("sigmoid", 4, 3, 2))
# Different learning rates for the layer and its generator, so that mixing them up shows.
ALPHA, GENERATOR_ALPHA = 0.5, 0.2


@dataclass
class CheckResult:
    """The outcome of one check: its ``name``, whether it ``passed``, and a ``message`` for the student."""

    name: str
    passed: bool
    message: str

    def __str__(self) -> str:
        lines = [f"{'✓' if self.passed else '✗'} {self.name}"]
        lines += ["    " + line for line in self.message.splitlines()]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # a bare result in a notebook cell shows as if printed


# --- the exercises: the inputs a checker chooses, and its judge of what the student's code gave ----------


EXERCISE_TITLES = {"backward": "Layer.backward", "dni_update": "DNI.forward_and_synthetic_update",
                   "generator_update": "DNI.update_synthetic_weights"}


def exercise_inputs(exercise: str, seed: int = 0) -> dict[str, Any]:
    """The inputs that the checker of ``exercise`` ("backward", "dni_update", "generator_update") drives the
    student's class on: ``{"cases": [...]}``, each case the constructor's arguments and the arrays."""
    if exercise == "backward":
        return {"cases": [{"nonlin": nonlin, "input_dim": input_dim, "output_dim": output_dim, "seed": seed,
                           "x": np.random.default_rng(seed + 1).standard_normal((BATCH, input_dim)),
                           "R": np.random.default_rng(seed).standard_normal((BATCH, output_dim))}
                          for nonlin, input_dim, output_dim in BACKWARD_CASES]}
    cases = []
    for nonlin, input_dim, output_dim, condition_dim in DNI_CASES:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((BATCH, input_dim))
        c = rng.standard_normal((BATCH, condition_dim)) if condition_dim else None
        cases.append({"nonlin": nonlin, "input_dim": input_dim, "output_dim": output_dim,
                      "condition_dim": condition_dim, "alpha": ALPHA, "generator_alpha": GENERATOR_ALPHA,
                      "seed": seed, "x": x, "c": c, "target": rng.standard_normal((BATCH, output_dim))})
    return {"cases": cases}


def judge(exercise: str, inputs: dict[str, Any], record: dict[str, Any], raise_on_failure: bool = False) -> CheckResult:
    """The verdict on ``exercise``: the ``record`` that :func:`sgrad.course.exercise_runner.drive` made of the student's
    code on ``inputs``, compared with what sgrad's reference code gives on the same inputs."""
    judges = {"backward": (_judge_backward, _backward_passed), "dni_update": (_judge_dni_update, _dni_passed),
              "generator_update": (_judge_generator_update, _generator_passed)}
    judge_case, passed = judges[exercise]

    def check():
        if len(record["cases"]) != len(inputs["cases"]):
            raise _Failure(f"the check expected {len(inputs['cases'])} answers and got {len(record['cases'])}")
        for case, out in zip(inputs["cases"], record["cases"]):
            if "broken" in out:
                raise _Failure(f"the check could not run: {_one_line(out['broken'])}")
            judge_case(case, out)
        return passed(inputs["cases"])
    return _result(EXERCISE_TITLES[exercise], check, raise_on_failure)


# --- numerical gradients ---------------------------------------------------------------------


def numerical_gradient(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of the scalar function ``f()`` with respect to ``x``.

    ``f`` takes no argument and reads ``x``, a float64 array whose entries are
    nudged in place by +eps and -eps, one at a time, and restored: ``x`` is
    unchanged on return.  Returns an array of ``x``'s shape.
    """
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        original = x[i]
        x[i] = original + eps
        f_plus = f()
        x[i] = original - eps
        f_minus = f()
        x[i] = original
        grad[i] = (f_plus - f_minus) / (2 * eps)
    return grad


def relative_error(a: ArrayLike, b: ArrayLike) -> float:
    """``max |a - b| / max(|a| + |b|)``: below 1e-6 (usually near 1e-9) for a correct float64 gradient."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(float(np.max(np.abs(a) + np.abs(b))), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(a - b))) / scale


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
        backward = _run_backward(layer, np.array(x, dtype=np.float64), seed, eps)
        _report_backward([(label, mine, theirs, ()) for label, (mine, theirs) in backward.gradients.items()],
                         backward.changed)
        return ", ".join(f"{label} {relative_error(*pair):.1e}" for label, pair in backward.gradients.items()) + (
            f": every relative error below {TOLERANCE:g}")
    return _result(f"gradient check of {type(layer).__name__}", check, raise_on_failure)


@dataclass
class _Backward:
    """One forward and backward of a checked layer: its output h, and dL/dh = R."""

    gradients: dict[str, tuple[Any, np.ndarray]]  # {label: (from backward, from central differences)}
    h: np.ndarray
    R: np.ndarray
    reference: Any  # a copy of the layer as the forward pass left it
    changed: list[str]  # the parameters that backward changed


def _run_backward(layer, x, seed, eps):
    """Run forward and backward, and take central differences at the forward pass's parameters."""
    h = np.array(_run("forward()", layer.forward, x), dtype=np.float64)
    reference = copy.deepcopy(layer)
    R = np.random.default_rng(seed).standard_normal(h.shape)
    input_delta = _run("backward()", layer.backward, R.copy())
    parameters = reference.parameters
    received = {name: _copy(layer.gradients.get(name)) for name in parameters}
    received["input"] = _copy(input_delta)
    for name, param in parameters.items():
        if param.dtype != np.float64:
            raise _Failure(f"{name} is {param.dtype}: a gradient check needs float64 parameters "
                           "(build the layer with dtype=np.float64)")

    def loss():
        return float(np.sum(reference.forward(x) * R))

    expected = {name: numerical_gradient(loss, param, eps) for name, param in parameters.items()}
    expected["input"] = numerical_gradient(loss, x, eps)
    now = layer.parameters
    changed = [name for name, param in parameters.items()
               if not (np.shape(now.get(name)) == param.shape and np.array_equal(now.get(name), param))]
    return _Backward({f"dL/d{name}": (received[name], expected[name]) for name in expected}, h, R, reference,
                     changed)


BACKWARD_STEPPED = (
    "backward took a step",
    "backward computes and stores the gradients at the weights the forward pass used, and leaves the "
    "weights as they are; update() takes the step.")


def _report_backward(checks, changed, where=""):
    """As :func:`_report`, but first refuse a backward that changed the parameters, saying whether its gradients hold."""
    if not changed:
        _report(checks, where)
        return
    try:
        _report(checks, where)
        verdict = "Your gradients themselves are right (checked at the weights of the forward pass)."
    except _Failure as failure:
        verdict = f"Your gradients, checked at the weights of the forward pass:\n{failure}"
    names = " and ".join(f"self.{name}" for name in changed)
    raise _Failure(f"backward(){where} changed {names}: backward must not change the parameters.\n"
                   f"Hint ({BACKWARD_STEPPED[0]}): {BACKWARD_STEPPED[1]}\n{verdict}")


# --- Layer.backward --------------------------------------------------------------------------

MISSING_DERIVATIVE = (
    "missing nonlinearity derivative",
    "multiply output_delta by nonlin_deriv(self.output) first; that product, weight_output_delta = dL/dz, "
    "is what the weight, bias and input gradients are made of.")
PRE_ACTIVATION = (
    "f' evaluated at the pre-activation",
    "nonlin_deriv takes the layer's output h, not the pre-activation z = input @ weights + bias: "
    "call self.nonlin_deriv(self.output) (for tanh that gives 1 − h², which is f'(z)).")
AT_F_OF_H = (
    "f' evaluated at f(h)",
    "you applied the nonlinearity to h once more before taking the derivative; nonlin_deriv takes the "
    "output h as it is: self.nonlin_deriv(self.output).")
TRANSPOSED = (
    "transposed weight gradient",
    "weights_grad must have the shape of weights, (input_dim, output_dim): "
    "input.T @ weight_output_delta, not weight_output_delta.T @ input.")
WRONG_GRADIENT_SIGN = (
    "wrong sign",
    "yours is minus the gradient. backward returns the gradient itself; "
    "the minus sign of gradient descent belongs in update().")
WEIGHT_OUTPUT_DELTA = "self.weight_output_delta"
NOT_SET = {
    "dL/dweights": ("weights gradient not stored", "set self.weights_grad = input.T @ weight_output_delta."),
    "dL/dbias": ("bias gradient not stored", "set self.bias_grad, the sum of weight_output_delta over the batch."),
    "dL/dinput": ("nothing returned", "return the input delta, weight_output_delta @ weights.T."),
    WEIGHT_OUTPUT_DELTA: ("dL/dz not stored", "store dL/dz = output_delta * self.nonlin_deriv(self.output) in "
                          "self.weight_output_delta: the blog's name for it, which code after backward reads."),
}
AVERAGED = (
    "divided by the batch size",
    "a layer does no averaging: sum over the batch (the loss that made output_delta already set the scale).")


def check_layer_backward(layer_factory_or_class: Callable[..., Any], *, seed: int = 0,
                         raise_on_failure: bool = False) -> CheckResult:
    """Gradient-check ``backward`` of fresh layers: tanh 3→5, sigmoid 5→2, relu 4→4, each with a bias.

    ``layer_factory_or_class`` is a Layer subclass, or any function called as
    ``make(input_dim, output_dim, nonlin, seed=seed)`` that returns a layer
    with the weights of ``Layer(input_dim, output_dim, nonlin, seed=seed)``.
    backward must also store dL/dz in ``weight_output_delta``, and leave the
    weights unchanged.  A class written outside sgrad must define backward
    itself, not run sgrad's.  Recognises a missing nonlinearity derivative,
    one taken at the pre-activation or at f(h), a transposed weight gradient,
    a wrong sign and a gradient averaged over the batch.
    """
    inputs = exercise_inputs("backward", seed)
    return judge("backward", inputs, exercise_runner.drive("backward", layer_factory_or_class, inputs), raise_on_failure)


def _judge_backward(case, out):
    nonlin, input_dim, output_dim = case["nonlin"], case["input_dim"], case["output_dim"]
    where = f" ({nonlin} layer, {input_dim} → {output_dim})"
    reference = Layer(input_dim, output_dim, nonlin, seed=case["seed"])
    _refuse_sgrads_own(out, "backward", "Layer.backward")
    _raise_for(out)
    _refuse_calls("backward()", out["calls"], FORBIDDEN_IN_BACKWARD)
    _same_start(out["parameters"], reference.parameters, f"{out['class_name']}({input_dim}, {output_dim}, "
                f"{nonlin!r}, seed={case['seed']})", "Layer")
    x, R = case["x"].copy(), case["R"]  # x: nudged in place by the central differences, and restored
    h = reference.forward(x)

    def loss():
        return float(np.sum(reference.forward(x) * R))

    parameters = reference.parameters
    expected = {name: numerical_gradient(loss, param) for name, param in parameters.items()}
    expected["input"] = numerical_gradient(loss, x)
    received = dict(out["gradients"], input=out["input_delta"])
    hints = _backward_mistakes(reference, x, R)
    checks = [(f"dL/d{name}", received[name], expected[name], hints[f"dL/d{name}"]) for name in expected]
    checks.append((WEIGHT_OUTPUT_DELTA, out["weight_output_delta"], R * reference.nonlin_deriv(h),
                   hints[WEIGHT_OUTPUT_DELTA]))
    changed = [name for name, param in out["parameters"].items()
               if not _same_array(out["parameters_after"].get(name), param)]
    _report_backward(checks, changed, where=where)


def _backward_passed(cases):
    listed = ", ".join(f"{case['nonlin']} {case['input_dim']} → {case['output_dim']}" for case in cases)
    return (f"{listed}: weights, bias and input gradients, and weight_output_delta, all within {TOLERANCE:g} "
            "of central differences")


FORBIDDEN_IN_BACKWARD = (
    "a forbidden call",
    "it is sgrad's implementation of the method you are asked to write. Compute dL/dz, the gradients and the "
    "input delta with arrays.")


def _backward_mistakes(layer, x, R):
    """For each quantity, the wrong answers that the usual mistakes give for dL/dh = R, with their hints."""
    weights = layer.parameters["weights"]
    z = kernels.linear_forward(x, weights, layer.parameters.get("bias"))
    h = layer.nonlin(z)

    def made_of(dz):  # every quantity backward gives, from dL/dz
        return {"dL/dweights": x.T @ dz, "dL/dbias": dz.sum(axis=0), "dL/dinput": dz @ weights.T,
                WEIGHT_OUTPUT_DELTA: dz}

    right = made_of(R * layer.nonlin_deriv(h))
    wrong = [(made_of(R), MISSING_DERIVATIVE), (made_of(R * layer.nonlin_deriv(z)), PRE_ACTIVATION),
             (made_of(R * layer.nonlin_deriv(layer.nonlin(h))), AT_F_OF_H)]
    mistakes = {label: [(None, NOT_SET[label]), (-value, WRONG_GRADIENT_SIGN), (value / x.shape[0], AVERAGED)]
                + [(values[label], hint) for values, hint in wrong] for label, value in right.items()}
    mistakes["dL/dweights"] += [(values["dL/dweights"].T, TRANSPOSED) for values in (right, wrong[0][0])]
    return mistakes


# --- DNI.forward_and_synthetic_update --------------------------------------------------------

DNI_MISSING_DERIVATIVE = (
    "missing nonlinearity derivative",
    "the step is built from ĝ * f'(h), with f'(h) = self.nonlin_deriv(output); you used ĝ alone.")
WRONG_UPDATE_SIGN = {
    "weights": ("wrong update sign",
                "your weights moved by +alpha · input.T @ (ĝ * f'(h)), uphill (the blog post's bug); "
                "subtract the step to descend."),
    "bias": ("wrong update sign",
             "self.bias moved by +alpha · Σ over the batch of ĝ * f'(h), uphill; subtract it, "
             "as for the weights."),
}
NO_STEP = {
    "weights": ("no step taken",
                "self.weights did not change: subtract alpha · input.T @ (ĝ * f'(h)) from it."),
    "bias": ("bias forgotten",
             "self.bias did not change: subtract alpha · Σ over the batch of ĝ * f'(h) from it, "
             "as from the weights."),
}
STEP_DIVIDED = {
    "by the batch size": (
        "step divided by the batch size",
        "a layer's step sums over the batch, W ← W − alpha · input.T @ (ĝ * f'(h)), as backward does: ĝ, "
        "like a true gradient, already carries the scale of the loss. Do not divide by the batch size."),
    "twice": (
        "step divided by the batch size twice",
        "yours is divided by batch²; a layer's step sums over the batch, with no division at all."),
    "by every entry": (
        "step divided by batch × width",
        "yours is divided by batch · output_dim, as a mean over every entry of ĝ would be; a layer's step "
        "sums over the batch, with no division at all."),
}
LAYER_USED_GENERATOR_ALPHA = (
    "wrong learning rate",
    "the layer steps with self.alpha; self.generator_alpha is the generator's.")
POST_UPDATE_DELTA = (
    "a delta computed with the post-update weights",
    "compute input_delta = (ĝ * f'(h)) @ self.weights.T before you change the weights, as backprop would "
    "(the blog post computes it after). Taking W = self.weights or self.weights.T first is not enough: "
    "that is a view of the same memory, and the in-place -= changes it too. Compute the product "
    "before the step, or keep a .copy() of the weights.")
WRONG_DELTA_SIGN = (
    "wrong sign",
    "the delta passed down is (ĝ * f'(h)) @ weights.T, with no minus sign.")
DELTA_TIMES_ALPHA = (
    "delta scaled by the learning rate",
    "the delta passed down is (ĝ * f'(h)) @ weights.T, not multiplied by alpha or by −alpha: the layer "
    "below regresses its ĝ onto it, so it must be a gradient. alpha scales only the step on the weights "
    "and the bias.")
DNI_LABELS = {"output": "the returned output", "synthetic_gradient": "self.synthetic_gradient",
              "weights": "self.weights", "bias": "self.bias", "input_delta": "the returned input_delta"}
NO_SYNTHETIC_GRADIENT = (
    "ĝ not stored",
    "store ĝ = self.generator.forward(output, condition) in self.synthetic_gradient; "
    "update_synthetic_weights() needs it.")
FORBIDDEN_IN_STEP = (
    "a forbidden call",
    "they would do the exercise for you. Write the step with arrays: δ = ĝ * f'(h), "
    "input_delta = δ @ self.weights.T, then self.weights -= ... and self.bias -= ....")


def check_dni_update(dni_class_or_factory: Callable[..., Any], *, seed: int = 0,
                     raise_on_failure: bool = False) -> CheckResult:
    """Check one ``forward_and_synthetic_update(input, condition)`` step against the formulas.

    Builds a plain DNI (tanh 3→5) and a cDNI (sigmoid 4→3, condition_dim=2)
    with random generators (``generator_init='blog'``, so ĝ is not zero) and
    SGD, and checks that the step returns ``(input_delta, output)`` with
    ``output = h``, stores ``synthetic_gradient = ĝ``, and leaves::

        weights = W_old - alpha * x.T @ (ĝ * f'(h))
        bias    = b_old - alpha * sum over the batch of (ĝ * f'(h))
        input_delta = (ĝ * f'(h)) @ W_old.T

    ``dni_class_or_factory`` is a DNI subclass or any function called as
    ``make(input_dim, output_dim, nonlin, alpha=..., condition_dim=...,
    generator_alpha=..., generator_init='blog', seed=...)`` that returns a layer
    with the parameters of sgrad's DNI built so.  A step written outside
    sgrad must be the class's own and must not call ``self.backward`` or
    ``self.update``.  Recognises the wrong update sign (the blog post's), on
    the weights or the bias alone, a missing nonlinearity derivative or one
    taken at the pre-activation or at f(h), a step divided by the batch size,
    a forgotten bias, a delta scaled by ±alpha and a delta computed with the
    post-update weights (the blog post's, or through a view of them).
    """
    inputs = exercise_inputs("dni_update", seed)
    return judge("dni_update", inputs, exercise_runner.drive("dni_update", dni_class_or_factory, inputs), raise_on_failure)


def _judge_dni_update(case, out):
    where = (f" ({case['nonlin']} DNI, {case['input_dim']} → {case['output_dim']}"
             f"{', conditioned' if case['condition_dim'] else ''})")
    reference = _reference_dni(case)
    _refuse_sgrads_own(out, "forward_and_synthetic_update", "DNI.forward_and_synthetic_update")
    _raise_for(out)
    _refuse_calls("forward_and_synthetic_update()", out["calls"], FORBIDDEN_IN_STEP)
    _same_dni_start(out, reference, case)
    expected, mistakes, dz = _reference_dni_step(reference, case["x"], case["c"])
    input_delta, output = _delta_and_output(out["returned"], expected)
    received = {"output": output, "synthetic_gradient": out["synthetic_gradient"],
                "weights": out["weights"], "bias": out["bias"], "input_delta": input_delta}
    mistakes["input_delta"] += _post_update_deltas(dz, expected["weights"], out["weights"])
    _report([(DNI_LABELS[name], value, expected[name], mistakes[name]) for name, value in received.items()],
            where=where)


def _dni_passed(cases):
    return ("plain and conditioned DNI: output, ĝ, weights, bias and input_delta all match one descent step "
            "on ĝ, with the delta from the pre-update weights")


def _reference_dni(case):
    """sgrad's DNI, built as the checked class is."""
    return DNI(case["input_dim"], case["output_dim"], case["nonlin"], alpha=case["alpha"],
               condition_dim=case["condition_dim"], generator_alpha=case["generator_alpha"], generator_init="blog",
               seed=case["seed"])


def _same_dni_start(out, reference, case):
    """Fail unless the checked layer was built with the parameters of sgrad's DNI (a zero generator, said so)."""
    generator = {name: value for name, value in out["parameters"].items() if name.startswith("generator")}
    if generator and all(isinstance(value, np.ndarray) and not np.any(value) for value in generator.values()):
        raise _Failure("this check needs a generator with non-zero weights, so that ĝ is not zero: "
                       "build the layer with generator_init='blog'")
    _same_start(out["parameters"], _with_generator(reference),
                f"{out['class_name']}({case['input_dim']}, {case['output_dim']}, {case['nonlin']!r}, ...)", "DNI")


def _reference_dni_step(layer, x, c):
    """What one DNI step should leave (by the formulas), and the wrong answers of the usual mistakes."""
    W, b = layer.weights.copy(), layer.bias.copy()
    z = kernels.linear_forward(x, W, b)
    h = layer.nonlin(z)
    g_hat = layer.generator.predict(h, c)
    if not np.any(g_hat):
        raise _Failure("this check needs a generator with non-zero weights, so that ĝ is not zero: "
                       "build the layer with generator_init='blog'")
    dz = g_hat * layer.nonlin_deriv(h)
    alpha = layer.alpha
    expected = {"output": h, "synthetic_gradient": g_hat, "input_delta": dz @ W.T,
                "weights": W - alpha * x.T @ dz, "bias": b - alpha * dz.sum(axis=0)}
    # δ as the usual mistakes make it, and the factors by which they scale the step
    deltas = [(dz, None), (g_hat, DNI_MISSING_DERIVATIVE), (g_hat * layer.nonlin_deriv(z), PRE_ACTIVATION),
              (g_hat * layer.nonlin_deriv(layer.nonlin(h)), AT_F_OF_H)]
    batch, width = h.shape
    scales = [(1.0, None), (1 / batch, STEP_DIVIDED["by the batch size"]), (1 / batch**2, STEP_DIVIDED["twice"]),
              (1 / (batch * width), STEP_DIVIDED["by every entry"])]
    if layer.generator_alpha != alpha:
        scales.append((layer.generator_alpha / alpha, LAYER_USED_GENERATOR_ALPHA))
    steps = {"weights": (W, lambda delta: x.T @ delta), "bias": (b, lambda delta: delta.sum(axis=0))}
    mistakes = {}
    for name, (start, step) in steps.items():
        mistakes[name] = [(start, NO_STEP[name])] + [
            (start - sign * scale * alpha * step(delta), hint)
            for delta, delta_hint in deltas for scale, scale_hint in scales
            for sign, sign_hint in ((1, None), (-1, WRONG_UPDATE_SIGN[name]))
            if (hint := _combine(delta_hint, scale_hint, sign_hint))]
    mistakes["input_delta"] = [
        (factor * delta @ W.T, hint) for delta, delta_hint in deltas
        for factor, factor_hint in ((1, None), (-1, WRONG_DELTA_SIGN), (alpha, DELTA_TIMES_ALPHA),
                                    (-alpha, DELTA_TIMES_ALPHA))
        if (hint := _combine(delta_hint, factor_hint))]
    mistakes["synthetic_gradient"] = [(None, NO_SYNTHETIC_GRADIENT)]
    mistakes["output"] = []
    return expected, mistakes, dz


def _post_update_deltas(dz, right_weights_after, weights_after):
    """The delta computed after the step: with the right new weights, and with the ones the layer has."""
    deltas = [dz @ right_weights_after.T]
    if isinstance(weights_after, np.ndarray) and weights_after.shape == right_weights_after.shape:
        deltas.append(dz @ weights_after.T)
    return [(delta, POST_UPDATE_DELTA) for delta in deltas]


def _delta_and_output(returned, expected):
    if isinstance(returned, dict):
        raise _Failure(f"forward_and_synthetic_update must return the pair (input_delta, output); "
                       f"got {_one_line(returned['kind'])}")
    input_delta, output = returned
    if _matches(input_delta, expected["output"]) and _matches(output, expected["input_delta"]):
        raise _Failure("forward_and_synthetic_update returned (output, input_delta); "
                       "return them in the order (input_delta, output)")
    return input_delta, output


# --- DNI.update_synthetic_weights ------------------------------------------------------------

GENERATOR_WRONG_SIGN = {
    "weights": ("wrong update sign",
                "your generator moved away from the target you were given (the blog post's bug): "
                "subtract generator_alpha · dL_M/d(parameter)."),
    "bias": ("wrong update sign",
             "self.generator.bias moved away from the target you were given: subtract "
             "generator_alpha · dL_M/db_M, as for the weights."),
}
GENERATOR_NO_STEP = {
    "weights": ("a generator that did not move",
                "its parameters did not change: it took no step, or it was trained towards its own prediction ĝ, "
                "not towards the target you were given."),
    "bias": ("bias forgotten",
             "self.generator.bias did not change: step it with generator_alpha · dL_M/db_M, as the weights."),
}
GENERATOR_STEP_SCALED = {
    "not divided": ("step not divided by the batch size",
                    "L_M divides by the batch size, so its gradients do too: your step is batch times too large."),
    "twice": ("step divided by the batch size twice",
              "L_M has one 1/batch, so its gradients have one: your step is batch times too small."),
    "by every entry": ("step divided by batch × width",
                       "L_M = 1/(2 batch) · Σ(ĝ - target)² divides by the batch size alone, not by "
                       "batch · output_dim as a mean over every entry of ĝ would."),
    "halved": ("half the step",
               "the derivative of ½ (ĝ - target)² is ĝ - target: the 2 of the square cancels the ½."),
    "doubled": ("twice the step",
                "the derivative of ½ (ĝ - target)² is ĝ - target: the ½ of L_M cancels the 2 of the square."),
}
GENERATOR_TRANSPOSED = (
    "transposed weight gradient",
    "dL_M/dW_M must have the shape of M.weights, (output_dim + condition_dim, output_dim): [h, c] "
    "(M.input) transposed, times dL_M/dĝ, not the other way round.")
CONDITION_DROPPED = (
    "the condition left out",
    "the generator's input is [h, c], h with the condition appended: M.input, of shape "
    "(batch, output_dim + condition_dim), and M.weights has a row for each of its columns. Use M.input, "
    "not h (self.output) alone, and step every row.")
GENERATOR_USED_ALPHA = (
    "wrong learning rate",
    "the generator steps with self.generator_alpha; self.alpha is the layer's.")
# Other targets a generator may be trained towards by mistake, by what they are called in the message.
WRONG_TARGETS = {
    "-target": lambda layer, target: -target,
    "zero (an error term of ĝ alone)": lambda layer, target: np.zeros_like(target),
    "target * f'(h), the gradient at the pre-activation z rather than at h":
        lambda layer, target: target * layer.nonlin_deriv(layer.output),
    "the layer's weight_output_delta ĝ * f'(h)":
        lambda layer, target: layer.synthetic_gradient * layer.nonlin_deriv(layer.output),
    "h, the layer's output": lambda layer, target: layer.output,
}
LOSS_AFTER_STEP = ("loss measured after the step", "compute and keep L_M before you change the generator.")
LOSS_WITHOUT_HALF = ("missing 1/2", "L_M = 1/(2 batch) · Σ(ĝ - target)².")
LOSS_NOT_DIVIDED = ("loss not divided by the batch size", "L_M = 1/(2 batch) · Σ(ĝ - target)².")
LOSS_MEAN_OF_ALL = ("loss divided by every entry",
                    "L_M = 1/(2 batch) · Σ(ĝ - target)² divides by batch, not by batch · output_dim.")
FORBIDDEN_IN_GENERATOR_STEP = (
    "a forbidden call",
    "it would do the exercise for you. Derive dL_M/dW_M and dL_M/db_M, and step M.weights and M.bias "
    "with arrays.")


def check_generator_update(dni_class_or_factory: Callable[..., Any], *, seed: int = 0,
                           raise_on_failure: bool = False) -> CheckResult:
    """Check ``update_synthetic_weights(target)`` against one step of sgrad's generator update.

    After a forward step (sgrad's own ``DNI.forward_and_synthetic_update``, so
    that only the generator update is graded), the generator must take one
    descent step, with ``generator_alpha``, on
    ``L_M = 1/(2 batch) * sum((ĝ - target)**2)`` and return L_M from before
    the step.  Builds the layers as :func:`check_dni_update` does.  An update
    written outside sgrad must be the class's own and must not call
    ``self.generator.update``.  Recognises the wrong update sign (on the bias
    alone too), a forgotten bias, a step not divided by the batch size, divided
    twice or by batch × width, halved or doubled, a transposed weight gradient,
    the condition left out of the generator's input, and a generator trained
    towards something other than the target it was given (-target, zero, its
    own prediction, ...).
    """
    inputs = exercise_inputs("generator_update", seed)
    return judge("generator_update", inputs, exercise_runner.drive("generator_update", dni_class_or_factory, inputs),
                 raise_on_failure)


def _judge_generator_update(case, out):
    where = f" ({case['nonlin']} DNI, {case['output_dim']} outputs{', conditioned' if case['condition_dim'] else ''})"
    reference = _reference_dni(case)
    _refuse_sgrads_own(out, "update_synthetic_weights", "DNI.update_synthetic_weights")
    try:
        _raise_for(out)
    except _Raised as failure:
        if (case["condition_dim"] and failure.error == "ValueError"  # the plain case has passed
                and out["error"]["stage"] == "update_synthetic_weights()"):
            raise _Failure(f"{failure}\nThe plain DNI passed; only the conditioned one fails.\n"
                           f"Hint ({CONDITION_DROPPED[0]}): {CONDITION_DROPPED[1]}") from None
        raise
    _refuse_calls("update_synthetic_weights()", out["calls"], FORBIDDEN_IN_GENERATOR_STEP)
    _same_dni_start(out, reference, case)
    DNI.forward_and_synthetic_update(reference, case["x"], case["c"])
    expected, mistakes = _reference_generator_step(reference, case["target"], case["c"])
    received = {f"self.generator.{name}": value for name, value in out["generator_after"].items()
                if f"self.generator.{name}" in expected}
    received["the returned loss L_M"] = out["loss"]
    _report([(label, received.get(label), expected[label], mistakes[label]) for label in expected], where=where)


def _generator_passed(cases):
    return ("plain and conditioned generator: one descent step on L_M towards the target, "
            "and L_M from before the step returned")


def _reference_generator_step(layer, target, c):
    """What the generator update should leave, and the wrong answers of the usual mistakes."""
    before = copy.deepcopy(layer.generator)
    start = {name: param.copy() for name, param in before.parameters.items()}

    def stepped(towards):  # a copy of the generator after sgrad's step towards ``towards``
        generator = copy.deepcopy(before)
        generator.update(towards, layer.generator_alpha)
        return generator

    def after(towards, scale=1.0):  # its parameters, with the step multiplied by ``scale``
        moved = stepped(towards).parameters
        return {name: start[name] + scale * (moved[name] - start[name]) for name in start}

    right = after(target)
    scaled = [(BATCH, GENERATOR_STEP_SCALED["not divided"]), (1 / BATCH, GENERATOR_STEP_SCALED["twice"]),
              (1 / target.shape[1], GENERATOR_STEP_SCALED["by every entry"]), (0.5, GENERATOR_STEP_SCALED["halved"]),
              (2.0, GENERATOR_STEP_SCALED["doubled"])]
    if layer.generator_alpha != layer.alpha:
        scaled.append((layer.alpha / layer.generator_alpha, GENERATOR_USED_ALPHA))
    wrong = [(after(target, scale), hint) for scale, hint in scaled]
    for towards, make_target in WRONG_TARGETS.items():
        wrong.append((after(make_target(layer, target)), (
            "a generator trained towards the wrong target",
            f"your generator moved towards {towards}, not towards the target you were given; "
            "its error is ĝ - target.")))
    expected = {f"self.generator.{name}": value for name, value in right.items()}
    mistakes = {f"self.generator.{name}": [(start[name], GENERATOR_NO_STEP.get(name, GENERATOR_NO_STEP["weights"])),
                                           (after(target, -1.0)[name],
                                            GENERATOR_WRONG_SIGN.get(name, GENERATOR_WRONG_SIGN["weights"]))]
                + [(values[name], hint) for values, hint in wrong] for name in start}
    if "weights" in start:
        W, step = start["weights"], right["weights"] - start["weights"]
        if step.shape[0] == step.shape[1]:
            mistakes["self.generator.weights"].append((W + step.T, GENERATOR_TRANSPOSED))
        if step.shape[0] > target.shape[1]:  # a conditioned generator: the rows of c did not move
            mistakes["self.generator.weights"].append(
                (np.concatenate([right["weights"][:target.shape[1]], W[target.shape[1]:]]), CONDITION_DROPPED))

    loss = regression_loss(layer.synthetic_gradient, target)[0]
    loss_after = regression_loss(stepped(target).predict(layer.output, c), target)[0]
    expected["the returned loss L_M"] = np.float64(loss)
    mistakes["the returned loss L_M"] = [
        (np.float64(loss_after), LOSS_AFTER_STEP), (np.float64(2 * loss), LOSS_WITHOUT_HALF),
        (np.float64(loss * BATCH), LOSS_NOT_DIVIDED), (np.float64(loss / target.shape[1]), LOSS_MEAN_OF_ALL)]
    return expected, mistakes


# --- calls that an exercise forbids --------------------------------------------------------------


# A watched call made by another one (self.update() steps through the update rule): named only alone.
REACHED_THROUGH = {"the parent class's update()": "self.update()",
                   "self.generator.net.update()": "self.generator.update()"}


def _refuse_calls(what, calls, hint):
    """Fail, naming the forbidden methods that ``what`` called (in the order of their first call)."""
    named = [_one_line(label) for label in dict.fromkeys(calls) if REACHED_THROUGH.get(label) not in calls]
    if named:
        raise _Failure(f"{what} called {' and '.join(named)}, which this exercise forbids.\n"
                       f"Hint ({hint[0]}): {hint[1]}")


def _refuse_sgrads_own(out, method, sgrads):
    """Fail if the checked class, written outside sgrad, runs sgrad's ``method`` instead of its own."""
    if out.get("defined_by") == "inherited":
        name = _one_line(out["class_name"])
        raise _Failure(f"{name} does not define {method}: it runs sgrad's {sgrads}, which it inherits. "
                       f"Write {method} in the body of class {name}.")


def _same_start(received, expected, built, sgrads):
    """Fail unless the parameters the checked class was built with are those of sgrad's ``sgrads`` built so."""
    if set(received) != set(expected) or not all(_same_array(received[name], value)
                                                  for name, value in expected.items()):
        raise _Failure(f"{_one_line(built)} built parameters that differ from sgrad's {sgrads} built with the same "
                       f"arguments: keep {sgrads}'s constructor (the check chooses the starting weights by the seed).")


def _with_generator(layer):
    return dict(layer.parameters, **{f"generator.{name}": value for name, value in layer.generator.parameters.items()})


def _same_array(received, expected):
    return (isinstance(received, np.ndarray) and received.shape == np.shape(expected)
            and bool(np.all(np.abs(received - expected) <= 1e-12 * (1 + np.abs(expected)))))


# --- running the checked code and reporting --------------------------------------------------


class _Failure(Exception):
    """Ends a check early; its text is the message for the student."""


class _Raised(_Failure):
    """A failure because the checked code raised an exception of type ``error`` (its name)."""

    def __init__(self, message, error):
        super().__init__(message)
        self.error = error


def _result(name, check, raise_on_failure):
    """Run ``check()`` (which returns the message of a pass) and wrap the outcome in a CheckResult."""
    try:
        result = CheckResult(name, True, check())
    except _Failure as failure:
        result = CheckResult(name, False, str(failure))
    except Exception as error:  # the checked object broke a convention the check relies on
        message = f"the check could not run: {type(error).__name__}: {_one_line(str(error))}{_where(error)}"
        result = CheckResult(name, False, message)
    if raise_on_failure and not result.passed:
        raise AssertionError(str(result))
    return result


def _run(what, function, *args, **kwargs):
    """Call the checked code; an exception it raises becomes a failed check that says where."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise _Failure(f"not implemented yet: fill in {what}") from None
    except Exception as error:
        raise _Raised(f"{what} raised {type(error).__name__}: {_one_line(str(error))}{_where(error)}",
                      type(error).__name__) from None


def _raise_for(out):
    """Fail as :func:`_run` does if the record ``out`` says a stage of the checked code raised."""
    error = out.get("error")
    if error is None:
        return
    stage = _one_line(error["stage"])
    if error["not_implemented"]:
        raise _Failure(f"not implemented yet: fill in {stage}")
    raise _Raised(f"{stage} raised {_one_line(error['type'])}: {_one_line(error['message'])}"
                  f"{_one_line(error['where'])}", error["type"])


_LIBRARIES = tuple(os.path.dirname(str(module.__file__)) + os.sep for module in (kernels, np))


def _where(error):
    """' (in backward, line 7)': the deepest frame of the traceback outside sgrad and NumPy, if any."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(_LIBRARIES)]
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


def _one_line(text, limit=300):
    """``text`` (which came from the checked code) on one line: control characters shown as escapes, cut at
    ``limit`` characters, so that nothing it holds can pass for a line of the report."""
    text = str(text)
    shown = "".join(char if char.isprintable() and char not in "\u2028\u2029" else repr(char)[1:-1] for char in text)
    return shown if len(shown) <= limit else shown[:limit] + "…"


def _report(checks, where=""):
    """Fail with a message about the first of ``checks`` that does not match; return None if all match.

    Each check is ``(label, received, expected, mistakes)``, where ``mistakes``
    lists ``(wrong answer, (hint name, advice))`` pairs to recognise.
    """
    failures = []
    for label, received, expected, mistakes in checks:
        problem = _mismatch(received, expected)
        if problem:
            hint = next((hint for wrong, hint in mistakes if _matches(received, wrong)), None)
            failures.append((label, received, expected, problem, hint))
    if not failures:
        return
    label, received, expected, problem, hint = failures[0]
    lines = [f"{label}{where} {problem}"]
    if problem.startswith("is wrong"):
        lines += [f"  expected: {_preview(expected)}", f"  received: {_preview(received)}"]
    if hint:
        lines.append(f"Hint ({hint[0]}): {hint[1]}")
    if len(failures) > 1:
        lines.append("Also wrong: " + ", ".join(label + (f" ({hint[0]})" if hint else "")
                                                for label, _, _, _, hint in failures[1:]))
    raise _Failure("\n".join(lines))


def _mismatch(received, expected):
    """None if ``received`` matches ``expected``, else what is wrong with it, in a few words."""
    if received is None:
        return "is None; expected " + (f"an array of shape {expected.shape}" if expected.shape else "a number")
    if isinstance(received, dict):  # an exercise runner's record of an answer that is not an array
        return f"is {_one_line(received.get('kind'))}; expected an array of numbers"
    try:
        received = np.asarray(received, dtype=np.float64)
    except (TypeError, ValueError):
        return f"is {_kind(received)}; expected an array of numbers"
    if received.shape != expected.shape:
        return f"has shape {received.shape}; expected {expected.shape}"
    error = relative_error(received, expected)
    if not error < TOLERANCE:  # also catches NaN
        return f"is wrong: relative error {error:.2g} (expected < {TOLERANCE:g})"
    return None


def _combine(*hints):
    """One hint naming every mistake in ``hints`` (None entries skipped), or None if there are none."""
    hints = [hint for hint in hints if hint]
    if not hints:
        return None
    return " and ".join(name for name, _ in hints), " Also: ".join(advice for _, advice in hints)


def _matches(received, candidate):
    if candidate is None:
        return received is None
    return _mismatch(received, candidate) is None


def _preview(values, count=4):
    flat = np.asarray(values, dtype=np.float64).ravel()
    shown = np.array2string(flat[:count], precision=4, suppress_small=True, separator=", ")
    return shown[:-1] + ", ...]" if flat.size > count else shown


def _copy(value):
    return None if value is None else np.array(value, dtype=np.float64)


_kind = exercise_runner._kind  # "a tuple of length 3", "a value of type str"
