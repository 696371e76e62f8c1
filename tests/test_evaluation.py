"""Measuring a trained stack (sgrad.training.evaluation): in evaluation mode, a chunk of rows at a time, training mode
back after."""

import numpy as np
import pytest

from sgrad.experiments.mnist import PaperConfig, build_network
from sgrad.training.evaluation import accuracy, predict_in_eval_mode

TINY = PaperConfig(hidden=16, generator_hidden=(8,), batch_size=8, seed=0)


@pytest.fixture(scope="module")
def test_set():
    rng = np.random.default_rng(0)
    return rng.random((32, 20), dtype=np.float32), rng.integers(0, 10, 32)


def test_accuracy_is_measured_in_evaluation_mode_and_training_mode_comes_back(test_set):
    layers = build_network("cdni", 20, TINY)
    modes = []
    predict = layers[0].predict
    layers[0].predict = lambda x: modes.append(layers[0].block.modules[1].training) or predict(x)
    score = accuracy(layers, *test_set, batch=10)
    assert modes == [False] * 4  # 32 rows in batches of 10
    assert 0.0 <= score <= 1.0
    assert all(module.training for layer in layers for _, module in layer.submodules())


def test_accuracy_is_the_share_of_rows_whose_largest_output_is_the_label_whatever_the_chunks(test_set):
    x, labels = test_set
    layers = build_network("backprop", 20, TINY)
    for layer in layers:
        layer.eval()
    h = x
    for layer in layers:
        h = layer.predict(h)
    for layer in layers:
        layer.train()
    expected = sum(int(np.argmax(row)) == label for row, label in zip(h, labels)) / len(x)
    assert [accuracy(layers, x, labels, batch=rows) for rows in (1, 7, 32, 2000)] == [expected] * 4
    np.testing.assert_allclose(predict_in_eval_mode(layers, x, rows=5), h, rtol=1e-5)  # float32 products per chunk


def test_training_mode_comes_back_when_a_layer_raises(test_set):
    layers = build_network("backprop", 20, TINY)
    with pytest.raises(ValueError):
        predict_in_eval_mode(layers, test_set[0][:, :19])
    assert all(module.training for layer in layers for _, module in layer.submodules())
