"""Specification of tfscratch.tokenizers.BPETokenizer: byte-pair encoding over characters."""

import itertools
import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tfscratch.batching import lm_examples
from tfscratch.data import load_names, number_pairs
from tfscratch.tokenizers import BPETokenizer, CharTokenizer, Tokenizer

from .conftest import expect


@pytest.fixture(scope="module")
def names():
    return load_names(2017)


@pytest.fixture(scope="module")
def names_bpe(names):
    return BPETokenizer.fit(names, vocab_size=300)


@pytest.fixture(scope="module")
def number_words():
    # every number 0-9999 in English and in Spanish words, as notebook 09 uses them
    return [text for pair in number_pairs(range(10_000)) for text in pair]


def reference_merges(texts, n_merges):
    """BPE training written as plainly as possible (lists of strings, a Counter per step):
    the specification the vectorised ``BPETokenizer.fit`` must meet."""
    corpus = [list(text) for text in texts]
    merges = []
    while len(merges) < n_merges:
        counts = Counter(pair for pieces in corpus for pair in itertools.pairwise(pieces))
        if not counts or max(counts.values()) < 2:
            break
        best = max(counts.values())
        left, right = min(pair for pair, count in counts.items() if count == best)
        corpus = [merge_pair(pieces, left, right) for pieces in corpus]
        merges.append((left, right))
    return merges


def merge_pair(pieces, left, right):
    """Replace every ``left, right`` neighbour pair of ``pieces`` by ``left + right``, left to right."""
    out, i = [], 0
    while i < len(pieces):
        if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == (left, right):
            out.append(left + right)
            i += 2
        else:
            out.append(pieces[i])
            i += 1
    return out


def replay_merges_in_order(text, merges):
    """Encode by applying every merge, in learned order, to the whole text (slow, obvious)."""
    pieces = list(text)
    for left, right in merges:
        pieces = merge_pair(pieces, left, right)
    return pieces


# -- training ---------------------------------------------------------------------------------


def test_hand_worked_corpus_learns_known_merges_in_order():
    # banana + bandana. Step 1: a-n occurs 4 times (2 + 2) -> "an". Now b an an a / b an d an a:
    # (b, an) and (an, a) both occur twice; the tie goes to ("an", "a") < ("b", "an") -> "ana".
    # Step 3: (b, an) twice -> "ban". Then every pair occurs once: training stops.
    tok = BPETokenizer.fit(["banana", "bandana"], vocab_size=100)
    assert tok.merges == [("a", "n"), ("an", "a"), ("b", "an")]
    assert tok.alphabet == ["a", "b", "d", "n"]
    assert tok.vocab == ["a", "b", "d", "n", "an", "ana", "ban"]
    assert tok.split("banana") == ["ban", "ana"]
    assert tok.split("bandana") == ["ban", "d", "ana"]


def test_training_stops_when_no_pair_occurs_twice():
    tok = BPETokenizer.fit(["banana", "bandana"], vocab_size=100)
    assert tok.vocab_size == 4 + 4 + 3 < 100


def test_without_vocab_size_training_runs_until_no_pair_occurs_twice():
    tok = BPETokenizer.fit(["banana", "bandana"])
    assert tok.merges == [("a", "n"), ("an", "a"), ("b", "an")]


def test_min_count_drops_rare_characters_and_pairs():
    tok = BPETokenizer.fit(["banana", "bandana", "band"], min_count=3)
    assert tok.alphabet == ["a", "b", "n"]  # "d" occurs twice: it encodes as <unk>
    assert tok.merges == [("a", "n"), ("b", "an")]  # ("an", "a") occurs twice only
    assert tok.encode("band")[-1] == tok.unk_id


def test_vocab_size_counts_specials_characters_and_merges(names):
    tok = BPETokenizer.fit(names, vocab_size=50)
    assert tok.vocab_size == len(tok) == 50
    assert len(tok.merges) == 50 - 4 - 26


def test_tie_goes_to_the_pair_first_in_string_order():
    # (a, b) and (x, y) both occur twice: ("a", "b") < ("x", "y") is merged first,
    # whichever text comes first in the corpus
    for corpus in (["ab", "xy", "ab", "xy"], ["xy", "xy", "ab", "ab"]):
        assert BPETokenizer.fit(corpus, vocab_size=10).merges == [("a", "b"), ("x", "y")]
    # same left token: the right one decides
    assert BPETokenizer.fit(["ac", "ab", "ac", "ab"], vocab_size=8).merges[0] == ("a", "b")


def test_fit_is_deterministic_and_independent_of_text_order(names):
    shuffled = list(np.random.default_rng(0).permutation(names))
    first = BPETokenizer.fit(names, vocab_size=150)
    assert BPETokenizer.fit(names, vocab_size=150) == first
    assert BPETokenizer.fit(shuffled, vocab_size=150) == first


def test_vectorised_training_equals_the_plain_python_reference(names):
    sample = names[::15]  # ~2,000 names
    assert BPETokenizer.fit(sample, vocab_size=26 + 4 + 80).merges == reference_merges(sample, 80)


def test_training_on_runs_of_one_letter_matches_the_reference():
    # runs ("aaaa") are where the pair overlaps itself; both must take it left to right
    rng = np.random.default_rng(1)
    for _ in range(30):
        texts = ["".join(rng.choice(list("ab"), size=rng.integers(1, 12))) for _ in range(8)]
        tok = BPETokenizer.fit(texts, vocab_size=40)
        assert tok.merges == reference_merges(texts, 40)


def test_smaller_vocabulary_learns_a_prefix_of_the_merges(names, names_bpe):
    small = BPETokenizer.fit(names, vocab_size=100)
    assert small.merges == names_bpe.merges[: len(small.merges)]


def test_without_merges_ids_are_the_char_tokenizers(names):
    bpe = BPETokenizer.fit(names, vocab_size=30)
    char = CharTokenizer.fit(names)
    assert bpe.merges == [] and bpe.tokens == char.tokens
    assert all(bpe.encode(name) == char.encode(name) for name in names[::50])


# -- encoding and decoding ----------------------------------------------------------------------


def test_round_trip_is_exact_on_every_name(names, names_bpe):
    assert all(names_bpe.decode(names_bpe.encode(name)) == name for name in names)


def test_round_trip_is_exact_on_every_number_word(number_words):
    tok = BPETokenizer.fit(number_words, vocab_size=200)
    assert " " in tok.alphabet and "-" in tok.alphabet
    assert all(tok.decode(tok.encode(text)) == text for text in number_words)
    assert tok.normalize("four thousand and forty-two") == "four thousand and forty-two"


def test_encode_equals_replaying_every_merge_in_learned_order(names, names_bpe):
    merges = names_bpe.merges
    for name in names[::40]:
        assert names_bpe.split(name) == replay_merges_in_order(name, merges), name


def test_runs_merge_left_to_right_without_overlap():
    tok = BPETokenizer("ab", [("a", "a")])
    assert tok.split("aaaaa") == ["aa", "aa", "a"]
    assert tok.split("baaab") == ["b", "aa", "a", "b"]


def test_bpe_shortens_names(names, names_bpe):
    bpe_tokens = sum(len(names_bpe.encode(name)) for name in names)
    characters = sum(len(name) for name in names)
    assert bpe_tokens < 0.65 * characters


def test_special_tokens_have_fixed_ids_and_are_added_on_request(names_bpe):
    assert (names_bpe.pad_id, names_bpe.bos_id, names_bpe.eos_id, names_bpe.unk_id) == (0, 1, 2, 3)
    assert names_bpe.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    ids = names_bpe.encode("emma", add_bos=True, add_eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and 2 < len(ids) <= 6
    assert names_bpe.decode(ids) == "emma"
    assert names_bpe.decode(ids, skip_special=False).startswith("<bos>")


def test_a_merge_never_spells_a_special_token():
    # every pair of "<eos>" occurs twice; ties go by string order: <e, <eo, <eos, and then
    # ("<eos", ">") would spell the special "<eos>": skipped, and nothing else occurs twice
    tok = BPETokenizer.fit(["<eos>", "<eos>"], vocab_size=100)
    assert tok.merges == [("<", "e"), ("<e", "o"), ("<eo", "s")]
    ids = tok.encode("<eos>")
    assert ids == [tok.token_to_id("<eos"), tok.token_to_id(">")]
    assert tok.eos_id not in ids and tok.decode(ids) == "<eos>"


def test_a_hand_made_merge_may_not_spell_a_special_token():
    with pytest.raises(ValueError, match=expect("'<pad>'", "already a token")):
        BPETokenizer("<>adp", [("<", "p"), ("a", "d"), ("<p", "ad"), ("<pad", ">")])


def test_unknown_character_maps_to_unk():
    tok = BPETokenizer("josa", [("j", "o")])
    assert tok.encode("josé") == [tok.token_to_id("jo"), tok.token_to_id("s"), tok.unk_id]
    assert tok.decode(tok.encode("josé")) == "jos<unk>"


def test_unknown_character_error_names_it_and_its_character_position():
    tok = BPETokenizer("josa", [("j", "o")])
    with pytest.raises(ValueError, match=expect("'é'", "position 2", "character 3")):
        tok.encode("josé", unknown="error")


def test_encode_batch_pads_bpe_tokens(names_bpe):
    ids, pad_mask = names_bpe.encode_batch(["emma", "christopher"], add_bos=True)
    lengths = [len(names_bpe.encode(n)) + 1 for n in ("emma", "christopher")]
    assert ids.shape == (2, max(lengths))
    np.testing.assert_array_equal((~pad_mask).sum(axis=1), lengths)


def test_lm_examples_accepts_a_bpe_tokenizer(names_bpe):
    X, Y = lm_examples(["emma", "olivia"], names_bpe, block_size=8)
    assert X[0, 0] == names_bpe.bos_id
    row = [int(i) for i in Y[0] if i >= 0]
    assert row[-1] == names_bpe.eos_id and names_bpe.decode(row) == "emma"


def test_vocab_table_shows_what_each_token_was_merged_from():
    tok = BPETokenizer.fit(["banana", "bandana"], vocab_size=100)
    table = tok.vocab_table()
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == ["id", "token", "special", "left", "right"]
    assert table["token"].tolist()[-3:] == ["an", "ana", "ban"]
    assert table["left"].tolist()[-3:] == ["a", "an", "b"]
    assert table["right"].tolist()[-3:] == ["n", "a", "an"]
    assert table["left"].tolist()[:8] == [""] * 8


def test_equal_tokens_with_different_merges_are_different_tokenizers():
    first = BPETokenizer("abc", [("a", "b"), ("b", "c"), ("ab", "c")])
    second = BPETokenizer("abc", [("a", "b"), ("b", "c"), ("a", "bc")])
    assert first.tokens == second.tokens
    assert first.split("abc") == ["abc"] and second.split("abc") == ["ab", "c"]
    assert first != second


# -- saving -------------------------------------------------------------------------------------


def test_save_then_load_gives_an_equal_tokenizer(names_bpe, tmp_path):
    path = tmp_path / "bpe.json"
    names_bpe.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded == names_bpe
    assert Tokenizer.load(path) == names_bpe  # the base class reads whichever kind the file holds
    assert all(loaded.encode(name) == names_bpe.encode(name) for name in ["emma", "zyaire"])


def test_saved_file_is_json_with_the_merges_in_order(tmp_path):
    path = tmp_path / "bpe.json"
    BPETokenizer.fit(["banana", "bandana"], vocab_size=100).save(path)
    payload = json.loads(path.read_text(encoding="utf-8"))
    assert payload["kind"] == "BPETokenizer"
    assert payload["merges"] == [["a", "n"], ["an", "a"], ["b", "an"]]
    assert payload["alphabet"] == ["a", "b", "d", "n"]


def test_load_rejects_a_vocab_that_disagrees_with_the_merges(tmp_path):
    path = tmp_path / "bpe.json"
    BPETokenizer.fit(["banana", "bandana"], vocab_size=100).save(path)
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["vocab"][-1] = "nab"
    path.write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab does not match its alphabet and merges"):
        BPETokenizer.load(path)


def test_load_refuses_the_other_kind_of_tokenizer(tmp_path):
    path = tmp_path / "bpe.json"
    BPETokenizer.fit(["banana"], vocab_size=10).save(path)
    with pytest.raises(ValueError, match=expect("BPETokenizer", "CharTokenizer")):
        CharTokenizer.load(path)


# -- bad arguments ------------------------------------------------------------------------------


def test_fit_rejects_a_vocab_size_below_specials_plus_characters():
    with pytest.raises(
        ValueError, match=expect("vocab_size=6", "4 specials", "4 characters", ">= 8")
    ):
        BPETokenizer.fit(["banana", "bandana"], vocab_size=6)


@pytest.mark.parametrize("vocab_size", [100.0, "100", True])
def test_fit_rejects_a_vocab_size_that_is_not_an_int(vocab_size):
    with pytest.raises(TypeError, match=expect("vocab_size", "int")):
        BPETokenizer.fit(["banana"], vocab_size=vocab_size)


def test_fit_rejects_a_single_string_instead_of_a_list():
    with pytest.raises(TypeError, match=expect("texts", "list of strings", "str")):
        BPETokenizer.fit("banana", vocab_size=20)


def test_fit_rejects_a_text_that_is_not_a_string():
    with pytest.raises(TypeError, match=expect("texts[1]", "str", "int")):
        BPETokenizer.fit(["banana", 42], vocab_size=20)


def test_encode_rejects_non_string_text(names_bpe):
    with pytest.raises(TypeError, match=expect("text", "str", "list")):
        names_bpe.encode(["em", "ma"])


def test_decode_rejects_out_of_range_id(names_bpe):
    with pytest.raises(ValueError, match=expect("ids", "300", "[0, 300)")):
        names_bpe.decode([5, 300])


def test_merge_must_join_tokens_that_already_exist():
    with pytest.raises(ValueError, match=expect("merges[1]", "left='ab'", "not a token yet")):
        BPETokenizer("abc", [("b", "c"), ("ab", "c")])


def test_merge_must_make_a_new_token():
    with pytest.raises(
        ValueError, match=expect("merges[3]=('a', 'bc')", "'abc'", "already a token")
    ):
        BPETokenizer("abc", [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")])


def test_merge_must_be_a_pair_of_strings():
    with pytest.raises(TypeError, match=r"merges\[0\] must be a \(left, right\) pair of str"):
        BPETokenizer("abc", [("a", "b", "c")])
    with pytest.raises(TypeError, match=r"merges\[0\] must be a \(left, right\) pair of str"):
        BPETokenizer("abc", [("a", 1)])
    with pytest.raises(TypeError, match=expect("merges", "(left, right) pairs")):
        BPETokenizer("abc", "ab")


def test_alphabet_entries_must_be_single_characters():
    with pytest.raises(ValueError, match=expect("alphabet[1]='bc'", "single character")):
        BPETokenizer(["a", "bc"])


def test_alphabet_may_not_repeat_a_character():
    with pytest.raises(ValueError, match=expect("vocab[2]='a'", "twice")):
        BPETokenizer(["a", "b", "a"])
