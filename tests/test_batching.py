"""Specification of tfscratch.batching: language-model rows, padding, batches, seq2seq batches."""

import itertools

import numpy as np
import pytest

from tfscratch import batching
from tfscratch.batching import (
    batches,
    infinite_batches,
    lm_examples,
    lm_windows,
    pad_sequences,
    trim_padding,
)
from tfscratch.functional import IGNORE_INDEX
from tfscratch.tokenizers import CharTokenizer

from .conftest import expect

# -- language-model examples and padding -----------------------------------------------------


def test_lm_examples_targets_are_inputs_shifted_by_one():
    tok = CharTokenizer(vocab="aem")  # a=4, e=5, m=6
    X, Y = lm_examples(["emma", "am"], tok, block_size=6)
    np.testing.assert_array_equal(X, [[1, 5, 6, 6, 4, 0], [1, 4, 6, 0, 0, 0]])
    np.testing.assert_array_equal(Y, [[5, 6, 6, 4, 2, -100], [4, 6, 2, -100, -100, -100]])
    assert X.dtype == Y.dtype == np.int64


def test_lm_examples_too_long_text_names_text_and_block_size():
    tok = CharTokenizer(vocab="abcdefghijklmnopqrstuvwxyz")
    pattern = expect("block_size=8", "'christopher'", "block_size >= 12")
    with pytest.raises(ValueError, match=pattern):
        lm_examples(["emma", "christopher"], tok, block_size=8)


def test_lm_windows_join_texts_with_bos_and_cut_rows_without_padding():
    tok = CharTokenizer(vocab="aem")  # <bos>=1, <eos>=2, a=4, e=5, m=6
    # Stream: <bos> e m m a <bos> a m <bos> m e (11 tokens); rows of 4 side by side.
    X, Y = lm_windows(["emma", "am", "me"], tok, block_size=4)
    np.testing.assert_array_equal(X, [[1, 5, 6, 6], [4, 1, 4, 6]])
    np.testing.assert_array_equal(Y, [[5, 6, 6, 4], [2, 4, 6, 2]])
    assert X.dtype == Y.dtype == np.int64


def test_lm_windows_score_the_same_targets_as_lm_examples():
    tok = CharTokenizer(vocab="aem")
    texts = ["emma", "am", "me"]
    X_rows, Y_rows = lm_examples(texts, tok, block_size=6)
    X, Y = lm_windows(texts, tok, block_size=11)  # one row: the whole stream
    scored = Y_rows != IGNORE_INDEX
    np.testing.assert_array_equal(X[0], X_rows[scored])
    np.testing.assert_array_equal(Y[0], Y_rows[scored])


def test_lm_windows_stride_overlaps_rows():
    tok = CharTokenizer(vocab="aem")
    X, Y = lm_windows(["emma", "am", "me"], tok, block_size=4, stride=2)
    assert X.shape == (4, 4)  # rows start at 0, 2, 4, 6 of 11 tokens
    np.testing.assert_array_equal(X[1], [6, 6, 4, 1])
    np.testing.assert_array_equal(Y[1], [6, 4, 2, 4])


def test_lm_windows_without_partial_scoring_ignores_names_cut_by_the_row_start():
    tok = CharTokenizer(vocab="aem")
    _, Y = lm_windows(["emma", "am", "me"], tok, block_size=4, score_partial=False)
    # Row 1 starts at the "a" of emma, whose <bos> is in row 0: that target is not scored.
    np.testing.assert_array_equal(Y, [[5, 6, 6, 4], [IGNORE_INDEX, 4, 6, 2]])


def test_lm_windows_block_longer_than_the_data_names_both():
    tok = CharTokenizer(vocab="aem")
    with pytest.raises(ValueError, match=expect("block_size=12", "11 tokens")):
        lm_windows(["emma", "am", "me"], tok, block_size=12)


def test_ignore_index_is_pytorchs_default():
    assert IGNORE_INDEX == -100


def test_pad_sequences_pads_at_the_end_and_marks_padding_true():
    ids, pad_mask = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    np.testing.assert_array_equal(ids, [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(pad_mask, [[False, False, False], [False, True, True]])
    assert ids.dtype == np.int64 and pad_mask.dtype == bool


def test_pad_sequences_refuses_to_truncate():
    with pytest.raises(ValueError, match=expect("length=2", "seqs[0]", "3 ids")):
        pad_sequences([[5, 6, 7], [8]], pad_id=0, length=2)


# -- batches ---------------------------------------------------------------------------------


def test_batches_visit_every_row_once_per_epoch():
    X = np.arange(10)
    seen = np.concatenate([xb for (xb,) in batches(X, batch_size=3, seed=0)])
    assert sorted(seen.tolist()) == list(range(10))


def test_batches_keep_rows_of_several_arrays_aligned():
    X = np.arange(20).reshape(10, 2)
    y = np.arange(10) * 10
    for xb, yb in batches((X, y), batch_size=4, seed=1):
        np.testing.assert_array_equal(xb[:, 0] * 5, yb)


def test_batches_are_deterministic_for_a_seed():
    X = np.arange(50)
    first = [xb.tolist() for (xb,) in batches(X, 8, seed=7)]
    again = [xb.tolist() for (xb,) in batches(X, 8, seed=7)]
    other = [xb.tolist() for (xb,) in batches(X, 8, seed=8)]
    assert first == again and first != other


def test_batches_without_shuffle_keep_order_and_drop_last_drops_the_remainder():
    X = np.arange(10)
    kept = [xb.tolist() for (xb,) in batches(X, 4, shuffle=False, drop_last=True)]
    assert kept == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_batches_always_yield_tuples():
    batch = next(batches(np.arange(6), batch_size=2))
    assert isinstance(batch, tuple) and len(batch) == 1


def test_batches_reject_arrays_with_different_row_counts():
    with pytest.raises(ValueError, match=expect("same number of rows", "(5,)", "(4,)")):
        batches((np.zeros(5), np.zeros(4)), batch_size=2)


def test_infinite_batches_reshuffle_every_epoch_deterministically():
    X = np.arange(12)
    stream = infinite_batches(X, batch_size=4, seed=0)
    epochs = [np.concatenate([next(stream)[0] for _ in range(3)]) for _ in range(3)]
    assert all(sorted(epoch.tolist()) == list(range(12)) for epoch in epochs)
    assert epochs[0].tolist() != epochs[1].tolist()
    again = infinite_batches(X, batch_size=4, seed=0)
    replay = [xb.tolist() for (xb,) in itertools.islice(again, 9)]
    assert replay == [chunk.tolist() for epoch in epochs for chunk in np.split(epoch, 3)]


# -- seq2seq batches (translation) -----------------------------------------------------------


PAD, BOS, EOS = 0, 1, 2


def test_seq2seq_batch_shifts_the_target_by_one_and_marks_padding():
    src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask = batching.seq2seq_batch(
        [[5, 6], [7, 8, 9]], [[10, 11, 12], [13]], PAD, BOS, EOS
    )
    assert src.tolist() == [[5, 6, PAD], [7, 8, 9]]
    assert tgt_in.tolist() == [[BOS, 10, 11, 12], [BOS, 13, PAD, PAD]]
    assert tgt_out.tolist() == [[10, 11, 12, EOS], [13, EOS, IGNORE_INDEX, IGNORE_INDEX]]
    assert src_pad_mask.tolist() == [[False, False, True], [False, False, False]]
    assert tgt_pad_mask.tolist() == [[False, False, False, False], [False, False, True, True]]
    assert src.dtype == tgt_in.dtype == tgt_out.dtype == np.int64
    assert src_pad_mask.dtype == tgt_pad_mask.dtype == bool


def test_seq2seq_batch_masks_line_up_with_the_padding_of_every_row():
    rng = np.random.default_rng(3)
    src_ids = [rng.integers(4, 30, size=rng.integers(1, 9)).tolist() for _ in range(50)]
    tgt_ids = [rng.integers(4, 30, size=rng.integers(0, 7)).tolist() for _ in range(50)]
    src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask = batching.seq2seq_batch(
        src_ids, tgt_ids, PAD, BOS, EOS
    )
    assert src_pad_mask.sum(axis=1).tolist() == [src.shape[1] - len(s) for s in src_ids]
    assert tgt_pad_mask.sum(axis=1).tolist() == [tgt_in.shape[1] - len(t) - 1 for t in tgt_ids]
    assert np.all(src[src_pad_mask] == PAD) and np.all(tgt_in[tgt_pad_mask] == PAD)
    # the loss ignores exactly the padded places of the decoder input, nothing else
    np.testing.assert_array_equal(tgt_out == IGNORE_INDEX, tgt_pad_mask)
    for row, (source, target) in enumerate(zip(src_ids, tgt_ids)):
        assert src[row, ~src_pad_mask[row]].tolist() == source
        assert tgt_in[row, ~tgt_pad_mask[row]].tolist() == [BOS, *target]
        assert tgt_out[row, ~tgt_pad_mask[row]].tolist() == [*target, EOS]


def test_seq2seq_batch_feeds_a_translation_model_and_its_loss():
    import tfscratch
    from tfscratch.train import Seq2SeqTask

    batch = batching.seq2seq_batch([[4, 5, 6], [7]], [[4, 5], [6, 7, 8]], PAD, BOS, EOS)
    model = tfscratch.Seq2SeqTransformer(10, 10, 8, 2, 1, 1, max_len=8, seed=0)
    loss, n_targets = Seq2SeqTask()(model, batch, backward=False)
    assert n_targets == (2 + 1) + (3 + 1)  # every target token plus its <eos>
    assert abs(loss - np.log(10)) < 0.1  # untrained: close to uniform over 10 tokens


@pytest.mark.parametrize(
    "src_ids, tgt_ids, error, message",
    [
        ([[4, 5]], [[6], [7]], ValueError, expect("src_ids", "1", "tgt_ids", "2")),
        ([], [], ValueError, expect("src_ids", "tgt_ids", "empty")),
        ([[4], []], [[5], [6]], ValueError, expect("src_ids[1]", "empty")),
        (
            [[4, -1]],
            [[5]],
            ValueError,
            expect("src_ids[0]", "-1", ">= 0"),
        ),
        ([[4]], [[5.5]], TypeError, expect("tgt_ids[0]", "5.5", "int")),
        ([[4]], ["hola"], TypeError, expect("tgt_ids[0]", "'hola'", "int")),
        ("hello", [[5]], TypeError, expect("src_ids", "str", "list")),
    ],
)
def test_seq2seq_batch_rejects_bad_input_naming_the_argument(src_ids, tgt_ids, error, message):
    with pytest.raises(error, match=message):
        batching.seq2seq_batch(src_ids, tgt_ids, PAD, BOS, EOS)


def test_seq2seq_batch_rejects_a_negative_special_id():
    with pytest.raises(ValueError, match=expect("bos_id=-1", "at least 0")):
        batching.seq2seq_batch([[4]], [[5]], PAD, -1, EOS)


def test_seq2seq_batches_cover_every_pair_each_epoch_in_a_seeded_order():
    src_ids = [[4 + i] * (1 + i % 3) for i in range(10)]
    tgt_ids = [[20 + i] for i in range(10)]
    stream = batching.seq2seq_batches(src_ids, tgt_ids, 4, PAD, BOS, EOS, seed=5)
    first_epoch = [next(stream) for _ in range(3)]  # 4 + 4 + 2 pairs
    seen = sorted(int(t) for batch in first_epoch for t in batch[1][:, 1])
    assert seen == list(range(20, 30))
    for src, tgt_in, _, src_pad_mask, _ in first_epoch:
        # each batch is padded to its own longest source, and source i pairs with target i
        assert src.shape[1] == (~src_pad_mask).sum(axis=1).max()
        assert (src[:, 0] - 4).tolist() == (tgt_in[:, 1] - 20).tolist()
    again = batching.seq2seq_batches(src_ids, tgt_ids, 4, PAD, BOS, EOS, seed=5)
    replay = [next(again) for _ in range(3)]
    assert all(np.array_equal(a, b) for x, y in zip(first_epoch, replay) for a, b in zip(x, y))


def test_seq2seq_batches_one_epoch_in_order_for_validation():
    src_ids = [[4], [5, 6], [7]]
    tgt_ids = [[8], [9], [10, 11]]
    epoch = list(
        batching.seq2seq_batches(src_ids, tgt_ids, 2, PAD, BOS, EOS, shuffle=False, forever=False)
    )
    assert [batch[0].tolist() for batch in epoch] == [[[4, PAD], [5, 6]], [[7]]]


def test_seq2seq_batches_check_every_pair_before_the_first_batch():
    with pytest.raises(ValueError, match=expect("src_ids[2]", "empty")):
        batching.seq2seq_batches([[4], [5], []], [[6], [7], [8]], 2, PAD, BOS, EOS)
    with pytest.raises(ValueError, match=expect("batch_size=0", "at least 1")):
        batching.seq2seq_batches([[4]], [[6]], 0, PAD, BOS, EOS)


# -- trimming padding --------------------------------------------------------------------------


def test_trim_padding_cuts_each_batch_to_its_last_scored_column():
    tok = CharTokenizer(vocab="aem")
    X, Y = lm_examples(["emma", "am", "me", "a"], tok, block_size=8)
    (first, second) = trim_padding(batches((X, Y), 2, shuffle=False))
    np.testing.assert_array_equal(first[0], X[:2, :5])  # "emma" + <eos>: 5 targets
    np.testing.assert_array_equal(first[1], Y[:2, :5])
    assert second[0].shape == second[1].shape == (2, 3)  # "me" + <eos>


def test_trim_padding_keeps_a_scored_target_behind_ignored_ones():
    # lm_windows(score_partial=False) ignores targets at the start of a row: the width is
    # set by the last scored column, not by how many targets a row scores.
    Y = np.array([[IGNORE_INDEX, IGNORE_INDEX, 7, IGNORE_INDEX]])
    ((X_short, Y_short),) = trim_padding([(np.zeros_like(Y), Y)])
    assert Y_short.tolist() == [[IGNORE_INDEX, IGNORE_INDEX, 7]] and X_short.shape == (1, 3)


def test_trim_padding_reads_an_endless_stream_lazily():
    tok = CharTokenizer(vocab="aem")
    arrays = lm_examples(["emma", "am", "me"], tok, block_size=8)
    stream = trim_padding(infinite_batches(arrays, 2, seed=0))
    widths = [X.shape[1] for X, _ in itertools.islice(stream, 20)]
    assert len(widths) == 20 and max(widths) <= 5


def test_trimmed_batch_gives_a_causal_model_the_same_loss():
    from tfscratch import DecoderLM
    from tfscratch.nn import CrossEntropyLoss

    tok = CharTokenizer(vocab="aem")
    X, Y = lm_examples(["emma", "am", "me"], tok, block_size=8)
    ((X_short, Y_short),) = trim_padding([(X, Y)])
    model = DecoderLM(tok.vocab_size, 8, 2, 1, max_len=8, seed=0, dtype=np.float64)
    full, short = CrossEntropyLoss(IGNORE_INDEX), CrossEntropyLoss(IGNORE_INDEX)
    assert X_short.shape == (3, 5)
    np.testing.assert_allclose(full(model(X), Y), short(model(X_short), Y_short), rtol=1e-12)
