"""Specification of tfscratch.tokenizers: characters and words to ids and back, and the
contract every tokenizer honours."""

import ast
import inspect
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tfscratch.data import load_names, number_pairs, toy_translation_pairs
from tfscratch.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, WordTokenizer

from .conftest import expect

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def names():
    return load_names(2017)


@pytest.fixture
def char_tok():
    return CharTokenizer(vocab=ALPHABET)


@pytest.fixture
def word_tok():
    sentences = [text for pair in toy_translation_pairs() for text in pair]
    return WordTokenizer.fit(sentences)


@pytest.mark.parametrize("kind", [CharTokenizer, WordTokenizer])
def test_special_tokens_have_fixed_ids(kind):
    tok = kind.fit(["ab"])
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.specials == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert tok.tokens[:4] == list(tok.specials)
    assert [tok.token_to_id(s) for s in tok.specials] == [0, 1, 2, 3]


def test_fit_vocabulary_is_sorted_and_independent_of_text_order():
    forward = CharTokenizer.fit(["emma", "olivia", "zoe"])
    backward = CharTokenizer.fit(["zoe", "olivia", "emma"])
    assert forward.vocab == sorted(set("emmaoliviazoe"))
    assert forward == backward


def test_ordinary_tokens_follow_the_specials_in_vocab_order():
    tok = CharTokenizer(vocab=["z", "a"])
    assert tok.token_to_id("z") == 4
    assert tok.token_to_id("a") == 5


def test_char_round_trip_on_every_name(char_tok, names):
    assert all(char_tok.decode(char_tok.encode(name)) == name for name in names)


def test_char_tokenizer_fitted_on_names_has_26_letters(names):
    tok = CharTokenizer.fit(names)
    assert tok.vocab == list(ALPHABET)
    assert tok.vocab_size == len(tok) == 30


def test_encode_adds_bos_and_eos_on_request(char_tok):
    assert char_tok.encode("ab") == [4, 5]
    assert char_tok.encode("ab", add_bos=True, add_eos=True) == [1, 4, 5, 2]


def test_unknown_symbol_maps_to_unk(char_tok):
    assert char_tok.encode("josé") == [char_tok.token_to_id(c) for c in "jos"] + [3]


def test_unknown_symbol_error_names_symbol_and_position(char_tok):
    with pytest.raises(ValueError, match=expect("'é'", "position 3", "'josé'")):
        char_tok.encode("josé", unknown="error")


def test_unknown_word_error_names_word_and_position(word_tok):
    with pytest.raises(ValueError, match=expect("'ronaldo'", "position 1", "character 6")):
        word_tok.encode("hello ronaldo", unknown="error")


def test_unknown_option_must_be_unk_or_error(char_tok):
    with pytest.raises(ValueError, match=expect("unknown='ignore'", "'unk'", "'error'")):
        char_tok.encode("ab", unknown="ignore")


def test_encode_rejects_non_string_text(char_tok):
    with pytest.raises(TypeError, match=expect("text", "str", "list")):
        char_tok.encode(["a", "b"])


def test_fit_rejects_a_single_string_instead_of_a_list():
    with pytest.raises(TypeError, match=expect("texts", "list of strings", "str")):
        CharTokenizer.fit("emma")


def test_decode_skips_pad_bos_eos_but_shows_unk(char_tok):
    ids = [1, 4, 3, 5, 2, 0, 0]
    assert char_tok.decode(ids) == "a<unk>b"


def test_decode_keeps_specials_when_asked(char_tok):
    assert char_tok.decode([1, 4, 2, 0], skip_special=False) == "<bos>a<eos><pad>"


def test_decode_rejects_out_of_range_id(char_tok):
    with pytest.raises(ValueError, match=expect("ids", "99", "[1]", "[0, 30)")):
        char_tok.decode([4, 99])


def test_decode_rejects_non_integer_ids(char_tok):
    with pytest.raises(TypeError, match=expect("ids", "float64", "integer")):
        char_tok.decode([4.0, 5.0])


def test_decode_accepts_numpy_integer_arrays(char_tok):
    assert char_tok.decode(np.array([4, 5, 6], dtype=np.int64)) == "abc"


def test_decode_rejects_a_batch(char_tok):
    with pytest.raises(ValueError, match=expect("ids", "1-D", "(2, 2)")):
        char_tok.decode(np.array([[4, 5], [6, 7]]))


def test_word_tokenizer_splits_punctuation_from_words():
    assert WordTokenizer([]).split("one thousand, forty-two!") == [
        "one", "thousand", ",", "forty", "-", "two", "!",
    ]  # fmt: skip


def test_word_round_trip_on_normalized_number_words():
    texts = [text for pair in number_pairs(range(0, 10000, 37)) for text in pair]
    tok = WordTokenizer.fit(texts)
    for text in texts:
        normal = tok.normalize(text)
        assert tok.decode(tok.encode(normal)) == normal


def test_normalize_separates_tokens_by_single_spaces(word_tok):
    assert word_tok.normalize("  hola,   messi! ") == "hola , messi !"


def test_vocab_table_lists_ids_tokens_and_special_flags(char_tok):
    table = char_tok.vocab_table()
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == ["id", "token", "special"]
    assert table["id"].tolist() == list(range(30))
    assert table["token"].tolist()[:5] == ["<pad>", "<bos>", "<eos>", "<unk>", "a"]
    assert table["special"].tolist() == [True] * 4 + [False] * 26


def test_id_to_token_and_token_to_id_are_inverse(word_tok):
    for token_id in range(word_tok.vocab_size):
        assert word_tok.token_to_id(word_tok.id_to_token(token_id)) == token_id


def test_token_to_id_rejects_unknown_token(word_tok):
    with pytest.raises(ValueError, match=expect("token='ronaldo'", "vocabulary")):
        word_tok.token_to_id("ronaldo")


def test_vocab_may_not_contain_specials():
    with pytest.raises(ValueError, match=expect("vocab[1]='<eos>'", "special")):
        WordTokenizer(vocab=["hola", "<eos>"])


def test_vocab_may_not_repeat_a_token():
    with pytest.raises(ValueError, match=expect("vocab[2]='a'", "twice")):
        CharTokenizer(vocab=["a", "b", "a"])


def test_char_vocab_entries_must_be_single_characters():
    with pytest.raises(ValueError, match=expect("vocab[1]='bc'", "single character")):
        CharTokenizer(vocab=["a", "bc"])


def test_word_vocab_entries_must_be_single_words():
    with pytest.raises(ValueError, match=expect("vocab[0]='hola messi'", "one word")):
        WordTokenizer(vocab=["hola messi"])


# -- the contract ------------------------------------------------------------------------------

KINDS = [CharTokenizer, WordTokenizer, BPETokenizer]


@pytest.mark.parametrize("method", ["fit", "split", "join", "encode", "decode"])
def test_every_kind_has_the_same_signature(method):
    signatures = {inspect.signature(getattr(kind, method)) for kind in [Tokenizer, *KINDS]}
    assert len(signatures) == 1, signatures


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_fits_splits_and_round_trips_the_same_way(kind):
    texts = ["hola messi", "hola mundo", "hola"]
    tok = kind.fit(texts, vocab_size=None, min_count=1)
    pieces = tok.split("hola messi")
    assert all(isinstance(piece, str) for piece in pieces)
    assert tok.join(pieces) == tok.normalize("hola messi") == tok.decode(tok.encode("hola messi"))


def test_the_base_class_names_no_kind_of_tokenizer():
    from tfscratch.tokenizers import base

    tree = ast.parse(Path(base.__file__).read_text())
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not used & {kind.__name__ for kind in KINDS}  # its docstrings may mention them


def test_a_new_kind_registers_itself_for_load(tmp_path):
    class ReversedCharTokenizer(CharTokenizer):
        def split(self, text):
            return list(reversed(text))

        def join(self, tokens):
            return "".join(reversed(tokens))

    tok = ReversedCharTokenizer.fit(["abc"])
    tok.save(tmp_path / "reversed.json")
    loaded = Tokenizer.load(tmp_path / "reversed.json")
    assert type(loaded) is ReversedCharTokenizer and loaded.decode(loaded.encode("cab")) == "cab"


def test_vocab_size_keeps_the_most_frequent_tokens():
    texts = ["hola hola hola messi messi mundo", "hola messi zoe"]  # 4, 3, then 1 and 1
    tok = WordTokenizer.fit(texts, vocab_size=4 + 3)
    assert tok.vocab == ["hola", "messi", "mundo"]  # the tie goes to "mundo" < "zoe"
    assert tok.encode("zoe") == [tok.unk_id]
    assert CharTokenizer.fit(["aaab", "bc"], vocab_size=4 + 2).vocab == ["a", "b"]


def test_vocab_size_below_the_specials_is_refused():
    with pytest.raises(ValueError, match=expect("vocab_size=3", "at least 4")):
        CharTokenizer.fit(["ab"], vocab_size=3)


def test_min_count_turns_rare_words_into_unk():
    tok = WordTokenizer.fit(["hola messi", "hola mundo"], min_count=2)
    assert tok.vocab == ["hola"]
    assert tok.encode("hola messi") == [4, tok.unk_id]


def test_encode_batch_pads_at_the_end_and_masks_padding(char_tok):
    ids, pad_mask = char_tok.encode_batch(["ab", "abcd"], add_bos=True)
    np.testing.assert_array_equal(ids, [[1, 4, 5, 0, 0], [1, 4, 5, 6, 7]])
    np.testing.assert_array_equal(pad_mask, ids == 0)
    assert ids.dtype == np.int64 and pad_mask.dtype == bool


@pytest.mark.parametrize("kind", [CharTokenizer, WordTokenizer])
def test_save_then_load_gives_an_equal_tokenizer(kind, tmp_path):
    tok = kind.fit(["hola messi", "josé"])
    path = tmp_path / "tokenizer.json"
    tok.save(path)
    assert kind.load(path) == tok
    assert Tokenizer.load(path) == tok  # the base class reads whichever kind the file holds


def test_load_rejects_json_that_is_not_a_tokenizer(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"d_model": 64}))
    with pytest.raises(ValueError, match=r"is not a tokenizer JSON file"):
        CharTokenizer.load(path)


def test_load_rejects_a_file_that_is_not_json(tmp_path):
    path = tmp_path / "weights.npz"
    path.write_bytes(b"PK\x03\x04 binary")
    with pytest.raises(ValueError, match=r"is not a tokenizer JSON file"):
        Tokenizer.load(path)


def test_load_refuses_the_other_kind_of_tokenizer(tmp_path):
    path = tmp_path / "words.json"
    WordTokenizer.fit(["hola messi"]).save(path)
    with pytest.raises(ValueError, match=expect("WordTokenizer", "CharTokenizer")):
        CharTokenizer.load(path)
