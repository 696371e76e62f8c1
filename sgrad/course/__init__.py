"""The course: the homework's checkers, and the grader of a student's notebook.

- :mod:`sgrad.course.checkers`: what a student calls in notebook 07 to check an exercise
  (``check_layer_backward``, ``check_dni_update``, ``check_generator_update``), and the numerical
  gradient tools beneath them (``numerical_gradient``, ``relative_error``, ``gradient_check``);
- :mod:`sgrad.course.grader`: ``sgrad grade``, which runs a handed-in notebook in a Jupyter kernel and
  checks each exercise.  It needs the notebook libraries (``pip install 'sgrad[notebooks]'``), so it is
  not imported here;
- :mod:`sgrad.course.edition`: the homework edition of sgrad, without the answers, that a graded
  notebook imports in sgrad's place.

The reference answers are not in the package: they live in the repository, in ``notebooks/instructor/``
(``solutions.py``, and the Otter-Grader notebook that :mod:`sgrad.course.autograder` builds from them).

The names below are the checkers', so that a notebook writes ``from sgrad.course import check_layer_backward``.
"""

from .checkers import (CheckResult, check_dni_update, check_generator_update, check_layer_backward, gradient_check,
                       numerical_gradient, relative_error)

__all__ = ["CheckResult", "check_layer_backward", "check_dni_update", "check_generator_update", "gradient_check",
           "numerical_gradient", "relative_error"]
