"""sgrad.experiments.char_lm: a character-level LSTM trained by truncated BPTT, with and without DNI."""

import dataclasses

import numpy as np
import pytest

from sgrad.experiments.char_lm import CharLMConfig, build_model, train_char_lm
from sgrad.training.diverged import TrainingDiverged

K = 4  # the dots between a letter and its repetition


def repeated_letters(lines: int, seed: int) -> str:
    """Lines ``a....a``: a random letter of abcd, K dots, the same letter again (K + 1 steps later), a newline.

    Only the first letter of a line is unpredictable (2 bits per K + 3 = 7 characters, 0.29 bits per
    character); a model that knows where it is in a line but forgets the letter pays 2 bits more
    for the second (0.57); the characters' frequencies alone give 1.95.
    """
    letters = np.random.default_rng(seed).choice(list("abcd"), size=lines)
    return "".join(f"{c}{'.' * K}{c}\n" for c in letters)


TEXT = repeated_letters(3000, seed=0)
REDUCED = CharLMConfig(steps=500, window=2, horizon=4, batch_size=16, hidden=32, eval_every=100, seed=0)


@pytest.fixture(scope="module")
def histories():
    return {method: train_char_lm(method, TEXT, REDUCED) for method in ("bptt", "dni")}


def test_the_unigram_entropy_is_that_of_the_held_out_characters(histories):
    # Measured: 1.949 bits, from the training text's frequencies (add-one smoothed).
    assert histories["bptt"]["unigram_bpc"] == pytest.approx(1.949, abs=0.01)


def test_both_methods_fall_far_below_the_unigram_entropy(histories):
    # Measured at step 500 (seeds 0, 1, 2): bptt 0.585, 0.485, 0.417; dni 0.411, 0.316, 0.366.
    for history in histories.values():
        assert history["valid_bpc"][-1] < 0.8 < history["unigram_bpc"] - 1.0


def test_dni_at_t2_remembers_the_letter_beyond_the_window(histories):
    # Below 0.57 bits per character the model predicts part of the repeated letter, K + 1 = 5 steps back,
    # with windows of 2.  Measured (seeds 0, 1, 2): 0.411, 0.316, 0.366.
    assert histories["dni"]["valid_bpc"][-1] < 0.5


def test_the_history_records_every_measurement(histories):
    history = histories["dni"]
    assert history["step"] == [100, 200, 300, 400, 500]
    assert len(history["valid_bpc"]) == len(history["train_bpc"]) == len(history["generator_loss"]) == 5
    assert history["vocab"] == "\n.abcd"
    assert all(np.isfinite(history["generator_loss"]))
    assert histories["bptt"]["generator_loss"] == []


def test_without_a_horizon_a_discount_keeps_the_bootstrapped_targets_bounded():
    """ĝ at every boundary of an endless text (horizon=None): with λ = 1 M's targets sum the gradient of the whole
    future, its regression loss grows without bound and the model falls back to the letters' frequencies.  With
    λ = 0.5 each window further away counts half as much, and DNI beats truncated BPTT.

    Measured after 3,000 steps, seeds 0, 1, 2: λ = 1 ends at 1.741, 1.957, 1.942 bits per character (M's loss up
    to 52, 3.8e4, 1.9e4); λ = 0.5 at 0.582, 0.300, 0.312 (M's loss at most 0.45); bptt at 0.612, 0.402, 0.449.
    About 5 s.
    """
    config = CharLMConfig(steps=3000, window=2, horizon=None, batch_size=16, hidden=32, eval_every=1000, seed=1)
    undiscounted = train_char_lm("dni", TEXT, config)
    discounted = train_char_lm("dni", TEXT, dataclasses.replace(config, synthetic_scale=0.5))
    bptt = train_char_lm("bptt", TEXT, config)
    assert max(undiscounted["generator_loss"]) > 100 and undiscounted["valid_bpc"][-1] > 1.5
    assert max(discounted["generator_loss"]) < 0.1 and discounted["valid_bpc"][-1] < 0.35
    assert discounted["valid_bpc"][-1] < bptt["valid_bpc"][-1] - 0.05


def test_the_weights_depend_on_the_seed_not_the_method():
    bptt, dni = build_model("bptt", 6, REDUCED), build_model("dni", 6, REDUCED)
    np.testing.assert_array_equal(bptt[0].weights_x, dni[0].weights_x)
    np.testing.assert_array_equal(bptt[1].weights, dni[1].weights)
    assert len(dni) == 3 and dni[2].output_dim == 2 * REDUCED.hidden


def test_a_huge_learning_rate_stops_with_training_diverged():
    config = CharLMConfig(steps=50, window=2, horizon=4, batch_size=4, hidden=8, eval_every=10, alpha=1e307,
                          update_rule="sgd")
    with pytest.raises(TrainingDiverged, match=r"diverged at step 2: .*alpha=1e\+307") as caught:
        train_char_lm("bptt", TEXT[:2000], config)
    assert "diverged_at_step" in caught.value.history


@pytest.mark.parametrize("change, match", [
    ({"window": 0}, "window"), ({"horizon": 0}, "horizon"), ({"validation_fraction": 1.0}, "validation_fraction"),
    ({"synthetic_scale": 0}, r"synthetic_scale must be a finite number in \(0, 1\], e.g. 0.5; got 0.0"),
])
def test_bad_settings_are_refused(change, match):
    settings = {"steps": 10, "window": 2, "horizon": 4} | change
    with pytest.raises(ValueError, match=match):
        CharLMConfig(**settings)


def test_a_text_too_short_for_one_step_is_refused():
    with pytest.raises(ValueError, match="too short"):
        train_char_lm("bptt", TEXT[:100], REDUCED)


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match="bptt"):
        train_char_lm("backprop", TEXT, REDUCED)
