"""The performance benchmark's own pieces: its flat NumPy floor computes sgrad's step, its limit counts the products."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
performance = pytest.importorskip("performance")


def test_the_fused_numpy_floor_takes_the_same_step_as_sgrad():
    fused = performance.fused_numpy_step(seed=0)
    cells = dict(zip(fused.__code__.co_freevars, (cell.cell_contents for cell in fused.__closure__)))
    step, layers = performance.sgrad_step(performance.CASES[0], seed=0)
    layers[0].modules[0].weights[...] = cells["w1"]
    layers[1].modules[0].weights[...] = cells["w2"]
    layers[2].weights[...] = cells["w3"]
    w3_before = cells["w3"].copy()
    w1, norm1, w2, norm2, w3, b3 = fused()
    step()
    pairs = [(layers[0].modules[0].weights, w1), (layers[1].modules[0].weights, w2), (layers[2].weights, w3),
             (layers[2].bias, b3), (layers[0].modules[1].gamma, norm1[0]), (layers[0].modules[1].beta, norm1[1]),
             (layers[1].modules[1].gamma, norm2[0]), (layers[1].modules[1].beta, norm2[1])]
    for k, (mine, floor) in enumerate(pairs):
        np.testing.assert_allclose(mine, floor, rtol=1e-5, atol=1e-7, err_msg=f"parameter {k}")
    assert np.abs(w3 - w3_before).max() > 1e-6  # the step moved the weights


def test_the_limit_counts_the_products_sgrads_backprop_step_does():
    _, layers = performance.sgrad_step(performance.CASES[0])
    plan, gflop = performance.matmul_plan(layers, performance.BATCH, np.dtype("float32"))
    # 784-256 (forward, weight gradient; its input is data), 256-256 and 256-10 (three each).
    assert len(plan) == 8
    batch = performance.BATCH
    expected = 2 * batch * (2 * 784 * 256 + 3 * 256 * 256 + 3 * 256 * 10) / 1e9
    assert gflop == pytest.approx(expected, rel=1e-12)
