"""The plain kernels of sgrad/kernels.py that no class checks through its own backward pass.

The dense-layer and linear kernels are checked through Layer (test_layer.py) and evaluation-mode batch norm's
``affine_backward`` through BatchNorm (test_batchnorm.py).  Training-mode BatchNorm runs the in-place twin
``fast.batchnorm_backward``; the plain ``batchnorm_backward`` it is tested against (test_fast.py) gets its
own gradient check here.
"""

import numpy as np
import pytest
from conftest import assert_gradients_match, normal
from hypothesis import assume, given
from strategies import seeds, training_batches, widths

from sgrad import kernels


@given(batch=training_batches, features=widths, seed=seeds)
def test_batchnorm_backward_matches_central_differences_of_batchnorm_forward(batch, features, seed):
    rng = np.random.default_rng(seed)
    x = normal(rng, batch, features) * rng.uniform(0.5, 3.0, features) + rng.standard_normal(features)
    gamma, beta, R = normal(rng, features), normal(rng, features), normal(rng, batch, features)
    assume(np.min(x.var(axis=0)) > 1e-2)  # a small variance curves the loss too sharply for central differences

    def loss():  # L = sum(out * R), so dL/d(out) = R
        return float(np.sum(kernels.batchnorm_forward(x, gamma, beta, 1e-5)[0] * R))

    _, x_hat, inv_std, _, _ = kernels.batchnorm_forward(x, gamma, beta, 1e-5)
    dx, dgamma, dbeta = kernels.batchnorm_backward(R, x_hat, inv_std, gamma)
    assert_gradients_match(loss, {"x": dx, "gamma": dgamma, "beta": dbeta}, {"x": x, "gamma": gamma, "beta": beta},
                           f"kernels.batchnorm_backward, batch {batch}, {features} features")


@pytest.mark.parametrize("a, b, expected", [
    ([[1.0, 2.0], [3.0, 4.0]], [[2.0, 4.0], [6.0, 8.0]], 1.0),
    ([[1.0, -2.0]], [[-3.0, 6.0]], -1.0),
    ([[1.0, 0.0]], [[0.0, 5.0]], 0.0),
    ([[1.0, 1.0]], [[1.0, 0.0]], np.sqrt(0.5)),
], ids=["parallel", "opposite", "orthogonal", "at-45-degrees"])
def test_cosine_similarity_is_the_cosine_of_the_angle_between_the_flattened_arrays(a, b, expected):
    assert kernels.cosine_similarity(np.array(a), np.array(b)) == pytest.approx(expected, abs=1e-15)


def test_cosine_similarity_with_an_all_zero_array_is_zero():
    assert kernels.cosine_similarity(np.zeros((2, 3)), np.ones((2, 3))) == 0.0
    assert kernels.cosine_similarity(np.zeros((2, 3)), np.zeros((2, 3))) == 0.0
