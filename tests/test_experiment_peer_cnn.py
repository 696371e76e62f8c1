"""``sgrad paper --arch peer-cnn``: koz4k/dni-pytorch's MNIST CNN example (sgrad/experiments/mnist_cnn.py).

Its layers and its parameter count against the peer's, layer by layer; the interface on the pooled maps before
the ReLU; the synthesizer's start; the whole network's gradient against central differences; every method
trains and records; settings the peer fixes refused; the command; and, on real MNIST, a short run that learns.
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_gradients_match, tiny_mnist

from sgrad.dni.decoupled import DNIBlock
from sgrad.experiments import mnist
from sgrad.experiments.mnist import PaperConfig, build_network, mean_cross_entropy, run_grid, train_paper
from sgrad.nn.conditioned_conv import ConditionedConv2d
from sgrad.nn.conv import Activation2d, Conv2d
from sgrad.nn.dropout import Dropout, Dropout2d

METHODS = ("backprop", "no-bprop", "dni", "cdni")
TINY = PaperConfig(arch="peer-cnn", iterations=4, eval_every=2, batch_size=8, alpha=1e-3, loss="mean", seed=0)

# The peer's parameters, as examples/mnist-cnn/main.py builds them (PyTorch's shapes: a Linear's weight is
# (out, in), a Conv2d's (out, in, k, k)), and its synthesizer's.
PEER_NET = {"conv1.weight": (10, 1, 5, 5), "conv1.bias": (10,), "conv1_bn.weight": (10,), "conv1_bn.bias": (10,),
            "conv2.weight": (20, 10, 5, 5), "conv2.bias": (20,), "conv2_bn.weight": (20,), "conv2_bn.bias": (20,),
            "fc1.weight": (50, 320), "fc1.bias": (50,), "fc1_bn.weight": (50,), "fc1_bn.bias": (50,),
            "fc2.weight": (10, 50), "fc2.bias": (10,), "fc2_bn.weight": (10,), "fc2_bn.bias": (10,)}
PEER_SYNTHESIZER = {"input_trigger.weight": (20, 20, 5, 5), "input_trigger.bias": (20,),
                    "input_context.weight": (20, 10), "input_context.bias": (20,),
                    "hidden.weight": (20, 20, 5, 5), "hidden.bias": (20,),
                    "output.weight": (20, 20, 5, 5), "output.bias": (20,)}


def _peer_sizes(method):
    """The sizes of the peer's parameters for ``method``.  Without --context the peer still builds its synthesizer's
    input_context, but never calls it: those 220 numbers get no gradient, and sgrad's DNI does not build them."""
    shapes = dict(PEER_NET)
    if method in ("dni", "cdni"):
        shapes.update({name: shape for name, shape in PEER_SYNTHESIZER.items()
                       if method == "cdni" or not name.startswith("input_context")})
    return sorted(int(np.prod(shape)) for shape in shapes.values())


def _built_sizes(layers):
    return sorted(p.size for layer in layers for _, module in layer.submodules() for p in module.own_parameters().values())


@pytest.fixture(scope="module")
def images():
    """28×28 one-channel images as rows of 784 pixels in [0, 1], as prepare_mnist gives MNIST."""
    rng = np.random.default_rng(1)
    return (rng.random((64, 784), dtype=np.float32), rng.integers(0, 10, 64),
            rng.random((32, 784), dtype=np.float32), rng.integers(0, 10, 32))


@pytest.mark.parametrize("method", METHODS)
def test_the_network_has_the_peers_parameters_layer_for_layer_and_parameter_count_counts_them(method):
    layers = build_network(method, 784, TINY)
    assert _built_sizes(layers) == _peer_sizes(method)
    assert mnist.parameter_count(method, 784, TINY) == sum(_peer_sizes(method))


def test_the_parameter_counts_are_22020_without_a_synthesizer_and_30060_or_30280_more_with_one():
    """The sums of PEER_NET and PEER_SYNTHESIZER, written out: conv 1→10 5×5 with bias 260, BN 20, conv 10→20 5020,
    BN 40, Linear 320→50 16050, BN 100, Linear 50→10 510, BN 20; three 20→20 5×5 convolutions with bias 10020
    each, the label's Linear 10→20 220."""
    counts = {method: mnist.parameter_count(method, 784, TINY) for method in METHODS}
    assert counts == {"backprop": 22020, "no-bprop": 22020, "dni": 52080, "cdni": 52300}


def test_the_interface_sits_on_the_pooled_maps_of_block_2_before_the_relu_and_the_top_opens_with_it(images):
    for method, condition_dim in (("dni", 0), ("cdni", 10)):
        below, above = build_network(method, 784, TINY)
        assert isinstance(below, DNIBlock) and below.generator.condition_dim == condition_dim
        kinds = [type(m).__name__ for m in below.block.modules]
        assert kinds == ["Conv2d", "BatchNorm2d", "MaxPool2d", "Activation2d", "Conv2d", "BatchNorm2d", "Dropout2d",
                         "MaxPool2d"]
        assert [type(m).__name__ for m in above.modules] == ["Activation2d", "Flatten", "Layer", "BatchNorm",
                                                             "Activation", "Dropout", "Layer", "BatchNorm"]
        assert all(conv.padding == 0 for conv in below.block.modules if isinstance(conv, Conv2d)), "valid convolutions"
        h = below.forward(images[0][:8].reshape(8, 1, 28, 28))
        assert h.shape == (8, 20, 4, 4) and h.min() < 0, "h is before the ReLU"
        assert isinstance(above.modules[0], Activation2d)
        assert [m.p for m in below.block.modules + above.modules if isinstance(m, Dropout)] == [0.5, 0.5]
        assert isinstance(below.block.modules[6], Dropout2d)


def test_the_synthesizer_is_three_padded_5x5_convolutions_and_starts_at_its_output_bias(images):
    for method, first in (("dni", Conv2d), ("cdni", ConditionedConv2d)):
        below, _ = build_network(method, 784, TINY)
        net = below.generator.net
        assert [type(part.modules[0]) for part in net.modules[:2]] == [first, Conv2d]
        assert all(type(part.modules[-1]).__name__ == "Activation2d" for part in net.modules[:2]), "no batch norm"
        output = net.modules[-1]
        np.testing.assert_array_equal(output.weights, np.zeros((20, 20, 5, 5)))
        assert 0 < np.abs(output.bias).max() <= 1 / np.sqrt(500), "PyTorch's default bias, within 1/sqrt(fan_in)"
        h = below.forward(images[0][:8].reshape(8, 1, 28, 28))
        c = np.eye(10, dtype=np.float32)[images[1][:8]] if method == "cdni" else None
        g_hat = below.generator.forward(h, c)
        np.testing.assert_allclose(g_hat, np.broadcast_to(output.bias[None, :, None, None], h.shape))


def test_pytorch_init_draws_every_weight_and_bias_within_one_over_the_square_root_of_its_fan_in():
    below, above = build_network("backprop", 784, TINY)
    layers = [m for m in below.modules + above.modules if hasattr(m, "weights")]
    fan_ins = [25, 250, 320, 50]
    assert len(layers) == len(fan_ins)
    for layer, fan_in in zip(layers, fan_ins):
        for array in (layer.weights, layer.bias):
            assert 0.8 / np.sqrt(fan_in) < np.abs(array).max() <= 1 / np.sqrt(fan_in)


def _dropouts(layers):
    return [m for layer in layers for _, m in layer.submodules() if isinstance(m, Dropout)]


def test_the_whole_networks_gradient_matches_central_differences_with_the_dropout_masks_fixed():
    """backprop in float64 on 4 images: dL/dθ by the layers' backward passes against central differences of the
    mean cross-entropy, for the smaller arrays of every kind of layer (conv, both batch norms, the dense layers)."""
    config = dataclasses.replace(TINY, dtype="float64")
    layers = build_network("backprop", 784, config)
    rng = np.random.default_rng(5)
    x, y = rng.random((4, 1, 28, 28)), np.eye(10)[rng.integers(0, 10, 4)]
    dropouts = _dropouts(layers)

    def loss():
        for dropout in dropouts:
            dropout.masks_drawn[...] = 0
        h = x
        for layer in layers:
            h = layer.forward(h)
        return mean_cross_entropy(h, y)

    _, delta = loss()
    for layer in layers[::-1]:
        delta = layer.backward(delta)
    below, above = layers
    arrays = {"conv1.weights": below.modules[0].weights, "bn2d.gamma": below.modules[1].gamma,
              "conv2.bias": below.modules[4].bias, "bn2d_2.beta": below.modules[5].beta,
              "fc2.weights": above.modules[6].weights, "logit_bn.gamma": above.modules[7].gamma}
    mine = {"conv1.weights": below.modules[0].weights_grad, "bn2d.gamma": below.modules[1].gradients["gamma"],
            "conv2.bias": below.modules[4].bias_grad, "bn2d_2.beta": below.modules[5].gradients["beta"],
            "fc2.weights": above.modules[6].weights_grad, "logit_bn.gamma": above.modules[7].gradients["gamma"]}
    assert_gradients_match(lambda: loss()[0], mine, arrays, "the peer's CNN")
    np.testing.assert_allclose(mine["conv2.bias"], 0, atol=1e-12, err_msg="batch norm takes the bias out again")


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_and_records_its_accuracy(images, method):
    history = train_paper(method, images, TINY)
    assert history["iteration"] == [2, 4]
    assert all(0.0 <= a <= 1.0 for a in history["test_accuracy"])
    assert all(np.isfinite(history["train_loss"]))


def test_every_method_starts_from_the_same_weights_and_the_dropouts_draw_the_same_masks():
    arrays = {}
    for method in METHODS:
        layers = build_network(method, 784, TINY)
        arrays[method] = [p for layer in layers for p in layer.parameters.values()]
        arrays[method] += [np.array(d.seed) for d in _dropouts(layers)]
    for method in METHODS[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(arrays["backprop"], arrays[method]))


@pytest.mark.parametrize("method", ("backprop", "cdni"))
def test_a_run_carried_on_from_a_checkpoint_ends_as_the_run_in_one_go_bit_for_bit(images, method, tmp_path):
    """The checkpoint holds each dropout's count of masks drawn, so the run carried on draws the masks it would have."""
    whole = train_paper(method, images, TINY)
    path = tmp_path / "run.npz"
    train_paper(method, images, dataclasses.replace(TINY, iterations=2), checkpoint=path, checkpoint_every=2)
    carried_on = train_paper(method, images, TINY, checkpoint=path, checkpoint_every=2)
    assert carried_on["test_accuracy"] == whole["test_accuracy"]
    assert carried_on["train_loss"] == whole["train_loss"]


@pytest.mark.parametrize("bad, fragment", [
    ({"hidden": 16}, "hidden shapes sgrad's own networks, but arch='peer-cnn' is koz4k/dni-pytorch's MNIST CNN "
                     "example whole, its layers, synthesizer and interface fixed; leave hidden at 256, or use "
                     "arch='cnn'"),
    ({"init": "pytorch", "interfaces": (2,)}, "interfaces, init shape sgrad's own networks"),
    ({"channels": 20}, "leave channels at 64"),
    ({"generator_batchnorm": False}, "leave generator_batchnorm at True"),
    ({"depth": 4}, "leave depth at 3"),
    ({"logit_batchnorm": True, "interface_position": "before"}, "interface_position, logit_batchnorm shape"),
])
def test_settings_that_the_peer_fixes_are_refused(bad, fragment):
    with pytest.raises(ValueError) as info:
        PaperConfig(arch="peer-cnn", **bad)
    assert fragment in str(info.value)


def test_the_synthetic_loss_and_images_too_small_for_two_5x5_convolutions_are_refused(images):
    with pytest.raises(ValueError, match="the synthetic loss is built for fully connected nets only .* "
                                         "got arch='peer-cnn'"):
        train_paper("synthetic-loss", images, TINY)
    rng = np.random.default_rng(0)
    small = (rng.random((16, 225), dtype=np.float32), rng.integers(0, 10, 16),
             rng.random((8, 225), dtype=np.float32), rng.integers(0, 10, 8))
    with pytest.raises(ValueError, match="takes images of at least 16 x 16 pixels.*got rows of 15 x 15"):
        train_paper("backprop", small, TINY)


def test_peer_cnn_cells_have_names_of_their_own_and_ignore_the_fields_the_peer_fixes(images, tmp_path):
    run_grid(images, methods=("dni",), config=TINY, out_dir=tmp_path)
    cell = json.loads((tmp_path / "cells" / "dni-peer-cnn-depth3.json").read_text())
    config = cell["settings"]["config"]
    assert config["arch"] == "peer-cnn" and config["loss"] == "mean"
    assert not {"hidden", "channels", "init", "generator_hidden", "interfaces"} & set(config)


def test_the_paper_command_trains_the_peers_cnn(tmp_path):
    tiny_mnist(tmp_path)
    env = dict(os.environ, SGRAD_DATA_DIR=str(tmp_path))
    command = [sys.executable, "-m", "sgrad", "paper", "--arch", "peer-cnn", "--methods", "backprop,cdni",
               "--iterations", "2", "--eval-every", "2", "--batch-size", "8", "--lr", "1e-3", "--loss", "mean",
               "--no-verify", "--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "cells").iterdir()) == [
        "backprop-peer-cnn-depth3.json", "cdni-peer-cnn-depth3.json"]
    refused = subprocess.run(command[:-2] + ["--init", "pytorch", "--out", str(tmp_path / "other")],
                             capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "init shapes sgrad's own networks, but arch='peer-cnn'" in refused.stderr


def _real_mnist():
    folder = os.environ.get("SGRAD_DATA_DIR")
    path = pathlib.Path(folder) / "mnist.npz" if folder else None
    return path if path is not None and path.is_file() else None


@pytest.mark.skipif(_real_mnist() is None, reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz")
def test_on_real_mnist_every_method_learns_in_a_few_hundred_steps():
    """Reduced budget (5,000 training images, 300 steps of 64, Adam at 1e-3, the mean loss, 2,000 test images;
    about 45 s of CPU).

    Measured (the subset 0, the seed 0, then 1): backprop 93.10 / 92.70%, dni 82.10 / 84.75%, cdni 85.00 / 82.20%.
    At this budget the synthesizer has not caught up yet; docs/results/complete-unlock.md has the full runs.
    """
    from data_gen.mnist import load_mnist, prepare_mnist

    x_train, y_train, x_test, y_test = prepare_mnist(load_mnist(_real_mnist()), subset=5_000, seed=0)
    data = (x_train, y_train, x_test[:2000], y_test[:2000])
    config = dataclasses.replace(TINY, iterations=300, eval_every=300, batch_size=64)
    accuracy = {m: train_paper(m, data, config)["test_accuracy"][-1] for m in ("backprop", "dni", "cdni")}
    assert accuracy["backprop"] >= 0.88, accuracy
    assert min(accuracy["dni"], accuracy["cdni"]) >= 0.75, accuracy
    assert accuracy["backprop"] >= max(accuracy["dni"], accuracy["cdni"]) + 0.04, accuracy
