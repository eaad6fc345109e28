"""Input checks that turn a bad argument into a sentence a learner can act on.

Without them a wrong shape surfaces as a NumPy broadcasting traceback three layers down,
and an out-of-range token id silently indexes the wrong row. Every check names the
argument, what was given and what was expected.

Each ``check_*`` takes the value and ``name``, the argument's name as the learner wrote it
(``"d_model"``), and returns the value (converted where said) or raises ``TypeError`` (wrong
type) / ``ValueError`` (wrong value or shape).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np


def describe(value) -> str:
    """Short description of a value for an error message.

    Args:
        value: anything.

    Returns:
        ``"an array of shape ... and dtype ..."`` for an array, else type and repr (<= 120
        characters).
    """
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:120]


def check_int(value, name: str, minimum: int | None = None) -> int:
    """An int (not a bool: ``n=True`` is always a mistake), at least ``minimum`` if given.

    Args:
        value: the value to check.
        name: the argument's name, as the message quotes it.
        minimum: the smallest allowed value, or None.

    Returns:
        ``int(value)``.
    """
    kind = {0: "a non-negative int", 1: "a positive int"}.get(minimum, "an int")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        bound = f" >= {minimum}" if minimum not in (None, 0, 1) else ""
        raise TypeError(f"{name}={value!r:.60} must be {kind}{bound}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        words = f"{kind} (at least {minimum})" if minimum < 2 else f"at least {minimum}"
        raise ValueError(f"{name}={value!r} must be {words}")
    return int(value)


def check_positive_int(value, name: str) -> int:
    """:func:`check_int` with ``minimum=1``. Args: value, name. Returns: ``int(value)``."""
    return check_int(value, name, minimum=1)


def check_seed(seed, name: str = "seed") -> int | None:
    """A seed for ``np.random.default_rng``: None (fresh entropy) or an int >= 0.

    Args:
        seed: the value to check.
        name: the argument's name, as the message quotes it.

    Returns:
        None or ``int(seed)``.
    """
    return None if seed is None else check_int(seed, name, minimum=0)


def check_number(
    value,
    name: str,
    *,
    low: float = -math.inf,
    low_inclusive: bool = True,
    high: float = math.inf,
    high_inclusive: bool = False,
    expected: str,
) -> float:
    """``float(value)`` for a real number in the range, or an error naming the argument, the
    value and the allowed range (``expected``, in words). NaN is never in range.

    Args:
        value: the value to check.
        name: the argument's name, as the message quotes it.
        low, high: the range's ends.
        low_inclusive, high_inclusive: whether each end is allowed.
        expected: the range in words, for the message.

    Returns:
        ``float(value)``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}={value!r} must be a real number ({expected})")
    number = float(value)
    above_low = number >= low if low_inclusive else number > low
    below_high = number <= high if high_inclusive else number < high
    if not (above_low and below_high):  # also rejects NaN, which fails every comparison
        raise ValueError(f"{name}={value!r} is out of range: expected {expected}")
    return number


def check_probability(value, name: str) -> float:
    """A drop probability: a float in [0, 1).

    Args:
        value: the value to check.
        name: the argument's name, as the message quotes it.

    Returns:
        ``float(value)``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a float in [0, 1), got {describe(value)}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value!r} must be in [0, 1)")
    return float(value)


def check_divisible(d_model: int, n_heads: int) -> None:
    """Args: d_model, n_heads: ``d_model`` must split into ``n_heads`` equal head widths."""
    if d_model % n_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; each head needs an "
            f"equal slice of the model width"
        )


def check_choice(value, name: str, choices: tuple) -> str:
    """Args: value, name, choices: ``value`` must be one of ``choices``. Returns: value."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {choices}")
    return value


def check_float_array(x, name: str, ndim: int | tuple[int, ...], last_dim: int | None = None):
    """A float array of rank ``ndim`` (an int or a tuple of allowed ranks), ``(..., last_dim)``.

    Args:
        x: the array to check.
        name: the argument's name, as the message quotes it.
        ndim: the allowed rank(s).
        last_dim: the size the last axis must have, or None.

    Returns:
        ``x``.
    """
    # dtype.kind, not np.issubdtype: this runs on every layer call, where NumPy's helper costs
    # more than the check itself during one-token generation steps
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise TypeError(f"{name} must be a float numpy array, got {describe(x)}")
    ranks = (ndim,) if isinstance(ndim, int) else ndim
    if x.ndim not in ranks:
        expected = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{name} must be {expected}, got shape {x.shape}")
    if last_dim is not None and x.shape[-1] != last_dim:
        raise ValueError(
            f"{name} has last dimension {x.shape[-1]} (shape {x.shape}); expected {last_dim}"
        )
    if x.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (shape {x.shape}); expected at least one row")
    return x


def check_token_ids(
    tokens,
    name: str,
    vocab_size: int | None,
    ndim: int | None = None,
    ignore_index: int | None = None,
) -> np.ndarray:
    """Integer token ids in ``[0, vocab_size)`` (only ``>= 0`` when ``vocab_size`` is None),
    or equal to ``ignore_index`` if given; lists are accepted and converted. The error names
    the first id out of range and where it is.

    Args:
        tokens: an integer array (or list) of ids.
        name: the argument's name, as the message quotes it.
        vocab_size: ids must be below it (None: only ``>= 0``).
        ndim: the rank required, or None.
        ignore_index: a value allowed besides the ids (padded targets), or None.

    Returns:
        the ids as an array.
    """
    if isinstance(tokens, (list, tuple)):
        try:
            tokens = np.asarray(tokens)
        except ValueError:  # NumPy's "inhomogeneous shape": rows of different lengths
            raise ValueError(
                f"{name} is a ragged list (rows of different lengths); pad the rows to one "
                "length (tfscratch.batching pads and masks) or pass them one at a time"
            ) from None
        if tokens.size == 0:
            tokens = tokens.astype(np.int64)
    if not isinstance(tokens, np.ndarray):
        raise TypeError(f"{name} must be an integer array of token ids, got {describe(tokens)}")
    if tokens.size and tokens.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must hold integer token ids, got dtype {tokens.dtype} "
            f"(shape {tokens.shape}); convert with .astype(np.int64)"
        )
    if ndim is not None and tokens.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tokens.shape}")
    if not tokens.size:
        return tokens
    # min/max first: two cheap reductions in the usual case where every id is fine
    low, high = int(tokens.min()), int(tokens.max())
    if low >= 0 and (vocab_size is None or high < vocab_size) and ignore_index is None:
        return tokens
    valid = tokens >= 0 if vocab_size is None else (tokens >= 0) & (tokens < vocab_size)
    if ignore_index is not None:
        valid |= tokens == ignore_index
    if not valid.all():
        where = tuple(int(i) for i in np.argwhere(~valid)[0])
        expected = "ids >= 0" if vocab_size is None else f"ids in [0, {vocab_size})"
        if vocab_size is not None:
            expected += f" (a vocabulary of {vocab_size})"
        if ignore_index is not None:
            expected += f" or {ignore_index} (ignored)"
        position = ", ".join(map(str, where))
        raise ValueError(
            f"{name} contains token id {int(tokens[where])} at [{position}]; expected {expected}"
        )
    return tokens


def check_token_id(value, name: str, vocab_size: int) -> int:
    """A single token id (``stop_token``, ``bos``, ``eos``) in ``[0, vocab_size)``.

    Args:
        value: the id.
        name: the argument's name, as the message quotes it.
        vocab_size: the number of ids.

    Returns:
        ``int(value)``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int token id, got {describe(value)}")
    if not 0 <= value < vocab_size:
        raise ValueError(f"{name}={value!r} must be a token id in [0, {vocab_size})")
    return int(value)


def check_token_list(tokens, name: str, vocab_size: int) -> list[int]:
    """One non-empty sequence of token ids (list, tuple or 1-D array) -> list of ints (a
    ``prompt`` for generate, a ``src`` for translate).

    Args:
        tokens: a list, tuple or 1-D array of ids.
        name: the argument's name, as the message quotes it.
        vocab_size: the number of ids.

    Returns:
        list of int.
    """
    if isinstance(tokens, np.ndarray):
        tokens = tokens.tolist()
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(f"{name} must be a list of token ids, got {describe(tokens)}")
    if len(tokens) == 0:
        raise ValueError(f"{name}={tokens!r} is empty; give at least one token (e.g. the <bos> id)")
    if tokens and all(isinstance(t, (list, tuple)) for t in tokens):
        count = f"{len(tokens)} sequence{'s' if len(tokens) > 1 else ''}"
        raise ValueError(
            f"{name} is nested ({count} of ids); it takes one flat sequence of token ids (a "
            "batch of prompts is not supported: call once per sequence)"
        )
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in tokens):
        raise TypeError(f"{name} must hold int token ids, got {tokens[:8]!r}")
    check_token_ids(np.asarray(tokens), name, vocab_size)
    return [int(t) for t in tokens]


def check_length(T: int, max_len: int, name: str = "sequence length", offset: int = 0) -> None:
    """Positions ``offset ... offset + T - 1`` must exist in a table of ``max_len``.

    Args:
        T: the number of new positions.
        max_len: the table's length.
        name: what ``T`` is, for the message.
        offset: positions already used (a KV cache's length).
    """
    if offset + T > max_len:
        where = f" after {offset} cached positions" if offset else ""
        sum_ = f" (offset={offset} + {T} = {offset + T})" if offset else ""
        raise ValueError(
            f"{name} {T}{where} exceeds max_len={max_len} of this model{sum_}; "
            f"use at most {max_len - offset} positions or build the model with a larger max_len"
        )


def check_mask(mask, name: str, shape: tuple[int, ...], broadcast: bool) -> np.ndarray | None:
    """A boolean mask that equals ``shape`` (or broadcasts to it, when ``broadcast``).

    Args:
        mask: the mask, or None.
        name: the argument's name, as the message quotes it.
        shape: the shape it must have (or broadcast to).
        broadcast: allow NumPy broadcasting to ``shape``.

    Returns:
        ``mask`` (None stays None).
    """
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = blocked), got {describe(mask)}")
    if broadcast:
        try:
            np.broadcast_shapes(mask.shape, shape)
            fits = mask.ndim <= len(shape)
        except ValueError:
            fits = False
        if not fits or np.broadcast_shapes(mask.shape, shape) != shape:
            raise ValueError(
                f"{name} of shape {mask.shape} does not broadcast to (B, H, T_q, T_k)={shape}"
            )
    elif mask.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {mask.shape}")
    return mask


# --- text -------------------------------------------------------------------------------
def preview(text: str, limit: int = 40) -> str:
    """``repr`` of a text, shortened so an error message stays one readable line.

    Args:
        text: the text.
        limit: the most characters shown.

    Returns:
        the repr, with ``...`` where it was cut.
    """
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def check_text(text, argument: str = "text") -> str:
    """Args: text: must be a str; argument: its name. Returns: ``text``."""
    if not isinstance(text, str):
        raise TypeError(f"{argument} must be a str, got {type(text).__name__} {text!r:.60}")
    return text


def check_texts(texts, argument: str = "texts") -> list[str]:
    """Args: texts: an iterable of str (not one str); argument: its name. Returns: a list."""
    # A lone string is iterable (over its characters), which would silently "work" and
    # give a surprising answer, so it is refused outright.
    if isinstance(texts, str):
        raise TypeError(
            f"{argument} must be a list of strings, got a single str {preview(texts)}; "
            f"wrap it in a list: [{preview(texts)}]"
        )
    if not isinstance(texts, Iterable):
        raise TypeError(f"{argument} must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(
                f"{argument}[{index}] must be a str, got {type(text).__name__} {text!r:.60}"
            )
    return texts


@contextmanager
def allocating(what: str, n_bytes: int) -> Iterator[None]:
    """``with allocating("a position table of max_len=10**9 rows", n_bytes):`` refuses, with
    a ``ValueError`` that says what did not fit, an array larger than the machine's memory
    before it is made (a half-made one can take minutes and all the memory first), and turns
    NumPy's bare ``MemoryError`` inside the block into the same error.

    Args:
        what: the array being made, with the argument that sized it.
        n_bytes: the bytes the block will allocate at its peak.
    """
    memory = _physical_memory()
    if memory is not None and n_bytes > memory:
        raise ValueError(
            f"{what} needs {n_bytes / 2**30:.1f} GiB, more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory"
        )
    try:
        yield
    except MemoryError:
        raise ValueError(f"{what} does not fit in this machine's memory") from None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not every system names these
        return None
