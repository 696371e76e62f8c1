"""The course: the homework's checkers, and the grader of a student's notebook.

- :mod:`sgrad.course.checkers`: what a student calls in notebook 07 to check an exercise
  (``check_layer_backward``, ``check_dni_update``, ``check_generator_update``), each exercise judged by a
  module of its own (``exercise_layer_backward``, ``exercise_dni_update``, ``exercise_generator_update``),
  and every check's :class:`CheckResult` (:mod:`sgrad.course.check_reports`);
- the numerical gradient tools beneath them: ``numerical_gradient`` and ``relative_error``
  (:mod:`sgrad.course.numerical_gradients`), and ``gradient_check`` of any layer's backward
  (:mod:`sgrad.course.backward_check`);
- :mod:`sgrad.course.grader`: ``sgrad grade``, which runs a handed-in notebook in a Jupyter kernel and
  checks each exercise.  It needs the notebook libraries (``pip install 'sgrad[notebooks]'``), so it is
  not imported here;
- :mod:`sgrad.course.edition`: the homework edition of sgrad, without the answers, that a graded
  notebook imports in sgrad's place.

The reference answers are not in the package: they live in the repository, in ``notebooks/instructor/``
(``solutions.py``, and the Otter-Grader notebook that :mod:`sgrad.course.autograder` builds from them).

The names below are the checkers' and the gradient tools', so that a notebook writes
``from sgrad.course import check_layer_backward``.
"""

from .backward_check import gradient_check
from .check_reports import CheckResult
from .checkers import check_dni_update, check_generator_update, check_layer_backward
from .numerical_gradients import numerical_gradient, relative_error

__all__ = ["CheckResult", "check_layer_backward", "check_dni_update", "check_generator_update", "gradient_check",
           "numerical_gradient", "relative_error"]
