"""Shared by every test: the gradient helpers, floating-point errors that raise, and the Hypothesis profiles.

Import the helpers in a test file with ``from conftest import assert_gradients_match, relative_error``
(pytest puts ``tests/`` on ``sys.path``).  This file puts ``notebooks/instructor/`` there too, where the
reference answers live outside the package: ``from solutions import MY_LAYER``.  ``numerical_gradient`` and
``relative_error`` are the library's own central-difference gradient and relative error; tests/test_checks.py
checks them against functions whose gradients are known.  The Hypothesis strategies live in strategies.py.

Hypothesis runs the ``ci`` profile unless ``HYPOTHESIS_PROFILE`` names another:

- ``ci``: few examples, the same ones on every run (``derandomize``), no deadline (a loaded machine
  must not fail a test for being slow) and no example database, so CI is fast and reproducible;
- ``thorough``: many fresh random examples, for hunting bugs locally:
  ``HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_layer.py``.
"""

import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import assume, settings

from sgrad.course import numerical_gradient, relative_error
from sgrad.dni.generators import LinearGenerator
from sgrad.nn.blocks import Activation, Sequential
from sgrad.nn.kernels import linear_forward
from sgrad.nn.layers import Layer
from sgrad.nn.nonlinearities import relu

# The reference answers of notebook 07: a file of the repository's instructor folder, not a module of sgrad.
INSTRUCTOR = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "instructor"
sys.path.insert(0, str(INSTRUCTOR))

__all__ = ["numerical_gradient", "relative_error", "assert_gradients_match", "assert_backward_matches_central_differences",
           "normal", "randomize", "away_from_kinks", "random_input_and_delta", "assert_dtype", "assert_tree_dtype",
           "tree_state", "assert_same_state", "tiny_mnist", "answer_lines", "copy_of_the_code"]

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


# --- gradient checks ------------------------------------------------------------------------------

TOLERANCE = 1e-6  # relative error: a correct float64 gradient is near 1e-9; a wrong one is off by far more
# Where the true gradient is itself tiny (batch norm over two rows nearly cancels it), the rounding
# error of the central difference, about 1e-16 * |L| / eps = 1e-10 * |L|, dominates the relative
# error: accept an absolute difference below this many times max(|L|, 1) instead.
ROUNDING_TOLERANCE = 1e-8
KINK = 1e-4  # ReLU is not differentiable at 0: keep pre-activations this far from it (eps is 1e-6)


def assert_gradients_match(loss, mine, arrays, what):
    """Compare each analytic gradient in ``mine`` with the central difference of ``loss()`` in ``arrays``.

    ``loss`` takes no argument and reads the arrays, which are nudged in place and restored.  On failure
    the message names the array and prints both gradients side by side.
    """
    rounding = ROUNDING_TOLERANCE * max(abs(loss()), 1.0)
    for name, array in arrays.items():
        theirs = numerical_gradient(loss, array)
        error = relative_error(mine[name], theirs)
        difference = float(np.max(np.abs(np.asarray(mine[name], dtype=np.float64) - theirs)))
        assert error < TOLERANCE or difference < rounding, (
            f"{what}, dL/d{name}: relative error {error:.1e} (largest difference {difference:.1e}) "
            "between backward and central differences\n"
            f"  backward (mine):      {np.ravel(mine[name])[:6]}\n"
            f"  central differences:  {np.ravel(theirs)[:6]}")


def assert_backward_matches_central_differences(module, x, R, what):
    """``module.backward`` against central differences of ``L = sum(module.forward(x) * R)``, so that dL/dh = R.

    Checks the returned input delta and every entry of ``module.gradients`` (keyed as ``module.parameters``).
    """
    module.forward(x)
    input_delta = module.backward(R)
    assert_gradients_match(lambda: float(np.sum(module.forward(x) * R)), dict(module.gradients, input=input_delta),
                           dict(module.parameters, input=x), what)


def normal(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def randomize(parameters, rng):
    """Give every parameter random values in place (zero-initialised output layers would hide gradients)."""
    for param in parameters.values():
        param[...] = 0.5 * rng.standard_normal(param.shape)


def _relu_inputs(module, x):
    """What each ReLU inside ``module`` receives for input ``x`` (run with predict: no side effects)."""
    found = []

    def run(part, value):
        if isinstance(part, Sequential):
            for sub in part.modules:
                value = run(sub, value)
            return value
        if isinstance(part, Activation) and part.nonlin is relu:
            found.append(value)
        if isinstance(part, Layer) and part.nonlin is relu:
            found.append(linear_forward(value, part.weights, part.bias))
        return part.predict(value)

    run(module, x)
    return found


def away_from_kinks(module, x):
    """Whether every ReLU inside ``module`` (a Layer's or an Activation) gets inputs at least KINK away from 0."""
    return all(np.min(np.abs(z)) > KINK for z in _relu_inputs(module, x))


def random_input_and_delta(module, rng, batch):
    """Randomise ``module``'s parameters; draw an input x that keeps its ReLUs off their kinks, and a delta R.

    For use inside a Hypothesis test: an x too near a kink is rejected with ``assume``.
    """
    randomize(module.parameters, rng)
    x, R = normal(rng, batch, module.input_dim), normal(rng, batch, module.output_dim)
    assume(away_from_kinks(module, x))
    return x, R


# --- dtypes -----------------------------------------------------------------------------------------


def assert_dtype(dtype, **arrays):
    for name, array in arrays.items():
        assert array.dtype == dtype, f"{name} is {array.dtype}; expected {np.dtype(dtype)}, the dtype it was given"


def assert_tree_dtype(dtype, tree, what):
    """Every parameter, buffer and floating optimizer state in ``tree`` has ``dtype`` (Adam's step counter is an int)."""
    for path, module in tree.submodules():
        where = f"{what} {path}".rstrip()
        arrays = dict(module.own_parameters(), **module.buffers())
        for name, state in module.update_state.items():
            arrays.update({f"{name} state {key}": value for key, value in state.items() if value.dtype.kind == "f"})
        assert_dtype(dtype, **{f"{where} {name}": array for name, array in arrays.items()})


# --- "changes nothing" --------------------------------------------------------------------------------


def tree_state(tree):
    """Copies of every array and flag each module in ``tree`` holds (parameters, buffers, caches, optimizer
    state, ``training``), by path.  None is recorded too, so a cache that a failed call filled shows up.
    """
    state = {}

    def record(path, value):
        if isinstance(value, np.ndarray):
            state[path] = value.copy()
        elif value is None or isinstance(value, (bool, int, float, str)):
            state[path] = value
        elif isinstance(value, (tuple, list)):
            for k, item in enumerate(value):
                record(f"{path}[{k}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                record(f"{path}[{key!r}]", item)

    for path, module in tree.submodules():
        for name, value in vars(module).items():
            record(f"{path}:{name}", value)
    return state


def assert_same_state(tree, before):
    """Every array in ``tree`` is bit for bit as ``tree_state`` recorded it in ``before``."""
    after = tree_state(tree)
    assert after.keys() == before.keys(), f"attributes came or went: {sorted(after.keys() ^ before.keys())}"
    for path, value in before.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(after[path], value, err_msg=f"{path} changed")
        else:
            now = after[path]
            assert not isinstance(now, np.ndarray) and now == value, f"{path} was {value!r} and is now {now!r}"


class RecordingGenerator(LinearGenerator):
    """A LinearGenerator that remembers every condition and target it was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conditions = []
        self.targets = []

    def forward(self, h, condition=None):
        self.conditions.append(condition)
        return super().forward(h, condition)

    def update(self, target, alpha):
        self.targets.append(target.copy())
        return super().update(target, alpha)


def random_batch(rng, batch, width):
    return rng.standard_normal((batch, width))


def tiny_mnist(folder):
    """A small archive in the mnist.npz layout (64 training, 16 test images, not the real MNIST); returns its path."""
    rng = np.random.default_rng(0)
    np.savez_compressed(folder / "mnist.npz", x_train=rng.integers(0, 256, (64, 28, 28), dtype=np.uint8),
                        y_train=rng.integers(0, 10, 64, dtype=np.uint8),
                        x_test=rng.integers(0, 256, (16, 28, 28), dtype=np.uint8),
                        y_test=rng.integers(0, 10, 16, dtype=np.uint8))
    return folder / "mnist.npz"


def answer_lines():
    """The lines of the reference answers (notebooks/instructor/solutions.py) that do an exercise's work: those
    that the notebook's stubs do not give, but for ``return loss`` and the like (names returned), which any code
    may hold."""
    import solutions

    notebook = json.loads((INSTRUCTOR.parent / "07_homework.ipynb").read_text())
    given = {line.split("#")[0].strip() for cell in notebook["cells"] for line in "".join(cell["source"]).splitlines()}
    lines = [line.split("#")[0].strip() for answer in (solutions.MY_LAYER, solutions.MY_DNI, solutions.MY_FULL_DNI)
             for line in answer.splitlines()[2:]]
    return [line for line in lines if line not in given and not re.fullmatch(r"return \w+(, \w+)*", line)]


def copy_of_the_code(folder):
    """A copy of sgrad and data_gen in ``folder/src``, to run with ``PYTHONPATH=folder/src`` so a test may edit it."""
    import data_gen
    import sgrad

    src = folder / "src"
    for package in (sgrad, data_gen):
        source = pathlib.Path(package.__file__).parent
        shutil.copytree(source, src / source.name, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def assert_group_ends(group, what, seconds=15):
    """Fail unless every process of the session ``group`` (a started command's pid) has exited within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"a process of {what} outlived it")


def _sigint_as_at_a_terminal():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def started(arguments, **options):
    """A command started in a session of its own, stdout and stderr piped as text.

    The command starts with SIGINT at its default action, as at a terminal, even when pytest itself runs
    with SIGINT ignored (a shell starts a background job, ``pytest &``, that way, and children inherit it):
    a Ctrl-C test then tests the command, not how pytest was launched.  On leaving, a command that is still
    running is killed with its whole group, and its pipes are closed: a test that fails half-way leaves no
    process and no open file behind.
    """
    with subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, preexec_fn=_sigint_as_at_a_terminal, **options) as run:
        try:
            yield run
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(timeout=30)


def damage_checkpoint(path, change):
    """Rewrite the checkpoint at ``path`` as a damaged copy would hold it: ``change(metadata, arrays)`` edits its
    JSON metadata and its arrays in place; the archive is written anew, so its checksums are good."""
    import json

    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    metadata = json.loads(arrays.pop("metadata").tobytes())
    change(metadata, arrays)
    arrays["metadata"] = np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
