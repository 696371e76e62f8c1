"""The binary-addition task of "Deep Learning without Backpropagation", as data_gen builds it.

With ``output_dim = d``: operands a, b below 2**(d-1); x is the d bits of a then
the d bits of b, shape (n, 2d); y is the d bits of a + b, shape (n, d); bits are
the floats 0.0 / 1.0, most significant first.
"""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import example_counts, seeds, sum_widths

from data_gen.binary_addition import (bits_to_int, generate_dataset, generate_split, int_to_bits,
                                      split_operands)


def reference_bits(value, width):
    """Bits of ``value``, most significant first, by np.binary_repr: an oracle independent of int_to_bits."""
    return [float(c) for c in np.binary_repr(int(value), width=width)]


def reference_int(bits):
    """The integer a row of 0.0 / 1.0 bits spells, most significant first, read as a string."""
    return int("".join(str(int(b)) for b in bits), 2)


def operand_pairs(x):
    a, b = split_operands(x)
    return list(zip(a.tolist(), b.tolist()))


def test_data_gen_imports_on_its_own():
    result = subprocess.run([sys.executable, "-c", "import data_gen; import sys; print('sgrad' in sys.modules)"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# --- the encoding -----------------------------------------------------------------


def test_int_to_bits_writes_the_most_significant_bit_first():
    np.testing.assert_array_equal(int_to_bits([5], 4), [[0.0, 1.0, 0.0, 1.0]])
    np.testing.assert_array_equal(int_to_bits([1, 8, 15], 4), [[0, 0, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1]])


def test_bits_to_int_inverts_int_to_bits():
    values = np.array([0, 1, 5, 127, 200, 255])
    np.testing.assert_array_equal(bits_to_int(int_to_bits(values, 8)), values)


def test_bits_to_int_reads_probabilities_as_bits_at_one_half():
    assert bits_to_int(np.array([[0.2, 0.5, 0.49, 0.9]])).tolist() == [0b0101]


def test_split_operands_reads_a_then_b():
    x = np.array([[0, 1, 0, 1, 0, 0, 1, 1]], dtype=float)  # a = 5, b = 3 in 4 bits each
    a, b = split_operands(x)
    assert (a.tolist(), b.tolist()) == ([5], [3])


# --- generate_dataset: compatible with the blog post ------------------------------


def test_generate_dataset_has_the_blog_posts_shapes():
    x, y = generate_dataset(output_dim=8, num_examples=1000, seed=0)
    assert x.shape == (1000, 16)
    assert y.shape == (1000, 8)


def test_generate_dataset_holds_float_bits_zero_or_one():
    x, y = generate_dataset(output_dim=8, num_examples=1000, seed=0)
    assert x.dtype == np.float64 and y.dtype == np.float64
    assert set(np.unique(x).tolist()) == {0.0, 1.0}
    assert set(np.unique(y).tolist()) == {0.0, 1.0}


def test_generate_dataset_operands_lie_below_two_to_the_output_dim_minus_one():
    x, _ = generate_dataset(output_dim=8, num_examples=1000, seed=0)
    a, b = split_operands(x)
    assert a.min() >= 0 and b.min() >= 0
    assert a.max() < 2 ** 7 and b.max() < 2 ** 7
    # The top bit of each operand is therefore always 0: columns 0 and 8.
    assert x[:, 0].max() == 0.0 and x[:, 8].max() == 0.0


def test_generate_dataset_rows_add_up():
    x, y = generate_dataset(output_dim=8, num_examples=1000, seed=0)
    a, b = split_operands(x)
    np.testing.assert_array_equal(a + b, bits_to_int(y))


@settings(max_examples=30, deadline=None)
@given(output_dim=sum_widths, num_examples=example_counts, seed=seeds)
def test_generate_dataset_rows_add_up_for_every_width(output_dim, num_examples, seed):
    x, y = generate_dataset(output_dim=output_dim, num_examples=num_examples, seed=seed)
    assert x.shape == (num_examples, 2 * output_dim)
    assert y.shape == (num_examples, output_dim)
    a, b = split_operands(x)
    assert a.max() < 2 ** (output_dim - 1) and b.max() < 2 ** (output_dim - 1)
    np.testing.assert_array_equal(a + b, bits_to_int(y))


def test_generate_dataset_is_vectorized_and_matches_a_per_example_reference():
    # A per-example Python loop would crawl here; this checks the result, not the time.
    x, y = generate_dataset(8, 100_000, seed=1)
    assert x.shape == (100_000, 16) and y.shape == (100_000, 8)
    rows = np.random.default_rng(2).choice(100_000, size=200, replace=False)
    for i in rows:
        a, b = reference_int(x[i, :8]), reference_int(x[i, 8:])
        expected = reference_bits(a, 8) + reference_bits(b, 8), reference_bits(a + b, 8)
        assert (x[i].tolist(), y[i].tolist()) == expected, f"row {i}: mine {x[i], y[i]}, theirs {expected}"


def test_generate_dataset_draws_every_operand_value():
    x, _ = generate_dataset(8, 100_000, seed=1)
    a, b = split_operands(x)
    assert np.unique(a).tolist() == list(range(128))
    assert np.unique(b).tolist() == list(range(128))


# --- generate_split: held-out pairs are unseen ------------------------------------


def test_generate_split_has_the_requested_sizes():
    x_train, y_train, x_test, y_test = generate_split(output_dim=8, num_train=300, num_test=200, seed=0)
    assert x_train.shape == (300, 16) and y_train.shape == (300, 8)
    assert x_test.shape == (200, 16) and y_test.shape == (200, 8)


def test_generate_split_shares_no_operand_pair_between_train_and_test():
    x_train, _, x_test, _ = generate_split(output_dim=6, num_train=600, num_test=400, seed=0)
    assert set(operand_pairs(x_train)).isdisjoint(operand_pairs(x_test))


def test_generate_split_repeats_no_operand_pair_within_a_side():
    x_train, _, x_test, _ = generate_split(output_dim=6, num_train=600, num_test=400, seed=0)
    assert len(set(operand_pairs(x_train))) == 600
    assert len(set(operand_pairs(x_test))) == 400


def test_generate_split_rows_add_up():
    x_train, y_train, x_test, y_test = generate_split(output_dim=8, num_train=300, num_test=200, seed=0)
    for x, y in ((x_train, y_train), (x_test, y_test)):
        a, b = split_operands(x)
        np.testing.assert_array_equal(a + b, bits_to_int(y))


def test_generate_split_refuses_more_pairs_than_exist_and_names_the_numbers():
    # output_dim=2: operands in {0, 1}, so 4 ordered pairs.
    with pytest.raises(ValueError, match=r"only 4 distinct operand pairs.*= 5"):
        generate_split(output_dim=2, num_train=3, num_test=2, seed=0)


def test_generate_split_can_use_every_pair():
    x_train, _, x_test, _ = generate_split(output_dim=2, num_train=3, num_test=1, seed=0)
    assert sorted(operand_pairs(x_train) + operand_pairs(x_test)) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_generate_split_can_use_every_pair_of_a_wider_task():
    x_train, _, x_test, _ = generate_split(output_dim=5, num_train=200, num_test=56, seed=3)
    pairs = operand_pairs(x_train) + operand_pairs(x_test)
    assert len(set(pairs)) == 256 == 4 ** 4


# --- randomness: seed or rng, never global state ----------------------------------


@pytest.mark.parametrize("make", [
    lambda **kw: generate_dataset(8, 200, **kw),
    lambda **kw: generate_split(8, 150, 50, **kw),
], ids=["generate_dataset", "generate_split"])
def test_same_seed_gives_identical_arrays(make):
    for first, second in zip(make(seed=7), make(seed=7)):
        np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("make", [
    lambda **kw: generate_dataset(8, 200, **kw),
    lambda **kw: generate_split(8, 150, 50, **kw),
], ids=["generate_dataset", "generate_split"])
def test_different_seeds_give_different_arrays(make):
    first, second = make(seed=7), make(seed=8)
    assert not np.array_equal(first[0], second[0])


def test_rng_gives_the_same_arrays_as_the_seed_it_was_made_from():
    x_seed, y_seed = generate_dataset(8, 200, seed=7)
    x_rng, y_rng = generate_dataset(8, 200, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(x_rng, x_seed)
    np.testing.assert_array_equal(y_rng, y_seed)


def test_generate_split_accepts_an_rng():
    x_train, _, x_test, _ = generate_split(8, 150, 50, rng=np.random.default_rng(7))
    assert x_train.shape == (150, 16) and x_test.shape == (50, 16)


def test_one_rng_advances_between_calls():
    rng = np.random.default_rng(7)
    first, _ = generate_dataset(8, 200, rng=rng)
    second, _ = generate_dataset(8, 200, rng=rng)
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("make", [generate_dataset, generate_split])
def test_seed_and_rng_together_are_refused(make):
    with pytest.raises(ValueError, match="either seed or rng"):
        make(8, 10, seed=1, rng=np.random.default_rng(1))


# --- errors at the boundary ---------------------------------------------------------


@pytest.mark.parametrize("make", [generate_dataset, generate_split])
@pytest.mark.parametrize("output_dim", [1, 63, 0, -3])
def test_output_dim_outside_two_to_sixty_two_is_refused(make, output_dim):
    with pytest.raises(ValueError, match=rf"output_dim must be between 2 and 62.*got {output_dim}"):
        make(output_dim, 10, seed=0)


@pytest.mark.parametrize("make", [generate_dataset, generate_split])
@pytest.mark.parametrize("output_dim", [8.0, True, "8"])
def test_output_dim_that_is_not_an_integer_is_refused(make, output_dim):
    with pytest.raises(TypeError, match="output_dim must be an integer"):
        make(output_dim, 10, seed=0)


def test_output_dim_may_be_a_numpy_integer():
    x, y = generate_dataset(np.int64(8), 10, seed=0)
    assert x.shape == (10, 16) and y.shape == (10, 8)


@pytest.mark.parametrize("num_examples", [0, -5])
def test_num_examples_below_one_is_refused(num_examples):
    with pytest.raises(ValueError, match=rf"num_examples must be at least 1; got {num_examples}"):
        generate_dataset(8, num_examples, seed=0)


def test_num_examples_that_is_not_an_integer_is_refused():
    with pytest.raises(TypeError, match="num_examples must be an integer"):
        generate_dataset(8, 10.0, seed=0)


def test_generate_split_refuses_an_empty_training_set():
    with pytest.raises(ValueError, match="num_train must be at least 1; got 0"):
        generate_split(8, 0, 10, seed=0)


def test_generate_split_refuses_a_negative_test_set():
    with pytest.raises(ValueError, match="num_test must be at least 0; got -1"):
        generate_split(8, 10, -1, seed=0)
