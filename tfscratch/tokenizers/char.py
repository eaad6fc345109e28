"""``CharTokenizer``: one token per character."""

from __future__ import annotations

from collections.abc import Sequence

from ..checks import check_text
from .base import Tokenizer


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
    characters are all in the vocabulary. Tiny vocabulary, long sequences.

    Args:
        vocab: the characters, in the order they get ids (4, 5, ...): a list of one-character
            strings or one string of them, ``CharTokenizer(vocab="abcdefghijklmnopqrstuvwxyz")``.
            ``CharTokenizer.fit(texts)`` builds it from a corpus.
    """

    unit = "characters"
    _symbol_word = "symbol"

    def split(self, text: str) -> list[str]:
        """The characters of ``text``, in order: ``"emma" -> ["e", "m", "m", "a"]``.

        Args:
            text: a str.

        Returns:
            list of one-character strings.
        """
        return list(check_text(text))

    def join(self, tokens: Sequence[str]) -> str:
        """The characters glued together: ``["e", "m", "m", "a"] -> "emma"``.

        Args:
            tokens: token strings.

        Returns:
            the text.
        """
        return "".join(tokens)

    def _check_token(self, token: str, index: int) -> None:
        if len(token) != 1:
            raise ValueError(
                f"vocab[{index}]={token!r} is not a single character; "
                "a CharTokenizer's tokens are characters"
            )
