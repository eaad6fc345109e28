"""Tokenizers: text to integer ids and back.

A model only sees integers, so the first step of every language task is a fixed, reversible
map between pieces of text ("tokens") and ids ``0 .. vocab_size - 1``. Three tokenizers live here:

* ``CharTokenizer``: one token per character (``"emma" -> e, m, m, a``). Tiny vocabulary,
  long sequences; exact round trip for any text made of known characters.
* ``WordTokenizer``: one token per word or punctuation mark (``"hello, messi" -> hello , messi``).
  Short sequences, big vocabulary; round trip is exact for text in its normal form
  (``normalize``), because the spaces between tokens are not stored.
* ``BPETokenizer``: byte-pair encoding, in between. It starts from the characters and learns
  merges of frequent neighbours (``"e" + "l" -> "el"``, then ``"el" + "la" -> "ella"``), so
  common pieces become one token and rare ones stay spelled out; exact round trip for any
  text made of known characters.

All three reserve the same four special tokens at the start of the vocabulary:

====  =========  ==================================================================
 id   token      why it exists
====  =========  ==================================================================
 0    ``<pad>``  fills the end of short sequences so a batch is a rectangle
 1    ``<bos>``  "beginning of sequence": the first input of a language model
 2    ``<eos>``  "end of sequence": the model predicts it to say "I am done"
 3    ``<unk>``  stands in for a symbol that is not in the vocabulary
====  =========  ==================================================================

Special tokens never come out of ``encode``'s splitting of the text (a ``<`` in the text is
just a ``<``); they are added on purpose (``add_bos``/``add_eos``, padding) or stand in for
unknown symbols.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from .checks import check_int, check_text, check_texts, check_token_ids, preview
from .data import pad_sequences

__all__ = ["BPETokenizer", "CharTokenizer", "Tokenizer", "WordTokenizer"]

_FILE_FORMAT = "tfscratch.tokenizer"
_FILE_VERSION = 1
_UNKNOWN_OPTIONS = ("unk", "error")


class Tokenizer:
    """What every tokenizer shares: the special tokens, the id tables, ``encode``/``decode``.

    A subclass says only how a text is cut into tokens (``split``), how tokens are glued
    back (``join``) and which tokens are allowed in a vocabulary (``_check_token``).

    Attributes:
        pad_id, bos_id, eos_id, unk_id: the ids 0, 1, 2, 3 of the special tokens.
        specials: ``("<pad>", "<bos>", "<eos>", "<unk>")``, in id order.
        unit: what one token is, for messages (``"characters"`` or ``"words"``).
    """

    pad_id = 0
    bos_id = 1
    eos_id = 2
    unk_id = 3
    specials = ("<pad>", "<bos>", "<eos>", "<unk>")
    unit = "tokens"
    _symbol_word = "token"  # how an error message names one unknown token

    def __init__(self, vocab: Iterable[str]):
        """Build the tokenizer from its ordinary (non-special) tokens.

        Args:
            vocab: the tokens, in the order they get ids: ``vocab[i]`` gets id ``4 + i``
                (the four specials come first). Use ``fit`` to build it from a corpus.
        """
        if isinstance(vocab, str) and self.unit != "characters":
            raise TypeError(f"vocab must be a list of tokens, got a single str {preview(vocab)}")
        if not isinstance(vocab, Iterable):
            raise TypeError(f"vocab must be a list of str, got {type(vocab).__name__}")
        vocab = list(vocab)
        seen: set[str] = set()
        for index, token in enumerate(vocab):
            if not isinstance(token, str):
                raise TypeError(f"vocab[{index}] must be a str, got {type(token).__name__}")
            if token in self.specials:
                raise ValueError(
                    f"vocab[{index}]={token!r} is a special token; the specials "
                    f"{list(self.specials)} are added automatically at ids 0-3, leave them out"
                )
            if token in seen:
                raise ValueError(f"vocab[{index}]={token!r} appears twice; tokens must be unique")
            self._check_token(token, index)
            seen.add(token)
        # Two tables, one per direction: a list for id -> token (ids are positions) and a
        # dict for token -> id (constant-time lookup while encoding).
        self._id_to_token: list[str] = [*self.specials, *vocab]
        self._token_to_id: dict[str, int] = {t: i for i, t in enumerate(self._id_to_token)}

    # -- what a subclass decides ---------------------------------------------------------

    @classmethod
    def split(cls, text: str) -> list[str]:
        """Cut a text into token strings (no ids yet, no special tokens).

        It does not depend on the vocabulary, so ``fit`` uses it before any tokenizer exists.
        """
        raise NotImplementedError

    def join(self, tokens: Sequence[str]) -> str:
        """Glue token strings back into a text: the inverse of ``split`` on normal text."""
        raise NotImplementedError

    def _check_token(self, token: str, index: int) -> None:
        """Raise ``ValueError`` if ``token`` can never come out of ``split``."""
        raise NotImplementedError

    def normalize(self, text: str) -> str:
        """The normal form of ``text``: ``decode(encode(normalize(t))) == normalize(t)``
        whenever every token of ``t`` is in the vocabulary."""
        return self.join(self.split(check_text(text)))

    # -- building ------------------------------------------------------------------------

    @classmethod
    def fit(cls, texts: Iterable[str], min_count: int = 1):
        """Build a tokenizer whose vocabulary is every token seen in ``texts``.

        Args:
            texts: a list of strings (the corpus).
            min_count: keep only tokens seen at least this many times; rarer ones will
                encode as ``<unk>``.

        Returns:
            a tokenizer whose ordinary tokens are sorted (Python's string order), so the
            same corpus always gives the same ids, whatever order the texts came in.
        """
        texts = check_texts(texts)
        if isinstance(min_count, bool) or not isinstance(min_count, (int, np.integer)):
            raise TypeError(f"min_count must be an int, got {min_count!r}")
        if min_count < 1:
            raise ValueError(f"min_count={min_count} must be at least 1")
        counts = Counter(token for text in texts for token in cls.split(text))
        return cls(sorted(token for token, count in counts.items() if count >= min_count))

    # -- the two tables --------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included: the size of a model's embedding table."""
        return len(self._id_to_token)

    def __len__(self) -> int:
        return self.vocab_size

    @property
    def tokens(self) -> list[str]:
        """Every token in id order: ``tokens[i]`` is the token with id ``i``."""
        return list(self._id_to_token)

    @property
    def vocab(self) -> list[str]:
        """The ordinary tokens (no specials), in id order: ``type(tok)(tok.vocab)`` rebuilds a
        char or word tokenizer (a ``BPETokenizer`` also needs its merges)."""
        return self._id_to_token[len(self.specials) :]

    def id_to_token(self, token_id: int) -> str:
        """The token string of one id."""
        self._check_ids([token_id], argument="token_id")
        return self._id_to_token[int(token_id)]

    def token_to_id(self, token: str) -> int:
        """The id of one token string (specials included, e.g. ``"<eos>" -> 2``)."""
        check_text(token, "token")
        if token not in self._token_to_id:
            raise ValueError(
                f"token={token!r} is not in the vocabulary of {self.vocab_size} tokens; "
                f"see vocab_table() for the tokens it has"
            )
        return self._token_to_id[token]

    def vocab_table(self):
        """The vocabulary as a pandas DataFrame with columns ``id``, ``token``, ``special``."""
        import pandas as pd  # only the table needs pandas; encoding and decoding do not

        return pd.DataFrame(
            {
                "id": np.arange(self.vocab_size, dtype=np.int64),
                "token": self._id_to_token,
                "special": [token in self.specials for token in self._id_to_token],
            }
        )

    # -- encode / decode -----------------------------------------------------------------

    def encode(
        self, text: str, add_bos: bool = False, add_eos: bool = False, unknown: str = "unk"
    ) -> list[int]:
        """Text -> list of token ids.

        Args:
            text: the text to encode.
            add_bos: put ``<bos>`` (id 1) in front.
            add_eos: put ``<eos>`` (id 2) at the end.
            unknown: what to do with a token that is not in the vocabulary: ``"unk"`` maps it
                to ``<unk>`` (id 3); ``"error"`` raises ``ValueError`` naming it and its place.

        Returns:
            list of int, one per token (plus the requested specials).
        """
        check_text(text)
        if unknown not in _UNKNOWN_OPTIONS:
            raise ValueError(f"unknown={unknown!r} is not an option; expected 'unk' or 'error'")
        tokens = self.split(text)
        ids = [self._token_to_id.get(token, self.unk_id) for token in tokens]
        if unknown == "error" and self.unk_id in ids:
            self._raise_unknown(text, tokens, ids)
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def _raise_unknown(self, text: str, tokens: list[str], ids: list[int]) -> None:
        where = ids.index(self.unk_id)
        unknown_tokens = sorted({t for t, i in zip(tokens, ids) if i == self.unk_id})
        position = self._describe_position(text, where)
        others = f" (unknown here: {unknown_tokens})" if len(unknown_tokens) > 1 else ""
        raise ValueError(
            f"unknown {self._symbol_word} {tokens[where]!r} at {position} of {preview(text)}"
            f"{others}; the vocabulary has {len(self.vocab)} {self.unit} plus specials. "
            f"Use unknown='unk' to encode it as <unk>, or fit the tokenizer on text that has it"
        )

    def _describe_position(self, text: str, token_index: int) -> str:
        return f"position {token_index}"

    def decode(self, ids, skip_special: bool = True) -> str:
        """List of token ids -> text.

        Args:
            ids: 1-D sequence of ints (list, tuple or integer array) in ``[0, vocab_size)``.
            skip_special: drop ``<pad>``, ``<bos>`` and ``<eos>``, which mark structure, not
                text. ``<unk>`` is always written as ``"<unk>"``, so a lost symbol stays
                visible instead of vanishing.

        Returns:
            the text. ``decode(encode(t)) == t`` for any text ``t`` in normal form
            (``normalize(t) == t``) whose tokens are all in the vocabulary.
        """
        ids = self._check_ids(ids)
        structural = (self.pad_id, self.bos_id, self.eos_id)
        if skip_special:
            ids = [i for i in ids if i not in structural]
        return self.join([self._id_to_token[i] for i in ids])

    def _check_ids(self, ids, argument: str = "ids") -> list[int]:
        if isinstance(ids, str):
            raise TypeError(f"{argument} must be a sequence of ints, got a str {preview(ids)}")
        array = np.asarray(ids)
        if array.ndim != 1:
            raise ValueError(
                f"{argument} must be one sequence (1-D), got shape {array.shape}; "
                "decode one row at a time, e.g. [tok.decode(row) for row in batch]"
            )
        return [int(i) for i in check_token_ids(array, argument, self.vocab_size)]

    def encode_batch(
        self,
        texts: Iterable[str],
        add_bos: bool = False,
        add_eos: bool = False,
        unknown: str = "unk",
        length: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode several texts into one padded rectangle.

        Args:
            texts: list of B strings.
            add_bos, add_eos, unknown: as in ``encode``.
            length: number of columns T; default: the longest encoded text.

        Returns:
            ids: int64 ``(B, T)``, short rows filled with ``pad_id`` at the end.
            pad_mask: bool ``(B, T)``, True where ``ids`` is padding (the ``key_padding_mask``
                convention: True = blocked).
        """
        texts = check_texts(texts)
        encoded = [self.encode(text, add_bos, add_eos, unknown) for text in texts]
        return pad_sequences(encoded, self.pad_id, length=length)

    # -- saving ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer to a small, human-readable JSON file."""
        payload = {
            "format": _FILE_FORMAT,
            "version": _FILE_VERSION,
            "kind": type(self).__name__,
            "specials": list(self.specials),
            **self._payload(),
        }
        with open(path, "w", encoding="utf-8") as file:
            json.dump(payload, file, ensure_ascii=False, indent=1)

    def _payload(self) -> dict:
        """What ``save`` writes besides the header: enough for ``_from_payload`` to rebuild."""
        return {"vocab": self.vocab}

    @classmethod
    def _from_payload(cls, payload: dict):
        return cls(payload.get("vocab"))

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Read a tokenizer written by ``save``.

        ``Tokenizer.load`` returns whichever kind the file holds; ``CharTokenizer.load``,
        ``WordTokenizer.load`` and ``BPETokenizer.load`` insist on their own kind.
        """
        try:
            with open(path, encoding="utf-8") as file:
                payload = json.load(file)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{os.fspath(path)!r} is not a tokenizer JSON file: {error}") from None
        if not isinstance(payload, dict) or payload.get("format") != _FILE_FORMAT:
            raise ValueError(
                f"{os.fspath(path)!r} is not a tokenizer JSON file "
                f"(expected a JSON object with format={_FILE_FORMAT!r}, as written by save())"
            )
        kinds = {kind.__name__: kind for kind in (CharTokenizer, WordTokenizer, BPETokenizer)}
        kind = payload.get("kind")
        if kind not in kinds:
            raise ValueError(
                f"{os.fspath(path)!r} holds kind={kind!r}; expected one of {list(kinds)}"
            )
        if cls is not Tokenizer and kind != cls.__name__:
            raise ValueError(
                f"{os.fspath(path)!r} holds a {kind}, not a {cls.__name__}; "
                f"use {kind}.load or Tokenizer.load"
            )
        if payload.get("specials") != list(cls.specials):
            raise ValueError(
                f"{os.fspath(path)!r} has specials {payload.get('specials')!r}; "
                f"expected {list(cls.specials)}"
            )
        return kinds[kind]._from_payload(payload)

    # -- comparing and printing ------------------------------------------------------------

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._id_to_token == other._id_to_token

    __hash__ = None  # equal tokenizers must hash equally; a mutable-looking object opts out

    def __repr__(self) -> str:
        shown = self.vocab[:30]
        more = ", ..." if len(self.vocab) > len(shown) else ""
        listing = ", ".join(repr(token) for token in shown) + more
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}: "
            f"{len(self.specials)} specials + {len(self.vocab)} {self.unit} [{listing}])"
        )


class CharTokenizer(Tokenizer):
    """One token per character.

    >>> tok = CharTokenizer.fit(["emma", "olivia"])
    >>> tok.vocab
    ['a', 'e', 'i', 'l', 'm', 'o', 'v']
    >>> tok.encode("mia", add_bos=True, add_eos=True)
    [1, 8, 6, 4, 2]
    >>> tok.decode([1, 8, 6, 4, 2])
    'mia'

    Every text is already in normal form, so the round trip is exact for any text whose
    characters are all in the vocabulary. ``vocab`` may be a list of characters or one
    string of them: ``CharTokenizer(vocab="abcdefghijklmnopqrstuvwxyz")``.
    """

    unit = "characters"
    _symbol_word = "symbol"

    @classmethod
    def split(cls, text: str) -> list[str]:
        return list(check_text(text))

    def join(self, tokens: Sequence[str]) -> str:
        return "".join(tokens)

    def _check_token(self, token: str, index: int) -> None:
        if len(token) != 1:
            raise ValueError(
                f"vocab[{index}]={token!r} is not a single character; "
                "a CharTokenizer's tokens are characters"
            )


class WordTokenizer(Tokenizer):
    """One token per word, and one per punctuation mark.

    A word is a run of letters, digits or underscores (``\\w+``, so ``"josé"`` is one word);
    every other non-space character is a token of its own (``"forty-two" -> forty, -, two``).
    Spaces are not stored: ``decode`` puts one space between tokens. So the round trip is exact
    for text in normal form, ``normalize(t)``: tokens separated by single spaces.

    >>> tok = WordTokenizer.fit(["hello my name", "hello messi"])
    >>> tok.encode("hello messi")
    [4, 5]
    >>> tok.normalize("Hello,  world!")
    'Hello , world !'
    """

    unit = "words"
    _symbol_word = "word"
    # Why this pattern: a word is kept whole, and each punctuation mark is split off so
    # "messi." and "messi" share the token "messi" instead of being two unrelated words.
    _TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")

    @classmethod
    def split(cls, text: str) -> list[str]:
        return cls._TOKEN_PATTERN.findall(check_text(text))

    def join(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)

    def _describe_position(self, text: str, token_index: int) -> str:
        starts = [match.start() for match in self._TOKEN_PATTERN.finditer(text)]
        character = starts[token_index]
        return f"position {token_index} (character {character})"

    def _check_token(self, token: str, index: int) -> None:
        if self.split(token) != [token]:
            raise ValueError(
                f"vocab[{index}]={token!r} is not one word or one punctuation mark, "
                "so the WordTokenizer could never produce it from text"
            )


class BPETokenizer(Tokenizer):
    """Byte-pair encoding over characters: frequent neighbours merged into one token.

    Training (``fit``) starts from the characters of the corpus and repeats one step: count
    every pair of neighbouring tokens in the corpus, merge the most frequent pair into a new
    token everywhere it occurs, and record the merge. Encoding a text replays the recorded
    merges in the order they were learned, so a text is cut the way the training corpus was.

    >>> tok = BPETokenizer.fit(["ella", "bella", "stella"], vocab_size=13)
    >>> tok.merges
    [('e', 'l'), ('el', 'l'), ('ell', 'a')]
    >>> tok.split("estella")
    ['e', 's', 't', 'ella']
    >>> tok.decode(tok.encode("estella"))
    'estella'

    The base units are characters, not the 256 byte values of GPT-2's byte-level BPE: the
    course's corpora (names, number words) use fewer than 30 distinct characters, each one
    byte, so bytes would add ~230 ids that never occur and make the merge table harder to
    read. The price: a character missing from the corpus encodes as ``<unk>`` (a byte-level
    tokenizer never needs ``<unk>``). Merges may cross spaces (``"hundred and"`` can become
    one token); GPT-2 first splits text into words so that no merge does.

    Ids: the specials 0-3, the characters (sorted, as ``CharTokenizer.fit`` gives them, so a
    BPE tokenizer without merges has the char tokenizer's ids), then one id per merge in the
    order learned. ``decode(encode(t)) == t`` for every text ``t`` made of known characters.

    Args:
        alphabet: the single characters the merges start from (a list or one string).
        merges: ``(left, right)`` token pairs in the order learned; each must join two
            tokens that exist before it (characters or earlier merges) into a new token.
    """

    unit = "tokens"
    _symbol_word = "symbol"

    def __init__(self, alphabet: Iterable[str], merges: Iterable[Sequence[str]] = ()):
        if not isinstance(alphabet, Iterable):
            raise TypeError(f"alphabet must be a list of characters, got {type(alphabet).__name__}")
        alphabet = list(alphabet)
        for index, character in enumerate(alphabet):
            if not isinstance(character, str) or len(character) != 1:
                raise ValueError(
                    f"alphabet[{index}]={character!r} is not a single character; a BPE "
                    "tokenizer starts from characters and builds longer tokens by merges"
                )
        if isinstance(merges, str) or not isinstance(merges, Iterable):
            raise TypeError(
                f"merges must be a list of (left, right) pairs of str, got {type(merges).__name__}"
            )
        merges = [self._check_merge(merge, index) for index, merge in enumerate(merges)]
        known = {*self.specials, *alphabet}
        for index, (left, right) in enumerate(merges):
            for side, token in (("left", left), ("right", right)):
                if token not in known:
                    raise ValueError(
                        f"merges[{index}] {side}={token!r} is not a token yet: each side of a "
                        "merge must be a character or the result of an earlier merge"
                    )
            if left + right in known:
                raise ValueError(
                    f"merges[{index}]=({left!r}, {right!r}) makes {left + right!r}, which is "
                    "already a token (or a special); every merge must make a new token"
                )
            known.add(left + right)
        super().__init__([*alphabet, *(left + right for left, right in merges)])
        self._alphabet = alphabet
        self._merges = merges
        # rank = position in the learned order; encoding always applies the lowest rank first
        self._merge_rank: dict[tuple[str, str], int] = {pair: r for r, pair in enumerate(merges)}

    @staticmethod
    def _check_merge(merge, index: int) -> tuple[str, str]:
        is_pair = not isinstance(merge, str) and isinstance(merge, Sequence) and len(merge) == 2
        if not (is_pair and all(isinstance(side, str) for side in merge)):
            raise TypeError(
                f"merges[{index}] must be a (left, right) pair of str, got {merge!r:.60}"
            )
        return merge[0], merge[1]

    @property
    def alphabet(self) -> list[str]:
        """The characters the merges start from, in id order (ids 4, 5, ...)."""
        return list(self._alphabet)

    @property
    def merges(self) -> list[tuple[str, str]]:
        """The ``(left, right)`` pairs, in the order learned (merge ``i`` makes the token with
        id ``4 + len(alphabet) + i``)."""
        return list(self._merges)

    # -- training ----------------------------------------------------------------------------

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int):
        """Learn merges on ``texts`` until the vocabulary has ``vocab_size`` tokens.

        Args:
            texts: a list of strings (the corpus); a text is a sequence of characters and no
                merge spans two texts.
            vocab_size: the size wanted, specials included: ``4 + (distinct characters) +
                (number of merges)``. Training stops earlier when no pair of neighbours occurs
                twice (merging a pair seen once would only memorise one text).

        Each step merges the pair of neighbouring tokens that occurs most often in the corpus
        (its current segmentation). **Tie-break**: among pairs with the same count, the one
        whose ``(left, right)`` strings come first in Python's string order, so the result
        depends only on the corpus, not on the order of its texts. A pair whose merge would
        spell a token that already exists is skipped (it never becomes a merge): a special
        (the text ``"<eos>"`` must stay five characters, not become the ``<eos>`` token), or
        in principle an earlier token made by another split (not seen on the course's data).

        Returns:
            a ``BPETokenizer`` with the merges in the order learned.
        """
        texts = check_texts(texts)
        vocab_size = check_int(vocab_size, "vocab_size", minimum=1)
        alphabet = sorted(set("".join(texts)))
        smallest = len(cls.specials) + len(alphabet)
        if vocab_size < smallest:
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than the {len(cls.specials)} specials + "
                f"{len(alphabet)} characters of the texts; use vocab_size >= {smallest}"
            )
        return cls(alphabet, _learn_merges(texts, alphabet, vocab_size - smallest))

    # -- encoding: split and join ------------------------------------------------------------

    def split(self, text: str) -> list[str]:
        """Cut a text into BPE token strings: its characters, then the merges in learned order.

        Applying the merges one by one in learned order is the same as repeatedly applying the
        lowest-ranked merge present (GPT-2's loop, done here): a merge can only create pairs
        containing its new token, and every merge using that token was learned later. So the
        loop skips the many merges whose pair is absent from this short text.
        """
        pieces = list(check_text(text))
        while len(pieces) > 1:
            ranks = [self._merge_rank.get(pair, -1) for pair in itertools.pairwise(pieces)]
            present = [rank for rank in ranks if rank >= 0]
            if not present:
                break
            left, right = self._merges[min(present)]
            pieces = _merge_pieces(pieces, left, right)
        return pieces

    def join(self, tokens: Sequence[str]) -> str:
        return "".join(tokens)

    def _check_token(self, token: str, index: int) -> None:
        if not token:
            raise ValueError(f"vocab[{index}]='' is empty; a token spells at least one character")

    def _describe_position(self, text: str, token_index: int) -> str:
        character = sum(len(token) for token in self.split(text)[:token_index])
        return f"position {token_index} (character {character})"

    # -- tables, saving, comparing -------------------------------------------------------------

    def vocab_table(self):
        """The vocabulary as a DataFrame: ``id``, ``token``, ``special``, and for each merged
        token the ``left`` and ``right`` tokens it was made from (empty for the others)."""
        table = super().vocab_table()
        n_fixed = len(self.specials) + len(self._alphabet)
        table["left"] = [""] * n_fixed + [left for left, _ in self._merges]
        table["right"] = [""] * n_fixed + [right for _, right in self._merges]
        return table

    def _payload(self) -> dict:
        # The merges, in order, are the tokenizer; the vocab is written too for a human reader
        # and checked on loading.
        return {
            "alphabet": self.alphabet,
            "merges": [list(pair) for pair in self._merges],
            "vocab": self.vocab,
        }

    @classmethod
    def _from_payload(cls, payload: dict):
        tokenizer = cls(payload.get("alphabet", ()), payload.get("merges", ()))
        if "vocab" in payload and payload["vocab"] != tokenizer.vocab:
            raise ValueError(
                "the file's vocab does not match its alphabet and merges (was it edited by "
                "hand?); the merges define the tokens"
            )
        return tokenizer

    def __eq__(self, other) -> bool:
        return super().__eq__(other) and self._merges == other._merges

    __hash__ = None

    def __repr__(self) -> str:
        shown = [repr(token) for token in self.vocab[len(self._alphabet) :][-8:]]
        more = "..., " if len(self._merges) > len(shown) else ""
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}: {len(self.specials)} specials + "
            f"{len(self._alphabet)} characters + {len(self._merges)} merges "
            f"[{more}{', '.join(shown)}])"
        )


def _merge_pieces(pieces: list[str], left: str, right: str) -> list[str]:
    """One text's tokens with every ``left, right`` neighbour pair joined, scanning left to
    right: in ``a a a`` the merge ``(a, a)`` gives ``aa a``, never overlapping."""
    merged: list[str] = []
    i = 0
    while i < len(pieces):
        if i + 1 < len(pieces) and pieces[i] == left and pieces[i + 1] == right:
            merged.append(left + right)
            i += 2
        else:
            merged.append(pieces[i])
            i += 1
    return merged


_TEXT_BREAK = -1  # separates texts in the flat corpus array: no pair with it is ever counted


def _merge_ids(corpus: np.ndarray, left: int, right: int, new: int) -> np.ndarray:
    """``_merge_pieces`` on the whole flat corpus at once (ids instead of strings).

    corpus: int64 ``(N,)``, every text's token ids, texts separated by ``_TEXT_BREAK``.
    Returns the shorter array in which each ``left, right`` occurrence is ``new``.
    """
    starts = np.flatnonzero((corpus[:-1] == left) & (corpus[1:] == right))
    if left == right and len(starts) > 1:
        # In a run like "a a a a" the pair starts at consecutive positions 0, 1, 2 and they
        # overlap. A left-to-right scan takes the 1st, 3rd, ... start of each run.
        run_begins = np.r_[True, np.diff(starts) != 1]
        first_of_run = starts[run_begins][np.cumsum(run_begins) - 1]
        starts = starts[(starts - first_of_run) % 2 == 0]
    merged = corpus.copy()
    merged[starts] = new
    return np.delete(merged, starts + 1)


def _learn_merges(texts: list[str], alphabet: list[str], n_merges: int) -> list[tuple[str, str]]:
    """The BPE training loop of ``BPETokenizer.fit``: up to ``n_merges`` merges, in order.

    The corpus is one flat int array (all texts, ``_TEXT_BREAK`` between them), so counting
    the pairs and merging one are a few whole-array NumPy operations per step instead of
    Python loops over ~200,000 characters.
    """
    tokens = list(alphabet)  # index -> token string, grows by one per merge
    index = {character: i for i, character in enumerate(alphabet)}
    corpus = np.fromiter(
        (i for text in texts for i in (*(index[c] for c in text), _TEXT_BREAK)), dtype=np.int64
    )
    merges: list[tuple[str, str]] = []
    skipped: set[tuple[int, int]] = set()  # pairs whose merge would spell an existing token
    existing = {*Tokenizer.specials, *tokens}
    while len(merges) < n_merges and len(corpus) > 1:
        n = len(tokens)
        left, right = corpus[:-1], corpus[1:]
        counted = (left != _TEXT_BREAK) & (right != _TEXT_BREAK)
        # pair (l, r) -> bin l * n + r: one bincount counts every pair of the corpus
        counts = np.bincount(left[counted] * n + right[counted], minlength=n * n)
        for l, r in skipped:
            counts[l * n + r] = 0
        best_count = int(counts.max(initial=0))
        if best_count < 2:
            break
        tied = np.flatnonzero(counts == best_count)
        l, r = min(
            ((int(code) // n, int(code) % n) for code in tied),
            key=lambda pair: (tokens[pair[0]], tokens[pair[1]]),  # tie-break: string order
        )
        if tokens[l] + tokens[r] in existing:
            skipped.add((l, r))
            continue
        corpus = _merge_ids(corpus, l, r, new=n)
        tokens.append(tokens[l] + tokens[r])
        existing.add(tokens[-1])
        merges.append((tokens[l], tokens[r]))
    return merges
