"""Update rules: each step against its formula, convergence, the factory, and state kept by the owner.

Bad arguments shared by the whole public API (unknown rule names, beta1 of one, eps of zero...) are specified
in test_bad_input.py.
"""

import numpy as np
import pytest

from sgrad import Layer
from sgrad.nn.optimizers import SGD, Adam, Momentum, UpdateRule, get_update_rule

START = np.array([0.5, -1.0, 2.0])
GRADS = [np.array([0.2, -3.0, 1.0]), np.array([-0.4, 1.0, 2.0])]
LR = 0.1


def _two_steps(rule):
    param = START.copy()
    state = rule.init_state(param)
    trajectory = []
    for grad in GRADS:
        rule.step(param, grad, state, LR)
        trajectory.append(param.copy())
    return trajectory


def test_sgd_two_steps_by_hand():
    first, second = _two_steps(SGD())
    np.testing.assert_array_equal(first, START - LR * GRADS[0])
    np.testing.assert_array_equal(second, START - LR * GRADS[0] - LR * GRADS[1])


def test_momentum_two_steps_by_hand():
    first, second = _two_steps(Momentum(momentum=0.9))
    v1 = -LR * GRADS[0]
    v2 = 0.9 * v1 - LR * GRADS[1]
    np.testing.assert_allclose(first, START + v1, rtol=1e-15)
    np.testing.assert_allclose(second, START + v1 + v2, rtol=1e-15)


def test_adam_first_step_moves_each_coordinate_by_lr_times_sign_of_gradient():
    first, _ = _two_steps(Adam())
    np.testing.assert_allclose(first - START, -LR * np.sign(GRADS[0]), rtol=1e-6)


def test_adam_two_steps_match_the_bias_corrected_formula():
    beta1, beta2, eps = 0.8, 0.99, 1e-3
    first, second = _two_steps(Adam(beta1=beta1, beta2=beta2, eps=eps))
    m = v = np.zeros(3)
    expected = START.copy()
    for t, grad in enumerate(GRADS, start=1):
        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad**2
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        expected = expected - LR * m_hat / (np.sqrt(v_hat) + eps)
        np.testing.assert_allclose([first, second][t - 1], expected, rtol=1e-14)


@pytest.mark.parametrize("rule, lr", [(SGD(), 0.3), (Momentum(0.9), 0.05), (Adam(), 0.05)],
                         ids=["sgd", "momentum", "adam"])
def test_rule_minimises_a_convex_quadratic(rule, lr):
    # f(p) = 1/2 (p - c)^T A (p - c), A symmetric positive definite (eigenvalues 0.7 to 3.6)
    A = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    c = np.array([1.0, -2.0, 0.5])
    param = np.zeros(3)
    state = rule.init_state(param)
    for _ in range(1000):
        rule.step(param, A @ (param - c), state, lr)
    assert np.max(np.abs(param - c)) < 1e-6


@pytest.mark.parametrize("name, cls", [("sgd", SGD), ("momentum", Momentum), ("adam", Adam)])
def test_get_update_rule_accepts_names(name, cls):
    assert type(get_update_rule(name)) is cls


def test_get_update_rule_returns_an_instance_unchanged():
    rule = Adam(beta1=0.5)
    assert get_update_rule(rule) is rule


def test_get_update_rule_of_none_is_sgd():
    assert type(get_update_rule(None)) is SGD


@pytest.mark.parametrize("bad", ["SGD", Adam])
def test_get_update_rule_rejects_anything_else(bad):
    with pytest.raises(ValueError, match="unknown update rule .*; pass one of 'sgd', 'momentum', 'adam'"):
        get_update_rule(bad)


@pytest.mark.parametrize("make, error, message", [
    (lambda: Momentum(momentum=1.0), ValueError, r"momentum must be a finite number in \[0, 1\), e.g. 0.9; got 1.0"),
    (lambda: Momentum(momentum=-0.1), ValueError, r"momentum must be a finite number in \[0, 1\), e.g. 0.9; got -0.1"),
    (lambda: Momentum(momentum="0.9"), TypeError, r"momentum must be a number in \[0, 1\), e.g. 0.9; got '0.9' \(str\)"),
    (lambda: Adam(beta2=1.5), ValueError, r"beta2 must be a finite number in \[0, 1\), e.g. 0.999; got 1.5"),
    (lambda: Adam(eps=float("nan")), ValueError, r"eps must be a finite number > 0, e.g. 1e-8; got nan"),
    (lambda: Adam(eps=float("inf")), ValueError, r"eps must be a finite number > 0, e.g. 1e-8; got inf"),
    (lambda: Adam(eps="1"), TypeError, r"eps must be a number > 0, e.g. 1e-8; got '1' \(str\)"),
], ids=["momentum_one", "momentum_negative", "momentum_string", "beta2_above_one", "eps_nan", "eps_inf",
        "eps_string"])
def test_bad_hyperparameters_raise(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("rule", [SGD(), Momentum(), Adam()], ids=["sgd", "momentum", "adam"])
@pytest.mark.parametrize("grad", [np.ones(2), np.ones((2, 3)), [[1.0, 1.0]] * 3], ids=["row", "transposed", "list"])
def test_a_gradient_of_another_shape_is_refused_not_broadcast(rule, grad):
    param = np.zeros((3, 2))
    state = rule.init_state(param)
    with pytest.raises(ValueError, match=r"grad must be an array of the parameter's shape \(3, 2\); got"):
        rule.step(param, grad, state, 0.1)
    np.testing.assert_array_equal(param, 0.0)


def test_base_rule_step_is_not_implemented():
    with pytest.raises(NotImplementedError):
        UpdateRule().step(np.zeros(2), np.ones(2), {}, 0.1)


def test_one_rule_shared_by_two_layers_keeps_their_states_separate():
    shared = Adam()
    a = Layer(3, 2, "identity", update_rule=shared, seed=0)
    b = Layer(3, 2, "identity", update_rule=shared, seed=1)
    alone = Layer(3, 2, "identity", update_rule=Adam(), seed=1)
    x = np.random.default_rng(2).standard_normal((4, 3))
    delta = np.random.default_rng(3).standard_normal((4, 2))

    for _ in range(3):  # a's steps must not leak into b's moments
        a.forward(x)
        a.backward(-delta)
        a.update(0.1)
    for layer in (b, alone):
        layer.forward(x)
        layer.backward(delta)
        layer.update(0.1)

    assert a.update_rule is b.update_rule
    assert int(a.update_state["weights"]["t"]) == 3 and int(b.update_state["weights"]["t"]) == 1
    np.testing.assert_array_equal(b.weights, alone.weights)
    np.testing.assert_array_equal(b.bias, alone.bias)
