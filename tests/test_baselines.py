"""Specification of tfscratch.baselines: the uniform guess and the counting bigram model."""

import math

import numpy as np
import pytest

from tfscratch.baselines import BigramModel, uniform_loss
from tfscratch.batching import lm_examples
from tfscratch.functional import IGNORE_INDEX
from tfscratch.tokenizers import CharTokenizer

from .conftest import expect

IGN = IGNORE_INDEX  # short, so the tiny arrays below line up

# Two tokens, four counted pairs: 0->1, 0->1, 0->0, 1->0 (the last column is ignored).
X_TINY = np.array([[0, 1, 0], [0, 0, 1]])
Y_TINY = np.array([[1, 0, IGN], [0, 1, IGN]])


def test_uniform_loss_is_log_of_the_number_of_classes():
    assert uniform_loss(27) == pytest.approx(math.log(27))
    assert uniform_loss(1) == 0.0


def test_uniform_loss_rejects_a_non_positive_size():
    with pytest.raises(ValueError, match=expect("vocab_size=0", "at least 1")):
        uniform_loss(0)


def test_bigram_counts_previous_next_pairs_and_skips_ignored_targets():
    model = BigramModel.fit(X_TINY, Y_TINY, vocab_size=2, smoothing=0.0)
    np.testing.assert_array_equal(model.counts, [[1, 2], [1, 0]])


def test_bigram_loss_on_a_hand_computable_example():
    model = BigramModel.fit(X_TINY, Y_TINY, vocab_size=2, smoothing=0.0)
    # P(1|0) = 2/3, P(0|0) = 1/3, P(0|1) = 1: mean NLL over the four pairs.
    expected = -(2 * math.log(2 / 3) + math.log(1 / 3) + math.log(1.0)) / 4
    assert model.loss(X_TINY, Y_TINY) == pytest.approx(expected)


def test_bigram_smoothing_adds_a_pseudo_count_to_every_cell():
    model = BigramModel.fit(X_TINY, Y_TINY, vocab_size=2, smoothing=1.0)
    np.testing.assert_allclose(model.probs, [[2 / 5, 3 / 5], [2 / 3, 1 / 3]])


def test_bigram_probs_rows_sum_to_one():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 6, size=(40, 5))
    Y = rng.integers(0, 6, size=(40, 5))
    model = BigramModel.fit(X, Y, vocab_size=8, smoothing=0.5)
    assert model.probs.shape == (8, 8)
    np.testing.assert_allclose(model.probs.sum(axis=1), 1.0)


def test_bigram_row_never_seen_without_smoothing_is_uniform():
    model = BigramModel.fit(X_TINY, Y_TINY, vocab_size=3, smoothing=0.0)
    np.testing.assert_allclose(model.probs[2], [1 / 3, 1 / 3, 1 / 3])


def test_bigram_loss_with_every_target_ignored_is_zero():
    model = BigramModel.fit(X_TINY, Y_TINY, vocab_size=2)
    assert model.loss(X_TINY, np.full_like(Y_TINY, IGNORE_INDEX)) == 0.0


def test_bigram_beats_uniform_on_names_it_was_fitted_on():
    names = ["emma", "ella", "emily", "anna", "amelia", "mia", "liam", "leo"]
    tok = CharTokenizer.fit(names)
    X, Y = lm_examples(names, tok, block_size=8)
    model = BigramModel.fit(X, Y, tok.vocab_size, smoothing=0.1)
    assert model.loss(X, Y) < uniform_loss(tok.vocab_size) - 1.0


def test_bigram_counts_bos_to_first_letter():
    names = ["emma", "ella", "anna"]
    tok = CharTokenizer.fit(names)
    X, Y = lm_examples(names, tok, block_size=6)
    model = BigramModel.fit(X, Y, tok.vocab_size)
    assert model.counts[tok.bos_id, tok.token_to_id("e")] == 2
    assert model.counts[tok.token_to_id("a"), tok.eos_id] == 3


def test_bigram_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match=expect("X", "5", "[0, 1]", "[0, 2)")):
        BigramModel.fit(np.array([[0, 5]]), np.array([[1, 0]]), vocab_size=2)


def test_bigram_rejects_inputs_and_targets_of_different_shapes():
    with pytest.raises(ValueError, match=expect("X", "(2, 3)", "Y", "(2, 2)", "same shape")):
        BigramModel.fit(X_TINY, Y_TINY[:, :2], vocab_size=2)


def test_bigram_sample_follows_certain_transitions_and_stops():
    # 0 -> 1 -> 2 -> 2 ... with probability one: every sample is [1, 2].
    counts = np.array([[0, 5, 0], [0, 0, 5], [0, 0, 5]])
    model = BigramModel(counts, smoothing=0.0)
    assert model.sample(3, start_id=0, stop_id=2, seed=0) == [[1, 2]] * 3


def test_bigram_sample_is_deterministic_for_a_seed():
    model = BigramModel.fit(X_TINY, Y_TINY, vocab_size=2)
    first = model.sample(5, start_id=0, max_new_tokens=6, seed=1)
    assert first == model.sample(5, start_id=0, max_new_tokens=6, seed=1)
    assert all(len(row) == 6 for row in first)
