"""The homework checkers pass sgrad's own classes and name each planted bug.

Every planted bug is a small subclass of sgrad.Layer or sgrad.DNI below.  An instructor grades one
exercise at a time with ``pytest -m exercise_backward`` (or ``exercise_dni_update``,
``exercise_generator_update``).
"""

import numpy as np
import pytest

from sgrad import DNI, Layer
from sgrad.checks import (CheckResult, check_dni_update, check_generator_update, check_layer_backward,
                          gradient_check)

# --- Layer.backward, written out and with planted bugs -----------------------------------------


class WrittenOutLayer(Layer):
    """A correct backward written with arrays, as the homework asks."""

    def backward(self, output_delta):
        self.weight_output_delta = output_delta * self.nonlin_deriv(self.output)
        self.weights_grad = self.input.T @ self.weight_output_delta
        self.bias_grad = self.weight_output_delta.sum(axis=0)
        return self.weight_output_delta @ self.weights.T


class MissingDerivativeLayer(Layer):
    def backward(self, output_delta):
        self.weight_output_delta = output_delta  # planted bug: f'(h) left out
        self.weights_grad = self.input.T @ self.weight_output_delta
        self.bias_grad = self.weight_output_delta.sum(axis=0)
        return self.weight_output_delta @ self.weights.T


class TransposedGradientLayer(Layer):
    def backward(self, output_delta):
        input_delta = super().backward(output_delta)
        self.weights_grad = self.weight_output_delta.T @ self.input  # planted bug: (output_dim, input_dim)
        return input_delta


class NegatedGradientLayer(Layer):
    def backward(self, output_delta):
        input_delta = super().backward(output_delta)
        self.weights_grad = -self.weights_grad  # planted bug: the descent sign, too early
        return input_delta


class StubLayer(Layer):
    def backward(self, output_delta):
        raise NotImplementedError


class ShapeErrorLayer(Layer):
    def backward(self, output_delta):
        return output_delta @ self.weights  # planted bug: weights, not weights.T


# --- DNI.forward_and_synthetic_update, written out and with planted bugs ------------------------


class WrittenOutDNI(DNI):
    """A correct DNI step written with arrays, as the homework asks."""

    def forward_and_synthetic_update(self, input, condition=None):
        output = self.forward(input)
        self.synthetic_gradient = self.generator.forward(output, condition)
        delta_z = self.synthetic_gradient * self.nonlin_deriv(output)
        input_delta = delta_z @ self.weights.T
        self.weights -= self.alpha * input.T @ delta_z
        self.bias -= self.alpha * delta_z.sum(axis=0)
        return input_delta, output


class BlogSignDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        output = self.forward(input)
        self.synthetic_gradient = self.generator.forward(output, condition)
        delta_z = self.synthetic_gradient * self.nonlin_deriv(output)
        input_delta = delta_z @ self.weights.T
        self.weights += self.alpha * input.T @ delta_z  # planted bug, the blog post's: += climbs
        self.bias += self.alpha * delta_z.sum(axis=0)
        return input_delta, output


class MissingDerivativeDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        output = self.forward(input)
        self.synthetic_gradient = self.generator.forward(output, condition)
        delta_z = self.synthetic_gradient  # planted bug: f'(h) left out
        input_delta = delta_z @ self.weights.T
        self.weights -= self.alpha * input.T @ delta_z
        self.bias -= self.alpha * delta_z.sum(axis=0)
        return input_delta, output


class PostUpdateDeltaDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        output = self.forward(input)
        self.synthetic_gradient = self.generator.forward(output, condition)
        delta_z = self.synthetic_gradient * self.nonlin_deriv(output)
        self.weights -= self.alpha * input.T @ delta_z
        self.bias -= self.alpha * delta_z.sum(axis=0)
        return delta_z @ self.weights.T, output  # planted bug, the blog post's: the updated weights


class StubDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        raise NotImplementedError


# --- DNI.update_synthetic_weights, written out and with planted bugs ----------------------------


class WrittenOutGeneratorDNI(DNI):
    """A correct generator update written with arrays, as the homework asks."""

    def update_synthetic_weights(self, target_gradient):
        M = self.generator
        error = self.synthetic_gradient - target_gradient  # (batch, output_dim)
        batch = error.shape[0]
        loss = 0.5 * np.sum(error**2) / batch
        M.weights -= self.generator_alpha * M.input.T @ error / batch
        M.bias -= self.generator_alpha * error.sum(axis=0) / batch
        return loss


class BlogSignGeneratorDNI(DNI):
    def update_synthetic_weights(self, target_gradient):
        M = self.generator
        error = self.synthetic_gradient - target_gradient
        batch = error.shape[0]
        loss = 0.5 * np.sum(error**2) / batch
        M.weights += self.generator_alpha * M.input.T @ error / batch  # planted bug, the blog post's: += climbs
        M.bias += self.generator_alpha * error.sum(axis=0) / batch
        return loss


class NegatedTargetDNI(DNI):
    def update_synthetic_weights(self, target_gradient):
        return super().update_synthetic_weights(-target_gradient)  # planted bug: regresses onto -target


class OwnPredictionDNI(DNI):
    def update_synthetic_weights(self, target_gradient):
        return super().update_synthetic_weights(self.synthetic_gradient)  # planted bug: onto its own ĝ


class PreActivationTargetDNI(DNI):
    def update_synthetic_weights(self, target_gradient):
        # planted bug: regresses onto dL/dz, the gradient at the pre-activation, instead of dL/dh
        return super().update_synthetic_weights(target_gradient * self.nonlin_deriv(self.output))


class StubGeneratorDNI(DNI):
    def update_synthetic_weights(self, target_gradient):
        raise NotImplementedError


# --- the result --------------------------------------------------------------------------------


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
    layer = MissingDerivativeLayer(3, 4, "tanh", seed=0)
    result = gradient_check(layer, np.random.default_rng(0).standard_normal((5, 3)))
    assert not result.passed
    assert result.message.startswith("dL/dweights is wrong: relative error")
    assert "expected: [" in result.message and "received: [" in result.message


@pytest.mark.exercise_backward
@pytest.mark.parametrize("layer_class", [Layer, WrittenOutLayer])
def test_check_layer_backward_passes_a_correct_backward(layer_class):
    result = check_layer_backward(layer_class)
    assert result.passed, str(result)


@pytest.mark.exercise_backward
@pytest.mark.parametrize("layer_class, hint", [
    (MissingDerivativeLayer, "Hint (missing nonlinearity derivative)"),
    (TransposedGradientLayer, "Hint (transposed weight gradient)"),
    (NegatedGradientLayer, "Hint (wrong sign)"),
])
def test_check_layer_backward_names_the_planted_bug(layer_class, hint):
    result = check_layer_backward(layer_class)
    assert not result.passed
    assert result.message.startswith("dL/dweights (tanh layer, 3 → 5)")
    assert hint in result.message


@pytest.mark.exercise_backward
def test_a_not_implemented_backward_gives_a_failed_result_instead_of_raising():
    result = check_layer_backward(StubLayer)
    assert not result.passed
    assert result.message == "not implemented yet: fill in backward()"


@pytest.mark.exercise_backward
def test_an_exception_from_backward_gives_a_failed_result_naming_it_and_its_line():
    result = check_layer_backward(ShapeErrorLayer)
    assert not result.passed
    assert result.message.startswith("backward() raised ValueError: matmul")
    assert "(in backward, line" in result.message


@pytest.mark.exercise_backward
def test_raise_on_failure_raises_an_assertion_error_with_the_message():
    with pytest.raises(AssertionError, match="missing nonlinearity derivative"):
        check_layer_backward(MissingDerivativeLayer, raise_on_failure=True)
    check_layer_backward(Layer, raise_on_failure=True)


# --- exercise 2: the DNI update ----------------------------------------------------------------


@pytest.mark.exercise_dni_update
@pytest.mark.parametrize("dni_class", [DNI, WrittenOutDNI])
def test_check_dni_update_passes_a_correct_step(dni_class):
    result = check_dni_update(dni_class)
    assert result.passed, str(result)


@pytest.mark.exercise_dni_update
@pytest.mark.parametrize("dni_class, first_line, hint", [
    (BlogSignDNI, "self.weights (tanh DNI, 3 → 5) is wrong", "Hint (wrong update sign)"),
    (MissingDerivativeDNI, "self.weights (tanh DNI, 3 → 5) is wrong", "Hint (missing nonlinearity derivative)"),
    (PostUpdateDeltaDNI, "the returned input_delta (tanh DNI, 3 → 5) is wrong",
     "Hint (a delta computed with the post-update weights)"),
])
def test_check_dni_update_names_the_planted_bug(dni_class, first_line, hint):
    result = check_dni_update(dni_class)
    assert not result.passed
    assert result.message.startswith(first_line)
    assert hint in result.message


@pytest.mark.exercise_dni_update
def test_a_not_implemented_dni_step_gives_a_failed_result_instead_of_raising():
    result = check_dni_update(StubDNI)
    assert not result.passed
    assert result.message == "not implemented yet: fill in forward_and_synthetic_update()"


@pytest.mark.exercise_dni_update
def test_check_dni_update_asks_for_a_generator_that_is_not_zero():
    def zero_generator_dni(*args, generator_init, **kwargs):
        return DNI(*args, generator_init="zeros", **kwargs)

    result = check_dni_update(zero_generator_dni)
    assert not result.passed
    assert "generator_init='blog'" in result.message


# --- exercise 3: the generator update ----------------------------------------------------------


@pytest.mark.exercise_generator_update
@pytest.mark.parametrize("dni_class", [DNI, WrittenOutGeneratorDNI])
def test_check_generator_update_passes_a_correct_step(dni_class):
    result = check_generator_update(dni_class)
    assert result.passed, str(result)


@pytest.mark.exercise_generator_update
def test_check_generator_update_names_the_wrong_update_sign():
    result = check_generator_update(BlogSignGeneratorDNI)
    assert not result.passed
    assert result.message.startswith("self.generator.weights (tanh DNI, 5 outputs) is wrong")
    assert "Hint (wrong update sign): your generator moved away from the target you were given" in result.message


@pytest.mark.exercise_generator_update
@pytest.mark.parametrize("dni_class, towards", [
    (NegatedTargetDNI, "moved towards -target"),
    (PreActivationTargetDNI, "moved towards target * f'(h)"),
    (OwnPredictionDNI, "trained towards its own prediction ĝ"),
])
def test_check_generator_update_names_a_generator_trained_towards_the_wrong_target(dni_class, towards):
    result = check_generator_update(dni_class)
    assert not result.passed
    assert result.message.startswith("self.generator.weights (tanh DNI, 5 outputs) is wrong")
    assert towards in result.message
    assert "the target you were given" in result.message


@pytest.mark.exercise_generator_update
def test_a_not_implemented_generator_update_gives_a_failed_result_instead_of_raising():
    result = check_generator_update(StubGeneratorDNI)
    assert not result.passed
    assert result.message == "not implemented yet: fill in update_synthetic_weights()"


@pytest.mark.exercise_generator_update
def test_check_generator_update_grades_the_generator_alone():
    class StubStepWrittenOutGeneratorDNI(WrittenOutGeneratorDNI):
        def forward_and_synthetic_update(self, input, condition=None):
            raise NotImplementedError

    result = check_generator_update(StubStepWrittenOutGeneratorDNI)
    assert result.passed, str(result)


def test_numerical_gradient_matches_a_known_derivative_and_restores_x():
    from sgrad.checks import numerical_gradient

    x = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
    original = x.copy()
    grad = numerical_gradient(lambda: float(np.sum(np.sin(x) * x)), x)
    np.testing.assert_allclose(grad, np.cos(original) * original + np.sin(original), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(x, original)


def test_relative_error_is_the_largest_gap_over_the_largest_magnitude():
    from sgrad.checks import relative_error

    assert relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert relative_error([1.0, 2.0], [1.0, 2.2]) == pytest.approx(0.2 / 4.2)
