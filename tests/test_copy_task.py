"""Copy and Repeat Copy batches, the error in bits, and the curriculum (data_gen.copy_task)."""

import numpy as np
import pytest

import data_gen
from data_gen.copy_task import Curriculum, bits_error, copy_batch, repeat_copy_batch


def test_copy_batch_has_the_documented_shapes_and_dtype():
    x, y, mask = copy_batch(5, 3, bits=4, seed=0)
    assert x.shape == (5, 7, 5) and y.shape == (5, 7, 4) and mask.shape == (5, 7)
    assert x.dtype == y.dtype == mask.dtype == np.float64
    assert copy_batch(2, 1, seed=0, dtype=np.float32)[0].dtype == np.float32


def test_copy_batch_places_the_delimiter_after_the_vectors_in_its_own_channel():
    x, _, _ = copy_batch(6, 4, bits=3, seed=1)
    assert (x[:, 4, 3] == 1).all() and (x[:, 4, :3] == 0).all()
    assert (np.delete(x[:, :, 3], 4, axis=1) == 0).all()
    assert (x[:, 5:] == 0).all()  # blank while the net answers


def test_copy_batch_target_is_the_input_sequence_shifted_by_length_plus_one():
    x, y, mask = copy_batch(8, 5, bits=6, seed=2)
    np.testing.assert_array_equal(y[:, 6:], x[:, :5, :6])
    assert (y[:, :6] == 0).all()
    np.testing.assert_array_equal(mask, np.repeat([[0] * 6 + [1] * 5], 8, axis=0))
    assert set(np.unique(x[:, :5, :6])) == {0.0, 1.0}


def test_repeat_copy_batch_reproduces_the_sequence_r_times_then_marks_the_end():
    x, y, mask = repeat_copy_batch(4, 3, 2, bits=5, max_repeats=4, seed=3)
    assert x.shape == (4, 3 + 2 * 3 + 2, 7) and y.shape == (4, 11, 6) and mask.shape == (4, 11)
    vectors = x[:, :3, :5]
    np.testing.assert_array_equal(y[:, 4:7, :5], vectors)
    np.testing.assert_array_equal(y[:, 7:10, :5], vectors)
    assert (y[:, 10, 5] == 1).all() and (y[:, 10, :5] == 0).all() and (y[:, :10, 5] == 0).all()
    assert (x[:, 3, 5] == 1).all() and np.allclose(x[:, 3, 6], 2 / 4)  # delimiter, and R / max_repeats
    assert (np.delete(x[:, :, 5:], 3, axis=1) == 0).all()
    np.testing.assert_array_equal(mask[0], [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1])


def test_repeat_copy_batch_with_one_r_per_sequence_ends_each_where_its_r_says():
    x, y, mask = repeat_copy_batch(3, 2, np.array([1, 3, 2]), bits=4, max_repeats=3, seed=4)
    assert x.shape[1] == 2 + 3 * 2 + 2
    ends = np.argmax(y[:, :, 4], axis=1)
    np.testing.assert_array_equal(ends, [3 + 2 * r for r in (1, 3, 2)])
    np.testing.assert_array_equal(mask.sum(axis=1), [2 * r + 1 for r in (1, 3, 2)])
    assert (y[0, 6:] == 0).all() and (mask[0, 6:] == 0).all()  # the shortest is blank after its end
    np.testing.assert_array_equal(y[1, 3:9, :4], np.tile(x[1, :2, :4], (3, 1)))
    np.testing.assert_allclose(x[:, 2, 5], [1 / 3, 1, 2 / 3])


def test_the_same_seed_gives_the_same_batch_and_an_rng_carries_on():
    for make in (lambda **k: copy_batch(4, 3, **k), lambda **k: repeat_copy_batch(4, 3, 2, **k)):
        for a, b in zip(make(seed=7), make(seed=7)):
            np.testing.assert_array_equal(a, b)
        rng = np.random.default_rng(7)
        first, second = make(rng=rng)[0], make(rng=rng)[0]
        assert not np.array_equal(first, second)


@pytest.mark.parametrize("call, words", [
    (lambda: copy_batch(4, 0), "length must be at least 1; got 0"),
    (lambda: copy_batch(4, 2, bits=0), "bits must be at least 1; got 0"),
    (lambda: copy_batch(0, 2), "batch must be at least 1; got 0"),
    (lambda: copy_batch(2, 2, dtype=np.int64), "got int64"),
    (lambda: repeat_copy_batch(4, 2, 11), "got values from 11 to 11"),
    (lambda: repeat_copy_batch(4, 2, 5, max_repeats=4), "max_repeats=4"),
    (lambda: repeat_copy_batch(4, 2, 0), "got values from 0 to 0"),
    (lambda: repeat_copy_batch(4, 2, np.array([1, 2])), "(4,) integers"),
    (lambda: repeat_copy_batch(4, 2, 1.5), "got 1.5"),
    (lambda: Curriculum(threshold=0), "got 0"),
])
def test_bad_arguments_raise_value_error_saying_what_came(call, words):
    with pytest.raises(ValueError, match=None) as error:
        call()
    assert words in str(error.value)


def test_a_non_integer_length_is_a_type_error():
    with pytest.raises(TypeError, match="length must be an integer; got 2.0"):
        copy_batch(4, 2.0)


def test_bits_error_counts_the_wrong_bits_on_scored_steps_only():
    _, y, mask = copy_batch(3, 2, bits=4, seed=5)
    logits = np.where(y > 0.5, 5.0, -5.0)
    np.testing.assert_array_equal(bits_error(logits, y, mask), [0, 0, 0])
    logits[0, 3, :2] *= -1      # two wrong bits on a scored step
    logits[1, 0, :] *= -1       # wrong, but on a step that is not scored
    logits[2, 4, :] *= -1       # a whole vector wrong
    np.testing.assert_array_equal(bits_error(logits, y, mask), [2, 0, 4])
    with pytest.raises(ValueError, match=r"mask must be a NumPy array of shape \(3, 5\)"):
        bits_error(logits, y, mask[:, :4])


def test_curriculum_raises_n_when_the_average_error_falls_below_the_paper_threshold():
    curriculum = Curriculum()
    assert curriculum.threshold == 0.15 and curriculum.length == 1 and curriculum.solved == 0
    assert not curriculum.update(10, [0.0, 0.4])         # average 0.2: not yet
    assert curriculum.update(20, [0.0, 0.2]) and curriculum.length == 2 and curriculum.solved == 1
    assert curriculum.update(30, [0.1]) and curriculum.solved == 2
    again = Curriculum.from_state(curriculum.state())
    assert again.length == 3 and again.history == curriculum.history == [(10, 1, 0.2), (20, 1, 0.1), (30, 2, 0.1)]


def test_data_gen_exports_the_copy_tasks():
    assert data_gen.copy_batch is copy_batch and data_gen.Curriculum is Curriculum
    assert data_gen.copy_task.repeat_copy_batch is repeat_copy_batch


@pytest.mark.parametrize("make, message", [
    (lambda: copy_batch(10**6, 10**6), "a batch of 1000000 Copy sequences of 2000001 steps (8 bits each) would take "
                                       "416,000,144,000,000 bytes (387,430.3 GiB), more than the 2 GiB"),
    (lambda: repeat_copy_batch(2, 1, 10**8, max_repeats=10**8), "a batch of 2 Repeat Copy sequences of 100000003 steps"),
    (lambda: copy_batch(10, 10, bits=10**9), "a batch of 10 Copy sequences of 21 steps (1000000000 bits each)"),
], ids=["copy", "repeat-copy", "bits"])
def test_a_batch_too_large_for_memory_is_refused_before_anything_is_allocated(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(message)
    assert str(info.value).endswith("; use a smaller batch, length, bits or number of repeats")
