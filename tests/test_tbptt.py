"""Truncated BPTT with DNI at the window boundaries (sgrad.recurrent.tbptt) and the boundary generator's targets
(sgrad.recurrent.boundary_targets): full BPTT from an oracle generator, the step as the modules' public calls, each target
against a hand computation, and bad input refused before anything changes."""

import copy

import numpy as np
import pytest
from conftest import RecordingGenerator, assert_same_state, tree_state

import sgrad
from sgrad import BatchNorm, Layer, LinearGenerator, Sequential, SyntheticLossGenerator, UpdateRule
from sgrad.nn.losses import mse
from sgrad.recurrent.boundary_targets import NWindows, Untruncated
from sgrad.recurrent.eprop import eprop_backward
from sgrad.recurrent.layers import LSTM, RNN
from sgrad.recurrent.tbptt import EProp, Sequences, SyntheticGradient, tbptt_step

class SumOfGradients(UpdateRule):
    """An update rule that leaves each parameter where it is and adds up the gradients it is handed, in
    ``state['sum']``: the windows of one tbptt_step then all run with the same parameters, so their gradients
    add up to one gradient of the whole sequence's loss."""

    def init_state(self, param):
        return {"sum": np.zeros_like(param)}

    def step(self, param, grad, state, lr):
        state["sum"] += grad


def _sequence_task(cls, *, seed=0, batch=3, time=7, update_rule=None, dtype=np.float64):
    """A core with random parameters, a linear readout, and x, y and a mask of which steps count."""
    rng = np.random.default_rng(seed)
    core = cls(2, 3, update_rule=update_rule, rng=rng, dtype=dtype)
    for param in core.parameters.values():
        param[...] = 0.6 * rng.standard_normal(param.shape)  # a strong recurrence: the future's gradient matters
    readout = Layer(3, 2, "identity", update_rule=update_rule, rng=rng, dtype=dtype)
    x = rng.standard_normal((batch, time, 2)).astype(dtype)
    y = rng.standard_normal((batch, time, 2)).astype(dtype)
    mask = (rng.random((batch, time)) < 0.7).astype(dtype)
    return core, readout, x, y, mask


def _full_bptt(core, readout, x, y, mask, state=None):
    """``(core gradients, readout gradients, dL/d(state))`` of L = 1/batch * sum(mask * mse per step) over all of x,
    by one forward and backward of copies of the modules (so nothing of theirs changes)."""
    core, readout = copy.deepcopy((core, readout))
    batch, time = mask.shape
    outputs, _ = core.forward(x, state)
    _, d = mse(readout.forward(outputs.reshape(batch * time, -1)), y.reshape(batch * time, -1), reduction="none")
    d_outputs = readout.backward(d * mask.reshape(-1, 1) / batch).reshape(outputs.shape)
    _, d_state = core.backward(d_outputs, None)
    return core.gradients, readout.gradients, d_state


class ExactFutureGradient:
    """A generator whose ĝ at a boundary state s_t is the true dL/ds_t of every step after t (full BPTT of the rest
    of the sequence, at the parameters it was built with); it records the targets it is given."""

    condition_dim = 0

    def __init__(self, core, readout, x, y, mask):
        self.task = core, readout, x, y, mask
        self.output_dim = core.state_dim
        batch, time = mask.shape
        self.states = [core.initial_state(batch)] + [core.predict(x[:, :t])[1] for t in range(1, time + 1)]
        self.targets = []  # (t, target)

    def _step_of(self, state):
        distances = [np.abs(state - known).max() for known in self.states]
        assert min(distances) < 1e-12, "ĝ was asked at a state the sequence never reaches"
        return int(np.argmin(distances))

    def predict(self, state, condition=None):
        core, readout, x, y, mask = self.task
        t = self._step_of(state)
        if t == mask.shape[1]:
            return np.zeros_like(state)
        return _full_bptt(core, readout, x[:, t:], y[:, t:], mask[:, t:], state)[2]

    def forward(self, state, condition=None):
        self.last_step = self._step_of(state)
        return self.predict(state)

    def update(self, target, alpha):
        self.targets.append((self.last_step, target.copy()))
        return 0.0


@pytest.mark.parametrize("window", [1, 2, 3])
@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_truncated_bptt_with_a_generator_of_the_exact_future_gradient_gives_full_bptt_gradients(cls, window):
    core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
    full_core, full_readout, _ = _full_bptt(core, readout, x, y, mask)
    oracle = ExactFutureGradient(core, readout, x, y, mask)
    tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=window, synthetic=SyntheticGradient(oracle))
    for module, full in ((core, full_core), (readout, full_readout)):
        for name in module.parameters:
            np.testing.assert_allclose(module.update_state[name]["sum"], full[name], rtol=0, atol=1e-10,
                                       err_msg=f"{module!r} {name}: the windows' sum against full BPTT")
    # With exact ĝ, each bootstrapped target (the gradient at a window's start) is the exact gradient there too.
    assert [t for t, _ in oracle.targets] == list(range(window, 7, window))
    for t, target in oracle.targets:
        np.testing.assert_allclose(target, oracle.predict(oracle.states[t]), rtol=0, atol=1e-10, err_msg=f"step {t}")


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_truncated_bptt_without_a_generator_stops_the_gradient_at_each_boundary(cls):
    core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
    tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=3)
    expected, state = {name: 0.0 for name in core.parameters}, None
    for begin in (0, 3, 6):  # each window by itself, with nothing coming back from after it
        gradients, _, _ = _full_bptt(core, readout, x[:, begin:begin + 3], y[:, begin:begin + 3],
                                     mask[:, begin:begin + 3], state)
        expected = {name: expected[name] + gradients[name] for name in expected}
        state = core.predict(x[:, begin:begin + 3], state)[1]
    full, _, _ = _full_bptt(core, readout, x, y, mask)
    for name in core.parameters:
        np.testing.assert_allclose(core.update_state[name]["sum"], expected[name], rtol=1e-13, atol=1e-15, err_msg=name)
    assert np.abs(core.update_state["weights_h"]["sum"] - full["weights_h"]).max() > 1e-3  # truncation lost something


@pytest.mark.parametrize("with_generator", [False, True])
def test_eprop_for_the_core_is_truncated_bptt_where_the_lstm_has_no_recurrent_weights(with_generator):
    sums = {}
    for core_gradient in ("bptt", "eprop"):
        core, readout, x, y, mask = _sequence_task(LSTM, update_rule=SumOfGradients())
        core.weights_h[...] = 0.0  # no path from h_(t-1) into later gates: e-prop's traces are then exact
        synthetic = SyntheticGradient(LinearGenerator(core.state_dim, seed=1)) if with_generator else None
        tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=3, synthetic=synthetic,
                   core_gradient=core_gradient)
        sums[core_gradient] = {name: core.update_state[name]["sum"] for name in core.parameters}
    for name, total in sums["bptt"].items():
        np.testing.assert_allclose(sums["eprop"][name], total, rtol=1e-10, atol=1e-13, err_msg=name)


def test_eprop_for_the_core_sums_each_windows_estimate_and_differs_from_bptt_with_recurrent_weights():
    core, readout, x, y, mask = _sequence_task(LSTM, update_rule=SumOfGradients())
    expected, state = {name: 0.0 for name in core.parameters}, None
    for begin in (0, 3, 6):
        copy_core, copy_readout = copy.deepcopy((core, readout))
        outputs, last_state = copy_core.forward(x[:, begin:begin + 3], state)
        _, d = mse(copy_readout.forward(outputs.reshape(-1, 3)), y[:, begin:begin + 3].reshape(-1, 2),
                   reduction="none")
        d_outputs = copy_readout.backward(d * mask[:, begin:begin + 3].reshape(-1, 1) / 3).reshape(outputs.shape)
        eprop_backward(copy_core, d_outputs)
        expected = {name: expected[name] + copy_core.gradients[name] for name in expected}
        state = last_state
    bptt_core = copy.deepcopy(core)
    tbptt_step(bptt_core, copy.deepcopy(readout), Sequences(x, y, mask), mse, 0.1, window=3)
    tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=3, core_gradient="eprop")
    for name in core.parameters:
        np.testing.assert_allclose(core.update_state[name]["sum"], expected[name], rtol=1e-12, atol=1e-15,
                                   err_msg=name)
    assert np.abs(core.update_state["weights_h"]["sum"] - bptt_core.update_state["weights_h"]["sum"]).max() > 1e-3


def test_eprop_for_the_core_trains_a_few_steps_with_a_generator():
    core, readout, x, y, mask = _sequence_task(LSTM, update_rule="adam")
    synthetic = SyntheticGradient(LinearGenerator(core.state_dim, seed=1))
    before = core.weights_h.copy()
    losses = [tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=3, synthetic=synthetic,
                         core_gradient="eprop")[0] for _ in range(20)]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert np.abs(core.weights_h - before).max() > 1e-3


def test_the_default_core_gradient_is_bptt_bit_for_bit():
    runs = []
    for options in ({}, {"core_gradient": "bptt"}):
        core, readout, x, y, mask = _sequence_task(LSTM)
        generator = LinearGenerator(core.state_dim, seed=1)
        loss, state, generator_losses = tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=2,
                                                   synthetic=SyntheticGradient(generator), **options)
        runs.append((loss, state, generator_losses, (core, readout, generator)))
    (loss, state, generator_losses, modules), (loss_bptt, state_bptt, generator_losses_bptt, modules_bptt) = runs
    assert loss == loss_bptt and generator_losses == generator_losses_bptt
    np.testing.assert_array_equal(state, state_bptt)
    for module, module_bptt in zip(modules, modules_bptt):
        assert_same_state(module, tree_state(module_bptt))


def test_the_core_gradient_may_be_given_as_its_strategy_bit_for_bit():
    runs = []
    for core_gradient in ("eprop", EProp()):
        core, readout, x, y, mask = _sequence_task(LSTM, update_rule="adam")
        generator = LinearGenerator(core.state_dim, seed=1)
        result = tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=2,
                            synthetic=SyntheticGradient(generator), core_gradient=core_gradient)
        runs.append((result, (core, readout, generator)))
    ((loss, state, generator_losses), modules), ((loss_object, state_object, losses_object), modules_object) = runs
    assert loss == loss_object and generator_losses == losses_object
    np.testing.assert_array_equal(state, state_object)
    for module, module_object in zip(modules, modules_object):
        assert_same_state(module, tree_state(module_object))


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_the_sequence_loss_does_not_depend_on_where_the_windows_are_cut(window):
    core, readout, x, y, mask = _sequence_task(LSTM, update_rule=SumOfGradients())
    outputs, _ = core.predict(x)
    prediction = readout.predict(outputs.reshape(21, 3)).reshape(3, 7, 2)
    expected = float(np.sum(mask * 0.5 * np.sum((prediction - y) ** 2, axis=2))) / 3
    loss, _, _ = tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=window)
    assert loss == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("scale", [1.0, 0.25], ids=["ĝ as it is", "ĝ weighted by 0.25"])
@pytest.mark.parametrize("sequence_ends", [True, False])
@pytest.mark.parametrize("carried", [False, True], ids=["fresh sequence", "state carried in"])
@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_tbptt_step_is_the_modules_public_calls_with_bootstrapped_generator_targets(cls, carried, sequence_ends,
                                                                                    scale):
    def build():
        core, readout, x, y, mask = _sequence_task(cls, update_rule="adam")
        return core, readout, RecordingGenerator(core.state_dim, init="blog", seed=5), x, y, mask

    core, readout, generator, x, y, mask = build()
    state = np.random.default_rng(1).standard_normal((3, core.state_dim)) if carried else None
    synthetic = SyntheticGradient(generator, generator_alpha=0.02,
                                  **({} if scale == 1.0 else {"synthetic_scale": scale}))
    loss, last_state, generator_losses = tbptt_step(
        core, readout, Sequences(x, y, mask, state=state, sequence_ends=sequence_ends), mse, 0.05, window=3,
        synthetic=synthetic)

    hand_core, hand_readout, hand_generator, _, _, _ = build()
    s = hand_core.initial_state(3) if state is None else state
    expected_loss, expected_generator_losses = 0.0, []
    for begin, end in ((0, 3), (3, 6), (6, 7)):
        outputs, s_next = hand_core.forward(x[:, begin:end], s)
        per_row, d = mse(hand_readout.forward(outputs.reshape(-1, 3)), y[:, begin:end].reshape(-1, 2),
                         reduction="none")
        row_weights = mask[:, begin:end].reshape(-1) / 3
        d_outputs = hand_readout.backward(d * row_weights[:, None]).reshape(outputs.shape)
        g_hat = None if end == 7 and sequence_ends else scale * hand_generator.predict(s_next)
        _, delta = hand_core.backward(d_outputs, g_hat, input_delta=False)
        hand_core.update(0.05)
        hand_readout.update(0.05)
        if begin > 0 or carried:  # the target of the ĝ used at the boundary where this window starts
            hand_generator.forward(s)
            expected_generator_losses.append(hand_generator.update(delta, 0.02))
        expected_loss += float(per_row @ row_weights)
        s = s_next

    assert loss == expected_loss and generator_losses == expected_generator_losses
    assert len(generator_losses) == (3 if carried else 2)
    np.testing.assert_array_equal(last_state, s)
    for ours, by_hand in ((core, hand_core), (readout, hand_readout), (generator, hand_generator)):
        for name, param in ours.parameters.items():
            np.testing.assert_array_equal(param, by_hand.parameters[name], err_msg=f"{ours!r} {name}")
    for target, expected_target in zip(generator.targets, hand_generator.targets, strict=True):
        np.testing.assert_array_equal(target, expected_target)


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_true_targets_regress_the_generator_onto_the_untruncated_gradient_at_each_boundary(cls):
    core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
    generator = RecordingGenerator(core.state_dim, init="blog", seed=5)
    tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=2,
               synthetic=SyntheticGradient(generator, targets=Untruncated()))
    assert len(generator.targets) == 3
    for t, target in zip((2, 4, 6), generator.targets):
        state = core.predict(x[:, :t])[1]
        exact = _full_bptt(core, readout, x[:, t:], y[:, t:], mask[:, t:], state)[2]
        np.testing.assert_allclose(target, exact, rtol=1e-12, atol=1e-14, err_msg=f"step {t}")


@pytest.mark.parametrize("sequence_ends", [True, False])
@pytest.mark.parametrize("scale", [1.0, 0.5], ids=["ĝ as it is", "ĝ weighted by 0.5"])
@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_n_step_targets_backpropagate_n_windows_of_loss_then_the_generators_own_prediction(cls, scale,
                                                                                        sequence_ends):
    """NWindows(2), T = 2 over 7 steps: M's target at s_2 is the loss of steps 3 to 6 and λ M(s_6)
    backpropagated to s_2; at s_4 and s_6 the two windows reach the sequence's end, so M(s_7) only if it goes on."""
    core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
    generator = RecordingGenerator(core.state_dim, init="blog", seed=5, update_rule=SumOfGradients())
    tbptt_step(core, readout, Sequences(x, y, mask, sequence_ends=sequence_ends), mse, 0.1, window=2,
               synthetic=SyntheticGradient(generator, synthetic_scale=scale, targets=NWindows(2)))
    assert len(generator.targets) == 3
    for t, target in zip((2, 4, 6), generator.targets):
        far = min(t + 4, 7)
        hand_core, hand_readout = copy.deepcopy((core, readout))
        outputs, last_state = hand_core.forward(x[:, t:far], core.predict(x[:, :t])[1])
        _, d = mse(hand_readout.forward(outputs.reshape(-1, 3)), y[:, t:far].reshape(-1, 2), reduction="none")
        d_outputs = hand_readout.backward(d * mask[:, t:far].reshape(-1, 1) / 3).reshape(outputs.shape)
        g_far = None if far == 7 and sequence_ends else scale * generator.predict(last_state)
        expected = hand_core.backward(d_outputs, g_far)[1]
        np.testing.assert_allclose(target, expected, rtol=1e-12, atol=1e-14, err_msg=f"step {t}")
    if not sequence_ends:  # with 1 window, the target at s_2 would take M's ĝ at s_4: 2 windows differ from it
        one_window = RecordingGenerator(core.state_dim, init="blog", seed=5, update_rule=SumOfGradients())
        tbptt_step(core, readout, Sequences(x, y, mask, sequence_ends=False), mse, 0.1, window=2,
                   synthetic=SyntheticGradient(one_window, synthetic_scale=scale))
        assert np.abs(one_window.targets[0] - generator.targets[0]).max() > 1e-3


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_n_step_targets_that_reach_the_sequences_end_are_the_true_targets(cls):
    targets = {}
    for name, options in {"true": {"targets": Untruncated()}, "4 windows": {"targets": NWindows(4)}}.items():
        core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
        generator = RecordingGenerator(core.state_dim, init="blog", seed=5)
        tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.1, window=2,
                   synthetic=SyntheticGradient(generator, **options))
        targets[name] = generator.targets
    for true, n_step in zip(targets["true"], targets["4 windows"], strict=True):
        np.testing.assert_allclose(n_step, true, rtol=1e-12, atol=1e-15)


def test_tbptt_step_with_the_same_seed_gives_the_same_numbers():
    def run():
        core, readout, x, y, mask = _sequence_task(LSTM, seed=3, update_rule="adam")
        generator = sgrad.MLPGenerator(core.state_dim, hidden=(5,), batchnorm=False, seed=4)
        result = tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=2,
                            synthetic=SyntheticGradient(generator))
        return result, core.weights_h.copy()

    (loss, state, generator_losses), weights = run()
    (loss_again, state_again, generator_losses_again), weights_again = run()
    assert loss == loss_again and generator_losses == generator_losses_again
    np.testing.assert_array_equal(state, state_again)
    np.testing.assert_array_equal(weights, weights_again)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tbptt_step_keeps_the_dtype(dtype):
    core, readout, x, y, mask = _sequence_task(LSTM, dtype=dtype)
    generator = LinearGenerator(core.state_dim, init="blog", seed=1, dtype=dtype)
    _, state, _ = tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=3,
                             synthetic=SyntheticGradient(generator))
    assert state.dtype == dtype
    for module in (core, readout, generator):
        assert all(param.dtype == dtype for param in module.parameters.values()), repr(module)


def _tbptt_arguments(dtype=np.float64):
    core, readout, x, y, mask = _sequence_task(LSTM, dtype=dtype)
    generator = LinearGenerator(core.state_dim, init="blog", seed=1, dtype=dtype)
    tbptt_step(core, readout, Sequences(x, y, mask), mse, 0.01, window=3,
               synthetic=SyntheticGradient(generator))  # every cache filled
    return dict(core=core, readout=readout, x=x, y=y, loss_fn=mse, alpha=0.01, window=3, generator=generator,
                mask=mask)


def _tbptt_step_of(arguments):
    """tbptt_step on the arguments of BAD_TBPTT, named as Sequences' and SyntheticGradient's fields: the data
    grouped as Sequences, M and its settings as a SyntheticGradient (None for a generator of None alone)."""
    rest = dict(arguments)
    sequences = Sequences(**{name: rest.pop(name) for name in ("x", "y", "mask", "state", "sequence_ends")
                             if name in rest})
    options = {name: rest.pop(name) for name in ("generator", "generator_alpha", "synthetic_scale", "targets")
               if name in rest}
    synthetic = None if options == {"generator": None} else SyntheticGradient(**options)
    return tbptt_step(sequences=sequences, synthetic=synthetic, **rest)


BAD_TBPTT = {
    "window 0": ({"window": 0}, ValueError, r"window \(T, the steps between boundaries\) must be at least 1; got 0"),
    "window of 2.5 steps": ({"window": 2.5}, TypeError, r"window .* must be an integer"),
    "window longer than the sequence": ({"window": 8}, ValueError, r"at most the sequence's length, 7 steps; got 8"),
    "x of one sequence, 2-D": (lambda a: {"x": a["x"][0]}, ValueError, r"x must be a batch of sequences"),
    "x of the wrong width": (lambda a: {"x": a["x"][..., :1]}, ValueError, r"\(2 = the core's input_dim\)"),
    "state of h alone": (lambda a: {"state": np.zeros((3, 3))}, ValueError,
                         r"state must have shape \(batch, 6\) \(6 = the core's state_dim\)"),
    "state for other sequences": (lambda a: {"state": np.zeros((2, 6))}, ValueError, r"one row per sequence"),
    "y of other steps": (lambda a: {"y": a["y"][:, :5]}, ValueError, r"y must have one target per sequence and step"),
    "y with NaN": (lambda a: {"y": np.where(a["y"] > 1, np.nan, a["y"])}, ValueError, r"NaN"),
    "mask of other steps": (lambda a: {"mask": a["mask"][:, :5]}, ValueError, r"mask must be floats or booleans"),
    "negative mask": (lambda a: {"mask": -a["mask"]}, ValueError, r"mask must hold finite weights >= 0"),
    "generator of h alone": (lambda a: {"generator": LinearGenerator(3)}, ValueError,
                             r"output_dim must be the core's state_dim, 6 \(LSTM\); got 3"),
    "conditioned generator": (lambda a: {"generator": LinearGenerator(6, 2)}, ValueError, r"condition_dim=0"),
    "synthetic-loss generator": (lambda a: {"generator": SyntheticLossGenerator(6, hidden=())}, TypeError,
                                 r"must predict a gradient"),
    "readout of another width": (lambda a: {"readout": Layer(4, 2, "identity")}, ValueError,
                                 r"the readout must take the core's hidden_dim, 3"),
    "learning rate 0": ({"alpha": 0}, ValueError, r"alpha \(a learning rate\)"),
    "a batch-norm readout with one row in the last window": (
        lambda a: {"x": a["x"][:1], "y": a["y"][:1], "mask": a["mask"][:1],
                   "readout": Sequential([Layer(3, 2, "identity", seed=0), BatchNorm(2)])}, ValueError,
        r"the readout's input in the last window \(batch 1 x 1 steps\) has 1 row, but batch norm in training mode"),
    "true targets without a generator": ({"generator": None, "targets": Untruncated()}, ValueError,
                                         r"none was given"),
    "n-step targets without a generator": ({"generator": None, "targets": NWindows(2)}, ValueError,
                                           r"targets=NWindows\(2\) sets a generator's targets, but none was given"),
    "targets of another kind": ({"targets": "bootstrap"}, TypeError,
                                r"targets must be one of sgrad.recurrent.boundary_targets' strategies, "
                                r"such as NWindows\(2\); got str"),
    "synthetic scale 0": ({"synthetic_scale": 0}, ValueError,
                          r"synthetic_scale must be a finite number in \(0, 1\], e.g. 0.1; got 0.0"),
    "synthetic scale above 1": ({"synthetic_scale": 1.5}, ValueError, r"synthetic_scale .* got 1.5"),
    "synthetic scale NaN": ({"synthetic_scale": float("nan")}, ValueError, r"synthetic_scale .* got nan"),
    "synthetic scale as text": ({"synthetic_scale": "0.1"}, TypeError, r"synthetic_scale must be a number"),
    "unknown core gradient": ({"core_gradient": "rtrl"}, ValueError,
                              r"unknown core_gradient 'rtrl'; choose one of 'bptt', 'eprop'"),
    "e-prop for an RNN core": (lambda a: {"core": RNN(2, 3, seed=0), "generator": None, "core_gradient": "eprop"},
                               TypeError, r"core_gradient='eprop' needs an sgrad.recurrent.layers.LSTM core.*got RNN"),
}


@pytest.mark.parametrize("case", BAD_TBPTT, ids=str)
def test_tbptt_step_refuses_bad_input_in_the_users_words_and_changes_nothing(case):
    change, error, message = BAD_TBPTT[case]
    arguments = _tbptt_arguments()
    modules = [arguments["core"], arguments["readout"], arguments["generator"]]
    before = [tree_state(module) for module in modules]
    with np.errstate(invalid="ignore"):
        arguments.update(change(arguments) if callable(change) else change)
    with pytest.raises(error, match=message):
        _tbptt_step_of(arguments)
    for module, state in zip(modules, before):
        assert_same_state(module, state)


def test_tbptt_step_refuses_a_generator_whose_gradient_would_change_the_cores_dtype():
    arguments = _tbptt_arguments(np.float32)
    before = tree_state(arguments["core"])
    arguments["generator"] = LinearGenerator(6, init="blog", seed=1)  # float64: its ĝ would make float32 gradients 64
    with pytest.raises(TypeError, match=r"must have the dtype of the core's state, float32; got float64"):
        _tbptt_step_of(arguments)
    assert_same_state(arguments["core"], before)


def test_tbptt_step_refuses_data_and_settings_that_are_not_grouped_before_anything_changes():
    arguments = _tbptt_arguments()
    core, readout, x, y, generator = (arguments[name] for name in ("core", "readout", "x", "y", "generator"))
    modules = [core, readout, generator]
    before = [tree_state(module) for module in modules]
    with pytest.raises(TypeError, match=r"sequences must be a Sequences\(x, y, mask=.*got ndarray. Wrap the data: "
                                        r"tbptt_step\(core, readout, Sequences\(x, y\), ...\)"):
        tbptt_step(core, readout, x, mse, 0.01, window=3)
    with pytest.raises(TypeError, match=r"synthetic must be a SyntheticGradient\(generator, ...\) .* or None .*"
                                        r"got LinearGenerator"):
        tbptt_step(core, readout, Sequences(x, y), mse, 0.01, window=3, synthetic=generator)
    for module, state in zip(modules, before):
        assert_same_state(module, state)


def test_a_synthetic_gradient_without_a_generator_is_refused_when_built():
    with pytest.raises(ValueError, match=r"a SyntheticGradient needs its generator M, such as "
                                         r"LinearGenerator\(core.state_dim\); got None. For truncated BPTT without "
                                         r"one, pass synthetic=None"):
        SyntheticGradient(None)
    with pytest.raises(ValueError, match=r"pass SyntheticGradient\(generator, targets=NWindows\(3\)\)"):
        SyntheticGradient(None, targets=NWindows(3))


def test_sequences_refuse_a_carried_state_that_is_not_a_batch_when_built():
    x, y = np.zeros((3, 7, 2)), np.zeros((3, 7, 2))
    with pytest.raises(ValueError, match=r"state must have shape \(batch, features\); got shape \(6,\)"):
        Sequences(x, y, state=np.zeros(6))
    with pytest.raises(TypeError, match=r"sequence_ends must be True or False"):
        Sequences(x, y, sequence_ends="no")


@pytest.mark.parametrize("n, error, message", [
    (0, ValueError, r"n \(the windows an n-window target spans\) must be at least 1; got 0"),
    ("2", TypeError, r"n \(the windows an n-window target spans\) must be an integer"),
])
def test_an_n_window_target_refuses_a_bad_n(n, error, message):
    with pytest.raises(error, match=message):
        NWindows(n)
