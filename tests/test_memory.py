"""sgrad.training.memory: the memory a step frees stays in the process for the next step, where glibc runs.

Each case runs in a fresh Python process, whose allocator starts with glibc's defaults, and counts the page
faults (``getrusage``'s minor faults) of fifty steps that allocate and free four arrays of 3 MB, as a training
step allocates and frees its activations and gradients.
"""

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="the setting is glibc's malloc's; elsewhere keep_freed_memory does nothing")

STEPS = """
import json, resource, sys
import numpy as np

def step():
    arrays = [np.ones(3 << 18, dtype=np.float32) for _ in range(4)]  # four arrays of 3 MB, each written
    del arrays

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

{setup}
step(), step()  # the heap has grown to the step's size
before = faults()
for _ in range(50):
    step()
print(json.dumps({{"faults": faults() - before, "took": took}}))
"""


def faults_of_fifty_steps(setup):
    run = subprocess.run([sys.executable, "-c", STEPS.format(setup=setup)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_keep_freed_memory_ends_the_page_faults_of_steps_that_free_what_the_next_allocates():
    default = faults_of_fifty_steps("took = None")
    kept = faults_of_fifty_steps("from sgrad.training.memory import keep_freed_memory\ntook = keep_freed_memory()")
    assert kept["took"] is True
    # Without it, glibc hands the 12 MB back at every step and takes it again: 3,072 pages of 4 KB a step.
    assert default["faults"] >= 50 * 2_000, default
    assert kept["faults"] <= 100, kept


def test_the_training_loop_keeps_the_memory_its_steps_free():
    """After a run of sgrad's training loop (binary addition, two epochs), the process keeps freed memory."""
    train = """
from data_gen.binary_addition import generate_dataset
from sgrad.experiments.binary_addition import TrainConfig, train
x, y = generate_dataset(8, 64, seed=0)
train("backprop", (x[:48], y[:48], x[48:], y[48:]), TrainConfig(epochs=2, batch_size=16, hidden=(8,), seed=0))
took = "after a run"
"""
    assert faults_of_fifty_steps(train)["faults"] <= 100


def test_keep_freed_memory_a_second_time_changes_nothing_more():
    twice = faults_of_fifty_steps("from sgrad.training.memory import keep_freed_memory\n"
                                  "took = [keep_freed_memory(), keep_freed_memory()] == [True, True]")
    assert twice["took"] is True and twice["faults"] <= 100
