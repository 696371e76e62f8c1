"""Exercise 1, ``Layer.backward``: its inputs, and the judge of what a student's backward gave on them.

h = f(x W + b) is a layer's output and R = dL/dh what its backward receives.  backward must return dL/dx, store
dL/dW and dL/db in ``gradients`` and dL/dz in ``weight_output_delta``, and leave the weights as they are.  The
gradients are judged against central differences taken at the weights of the forward pass
(:mod:`sgrad.course.numerical_gradients`), on three fresh layers (:data:`CASES`).  The usual mistakes are
recognised and named: a missing nonlinearity derivative, one taken at the pre-activation or at f(h), a
transposed weight gradient, a wrong sign, a gradient averaged over the batch.
"""

from typing import Any

import numpy as np

from ..nn import kernels
from ..nn.layers import Layer
from .backward_check import compare_backward
from .check_reports import TOLERANCE, raise_for_error
from .exercise_rules import BATCH, refuse_another_start, refuse_calls, refuse_sgrads_own, same_array
from .numerical_gradients import numerical_gradient

TITLE = "Layer.backward"
# (nonlinearity, input_dim, output_dim): unequal widths expose transposes; the square one too, by value.
CASES = (("tanh", 3, 5), ("sigmoid", 5, 2), ("relu", 4, 4))


def inputs(seed: int) -> dict[str, Any]:
    """``{"cases": [...]}``: for each layer of :data:`CASES`, its constructor's arguments, x and R = dL/dh."""
    return {"cases": [{"nonlin": nonlin, "input_dim": input_dim, "output_dim": output_dim, "seed": seed,
                       "x": np.random.default_rng(seed + 1).standard_normal((BATCH, input_dim)),
                       "R": np.random.default_rng(seed).standard_normal((BATCH, output_dim))}
                      for nonlin, input_dim, output_dim in CASES]}


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
FORBIDDEN_IN_BACKWARD = (
    "a forbidden call",
    "it is sgrad's implementation of the method you are asked to write. Compute dL/dz, the gradients and the "
    "input delta with arrays.")


def judge_case(case: dict[str, Any], out: dict[str, Any]) -> None:
    """Fail (:class:`~sgrad.course.check_reports.Failure`) unless the record ``out`` of one layer is right."""
    nonlin, input_dim, output_dim = case["nonlin"], case["input_dim"], case["output_dim"]
    where = f" ({nonlin} layer, {input_dim} → {output_dim})"
    reference = Layer(input_dim, output_dim, nonlin, seed=case["seed"])
    refuse_sgrads_own(out, "backward", "Layer.backward")
    raise_for_error(out)
    refuse_calls("backward()", out["calls"], FORBIDDEN_IN_BACKWARD)
    refuse_another_start(out["parameters"], reference.parameters, f"{out['class_name']}({input_dim}, {output_dim}, "
                         f"{nonlin!r}, seed={case['seed']})", "Layer")
    x, R = case["x"].copy(), case["R"]  # x: nudged in place by the central differences, and restored
    h = reference.forward(x)

    def loss():
        return float(np.sum(reference.forward(x) * R))

    parameters = reference.parameters
    expected = {name: numerical_gradient(loss, param) for name, param in parameters.items()}
    expected["input"] = numerical_gradient(loss, x)
    received = dict(out["gradients"], input=out["input_delta"])
    hints = _mistakes(reference, x, R)
    checks = [(f"dL/d{name}", received[name], expected[name], hints[f"dL/d{name}"]) for name in expected]
    checks.append((WEIGHT_OUTPUT_DELTA, out["weight_output_delta"], R * reference.nonlin_deriv(h),
                   hints[WEIGHT_OUTPUT_DELTA]))
    changed = [name for name, param in out["parameters"].items()
               if not same_array(out["parameters_after"].get(name), param)]
    compare_backward(checks, changed, where=where)


def passed(cases: list[dict[str, Any]]) -> str:
    """The message of a pass."""
    listed = ", ".join(f"{case['nonlin']} {case['input_dim']} → {case['output_dim']}" for case in cases)
    return (f"{listed}: weights, bias and input gradients, and weight_output_delta, all within {TOLERANCE:g} "
            "of central differences")


def _mistakes(layer, x, R):
    """For each quantity, the wrong answers that the usual mistakes give for dL/dh = R, with their hints."""
    weights = layer.parameters["weights"]
    z = kernels.linear_forward(x, weights, layer.parameters.get("bias"))
    h = layer.nonlin(z)

    def made_of(dz):  # every quantity backward gives, from dL/dz, by sgrad's linear backward
        dx, dweights, dbias = kernels.linear_backward(dz, x, weights, with_bias=True)
        return {"dL/dweights": dweights, "dL/dbias": dbias, "dL/dinput": dx, WEIGHT_OUTPUT_DELTA: dz}

    right = made_of(R * layer.nonlin_deriv(h))
    wrong = [(made_of(R), MISSING_DERIVATIVE), (made_of(R * layer.nonlin_deriv(z)), PRE_ACTIVATION),
             (made_of(R * layer.nonlin_deriv(layer.nonlin(h))), AT_F_OF_H)]
    mistakes = {label: [(None, NOT_SET[label]), (-value, WRONG_GRADIENT_SIGN), (value / x.shape[0], AVERAGED)]
                + [(values[label], hint) for values, hint in wrong] for label, value in right.items()}
    mistakes["dL/dweights"] += [(values["dL/dweights"].T, TRANSPOSED) for values in (right, wrong[0][0])]
    return mistakes
