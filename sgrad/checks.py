"""Checkers for the homework: a numerical gradient check, and checks of the three updates.

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

- ``check_layer_backward``: ``backward(dL/dh)`` against central differences.
- ``check_dni_update``: ``forward_and_synthetic_update`` against one descent
  step ``W <- W - alpha * x.T @ (ĝ * f'(h))``, returning ``(ĝ * f'(h)) @ W.T``
  with the weights from before the step.
- ``check_generator_update``: ``update_synthetic_weights(target)`` against one
  descent step on ``L_M = 1/(2 batch) * sum((ĝ - target)**2)``, returning L_M
  from before the step.
"""

import copy
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from . import kernels
from .dni import DNI
from .generators import regression_loss

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
    ``seed``, so ``dL/dh = R`` is what backward receives.  Every relative error
    must be below 1e-6.
    """
    def check():
        gradients, _ = _gradients(layer, np.array(x, dtype=np.float64), seed, eps)
        _report([(label, mine, theirs, ()) for label, (mine, theirs) in gradients.items()])
        return ", ".join(f"{label} {relative_error(*pair):.1e}" for label, pair in gradients.items()) + (
            f": every relative error below {TOLERANCE:g}")
    return _result(f"gradient check of {type(layer).__name__}", check, raise_on_failure)


def _gradients(layer, x, seed, eps):
    """``{label: (from backward, from central differences)}`` for each parameter and the input, and R."""
    h = np.array(_run("forward()", layer.forward, x), dtype=np.float64)
    R = np.random.default_rng(seed).standard_normal(h.shape)
    input_delta = _run("backward()", layer.backward, R.copy())
    parameters = layer.parameters
    received = {name: _copy(layer.gradients.get(name)) for name in parameters}
    received["input"] = _copy(input_delta)
    for name, param in parameters.items():
        if param.dtype != np.float64:
            raise _Failure(f"{name} is {param.dtype}: a gradient check needs float64 parameters "
                           "(build the layer with dtype=np.float64)")

    def loss():
        return float(np.sum(layer.forward(x) * R))

    expected = {name: numerical_gradient(loss, param, eps) for name, param in parameters.items()}
    expected["input"] = numerical_gradient(loss, x, eps)
    return {f"dL/d{name}": (received[name], expected[name]) for name in expected}, R


# --- Layer.backward --------------------------------------------------------------------------

MISSING_DERIVATIVE = (
    "missing nonlinearity derivative",
    "multiply output_delta by nonlin_deriv(self.output) first; that product, weight_output_delta = dL/dz, "
    "is what the weight, bias and input gradients are made of.")
TRANSPOSED = (
    "transposed weight gradient",
    "weights_grad must have the shape of weights, (input_dim, output_dim): "
    "input.T @ weight_output_delta, not weight_output_delta.T @ input.")
WRONG_GRADIENT_SIGN = (
    "wrong sign",
    "yours is minus the gradient. backward returns the gradient itself; "
    "the minus sign of gradient descent belongs in update().")
NOT_SET = {
    "dL/dweights": ("weights gradient not stored", "set self.weights_grad = input.T @ weight_output_delta."),
    "dL/dbias": ("bias gradient not stored", "set self.bias_grad, the sum of weight_output_delta over the batch."),
    "dL/dinput": ("nothing returned", "return the input delta, weight_output_delta @ weights.T."),
}
AVERAGED = (
    "divided by the batch size",
    "a layer does no averaging: sum over the batch (the loss that made output_delta already set the scale).")


def check_layer_backward(layer_factory_or_class: Callable[..., Any], *, seed: int = 0,
                         raise_on_failure: bool = False) -> CheckResult:
    """Gradient-check ``backward`` of fresh layers: tanh 3→5, sigmoid 5→2, relu 4→4, each with a bias.

    ``layer_factory_or_class`` is a Layer subclass, or any function called as
    ``make(input_dim, output_dim, nonlin, seed=seed)`` that returns a layer.
    Recognises a missing nonlinearity derivative, a transposed weight gradient,
    a wrong sign and a gradient averaged over the batch.
    """
    def check():
        for nonlin, input_dim, output_dim in BACKWARD_CASES:
            layer = _run(f"{_name(layer_factory_or_class)}({input_dim}, {output_dim}, {nonlin!r}, seed={seed})",
                         layer_factory_or_class, input_dim, output_dim, nonlin, seed=seed)
            x = np.random.default_rng(seed + 1).standard_normal((BATCH, input_dim))
            gradients, R = _gradients(layer, x, seed, eps=1e-6)
            hints = _backward_mistakes(layer, x, R)
            _report([(label, mine, theirs, hints.get(label, ())) for label, (mine, theirs) in gradients.items()],
                    where=f" ({nonlin} layer, {input_dim} → {output_dim})")
        cases = ", ".join(f"{nonlin} {i} → {o}" for nonlin, i, o in BACKWARD_CASES)
        return f"{cases}: weights, bias and input gradients all within {TOLERANCE:g} of central differences"
    return _result("Layer.backward", check, raise_on_failure)


def _backward_mistakes(layer, x, R):
    """For each gradient, the wrong answers that the usual mistakes give for dL/dh = R, with their hints."""
    weights = layer.parameters["weights"]
    dz = R * layer.nonlin_deriv(kernels.dense_forward(x, weights, layer.parameters.get("bias"), layer.nonlin))
    right = {"dL/dweights": x.T @ dz, "dL/dbias": dz.sum(axis=0), "dL/dinput": dz @ weights.T}
    no_derivative = {"dL/dweights": x.T @ R, "dL/dbias": R.sum(axis=0), "dL/dinput": R @ weights.T}
    mistakes = {label: [(None, NOT_SET[label]), (-value, WRONG_GRADIENT_SIGN), (value / x.shape[0], AVERAGED),
                        (no_derivative[label], MISSING_DERIVATIVE)] for label, value in right.items()}
    weights_grads = (right["dL/dweights"], no_derivative["dL/dweights"])
    mistakes["dL/dweights"] += [(value.T, TRANSPOSED) for value in weights_grads]
    return mistakes


# --- DNI.forward_and_synthetic_update --------------------------------------------------------

WRONG_UPDATE_SIGN = (
    "wrong update sign",
    "your weights moved by +alpha · input.T @ (ĝ * f'(h)), uphill (the blog post's bug); "
    "subtract the step to descend.")
DNI_MISSING_DERIVATIVE = (
    "missing nonlinearity derivative",
    "the step is built from ĝ * f'(h), with f'(h) = self.nonlin_deriv(output); you used ĝ alone.")
SIGN_AND_DERIVATIVE = (
    "wrong update sign and missing nonlinearity derivative",
    "subtract alpha · input.T @ (ĝ * f'(h)); you added alpha · input.T @ ĝ.")
NO_STEP = (
    "no step taken",
    "the weights did not change: subtract alpha · input.T @ (ĝ * f'(h)) from self.weights "
    "(and its sum over the batch from self.bias).")
LAYER_USED_GENERATOR_ALPHA = (
    "wrong learning rate",
    "the layer steps with self.alpha; self.generator_alpha is the generator's.")
POST_UPDATE_DELTA = (
    "a delta computed with the post-update weights",
    "compute input_delta = (ĝ * f'(h)) @ weights.T before you change the weights, as backprop would "
    "(the blog post computes it after).")
WRONG_DELTA_SIGN = (
    "wrong sign",
    "the delta passed down is (ĝ * f'(h)) @ weights.T, with no minus sign.")
DNI_LABELS = {"output": "the returned output", "synthetic_gradient": "self.synthetic_gradient",
              "weights": "self.weights", "bias": "self.bias", "input_delta": "the returned input_delta"}
NO_SYNTHETIC_GRADIENT = (
    "ĝ not stored",
    "store ĝ = self.generator.forward(output, condition) in self.synthetic_gradient; "
    "update_synthetic_weights() needs it.")


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
    generator_alpha=..., generator_init='blog', seed=...)``.  Recognises the
    wrong update sign (the blog post's), a missing nonlinearity derivative and
    a delta computed with the post-update weights.
    """
    def check():
        for layer, x, c, _, (nonlin, input_dim, output_dim, condition_dim) in _dni_cases(dni_class_or_factory, seed):
            expected, mistakes, dz = _reference_dni_step(layer, x, c)
            returned = _run("forward_and_synthetic_update()", layer.forward_and_synthetic_update, x.copy(), c)
            input_delta, output = _delta_and_output(returned, expected)
            received = {"output": output, "synthetic_gradient": layer.synthetic_gradient,
                        "weights": layer.weights, "bias": layer.bias, "input_delta": input_delta}
            mistakes["input_delta"] += _post_update_deltas(dz, expected["weights"], layer.weights)
            conditioned = ", conditioned" if condition_dim else ""
            _report([(DNI_LABELS[name], value, expected[name], mistakes[name]) for name, value in received.items()],
                    where=f" ({nonlin} DNI, {input_dim} → {output_dim}{conditioned})")
        return ("plain and conditioned DNI: output, ĝ, weights, bias and input_delta all match one descent step "
                "on ĝ, with the delta from the pre-update weights")
    return _result("DNI.forward_and_synthetic_update", check, raise_on_failure)


def _dni_cases(make, seed):
    """For each of DNI_CASES: a fresh layer, an input batch x, a condition c (or None), the rng, and the case."""
    for case in DNI_CASES:
        nonlin, input_dim, output_dim, condition_dim = case
        layer = _build_dni(make, nonlin, input_dim, output_dim, condition_dim, seed)
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((BATCH, input_dim))
        c = rng.standard_normal((BATCH, condition_dim)) if condition_dim else None
        yield layer, x, c, rng, case


def _build_dni(make, nonlin, input_dim, output_dim, condition_dim, seed):
    return _run(f"{_name(make)}({input_dim}, {output_dim}, {nonlin!r}, ...)", make,
                input_dim, output_dim, nonlin, alpha=ALPHA, condition_dim=condition_dim,
                generator_alpha=GENERATOR_ALPHA, generator_init="blog", seed=seed)


def _reference_dni_step(layer, x, c):
    """What one DNI step should leave (by the formulas), and the wrong answers of the usual mistakes."""
    W, b = layer.weights.copy(), layer.bias.copy()
    h = kernels.dense_forward(x, W, b, layer.nonlin)
    g_hat = layer.generator.predict(h, c)
    if not np.any(g_hat):
        raise _Failure("this check needs a generator with non-zero weights, so that ĝ is not zero: "
                       "build the layer with generator_init='blog'")
    dz = g_hat * layer.nonlin_deriv(h)
    expected = {"output": h, "synthetic_gradient": g_hat, "input_delta": dz @ W.T,
                "weights": W - layer.alpha * x.T @ dz, "bias": b - layer.alpha * dz.sum(axis=0)}

    def stepped(start, step, alpha=layer.alpha):  # the weights and bias after a descent step with dL/dz = step
        return {"weights": start["weights"] - alpha * x.T @ step,
                "bias": start["bias"] - alpha * step.sum(axis=0)}

    before = {"weights": W, "bias": b}
    wrong = [(stepped(before, -dz), WRONG_UPDATE_SIGN), (before, NO_STEP),
             (stepped(before, g_hat), DNI_MISSING_DERIVATIVE), (stepped(before, -g_hat), SIGN_AND_DERIVATIVE)]
    if layer.generator_alpha != layer.alpha:
        wrong.append((stepped(before, dz, layer.generator_alpha), LAYER_USED_GENERATOR_ALPHA))
    mistakes = {name: [(values[name], hint) for values, hint in wrong] for name in before}
    mistakes["input_delta"] = [(g_hat @ W.T, DNI_MISSING_DERIVATIVE), (-dz @ W.T, WRONG_DELTA_SIGN)]
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
    if not isinstance(returned, tuple) or len(returned) != 2:
        raise _Failure(f"forward_and_synthetic_update must return the pair (input_delta, output); "
                       f"got {_kind(returned)}")
    input_delta, output = returned
    if _matches(input_delta, expected["output"]) and _matches(output, expected["input_delta"]):
        raise _Failure("forward_and_synthetic_update returned (output, input_delta); "
                       "return them in the order (input_delta, output)")
    return input_delta, output


# --- DNI.update_synthetic_weights ------------------------------------------------------------

GENERATOR_WRONG_SIGN = (
    "wrong update sign",
    "your generator moved away from the target you were given (the blog post's bug): "
    "subtract generator_alpha · dL_M/d(parameter).")
GENERATOR_NO_STEP = (
    "a generator that did not move",
    "its parameters did not change: it took no step, or it was trained towards its own prediction ĝ, "
    "not towards the target you were given.")
NOT_DIVIDED_BY_BATCH = (
    "step not divided by the batch size",
    "L_M = 1/(2 batch) · Σ(ĝ - target)², so dL_M/dĝ = (ĝ - target) / batch.")
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


def check_generator_update(dni_class_or_factory: Callable[..., Any], *, seed: int = 0,
                           raise_on_failure: bool = False) -> CheckResult:
    """Check ``update_synthetic_weights(target)`` against one step of sgrad's generator update.

    After a forward step (sgrad's own ``DNI.forward_and_synthetic_update``, so
    that only the generator update is graded), the generator must take one
    descent step, with ``generator_alpha``, on
    ``L_M = 1/(2 batch) * sum((ĝ - target)**2)`` and return L_M from before
    the step.  Builds the layers as :func:`check_dni_update` does.  Recognises
    the wrong update sign and a generator trained towards something other than
    the target it was given (-target, zero, its own prediction, ...).
    """
    def check():
        for layer, x, c, rng, (nonlin, _, output_dim, condition_dim) in _dni_cases(dni_class_or_factory, seed):
            target = rng.standard_normal((BATCH, output_dim))
            if isinstance(layer, DNI):  # sgrad's own step, so that this check grades the generator update alone
                _run("DNI.forward_and_synthetic_update()", DNI.forward_and_synthetic_update, layer, x, c)
            else:
                _run("forward_and_synthetic_update()", layer.forward_and_synthetic_update, x, c)
            expected, mistakes = _reference_generator_step(layer, target, c)
            loss = _run("update_synthetic_weights()", layer.update_synthetic_weights, target.copy())
            received = {f"self.generator.{name}": param for name, param in layer.generator.parameters.items()}
            received["the returned loss L_M"] = loss
            conditioned = ", conditioned" if condition_dim else ""
            _report([(label, value, expected[label], mistakes[label]) for label, value in received.items()],
                    where=f" ({nonlin} DNI, {output_dim} outputs{conditioned})")
        return ("plain and conditioned generator: one descent step on L_M towards the target, "
                "and L_M from before the step returned")
    return _result("DNI.update_synthetic_weights", check, raise_on_failure)


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

    wrong = [(after(target, -1.0), GENERATOR_WRONG_SIGN), (start, GENERATOR_NO_STEP),
             (after(target, BATCH), NOT_DIVIDED_BY_BATCH)]
    if layer.generator_alpha != layer.alpha:
        wrong.append((after(target, layer.alpha / layer.generator_alpha), GENERATOR_USED_ALPHA))
    for towards, make_target in WRONG_TARGETS.items():
        wrong.append((after(make_target(layer, target)), (
            "a generator trained towards the wrong target",
            f"your generator moved towards {towards}, not towards the target you were given; "
            "its error is ĝ - target.")))
    expected = {f"self.generator.{name}": value for name, value in after(target).items()}
    mistakes = {f"self.generator.{name}": [(values[name], hint) for values, hint in wrong] for name in start}

    loss = regression_loss(layer.synthetic_gradient, target)[0]
    loss_after = regression_loss(stepped(target).predict(layer.output, c), target)[0]
    expected["the returned loss L_M"] = np.float64(loss)
    mistakes["the returned loss L_M"] = [
        (np.float64(loss_after), LOSS_AFTER_STEP), (np.float64(2 * loss), LOSS_WITHOUT_HALF),
        (np.float64(loss * BATCH), LOSS_NOT_DIVIDED), (np.float64(loss / target.shape[1]), LOSS_MEAN_OF_ALL)]
    return expected, mistakes


# --- running the checked code and reporting --------------------------------------------------


class _Failure(Exception):
    """Ends a check early; its text is the message for the student."""


def _result(name, check, raise_on_failure):
    """Run ``check()`` (which returns the message of a pass) and wrap the outcome in a CheckResult."""
    try:
        result = CheckResult(name, True, check())
    except _Failure as failure:
        result = CheckResult(name, False, str(failure))
    except Exception as error:  # the checked object broke a convention the check relies on
        message = f"the check could not run: {type(error).__name__}: {error}{_where(error)}"
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
        raise _Failure(f"{what} raised {type(error).__name__}: {error}{_where(error)}") from None


_LIBRARIES = tuple(os.path.dirname(str(module.__file__)) + os.sep for module in (kernels, np))


def _where(error):
    """' (in backward, line 7)': the deepest frame of the traceback outside sgrad and NumPy, if any."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(_LIBRARIES)]
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


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


def _kind(value):
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a value of type {type(value).__name__}"


def _name(function):
    return getattr(function, "__name__", type(function).__name__)
