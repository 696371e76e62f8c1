"""A correct answer to each exercise of notebooks/07_homework.ipynb, as the cell a student would hand in.

``MY_LAYER``, ``MY_DNI`` and ``MY_FULL_DNI`` are the stub cells of the notebook, filled in with arrays
as the homework asks.  They live here, in the repository's instructor folder, and not in the package:
an installed sgrad (a wheel holds sgrad/ and data_gen/ alone) has no answer to hand out.  The tests put
this folder on sys.path (tests/conftest.py) and plant mistakes in the answers (tests/test_checks.py: the
checkers must name each one; tests/test_grading.py: copies of the notebook holding them, graded by
``sgrad grade``); :mod:`sgrad.course.autograder` reads them as text for the Otter-Grader notebook beside
this file.  A planted mistake is an edit ``(old, new)``: every ``old`` text of the answer replaced by ``new``::

    wrong = planted(MY_LAYER, ("self.nonlin_deriv(self.output)", "1"))   # the class, defined
    print(check_layer_backward(wrong))
"""

import pathlib
import re
from typing import Any

import numpy as np

from sgrad import DNI, Layer

HOMEWORK = pathlib.Path(__file__).resolve().parents[1] / "07_homework.ipynb"

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


def edited(answer: str, *edits: tuple[str, str]) -> str:
    """``answer`` with each edit ``(old, new)`` made: every ``old`` replaced by ``new``."""
    for old, new in edits:
        if old not in answer:
            raise ValueError(f"the edit changes {old!r}, which the answer does not contain")
        answer = answer.replace(old, new)
    return answer


def planted(answer: str, *edits: tuple[str, str]) -> type:
    """The class that ``answer`` defines, after the edits; MyFullDNI extends sgrad's DNI here."""
    source = edited(answer, *edits)
    namespace: dict[str, Any] = {"DNI": DNI, "Layer": Layer, "MyDNI": DNI, "np": np}
    exec(source, namespace)
    first = re.match(r"class (\w+)", source)
    if first is None:
        raise ValueError(f"expected an answer that starts with a class statement; got {source[:40]!r}")
    return namespace[first.group(1)]


def handed_in(answers: dict[str, str], notebook: "pathlib.Path | str" = HOMEWORK) -> Any:
    """Notebook 07 (or the release at ``notebook``) as a student hands it in: the stub cell of each class in
    ``answers`` (``{"MyLayer": MY_LAYER, ...}``) replaced by its answer."""
    import nbformat  # here: only the notebooks need it

    handed = nbformat.read(notebook, as_version=4)
    for cell in handed.cells:
        for class_name, answer in answers.items():
            if cell.cell_type == "code" and cell.source.startswith(f"class {class_name}("):
                cell.source = answer
    return handed
