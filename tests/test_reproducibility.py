"""Runs that end the same way every time: another seed gives other numbers, and nothing touches NumPy's global
random state.

Specified elsewhere, once: the same seed gives bit-identical histories through the command
(tests/test_cli.py); methods side by side start from the same weights and see the same batches, and
a diverging method stops clearly while the others carry on (tests/test_experiment_binary_addition.py,
tests/test_experiment_mnist.py); the loop's divergence and resuming (tests/test_loop.py).
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import sgrad
from sgrad.experiments import mnist

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = dict(output_dim=5, num_train=64, num_test=16, epochs=3, batch_size=16, hidden=(8, 8))


# --- another seed, other numbers ---------------------------------------------------------------------------


def test_another_seed_gives_other_numbers():
    first = sgrad.compare(["dni"], seed=0, **TINY)
    second = sgrad.compare(["dni"], seed=1, **TINY)
    assert first["dni"]["step_loss"] != second["dni"]["step_loss"]


# --- what the BLAS thread count changes ---------------------------------------------------------------------


def compare_in_a_process(threads):
    """The histories of a short ``sgrad.compare`` in a fresh process with ``threads`` BLAS threads.

    In that process itself: the command's workers take one BLAS thread whatever the environment says.
    """
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    program = ("import json, sgrad; print(json.dumps(sgrad.compare(['backprop', 'no-bprop'], epochs=3, num_train=200, "
               "num_test=50)))")
    result = subprocess.run([sys.executable, "-c", program], env=env, check=True, capture_output=True, text=True,
                            timeout=300)
    return json.loads(result.stdout)


def test_backprop_is_bit_identical_on_one_and_two_blas_threads():
    """docs/results/compare.md promises it for backprop and no backprop (DNI's rounding depends on the thread count)."""
    one, two = compare_in_a_process(1), compare_in_a_process(2)
    for method in ("backprop", "no-bprop"):
        assert one[method]["step_loss"] == two[method]["step_loss"], method
        assert one[method]["test_bit_accuracy"] == two[method]["test_bit_accuracy"], method


# --- no global random state --------------------------------------------------------------------------------


def global_random_state():
    """NumPy's legacy global state ``(name, keys, pos, has_gauss, cached_gaussian)``: read here, never used."""
    return np.random.get_state()  # noqa: NPY002  (the test is about this very state)


def same_global_state(before, after):
    return before[0] == after[0] and np.array_equal(before[1], after[1]) and before[2:] == after[2:]


def test_a_whole_compare_run_leaves_numpys_global_random_state_alone(tmp_path):
    before = global_random_state()
    sgrad.compare(out_dir=tmp_path, checkpoint_every=5, **TINY)
    assert same_global_state(before, global_random_state())


def test_a_paper_grid_leaves_numpys_global_random_state_alone(tmp_path):
    rng = np.random.default_rng(0)
    data = (rng.random((64, 20), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32))
    config = mnist.PaperConfig(iterations=4, eval_every=2, hidden=16, generator_hidden=(8,), batch_size=8)
    before = global_random_state()
    mnist.run_grid(data, methods=mnist.PAPER_METHODS, config=config, out_dir=tmp_path, checkpoint_every=2)
    assert same_global_state(before, global_random_state())


# np.random.<anything but the Generator API>, and the legacy names imported directly.
LEGACY_RANDOM = re.compile(r"np\.random\.(?!default_rng\b|Generator\b|SeedSequence\b|PCG64\b|BitGenerator\b)\w+"
                           r"|from numpy\.random import|^\s*import random\b|\bRandomState\b", re.MULTILINE)


@pytest.mark.parametrize("folder", ["sgrad", "data_gen"])
def test_no_source_file_calls_numpys_global_random_functions(folder):
    offenders = [f"{path.relative_to(ROOT)}: {match.group(0)!r}"
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 for match in LEGACY_RANDOM.finditer(path.read_text())]
    assert offenders == [], "use a numpy.random.Generator (np.random.default_rng(seed)) instead"
