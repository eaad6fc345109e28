"""The contract every tokenizer honours, and what they all share.

A kind of tokenizer says how text is cut into tokens and glued back; everything else (the
special tokens, the two id tables, ``encode``/``decode``, padding a batch, saving) is written
once here, in terms of those. The base class names no kind of tokenizer: a subclass
registers itself (by its class name) when it is defined, which is how ``Tokenizer.load``
finds the kind a file holds.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np

from ..batching import pad_sequences
from ..checks import check_int, check_text, check_texts, check_token_ids, preview

_FILE_FORMAT = "tfscratch.tokenizer"
_FILE_VERSION = 1
_UNKNOWN_OPTIONS = ("unk", "error")


class Tokenizer:
    """Text to integer ids and back: the contract and the shared machinery.

    The contract, the same for every kind (``CharTokenizer``, ``WordTokenizer``,
    ``BPETokenizer``)::

        tok = Kind.fit(texts, vocab_size=None, min_count=1)   # learn a vocabulary
        tok.split(text) -> list[str]                          # text -> token strings
        tok.join(tokens) -> str                               # token strings -> text
        tok.encode(text) -> list[int];  tok.decode(ids) -> str

    A kind defines ``split``, ``join`` and which strings may be tokens (``_check_token``);
    the rest comes from here. ``fit`` here counts the tokens of ``split`` over the corpus,
    which is how characters and words are learnt; ``BPETokenizer`` learns merges instead.

    Args:
        vocab: the ordinary tokens, in the order they get ids: ``vocab[i]`` gets id ``4 + i``
            (the four specials come first). ``fit`` builds it from a corpus.

    Attributes:
        pad_id, bos_id, eos_id, unk_id: the ids 0, 1, 2, 3 of the special tokens.
        specials: ``("<pad>", "<bos>", "<eos>", "<unk>")``, in id order.
        unit: what one token is, for messages (``"characters"``, ``"words"``, ``"tokens"``).
    """

    pad_id = 0
    bos_id = 1
    eos_id = 2
    unk_id = 3
    specials = ("<pad>", "<bos>", "<eos>", "<unk>")
    unit = "tokens"
    _symbol_word = "token"  # how an error message names one unknown token
    _kinds: ClassVar[dict[str, type[Tokenizer]]] = {}  # class name -> class, see below

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the first class of a name keeps it, so a learner's own class cannot hijack a file
        Tokenizer._kinds.setdefault(cls.__name__, cls)

    def __init__(self, vocab: Iterable[str]):
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

    # -- what a kind of tokenizer defines ---------------------------------------------------

    def split(self, text: str) -> list[str]:
        """Cut a text into token strings (no ids yet, no special tokens).

        Args:
            text: the text.

        Returns:
            list of str, in order; ``join`` glues them back.
        """
        raise NotImplementedError

    def join(self, tokens: Sequence[str]) -> str:
        """Glue token strings back into a text: the inverse of ``split`` on normal text.

        Args:
            tokens: token strings, as ``split`` gives them.

        Returns:
            the text.
        """
        raise NotImplementedError

    def _check_token(self, token: str, index: int) -> None:
        """Raise ``ValueError`` if ``token`` can never come out of ``split``."""
        raise NotImplementedError

    def normalize(self, text: str) -> str:
        """The normal form of ``text``: ``decode(encode(normalize(t))) == normalize(t)``
        whenever every token of ``t`` is in the vocabulary.

        Args:
            text: the text.

        Returns:
            ``join(split(text))``.
        """
        return self.join(self.split(check_text(text)))

    # -- building ------------------------------------------------------------------------

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int | None = None, min_count: int = 1):
        """Build a tokenizer whose vocabulary is the tokens ``split`` finds in ``texts``.

        Args:
            texts: a list of strings (the corpus).
            vocab_size: at most this many ids, the four specials included: the most frequent
                tokens are kept (ties: Python's string order). None: every token kept.
            min_count: keep only tokens seen at least this many times. A token left out
                encodes as ``<unk>``.

        Returns:
            a tokenizer whose ordinary tokens are sorted (Python's string order), so the
            same corpus always gives the same ids, whatever order the texts came in.
        """
        texts = check_texts(texts)
        vocab_size, min_count = cls._check_fit_options(vocab_size, min_count)
        blank = cls(())  # cutting text into characters or words needs no vocabulary
        counts = Counter(token for text in texts for token in blank.split(text))
        if not counts:
            raise ValueError(
                f"texts holds no {cls._symbol_word} to learn ({len(texts)} texts, all empty); "
                "fit the tokenizer on a corpus, e.g. tfscratch.data.load_names()"
            )
        kept = sorted(token for token, count in counts.items() if count >= min_count)
        if vocab_size is not None:
            by_frequency = sorted(kept, key=lambda token: -counts[token])  # stable: ties sorted
            kept = sorted(by_frequency[: vocab_size - len(cls.specials)])
        return cls(kept)

    @classmethod
    def _check_fit_options(cls, vocab_size, min_count) -> tuple[int | None, int]:
        if vocab_size is not None:
            vocab_size = check_int(vocab_size, "vocab_size", minimum=len(cls.specials))
        return vocab_size, check_int(min_count, "min_count", minimum=1)

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
        """The token string of one id.

        Args:
            token_id: an int in ``[0, vocab_size)``.

        Returns:
            the token (a special such as ``"<eos>"`` for ids 0-3).
        """
        self._check_ids([token_id], argument="token_id")
        return self._id_to_token[int(token_id)]

    def token_to_id(self, token: str) -> int:
        """The id of one token string.

        Args:
            token: a token of the vocabulary, specials included (``"<eos>" -> 2``).

        Returns:
            its id.
        """
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
        """Write the tokenizer to a small, human-readable JSON file.

        Args:
            path: the file to write (``.json`` by convention); ``load`` reads it back.
        """
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

        Args:
            path: a file written by ``save``.

        Returns:
            the tokenizer, equal to the one saved.
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
        kind = payload.get("kind")
        if kind not in Tokenizer._kinds:
            raise ValueError(
                f"{os.fspath(path)!r} holds kind={kind!r}; expected one of {list(Tokenizer._kinds)}"
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
        return Tokenizer._kinds[kind]._from_payload(payload)

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
