r"""Multi-head attention, its backward pass, and the KV cache.

One head computes :math:`\mathrm{softmax}(QK^\top/\sqrt{d_{head}} + M)\,V` with
:math:`Q = XW^Q`, :math:`K = CW^K`, :math:`V = CW^V` (``C = X`` for self-attention, the
encoder output for cross-attention). ``H`` heads run side by side on slices of the model
width and are merged back by ``out_proj``.

How it is vectorised: all heads (and the whole batch) live in one array of shape
``(B, H, T, d_head)``, so a single batched ``@`` computes every head's scores at once; for
self-attention Q, K and V come out of *one* matmul with the three weight matrices side by
side, ``(D, 3D)``. There is no Python loop over heads, batch or positions.

Mask convention: boolean, **True = blocked**. ``mask`` broadcasts to ``(B, H, T_q, T_k)``;
padding goes in ``key_padding_mask`` ``(B, T_k)``.
"""

from __future__ import annotations

import numpy as np

from . import functional as F
from .checks import (
    check_float_array,
    check_length,
    check_mask,
    check_positive_int,
    check_probability,
)
from .layers import Dropout, Linear
from .module import Module, make_rng


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """``(B, T, D)`` -> ``(B, H, T, D / H)``: head ``h`` owns features ``h*d_head ... (h+1)*d_head - 1``."""
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """``(B, H, T, d_head)`` -> ``(B, T, H * d_head)``, the inverse of :func:`split_heads`."""
    B, H, T, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * d_head)


class KVCache:
    """The keys and values one attention layer has already computed, for generation.

    Without a cache, generating token ``t`` recomputes K and V for all ``t`` earlier
    positions; with it, each step computes K and V for the one new position and appends
    them. The buffers are allocated once at ``max_len`` so appending never copies the past.
    ``length`` is the number of cached positions, which is also the position offset of the
    next token.
    """

    def __init__(self, max_len: int):
        self.max_len = check_positive_int(max_len, "max_len")
        self.length = 0
        self._keys = None  # (B, H, max_len, d_head) once the first step arrives
        self._values = None

    def append(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add ``(B, H, T_new, d_head)`` keys and values; return all ``length`` so far."""
        B, H, T_new, d_head = keys.shape
        if self._keys is None:
            shape = (B, H, self.max_len, d_head)
            self._keys = np.empty(shape, dtype=keys.dtype)
            self._values = np.empty(shape, dtype=values.dtype)
        elif self._keys.shape[:2] != (B, H) or self._keys.shape[3] != d_head:
            raise ValueError(
                f"kv_cache holds batch/heads/d_head {self._keys.shape[:2] + self._keys.shape[3:]}"
                f", but the new keys have {(B, H, d_head)}; make a new cache for a new batch"
            )
        check_length(T_new, self.max_len, "sequence length", offset=self.length)
        stop = self.length + T_new
        self._keys[:, :, self.length : stop] = keys
        self._values[:, :, self.length : stop] = values
        self.length = stop
        return self._keys[:, :, :stop], self._values[:, :, :stop]

    def reset(self) -> None:
        self.length = 0

    def __repr__(self) -> str:
        return f"KVCache(length={self.length}, max_len={self.max_len})"


class MultiHeadAttention(Module):
    """Multi-head attention with four separate projections ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj`` (each ``Linear(d_model, d_model)``).

    ``forward(x, context=None, mask=None, key_padding_mask=None, kv_cache=None, is_causal=False)``
    returns ``(B, T_q, d_model)`` and keeps the attention weights in ``.attn_weights``
    ``(B, H, T_q, T_k)``. ``backward`` returns ``dx`` (self-attention) or ``(dx, dcontext)``
    (cross-attention).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        *,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        check_positive_int(d_model, "d_model")
        check_positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; each head needs an "
                f"equal slice of the model width"
            )
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        rng = make_rng(seed, rng)
        self.q_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        # named after this constructor's argument, not Dropout's own `p`
        self.attn_dropout = Dropout(check_probability(dropout, "dropout"), rng=rng)
        self.attn_weights = None

    # --- projections ------------------------------------------------------------------
    def _fused(self, projections: list[Linear]) -> tuple[np.ndarray, np.ndarray | None]:
        """Weights ``(D, k*D)`` and bias ``(k*D,)`` of several projections side by side."""
        weight = np.concatenate([p.weight.data for p in projections], axis=1)
        has_bias = projections[0].bias is not None
        bias = np.concatenate([p.bias.data for p in projections]) if has_bias else None
        return weight, bias

    def _project(self, x: np.ndarray, projections: list[Linear]) -> np.ndarray:
        """One matmul for several projections: ``(B, T, D)`` -> ``(k, B, H, T, d_head)``."""
        weight, bias = self._fused(projections)
        out = x @ weight
        if bias is not None:
            out += bias
        B, T, _ = x.shape
        return out.reshape(B, T, len(projections), self.n_heads, self.d_head).transpose(
            2, 0, 3, 1, 4
        )

    def _project_backward(self, x, grads_per_head: list[np.ndarray], projections: list[Linear]):
        """Backward of :meth:`_project`: accumulate weight/bias grads, return ``dx``."""
        B, T, D = x.shape
        k = len(projections)
        # (k, B, H, T, d_head) -> (B*T, k*D), the layout of the fused output
        stacked = np.empty((B, T, k, self.n_heads, self.d_head), dtype=x.dtype)
        for index, grad in enumerate(grads_per_head):
            stacked[:, :, index] = grad.transpose(0, 2, 1, 3)
        d_out = stacked.reshape(B * T, k * D)
        d_weight = x.reshape(B * T, D).T @ d_out
        weight, bias = self._fused(projections)
        for index, projection in enumerate(projections):
            columns = slice(index * D, (index + 1) * D)
            projection.weight.grad += d_weight[:, columns]
            if bias is not None:
                projection.bias.grad += d_out[:, columns].sum(axis=0)
        return (d_out @ weight.T).reshape(B, T, D)

    # --- forward / backward -----------------------------------------------------------
    def forward(
        self, x, context=None, mask=None, key_padding_mask=None, kv_cache=None, is_causal=False
    ):
        """Attend from ``x`` ``(B, T_q, D)`` to itself or to ``context`` ``(B, T_k, D)``.

        Args:
            mask: boolean, True = blocked, broadcastable to ``(B, H, T_q, T_k)``.
            key_padding_mask: boolean ``(B, T_k)``, True marks padding keys.
            kv_cache: a :class:`KVCache` (self-attention only): the new keys/values are
                appended and the queries attend to every cached position.
            is_causal: block keys after each query's position (offset by the cache length).
        """
        check_float_array(x, "x", ndim=3, last_dim=self.d_model)
        B, T_q, _ = x.shape
        self._x, self._context = x, context
        offset = 0
        if context is None:
            q, k, v = self._project(x, [self.q_proj, self.k_proj, self.v_proj])
            if kv_cache is not None:
                offset = kv_cache.length
                k, v = kv_cache.append(k, v)
        else:
            check_float_array(context, "context", ndim=3, last_dim=self.d_model)
            if context.shape[0] != B:
                raise ValueError(
                    f"context has batch size {context.shape[0]} but x has {B}; they must match"
                )
            if kv_cache is not None:
                raise ValueError("kv_cache is for self-attention; pass context=None with it")
            (q,) = self._project(x, [self.q_proj])
            k, v = self._project(context, [self.k_proj, self.v_proj])
        T_k = k.shape[2]
        blocked = self._combine_masks(mask, key_padding_mask, is_causal, B, T_q, T_k, offset)

        scale = np.asarray(1.0 / np.sqrt(self.d_head), dtype=x.dtype)
        scores = (q @ k.swapaxes(-1, -2)) * scale  # (B, H, T_q, T_k)
        if blocked is not None:
            scores = np.where(blocked, -np.inf, scores)
        weights = F.softmax(scores, axis=-1)  # blocked -> 0; fully blocked row -> all 0
        dropped = self.attn_dropout(weights)
        heads = dropped @ v  # (B, H, T_q, d_head)
        self._q, self._k, self._v = q, k, v
        self._weights, self._dropped = weights, dropped
        self._used_cache = kv_cache is not None
        self.attn_weights = weights
        return self.out_proj(merge_heads(heads))

    def _combine_masks(self, mask, key_padding_mask, is_causal, B, T_q, T_k, offset):
        """One boolean array (True = blocked) broadcastable to ``(B, H, T_q, T_k)``, or None."""
        full_shape = (B, self.n_heads, T_q, T_k)
        blocked = check_mask(mask, "mask", full_shape, broadcast=True)
        if key_padding_mask is not None:
            check_mask(key_padding_mask, "key_padding_mask", (B, T_k), broadcast=False)
            padding = key_padding_mask[:, None, None, :]
            blocked = padding if blocked is None else blocked | padding
        if is_causal:
            if offset + T_q != T_k:
                raise ValueError(
                    f"is_causal needs one query per new key position: {T_q} queries after "
                    f"{offset} cached positions, but {T_k} keys"
                )
            # One query at the newest position (a cached generation step) may see every key:
            # its causal mask would block nothing, so skip building and applying it.
            if T_q > 1:
                future = F.causal_mask(T_q, offset)
                blocked = future if blocked is None else blocked | future
        return blocked

    def backward(self, grad_output: np.ndarray):
        if self._used_cache:
            raise RuntimeError(
                "backward after a forward with kv_cache is not supported: the cache is for "
                "generation (inference); train without it"
            )
        d_heads = split_heads(self.out_proj.backward(grad_output), self.n_heads)
        q, k, v = self._q, self._k, self._v
        dv = self._dropped.swapaxes(-1, -2) @ d_heads
        d_weights = self.attn_dropout.backward(d_heads @ v.swapaxes(-1, -2))
        scale = np.asarray(1.0 / np.sqrt(self.d_head), dtype=grad_output.dtype)
        d_scores = F.softmax_backward(d_weights, self._weights) * scale
        dq = d_scores @ k
        dk = d_scores.swapaxes(-1, -2) @ q
        if self._context is None:
            return self._project_backward(
                self._x, [dq, dk, dv], [self.q_proj, self.k_proj, self.v_proj]
            )
        dx = self._project_backward(self._x, [dq], [self.q_proj])
        d_context = self._project_backward(self._context, [dk, dv], [self.k_proj, self.v_proj])
        return dx, d_context
