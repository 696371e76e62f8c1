"""Exercise 2, ``DNI.forward_and_synthetic_update``: its inputs, and the judge of the step a student's DNI took.

In the paper's notation, with h = f(x W + b) and ĝ = M(h, c) the synthetic gradient, one step must return
``(input_delta, output)`` with ``output = h``, store ``synthetic_gradient = ĝ``, and leave::

    weights = W_old - alpha * x.T @ (ĝ * f'(h))
    bias    = b_old - alpha * sum over the batch of (ĝ * f'(h))
    input_delta = (ĝ * f'(h)) @ W_old.T

The expected values are what sgrad's own step (:func:`sgrad.dni.decoupled.synthetic_step`, through
:meth:`sgrad.DNI.forward_and_synthetic_update`) leaves in a DNI built as the student's was: the judge runs
where sgrad is whole (in the grader's process, or beside a notebook), never in the sandbox that runs the
student's code.  The usual mistakes are recognised and named: the blog post's wrong update sign, on the
weights or the bias alone, a missing nonlinearity derivative or one taken at the pre-activation or at f(h),
a step divided by the batch size, a forgotten bias, a delta scaled by ±alpha and a delta computed with the
post-update weights (the blog post's, or through a view of them).
"""

from typing import Any

import numpy as np

from ..dni.decoupled import DNI
from ..nn import kernels
from .check_reports import Failure, Hint, compare, matches, one_line, raise_for_error
from .exercise_layer_backward import AT_F_OF_H, PRE_ACTIVATION
from .exercise_rules import BATCH, refuse_another_start, refuse_calls, refuse_sgrads_own

TITLE = "DNI.forward_and_synthetic_update"
# (nonlinearity, input_dim, output_dim, condition_dim): one plain DNI and one cDNI.
CASES = (("tanh", 3, 5, 0), ("sigmoid", 4, 3, 2))
# Different learning rates for the layer and its generator, so that mixing them up shows.
ALPHA, GENERATOR_ALPHA = 0.5, 0.2


def inputs(seed: int) -> dict[str, Any]:
    """``{"cases": [...]}``: for each DNI of :data:`CASES`, its constructor's arguments, x, c and a target for
    its generator (which exercise 3 uses)."""
    cases = []
    for nonlin, input_dim, output_dim, condition_dim in CASES:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((BATCH, input_dim))
        c = rng.standard_normal((BATCH, condition_dim)) if condition_dim else None
        cases.append({"nonlin": nonlin, "input_dim": input_dim, "output_dim": output_dim,
                      "condition_dim": condition_dim, "alpha": ALPHA, "generator_alpha": GENERATOR_ALPHA,
                      "seed": seed, "x": x, "c": c, "target": rng.standard_normal((BATCH, output_dim))})
    return {"cases": cases}


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
LABELS = {"output": "the returned output", "synthetic_gradient": "self.synthetic_gradient",
          "weights": "self.weights", "bias": "self.bias", "input_delta": "the returned input_delta"}
NO_SYNTHETIC_GRADIENT = (
    "ĝ not stored",
    "store ĝ = self.generator.forward(output, condition) in self.synthetic_gradient; "
    "update_synthetic_weights() needs it.")
FORBIDDEN_IN_STEP = (
    "a forbidden call",
    "they would do the exercise for you. Write the step with arrays: δ = ĝ * f'(h), "
    "input_delta = δ @ self.weights.T, then self.weights -= ... and self.bias -= ....")
ZERO_GENERATOR = ("this check needs a generator with non-zero weights, so that ĝ is not zero: "
                  "build the layer with generator_init='blog'")


def judge_case(case: dict[str, Any], out: dict[str, Any]) -> None:
    """Fail (:class:`~sgrad.course.check_reports.Failure`) unless the record ``out`` of one DNI's step is right."""
    where = (f" ({case['nonlin']} DNI, {case['input_dim']} → {case['output_dim']}"
             f"{', conditioned' if case['condition_dim'] else ''})")
    reference = reference_dni(case)
    refuse_sgrads_own(out, "forward_and_synthetic_update", "DNI.forward_and_synthetic_update")
    raise_for_error(out)
    refuse_calls("forward_and_synthetic_update()", out["calls"], FORBIDDEN_IN_STEP)
    refuse_another_dni_start(out, reference, case)
    expected, mistakes, dz = _reference_step(reference, case["x"], case["c"])
    input_delta, output = _delta_and_output(out["returned"], expected)
    received = {"output": output, "synthetic_gradient": out["synthetic_gradient"],
                "weights": out["weights"], "bias": out["bias"], "input_delta": input_delta}
    mistakes["input_delta"] += _post_update_deltas(dz, expected["weights"], out["weights"])
    compare([(LABELS[name], value, expected[name], mistakes[name]) for name, value in received.items()], where=where)


def passed(cases: list[dict[str, Any]]) -> str:
    """The message of a pass."""
    return ("plain and conditioned DNI: output, ĝ, weights, bias and input_delta all match one descent step "
            "on ĝ, with the delta from the pre-update weights")


def reference_dni(case: dict[str, Any]) -> DNI:
    """sgrad's DNI, built as the checked class is (exercise 3 builds its layers so too)."""
    return DNI(case["input_dim"], case["output_dim"], case["nonlin"], alpha=case["alpha"],
               condition_dim=case["condition_dim"], generator_alpha=case["generator_alpha"], generator_init="blog",
               seed=case["seed"])


def refuse_another_dni_start(out: dict[str, Any], reference: DNI, case: dict[str, Any]) -> None:
    """Fail unless the checked layer was built with the parameters of sgrad's DNI (a zero generator, said so)."""
    generator = {name: value for name, value in out["parameters"].items() if name.startswith("generator")}
    if generator and all(isinstance(value, np.ndarray) and not np.any(value) for value in generator.values()):
        raise Failure(ZERO_GENERATOR)
    parameters = dict(reference.parameters,
                      **{f"generator.{name}": value for name, value in reference.generator.parameters.items()})
    refuse_another_start(out["parameters"], parameters,
                         f"{out['class_name']}({case['input_dim']}, {case['output_dim']}, {case['nonlin']!r}, ...)",
                         "DNI")


def _reference_step(layer, x, c):
    """What one DNI step should leave: what sgrad's own step leaves in ``layer``; with the wrong answers of the
    usual mistakes, and δ = ĝ * f'(h)."""
    W, b = layer.weights.copy(), layer.bias.copy()
    input_delta, h = layer.forward_and_synthetic_update(x, c)
    g_hat, dz = layer.synthetic_gradient, layer.weight_output_delta
    if not np.any(g_hat):
        raise Failure(ZERO_GENERATOR)
    expected = {"output": h, "synthetic_gradient": g_hat, "input_delta": input_delta,
                "weights": layer.weights, "bias": layer.bias}
    # δ as the usual mistakes make it, what sgrad's linear backward makes of each, and the factors by which the
    # mistakes scale the step
    z = kernels.linear_forward(x, W, b)
    deltas = [(dz, None), (g_hat, DNI_MISSING_DERIVATIVE), (g_hat * layer.nonlin_deriv(z), PRE_ACTIVATION),
              (g_hat * layer.nonlin_deriv(layer.nonlin(h)), AT_F_OF_H)]
    made = []
    for delta, delta_hint in deltas:
        dx, dweights, dbias = kernels.linear_backward(delta, x, W, with_bias=True)
        made.append((dx, {"weights": dweights, "bias": dbias}, delta_hint))
    batch, width = h.shape
    alpha = layer.alpha
    scales = [(1.0, None), (1 / batch, STEP_DIVIDED["by the batch size"]), (1 / batch**2, STEP_DIVIDED["twice"]),
              (1 / (batch * width), STEP_DIVIDED["by every entry"])]
    if layer.generator_alpha != alpha:
        scales.append((layer.generator_alpha / alpha, LAYER_USED_GENERATOR_ALPHA))
    start = {"weights": W, "bias": b}
    mistakes = {name: [(start[name], NO_STEP[name])] + [
        (start[name] - sign * scale * alpha * gradients[name], hint)
        for _, gradients, delta_hint in made for scale, scale_hint in scales
        for sign, sign_hint in ((1, None), (-1, WRONG_UPDATE_SIGN[name]))
        if (hint := _combine(delta_hint, scale_hint, sign_hint))] for name in start}
    mistakes["input_delta"] = [
        (factor * dx, hint) for dx, _, delta_hint in made
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
        raise Failure(f"forward_and_synthetic_update must return the pair (input_delta, output); "
                      f"got {one_line(returned['kind'])}")
    input_delta, output = returned
    if matches(input_delta, expected["output"]) and matches(output, expected["input_delta"]):
        raise Failure("forward_and_synthetic_update returned (output, input_delta); "
                      "return them in the order (input_delta, output)")
    return input_delta, output


def _combine(*hints: Hint | None) -> Hint | None:
    """One hint naming every mistake in ``hints`` (None entries skipped), or None if there are none."""
    named = [hint for hint in hints if hint]
    if not named:
        return None
    return " and ".join(name for name, _ in named), " Also: ".join(advice for _, advice in named)
