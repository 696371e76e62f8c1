"""The LSTM's weight gradient by e-prop's eligibility traces (sgrad.recurrent.eprop): exact where W_h = 0, against central
differences and against the LSTM's own backward pass; an approximation otherwise; errors at its boundary.

The window's loss is ``L = sum(outputs * R) + sum(last_state * G)``, so that L^h_t = R[:, t] and ĝ = G, as in
tests/test_recurrent.py.
"""

import numpy as np
import pytest
from conftest import numerical_gradient, relative_error

from sgrad.recurrent.eprop import eprop_backward
from sgrad.recurrent.layers import LSTM, RNN


def _window(seed, batch=3, time=5, input_dim=2, hidden_dim=4, recurrent=True):
    """An LSTM with random parameters (W_h = 0 unless ``recurrent``), x, a start state, R and G."""
    rng = np.random.default_rng(seed)
    core = LSTM(input_dim, hidden_dim, rng=rng)
    for param in core.parameters.values():
        param[...] = 0.5 * rng.standard_normal(param.shape)
    if not recurrent:
        core.weights_h[...] = 0.0
    x = rng.standard_normal((batch, time, input_dim))
    state = rng.standard_normal((batch, core.state_dim))
    R = rng.standard_normal((batch, time, hidden_dim))
    G = rng.standard_normal((batch, core.state_dim))
    return core, x, state, R, G


def _eprop_gradients(core, x, state, R, G):
    core.forward(x, state)
    eprop_backward(core, R, G)
    return {name: grad.copy() for name, grad in core.gradients.items()}


def _bptt_gradients(core, x, state, R, G):
    core.forward(x, state)
    core.backward(R, G, input_delta=False)
    return {name: grad.copy() for name, grad in core.gradients.items()}


def _flat(gradients):
    return np.concatenate([gradients[name].ravel() for name in sorted(gradients)])


@pytest.mark.parametrize("seed", range(4))
def test_with_no_recurrent_weights_eprop_is_the_exact_gradient_by_central_differences(seed):
    core, x, state, R, G = _window(seed, recurrent=False)
    mine = _eprop_gradients(core, x, state, R, G)

    def loss():
        outputs, last_state = core.predict(x, state)
        return float(np.sum(outputs * R) + np.sum(last_state * G))

    for name, param in core.parameters.items():
        theirs = numerical_gradient(loss, param)
        error = relative_error(mine[name], theirs)
        assert error < 1e-6, (f"seed {seed}, dL/d{name}: relative error {error:.1e} between e-prop and central "
                              f"differences\n  e-prop:  {mine[name].ravel()[:6]}\n  central: {theirs.ravel()[:6]}")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("with_g_hat", [True, False])
def test_with_no_recurrent_weights_eprop_equals_the_lstms_backward_pass(seed, with_g_hat):
    core, x, state, R, G = _window(seed, batch=4, time=7, input_dim=3, hidden_dim=5, recurrent=False)
    G = G if with_g_hat else None
    mine, theirs = _eprop_gradients(core, x, state, R, G), _bptt_gradients(core, x, state, R, G)
    for name in theirs:
        assert relative_error(mine[name], theirs[name]) < 1e-10, name


def test_the_synthetic_gradient_enters_at_the_last_step_through_h_and_straight_into_c():
    core, x, state, R, G = _window(0, recurrent=False)
    zero = np.zeros_like(R)
    for part in (slice(None, core.hidden_dim), slice(core.hidden_dim, None)):  # ĝ_h alone, then ĝ_c alone
        only = np.zeros_like(G)
        only[:, part] = G[:, part]
        mine, theirs = _eprop_gradients(core, x, state, zero, only), _bptt_gradients(core, x, state, zero, only)
        assert np.abs(_flat(mine)).max() > 1e-3
        assert relative_error(_flat(mine), _flat(theirs)) < 1e-10


@pytest.mark.parametrize("seed", range(10))
def test_with_recurrent_weights_eprop_differs_from_bptt_but_points_the_same_way(seed):
    rng = np.random.default_rng(seed)
    core = LSTM(3, 5, rng=rng)
    x, state = rng.standard_normal((4, 6, 3)), 0.5 * rng.standard_normal((4, 10))
    R, G = rng.standard_normal((4, 6, 5)), rng.standard_normal((4, 10))
    mine, exact = _flat(_eprop_gradients(core, x, state, R, G)), _flat(_bptt_gradients(core, x, state, R, G))
    cosine = mine @ exact / (np.linalg.norm(mine) * np.linalg.norm(exact))
    assert relative_error(mine, exact) > 1e-3, "with W_h != 0 e-prop drops the path through h_(t-1)"
    assert cosine > 0.5, f"seed {seed}: cosine {cosine:.3f} between e-prop and BPTT"


def test_the_estimate_is_stored_for_update_and_a_step_moves_the_weights():
    core, x, state, R, G = _window(1)
    before = {name: param.copy() for name, param in core.parameters.items()}
    gradients = _eprop_gradients(core, x, state, R, G)
    core.update(0.1)
    for name, param in core.parameters.items():
        np.testing.assert_allclose(param, before[name] - 0.1 * gradients[name], rtol=1e-12, atol=1e-15)


# --- bad input ----------------------------------------------------------------------------------------------------


def test_a_core_that_is_not_an_lstm_is_refused():
    core = RNN(2, 3, seed=0)
    core.forward(np.zeros((2, 4, 2)))
    with pytest.raises(TypeError, match=r"written for sgrad\.recurrent\.layers\.LSTM.*got RNN.*core\.backward"):
        eprop_backward(core, np.zeros((2, 4, 3)))


def test_learning_signals_of_the_wrong_shape_are_refused():
    core, x, state, R, G = _window(0)
    core.forward(x, state)
    with pytest.raises(ValueError, match=r"must have the shape of the core's last outputs, \(3, 5, 4\).*\(3, 4, 4\)"):
        eprop_backward(core, R[:, :4])
    with pytest.raises(ValueError, match=r"L\^h_t.*\(batch, time, 4\)"):
        eprop_backward(core, R[:, :, :3])
    with pytest.raises(ValueError, match=r"ĝ = \[ĝ_h, ĝ_c\].*8"):
        eprop_backward(core, R, G[:, :4])
    with pytest.raises(ValueError, match=r"ĝ = \[ĝ_h, ĝ_c\].*shape"):
        eprop_backward(core, R, G[:2])
    assert core.weights_x_grad is None  # nothing stored


def test_eprop_needs_a_fresh_forward_pass():
    core, x, state, R, G = _window(0)
    with pytest.raises(ValueError, match=r"needs a forward pass first"):
        eprop_backward(core, R, G)
    core.forward(x, state)
    eprop_backward(core, R, G)
    core.update(0.1)
    with pytest.raises(ValueError, match=r"after update\(\).*forward\(x, state\) again"):
        eprop_backward(core, R, G)
