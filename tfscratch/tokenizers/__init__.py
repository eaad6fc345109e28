"""Tokenizers: text to integer ids and back.

A model only sees integers, so the first step of every language task is a fixed, reversible
map between pieces of text ("tokens") and ids ``0 .. vocab_size - 1``. Three kinds, one
contract (:class:`Tokenizer`: ``fit(texts, vocab_size=None, min_count=1)``, ``split``,
``join``, ``encode``, ``decode``):

* ``CharTokenizer`` (``char.py``): one token per character (``"emma" -> e, m, m, a``). Tiny
  vocabulary, long sequences; exact round trip for any text made of known characters.
* ``WordTokenizer`` (``word.py``): one token per word or punctuation mark (``"hello, messi"
  -> hello , messi``). Short sequences, big vocabulary; round trip is exact for text in its
  normal form (``normalize``), because the spaces between tokens are not stored.
* ``BPETokenizer`` (``bpe.py``): byte-pair encoding, in between. It starts from the characters
  and learns merges of frequent neighbours (``"e" + "l" -> "el"``, then ``"el" + "la" ->
  "ella"``), so common pieces become one token and rare ones stay spelled out; exact round
  trip for any text made of known characters.

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

from .base import Tokenizer
from .bpe import BPETokenizer
from .char import CharTokenizer
from .word import WordTokenizer

__all__ = ["BPETokenizer", "CharTokenizer", "Tokenizer", "WordTokenizer"]
