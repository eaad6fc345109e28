r"""Multi-head attention, its backward pass, and the KV cache.

One head computes :math:`\mathrm{softmax}(QK^\top/\sqrt{d_{head}} + M)\,V` with
:math:`Q = XW^Q`, :math:`K = CW^K`, :math:`V = CW^V` (``C = X`` for self-attention, the
encoder output for cross-attention). ``H`` heads run side by side on slices of the model
width and are merged back by ``out_proj``.

The maths is notebook 05's, in its order: project (Q, K, V), :func:`split_heads`, then
:func:`tfscratch.functional.scaled_dot_product_attention` (notebook 04's one head, run on
every head at once) in its two halves, the weights (``hook_pattern``) and the weighted sum
of the values (``hook_z``), then the heads side by side and ``out_proj``; the backward walks
the same steps in reverse. ``hook_pattern`` and ``hook_z`` are
:class:`~tfscratch.hooks.HookPoint` s (identities) where :mod:`tfscratch.inspect` reads or
replaces the pattern and the heads' outputs.

How it is vectorised: all heads (and the whole batch) live in one array of shape
``(B, H, T, d_head)``, so a single batched ``@`` computes every head's scores at once. For
self-attention Q, K and V come out of *one* matmul (:func:`project_together`): the weights
of ``q_proj``, ``k_proj`` and ``v_proj`` are put side by side into one ``(D, 3D)`` matrix at
each forward (a copy of 3 D^2 numbers, against a matmul of B T 3 D^2 multiply-adds), and
the output split in three, notebook 05's ``np.split``. The four projections stay ordinary,
separate ``Linear`` maps: the parameters are what the forward reads. There is no Python loop
over heads, batch or positions.

Rotary positions (``pos="rope"``, notebook 12): built with ``rotary=`` a
:class:`~tfscratch.positional.RotaryPositionalEmbedding`, self-attention turns the queries
and keys of the new positions by their positions right after :func:`split_heads` (before
they enter the KV cache, so cached keys keep the rotation of their own positions), and the
backward turns their gradients back. Cross-attention never rotates: its queries (target
positions) and keys (source positions) count positions in two different sequences, so
their distance means nothing.

Mask convention: boolean, **True = blocked**. ``mask`` broadcasts to ``(B, H, T_q, T_k)``;
padding goes in ``key_padding_mask`` ``(B, T_k)``.
"""

from __future__ import annotations

import numpy as np

from . import functional as F
from .checks import (
    check_divisible,
    check_float_array,
    check_length,
    check_mask,
    check_positive_int,
    check_probability,
)
from .hooks import HookPoint
from .layers import Dropout, Linear
from .module import Module, make_rng
from .positional import RotaryPositionalEmbedding


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """Give every head its own slice of the features.

    Args:
        x: ``(B, T, D)``.
        n_heads: ``H``; must divide ``D``.

    Returns:
        ``(B, H, T, D / H)``: head ``h`` owns features ``h*d_head ... (h+1)*d_head - 1``
        (a view: no copy).
    """
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Put the heads' outputs side by side again: the inverse of :func:`split_heads`.

    Args:
        x: ``(B, H, T, d_head)``.

    Returns:
        ``(B, T, H * d_head)``.
    """
    B, H, T, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * d_head)


def project_together(x: np.ndarray, linears: tuple[Linear, ...]) -> list[np.ndarray]:
    """Apply several ``Linear`` maps to the same ``x`` ``(B, T, D)`` with one matmul.

    ``x @ [W_1 | W_2 | ...] + [b_1 | b_2 | ...]``, split back into one ``(B, T, d_out)``
    output per map: the same numbers as ``[linear(x) for linear in linears]`` (notebook 05
    checks it), in one BLAS call instead of several. Reads the maps' parameters as they are
    now. Each map records ``x`` as its last input (as if it had been called), so no map is
    left holding an older input, and inside :class:`~tfscratch.no_grad` none holds any.

    Args:
        x: ``(B, T, D)``, the input of every map.
        linears: the ``Linear`` maps (all with or all without bias).

    Returns:
        one ``(B, T, d_out)`` array per map, in order (views of one result). When a map is
        not a plain ``Linear`` (a ``LoRALinear`` of notebook 17), each map is called on its
        own instead, and :func:`project_together_backward` calls each one's backward.
    """
    if not _all_plain(linears):
        return [linear(x) for linear in linears]
    for linear in linears:
        linear.save_for_backward(x=x)
    weight = np.concatenate([linear.weight.data for linear in linears], axis=1)
    y = x.reshape(-1, x.shape[-1]) @ weight
    if linears[0].bias is not None:
        y += np.concatenate([linear.bias.data for linear in linears])
    y = y.reshape(x.shape[:-1] + (-1,))
    # np.split(y, len(linears), axis=-1), as slices (views; np.split costs more than a
    # one-token matmul)
    outputs, start = [], 0
    for linear in linears:
        outputs.append(y[..., start : start + linear.d_out])
        start += linear.d_out
    return outputs


def project_together_backward(
    x: np.ndarray, grads: list[np.ndarray], linears: tuple[Linear, ...]
) -> np.ndarray:
    """Backward of :func:`project_together`: each map's ``dW = x^T dy`` and ``db = sum dy``
    accumulate into its own parameters.

    Args:
        x: ``(B, T, D)``, the input of the forward.
        grads: dL/dy_i, one ``(B, T, d_out)`` per map, in order.
        linears: the maps of the forward.

    Returns:
        ``dx = sum_i dy_i W_i^T`` ``(B, T, D)`` (one matmul).
    """
    if not _all_plain(linears):
        return sum(linear.backward(grad) for linear, grad in zip(linears, grads, strict=True))
    dy = np.concatenate(grads, axis=-1).reshape(-1, sum(g.shape[-1] for g in grads))
    d_weight = x.reshape(-1, x.shape[-1]).T @ dy  # (D, sum of d_out)
    parts = np.cumsum([g.shape[-1] for g in grads])[:-1]
    for linear, d_w in zip(linears, np.split(d_weight, parts, axis=1), strict=True):
        linear.weight.grad += d_w
    if linears[0].bias is not None:
        for linear, d_b in zip(linears, np.split(dy.sum(axis=0), parts), strict=True):
            linear.bias.grad += d_b
    weight = np.concatenate([linear.weight.data for linear in linears], axis=1)
    return (dy @ weight.T).reshape(x.shape)


def _all_plain(linears) -> bool:
    """Whether every map is a plain ``Linear`` (not a subclass or a wrapper), so the fused
    matmul computes what each map's own forward would."""
    return all(type(linear) is Linear for linear in linears)


class KVCache:
    """The keys and values one attention layer has already computed, for generation.

    Without a cache, generating token ``t`` recomputes K and V for all ``t`` earlier
    positions; with it, each step computes K and V for the one new position and appends
    them. The buffers are allocated once at ``max_len`` so appending never copies the past.
    ``length`` is the number of cached positions, which is also the position offset of the
    next token. ``DecoderLM.new_kv_cache()`` makes one per layer.

    Args:
        max_len: the most positions it can hold (the model's ``max_len``).
    """

    def __init__(self, max_len: int):
        self.max_len = check_positive_int(max_len, "max_len")
        self.length = 0
        self._keys = None  # (B, H, max_len, d_head) once the first step arrives
        self._values = None

    def append(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add the new positions' keys and values.

        Args:
            keys, values: ``(B, H, T_new, d_head)``.

        Returns:
            ``(keys, values)`` of every cached position, ``(B, H, length, d_head)`` each
            (views of the buffers).
        """
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

    def __repr__(self) -> str:
        return f"KVCache(length={self.length}, max_len={self.max_len})"


class MultiHeadAttention(Module):
    """Multi-head attention with four projections ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj``, each its own ``Linear(d_model, d_model)`` (self-attention applies the first
    three with one matmul, :func:`project_together`).

    ``forward(x, context=None, mask=None, key_padding_mask=None, kv_cache=None, is_causal=False)``
    returns ``(B, T_q, d_model)`` and keeps the attention weights in ``.attn_weights``
    ``(B, H, T_q, T_k)``. ``backward`` returns ``dx`` (self-attention) or ``(dx, dcontext)``
    (cross-attention). ``attn_dropout`` drops attention weights (training only).

    ``rotary``: a :class:`~tfscratch.positional.RotaryPositionalEmbedding` with
    ``d_head = d_model / n_heads`` (no parameters; a model shares one between its layers) to
    rotate the queries and keys of self-attention by their positions, or None (default).

    Args:
        d_model: the model width D (input and output features).
        n_heads: heads H; must divide ``d_model``.
        bias: the four projections have biases.
        dropout: drop probability of the attention weights (training only).
        rotary: see above.
        seed, rng: where the initial weights and dropout masks come from: a seed, or a
            ``np.random.Generator`` to draw from (a model passes its own).
        dtype: the parameters' float dtype.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        *,
        rotary: RotaryPositionalEmbedding | None = None,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        check_positive_int(d_model, "d_model")
        check_positive_int(n_heads, "n_heads")
        check_divisible(d_model, n_heads)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        if rotary is not None and not isinstance(rotary, RotaryPositionalEmbedding):
            raise TypeError(
                f"rotary must be a RotaryPositionalEmbedding or None, got {type(rotary).__name__}"
            )
        if rotary is not None and rotary.d_head != self.d_head:
            raise ValueError(
                f"rotary has d_head={rotary.d_head}, but d_model={d_model} / n_heads={n_heads} "
                f"gives heads of {self.d_head} features; they must match"
            )
        rng = make_rng(seed, rng)
        self.q_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias, rng=rng, dtype=dtype)
        # named after this constructor's argument, not Dropout's own `p`
        self.attn_dropout = Dropout(check_probability(dropout, "dropout"), rng=rng)
        self.rotary = rotary
        self.hook_z = HookPoint()  # each head's output before out_proj (B, T_q, H, d_head)
        self.hook_pattern = HookPoint()  # the attention weights (B, H, T_q, T_k)
        self.attn_weights = None

    def forward(
        self, x, context=None, mask=None, key_padding_mask=None, kv_cache=None, is_causal=False
    ):
        """Attend from ``x`` ``(B, T_q, D)`` to itself or to ``context`` ``(B, T_k, D)``.

        Args:
            x: float ``(B, T_q, D)``, the queries' positions.
            context: float ``(B, T_k, D)`` to attend to (cross-attention), or None to attend
                to ``x`` itself.
            mask: boolean, True = blocked, broadcastable to ``(B, H, T_q, T_k)``.
            key_padding_mask: boolean ``(B, T_k)``, True marks padding keys.
            kv_cache: a :class:`KVCache` (self-attention only): the new keys/values are
                appended and the queries attend to every cached position; its length is
                the position offset of the new tokens (for ``is_causal`` and ``rotary``).
            is_causal: block keys after each query's position (offset by the cache length).

        Returns:
            ``(B, T_q, D)``; the weights are kept in ``.attn_weights`` ``(B, H, T_q, T_k)``.
        """
        check_float_array(x, "x", ndim=3, last_dim=self.d_model)
        B, T_q, _ = x.shape
        if context is None:
            q, k, v = project_together(x, (self.q_proj, self.k_proj, self.v_proj))
        else:
            check_float_array(context, "context", ndim=3, last_dim=self.d_model)
            if context.shape[0] != B:
                raise ValueError(
                    f"context has batch size {context.shape[0]} but x has {B}; they must match"
                )
            if kv_cache is not None:
                raise ValueError("kv_cache is for self-attention; pass context=None with it")
            q = self.q_proj(x)
            k, v = project_together(context, (self.k_proj, self.v_proj))
        q, k, v = (split_heads(part, self.n_heads) for part in (q, k, v))  # (B, H, T, d_head)
        offset = 0 if kv_cache is None else kv_cache.length
        if self.rotary is not None and context is None:  # never cross-attention
            # RoPE: the new queries and keys are positions offset ... offset + T_q - 1
            check_length(T_q, self.rotary.max_len, offset=offset)
            q, k = self.rotary.rotate(q, offset), self.rotary.rotate(k, offset)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)
        T_k = k.shape[2]
        blocked = self._blocked(
            mask, key_padding_mask, is_causal, (B, self.n_heads, T_q, T_k), offset
        )
        dropout_mask = self.attn_dropout.new_mask((B, self.n_heads, T_q, T_k), x.dtype)
        weights = F.attention_weights(q, k, blocked)  # softmax(q k^T / sqrt(d_head))
        pattern = self.hook_pattern(weights)
        z = self.hook_z(F.attend(pattern, v, dropout_mask).transpose(0, 2, 1, 3))
        self.save_for_backward(
            x=x if context is None else None,  # the fused projection's input (q_proj keeps its own)
            context=context, kv_cache=kv_cache, q=q, k=k, v=v, weights=weights,
            pattern=None if pattern is weights else pattern,  # a hook's replacement, if any
            dropout_mask=dropout_mask,
        )  # fmt: skip
        self.attn_weights = pattern
        return self.out_proj(z.reshape(B, T_q, self.d_model))  # the heads side by side

    def _blocked(self, mask, key_padding_mask, is_causal, full_shape, offset):
        """One boolean array (True = blocked) broadcastable to ``(B, H, T_q, T_k)``, or None."""
        B, _, T_q, T_k = full_shape
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
        """The forward in reverse: ``out_proj``, merge heads, attention, split heads, the
        projections.

        Args:
            grad_output: dL/d(output) ``(B, T_q, D)``.

        Returns:
            ``dx`` ``(B, T_q, D)``, or ``(dx, dcontext)`` for cross-attention; the projections'
            gradients are added to their ``.grad``.
        """
        self.check_ready_for_backward()
        B, _, T_q, _ = self._q.shape
        self.check_grad_shape(grad_output, (B, T_q, self.out_proj.d_out))
        if self._kv_cache is not None:
            raise RuntimeError(
                "backward after a forward with kv_cache is not supported: the cache is for "
                "generation (inference); train without it"
            )
        d_z = self.out_proj.backward(grad_output).reshape(B, T_q, self.n_heads, self.d_head)
        d_heads = self.hook_z.backward(d_z).transpose(0, 2, 1, 3)  # (B, H, T_q, d_head)
        pattern = self._weights if self._pattern is None else self._pattern
        d_pattern, dv = F.attend_backward(d_heads, pattern, self._v, self._dropout_mask)
        d_weights = self.hook_pattern.backward(d_pattern)
        dq, dk = F.attention_weights_backward(d_weights, self._q, self._k, self._weights)
        if self._context is None and self.rotary is not None:  # rotated (offset 0: no cache)
            dq, dk = self.rotary.rotate_backward(dq), self.rotary.rotate_backward(dk)
        dq, dk, dv = (merge_heads(grad) for grad in (dq, dk, dv))  # (B, T, D) each
        if self._context is None:
            return project_together_backward(
                self._x, [dq, dk, dv], (self.q_proj, self.k_proj, self.v_proj)
            )
        dx = self.q_proj.backward(dq)
        d_context = project_together_backward(self._context, [dk, dv], (self.k_proj, self.v_proj))
        return dx, d_context
