"""``WordTokenizer``: one token per word, and one per punctuation mark."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..checks import check_text
from .base import Tokenizer


class WordTokenizer(Tokenizer):
    """One token per word, and one per punctuation mark.

    A word is a run of letters, digits or underscores (``\\w+``, so ``"josé"`` is one word);
    every other non-space character is a token of its own (``"forty-two" -> forty, -, two``).
    Spaces are not stored: ``decode`` puts one space between tokens. So the round trip is exact
    for text in normal form, ``normalize(t)``: tokens separated by single spaces. Short
    sequences, big vocabulary.

    >>> tok = WordTokenizer.fit(["hello my name", "hello messi"])
    >>> tok.encode("hello messi")
    [4, 5]
    >>> tok.normalize("Hello,  world!")
    'Hello , world !'

    Args:
        vocab: the words and punctuation marks, in the order they get ids (4, 5, ...).
            ``WordTokenizer.fit(texts)`` builds it from a corpus.
    """

    unit = "words"
    _symbol_word = "word"
    # Why this pattern: a word is kept whole, and each punctuation mark is split off so
    # "messi." and "messi" share the token "messi" instead of being two unrelated words.
    _TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")

    def split(self, text: str) -> list[str]:
        """The words and punctuation marks of ``text``: ``"forty-two!" -> ["forty", "-",
        "two", "!"]`` (spaces only separate).

        Args:
            text: a str.

        Returns:
            list of token strings.
        """
        return self._TOKEN_PATTERN.findall(check_text(text))

    def join(self, tokens: Sequence[str]) -> str:
        """The tokens with one space between them: ``["forty", "-", "two"] -> "forty - two"``.

        Args:
            tokens: token strings.

        Returns:
            the text in normal form.
        """
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
