"""Shared by every test: the gradient helpers, floating-point errors that raise, and the Hypothesis profiles.

Import the helpers in a test file with ``from conftest import numerical_gradient, relative_error``
(pytest puts ``tests/`` on ``sys.path``).  They are the library's own central-difference gradient and
relative error; tests/test_checks.py checks them against functions whose gradients are known.

Hypothesis runs the ``ci`` profile unless ``HYPOTHESIS_PROFILE`` names another:

- ``ci``: few examples, the same ones on every run (``derandomize``), no deadline (a loaded machine
  must not fail a test for being slow) and no example database, so CI is fast and reproducible;
- ``thorough``: many fresh random examples, for hunting bugs locally:
  ``HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_properties.py``.
"""

import os

import numpy as np
import pytest
from hypothesis import settings

from sgrad.checks import numerical_gradient, relative_error

__all__ = ["numerical_gradient", "relative_error"]

settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, database=None,
                          print_blob=True)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def floating_point_errors_raise():
    """Overflow, division by zero and invalid operations (NaN from inf - inf, 0/0) raise FloatingPointError.

    NumPy only warns about them by default, and a warning can be swallowed; here the operation that
    produced the bad number fails at once.  Underflow stays silent: rounding exp(-1e4) to 0 is correct.
    """
    with np.errstate(over="raise", divide="raise", invalid="raise", under="ignore"):
        yield
