"""The recurrent layers (sgrad.recurrent.layers): backpropagation through time against central differences and against
PyTorch, the carried state, seeds, dtypes, the update, and errors at their boundary.

The window's loss in the gradient checks is ``L = sum(outputs * R) + sum(last_state * G)``, so that backward gets
``d_outputs = R`` and ``d_last_state = G``: G stands for the gradient that comes back from after the window.
"""

import ast
import pathlib

import numpy as np
import pytest
from conftest import assert_dtype, assert_gradients_match, assert_same_state, assert_tree_dtype, tree_state
from hypothesis import given, settings
from strategies import batches, dtypes, seeds, widths

import sgrad.recurrent.layers
from sgrad.recurrent.layers import LSTM, RNN

CELLS = [RNN, LSTM]
steps = widths  # 1 to 4 steps in a window


def _random_window(cls, seed, batch=3, time=4, input_dim=2, hidden_dim=3, dtype=np.float64):
    """A layer with random parameters (b too), and x, a start state, R and G as the module docstring says."""
    rng = np.random.default_rng(seed)
    core = cls(input_dim, hidden_dim, rng=rng, dtype=dtype)
    for param in core.parameters.values():
        param[...] = 0.5 * rng.standard_normal(param.shape)
    x = rng.standard_normal((batch, time, input_dim)).astype(dtype)
    state = rng.standard_normal((batch, core.state_dim)).astype(dtype)
    R = rng.standard_normal((batch, time, hidden_dim)).astype(dtype)
    G = rng.standard_normal((batch, core.state_dim)).astype(dtype)
    return core, x, state, R, G


def _check_window_gradients(core, x, state, R, G, what):
    def loss():
        outputs, last_state = core.predict(x, state)
        return float(np.sum(outputs * R) + np.sum(last_state * G))

    core.forward(x, state)
    d_x, d_state = core.backward(R, G)
    assert_gradients_match(loss, dict(core.gradients, x=d_x, state=d_state), dict(core.parameters, x=x, state=state),
                           what)


# --- gradients -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CELLS)
@settings(max_examples=20)
@given(batch=batches, time=steps, input_dim=widths, hidden_dim=widths, seed=seeds)
def test_backward_matches_central_differences_for_every_parameter_the_inputs_and_the_initial_state(
        cls, batch, time, input_dim, hidden_dim, seed):
    core, x, state, R, G = _random_window(cls, seed, batch, time, input_dim, hidden_dim)
    _check_window_gradients(core, x, state, R, G, f"{core!r}, batch {batch}, {time} steps")


@pytest.mark.parametrize("cls", CELLS)
def test_a_gradient_given_at_the_last_state_alone_reaches_every_parameter_and_the_initial_state(cls):
    core, x, state, R, G = _random_window(cls, seed=1, time=5)
    _check_window_gradients(core, x, state, np.zeros_like(R), G, f"{core!r}, the last-state gradient alone")
    core.forward(x, state)
    _, d_state_without = core.backward(np.zeros_like(R), None)
    assert np.all(d_state_without == 0)  # no loss in the window and none from after it: nothing comes back


@pytest.mark.parametrize("cls", CELLS)
def test_the_gradients_are_sums_over_the_steps_with_no_averaging(cls):
    core, x, state, R, G = _random_window(cls, seed=2, batch=2, time=1)
    core.forward(np.concatenate([x, x]), np.concatenate([state, state]))
    core.backward(np.concatenate([R, R]), np.concatenate([G, G]))
    doubled = {name: grad.copy() for name, grad in core.gradients.items()}
    core.forward(x, state)
    core.backward(R, G)
    for name, grad in core.gradients.items():
        np.testing.assert_allclose(doubled[name], 2 * grad, rtol=1e-13, err_msg=name)


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_one_window_matches_pytorch_forward_and_gradients(cls):
    torch = pytest.importorskip("torch")
    batch, time, input_dim, hidden = 3, 5, 4, 6
    peer = (torch.nn.LSTM if cls is LSTM else torch.nn.RNN)(input_dim, hidden, batch_first=True).double()
    core = cls(input_dim, hidden)
    core.weights_x[...] = peer.weight_ih_l0.detach().numpy().T
    core.weights_h[...] = peer.weight_hh_l0.detach().numpy().T
    core.bias[...] = (peer.bias_ih_l0 + peer.bias_hh_l0).detach().numpy()
    rng = np.random.default_rng(0)
    x, state = rng.standard_normal((batch, time, input_dim)), rng.standard_normal((batch, core.state_dim))
    R, G = rng.standard_normal((batch, time, hidden)), rng.standard_normal((batch, core.state_dim))

    outputs, last_state = core.forward(x, state)
    d_x, d_state = core.backward(R, G)

    x_t = torch.tensor(x, requires_grad=True)
    h0 = torch.tensor(state[None, :, :hidden], requires_grad=True)
    if cls is LSTM:
        c0 = torch.tensor(state[None, :, hidden:], requires_grad=True)
        theirs, (h_last, c_last) = peer(x_t, (h0, c0))
        last = torch.cat([h_last[0], c_last[0]], dim=1)
    else:
        theirs, h_last = peer(x_t, h0)
        last = h_last[0]
    ((theirs * torch.tensor(R)).sum() + (last * torch.tensor(G)).sum()).backward()
    their_d_state = torch.cat([h0.grad[0], c0.grad[0]], dim=1) if cls is LSTM else h0.grad[0]
    pairs = {"outputs": (outputs, theirs), "last_state": (last_state, last), "d_x": (d_x, x_t.grad),
             "d_state": (d_state, their_d_state),
             "dW_x": (core.weights_x_grad, peer.weight_ih_l0.grad.T),
             "dW_h": (core.weights_h_grad, peer.weight_hh_l0.grad.T),
             "db": (core.bias_grad, peer.bias_ih_l0.grad)}
    for name, (mine, reference) in pairs.items():
        np.testing.assert_allclose(mine, reference.detach().numpy(), rtol=1e-12, atol=1e-13,
                                   err_msg=f"{name}: sgrad (mine) against torch.nn.{type(peer).__name__}")


# --- the state -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CELLS)
def test_windows_run_one_after_the_other_with_the_state_carried_equal_one_long_forward(cls):
    core, x, state, _, _ = _random_window(cls, seed=3, time=7)
    whole, whole_last = core.predict(x, state)
    first, carried = core.forward(x[:, :3], state)
    second, last = core.forward(x[:, 3:], carried)
    np.testing.assert_array_equal(np.concatenate([first, second], axis=1), whole)
    np.testing.assert_array_equal(last, whole_last)


def test_the_lstm_state_is_h_and_c_side_by_side():
    core, x, state, _, _ = _random_window(LSTM, seed=4, hidden_dim=3)
    outputs, last_state = core.forward(x, state)
    np.testing.assert_array_equal(last_state[:, :3], outputs[:, -1])
    np.testing.assert_array_equal(last_state[:, 3:], core.cell_states[:, -1])
    np.testing.assert_array_equal(core.hidden_states[:, 0], state[:, :3])
    np.testing.assert_array_equal(core.cell_states[:, 0], state[:, 3:])
    assert core.state_dim == 6 and LSTM(2, 3).bias[3:6].tolist() == [1.0, 1.0, 1.0]  # the forget gate's bias


@pytest.mark.parametrize("cls", CELLS)
def test_no_state_means_a_state_of_zeros(cls):
    core, x, _, _, _ = _random_window(cls, seed=5)
    outputs, _ = core.forward(x)
    np.testing.assert_array_equal(outputs, core.predict(x, np.zeros((3, core.state_dim)))[0])
    np.testing.assert_array_equal(core.initial_state(3), np.zeros((3, core.state_dim)))


@pytest.mark.parametrize("cls", CELLS)
def test_predict_returns_what_forward_returns_and_changes_nothing(cls):
    core, x, state, _, _ = _random_window(cls, seed=6)
    core.forward(x[:, :2], state)
    before = tree_state(core)
    outputs, last_state = core.predict(x, state)
    assert_same_state(core, before)
    forward_outputs, forward_last_state = core.forward(x, state)
    np.testing.assert_array_equal(outputs, forward_outputs)
    np.testing.assert_array_equal(last_state, forward_last_state)


# --- the update, seeds and dtypes ------------------------------------------------------------------


@pytest.mark.parametrize("cls", CELLS)
def test_update_takes_one_descent_step_with_the_update_rule(cls):
    core, x, state, R, G = _random_window(cls, seed=7)
    core.forward(x, state)
    core.backward(R, G)
    expected = {name: param - 0.1 * core.gradients[name] for name, param in core.parameters.items()}
    core.update(0.1)
    for name, param in core.parameters.items():
        np.testing.assert_allclose(param, expected[name], rtol=1e-15, err_msg=name)
    with pytest.raises(ValueError, match=r"backward\(\) after update\(\)"):
        core.backward(R, G)
    with pytest.raises(ValueError, match=r"update\(\) needs the gradients"):
        core.update(0.1)


@pytest.mark.parametrize("cls", CELLS)
def test_adam_keeps_a_state_per_parameter(cls):
    core, x, state, R, G = _random_window(cls, seed=8)
    core.update_rule = sgrad.Adam()
    core.update_state = {name: core.update_rule.init_state(p) for name, p in core.parameters.items()}
    core.forward(x, state)
    core.backward(R, G)
    core.update(0.01)
    assert {name: int(s["t"]) for name, s in core.update_state.items()} == {"weights_x": 1, "weights_h": 1, "bias": 1}


@pytest.mark.parametrize("cls", CELLS)
def test_same_seed_same_numbers(cls):
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    first, second, other = cls(4, 5, seed=11), cls(4, 5, seed=11), cls(4, 5, seed=12)
    for name in first.parameters:
        np.testing.assert_array_equal(first.parameters[name], second.parameters[name])
    np.testing.assert_array_equal(first.forward(x)[0], second.forward(x)[0])
    assert not np.array_equal(first.weights_h, other.weights_h)


@pytest.mark.parametrize("cls", CELLS)
@given(dtype=dtypes, seed=seeds)
def test_dtype_is_kept_through_forward_backward_and_update(cls, dtype, seed):
    core, x, state, R, G = _random_window(cls, seed, dtype=dtype)
    core.update_rule = sgrad.Adam()
    core.update_state = {name: core.update_rule.init_state(p) for name, p in core.parameters.items()}
    outputs, last_state = core.forward(x, state)
    d_x, d_state = core.backward(R, G)
    assert_dtype(dtype, outputs=outputs, last_state=last_state, d_x=d_x, d_state=d_state, **core.gradients)
    core.update(0.01)
    assert_tree_dtype(dtype, core, repr(core))
    assert_dtype(dtype, initial_state=core.initial_state(2), zero_state_outputs=core.forward(x)[0])


# --- errors at the boundary ------------------------------------------------------------------------


def _trained(cls):
    """A layer with every cache filled: one forward, backward and update, then a forward and backward."""
    core, x, state, R, G = _random_window(cls, seed=9)
    core.forward(x, state)
    core.backward(R, G)
    core.update(0.1)
    core.forward(x, state)
    core.backward(R, G)
    return core, x, state, R, G


BAD_WINDOWS = {
    "x of one sequence, 2-D": (lambda x, s: (x[0], s), ValueError, r"x must be a batch of sequences .*x\[None\]"),
    "x of the wrong width": (lambda x, s: (x[..., :1], s), ValueError, r"\(batch, time, 2\) \(2 = this layer's input_dim\)"),
    "x of integers": (lambda x, s: (x.astype(int), s), TypeError, r"x must hold floats"),
    "x with NaN": (lambda x, s: (np.where(x > 1, np.nan, x), s), ValueError, r"NaN or inf \(first in sequence"),
    "x of no steps": (lambda x, s: (x[:, :0], s), ValueError, r"x is empty"),
    "x as a list": (lambda x, s: (x.tolist(), s), TypeError, r"np.asarray\(x\)"),
    "state of the wrong width": (lambda x, s: (x, s[:, :-1]), ValueError,
                                 r"state must have shape \(batch, \d\) .*state_dim"),
    "state for other sequences": (lambda x, s: (x, s[:2]), ValueError, r"one row per sequence: x has 3 sequences"),
    "state of one sequence, 1-D": (lambda x, s: (x, s[0]), ValueError, r"state must have shape"),
}


@pytest.mark.parametrize("cls", CELLS)
@pytest.mark.parametrize("case", BAD_WINDOWS, ids=str)
def test_a_bad_window_is_refused_in_the_users_words_and_changes_nothing(cls, case):
    change, error, message = BAD_WINDOWS[case]
    core, x, state, _, _ = _trained(cls)
    before = tree_state(core)
    for method in (core.forward, core.predict):
        with pytest.raises(error, match=message):
            method(*change(x, state))
        assert_same_state(core, before)


def test_a_state_of_h_alone_given_to_an_lstm_is_told_that_c_belongs_beside_it():
    core, x, state, _, _ = _trained(LSTM)
    with pytest.raises(ValueError, match=r"\(batch, 6\) \(6 = this layer's state_dim, 2 \* hidden_dim: h and c side "
                                         r"by side, \[h, c\]\); got shape \(3, 3\)"):
        core.forward(x, state[:, :3])


BAD_GRADIENTS = {
    "d_outputs of other steps": (lambda R, G: (R[:, :2], G), ValueError, r"d_outputs must have the shape of the last"),
    "d_outputs of the wrong width": (lambda R, G: (R[..., :2], G), ValueError,
                                     r"d_outputs must have shape \(batch, time, 3\)"),
    "d_outputs 2-D": (lambda R, G: (R[:, 0], G), ValueError, r"d_outputs must be a batch of sequences"),
    "d_last_state of the wrong width": (lambda R, G: (R, G[:, :1]), ValueError, r"d_last_state must have shape"),
    "d_last_state for other sequences": (lambda R, G: (R, G[:2]), ValueError, r"d_last_state must have the shape of "
                                                                                r"the last state"),
    "d_last_state with inf": (lambda R, G: (R, G * np.inf), ValueError, r"d_last_state holds NaN or inf"),
}


@pytest.mark.parametrize("cls", CELLS)
@pytest.mark.parametrize("case", BAD_GRADIENTS, ids=str)
def test_a_bad_gradient_is_refused_in_the_users_words_and_changes_nothing(cls, case):
    change, error, message = BAD_GRADIENTS[case]
    core, _, _, R, G = _trained(cls)
    before = tree_state(core)
    with np.errstate(invalid="ignore"):
        bad = change(R, G)
    with pytest.raises(error, match=message):
        core.backward(*bad)
    assert_same_state(core, before)


@pytest.mark.parametrize("cls", CELLS)
@pytest.mark.parametrize("name", ["input_delta", "state_delta"])
def test_a_delta_switch_that_is_not_a_bool_is_refused_and_changes_nothing(cls, name):
    core, _, _, R, G = _trained(cls)
    before = tree_state(core)
    with pytest.raises(TypeError, match=f"{name} must be True or False; got 'no' \\(str\\)"):
        core.backward(R, G, **{name: "no"})
    assert_same_state(core, before)


@pytest.mark.parametrize("cls", CELLS)
def test_backward_before_forward_is_refused(cls):
    with pytest.raises(ValueError, match=r"backward\(\) needs a forward pass first"):
        cls(2, 3, seed=0).backward(np.zeros((1, 1, 3)))


@pytest.mark.parametrize("options, error, message", [
    ({"init": "orthogonal"}, ValueError, r"unknown init 'orthogonal'; choose one of 'xavier'"),
    ({"dtype": np.int32}, TypeError, r"dtype must be a floating type"),
    ({"update_rule": "rmsprop"}, ValueError, r"unknown update rule 'rmsprop'"),
], ids=["init", "dtype", "update rule"])
@pytest.mark.parametrize("cls", CELLS)
def test_bad_construction_is_refused_in_the_users_words(cls, options, error, message):
    with pytest.raises(error, match=message):
        cls(2, 3, **options)


def test_a_forget_bias_must_be_a_number():
    with pytest.raises(TypeError, match=r"forget_bias must be a number"):
        LSTM(2, 3, forget_bias="1")


# --- the documentation -----------------------------------------------------------------------------


def test_the_usage_example_in_the_module_docstring_runs():
    doc = sgrad.recurrent.layers.__doc__
    example = doc[doc.index("    import numpy as np"):doc.index("The maths of one step")]
    code = "\n".join(line[4:] for line in example.splitlines())
    ast.parse(code)
    namespace: dict = {}
    exec(compile(code, pathlib.Path(sgrad.recurrent.layers.__file__).name, "exec"), namespace)
    assert namespace["d_state"].shape == (16, 64) and namespace["outputs"].shape == (16, 8, 32)


@pytest.mark.parametrize("cls, nbytes", [(RNN, "16,000,000,000,000"), (LSTM, "64,000,000,000,000")])
def test_weights_too_large_for_memory_are_refused_before_anything_is_allocated(cls, nbytes):
    with pytest.raises(ValueError) as info:
        cls(10**6, 10**6)
    assert str(info.value).startswith(f"the weights of {cls.__name__}(1000000, 1000000) would take {nbytes} bytes")
    assert str(info.value).endswith("; use a smaller input_dim or hidden_dim")


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_float16_is_refused_where_a_backward_pass_would_overflow_it_into_nan_weights(cls):
    with pytest.raises(TypeError, match=f"an {cls.__name__} cannot train in float16: its largest number, 65504, "):
        cls(5, 16, dtype=np.float16)
