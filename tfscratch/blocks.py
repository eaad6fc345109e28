"""Transformer blocks: attention and a feed-forward network, each wrapped in a residual
connection with LayerNorm (notebook 06).

Two placements of the norm:

* ``norm="pre"`` (GPT-2 and most modern models): ``x + sublayer(LN(x))``. The residual
  stream is never normalised, so gradients flow straight through the ``+``.
* ``norm="post"`` (the 2017 paper): ``LN(x + sublayer(x))``.

A pre-LN block is notebook 06's two lines::

    h = x + attn(ln1(x))
    return h + ffn(ln2(h))

plus residual dropout on each sublayer's output (``attn_resid_dropout``,
``ffn_resid_dropout``: the identity at ``dropout=0`` and in evaluation). Each line is one
residual sublayer, written once below for each placement (:func:`pre_norm_residual`,
:func:`post_norm_residual`) with its backward beside it; the block picks the pair when it is
built. The backward walks the same lines in reverse: at each ``+`` the gradient is copied to
both branches, the shortcut and the sublayer, and the two results are added where the
branches met.

The hook points (:class:`~tfscratch.hooks.HookPoint`, identities) sit at the seams
TransformerLens names: ``hook_resid_pre``, ``hook_attn_out``, ``hook_resid_mid``,
``hook_mlp_out``, ``hook_resid_post`` (and ``hook_cross_attn_out`` with cross-attention).

With rotary positions (``pos="rope"``, notebook 12) the blocks are built with ``rotary=`` a
:class:`~tfscratch.positional.RotaryPositionalEmbedding`: the self-attention ``attn`` rotates
its queries and keys by their positions; cross-attention never does.
"""

from __future__ import annotations

import numpy as np

from .attention import MultiHeadAttention
from .checks import check_choice
from .hooks import HookPoint
from .layers import Dropout, FeedForward, LayerNorm
from .module import Module, make_rng
from .positional import RotaryPositionalEmbedding

NORM_PLACEMENTS = ("pre", "post")


def pre_norm_residual(x, norm, sublayer, dropout, hook, **options):
    """GPT-2's placement: ``x + dropout(sublayer(norm(x)))``.

    Args:
        x: the residual stream ``(B, T, D)``.
        norm, sublayer, dropout: the block's modules for this sublayer (``ln1``, ``attn``,
            ``attn_resid_dropout``, ...).
        hook: the :class:`~tfscratch.hooks.HookPoint` the sublayer's output passes through.
        options: keyword arguments of ``sublayer`` (masks, ``context``, ``kv_cache``).

    Returns:
        the stream after the sublayer, ``(B, T, D)``.
    """
    return x + dropout(hook(sublayer(norm(x), **options)))


def pre_norm_residual_backward(grad, norm, sublayer, dropout, hook):
    """At the ``+`` the gradient goes both ways: straight to ``x``, and back through the
    branch.

    Args:
        grad: dL/d(output) ``(B, T, D)``.
        norm, sublayer, dropout, hook: the modules of the forward.

    Returns:
        ``(dx, d_context)``; ``d_context`` is None unless the sublayer is cross-attention.
    """
    d_branch, d_context = _split(sublayer.backward(hook.backward(dropout.backward(grad))))
    return grad + norm.backward(d_branch), d_context


def post_norm_residual(x, norm, sublayer, dropout, hook, **options):
    """The 2017 paper's placement: ``norm(x + dropout(sublayer(x)))``.

    Args:
        x, norm, sublayer, dropout, hook, options: as :func:`pre_norm_residual`.

    Returns:
        the stream after the sublayer, ``(B, T, D)``.
    """
    return norm(x + dropout(hook(sublayer(x, **options))))


def post_norm_residual_backward(grad, norm, sublayer, dropout, hook):
    """Through the norm first, then the ``+`` sends the gradient both ways.

    Args:
        grad, norm, sublayer, dropout, hook: as :func:`pre_norm_residual_backward`.

    Returns:
        ``(dx, d_context)``, as :func:`pre_norm_residual_backward`.
    """
    d_sum = norm.backward(grad)
    d_branch, d_context = _split(sublayer.backward(hook.backward(dropout.backward(d_sum))))
    return d_sum + d_branch, d_context


def _split(grad):
    """A sublayer's input gradient: ``(dx, None)``, or cross-attention's ``(dx, d_context)``."""
    return grad if isinstance(grad, tuple) else (grad, None)


RESIDUALS = {
    "pre": (pre_norm_residual, pre_norm_residual_backward),
    "post": (post_norm_residual, post_norm_residual_backward),
}


class TransformerBlock(Module):
    """The block that :class:`EncoderBlock` and :class:`DecoderBlock` are: self-attention
    (``causal`` or not), optional cross-attention over an encoder's output, feed-forward.

    Parameters: ``ln1``, ``attn``, then with ``cross_attention=True`` ``ln2``, ``cross_attn``,
    ``ln3``, ``ffn``; without it ``ln1``, ``attn``, ``ln2``, ``ffn``. ``rotary`` (rotary
    positions, ``pos="rope"``) goes to the self-attention only. ``feed_forward=False`` leaves
    out the feed-forward sublayer and its norm (an attention-only block, notebook 15).

    Args:
        d_model: the width D.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: the feed-forward width (default ``4 * d_model``).
        dropout: drop probability of attention weights, feed-forward activations and sublayer outputs (training only).
        norm: ``"pre"`` (LayerNorm before each sublayer) or ``"post"`` (after each residual sum).
        activation: ``"gelu"`` or ``"relu"``.
        causal: the self-attention sees only earlier positions.
        cross_attention: add cross-attention over ``memory``.
        feed_forward: include the feed-forward sublayer.
        rotary: a :class:`~tfscratch.positional.RotaryPositionalEmbedding` for the
            self-attention, or None.
        seed, rng: where the initial weights and dropout masks come from (a model passes its
            own generator).
        dtype: the parameters' float dtype.
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
        causal: bool,
        cross_attention: bool,
        feed_forward: bool = True,
        rotary: RotaryPositionalEmbedding | None = None,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        self.norm = check_choice(norm, "norm", NORM_PLACEMENTS)
        # the placement, chosen once: x + sublayer(norm(x)) or norm(x + sublayer(x))
        self.residual, self.residual_backward = RESIDUALS[norm]
        self.causal = bool(causal)
        self.has_cross_attention = bool(cross_attention)
        self.has_feed_forward = bool(feed_forward)
        d_ff = 4 * d_model if d_ff is None else d_ff
        rng = make_rng(seed, rng)
        self.hook_resid_pre = HookPoint()
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.attn = MultiHeadAttention(
            d_model, n_heads, dropout=dropout, rotary=rotary, rng=rng, dtype=dtype
        )
        self.hook_attn_out = HookPoint()
        if self.has_cross_attention or self.has_feed_forward:
            self.ln2 = LayerNorm(d_model, dtype=dtype)
        if self.has_cross_attention:
            self.cross_attn = MultiHeadAttention(
                d_model, n_heads, dropout=dropout, rng=rng, dtype=dtype
            )
            self.hook_cross_attn_out = HookPoint()
            if self.has_feed_forward:
                self.ln3 = LayerNorm(d_model, dtype=dtype)
            self.cross_resid_dropout = Dropout(dropout, rng=rng)
        self.hook_resid_mid = HookPoint()
        if self.has_feed_forward:
            self.ffn = FeedForward(d_model, d_ff, activation, dropout, rng=rng, dtype=dtype)
            self.hook_mlp_out = HookPoint()
        self.attn_resid_dropout = Dropout(dropout, rng=rng)
        if self.has_feed_forward:
            self.ffn_resid_dropout = Dropout(dropout, rng=rng)
        self.hook_resid_post = HookPoint()

    @property
    def ffn_norm(self) -> LayerNorm:
        """The norm in front of the feed-forward: ``ln3`` with cross-attention, else ``ln2``."""
        return self.ln3 if self.has_cross_attention else self.ln2

    def forward(
        self,
        x,
        memory=None,
        mask=None,
        key_padding_mask=None,
        memory_key_padding_mask=None,
        kv_cache=None,
    ):
        """The block's two (or three) residual sublayers.

        Args:
            x: float ``(B, T, D)``.
            memory: ``(B, T_src, D)``, the encoder's output (required with cross-attention,
                None without).
            key_padding_mask: bool ``(B, T)``, True where ``x`` is padding.
            memory_key_padding_mask: bool ``(B, T_src)``, True where ``memory`` is padding.
            kv_cache: a :class:`~tfscratch.attention.KVCache` for the self-attention
                (generation), or None.
            mask: bool, True = blocked, broadcastable to ``(B, H, T, T)``, or None.

        Returns:
            ``(B, T, D)``.
        """
        if self.has_cross_attention and memory is None:
            raise ValueError("memory (the encoder output) is required: this block cross-attends")
        if not self.has_cross_attention and memory is not None:
            raise ValueError("memory was given, but this block has no cross-attention")
        x = self.hook_resid_pre(x)
        x = self.residual(
            x, self.ln1, self.attn, self.attn_resid_dropout, self.hook_attn_out,
            mask=mask, key_padding_mask=key_padding_mask, kv_cache=kv_cache, is_causal=self.causal,
        )  # fmt: skip
        if self.has_cross_attention:
            x = self.residual(
                x, self.ln2, self.cross_attn, self.cross_resid_dropout, self.hook_cross_attn_out,
                context=memory, key_padding_mask=memory_key_padding_mask,
            )  # fmt: skip
        x = self.hook_resid_mid(x)
        if self.has_feed_forward:
            x = self.residual(x, self.ffn_norm, self.ffn, self.ffn_resid_dropout, self.hook_mlp_out)
        return self.hook_resid_post(x)

    def backward(self, grad_output):
        """The sublayers in reverse, each residual shortcut adding its gradient.

        Args:
            grad_output: dL/d(output) ``(B, T, D)``.

        Returns:
            ``dx`` ``(B, T, D)``, or ``(dx, dmemory)`` with cross-attention.
        """
        grad = self.hook_resid_post.backward(grad_output)
        if self.has_feed_forward:
            grad, _ = self.residual_backward(
                grad, self.ffn_norm, self.ffn, self.ffn_resid_dropout, self.hook_mlp_out
            )
        grad = self.hook_resid_mid.backward(grad)
        d_memory = None
        if self.has_cross_attention:
            grad, d_memory = self.residual_backward(
                grad, self.ln2, self.cross_attn, self.cross_resid_dropout, self.hook_cross_attn_out
            )
        grad, _ = self.residual_backward(
            grad, self.ln1, self.attn, self.attn_resid_dropout, self.hook_attn_out
        )
        dx = self.hook_resid_pre.backward(grad)
        return (dx, d_memory) if self.has_cross_attention else dx


class EncoderBlock(TransformerBlock):
    """Self-attention (bidirectional) then feed-forward. Parameters: ``ln1``, ``attn``,
    ``ln2``, ``ffn``.

    ``forward(x, mask=None, key_padding_mask=None)``: ``(B, T, D)`` -> ``(B, T, D)``.

    Args:
        d_model: the width D.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: the feed-forward width (default ``4 * d_model``).
        dropout: drop probability of attention weights, feed-forward activations and sublayer outputs (training only).
        norm: ``"pre"`` (LayerNorm before each sublayer) or ``"post"`` (after each residual sum).
        activation: ``"gelu"`` or ``"relu"``.
        rotary: a :class:`~tfscratch.positional.RotaryPositionalEmbedding` for the
            self-attention, or None.
        seed, rng: where the initial weights and dropout masks come from (a model passes its
            own generator).
        dtype: the parameters' float dtype.
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
        rotary: RotaryPositionalEmbedding | None = None,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        super().__init__(
            d_model, n_heads, d_ff, dropout, norm, activation,
            causal=False, cross_attention=False, rotary=rotary, seed=seed, rng=rng, dtype=dtype,
        )  # fmt: skip

    def forward(self, x, mask=None, key_padding_mask=None):
        """Bidirectional self-attention, then the feed-forward.

        Args:
            x: float ``(B, T, D)``.
            mask: bool, True = blocked, broadcastable to ``(B, H, T, T)``, or None.
            key_padding_mask: bool ``(B, T)``, True where ``x`` is padding.

        Returns:
            ``(B, T, D)``.
        """
        return super().forward(x, mask=mask, key_padding_mask=key_padding_mask)


class DecoderBlock(TransformerBlock):
    """Causal self-attention, optional cross-attention over an encoder's output, feed-forward.

    Parameters: ``ln1``, ``attn``, then with ``cross_attention=True`` ``ln2``, ``cross_attn``,
    ``ln3``, ``ffn``; without it ``ln1``, ``attn``, ``ln2``, ``ffn`` (a GPT block).

    ``forward(x, memory=None, key_padding_mask=None, memory_key_padding_mask=None,
    kv_cache=None)``; ``backward`` returns ``dx``, or ``(dx, dmemory)`` with cross-attention.

    Args:
        d_model: the width D.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: the feed-forward width (default ``4 * d_model``).
        dropout: drop probability of attention weights, feed-forward activations and sublayer outputs (training only).
        norm: ``"pre"`` (LayerNorm before each sublayer) or ``"post"`` (after each residual sum).
        activation: ``"gelu"`` or ``"relu"``.
        cross_attention: add cross-attention over an encoder's output (``memory``).
        feed_forward: include the feed-forward sublayer (False: attention-only, notebook 15).
        rotary: a :class:`~tfscratch.positional.RotaryPositionalEmbedding` for the
            self-attention, or None.
        seed, rng: where the initial weights and dropout masks come from (a model passes its
            own generator).
        dtype: the parameters' float dtype.
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
        feed_forward: bool = True,
        rotary: RotaryPositionalEmbedding | None = None,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        super().__init__(
            d_model, n_heads, d_ff, dropout, norm, activation, causal=True,
            cross_attention=cross_attention, feed_forward=feed_forward, rotary=rotary,
            seed=seed, rng=rng, dtype=dtype,
        )  # fmt: skip

    def forward(
        self, x, memory=None, key_padding_mask=None, memory_key_padding_mask=None, kv_cache=None
    ):
        """Causal self-attention, cross-attention (if any), then the feed-forward.

        Args:
            x: float ``(B, T, D)``.
            memory: ``(B, T_src, D)``, the encoder's output (required with cross-attention,
                None without).
            key_padding_mask: bool ``(B, T)``, True where ``x`` is padding.
            memory_key_padding_mask: bool ``(B, T_src)``, True where ``memory`` is padding.
            kv_cache: a :class:`~tfscratch.attention.KVCache` for the self-attention
                (generation), or None.

        Returns:
            ``(B, T, D)``.
        """
        return super().forward(
            x,
            memory,
            key_padding_mask=key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            kv_cache=kv_cache,
        )
