"""The order of the batches (sgrad.training.batches.BatchOrder): a new permutation per pass, full batches, carried on
exactly."""

import numpy as np

from sgrad.training.batches import BatchOrder


def test_each_pass_takes_full_batches_of_a_new_permutation_and_skips_the_leftover():
    batches = BatchOrder(10, 3, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    for _ in range(3):
        order = rng.permutation(10)
        for start in (0, 3, 6):  # the tenth example of each pass is left over
            np.testing.assert_array_equal(batches.next(), order[start:start + 3])


def test_an_order_rebuilt_from_its_state_carries_on_with_the_same_batches():
    batches = BatchOrder(10, 4, np.random.default_rng(3))
    for _ in range(5):
        batches.next()
    state = batches.state()
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    carried = BatchOrder(10, 4, rng, state["order"], state["position"])
    for _ in range(7):
        np.testing.assert_array_equal(carried.next(), batches.next())
