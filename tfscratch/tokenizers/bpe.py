"""``BPETokenizer``: byte-pair encoding over characters, and the one merge step it is built on.

Training and encoding share :func:`merge_pair`, the step notebook 11 writes by hand: join
every ``left, right`` neighbour pair of one text, scanning left to right. Training
(:func:`learn_merges`) repeats "count the pairs, merge the most frequent"; encoding
(``BPETokenizer.split``) replays the learned merges on a new text.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from ..checks import check_int, check_text, check_texts
from .base import Tokenizer

__all__ = ["BPETokenizer", "learn_merges", "merge_pair"]


def merge_pair(pieces: list[str], left: str, right: str) -> list[str]:
    """One text's tokens with every ``left, right`` neighbour pair joined into one token.

    The scan goes left to right and never overlaps: in ``a a a`` the merge ``(a, a)`` gives
    ``aa a``.

    Args:
        pieces: the text's tokens, in order.
        left, right: the pair to join.

    Returns:
        a new list of tokens, shorter by the number of pairs joined.
    """
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


def learn_merges(
    texts: Sequence[str],
    alphabet: Sequence[str],
    n_merges: int | None,
    min_pair_count: int = 2,
    reserved: Iterable[str] = Tokenizer.specials,
) -> list[tuple[str, str]]:
    """The BPE training loop: up to ``n_merges`` merges, in the order learned.

    Each step merges the pair of neighbouring tokens that occurs most often in the corpus
    (ties: the first pair in Python's string order) and records it. The pair counts are kept
    up to date instead of recounted: merging a pair changes only the texts that hold it, so
    only those are merged again and have their pairs counted anew (``holders`` remembers which
    texts hold each pair). The merges are those of the plain loop, which recounts every pair
    of the whole corpus at every step (``tests/test_bpe_tokenizer.py`` checks the two agree).

    Args:
        texts: the corpus; no merge spans two texts, or a character outside ``alphabet``.
        alphabet: the characters the tokens are built from.
        n_merges: how many merges to learn at most (None: no limit).
        min_pair_count: stop when no pair occurs this often (at least 2: merging a pair seen
            once would only memorise one text).
        reserved: tokens a merge may not spell (the specials: the text ``"<eos>"`` stays five
            characters). A pair that would spell one, or a token made before by another
            split, is never merged.

    Returns:
        list of ``(left, right)`` pairs of token strings.
    """
    known = re.compile("[" + re.escape("".join(alphabet)) + "]+") if alphabet else None
    corpus = [list(run) for text in texts for run in (known.findall(text) if known else ())]
    counts: Counter[tuple[str, str]] = Counter()  # pair -> occurrences in the corpus
    holders: defaultdict[tuple[str, str], set[int]] = defaultdict(set)  # pair -> texts
    for index, pieces in enumerate(corpus):
        for pair in itertools.pairwise(pieces):
            counts[pair] += 1
            holders[pair].add(index)
    existing = {*reserved, *alphabet}
    merges: list[tuple[str, str]] = []
    while n_merges is None or len(merges) < n_merges:
        best_count = max(counts.values(), default=0)
        if best_count < max(2, min_pair_count):
            break
        left, right = min([pair for pair, count in counts.items() if count == best_count])
        new_token = left + right
        del counts[left, right]
        if new_token in existing:
            continue  # never merged, and no longer counted
        # Merge the pair in every text that holds it; its pairs before and after the merge
        # are tallied and applied to the counts at once.
        removed, added = Counter(), Counter()
        for index in holders.pop((left, right)):
            before = corpus[index]
            after = corpus[index] = merge_pair(before, left, right)
            removed.update(itertools.pairwise(before))
            added.update(itertools.pairwise(after))
            for pair in itertools.pairwise(after):
                if new_token in pair:  # the only pairs this text did not hold before
                    holders[pair].add(index)
        counts.update(added)
        counts.subtract(removed)
        counts.pop((left, right), None)
        existing.add(new_token)
        merges.append((left, right))
    return merges


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
    def fit(cls, texts: Iterable[str], vocab_size: int | None = None, min_count: int = 1):
        """Learn merges on ``texts`` until the vocabulary has ``vocab_size`` tokens.

        Each step merges the pair of neighbouring tokens that occurs most often in the corpus
        (its current segmentation). **Tie-break**: among pairs with the same count, the one
        whose ``(left, right)`` strings come first in Python's string order, so the result
        depends only on the corpus, not on the order of its texts. A pair whose merge would
        spell a token that already exists is skipped (it never becomes a merge): a special
        (the text ``"<eos>"`` must stay five characters, not become the ``<eos>`` token), or
        in principle an earlier token made by another split (not seen on the course's data).

        Args:
            texts: a list of strings (the corpus); a text is a sequence of characters and no
                merge spans two texts.
            vocab_size: the size wanted, specials included: ``4 + (distinct characters) +
                (number of merges)``. Training stops earlier when no pair of neighbours occurs
                twice (merging a pair seen once would only memorise one text). None: merge
                until then.
            min_count: a character must occur this often to enter the alphabet (rarer ones
                encode as ``<unk>``), and a pair this often to be merged (and at least twice).

        Returns:
            a ``BPETokenizer`` with the merges in the order learned.
        """
        texts = check_texts(texts)
        if vocab_size is not None:
            vocab_size = check_int(vocab_size, "vocab_size", minimum=1)
        min_count = check_int(min_count, "min_count", minimum=1)
        characters = Counter(character for text in texts for character in text)
        alphabet = sorted(c for c, count in characters.items() if count >= min_count)
        smallest = len(cls.specials) + len(alphabet)
        if vocab_size is not None and vocab_size < smallest:
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than the {len(cls.specials)} specials + "
                f"{len(alphabet)} characters of the texts; use vocab_size >= {smallest}"
            )
        n_merges = None if vocab_size is None else vocab_size - smallest
        return cls(alphabet, learn_merges(texts, alphabet, n_merges, min_pair_count=min_count))

    # -- encoding: split and join ------------------------------------------------------------

    def split(self, text: str) -> list[str]:
        """Cut a text into BPE token strings: its characters, then the merges in learned order.

        Applying the merges one by one in learned order is the same as repeatedly applying the
        lowest-ranked merge present (GPT-2's loop, done here): a merge can only create pairs
        containing its new token, and every merge using that token was learned later. So the
        loop skips the many merges whose pair is absent from this short text.

        Args:
            text: the text.

        Returns:
            list of token strings; a character outside the alphabet stays a token of its own
            (``encode`` maps it to ``<unk>``).
        """
        pieces = list(check_text(text))
        while len(pieces) > 1:
            present = [
                self._merge_rank[pair]
                for pair in itertools.pairwise(pieces)
                if pair in self._merge_rank
            ]
            if not present:
                break
            left, right = self._merges[min(present)]
            pieces = merge_pair(pieces, left, right)
        return pieces

    def join(self, tokens: Sequence[str]) -> str:
        """The tokens glued together (no separator): the inverse of ``split``.

        Args:
            tokens: token strings.

        Returns:
            the text.
        """
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
