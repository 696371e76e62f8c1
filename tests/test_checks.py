"""The homework checkers pass sgrad's own classes, and name each planted bug.

Each exercise has a correct answer written with arrays, as the homework asks (``MY_LAYER``, ``MY_DNI``,
``MY_FULL_DNI`` in notebooks/instructor/solutions.py).  A planted bug is that answer with a few words changed: each
row of ``BUGS`` shows the edit a student would make, and what the checker must say about it.  The
tests of one exercise carry its marker (``exercise_backward``, ``exercise_dni_update``,
``exercise_generator_update``).  A student's notebook is graded by ``sgrad grade`` (tests/test_grading.py).
"""

import numpy as np
import pytest

from sgrad import DNI, Layer
from sgrad.course import (CheckResult, check_dni_update, check_generator_update, check_layer_backward, gradient_check,
                          numerical_gradient, relative_error)
from solutions import MY_DNI, MY_FULL_DNI, MY_LAYER, planted

# exercise: (its marker, its checker, the correct answer)
EXERCISES = {
    "backward": (pytest.mark.exercise_backward, check_layer_backward, MY_LAYER),
    "dni_update": (pytest.mark.exercise_dni_update, check_dni_update, MY_DNI),
    "generator_update": (pytest.mark.exercise_generator_update, check_generator_update, MY_FULL_DNI),
}


def bug(exercise, name, edits, first_line, hint):
    """A row of BUGS: the answer to ``exercise`` with ``edits`` made; its message starts with ``first_line``
    and contains ``hint``."""
    mark, checker, answer = EXERCISES[exercise]
    return pytest.param(checker, answer, edits, first_line, hint, id=f"{exercise}-{name}", marks=mark)


def body(answer):
    """The lines of ``answer`` below its ``def`` line."""
    return answer.split("\n", 2)[2]


MISSING_DERIVATIVE = (" * self.nonlin_deriv(self.output)", "")
BACKWARD_STEPS = ("        return self.weight_output_delta @ self.weights.T",
                  "        input_delta = self.weight_output_delta @ self.weights.T\n"
                  "        self.weights -= 0.1 * self.weights_grad\n"
                  "        return input_delta")
ARRAY_STEP = "self.weights -= self.alpha * input.T @ delta_z\n        self.bias -= self.alpha * delta_z.sum(axis=0)"
GENERATOR_ARRAY_STEP = ("        M.weights -= self.generator_alpha * h_c.T @ d_g_hat\n"
                        "        M.bias -= self.generator_alpha * d_g_hat.sum(axis=0)\n")
GRADIENT_SCALE = "d_g_hat = error / batch"
LAYER = "dL/dweights (tanh layer, 3 → 5) is wrong"
STEP_WEIGHTS, STEP_BIAS = "self.weights (tanh DNI, 3 → 5) is wrong", "self.bias (tanh DNI, 3 → 5) is wrong"
STEP_DELTA = "the returned input_delta (tanh DNI, 3 → 5) is wrong"
GENERATOR_WEIGHTS = "self.generator.weights (tanh DNI, 5 outputs) is wrong"
GENERATOR_BIAS = "self.generator.bias (tanh DNI, 5 outputs) is wrong"
FORBIDDEN = "which this exercise forbids.\nHint (a forbidden call)"

BUGS = [
    # exercise 1: Layer.backward
    bug("backward", "missing_derivative", [MISSING_DERIVATIVE], LAYER, "Hint (missing nonlinearity derivative)"),
    bug("backward", "f_prime_at_z",
        [("self.nonlin_deriv(self.output)", "self.nonlin_deriv(self.input @ self.weights + self.bias)")], LAYER,
        "Hint (f' evaluated at the pre-activation): nonlin_deriv takes the layer's output h"),
    bug("backward", "f_prime_at_f_of_h", [("self.nonlin_deriv(self.output)", "self.nonlin_deriv(self.nonlin(self.output))")],
        LAYER, "Hint (f' evaluated at f(h)): you applied the nonlinearity to h once more"),
    bug("backward", "transposed", [("self.input.T @ self.weight_output_delta", "self.weight_output_delta.T @ self.input")],
        "dL/dweights (tanh layer, 3 → 5) has shape (5, 3)", "Hint (transposed weight gradient)"),
    bug("backward", "negated", [("self.weights_grad = ", "self.weights_grad = -")], LAYER, "Hint (wrong sign)"),
    bug("backward", "averaged", [("self.input.T @ self.weight_output_delta", "self.input.T @ self.weight_output_delta / 8")],
        LAYER, "Hint (divided by the batch size)"),
    bug("backward", "weight_output_delta_missing", [("self.weight_output_delta", "weight_output_delta")],
        "self.weight_output_delta (tanh layer, 3 → 5) is None",
        "Hint (dL/dz not stored): store dL/dz = output_delta * self.nonlin_deriv(self.output)"),
    bug("backward", "steps_itself", [BACKWARD_STEPS],
        "backward() (tanh layer, 3 → 5) changed self.weights: backward must not change the parameters.",
        "Hint (backward took a step)"),
    bug("backward", "raises", [("@ self.weights.T", "@ self.weights")], "backward() raised ValueError: matmul",
        "(in backward, line"),
    # exercise 2: DNI.forward_and_synthetic_update
    bug("dni_update", "blog_sign", [("-=", "+=")], STEP_WEIGHTS, "Hint (wrong update sign): your weights moved by +alpha"),
    bug("dni_update", "missing_derivative", [(" * self.nonlin_deriv(output)", "")], STEP_WEIGHTS,
        "Hint (missing nonlinearity derivative)"),
    bug("dni_update", "f_prime_at_z", [("self.nonlin_deriv(output)", "self.nonlin_deriv(input @ self.weights + self.bias)")],
        STEP_WEIGHTS, "Hint (f' evaluated at the pre-activation): nonlin_deriv takes the layer's output h"),
    bug("dni_update", "f_prime_at_f_of_h", [("self.nonlin_deriv(output)", "self.nonlin_deriv(self.nonlin(output))")],
        STEP_WEIGHTS, "Hint (f' evaluated at f(h))"),
    bug("dni_update", "divided_by_batch", [("self.alpha *", "self.alpha / len(input) *")], STEP_WEIGHTS,
        "Hint (step divided by the batch size): a layer's step sums over the batch"),
    bug("dni_update", "divided_twice", [("self.alpha *", "self.alpha / len(input)**2 *")], STEP_WEIGHTS,
        "Hint (step divided by the batch size twice): yours is divided by batch²"),
    bug("dni_update", "divided_by_size", [("self.alpha *", "self.alpha / delta_z.size *")], STEP_WEIGHTS,
        "Hint (step divided by batch × width): yours is divided by batch · output_dim"),
    bug("dni_update", "generator_alpha", [("self.alpha *", "self.generator_alpha *")], STEP_WEIGHTS,
        "Hint (wrong learning rate): the layer steps with self.alpha"),
    bug("dni_update", "bias_forgotten", [("        self.bias -= self.alpha * delta_z.sum(axis=0)\n", "")], STEP_BIAS,
        "Hint (bias forgotten): self.bias did not change"),
    bug("dni_update", "bias_sign", [("self.bias -=", "self.bias +=")], STEP_BIAS,
        "Hint (wrong update sign): self.bias moved by +alpha · Σ over the batch"),
    bug("dni_update", "delta_times_alpha", [("return input_delta,", "return self.alpha * input_delta,")], STEP_DELTA,
        "Hint (delta scaled by the learning rate)"),
    bug("dni_update", "delta_times_minus_alpha", [("return input_delta,", "return -self.alpha * input_delta,")],
        STEP_DELTA, "Hint (delta scaled by the learning rate)"),
    bug("dni_update", "delta_sign", [("return input_delta,", "return -input_delta,")], STEP_DELTA, "Hint (wrong sign)"),
    bug("dni_update", "blog_post_update_delta", [("        input_delta = delta_z @ self.weights.T\n", ""),
                                                 ("return input_delta,", "return delta_z @ self.weights.T,")],
        STEP_DELTA, "Hint (a delta computed with the post-update weights)"),
    bug("dni_update", "view_before_step", [("input_delta = delta_z @ self.weights.T", "weights_t = self.weights.T"),
                                           ("return input_delta,", "return delta_z @ weights_t,")],
        STEP_DELTA, "that is a view of the same memory, and the in-place -= changes it too"),
    bug("dni_update", "condition_left_out",
        [("self.generator.forward(output, condition)", "self.generator.forward(output)")],
        "forward_and_synthetic_update() raised ValueError: this generator is conditioned (condition_dim=2)",
        "pass condition=c of shape (batch, 2)"),
    bug("dni_update", "calls_backward_and_update",
        [("delta_z @ self.weights.T", "self.backward(self.synthetic_gradient)"), (ARRAY_STEP, "self.update(self.alpha)")],
        "forward_and_synthetic_update() called self.backward() and self.update(), " + FORBIDDEN,
        "they would do the exercise for you. Write the step with arrays"),
    bug("dni_update", "calls_super_update",
        [(ARRAY_STEP, "self.weights_grad, self.bias_grad = input.T @ delta_z, delta_z.sum(axis=0)\n"
                      "        super().update(self.alpha)")],
        "forward_and_synthetic_update() called the parent class's update(), " + FORBIDDEN, ""),
    bug("dni_update", "hands_over_to_sgrad",
        [(body(MY_DNI), "        return super().forward_and_synthetic_update(input, condition)\n")],
        "forward_and_synthetic_update() called self.backward() and self.update(), " + FORBIDDEN, ""),
    # exercise 3: DNI.update_synthetic_weights
    bug("generator_update", "blog_sign", [("-=", "+=")], GENERATOR_WEIGHTS,
        "Hint (wrong update sign): your generator moved away from the target you were given"),
    bug("generator_update", "bias_sign", [("M.bias -=", "M.bias +=")], GENERATOR_BIAS,
        "Hint (wrong update sign): self.generator.bias moved away from the target"),
    bug("generator_update", "bias_forgotten", [("        M.bias -= self.generator_alpha * d_g_hat.sum(axis=0)\n", "")],
        GENERATOR_BIAS, "Hint (bias forgotten): self.generator.bias did not change"),
    bug("generator_update", "not_divided", [(GRADIENT_SCALE, "d_g_hat = error")], GENERATOR_WEIGHTS,
        "Hint (step not divided by the batch size)"),
    bug("generator_update", "divided_twice", [(GRADIENT_SCALE, "d_g_hat = error / batch**2")], GENERATOR_WEIGHTS,
        "Hint (step divided by the batch size twice): L_M has one 1/batch"),
    bug("generator_update", "divided_by_size", [(GRADIENT_SCALE, "d_g_hat = error / error.size")], GENERATOR_WEIGHTS,
        "Hint (step divided by batch × width)"),
    bug("generator_update", "halved", [(GRADIENT_SCALE, "d_g_hat = error / (2 * batch)")], GENERATOR_WEIGHTS,
        "Hint (half the step): the derivative of ½ (ĝ - target)² is ĝ - target"),
    bug("generator_update", "doubled", [(GRADIENT_SCALE, "d_g_hat = 2 * error / batch")], GENERATOR_WEIGHTS,
        "Hint (twice the step): the derivative of ½ (ĝ - target)² is ĝ - target"),
    bug("generator_update", "transposed", [("h_c.T @ d_g_hat", "(d_g_hat.T @ h_c)")], GENERATOR_WEIGHTS,
        "Hint (transposed weight gradient)"),
    bug("generator_update", "condition_left_out", [("h_c.T", "self.output.T")],
        "update_synthetic_weights() raised ValueError: operands could not be broadcast",
        "The plain DNI passed; only the conditioned one fails.\nHint (the condition left out): the generator's "
        "input is [h, c]"),
    bug("generator_update", "condition_rows_kept", [("M.weights -=", "M.weights[:self.output_dim] -="),
                                                    ("h_c.T", "self.output.T")],
        "self.generator.weights (sigmoid DNI, 3 outputs, conditioned) is wrong",
        "Hint (the condition left out): the generator's input is [h, c]"),
    bug("generator_update", "negated_target", [("- target_gradient", "+ target_gradient")], GENERATOR_WEIGHTS,
        "moved towards -target, not towards the target you were given"),
    bug("generator_update", "pre_activation_target",
        [("- target_gradient", "- target_gradient * self.nonlin_deriv(self.output)")],
        GENERATOR_WEIGHTS, "moved towards target * f'(h)"),
    bug("generator_update", "own_prediction", [("- target_gradient", "- self.synthetic_gradient")], GENERATOR_WEIGHTS,
        "trained towards its own prediction ĝ, not towards the target you were given"),
    bug("generator_update", "loss_without_half", [("0.5 * np.sum", "np.sum")],
        "the returned loss L_M (tanh DNI, 5 outputs) is wrong", "Hint (missing 1/2)"),
    bug("generator_update", "calls_generator_update", [(GENERATOR_ARRAY_STEP, "        M.update(target_gradient, 0.2)\n")],
        "update_synthetic_weights() called self.generator.update(), " + FORBIDDEN, "it would do the exercise for you"),
    bug("generator_update", "hands_over_to_sgrad",
        [(body(MY_FULL_DNI), "        return super().update_synthetic_weights(target_gradient)\n")],
        "update_synthetic_weights() called self.generator.update(), " + FORBIDDEN, ""),
]


@pytest.mark.parametrize("checker, answer, edits, first_line, hint", BUGS)
def test_the_checker_names_the_planted_bug(checker, answer, edits, first_line, hint):
    result = checker(planted(answer, *edits))
    assert not result.passed
    assert result.message.startswith(first_line), result.message
    assert hint in result.message, result.message


@pytest.mark.parametrize("checker, correct_class", [
    pytest.param(checker, correct, id=f"{exercise}-{which}", marks=mark)
    for exercise, (mark, checker, answer) in EXERCISES.items()
    for which, correct in (("sgrad", DNI if checker is not check_layer_backward else Layer),
                           ("written_out", planted(answer)))])
def test_the_checker_passes_a_correct_answer(checker, correct_class):
    result = checker(correct_class)
    assert result.passed, str(result)


@pytest.mark.parametrize("checker, answer, method", [
    pytest.param(checker, answer, answer.split("def ")[1].split("(")[0], id=exercise, marks=mark)
    for exercise, (mark, checker, answer) in EXERCISES.items()])
def test_a_stub_gives_a_failed_result_instead_of_raising(checker, answer, method):
    result = checker(planted(answer, (body(answer), "        raise NotImplementedError\n")))
    assert not result.passed
    assert result.message == f"not implemented yet: fill in {method}()"


def test_a_result_prints_a_tick_or_a_cross_then_the_message_indented():
    assert str(CheckResult("Layer.backward", True, "all good")) == "✓ Layer.backward\n    all good"
    assert str(CheckResult("Layer.backward", False, "one\ntwo")) == "✗ Layer.backward\n    one\n    two"


# --- exercise 1: Layer.backward ----------------------------------------------------------------


@pytest.mark.exercise_backward
def test_gradient_check_passes_sgrads_layer_and_reports_each_relative_error():
    layer = Layer(3, 4, "sigmoid", seed=0)
    result = gradient_check(layer, np.random.default_rng(0).standard_normal((5, 3)))
    assert result.passed, str(result)
    for quantity in ("dL/dweights", "dL/dbias", "dL/dinput"):
        assert quantity in result.message


@pytest.mark.exercise_backward
def test_gradient_check_shows_expected_received_and_the_relative_error_of_a_wrong_gradient():
    layer = planted(MY_LAYER, MISSING_DERIVATIVE)(3, 4, "tanh", seed=0)
    result = gradient_check(layer, np.random.default_rng(0).standard_normal((5, 3)))
    assert not result.passed
    assert result.message.startswith("dL/dweights is wrong: relative error")
    assert "expected: [" in result.message and "received: [" in result.message


@pytest.mark.exercise_backward
def test_a_backward_that_steps_has_its_gradients_checked_at_the_weights_of_the_forward_pass():
    right = check_layer_backward(planted(MY_LAYER, BACKWARD_STEPS)).message
    assert "Your gradients themselves are right (checked at the weights of the forward pass)." in right
    wrong = check_layer_backward(planted(MY_LAYER, BACKWARD_STEPS, MISSING_DERIVATIVE)).message
    assert "Your gradients, checked at the weights of the forward pass:\ndL/dweights" in wrong
    assert "Hint (missing nonlinearity derivative)" in wrong


@pytest.mark.exercise_backward
def test_raise_on_failure_raises_an_assertion_error_with_the_message():
    with pytest.raises(AssertionError, match="missing nonlinearity derivative"):
        check_layer_backward(planted(MY_LAYER, MISSING_DERIVATIVE), raise_on_failure=True)
    check_layer_backward(Layer, raise_on_failure=True)


# --- exercises 2 and 3: the DNI and generator updates ------------------------------------------


@pytest.mark.exercise_dni_update
def test_check_dni_update_asks_for_a_generator_that_is_not_zero():
    def zero_generator_dni(*args, generator_init, **kwargs):
        return DNI(*args, generator_init="zeros", **kwargs)

    result = check_dni_update(zero_generator_dni)
    assert not result.passed
    assert "generator_init='blog'" in result.message


@pytest.mark.exercise_generator_update
def test_check_generator_update_grades_the_generator_alone():
    class StubStepDNI(planted(MY_FULL_DNI)):
        def forward_and_synthetic_update(self, input, condition=None):
            raise NotImplementedError

    result = check_generator_update(StubStepDNI)
    assert result.passed, str(result)


# --- the numerical tools ------------------------------------------------------------------------


def test_numerical_gradient_matches_a_known_derivative_and_restores_x():
    x = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
    original = x.copy()
    grad = numerical_gradient(lambda: float(np.sum(np.sin(x) * x)), x)
    np.testing.assert_allclose(grad, np.cos(original) * original + np.sin(original), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(x, original)


def test_relative_error_is_the_largest_gap_over_the_largest_magnitude():
    assert relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert relative_error([1.0, 2.0], [1.0, 2.2]) == pytest.approx(0.2 / 4.2)


# --- the student's own code (issue 27, point 1) ---------------------------------------------------------


@pytest.mark.parametrize("checker, parent, method", [
    pytest.param(check_layer_backward, Layer, "backward", marks=pytest.mark.exercise_backward),
    pytest.param(check_dni_update, DNI, "forward_and_synthetic_update", marks=pytest.mark.exercise_dni_update),
    pytest.param(check_generator_update, DNI, "update_synthetic_weights",
                 marks=pytest.mark.exercise_generator_update)])
def test_a_class_that_inherits_sgrads_method_fails(checker, parent, method):
    empty = type("MyClass", (parent,), {})
    result = checker(empty)
    assert not result.passed
    assert result.message.startswith(f"MyClass does not define {method}: it runs sgrad's {parent.__name__}.{method}, "
                                     "which it inherits.")


@pytest.mark.exercise_backward
@pytest.mark.parametrize("delegation", ["return Layer.backward(self, output_delta)",
                                        "return super().backward(output_delta)"])
def test_a_backward_that_hands_its_work_to_sgrads_fails(delegation):
    result = check_layer_backward(planted(MY_LAYER, (body(MY_LAYER), f"        {delegation}\n")))
    assert not result.passed
    assert result.message.startswith("backward() called Layer.backward(), which this exercise forbids.")
