"""The Module tree (sgrad/nn/module.py): children and the submodules() walk, train/eval, the batch-size rule,
which arrays a module owns (own_parameters, buffers) against what it offers to train (parameters), and the two
operations on a whole tree: restored_on_error and running_averages_kept.
"""

import contextlib

import numpy as np
import pytest
from conftest import assert_same_state, tree_state

from sgrad import DNI, Activation, BatchNorm, DNIBlock, Layer, MLPGenerator, SyntheticLossGenerator, dense_block
from sgrad.dni.generators import Generator
from sgrad.nn.module import restored_on_error, running_averages_kept

BATCH = 4


def _x(width, rows=BATCH, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, width))


def _dni_block(batchnorm_in_block=True):
    """DNIBlock(Linear→BatchNorm→ReLU 3 → 4, an MLP generator with one batch-normalised hidden block of 5)."""
    return DNIBlock(dense_block(3, 4, batchnorm=batchnorm_in_block, seed=0), MLPGenerator(4, hidden=(5,), seed=1))


def _types(tree):
    return [(path, type(module).__name__) for path, module in tree.submodules()]


# --- the tree ------------------------------------------------------------------------------------


def test_submodules_walks_a_dni_block_parents_first_by_path():
    assert _types(_dni_block()) == [
        ("", "DNIBlock"),
        ("block", "Sequential"),
        ("block.modules.0", "Layer"), ("block.modules.1", "BatchNorm"), ("block.modules.2", "Activation"),
        ("generator", "MLPGenerator"),
        ("generator.net", "Sequential"),
        ("generator.net.modules.0", "Sequential"),
        ("generator.net.modules.0.modules.0", "Layer"), ("generator.net.modules.0.modules.1", "BatchNorm"),
        ("generator.net.modules.0.modules.2", "Activation"),
        ("generator.net.modules.1", "Layer"),
    ]


def test_submodules_walks_a_dni_and_its_default_generator():
    assert _types(DNI(3, 4, "tanh", seed=0)) == [("", "DNI"), ("generator", "LinearGenerator"),
                                                 ("generator.net", "Layer")]


def test_each_container_lists_its_children_by_the_name_in_the_path():
    tree = _dni_block()
    assert tree.children() == {"block": tree.block, "generator": tree.generator}
    assert tree.block.children() == {f"modules.{k}": module for k, module in enumerate(tree.block.modules)}
    assert tree.generator.children() == {"net": tree.generator.net}
    layer = DNI(3, 4, "tanh", seed=0)
    assert layer.children() == {"generator": layer.generator}


def test_a_prefix_starts_every_path():
    paths = [path for path, _ in dense_block(3, 4, seed=0).submodules("hidden.0")]
    assert paths == ["hidden.0", "hidden.0.modules.0", "hidden.0.modules.1", "hidden.0.modules.2"]


@pytest.mark.parametrize("leaf", [Layer(3, 4, "tanh", seed=0), BatchNorm(4), Activation("relu")],
                         ids=["Layer", "BatchNorm", "Activation"])
def test_a_leaf_has_no_children_and_walks_to_itself(leaf):
    assert leaf.children() == {}
    assert list(leaf.submodules()) == [("", leaf)]


class UsersGenerator:
    """A generator of the user's own, with the generator interface but not a Module."""

    output_dim, condition_dim = 4, 0

    def forward(self, h, condition=None):
        return np.zeros_like(h)

    predict = forward

    def update(self, target, alpha):
        return 0.0


def test_an_object_that_is_not_a_module_is_a_leaf_of_the_tree():
    generator = UsersGenerator()
    layer = DNI(3, 4, "tanh", generator=generator, seed=0)
    assert list(layer.submodules()) == [("", layer), ("generator", generator)]


# --- train and eval --------------------------------------------------------------------------------


TREES = [
    pytest.param(lambda: BatchNorm(4), id="BatchNorm"),
    pytest.param(lambda: dense_block(3, 4, seed=0), id="dense_block"),
    pytest.param(lambda: MLPGenerator(4, hidden=(5, 5), seed=0), id="MLPGenerator"),
    pytest.param(lambda: SyntheticLossGenerator(4, hidden=(5,), seed=0), id="SyntheticLossGenerator"),
    pytest.param(_dni_block, id="DNIBlock"),
    pytest.param(lambda: DNI(3, 4, "tanh", generator=MLPGenerator(4, hidden=(5,), seed=1), seed=0),
                 id="DNI-with-an-MLP-generator"),
]


def _norms(tree):
    return [module for _, module in tree.submodules() if isinstance(module, BatchNorm)]


@pytest.mark.parametrize("make", TREES)
def test_train_and_eval_reach_every_module_of_the_tree(make):
    tree = make()
    assert _norms(tree), "the tree needs a batch norm somewhere"
    assert all(module.training for _, module in tree.submodules()), "a new module is in training mode"
    assert tree.eval() is tree
    assert not any(module.training for _, module in tree.submodules())
    assert tree.train() is tree
    assert all(module.training for _, module in tree.submodules())
    assert tree.train(False) is tree
    assert not any(module.training for _, module in tree.submodules())


def test_eval_stops_the_running_averages_in_the_block_and_in_the_generator():
    tree = _dni_block().eval()
    norms = _norms(tree)
    before = [(norm.running_mean.copy(), norm.running_var.copy()) for norm in norms]
    tree.forward_and_update(_x(3))
    for norm, (mean, var) in zip(norms, before):
        np.testing.assert_array_equal(norm.running_mean, mean)
        np.testing.assert_array_equal(norm.running_var, var)
    tree.train().forward_and_update(_x(3))
    for norm, (mean, var) in zip(norms, before):
        assert np.all(norm.running_mean != mean) and np.all(norm.running_var != var)


# --- the batch-size rule ---------------------------------------------------------------------------


def test_min_batch_is_two_for_batch_norm_in_training_and_one_otherwise():
    norm = BatchNorm(4)
    assert norm.min_batch() == 2
    assert norm.eval().min_batch() == 1
    assert Layer(3, 4, "tanh").min_batch() == Activation("relu").min_batch() == 1
    assert dense_block(3, 4, seed=0).min_batch() == 1, "a container's own rule; check_batch_size walks the tree"


@pytest.mark.parametrize("make", TREES)
def test_check_batch_size_refuses_one_row_while_a_batch_norm_inside_trains(make):
    tree = make()
    with pytest.raises(ValueError, match=r"input has 1 row, but batch norm in training mode needs a batch of at "
                                         r"least 2 rows; use eval\(\) for single examples"):
        tree.check_batch_size(1)
    tree.check_batch_size(2)
    tree.eval().check_batch_size(1)


def test_check_batch_size_sees_a_batch_norm_that_only_the_generator_holds():
    tree = _dni_block(batchnorm_in_block=False)
    tree.block.check_batch_size(1)
    with pytest.raises(ValueError, match="needs a batch of at least 2 rows"):
        tree.check_batch_size(1)


def test_check_batch_size_names_the_argument():
    with pytest.raises(ValueError, match="^h has 1 row"):
        BatchNorm(4).check_batch_size(1, "h")


def _forward_one_row(tree):
    """The tree's own forward pass on one row: a decoupled step for DNI and DNIBlock, ĝ = M(h) for a generator."""
    if isinstance(tree, (DNI, DNIBlock)):
        return tree.forward_and_update(_x(tree.input_dim, rows=1))
    if isinstance(tree, Generator):
        return tree.forward(_x(tree.output_dim, rows=1))
    return tree.forward(_x(tree.input_dim, rows=1))


@pytest.mark.parametrize("make", TREES)
def test_one_row_is_refused_in_training_before_anything_changes_and_taken_in_eval(make):
    tree = make()
    before = tree_state(tree)
    with pytest.raises(ValueError, match="needs a batch of at least 2 rows"):
        _forward_one_row(tree)
    assert_same_state(tree, before)
    tree.eval()
    _forward_one_row(tree)


# --- what a module owns ------------------------------------------------------------------------------


def test_a_layer_owns_its_weights_and_bias_and_offers_them_to_train():
    layer = Layer(3, 4, "tanh", seed=0)
    assert layer.own_parameters() == {"weights": layer.weights, "bias": layer.bias}
    assert layer.own_parameters()["weights"] is layer.weights and layer.parameters["bias"] is layer.bias
    assert layer.buffers() == {}


def test_batch_norm_owns_gamma_and_beta_and_keeps_its_running_averages_as_buffers():
    norm = BatchNorm(4)
    assert list(norm.own_parameters()) == ["gamma", "beta"] and norm.parameters["gamma"] is norm.gamma
    assert list(norm.buffers()) == ["running_mean", "running_var"]
    assert norm.buffers()["running_mean"] is norm.running_mean and norm.buffers()["running_var"] is norm.running_var


@pytest.mark.parametrize("make", [lambda: Activation("tanh"), lambda: dense_block(3, 4, seed=0),
                                  lambda: MLPGenerator(4, hidden=(5,), seed=0), _dni_block],
                         ids=["Activation", "Sequential", "MLPGenerator", "DNIBlock"])
def test_a_container_or_an_activation_owns_nothing_itself(make):
    module = make()
    assert module.own_parameters() == {} and module.buffers() == {}


def test_a_containers_parameters_are_its_childrens_named_by_their_place():
    block = dense_block(3, 4, seed=0)
    linear, norm, _ = block.modules
    assert block.parameters == {"0.weights": linear.weights, "1.gamma": norm.gamma, "1.beta": norm.beta}
    assert block.parameters["1.gamma"] is norm.gamma
    generator = MLPGenerator(4, hidden=(5,), seed=0)
    assert generator.parameters.keys() == generator.net.parameters.keys()
    assert all(generator.parameters[name] is p for name, p in generator.net.parameters.items())


def test_every_parameter_of_a_tree_is_owned_by_exactly_one_module_in_it():
    tree = _dni_block()
    owned = [id(p) for _, module in tree.submodules() for p in module.own_parameters().values()]
    offered = [id(p) for p in list(tree.block.parameters.values()) + list(tree.generator.parameters.values())]
    assert sorted(owned) == sorted(offered) and len(set(owned)) == len(owned)


@pytest.mark.parametrize("make", [lambda: DNI(3, 4, "tanh", seed=0), _dni_block], ids=["DNI", "DNIBlock"])
def test_a_decoupled_modules_parameters_leave_out_its_generators(make):
    """The generator learns on its own (update_generator): the module's own step must not touch it."""
    module = make()
    generator_arrays = {id(p) for p in module.generator.parameters.values()}
    assert module.parameters and not generator_arrays & {id(p) for p in module.parameters.values()}


# --- operations on a whole tree ------------------------------------------------------------------------


def _trained_dni_block():
    """A DNIBlock after one step: every cache filled, running statistics off their start, Adam's moments set."""
    tree = DNIBlock(dense_block(3, 4, update_rule="adam", seed=0), MLPGenerator(4, hidden=(5,), update_rule="adam",
                                                                                  seed=1))
    tree.forward_and_update(_x(3, seed=1))
    tree.update_generator(_x(4, seed=2))
    return tree


def test_restored_on_error_puts_back_every_attribute_and_buffer_of_the_tree_and_lets_the_error_go_on():
    tree = _trained_dni_block()
    before = tree_state(tree)
    with pytest.raises(RuntimeError, match="stopped on purpose"):
        with restored_on_error(tree):
            tree.forward(_x(3, seed=3))  # new caches, and batch norm's running statistics moved in place
            tree.generator.forward(tree.output)
            tree.block.modules[0].surprise = True  # an attribute that was not there
            raise RuntimeError("stopped on purpose")
    assert_same_state(tree, before)


def test_restored_on_error_leaves_a_body_that_did_not_raise_as_it_ended():
    tree = _trained_dni_block()
    before = tree_state(tree)
    with restored_on_error(tree):
        tree.forward(_x(3, seed=3))
    after = tree_state(tree)
    assert any(not np.array_equal(after[path], value) for path, value in before.items()
               if isinstance(value, np.ndarray) and "running_mean" in path)
    assert_same_state(tree, after)


def test_restored_on_error_puts_back_a_users_object_that_is_not_a_module():
    generator = UsersGenerator()
    layer = DNI(3, 4, "tanh", generator=generator, seed=0)
    with pytest.raises(ValueError):
        with restored_on_error(layer, generator):
            generator.output_dim = 5
            raise ValueError("stopped")
    assert vars(generator) == {} and generator.output_dim == 4


def _block_whose_update_overflows_at_its_last_parameter():
    """A trained DNIBlock after forward and backward, whose batch norm's dL/dβ is so large that Adam's square of it
    overflows: the block's update steps the linear map's weights and γ in place, then raises at β."""
    tree = _trained_dni_block()
    tree.block.forward(_x(3, seed=3))
    tree.block.backward(_x(4, seed=4))
    batchnorm = tree.block.modules[1]
    batchnorm.gradients["beta"] = np.full_like(batchnorm.beta, 1e200)
    return tree


def test_an_update_that_fails_half_way_has_stepped_some_parameters_in_place():
    """The failure the transaction below undoes: without it, the weights before β stay stepped."""
    tree = _block_whose_update_overflows_at_its_last_parameter()
    weights, gamma = tree.block.modules[0].weights.copy(), tree.block.modules[1].gamma.copy()
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        tree.block.update(0.1)
    assert not np.array_equal(tree.block.modules[0].weights, weights)
    assert not np.array_equal(tree.block.modules[1].gamma, gamma)


def test_restored_on_error_puts_back_every_weight_and_update_state_of_an_update_that_failed_half_way():
    tree = _block_whose_update_overflows_at_its_last_parameter()
    before = tree_state(tree)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        with restored_on_error(tree):
            tree.block.update(0.1)
    assert_same_state(tree, before)  # bit for bit: weights, γ, β, Adam's moments and step counts


def test_restored_on_error_puts_back_an_update_that_a_body_inside_it_finished():
    """A body that ends inside one that raises: the outer transaction undoes the inner one's steps too."""
    tree = _trained_dni_block()
    tree.block.forward(_x(3, seed=3))
    tree.block.backward(_x(4, seed=4))
    before = tree_state(tree)
    with pytest.raises(RuntimeError, match="after the inner body"):
        with restored_on_error(tree):
            with restored_on_error(tree.block):
                tree.block.update(0.1)
            assert not np.array_equal(tree.block.modules[0].weights, before["block.modules.0:weights"])
            raise RuntimeError("after the inner body")
    assert_same_state(tree, before)


@pytest.mark.parametrize("raises", [False, True], ids=["body-ends", "body-raises"])
def test_running_averages_kept_puts_back_every_buffer_and_nothing_else(raises):
    tree = _trained_dni_block()
    running = {path: value for path, value in tree_state(tree).items() if "running" in path}
    with pytest.raises(RuntimeError) if raises else contextlib.nullcontext():
        with running_averages_kept(tree):
            tree.forward(_x(3, seed=3))
            tree.generator.forward(tree.output)
            if raises:
                raise RuntimeError("stopped")
    after = tree_state(tree)
    for path, value in running.items():
        np.testing.assert_array_equal(after[path], value, err_msg=path)
    np.testing.assert_array_equal(after["block.modules.0:input"], _x(3, seed=3))  # the caches are the new batch's
