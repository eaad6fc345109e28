"""Transformer blocks: attention and a feed-forward network, each wrapped in a residual
connection with LayerNorm.

Two placements of the norm:

* ``norm="pre"`` (GPT-2 and most modern models): ``x + sublayer(LN(x))``. The residual
  stream is never normalised, so gradients flow straight through the ``+``.
* ``norm="post"`` (the 2017 paper): ``LN(x + sublayer(x))``.
"""

from __future__ import annotations

import numpy as np

from .attention import MultiHeadAttention
from .checks import check_choice
from .layers import Dropout, FeedForward, LayerNorm
from .module import Module, make_rng

NORM_PLACEMENTS = ("pre", "post")


class _ResidualSublayers(Module):
    """The residual bookkeeping shared by encoder and decoder blocks.

    A block is a list of *steps*; each step is ``(norm, sublayer, dropout)`` and computes
    ``x + dropout(sublayer(norm(x)))`` (pre) or ``norm(x + dropout(sublayer(x)))`` (post).
    ``sublayer`` is a callable taking the normalised input; its backward may return extra
    gradients (cross-attention's ``dcontext``), which are collected.
    """

    def _run_step(self, x, norm: LayerNorm, sublayer, dropout: Dropout):
        if self.norm == "pre":
            return x + dropout(sublayer(norm(x)))
        return norm(x + dropout(sublayer(x)))

    def _step_backward(self, grad, norm: LayerNorm, sublayer_backward, dropout: Dropout):
        """Returns ``(dx, extra)`` where ``extra`` is the sublayer's second gradient or None."""
        if self.norm == "pre":
            d_sub = sublayer_backward(dropout.backward(grad))
            d_sub, extra = d_sub if isinstance(d_sub, tuple) else (d_sub, None)
            return grad + norm.backward(d_sub), extra
        d_sum = norm.backward(grad)
        d_sub = sublayer_backward(dropout.backward(d_sum))
        d_sub, extra = d_sub if isinstance(d_sub, tuple) else (d_sub, None)
        return d_sum + d_sub, extra


class EncoderBlock(_ResidualSublayers):
    """Self-attention (bidirectional) then feed-forward. Parameters: ``ln1``, ``attn``,
    ``ln2``, ``ffn``.

    ``forward(x, mask=None, key_padding_mask=None)``: ``(B, T, D)`` -> ``(B, T, D)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm: str = "pre",
        activation: str = "gelu",
        *,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        self.norm = check_choice(norm, "norm", NORM_PLACEMENTS)
        d_ff = 4 * d_model if d_ff is None else d_ff
        rng = make_rng(seed, rng)
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, rng=rng, dtype=dtype)
        self.ln2 = LayerNorm(d_model, dtype=dtype)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout, rng=rng, dtype=dtype)
        self.attn_dropout = Dropout(dropout, rng=rng)
        self.ffn_dropout = Dropout(dropout, rng=rng)

    def forward(self, x, mask=None, key_padding_mask=None):
        def attend(h):
            return self.attn(h, mask=mask, key_padding_mask=key_padding_mask)

        x = self._run_step(x, self.ln1, attend, self.attn_dropout)
        return self._run_step(x, self.ln2, self.ffn, self.ffn_dropout)

    def backward(self, grad_output):
        grad, _ = self._step_backward(grad_output, self.ln2, self.ffn.backward, self.ffn_dropout)
        grad, _ = self._step_backward(grad, self.ln1, self.attn.backward, self.attn_dropout)
        return grad


class DecoderBlock(_ResidualSublayers):
    """Causal self-attention, optional cross-attention over an encoder's output, feed-forward.

    Parameters: ``ln1``, ``attn``, then with ``cross_attention=True`` ``ln2``, ``cross_attn``,
    ``ln3``, ``ffn``; without it ``ln1``, ``attn``, ``ln2``, ``ffn`` (a GPT block).

    ``forward(x, memory=None, key_padding_mask=None, memory_key_padding_mask=None,
    kv_cache=None)``; ``backward`` returns ``dx``, or ``(dx, dmemory)`` with cross-attention.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm: str = "pre",
        activation: str = "gelu",
        cross_attention: bool = False,
        *,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        self.norm = check_choice(norm, "norm", NORM_PLACEMENTS)
        self.has_cross_attention = bool(cross_attention)
        d_ff = 4 * d_model if d_ff is None else d_ff
        rng = make_rng(seed, rng)
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, rng=rng, dtype=dtype)
        if self.has_cross_attention:
            self.ln2 = LayerNorm(d_model, dtype=dtype)
            self.cross_attn = MultiHeadAttention(
                d_model, n_heads, dropout=dropout, rng=rng, dtype=dtype
            )
            self.ln3 = LayerNorm(d_model, dtype=dtype)
            self.cross_dropout = Dropout(dropout, rng=rng)
        else:
            self.ln2 = LayerNorm(d_model, dtype=dtype)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout, rng=rng, dtype=dtype)
        self.attn_dropout = Dropout(dropout, rng=rng)
        self.ffn_dropout = Dropout(dropout, rng=rng)

    @property
    def ffn_norm(self) -> LayerNorm:
        """The norm in front of the feed-forward: ``ln3`` with cross-attention, else ``ln2``."""
        return self.ln3 if self.has_cross_attention else self.ln2

    def forward(
        self, x, memory=None, key_padding_mask=None, memory_key_padding_mask=None, kv_cache=None
    ):
        """x: ``(B, T, D)``; memory: ``(B, T_src, D)`` (required with cross-attention)."""
        if self.has_cross_attention and memory is None:
            raise ValueError("memory (the encoder output) is required: this block cross-attends")
        if not self.has_cross_attention and memory is not None:
            raise ValueError("memory was given, but this block has no cross-attention")

        def attend_to_past(h):
            return self.attn(
                h, key_padding_mask=key_padding_mask, kv_cache=kv_cache, is_causal=True
            )

        x = self._run_step(x, self.ln1, attend_to_past, self.attn_dropout)
        if self.has_cross_attention:

            def attend_to_source(h):
                return self.cross_attn(h, context=memory, key_padding_mask=memory_key_padding_mask)

            x = self._run_step(x, self.ln2, attend_to_source, self.cross_dropout)
        return self._run_step(x, self.ffn_norm, self.ffn, self.ffn_dropout)

    def backward(self, grad_output):
        grad, _ = self._step_backward(
            grad_output, self.ffn_norm, self.ffn.backward, self.ffn_dropout
        )
        d_memory = None
        if self.has_cross_attention:
            grad, d_memory = self._step_backward(
                grad, self.ln2, self.cross_attn.backward, self.cross_dropout
            )
        grad, _ = self._step_backward(grad, self.ln1, self.attn.backward, self.attn_dropout)
        return (grad, d_memory) if self.has_cross_attention else grad
