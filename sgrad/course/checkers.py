"""The homework's checkers: what a student calls in notebook 07 to check an exercise, and their dispatch.

Each checker returns a :class:`~sgrad.course.check_reports.CheckResult` that prints as one ✓/✗ line and a
message written for a student: the quantity that is wrong, what was expected and what came, and, for the
usual mistakes, a hint.  A checker never raises because of a bug in the code it checks: an exception from
that code (NotImplementedError included) becomes a failed result.  For pytest, pass ``raise_on_failure=True``
to get an AssertionError carrying the message::

    print(check_layer_backward(MyLayer))                   # in a notebook
    check_layer_backward(MyLayer, raise_on_failure=True)   # in a test

A check takes three steps.  The exercise's module chooses the inputs (:func:`exercise_inputs`); the exercise
runner (:func:`sgrad.course.exercise_runner.drive`) runs the student's class on them and records what came
out as data; the exercise's judge compares that record with what sgrad's own code gives on the same inputs
(:func:`judge`).  In a notebook the three run in one process; ``sgrad grade`` runs the second in its sandbox
and the other two in the grader's process.  The exercises, one module each, with the hints they give:

- :mod:`sgrad.course.exercise_layer_backward`: ``Layer.backward``;
- :mod:`sgrad.course.exercise_dni_update`: ``DNI.forward_and_synthetic_update``, the DNI step;
- :mod:`sgrad.course.exercise_generator_update`: ``DNI.update_synthetic_weights``, the generator's step.
"""

from collections.abc import Callable
from typing import Any

from . import exercise_dni_update, exercise_generator_update, exercise_layer_backward, exercise_runner
from .check_reports import CheckResult, Failure, one_line, result_of

# Each exercise's module, by the exercise runner's name for it: its TITLE, inputs(seed), judge_case(case, out)
# and passed(cases).
EXERCISES = {"backward": exercise_layer_backward, "dni_update": exercise_dni_update,
             "generator_update": exercise_generator_update}


def exercise_inputs(exercise: str, seed: int = 0) -> dict[str, Any]:
    """The inputs that the checker of ``exercise`` ("backward", "dni_update", "generator_update") drives the
    student's class on: ``{"cases": [...]}``, each case the constructor's arguments and the arrays."""
    return EXERCISES[exercise].inputs(seed)


def judge(exercise: str, inputs: dict[str, Any], record: dict[str, Any], raise_on_failure: bool = False) -> CheckResult:
    """The verdict on ``exercise``: the ``record`` that :func:`sgrad.course.exercise_runner.drive` made of the student's
    code on ``inputs``, compared with what sgrad's reference code gives on the same inputs."""
    module = EXERCISES[exercise]

    def check():
        if len(record["cases"]) != len(inputs["cases"]):
            raise Failure(f"the check expected {len(inputs['cases'])} answers and got {len(record['cases'])}")
        for case, out in zip(inputs["cases"], record["cases"]):
            if "broken" in out:
                raise Failure(f"the check could not run: {one_line(out['broken'])}")
            module.judge_case(case, out)
        return module.passed(inputs["cases"])
    return result_of(module.TITLE, check, raise_on_failure)


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
    return _check("backward", layer_factory_or_class, seed, raise_on_failure)


def check_dni_update(dni_class_or_factory: Callable[..., Any], *, seed: int = 0,
                     raise_on_failure: bool = False) -> CheckResult:
    """Check one ``forward_and_synthetic_update(input, condition)`` step against sgrad's DNI step.

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
    return _check("dni_update", dni_class_or_factory, seed, raise_on_failure)


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
    return _check("generator_update", dni_class_or_factory, seed, raise_on_failure)


def _check(exercise, make, seed, raise_on_failure):
    """The three steps of a check, in this process: the inputs, the student's class driven on them, the verdict."""
    inputs = exercise_inputs(exercise, seed)
    return judge(exercise, inputs, exercise_runner.drive(exercise, make, inputs), raise_on_failure)
