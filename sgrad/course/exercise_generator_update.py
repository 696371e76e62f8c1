"""Exercise 3, ``DNI.update_synthetic_weights``: its inputs, and the judge of the step a student's generator took.

After a forward step, the generator M must take one descent step, at ``generator_alpha``, on
``L_M = 1/(2 batch) * sum((ĝ - target)**2)`` and return L_M from before the step.  The layers are those of
exercise 2 (:mod:`sgrad.course.exercise_dni_update`), and the expected values are what sgrad's own generator
update (:meth:`sgrad.dni.generators.Generator.update`) leaves.  The usual mistakes are recognised and named:
the wrong update sign (on the bias alone too), a forgotten bias, a step not divided by the batch size, divided
twice or by batch × width, halved or doubled, a transposed weight gradient, the condition left out of the
generator's input, and a generator trained towards something other than the target it was given (-target,
zero, its own prediction, ...).
"""

import copy
from typing import Any

import numpy as np

from ..dni.decoupled import DNI
from ..dni.generators import regression_loss
from . import exercise_dni_update
from .check_reports import Failure, Raised, compare, raise_for_error
from .exercise_dni_update import refuse_another_dni_start, reference_dni
from .exercise_rules import refuse_calls, refuse_sgrads_own

TITLE = "DNI.update_synthetic_weights"


def inputs(seed: int) -> dict[str, Any]:
    """The inputs of exercise 2, whose layers this exercise builds too, and whose targets it trains towards."""
    return exercise_dni_update.inputs(seed)


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


def judge_case(case: dict[str, Any], out: dict[str, Any]) -> None:
    """Fail (:class:`~sgrad.course.check_reports.Failure`) unless the record ``out`` of one generator's step is
    right."""
    where = f" ({case['nonlin']} DNI, {case['output_dim']} outputs{', conditioned' if case['condition_dim'] else ''})"
    reference = reference_dni(case)
    refuse_sgrads_own(out, "update_synthetic_weights", "DNI.update_synthetic_weights")
    try:
        raise_for_error(out)
    except Raised as failure:
        if (case["condition_dim"] and failure.error == "ValueError"  # the plain case has passed
                and out["error"]["stage"] == "update_synthetic_weights()"):
            raise Failure(f"{failure}\nThe plain DNI passed; only the conditioned one fails.\n"
                          f"Hint ({CONDITION_DROPPED[0]}): {CONDITION_DROPPED[1]}") from None
        raise
    refuse_calls("update_synthetic_weights()", out["calls"], FORBIDDEN_IN_GENERATOR_STEP)
    refuse_another_dni_start(out, reference, case)
    DNI.forward_and_synthetic_update(reference, case["x"], case["c"])
    expected, mistakes = _reference_step(reference, case["target"], case["c"])
    received = {f"self.generator.{name}": value for name, value in out["generator_after"].items()
                if f"self.generator.{name}" in expected}
    received["the returned loss L_M"] = out["loss"]
    compare([(label, received.get(label), expected[label], mistakes[label]) for label in expected], where=where)


def passed(cases: list[dict[str, Any]]) -> str:
    """The message of a pass."""
    return ("plain and conditioned generator: one descent step on L_M towards the target, "
            "and L_M from before the step returned")


def _reference_step(layer, target, c):
    """What the generator update should leave, by sgrad's own step, and the wrong answers of the usual mistakes."""
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
    batch, width = target.shape
    scaled = [(batch, GENERATOR_STEP_SCALED["not divided"]), (1 / batch, GENERATOR_STEP_SCALED["twice"]),
              (1 / width, GENERATOR_STEP_SCALED["by every entry"]), (0.5, GENERATOR_STEP_SCALED["halved"]),
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
        if step.shape[0] > width:  # a conditioned generator: the rows of c did not move
            mistakes["self.generator.weights"].append(
                (np.concatenate([right["weights"][:width], W[width:]]), CONDITION_DROPPED))

    loss = regression_loss(layer.synthetic_gradient, target)[0]
    loss_after = regression_loss(stepped(target).predict(layer.output, c), target)[0]
    expected["the returned loss L_M"] = np.float64(loss)
    mistakes["the returned loss L_M"] = [
        (np.float64(loss_after), LOSS_AFTER_STEP), (np.float64(2 * loss), LOSS_WITHOUT_HALF),
        (np.float64(loss * batch), LOSS_NOT_DIVIDED), (np.float64(loss / width), LOSS_MEAN_OF_ALL)]
    return expected, mistakes
