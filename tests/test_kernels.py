"""The plain kernels of sgrad/nn/kernels.py that no class checks through its own backward pass.

The dense-layer and linear kernels are checked through Layer (test_layer.py) and evaluation-mode batch norm's
``batchnorm_eval_backward`` through BatchNorm (test_batchnorm.py).  Training-mode BatchNorm runs the in-place twin
``fast.batchnorm_backward``; the plain ``batchnorm_backward`` it is tested against (test_fast.py) gets its
own gradient check here.  One RNN or LSTM step is checked here by itself; the layers of sgrad/recurrent/layers.py,
which run the steps over a window, are checked in test_recurrent.py.  So are the windows that convolution and
pooling read (sum_windows against sliding_windows) and the plain max pooling.
"""

import numpy as np
import pytest
from conftest import assert_gradients_match, normal
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import batches, seeds, training_batches, widths

from sgrad.nn import kernels
from sgrad.training.evaluation import cosine_similarity


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
    assert cosine_similarity(np.array(a), np.array(b)) == pytest.approx(expected, abs=1e-15)


def test_cosine_similarity_with_an_all_zero_array_is_zero():
    assert cosine_similarity(np.zeros((2, 3)), np.ones((2, 3))) == 0.0
    assert cosine_similarity(np.zeros((2, 3)), np.zeros((2, 3))) == 0.0


# --- one recurrent step ---------------------------------------------------------------------------------
# Each step's backward returns dL/dz_t; the gradients of x_t, W_x, W_h and b follow from it as for a linear map
# (z_t = x_t W_x + h_{t-1} W_h + b), so checking them checks dz_t.


def _step_arrays(rng, batch, input_dim, hidden, gates):
    return {"x_t": normal(rng, batch, input_dim), "h_prev": normal(rng, batch, hidden),
            "weights_x": 0.5 * normal(rng, input_dim, gates * hidden),
            "weights_h": 0.5 * normal(rng, hidden, gates * hidden), "bias": 0.5 * normal(rng, gates * hidden)}


def _through_z(dz, a):
    """The gradients that follow from dL/dz_t for z_t = x_t W_x + h_{t-1} W_h + b."""
    return {"x_t": dz @ a["weights_x"].T, "weights_x": a["x_t"].T @ dz, "weights_h": a["h_prev"].T @ dz,
            "bias": dz.sum(axis=0)}


@given(batch=batches, input_dim=widths, hidden=widths, seed=seeds)
def test_rnn_step_backward_matches_central_differences_of_rnn_step_forward(batch, input_dim, hidden, seed):
    rng = np.random.default_rng(seed)
    a = _step_arrays(rng, batch, input_dim, hidden, 1)
    R = normal(rng, batch, hidden)

    def loss():  # L = sum(h_t * R), so dL/dh_t = R
        return float(np.sum(kernels.rnn_step_forward(**a) * R))

    dz, dh_prev = kernels.rnn_step_backward(R, kernels.rnn_step_forward(**a), a["weights_h"])
    assert_gradients_match(loss, dict(_through_z(dz, a), h_prev=dh_prev), a,
                           f"kernels.rnn_step_backward, batch {batch}, {input_dim} inputs, {hidden} units")


@given(batch=batches, input_dim=widths, hidden=widths, seed=seeds)
def test_lstm_step_backward_matches_central_differences_of_lstm_step_forward(batch, input_dim, hidden, seed):
    rng = np.random.default_rng(seed)
    a = dict(_step_arrays(rng, batch, input_dim, hidden, 4), c_prev=normal(rng, batch, hidden))
    R, Q = normal(rng, batch, hidden), normal(rng, batch, hidden)

    def loss():  # L = sum(h_t * R) + sum(c_t * Q): dL/dh_t = R, and Q arrives at c_t from the step after
        h, c, _ = kernels.lstm_step_forward(**a)
        return float(np.sum(h * R) + np.sum(c * Q))

    _, c, gates = kernels.lstm_step_forward(**a)
    dz, dh_prev, dc_prev = kernels.lstm_step_backward(R, Q, a["c_prev"], c, gates, a["weights_h"])
    assert_gradients_match(loss, dict(_through_z(dz, a), h_prev=dh_prev, c_prev=dc_prev), a,
                           f"kernels.lstm_step_backward, batch {batch}, {input_dim} inputs, {hidden} units")


def test_lstm_step_forward_gates_are_in_pytorchs_order_input_forget_candidate_output():
    hidden = 2
    z = np.array([[1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0]])  # [z_i, z_f, z_g, z_o], two units each
    h, c, gates = kernels.lstm_step_forward(np.ones((1, 1)), np.zeros((1, hidden)), np.full((1, hidden), 0.7),
                                            z, np.zeros((hidden, 4 * hidden)), np.zeros(4 * hidden))
    i, f, g, o = 1 / (1 + np.exp(-z[:, :2])), 1 / (1 + np.exp(-z[:, 2:4])), np.tanh(z[:, 4:6]), 1 / (1 + np.exp(-z[:, 6:]))
    np.testing.assert_allclose(gates, np.concatenate([i, f, g, o], axis=1), rtol=1e-15)
    np.testing.assert_allclose(c, f * 0.7 + i * g, rtol=1e-15)
    np.testing.assert_allclose(h, o * np.tanh(f * 0.7 + i * g), rtol=1e-15)


# --- convolution and pooling -----------------------------------------------------------------------------
# The convolution's kernels are checked through Conv2d (test_conv.py).  The plain max pooling is checked here:
# MaxPool2d runs its twin in sgrad/nn/fast_kernels.py, tested against it in test_fast.py.

window_sizes = st.integers(1, 3)  # kernel sides and strides
map_sides = st.integers(1, 6)


@given(batch=window_sizes, channels=window_sizes, height=map_sides, width=map_sides, kernel_height=window_sizes,
       kernel_width=window_sizes, stride=window_sizes, padding=st.integers(0, 2), seed=seeds)
def test_sum_windows_is_the_adjoint_of_sliding_windows(batch, channels, height, width, kernel_height, kernel_width,
                                                       stride, padding, seed):
    """<sliding_windows(x), D> = <x, sum_windows(D)> for every x and D: what makes sum_windows the backward pass."""
    assume(kernel_height <= height + 2 * padding and kernel_width <= width + 2 * padding)
    rng = np.random.default_rng(seed)
    x = normal(rng, batch, channels, height, width)
    windows = kernels.sliding_windows(x, (kernel_height, kernel_width), stride, padding)
    D = normal(rng, *windows.shape)
    back = kernels.sum_windows(D, x.shape, stride, padding)
    assert back.shape == x.shape
    assert np.sum(windows * D) == pytest.approx(np.sum(x * back), rel=1e-12, abs=1e-12)


def test_sliding_windows_reads_the_padded_input_at_stride_times_the_position_plus_the_offset():
    x = np.arange(2 * 3 * 5 * 4, dtype=np.float64).reshape(2, 3, 5, 4)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = kernels.sliding_windows(x, (3, 2), 2, 1)
    assert windows.shape == (2, kernels.conv_output_size(5, 3, 2, 1), kernels.conv_output_size(4, 2, 2, 1), 3, 2, 3)
    for n, y, x_, i, j, c in [(0, 0, 0, 0, 0, 0), (1, 2, 1, 2, 1, 2), (0, 1, 2, 1, 0, 1)]:
        assert windows[n, y, x_, i, j, c] == padded[n, c, 2 * y + i, 2 * x_ + j]


@given(batch=window_sizes, channels=window_sizes, height=map_sides, width=map_sides, kernel=window_sizes,
       stride=window_sizes, padding=st.integers(0, 1), seed=seeds)
def test_maxpool2d_backward_matches_central_differences_of_maxpool2d_forward(batch, channels, height, width, kernel,
                                                                             stride, padding, seed):
    assume(2 * padding <= kernel <= min(height, width) + 2 * padding)
    rng = np.random.default_rng(seed)
    # values 0.01 apart in random order: no window ties, even with an entry nudged by 1e-6
    x = rng.permutation(batch * channels * height * width).reshape(batch, channels, height, width) * 0.01
    out, argmax = kernels.maxpool2d_forward(x, (kernel, kernel), stride, padding)
    R = normal(rng, *out.shape)

    def loss():
        return float(np.sum(kernels.maxpool2d_forward(x, (kernel, kernel), stride, padding)[0] * R))

    dx = kernels.maxpool2d_backward(R, argmax, x.shape, (kernel, kernel), stride, padding)
    assert_gradients_match(loss, {"x": dx}, {"x": x}, f"kernels.maxpool2d_backward, {kernel}×{kernel}, stride {stride}, "
                                                      f"padding {padding}")
