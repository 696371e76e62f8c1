"""The training steps (sgrad.steps): true gradients, targets bootstrapped or given, oracle generators that make DNI
backprop, and each step as the layers' public calls; for recurrent layers, truncated BPTT and DNI at its boundaries."""

import copy

import numpy as np
import pytest
from conftest import RecordingGenerator, assert_same_state, random_batch, tree_state

import sgrad
from data_gen import generate_split
from sgrad.experiments.binary_addition import TrainConfig, build_network
from sgrad.losses import bce_with_logits, mse, softmax_cross_entropy
from sgrad import DNI, DNIBlock, Layer, LinearGenerator, SyntheticLossGenerator, UpdateRule, dense_block
from sgrad.kernels import dense_backward, dense_forward
from sgrad.recurrent import LSTM, RNN
from sgrad.steps import backprop_step, dni_step, synthetic_loss_step, tbptt_step, true_gradients

SMALL = TrainConfig(batch_size=16, alpha=0.01, generator_alpha=0.01, hidden=(32, 32), seed=0)


@pytest.fixture(scope="module")
def batch():
    x, y, _, _ = generate_split(5, 200, 50, seed=0)
    return x[:16], y[:16]


def test_true_gradients_match_the_layers_own_backprop(batch):
    x, y = batch
    layers = build_network("backprop", 10, 5, SMALL)
    h = x
    for layer in layers:
        h = layer.forward(h)
    _, g = bce_with_logits(h, y)
    expected = []
    for layer in reversed(layers[1:]):
        g = layer.backward(g)
        expected.append(g)
    for ours, reference in zip(true_gradients(layers, x, y, bce_with_logits), expected[::-1]):
        np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=1e-15)


def test_dni_step_trains_each_generator_on_the_targets_given(batch):
    x, y = batch
    layers = build_network("dni", 10, 5, SMALL)
    for layer in layers[:-1]:
        layer.generator.weights[:] = np.random.default_rng(0).standard_normal(layer.generator.weights.shape)
    expected = true_gradients(layers, x, y, bce_with_logits)
    seen = []
    for layer in layers[:-1]:
        update = layer.generator.update
        layer.generator.update = lambda target, alpha, update=update: seen.append(target) or update(target, alpha)
    dni_step(layers, x, y, bce_with_logits, 0.01, targets=expected)
    for target, g in zip(seen, expected):
        np.testing.assert_array_equal(target, g)


def test_backprop_step_explains_a_stack_whose_widths_do_not_fit():
    rng = np.random.default_rng(0)
    stack = [sgrad.Layer(4, 6, "tanh", seed=0), sgrad.Layer(5, 2, "identity", seed=1)]
    with pytest.raises(ValueError, match=r"input must have shape \(batch, 5\) \(5 = this layer's input_dim\)"):
        backprop_step(stack, rng.random((8, 4)), rng.random((8, 2)), mse, 0.1)


def test_backprop_step_refuses_one_row_for_batch_norm_above_the_bottom_layer():
    rng = np.random.default_rng(0)
    stack = [sgrad.Layer(4, 6, "tanh", seed=0), sgrad.dense_block(6, 5, seed=1), sgrad.Layer(5, 2, "identity", seed=2)]
    weights = stack[0].weights.copy()
    with pytest.raises(ValueError, match="needs a batch of at least 2 rows"):
        backprop_step(stack, rng.random((1, 4)), rng.random((1, 2)), mse, 0.1)
    np.testing.assert_array_equal(stack[0].weights, weights)


def test_backprop_step_equals_each_layers_public_forward_backward_and_update():
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        return [sgrad.dense_block(4, 6, seed=0), sgrad.dense_block(6, 5, batchnorm=False, seed=1),
                sgrad.Layer(5, 3, "identity", seed=2)]

    stepped, by_hand = stack(), stack()
    loss = backprop_step(stepped, x, y, softmax_cross_entropy, 0.1)
    h = x
    for layer in by_hand:
        h = layer.forward(h)
    expected, delta = softmax_cross_entropy(h, y)
    for k in (2, 1, 0):
        delta = by_hand[k].backward(delta, input_delta=k > 0)
        by_hand[k].update(0.1)
    assert loss == expected
    for a, b in zip(stepped, by_hand):
        for name in a.parameters:
            np.testing.assert_array_equal(a.parameters[name], b.parameters[name], err_msg=name)


class OracleGenerator:
    """A test-side generator whose ĝ is the true dL/dh, computed through the layers above."""

    condition_dim = 0

    def __init__(self, output_dim, upper_layers, loss_fn):
        self.output_dim = output_dim
        self.upper_layers = upper_layers
        self.loss_fn = loss_fn
        self.y = None

    def predict(self, h, condition=None):
        hs = [h]
        for layer in self.upper_layers:
            hs.append(dense_forward(hs[-1], layer.weights, layer.bias, layer.nonlin))
        _, g = self.loss_fn(hs[-1], self.y)
        for k in range(len(self.upper_layers) - 1, -1, -1):
            layer = self.upper_layers[k]
            g, _, _, _ = dense_backward(g, hs[k], hs[k + 1], layer.weights, layer.nonlin_deriv, True)
        return g

    forward = predict

    def update(self, target, alpha):
        return 0.0


# --- stacks of DNI layers (sgrad.steps) -------------------------------------------------------


@pytest.mark.parametrize("update_rule", ["sgd", "adam"])
def test_dni_with_oracle_generators_matches_backprop_weights(update_rule):
    """With ĝ_k equal to the true gradient, decoupled updates are exactly backprop's."""
    rng = np.random.default_rng(0)
    x_all = random_batch(rng, 200, 6)
    y_all = np.tanh(x_all @ rng.standard_normal((6, 3)))
    dims, alpha = (6, 10, 8, 3), 0.05 if update_rule == "sgd" else 0.01

    backprop = [Layer(dims[k], dims[k + 1], "tanh" if k < 2 else "identity", update_rule=update_rule, seed=k)
                for k in range(3)]
    top = Layer(dims[2], dims[3], "identity", update_rule=update_rule, seed=2)
    oracle_2 = OracleGenerator(dims[2], [top], mse)
    layer_2 = DNI(dims[1], dims[2], "tanh", alpha=alpha, generator=oracle_2, update_rule=update_rule, seed=1)
    oracle_1 = OracleGenerator(dims[1], [layer_2, top], mse)
    layer_1 = DNI(dims[0], dims[1], "tanh", alpha=alpha, generator=oracle_1, update_rule=update_rule, seed=0)
    decoupled = [layer_1, layer_2, top]

    for step in range(25):
        x, y = x_all[8 * step:8 * step + 8], y_all[8 * step:8 * step + 8]
        oracle_1.y = oracle_2.y = y
        backprop_step(backprop, x, y, mse, alpha)
        dni_step(decoupled, x, y, mse, alpha)

    for ours, reference in zip(decoupled, backprop):
        np.testing.assert_allclose(ours.weights, reference.weights, rtol=0, atol=1e-10)
        np.testing.assert_allclose(ours.bias, reference.bias, rtol=0, atol=1e-10)
    assert np.abs(backprop[0].weights - Layer(6, 10, "tanh", seed=0).weights).max() > 1e-3


def test_each_generator_regresses_onto_what_the_layer_above_returned():
    rng = np.random.default_rng(0)
    dims = (6, 9, 8, 7, 3)
    layers = [DNI(dims[k], dims[k + 1], "tanh", alpha=0.05,
                  generator=RecordingGenerator(dims[k + 1], init="blog", seed=10 + k), seed=k)
              for k in range(3)]
    top = Layer(dims[3], dims[4], "identity", seed=3)
    stack = layers + [top]
    x, y = random_batch(rng, 5, 6), random_batch(rng, 5, 3)

    # Run the step by hand, keeping every returned delta and the top's pre-update weights.
    h, returned = x, []
    for layer in layers:
        delta, h = layer.forward_and_synthetic_update(h)
        returned.append(delta)
    top_weights = top.weights.copy()
    top_output = top.forward(h)
    _, g = mse(top_output, y)
    true_gradient_at_h3 = g @ top_weights.T
    np.testing.assert_allclose(top.backward(g), true_gradient_at_h3, rtol=1e-13)
    top.update(0.05)
    for layer, target in zip(layers, returned[1:] + [true_gradient_at_h3]):
        layer.update_synthetic_weights(target)

    for k, layer in enumerate(layers[:-1]):
        np.testing.assert_array_equal(layer.generator.targets[-1], returned[k + 1])
    np.testing.assert_allclose(layers[-1].generator.targets[-1], true_gradient_at_h3, rtol=1e-13)

    # The library's own training step wires the targets the same way.
    stack_targets_before = [len(layer.generator.targets) for layer in layers]
    x2, y2 = random_batch(rng, 5, 6), random_batch(rng, 5, 3)
    h, returned = x2, []
    for layer in layers:
        h_next = dense_forward(h, layer.weights, layer.bias, layer.nonlin)
        g_hat = layer.generator.predict(h_next)
        returned.append(dense_backward(g_hat, h, h_next, layer.weights, layer.nonlin_deriv, True)[0])
        h = h_next
    top_pre = top.weights.copy()
    _, g = mse(dense_forward(h, top_pre, top.bias, top.nonlin), y2)
    dni_step(stack, x2, y2, mse, 0.05)
    assert [len(layer.generator.targets) for layer in layers] == [n + 1 for n in stack_targets_before]
    np.testing.assert_allclose(layers[0].generator.targets[-1], returned[1], rtol=1e-12)
    np.testing.assert_allclose(layers[1].generator.targets[-1], returned[2], rtol=1e-12)
    np.testing.assert_allclose(layers[2].generator.targets[-1], g @ top_pre.T, rtol=1e-12)




def test_dni_step_equals_each_layers_public_calls():
    # dni_step is the layers' public calls in the order of the paper's algorithm, nothing more.
    from sgrad.losses import softmax_cross_entropy

    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        hidden = [DNIBlock(dense_block(4, 6, seed=0), LinearGenerator(6, 3, init="blog", seed=1), 0.1),
                  DNI(6, 5, "relu", condition_dim=3, generator_init="blog", seed=2, alpha=0.1)]
        return hidden + [Layer(5, 3, "identity", seed=3)]

    fast, slow = stack(), stack()
    loss, generator_losses = dni_step(fast, x, y, softmax_cross_entropy, 0.1, condition=y)
    first, h = slow[0].forward_and_synthetic_update(x, y, input_delta=False)
    second, h = slow[1].forward_and_synthetic_update(h, y)
    expected, g = softmax_cross_entropy(slow[2].forward(h), y)
    top_delta = slow[2].backward(g)
    slow[2].update(0.1)
    expected_generator_losses = [slow[0].update_synthetic_weights(second), slow[1].update_synthetic_weights(top_delta)]
    assert first is None
    assert loss == expected and generator_losses == expected_generator_losses
    for a, b in zip(fast, slow):
        for owner_a, owner_b in ((a, b), (getattr(a, "generator", None), getattr(b, "generator", None))):
            if owner_a is None:
                continue
            for name, param in owner_a.parameters.items():
                np.testing.assert_array_equal(param, owner_b.parameters[name], err_msg=name)
    assert all(set(layer.generator.gradients) == {"weights", "bias"} for layer in fast[:2] + slow[:2])


def test_synthetic_loss_step_equals_each_blocks_public_calls_with_the_labels_for_conditioned_generators():
    # Block 0's generator is conditioned (it is given y), block 1's is not; block 0's ℓ̂ regresses onto
    # block 1's, block 1's onto the real per-example loss; no block computes an input delta.
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]

    def stack():
        generators = [SyntheticLossGenerator(6, 3, hidden=(5,), initial_loss=np.log(3.0), seed=1),
                      SyntheticLossGenerator(5, hidden=(4,), seed=2)]
        for generator in generators:  # off the zero start, so that every ĝ and update is non-trivial
            output_layer = generator.net.modules[-1]
            output_layer.weights[...] = np.random.default_rng(3).normal(size=output_layer.weights.shape)
        hidden = [DNIBlock(dense_block(4, 6, seed=0), generators[0], 0.1),
                  DNIBlock(dense_block(6, 5, seed=4), generators[1], 0.1)]
        return hidden + [Layer(5, 3, "identity", seed=5)]

    fast, slow = stack(), stack()
    loss, generator_losses = synthetic_loss_step(fast, x, y, 0.1)
    first, h = slow[0].forward_and_synthetic_update(x, y, input_delta=False)
    second, h = slow[1].forward_and_synthetic_update(h, input_delta=False)
    per_example, g = softmax_cross_entropy(slow[2].forward(h), y, reduction="none")
    slow[2].backward(g / len(x))
    slow[2].update(0.1)
    expected_generator_losses = [slow[0].update_synthetic_weights(slow[1].generator.predicted_loss),
                                 slow[1].update_synthetic_weights(per_example[:, None])]
    assert first is None and second is None
    assert loss == float(per_example.mean()) and generator_losses == expected_generator_losses
    assert np.abs(slow[0].synthetic_gradient).max() > 0 and np.abs(slow[1].synthetic_gradient).max() > 0
    for a, b in zip(fast, slow):
        for owner_a, owner_b in ((a, b), (getattr(a, "generator", None), getattr(b, "generator", None))):
            if owner_a is None:
                continue
            for name, param in owner_a.parameters.items():
                np.testing.assert_array_equal(param, owner_b.parameters[name], err_msg=name)


def test_synthetic_loss_step_refuses_a_block_whose_generator_expects_other_labels_and_changes_nothing():
    # A generator conditioned on 4 classes cannot take 3-class labels: refused before any block moves.
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 4)), np.eye(3)[rng.integers(0, 3, 8)]
    layers = [DNIBlock(dense_block(4, 6, seed=0), SyntheticLossGenerator(6, 4, hidden=(5,), seed=1), 0.1),
              Layer(6, 3, "identity", seed=2)]
    before = [tree_state(layer) for layer in layers]
    with pytest.raises(ValueError, match="condition"):
        synthetic_loss_step(layers, x, y, 0.1)
    for layer, state in zip(layers, before):
        assert_same_state(layer, state)


# --- recurrent layers: truncated BPTT, and DNI at the window boundaries (sgrad.steps.tbptt_step) --------


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
    tbptt_step(core, readout, x, y, mse, 0.1, window=window, generator=oracle, mask=mask)
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
    tbptt_step(core, readout, x, y, mse, 0.1, window=3, mask=mask)
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


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_the_sequence_loss_does_not_depend_on_where_the_windows_are_cut(window):
    core, readout, x, y, mask = _sequence_task(LSTM, update_rule=SumOfGradients())
    outputs, _ = core.predict(x)
    prediction = readout.predict(outputs.reshape(21, 3)).reshape(3, 7, 2)
    expected = float(np.sum(mask * 0.5 * np.sum((prediction - y) ** 2, axis=2))) / 3
    loss, _, _ = tbptt_step(core, readout, x, y, mse, 0.1, window=window, mask=mask)
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
    loss, last_state, generator_losses = tbptt_step(core, readout, x, y, mse, 0.05, window=3, state=state,
                                                    generator=generator, generator_alpha=0.02, mask=mask,
                                                    sequence_ends=sequence_ends,
                                                    **({} if scale == 1.0 else {"synthetic_scale": scale}))

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
    tbptt_step(core, readout, x, y, mse, 0.1, window=2, generator=generator, mask=mask, true_targets=True)
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
    """target_windows=2, T = 2 over 7 steps: M's target at s_2 is the loss of steps 3 to 6 and λ M(s_6)
    backpropagated to s_2; at s_4 and s_6 the two windows reach the sequence's end, so M(s_7) only if it goes on."""
    core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
    generator = RecordingGenerator(core.state_dim, init="blog", seed=5, update_rule=SumOfGradients())
    tbptt_step(core, readout, x, y, mse, 0.1, window=2, generator=generator, mask=mask, synthetic_scale=scale,
               sequence_ends=sequence_ends, target_windows=2)
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
        tbptt_step(core, readout, x, y, mse, 0.1, window=2, generator=one_window, mask=mask, synthetic_scale=scale,
                   sequence_ends=False)
        assert np.abs(one_window.targets[0] - generator.targets[0]).max() > 1e-3


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_n_step_targets_that_reach_the_sequences_end_are_the_true_targets(cls):
    targets = {}
    for name, options in {"true": {"true_targets": True}, "4 windows": {"target_windows": 4}}.items():
        core, readout, x, y, mask = _sequence_task(cls, update_rule=SumOfGradients())
        generator = RecordingGenerator(core.state_dim, init="blog", seed=5)
        tbptt_step(core, readout, x, y, mse, 0.1, window=2, generator=generator, mask=mask, **options)
        targets[name] = generator.targets
    for true, n_step in zip(targets["true"], targets["4 windows"], strict=True):
        np.testing.assert_allclose(n_step, true, rtol=1e-12, atol=1e-15)


def test_tbptt_step_with_the_same_seed_gives_the_same_numbers():
    def run():
        core, readout, x, y, mask = _sequence_task(LSTM, seed=3, update_rule="adam")
        generator = sgrad.MLPGenerator(core.state_dim, hidden=(5,), batchnorm=False, seed=4)
        result = tbptt_step(core, readout, x, y, mse, 0.01, window=2, generator=generator, mask=mask)
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
    _, state, _ = tbptt_step(core, readout, x, y, mse, 0.01, window=3, generator=generator, mask=mask)
    assert state.dtype == dtype
    for module in (core, readout, generator):
        assert all(param.dtype == dtype for param in module.parameters.values()), repr(module)


def _tbptt_arguments(dtype=np.float64):
    core, readout, x, y, mask = _sequence_task(LSTM, dtype=dtype)
    generator = LinearGenerator(core.state_dim, init="blog", seed=1, dtype=dtype)
    tbptt_step(core, readout, x, y, mse, 0.01, window=3, generator=generator, mask=mask)  # every cache filled
    return dict(core=core, readout=readout, x=x, y=y, loss_fn=mse, alpha=0.01, window=3, generator=generator,
                mask=mask)


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
    "true targets without a generator": ({"generator": None, "true_targets": True}, ValueError, r"none was given"),
    "n-step targets without a generator": ({"generator": None, "target_windows": 2}, ValueError,
                                           r"target_windows=2 sets a generator's targets, but none was given"),
    "n-step and true targets": ({"target_windows": 2, "true_targets": True}, ValueError,
                                r"true_targets=True backpropagates through every later step already"),
    "target windows 0": ({"target_windows": 0}, ValueError, r"target_windows .* must be at least 1; got 0"),
    "target windows as text": ({"target_windows": "2"}, TypeError, r"target_windows .* must be an integer"),
    "synthetic scale 0": ({"synthetic_scale": 0}, ValueError,
                          r"synthetic_scale must be a finite number in \(0, 1\], e.g. 0.1; got 0.0"),
    "synthetic scale above 1": ({"synthetic_scale": 1.5}, ValueError, r"synthetic_scale .* got 1.5"),
    "synthetic scale NaN": ({"synthetic_scale": float("nan")}, ValueError, r"synthetic_scale .* got nan"),
    "synthetic scale as text": ({"synthetic_scale": "0.1"}, TypeError, r"synthetic_scale must be a number"),
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
        tbptt_step(**arguments)
    for module, state in zip(modules, before):
        assert_same_state(module, state)


def test_tbptt_step_refuses_a_generator_whose_gradient_would_change_the_cores_dtype():
    arguments = _tbptt_arguments(np.float32)
    before = tree_state(arguments["core"])
    arguments["generator"] = LinearGenerator(6, init="blog", seed=1)  # float64: its ĝ would make float32 gradients 64
    with pytest.raises(TypeError, match=r"must have the dtype of the core's state, float32; got float64"):
        tbptt_step(**arguments)
    assert_same_state(arguments["core"], before)
