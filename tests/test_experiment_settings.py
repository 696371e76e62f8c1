"""What every experiment's settings share, and the checks made before any work (sgrad.training.settings)."""

import numpy as np
import pytest

import sgrad
from sgrad.training import settings


def test_check_methods_takes_one_name_or_a_list():
    assert settings.check_methods("dni", ("backprop", "dni")) == ["dni"]
    assert settings.check_methods(("dni", "backprop"), ("backprop", "dni")) == ["dni", "backprop"]


@pytest.mark.parametrize("methods", [[], ["dni", "sgd"]], ids=["none", "unknown"])
def test_check_methods_refuses_an_empty_or_unknown_list(methods):
    with pytest.raises(ValueError, match=r"methods must be a non-empty list drawn from backprop, dni; got "):
        settings.check_methods(methods, ("backprop", "dni"))


SPLIT = (np.zeros((8, 3)), np.zeros((8, 2)), np.zeros((4, 3)), np.zeros((4, 2)))


def check_targets(y_train, y_test):
    sgrad.argument_checks.check_batch(y_train, "y_train")
    sgrad.argument_checks.check_batch(y_test, "y_test", y_train.shape[1])


@pytest.mark.parametrize("data, batch_size, dtype, error, message", [
    (SPLIT, 9, "float64", ValueError, r"batch_size \(9\) is larger than the training set \(8 examples\)"),
    (SPLIT[:3], 2, "float64", TypeError, r"data must be a tuple \(x_train, y_train, x_test, y_test\); got tuple of 3"),
    ((SPLIT[0], SPLIT[1][:7], *SPLIT[2:]), 2, "float64", ValueError,
     "x_train and y_train must have as many rows; got 8 and 7"),
    ((np.full((8, 3), 1e39), *SPLIT[1:]), 2, "float32", ValueError,
     r"x_train holds 1e\+39, beyond the largest float32 \(3.40282e\+38\): cast to float32 it would become inf"),
    ((SPLIT[0].view(np.matrix), *SPLIT[1:]), 2, "float64", TypeError, r"x_train .* numpy.matrix.*np.asarray\(x_train\)"),
], ids=["batch-too-large", "three-arrays", "rows-differ", "beyond-float32", "matrix"])
def test_check_split_refuses_data_that_cannot_be_trained_on(data, batch_size, dtype, error, message):
    with pytest.raises(error, match=message):
        settings.check_split(data, batch_size, dtype, check_targets)


def test_check_split_takes_float64_data_that_fits_float32():
    settings.check_split((np.full((8, 3), 3e38), *SPLIT[1:]), 8, "float32", check_targets)


def test_check_network_size_counts_parameters_gradients_and_the_update_rules_state():
    limit = settings.MAX_NETWORK_BYTES
    # 4 bytes each, as a parameter, a gradient, and Adam's two moments: 16 bytes a parameter; SGD keeps no state.
    settings.check_network_size(limit // 16, "float32", "adam", "the net")
    settings.check_network_size(limit // 8, "float32", "sgd", "the net")
    with pytest.raises(ValueError, match=rf"the net would need {limit + 16:,} bytes \(2.0 GiB\) for its "
                                         rf"{limit // 16 + 1:,} parameters, their gradients and adam's state, "
                                         r"more than the 2 GiB that sgrad allows"):
        settings.check_network_size(limit // 16 + 1, "float32", "adam", "the net")




class Config:
    def __init__(self, generator_alpha):
        self.alpha, self.generator_alpha = 0.01, generator_alpha


def test_learning_rates_name_the_generators_rate_only_where_generators_learn_at_their_own():
    assert settings.learning_rates(Config(0.1), generators=True) == {"alpha": 0.01, "generator_alpha": 0.1}
    assert settings.learning_rates(Config(None), generators=True) == {"alpha": 0.01}
    assert settings.learning_rates(Config(0.1), generators=False) == {"alpha": 0.01}
