"""From token ids to model inputs: padding, language-model rows, batches.

A model reads rectangles of token ids; texts come in all lengths. This module makes the one
from the other:

* ``pad_sequences``: sequences of different lengths into one ``(B, T)`` array and its mask.
* ``lm_examples`` (one row per text, makemore style) and ``lm_windows`` (windows over the
  texts joined end to end, GPT style): inputs ``X`` and next-token targets ``Y``.
* ``seq2seq_batch`` / ``seq2seq_batches``: teacher-forcing batches for an encoder-decoder.
* ``batches`` (one epoch), ``infinite_batches`` (epoch after epoch) and ``trim_padding``
  (drop the columns that are padding in every row of a batch).

Padded targets hold ``IGNORE_INDEX`` (-100, :data:`tfscratch.functional.IGNORE_INDEX`), the
value the loss skips. Everything random takes a ``seed`` and draws from its own
``numpy.random.Generator``, so the same seed gives the same batches and NumPy's global random
state is never touched. The data sets themselves live in :mod:`tfscratch.data`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from .checks import check_int, check_seed, check_texts, check_token_ids
from .functional import IGNORE_INDEX

__all__ = [
    "batches",
    "infinite_batches",
    "lm_examples",
    "lm_windows",
    "pad_sequences",
    "seq2seq_batch",
    "seq2seq_batches",
    "trim_padding",
]


# -- from token ids to model inputs ----------------------------------------------------------


def pad_sequences(
    seqs: Iterable[Sequence[int]], pad_id: int, length: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Put sequences of different lengths into one rectangle, padding at the end.

    Args:
        seqs: B sequences of ints (lists or 1-D arrays).
        pad_id: the id written into the empty places.
        length: number of columns T; default: the longest sequence. A sequence longer
            than ``length`` is an error (never silently cut).

    Returns:
        ids: int64 ``(B, T)``.
        pad_mask: bool ``(B, T)``, True where ``ids`` is padding (True = blocked, the
            ``key_padding_mask`` convention).
    """
    if isinstance(seqs, (str, np.ndarray)) or not isinstance(seqs, Iterable):
        raise TypeError(f"seqs must be a list of int sequences, got {type(seqs).__name__}")
    pad_id = check_int(pad_id, "pad_id")
    rows = []
    for index, seq in enumerate(seqs):
        row = np.asarray(seq)
        if row.ndim != 1 or (row.size and not np.issubdtype(row.dtype, np.integer)):
            raise TypeError(
                f"seqs[{index}] must be a 1-D sequence of ints, got {seq!r:.60} "
                f"(shape {row.shape}, dtype {row.dtype})"
            )
        rows.append(row.astype(np.int64))
    lengths = np.array([len(row) for row in rows], dtype=np.int64)
    longest = int(lengths.max()) if len(rows) else 0
    if length is None:
        length = longest
    length = check_int(length, "length", minimum=0)
    if longest > length:
        index = int(lengths.argmax())
        raise ValueError(
            f"length={length} is shorter than seqs[{index}] ({longest} ids); "
            f"use length >= {longest} or length=None"
        )
    # The mask says where the real ids go; filling those places with all ids joined end to
    # end puts each sequence in its own row without a Python loop over positions.
    pad_mask = np.arange(length)[None, :] >= lengths[:, None]
    ids = np.full((len(rows), length), pad_id, dtype=np.int64)
    if rows:
        ids[~pad_mask] = np.concatenate(rows)
    return ids, pad_mask


def lm_examples(texts: Iterable[str], tokenizer, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets for a language model, one row per text (makemore style).

    For the name "emma" with ``block_size=6``::

        X:  <bos>  e   m   m   a  <pad>      what the model reads
        Y:    e    m   m   a <eos> -100      what it must predict at each position

    Args:
        texts: N strings.
        tokenizer: anything with ``encode(text)``, ``pad_id``, ``bos_id`` and ``eos_id``
            (a ``CharTokenizer`` or ``WordTokenizer``).
        block_size: columns T; every text must fit with its ``<bos>``: at most
            ``block_size - 1`` tokens.

    Returns:
        X: int64 ``(N, block_size)``: ``<bos>``, the text's ids, then ``pad_id``.
        Y: int64 ``(N, block_size)``: the text's ids, ``<eos>``, then ``IGNORE_INDEX`` (-100),
           so padding never counts in the loss.
    """
    texts = check_texts(texts)
    block_size = check_int(block_size, "block_size", minimum=2)
    encoded = [tokenizer.encode(text) for text in texts]
    too_long = [i for i, ids in enumerate(encoded) if len(ids) > block_size - 1]
    if too_long:
        longest = max(too_long, key=lambda i: len(encoded[i]))
        unit = getattr(tokenizer, "unit", "tokens")
        raise ValueError(
            f"block_size={block_size} is too short for {texts[longest]!r} "
            f"({len(encoded[longest])} {unit} + <bos>); {len(too_long)} of {len(texts)} texts "
            f"do not fit: use block_size >= {len(encoded[longest]) + 1}"
        )
    X, _ = pad_sequences(
        [[tokenizer.bos_id, *ids] for ids in encoded], tokenizer.pad_id, block_size
    )
    Y, _ = pad_sequences([[*ids, tokenizer.eos_id] for ids in encoded], IGNORE_INDEX, block_size)
    return X, Y


def lm_windows(
    texts: Iterable[str],
    tokenizer,
    block_size: int,
    stride: int | None = None,
    score_partial: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets from windows over the texts joined end to end (GPT style).

    The texts are joined in the order given, each led by ``<bos>`` as in :func:`lm_examples`,
    and cut into rows of ``block_size`` with no padding. For "emma", "liam", "ava" with
    ``block_size=6``::

        X:  <bos>  e   m   m   a  <bos> | l   i   a   m  <bos>  a  | ...
        Y:    e    m   m   a <eos>  l   | i   a   m <eos>  a    v  | ...

    Joined end to end, ``X`` is every row of :func:`lm_examples` without its padding and ``Y``
    every row of targets, so the targets (each character, then the ``<eos>`` that ends the
    text) are the same ones, and the loss means the same thing; none of a row is padding.
    The model reads ``<bos>`` where one text ends and the next begins, as it does at the
    start of every text it will be asked to continue. Join the texts in a random order (the
    parts of :func:`train_val_test_split` are already shuffled): neighbours in a sorted list
    share prefixes that a model would learn to copy.

    Args:
        texts: N strings.
        tokenizer: anything with ``encode(text)``, ``bos_id`` and ``eos_id``.
        block_size: columns T of every row.
        stride: positions between the starts of consecutive rows (default ``block_size``:
            rows side by side, each target in one row; smaller strides overlap). The tail
            that does not fill a whole row is left out.
        score_partial: also score the targets of a text whose ``<bos>`` lies before the
            row's first column (the row starts inside it, so the model predicts from part of
            the text). ``False`` sets them to ``IGNORE_INDEX`` (-100): every scored target
            then sees its whole text so far, as it will when generating.

    Returns:
        X: int64 ``(R, block_size)``, R = ``(L - block_size) // stride + 1`` rows for L
           tokens in all (the texts' lengths + 1 each).
        Y: int64 ``(R, block_size)``: ``X`` shifted by one, ``<eos>`` where a text ends.
    """
    texts = check_texts(texts)
    block_size = check_int(block_size, "block_size", minimum=1)
    stride = block_size if stride is None else check_int(stride, "stride", minimum=1)
    encoded = [tokenizer.encode(text) for text in texts]
    lengths = np.array([len(ids) + 1 for ids in encoded], dtype=np.int64)
    n_tokens = int(lengths.sum())
    if n_tokens < block_size:
        raise ValueError(
            f"block_size={block_size} is longer than the {n_tokens} tokens of all "
            f"{len(texts)} texts joined; use block_size <= {n_tokens}"
        )
    bos, eos = [tokenizer.bos_id], [tokenizer.eos_id]
    inputs = np.concatenate([np.asarray(bos + list(ids)) for ids in encoded]).astype(np.int64)
    targets = np.concatenate([np.asarray(list(ids) + eos) for ids in encoded]).astype(np.int64)
    # rows[r, t] is the stream position of column t of row r: one fancy index cuts them all.
    row_starts = np.arange(0, n_tokens - block_size + 1, stride)
    rows = row_starts[:, None] + np.arange(block_size)
    X, Y = inputs[rows], targets[rows]
    if not score_partial:
        # Where each position's text begins in the stream; before the row's start = cut off.
        text_starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        Y[text_starts[rows] < row_starts[:, None]] = IGNORE_INDEX
    return X, Y


def _check_id_lists(seqs, name: str) -> list[np.ndarray]:
    """A list of 1-D sequences of non-negative ints, as int64 arrays."""
    if isinstance(seqs, (str, bytes, np.ndarray)) or not isinstance(seqs, Iterable):
        raise TypeError(
            f"{name} must be a list of token id lists, got {type(seqs).__name__} {seqs!r:.60}"
        )
    rows = []
    for index, seq in enumerate(seqs):
        row = np.asarray(seq)
        if (
            isinstance(seq, (str, bytes))
            or row.ndim != 1
            or (row.size and not np.issubdtype(row.dtype, np.integer))
        ):
            raise TypeError(
                f"{name}[{index}] must be a 1-D sequence of int token ids, got {seq!r:.60}"
            )
        rows.append(check_token_ids(row, f"{name}[{index}]", vocab_size=None).astype(np.int64))
    return rows


def seq2seq_batch(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    pad_id: int,
    bos_id: int,
    eos_id: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One teacher-forcing batch for an encoder-decoder, from B (source, target) id lists.

    For the pair ``"hello messi" -> "hola messi"`` in a batch whose longest target has
    3 tokens::

        src:          hello  messi  <pad>    (if another source is 3 long)
        tgt_in:       <bos>  hola   messi  <pad>     what the decoder reads
        tgt_out:      hola   messi  <eos>  -100      what it must predict at each position

    ``tgt_in`` is ``tgt_out`` shifted right by one, so position ``t`` of the decoder predicts
    target token ``t`` having seen only the tokens before it. Both target rows have
    ``len(tgt) + 1`` real entries, so one padding mask serves both.

    Args:
        src_ids: B source sequences of token ids (lists or 1-D int arrays), each non-empty.
        tgt_ids: B target sequences, without ``<bos>``/``<eos>`` (those are added here).
        pad_id: id written into padding places of ``src`` and ``tgt_in``.
        bos_id: id put in front of every target to make ``tgt_in``.
        eos_id: id put after every target to make ``tgt_out``.

    Returns:
        src: int64 ``(B, S)``, S = longest source, padded with ``pad_id``.
        tgt_in: int64 ``(B, T)``, T = longest target + 1: ``<bos>``, the target, padding.
        tgt_out: int64 ``(B, T)``: the target, ``<eos>``, then ``IGNORE_INDEX`` (-100) so
            padding never counts in the loss.
        src_pad_mask: bool ``(B, S)``, True where ``src`` is padding.
        tgt_pad_mask: bool ``(B, T)``, True where ``tgt_in`` is padding (and, at the same
            places, ``tgt_out`` is ``IGNORE_INDEX``).
    """
    sources = _check_id_lists(src_ids, "src_ids")
    targets = _check_id_lists(tgt_ids, "tgt_ids")
    if len(sources) != len(targets):
        raise ValueError(
            f"src_ids has {len(sources)} sequences but tgt_ids has {len(targets)}; "
            "they must pair up one to one"
        )
    if not sources:
        raise ValueError("src_ids and tgt_ids are empty; a batch needs at least one pair")
    empty = [index for index, row in enumerate(sources) if row.size == 0]
    if empty:
        raise ValueError(
            f"src_ids[{empty[0]}] is empty: the encoder would have nothing to attend to "
            f"({len(empty)} empty source sequences in all)"
        )
    pad_id = check_int(pad_id, "pad_id", minimum=0)
    bos_id = check_int(bos_id, "bos_id", minimum=0)
    eos_id = check_int(eos_id, "eos_id", minimum=0)

    src, src_pad_mask = pad_sequences(sources, pad_id)
    bos, eos = np.array([bos_id]), np.array([eos_id])
    tgt_in, tgt_pad_mask = pad_sequences([np.concatenate([bos, row]) for row in targets], pad_id)
    tgt_out, _ = pad_sequences([np.concatenate([row, eos]) for row in targets], IGNORE_INDEX)
    return src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask


# -- batching --------------------------------------------------------------------------------


def _check_arrays(arrays) -> tuple[np.ndarray, ...]:
    arrays = (arrays,) if isinstance(arrays, np.ndarray) else arrays
    if not isinstance(arrays, (tuple, list)) or not arrays:
        raise TypeError(
            f"arrays must be an array or a tuple of arrays with the same number of rows, "
            f"got {type(arrays).__name__}"
        )
    arrays = tuple(np.asarray(array) for array in arrays)
    shapes = [array.shape for array in arrays]
    if any(array.ndim == 0 for array in arrays) or len({shape[0] for shape in shapes}) != 1:
        raise ValueError(
            f"arrays must all have the same number of rows (first dimension), got shapes {shapes}"
        )
    return arrays


def batches(
    arrays,
    batch_size: int,
    seed: int | None = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[tuple[np.ndarray, ...]]:
    """One epoch of mini-batches.

    Args:
        arrays: one array or a tuple of arrays with the same number of rows N (e.g. ``(X, Y)``).
        batch_size: rows per batch.
        seed: seed of the shuffle (ignored when ``shuffle=False``); the same seed gives the
            same batches.
        shuffle: visit the rows in a random order.
        drop_last: skip the last batch when it has fewer than ``batch_size`` rows.

    Yields:
        a tuple with one ``(batch_size, ...)`` slice of each array, rows aligned (row i of
        every slice comes from the same example). Always a tuple, even for one array:
        ``for (X_batch,) in batches(X, 32)``.
    """
    arrays = _check_arrays(arrays)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    n_rows = len(arrays[0])
    order = np.random.default_rng(check_seed(seed)).permutation(n_rows) if shuffle else None
    # The checks above run now; the generator below runs lazily as the loop asks.
    return _epoch(arrays, batch_size, order, n_rows, drop_last)


def _epoch(arrays, batch_size, order, n_rows, drop_last):
    stop = n_rows - n_rows % batch_size if drop_last else n_rows
    for start in range(0, stop, batch_size):
        if order is None:
            rows = slice(start, start + batch_size)  # a view, no copy
        else:
            rows = order[start : start + batch_size]
        yield tuple(array[rows] for array in arrays)


def infinite_batches(
    arrays, batch_size: int, seed: int | None = 0, drop_last: bool = False
) -> Iterator[tuple[np.ndarray, ...]]:
    """Mini-batches forever: epoch after epoch, each in a fresh random order.

    Every epoch visits each row once; the orders come from one generator seeded with
    ``seed``, so the whole stream is the same on every run. Take what you need with
    ``next(stream)`` or ``itertools.islice``.

    Args:
        arrays: one array or a tuple of arrays with the same number of rows N.
        batch_size: rows per batch.
        seed: seed of the shuffles; the same seed gives the same stream.
        drop_last: skip each epoch's last batch when it has fewer than ``batch_size`` rows.

    Yields:
        tuples with one ``(batch_size, ...)`` slice of each array, as :func:`batches`.
    """
    arrays = _check_arrays(arrays)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    n_rows = len(arrays[0])
    if n_rows == 0 or (drop_last and batch_size > n_rows):
        raise ValueError(
            f"batch_size={batch_size} with drop_last={drop_last} and {n_rows} rows would "
            "never yield a batch"
        )
    rng = np.random.default_rng(check_seed(seed))
    return _forever(arrays, batch_size, rng, n_rows, drop_last)


def _forever(arrays, batch_size, rng, n_rows, drop_last):
    while True:
        yield from _epoch(arrays, batch_size, rng.permutation(n_rows), n_rows, drop_last)


def trim_padding(
    batch_stream: Iterable[tuple[np.ndarray, np.ndarray]], ignore_index: int = IGNORE_INDEX
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Drop the trailing columns of each ``(X, Y)`` batch that no row scores.

    Rows of :func:`lm_examples` are padded to ``block_size``, but a batch only needs to be as
    wide as its longest text. A causal model's position ``t`` never reads a later position,
    so cutting the columns after the last scored target changes nothing for the positions
    that are scored: the loss on the trimmed batch is the loss on the full one, for less work.

    Args:
        batch_stream: an iterable of ``(X, Y)`` pairs, ``X`` and ``Y`` both ``(B, T)``
            (e.g. :func:`batches` or :func:`infinite_batches` over ``lm_examples``);
            read lazily, so an endless stream stays endless.
        ignore_index: the target value of an unscored position (default ``IGNORE_INDEX``).

    Yields:
        ``(X[:, :width], Y[:, :width])`` (views, no copy), ``width`` = 1 + the last column
        in which some row has a scored target (the whole batch when none is scored).
    """
    for X, Y in batch_stream:
        scored_columns = (Y != ignore_index).any(axis=0)  # (T,)
        width = len(scored_columns) - int(np.argmax(scored_columns[::-1]))
        yield X[:, :width], Y[:, :width]


def seq2seq_batches(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    batch_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    seed: int | None = 0,
    shuffle: bool = True,
    forever: bool = True,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Mini-batches of :func:`seq2seq_batch` over (source, target) pairs.

    Each batch is padded only to its own longest sequences, so short pairs cost little.

    Args:
        src_ids, tgt_ids: N paired id sequences (see :func:`seq2seq_batch`).
        batch_size: pairs per batch (the last batch of an epoch may be smaller).
        pad_id, bos_id, eos_id: as in :func:`seq2seq_batch`.
        seed: seed of the shuffle; the same seed gives the same stream.
        shuffle: visit the pairs in a random order (each epoch a fresh one).
        forever: epoch after epoch without end (for :func:`tfscratch.train.train`);
            ``False`` gives one epoch, e.g. ``list(seq2seq_batches(..., shuffle=False,
            forever=False))`` for validation batches.

    Yields:
        ``(src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask)`` tuples.
    """
    sources = _check_id_lists(src_ids, "src_ids")
    targets = _check_id_lists(tgt_ids, "tgt_ids")
    # One full check up front, so a bad pair fails here rather than mid-training.
    seq2seq_batch(sources, targets, pad_id, bos_id, eos_id)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    n_pairs = len(sources)
    if not forever:
        index_batches = batches(np.arange(n_pairs), batch_size, seed=seed, shuffle=shuffle)
    elif shuffle:
        index_batches = infinite_batches(np.arange(n_pairs), batch_size, seed=seed)
    else:
        index_batches = _in_order_forever(n_pairs, batch_size)

    def assemble():
        for (rows,) in index_batches:
            yield seq2seq_batch(
                [sources[i] for i in rows], [targets[i] for i in rows], pad_id, bos_id, eos_id
            )

    return assemble()


def _in_order_forever(n_rows: int, batch_size: int):
    """Batches of row indices ``0 .. n_rows - 1`` in order, epoch after epoch."""
    while True:
        yield from _epoch((np.arange(n_rows),), batch_size, None, n_rows, False)
