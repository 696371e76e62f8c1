"""A correct answer to each exercise of notebooks/08_homework.ipynb, as the cell a student would hand in.

tests/test_checks.py plants bugs in them, and the checkers must name each one; tests/test_grading.py
puts them, with and without bugs, into copies of the notebook, and the grader must grade them.
A planted bug is an edit ``(old, new)``: every ``old`` text of the answer replaced by ``new``.
"""

import re

import numpy as np

from sgrad import DNI, Layer

MY_LAYER = """\
class MyLayer(Layer):
    def backward(self, output_delta):
        self.weight_output_delta = output_delta * self.nonlin_deriv(self.output)
        self.weights_grad = self.input.T @ self.weight_output_delta
        self.bias_grad = self.weight_output_delta.sum(axis=0)
        return self.weight_output_delta @ self.weights.T
"""

MY_DNI = """\
class MyDNI(DNI):
    def forward_and_synthetic_update(self, input, condition=None):
        output = self.forward(input)
        self.synthetic_gradient = self.generator.forward(output, condition)
        delta_z = self.synthetic_gradient * self.nonlin_deriv(output)
        input_delta = delta_z @ self.weights.T
        self.weights -= self.alpha * input.T @ delta_z
        self.bias -= self.alpha * delta_z.sum(axis=0)
        return input_delta, output
"""

MY_FULL_DNI = """\
class MyFullDNI(MyDNI):
    def update_synthetic_weights(self, target_gradient):
        M = self.generator
        g_hat = self.synthetic_gradient
        h_c = M.input
        error = g_hat - target_gradient
        batch = error.shape[0]
        loss = 0.5 * np.sum(error**2) / batch
        d_g_hat = error / batch  # dL_M/dĝ
        M.weights -= self.generator_alpha * h_c.T @ d_g_hat
        M.bias -= self.generator_alpha * d_g_hat.sum(axis=0)
        return loss
"""


def edited(answer, *edits):
    """``answer`` with each edit ``(old, new)`` made: every ``old`` replaced by ``new``."""
    for old, new in edits:
        assert old in answer, f"the edit changes {old!r}, which the answer does not contain"
        answer = answer.replace(old, new)
    return answer


def planted(answer, *edits):
    """The class that ``answer`` defines, after the edits; MyFullDNI extends sgrad's DNI here."""
    source = edited(answer, *edits)
    namespace = {"DNI": DNI, "Layer": Layer, "MyDNI": DNI, "np": np}
    exec(source, namespace)
    return namespace[re.match(r"class (\w+)", source).group(1)]
