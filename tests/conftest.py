"""Helpers shared by the tests: the library's central-difference gradient and relative error.

Import them in a test file with ``from conftest import numerical_gradient, relative_error``
(pytest puts ``tests/`` on ``sys.path``).  tests/test_checks.py checks them against
functions whose gradients are known.
"""

from sgrad.checks import numerical_gradient, relative_error

__all__ = ["numerical_gradient", "relative_error"]
