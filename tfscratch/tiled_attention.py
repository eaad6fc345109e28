r"""Attention in tiles with the online softmax: the idea behind FlashAttention, in NumPy.

A teaching module (notebook 13): the models use
:func:`tfscratch.functional.scaled_dot_product_attention`, which builds the whole
``(B, H, T_q, T_k)`` score matrix. Here the same numbers are computed one
``(tile_q, tile_k)`` block of scores at a time, so the extra memory is a few tiles plus
``O(T)`` row statistics, never ``T^2``. The loops over tiles are the point of the lesson;
inside a tile everything is one batched matmul over batch and heads.

**The online softmax.** For one row of scores :math:`s_1, \dots, s_n` read in pieces, keep
a running maximum :math:`m` and a running sum :math:`\ell = \sum_j e^{s_j - m}` over the
scores seen so far. A new piece with maximum :math:`\tilde m` gives
:math:`m' = \max(m, \tilde m)` and

.. math:: \ell' = e^{m - m'}\,\ell + \sum_{j \in \text{piece}} e^{s_j - m'},

because every old term :math:`e^{s_j - m}` becomes :math:`e^{s_j - m'}` when multiplied
by :math:`e^{m - m'} \le 1`. Attention keeps, beside :math:`m` and :math:`\ell`, the
*unnormalised* output :math:`a = \sum_j e^{s_j - m} v_j` and rescales it by the same factor:
:math:`a' = e^{m - m'} a + \sum_{j \in \text{piece}} e^{s_j - m'} v_j`. After the last
piece, :math:`o = a / \ell` is exactly :math:`\sum_j \mathrm{softmax}(s)_j\, v_j`. The forward
saves one number per row for the backward, the log-sum-exp
:math:`L = m + \log \ell = \log \sum_j e^{s_j}`.

**The backward** (FlashAttention's) recomputes each tile of weights from :math:`L` instead
of storing them: :math:`P_{ij} = e^{S_{ij} - L_i}`. With :math:`O = PV`,
:math:`S = QK^\top/\sqrt d` and the softmax per row, the chain rule gives, for a tile of
queries :math:`i` and keys :math:`j`,

- :math:`dV_j \mathrel{+}= P_{ij}^\top\, dO_i` (from :math:`O = PV`);
- :math:`dP_{ij} = dO_i\, V_j^\top`;
- :math:`dS_{ij} = P_{ij} \odot (dP_{ij} - D_i)` with
  :math:`D_i = \sum_k P_{ik}\, dP_{ik} = \sum_k P_{ik}\,(dO_i \cdot v_k) = dO_i \cdot O_i`:
  the softmax's vector-Jacobian product :math:`p \odot (g - \langle g, p\rangle)`, whose inner
  product over the *whole* row is known before any tile is visited, from ``dO`` and ``O``;
- :math:`dQ_i \mathrel{+}= dS_{ij} K_j / \sqrt d` and :math:`dK_j \mathrel{+}= dS_{ij}^\top Q_i / \sqrt d`.

**Masks.** ``causal=True`` blocks keys after each query; when ``T_q < T_k`` the queries
are the *last* ``T_q`` positions (as with a KV cache: query ``i`` sits at
``T_k - T_q + i``, :func:`tfscratch.functional.causal_mask` with that offset). Tiles wholly
above the diagonal are never visited (:func:`tile_grid`), and only the tiles that cross it
build a mask. ``mask`` is the package's boolean mask (True = blocked), broadcastable to
``(B, H, T_q, T_k)``. A query whose keys are all blocked gets a zero output, zero gradients
and :math:`L = -\infty`, never NaN, as in the package's attention.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import check_float_array, check_mask, check_positive_int, describe

DEFAULT_TILE = 64


# --- the tile schedule -----------------------------------------------------------------
def spans(length: int, size: int) -> list[tuple[int, int]]:
    """Cut ``0 .. length - 1`` into spans of ``size``.

    Args:
        length: how many positions.
        size: positions per span.

    Returns:
        ``[(0, size), (size, 2 size), ..., (.., length)]``: the last span may be shorter.
    """
    return [(start, min(start + size, length)) for start in range(0, length, size)]


def key_tiles(
    q_start: int, q_stop: int, T_q: int, T_k: int, tile_k: int, causal: bool = False
) -> list[tuple[int, int]]:
    """The key spans that queries ``q_start ... q_stop - 1`` may see.

    Without a causal mask that is every key tile. With one, query ``i`` sits at position
    ``T_k - T_q + i`` and sees keys up to it, so the tiles that start after the *last*
    query's position are skipped: they would hold only blocked scores.

    Args:
        q_start, q_stop: the query tile's positions among the ``T_q`` queries.
        T_q, T_k: the numbers of queries and keys.
        tile_k: keys per tile.
        causal: apply the causal mask (queries are the last ``T_q`` positions).

    Returns:
        list of ``(k_start, k_stop)`` key spans.
    """
    if not causal:
        return spans(T_k, tile_k)
    last_visible = T_k - T_q + q_stop - 1  # the last query's position
    return [(start, min(start + tile_k, T_k)) for start in range(0, last_visible + 1, tile_k)]


def tile_grid(
    T_q: int, T_k: int, tile_q: int, tile_k: int, causal: bool = False
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Every tile the forward and backward visit, in their order (query tiles outer, key
    tiles inner).

    Args:
        T_q, T_k: the numbers of queries and keys.
        tile_q, tile_k: queries and keys per tile.
        causal: skip the tiles a causal mask blocks entirely.

    Returns:
        list of ``((q_start, q_stop), (k_start, k_stop))``.
    """
    tile_q, tile_k = check_positive_int(tile_q, "tile_q"), check_positive_int(tile_k, "tile_k")
    return [
        (query_span, key_span)
        for query_span in spans(T_q, tile_q)
        for key_span in key_tiles(*query_span, T_q, T_k, tile_k, causal)
    ]


def _blocked_in_tile(mask, causal, T_q, T_k, q_span, k_span):
    """Boolean (..., tq, tk) array of the blocked scores of one tile, or None if none is.

    Only a tile that crosses the diagonal needs the causal part; it is built from the
    positions of the tile's rows and columns, so it is tile-sized too.
    """
    (q_start, q_stop), (k_start, k_stop) = q_span, k_span
    blocked = None
    if causal and k_stop - 1 > T_k - T_q + q_start:  # some key is after the first query
        query_positions = np.arange(T_k - T_q + q_start, T_k - T_q + q_stop)[:, None]
        blocked = np.arange(k_start, k_stop)[None, :] > query_positions
    if mask is not None:
        tile_mask = mask[..., q_start:q_stop, k_start:k_stop]
        blocked = tile_mask if blocked is None else blocked | tile_mask
    return blocked


def _check_qkv(q, k, v, mask, causal, tile_q, tile_k):
    """Shapes ``(B, H, T_q, d)``, ``(B, H, T_k, d)``, ``(B, H, T_k, d_v)``; returns the mask
    broadcast (as a view, no copy) to ``(B, H, T_q, T_k)``, so tiles can slice it."""
    check_positive_int(tile_q, "tile_q")
    check_positive_int(tile_k, "tile_k")
    for name, array in (("q", q), ("k", k), ("v", v)):
        check_float_array(array, name, ndim=4)
        if array.shape[2] == 0:
            raise ValueError(f"{name} has shape {array.shape}: expected at least one position")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2]:
        raise ValueError(
            f"q {q.shape}, k {k.shape} and v {v.shape} must share (B, H) = {q.shape[:2]}"
        )
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k has d_head {k.shape[3]} (shape {k.shape}); expected q's {q.shape[3]}")
    if v.shape[2] != k.shape[2]:
        raise ValueError(
            f"v has {v.shape[2]} positions (shape {v.shape}); expected k's {k.shape[2]}"
        )
    B, H, T_q, _ = q.shape
    T_k = k.shape[2]
    if causal and T_q > T_k:
        raise ValueError(
            f"causal=True with T_q={T_q} queries but only T_k={T_k} keys; the queries must be "
            f"the last T_q of the T_k positions (T_q <= T_k)"
        )
    full_shape = (B, H, T_q, T_k)
    mask = check_mask(mask, "mask", full_shape, broadcast=True)
    return None if mask is None else np.broadcast_to(mask, full_shape)


def _safe_max(running_max: np.ndarray) -> np.ndarray:
    """The running max with -inf (a row with nothing unblocked yet) replaced by 0, so that
    ``exp(s - max)`` gives 0 for blocked scores instead of ``exp(-inf + inf) = NaN``."""
    return np.where(running_max == -np.inf, 0.0, running_max).astype(running_max.dtype)


# --- the online softmax on its own -----------------------------------------------------
def online_softmax(x: np.ndarray, tile: int) -> np.ndarray:
    """``softmax(x)`` over the last axis, reading the scores ``tile`` columns at a time.

    The first pass keeps only the running max and the running (rescaled) sum of each row;
    the second writes the probabilities. Attention needs no second pass: it multiplies the
    weights into V as they are made (:func:`tiled_attention`). A row of only ``-inf`` gives
    zeros, as :func:`tfscratch.functional.softmax`.

    Args:
        x: float ``(..., n)`` scores.
        tile: columns read at a time.

    Returns:
        probabilities ``(..., n)``, equal to ``softmax(x)``.
    """
    tile = check_positive_int(tile, "tile")
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise TypeError(f"x must be a float numpy array, got {describe(x)}")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"x has shape {x.shape}; expected (..., n) with n >= 1 scores a row")
    running_max = np.full(x.shape[:-1] + (1,), -np.inf, dtype=x.dtype)
    running_sum = np.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for start, stop in spans(x.shape[-1], tile):
        piece = x[..., start:stop]
        new_max = np.maximum(running_max, piece.max(axis=-1, keepdims=True))
        shift = _safe_max(new_max)
        # old terms were exp(s - m); times exp(m - m') they become exp(s - m')
        running_sum = running_sum * np.exp(running_max - shift) + np.exp(piece - shift).sum(
            axis=-1, keepdims=True
        )
        running_max = new_max
    running_sum[running_sum == 0.0] = 1.0  # an all -inf row: zeros, not 0 / 0
    return np.exp(x - _safe_max(running_max)) / running_sum


# --- attention --------------------------------------------------------------------------
def tiled_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    causal: bool = False,
    tile_q: int = DEFAULT_TILE,
    tile_k: int = DEFAULT_TILE,
) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`\mathrm{softmax}(QK^\top/\sqrt d + \text{mask})\,V`, one tile of scores at a time.

    Args:
        q: ``(B, H, T_q, d)``; k: ``(B, H, T_k, d)``; v: ``(B, H, T_k, d_v)``, one float dtype.
        mask: boolean, True = blocked, broadcastable to ``(B, H, T_q, T_k)``.
        causal: block keys after each query (the queries are the last ``T_q`` positions).
        tile_q, tile_k: queries and keys per tile; any positive size (the last tile of an
            axis may be shorter).

    Returns:
        ``(out, logsumexp)``: ``(B, H, T_q, d_v)``, equal to
        :func:`tfscratch.functional.scaled_dot_product_attention`'s output, and
        ``(B, H, T_q)``, :math:`\log\sum_j e^{s_j}` over each row's unblocked scores
        (``-inf`` for a row with none), which is all :func:`tiled_attention_backward` needs.
    """
    mask = _check_qkv(q, k, v, mask, causal, tile_q, tile_k)
    B, H, T_q, d = q.shape
    T_k, d_v = k.shape[2], v.shape[3]
    scale = 1.0 / math.sqrt(d)
    out = np.empty((B, H, T_q, d_v), dtype=q.dtype)
    logsumexp = np.empty((B, H, T_q), dtype=q.dtype)
    for q_span in spans(T_q, tile_q):
        rows = slice(*q_span)
        q_tile = q[:, :, rows] * scale  # (B, H, tq, d)
        tq = q_tile.shape[2]
        running_max = np.full((B, H, tq, 1), -np.inf, dtype=q.dtype)  # m
        running_sum = np.zeros((B, H, tq, 1), dtype=q.dtype)  # l = sum exp(s - m)
        acc = np.zeros((B, H, tq, d_v), dtype=q.dtype)  # a = sum exp(s - m) v
        for k_span in key_tiles(*q_span, T_q, T_k, tile_k, causal):
            cols = slice(*k_span)
            scores = q_tile @ k[:, :, cols].swapaxes(-1, -2)  # (B, H, tq, tk)
            blocked = _blocked_in_tile(mask, causal, T_q, T_k, q_span, k_span)
            if blocked is not None:
                np.copyto(scores, -np.inf, where=blocked)
            new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
            shift = _safe_max(new_max)
            weights = np.exp(scores - shift)  # this tile's unnormalised weights
            rescale = np.exp(running_max - shift)  # <= 1: the max grew from m to m'
            running_sum = rescale * running_sum + weights.sum(axis=-1, keepdims=True)
            acc = rescale * acc + weights @ v[:, :, cols]
            running_max = new_max
        seen = running_sum > 0  # False only for a row whose keys are all blocked
        out[:, :, rows] = acc / np.where(seen, running_sum, 1.0)
        log_sum = np.log(running_sum, out=np.full_like(running_sum, -np.inf), where=seen)
        logsumexp[:, :, rows] = (_safe_max(running_max) + log_sum)[..., 0]
    return out, logsumexp


def tiled_attention_backward(
    grad_output: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    out: np.ndarray,
    logsumexp: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    causal: bool = False,
    tile_q: int = DEFAULT_TILE,
    tile_k: int = DEFAULT_TILE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Gradients ``(dq, dk, dv)`` of :func:`tiled_attention`, tile by tile.

    Args:
        grad_output: ``(B, H, T_q, d_v)``, the gradient of the loss with respect to ``out``.
        q, k, v, mask, causal: as given to the forward.
        out, logsumexp: the forward's results, ``(B, H, T_q, d_v)`` and ``(B, H, T_q)``.
        tile_q, tile_k: any tile sizes (they need not be the forward's).

    The weights of each tile are recomputed, :math:`P = e^{S - L}`, rather than stored, and
    :math:`D_i = dO_i \cdot O_i` stands in for the softmax's row sum (derivation in the
    module docstring), so the extra memory is again a few tiles and ``O(T)`` numbers.
    """
    mask = _check_qkv(q, k, v, mask, causal, tile_q, tile_k)
    B, H, T_q, d = q.shape
    T_k = k.shape[2]
    expected = (B, H, T_q, v.shape[3])
    for name, array, shape in (
        ("grad_output", grad_output, expected),
        ("out", out, expected),
        ("logsumexp", logsumexp, expected[:3]),
    ):
        check_float_array(array, name, ndim=len(shape))
        if array.shape != shape:
            raise ValueError(f"{name} has shape {array.shape}; expected {shape}")
    scale = 1.0 / math.sqrt(d)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    row_dot = np.sum(grad_output * out, axis=-1, keepdims=True)  # D = dO . O, (B, H, T_q, 1)
    lse = _safe_max(logsumexp)[..., None]  # -inf rows have only blocked scores: P = 0 anyway
    for q_span in spans(T_q, tile_q):
        rows = slice(*q_span)
        q_tile, grad_tile = q[:, :, rows], grad_output[:, :, rows]
        for k_span in key_tiles(*q_span, T_q, T_k, tile_k, causal):
            cols = slice(*k_span)
            k_tile, v_tile = k[:, :, cols], v[:, :, cols]
            scores = (q_tile @ k_tile.swapaxes(-1, -2)) * scale  # S, (B, H, tq, tk)
            blocked = _blocked_in_tile(mask, causal, T_q, T_k, q_span, k_span)
            if blocked is not None:
                np.copyto(scores, -np.inf, where=blocked)
            weights = np.exp(scores - lse[:, :, rows])  # P, recomputed from L
            dv[:, :, cols] += weights.swapaxes(-1, -2) @ grad_tile  # dV += P^T dO
            d_weights = grad_tile @ v_tile.swapaxes(-1, -2)  # dP = dO V^T
            d_scores = weights * (d_weights - row_dot[:, :, rows])  # dS = P (dP - D)
            d_scores *= scale
            dq[:, :, rows] += d_scores @ k_tile  # dQ += dS K / sqrt(d)
            dk[:, :, cols] += d_scores.swapaxes(-1, -2) @ q_tile  # dK += dS^T Q / sqrt(d)
    return dq, dk, dv
