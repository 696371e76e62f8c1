"""TD(λ) for synthetic gradients: the λ-return targets (sgrad.recurrent.boundary_targets.LambdaReturn, the forward view) and
accumulate BP(λ)'s eligibility traces (sgrad.recurrent.eligibility_traces, the backward view, online).

The two views agree offline (the core and M held over the batch), λ = 0 is the one-window method, every gradient
is checked by central differences, and bad input is refused before anything changes.
"""

import copy

import numpy as np
import pytest
from conftest import RecordingGenerator, assert_same_state, tree_state
from test_tbptt import SumOfGradients, _sequence_task

from sgrad import LinearGenerator, MLPGenerator
from sgrad.nn.losses import mse
from sgrad.recurrent.boundary_targets import LambdaReturn, NWindows, Untruncated
from sgrad.recurrent.eligibility_traces import BPLambda, accumulate_trace, trace_gradients, window_jacobian
from sgrad.recurrent.layers import LSTM, RNN
from sgrad.recurrent.tbptt import Sequences, SyntheticGradient, tbptt_step

TIME, WINDOW = 7, 2  # four windows: steps 1-2, 3-4, 5-6 and 7


def _recorded_targets(cls, targets, *, scale=1.0, sequence_ends=True, state=None):
    """M's target at each boundary of one tbptt_step, with the core, the readout and M held where they are."""
    core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
    generator = RecordingGenerator(core.state_dim, init="blog", seed=5, update_rule=SumOfGradients())
    tbptt_step(core, readout, Sequences(x, y, mask, state=state, sequence_ends=sequence_ends), mse, 0.1, window=WINDOW,
               synthetic=SyntheticGradient(generator, synthetic_scale=scale, targets=targets))
    return generator.targets


@pytest.mark.parametrize("sequence_ends", [True, False])
@pytest.mark.parametrize("scale", [1.0, 0.5], ids=["γ = 1", "γ = 0.5"])
@pytest.mark.parametrize("lam", [0.3, 0.8])
@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_the_lambda_return_is_the_lambda_weighted_sum_of_the_n_window_targets(cls, lam, scale, sequence_ends):
    """G_k^λ = (1 - λ) Σ_{n<m} λ^{n-1} G_k^(n) + λ^{m-1} G_k^(m), with m the windows left from s_k."""
    options = dict(scale=scale, sequence_ends=sequence_ends)
    n_window = {n: _recorded_targets(cls, NWindows(n), **options) for n in (1, 2, 3)}
    ours = _recorded_targets(cls, LambdaReturn(lam), **options)
    assert len(ours) == 3  # at s_2, s_4 and s_6
    for k, target in enumerate(ours):
        left = 3 - k  # windows from this boundary to the end
        expected = sum((1 - lam) * lam ** (n - 1) * n_window[n][k] for n in range(1, left)) \
            + lam ** (left - 1) * n_window[left][k]
        np.testing.assert_allclose(target, expected, rtol=1e-12, atol=1e-14, err_msg=f"boundary {k}")


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_the_lambda_return_is_the_gradient_of_the_lambda_weighted_losses_by_central_differences(cls):
    """G_2^λ = d/ds_2 of Σ_i λ^i L_i + γ Σ_n w_n <M(s_{2+2n}), s_{2+2n}>, with M's predictions held: the loss of
    each later window weighted by λ once more per window, and each bootstrap by its n-window target's weight."""
    lam, scale = 0.6, 0.5
    target = _recorded_targets(cls, LambdaReturn(lam), scale=scale, sequence_ends=False)[0]
    core, readout, x, y, mask = _sequence_task(cls)
    generator = LinearGenerator(core.state_dim, init="blog", seed=5)
    start = core.predict(x[:, :2])[1]
    windows = [(2, 4), (4, 6), (6, 7)]
    held = [generator.predict(core.predict(x[:, :end])[1]) for _, end in windows]
    weights = [(1 - lam), (1 - lam) * lam, lam ** 2]  # of the 1-, 2- and 3-window targets

    def objective(state):
        total, s = 0.0, state
        for i, ((begin, end), prediction, weight) in enumerate(zip(windows, held, weights)):
            outputs, s = core.predict(x[:, begin:end], s)
            per_row, _ = mse(readout.predict(outputs.reshape(-1, 3)), y[:, begin:end].reshape(-1, 2), reduction="none")
            total += lam ** i * float(per_row @ mask[:, begin:end].reshape(-1)) / 3
            total += weight * scale * float(np.sum(prediction * s))
        return total

    numeric = np.zeros_like(start)
    for index in np.ndindex(start.shape):
        step = np.zeros_like(start)
        step[index] = 1e-6
        numeric[index] = (objective(start + step) - objective(start - step)) / 2e-6
    np.testing.assert_allclose(target, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_lambda_1_is_the_untruncated_target_where_the_sequence_ends(cls):
    for ours, true in zip(_recorded_targets(cls, LambdaReturn(1.0)), _recorded_targets(cls, Untruncated()),
                          strict=True):
        np.testing.assert_allclose(ours, true, rtol=1e-12, atol=1e-14)


def _train(cls, targets, *, generator_rule="adam", scale=1.0, sequence_ends=True, carried=False, core_rule="adam"):
    core, readout, x, y, mask = _sequence_task(cls, update_rule=core_rule() if callable(core_rule) else core_rule)
    generator = LinearGenerator(core.state_dim, init="blog", seed=5,
                                update_rule=generator_rule() if callable(generator_rule) else generator_rule)
    state = np.random.default_rng(1).standard_normal((3, core.state_dim)) if carried else None
    loss, last, losses = tbptt_step(core, readout, Sequences(x, y, mask, state=state, sequence_ends=sequence_ends),
                                    mse, 0.05, window=WINDOW,
                                    synthetic=SyntheticGradient(generator, generator_alpha=0.02, synthetic_scale=scale,
                                                                targets=targets))
    return core, readout, generator, (loss, last, losses)


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_lambda_0_is_the_one_window_method(cls):
    core, readout, generator, (loss, last, losses) = _train(cls, NWindows(1))
    for targets, exact in ((LambdaReturn(0.0), True), (BPLambda(0.0), False)):
        ours_core, ours_readout, ours_generator, (ours_loss, ours_last, ours_losses) = _train(cls, targets)
        assert ours_loss == loss
        np.testing.assert_array_equal(ours_last, last)
        np.testing.assert_allclose(ours_losses, losses, rtol=1e-12)
        for mine, theirs in ((ours_core, core), (ours_readout, readout), (ours_generator, generator)):
            for name, param in mine.parameters.items():
                if exact:
                    np.testing.assert_array_equal(param, theirs.parameters[name], err_msg=f"{targets} {name}")
                else:
                    np.testing.assert_allclose(param, theirs.parameters[name], rtol=1e-12, atol=1e-12,
                                               err_msg=f"{targets} {name}")


@pytest.mark.parametrize("carried", [False, True], ids=["fresh sequence", "state carried in"])
@pytest.mark.parametrize("sequence_ends", [True, False])
@pytest.mark.parametrize("scale", [1.0, 0.5], ids=["γ = 1", "γ = 0.5"])
@pytest.mark.parametrize("lam", [0.4, 1.0])
@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_the_traces_and_the_lambda_return_agree_offline(cls, lam, scale, sequence_ends, carried):
    """With the core and M held over the batch, BP(λ)'s steps add up to the λ-return regression's steps."""
    options = dict(generator_rule=SumOfGradients, core_rule=SumOfGradients, scale=scale, sequence_ends=sequence_ends,
                   carried=carried)
    forward_generator = _train(cls, LambdaReturn(lam), **options)[2]
    backward_generator = _train(cls, BPLambda(lam), **options)[2]
    for name in forward_generator.parameters:
        by_targets = forward_generator.net.update_state[name]["sum"]
        by_traces = backward_generator.net.update_state[name]["sum"]
        assert np.abs(by_targets).max() > 1e-3, name  # M learnt something to agree on
        np.testing.assert_allclose(by_traces, by_targets, rtol=0, atol=1e-10, err_msg=name)


def test_bp_lambda_learns_online_and_keeps_the_dtype():
    core, readout, x, y, mask = _sequence_task(LSTM, dtype=np.float32, update_rule="adam")
    generator = LinearGenerator(core.state_dim, init="blog", seed=5, update_rule="adam", dtype=np.float32)
    before = generator.weights.copy()
    _, state, losses = tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=WINDOW,
                                  synthetic=SyntheticGradient(generator, targets=BPLambda(0.5)))
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert state.dtype == np.float32 and generator.weights.dtype == np.float32
    assert np.abs(generator.weights - before).max() > 0


# --- the traces' parts, each against central differences ------------------------------------------------------


def test_a_linear_generators_parameter_jacobians_match_central_differences():
    rng = np.random.default_rng(0)
    generator = LinearGenerator(4, init="blog", seed=1)
    generator.bias[...] = rng.standard_normal(4)
    h = rng.standard_normal((3, 4))
    jacobians = generator.parameter_jacobians(h)
    for name, param in generator.parameters.items():
        assert jacobians[name].shape == (3, 4, *param.shape)
        for index in np.ndindex(param.shape):
            saved = param[index]
            param[index] = saved + 1e-6
            up = generator.predict(h)
            param[index] = saved - 1e-6
            down = generator.predict(h)
            param[index] = saved
            np.testing.assert_allclose(jacobians[name][(slice(None), slice(None), *index)], (up - down) / 2e-6,
                                       rtol=1e-7, atol=1e-9, err_msg=f"{name}{index}")


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_the_window_jacobian_matches_central_differences_and_changes_nothing(cls):
    core, _, x, _, _ = _sequence_task(cls)
    start = np.random.default_rng(2).standard_normal((3, core.state_dim))
    before = tree_state(core)
    jacobian = window_jacobian(core, x[:, :WINDOW], start)
    assert_same_state(core, before)
    for m in range(core.state_dim):
        step = np.zeros_like(start)
        step[:, m] = 1e-6
        column = (core.predict(x[:, :WINDOW], start + step)[1] - core.predict(x[:, :WINDOW], start - step)[1]) / 2e-6
        np.testing.assert_allclose(jacobian[:, :, m], column, rtol=1e-7, atol=1e-9, err_msg=f"∂s/∂s_0[{m}]")


def test_one_trace_step_is_the_regression_gradient_on_its_error_by_central_differences():
    """With a fresh trace, -(1/batch) Σ ε · dM/dθ is the gradient of 1/(2 batch) |M(s) - (M(s) + ε)|² held."""
    rng = np.random.default_rng(3)
    generator = LinearGenerator(4, init="blog", seed=1)
    s, error = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    target = generator.predict(s) + error
    gradients = trace_gradients(accumulate_trace(None, generator, s, None, 0.5), error)
    for name, param in generator.parameters.items():
        numeric = np.zeros_like(param)
        for index in np.ndindex(param.shape):
            saved = param[index]
            losses = []
            for shift in (1e-6, -1e-6):
                param[index] = saved + shift
                losses.append(0.5 * np.sum((generator.predict(s) - target) ** 2) / 5)
            param[index] = saved
            numeric[index] = (losses[0] - losses[1]) / 2e-6
        np.testing.assert_allclose(gradients[name], numeric, rtol=1e-6, atol=1e-9, err_msg=name)


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [LambdaReturn, BPLambda])
@pytest.mark.parametrize("lam, error, message", [
    (-0.1, ValueError, r"λ \(lam, .*\) must be a finite number in \[0, 1\], e.g. 0.5; got -0.1"),
    (1.5, ValueError, r"in \[0, 1\], e.g. 0.5; got 1.5"),
    (float("nan"), ValueError, r"got nan"),
    ("0.5", TypeError, r"λ \(lam, .*\) must be a number in \[0, 1\]"),
])
def test_a_lambda_outside_0_1_is_refused(strategy, lam, error, message):
    with pytest.raises(error, match=message):
        strategy(lam)


def test_a_trace_whose_shape_does_not_fit_the_synthesiser_is_refused():
    generator = LinearGenerator(4, seed=1)
    s = np.random.default_rng(0).standard_normal((3, 4))
    trace = accumulate_trace(None, generator, s, None, 0.5)
    jacobian = np.zeros((3, 4, 4))
    bad = {"weights": trace["weights"][:, :3], "bias": trace["bias"]}
    with pytest.raises(ValueError, match=r"the trace of 'weights' must have shape \(batch, state_dim, \*weights.shape\) "
                                         r"= \(3, 4, 4, 4\), as the synthesiser's; got \(3, 3, 4, 4\)"):
        accumulate_trace(bad, generator, s, jacobian, 0.5)
    with pytest.raises(ValueError, match=r"a trace must hold one array per parameter of the synthesiser, "
                                         r"\['bias', 'weights'\]; got \['weights'\]"):
        accumulate_trace({"weights": trace["weights"]}, generator, s, jacobian, 0.5)
    with pytest.raises(ValueError, match=r"jacobian must be J = ∂s_k/∂s_\(k-1\), shape \(3, 4, 4\); got shape \(3, 4\)"):
        accumulate_trace(trace, generator, s, np.zeros((3, 4)), 0.5)


def test_gradients_that_do_not_fit_a_linear_generator_are_refused_and_change_nothing():
    generator = LinearGenerator(4, init="blog", seed=1, update_rule="adam")
    before = tree_state(generator)
    with pytest.raises(ValueError, match=r"'bias' is \(4,\); got shape \(3,\)"):
        generator.apply_gradients({"weights": np.zeros((4, 4)), "bias": np.zeros(3)}, 0.1)
    assert_same_state(generator, before)


def test_a_synthesiser_without_the_traces_interface_is_refused_before_anything_changes():
    core, readout, x, y, mask = _sequence_task(LSTM, update_rule="adam")
    generator = MLPGenerator(core.state_dim, hidden=(5,), batchnorm=False, seed=1)
    modules = [core, readout, generator]
    before = [tree_state(module) for module in modules]
    with pytest.raises(TypeError, match=r"BP\(λ\)'s traces need a synthesiser with parameters, predict, "
                                        r"parameter_jacobians, apply_gradients \(as LinearGenerator has\); "
                                        r"MLPGenerator lacks parameter_jacobians, apply_gradients"):
        tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=WINDOW,
                   synthetic=SyntheticGradient(generator, targets=BPLambda(0.5)))
    for module, state in zip(modules, before):
        assert_same_state(module, state)


@pytest.mark.parametrize("scale", [0.0, 1.5])
def test_a_gamma_outside_0_1_is_refused_with_the_traces_too(scale):
    core, readout, x, y, mask = _sequence_task(RNN)
    generator = LinearGenerator(core.state_dim, seed=1)
    before = copy.deepcopy(generator.weights)
    with pytest.raises(ValueError, match=r"synthetic_scale must be a finite number in \(0, 1\]"):
        tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=WINDOW,
                   synthetic=SyntheticGradient(generator, synthetic_scale=scale, targets=BPLambda(0.5)))
    np.testing.assert_array_equal(generator.weights, before)
