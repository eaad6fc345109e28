"""A zoo of planted bugs: small language models, each with one named mistake (notebook 16).

Each bug is a small variant of a real component (a subclass of the package's layer with one
line changed, or a replaced backward), planted into a fresh :class:`~tfscratch.models.DecoderLM`
after it is built; the package's own layers are never changed, so a correct model stays
correct. A variant keeps its parent's class name, so printing a model does not give its bug
away.

* :func:`list_bugs` lists them (name and one line each);
* :func:`make_model` builds a small model with one of them (or none), seeded;
* :func:`make_batch` a small batch of random token sequences to examine it on;
* :func:`mystery_model` a model with a bug it does not name (notebook 16's exercises).

The bugs are the ones learners of from-scratch courses report again and again: a causal
mask off by one, a softmax over the wrong axis, a KV cache at the wrong position, LayerNorm
over the wrong axis, dropout left on in evaluation, the tied head's gradient lost, a
backward that forgets the residual path, a too large initialisation, positions counted from
the end, and a position table that never learns.
"""

from __future__ import annotations

import numpy as np

from . import functional as F
from .attention import MultiHeadAttention, project_together, split_heads
from .layers import Dropout, LayerNorm
from .models import DecoderLM
from .positional import LearnedPositionalEmbedding

SMALL_MODEL = dict(vocab_size=16, d_model=32, n_heads=4, n_layers=2, max_len=32, dropout=0.1)


def _same_name(parent):
    """Give a variant its parent's class name (so ``repr`` does not name the bug)."""

    def rename(cls):
        cls.__name__ = cls.__qualname__ = parent.__name__
        return cls

    return rename


# --- attention ---------------------------------------------------------------------------
@_same_name(MultiHeadAttention)
class _SeesOneAhead(MultiHeadAttention):
    """Causal mask off by one: each query also sees the next position."""

    def _blocked(self, mask, key_padding_mask, is_causal, full_shape, offset):
        _, _, T_q, T_k = full_shape
        if not is_causal:
            return super()._blocked(mask, key_padding_mask, is_causal, full_shape, offset)
        queries = offset + np.arange(T_q)[:, None]
        return np.arange(T_k)[None, :] > queries + 1  # should be > queries


class _SelfAttentionVariant(MultiHeadAttention):
    """Self-attention (no rotary positions) whose weights come from :meth:`weights`."""

    def weights(self, q, k, blocked):
        return F.attention_weights(q, k, blocked)

    def forward(
        self, x, context=None, mask=None, key_padding_mask=None, kv_cache=None, is_causal=False
    ):
        B, T_q, _ = x.shape
        q, k, v = project_together(x, (self.q_proj, self.k_proj, self.v_proj))
        q, k, v = (split_heads(part, self.n_heads) for part in (q, k, v))
        offset = 0 if kv_cache is None else kv_cache.length
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)
        shape = (B, self.n_heads, T_q, k.shape[2])
        blocked = self._blocked(mask, key_padding_mask, is_causal, shape, offset)
        dropout_mask = self.attn_dropout.new_mask(shape, x.dtype)
        weights = self.weights(q, k, blocked)
        pattern = self.hook_pattern(weights)
        z = self.hook_z(F.attend(pattern, v, dropout_mask).transpose(0, 2, 1, 3))
        self.save_for_backward(
            x=x, context=None, kv_cache=kv_cache, q=q, k=k, v=v, weights=weights,
            pattern=None if pattern is weights else pattern, dropout_mask=dropout_mask,
        )  # fmt: skip
        self.attn_weights = pattern
        return self.out_proj(z.reshape(B, T_q, self.d_model))


@_same_name(MultiHeadAttention)
class _SoftmaxOverQueries(_SelfAttentionVariant):
    """Softmax over the queries' axis (-2) instead of the keys' (-1)."""

    def weights(self, q, k, blocked):
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        if blocked is not None:
            scores = np.where(blocked, -np.inf, scores)
        return F.softmax(scores, axis=-2)  # should be axis=-1


# --- norms, dropout, positions ---------------------------------------------------------------
@_same_name(LayerNorm)
class _NormOverTime(LayerNorm):
    """LayerNorm over the positions (axis 1) instead of the features; its backward is right
    for that forward."""

    def forward(self, x):
        mean = x.mean(axis=1, keepdims=True)  # should be axis=-1
        centred = x - mean
        inv_std = 1.0 / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + self.eps)
        x_hat = centred * inv_std
        self.save_for_backward(x_hat=x_hat, inv_std=inv_std)
        return x_hat * self.gamma.data + self.beta.data

    def backward(self, grad_output):
        self.check_ready_for_backward()
        x_hat, inv_std = self._x_hat, self._inv_std
        self.gamma.grad += (grad_output * x_hat).sum(axis=(0, 1))
        self.beta.grad += grad_output.sum(axis=(0, 1))
        g = grad_output * self.gamma.data
        g_mean = g.mean(axis=1, keepdims=True)
        g_x_hat_mean = (g * x_hat).mean(axis=1, keepdims=True)
        return (g - g_mean - x_hat * g_x_hat_mean) * inv_std


@_same_name(Dropout)
class _AlwaysDropout(Dropout):
    """Dropout that forgets to check the mode: it drops in evaluation too."""

    def new_mask(self, shape, dtype=np.float32):
        if self.p == 0.0:  # should also return None when not self.training
            return None
        return F.dropout_mask(shape, self.p, self._rng, dtype=dtype)


@_same_name(LearnedPositionalEmbedding)
class _PositionsFromTheEnd(LearnedPositionalEmbedding):
    """Positions counted from the end of the sequence (row ``T - 1 - t`` for position ``t``);
    the backward is right for that forward."""

    def forward(self, x, offset=0):
        T = x.shape[1]
        rows = np.arange(offset + T - 1, offset - 1, -1)  # should be offset ... offset + T - 1
        self.save_for_backward(rows=rows)
        return x + self.hook_pos_embed(np.broadcast_to(self.weight.data[rows], x.shape))

    def backward(self, grad_output):
        self.check_ready_for_backward()
        np.add.at(self.weight.grad, self._rows, self.hook_pos_embed.backward(grad_output).sum(0))
        return grad_output


@_same_name(LearnedPositionalEmbedding)
class _PositionsNeverLearn(LearnedPositionalEmbedding):
    """The position table's backward passes the gradient on but never accumulates its own."""

    def backward(self, grad_output):
        self.check_ready_for_backward()
        return self.hook_pos_embed.backward(grad_output)  # forgot weight.grad[...] += ...


# --- the model ---------------------------------------------------------------------------
@_same_name(DecoderLM)
class _CacheAtPositionZero(DecoderLM):
    """With a KV cache, every new token gets position 0 instead of the cache's length."""

    def forward(self, tokens, kv_cache=None):
        if kv_cache is None:
            return super().forward(tokens)
        x = self._embed(np.asarray(tokens), offset=0)  # should be offset=kv_cache[0].length
        for block, cache in zip(self.blocks, kv_cache, strict=True):
            x = block(x, kv_cache=cache)
        x = self.hook_normalized(self.ln_f(x))
        self.save_for_backward(h=x)
        return x @ self.tok_emb.weight.data.T


@_same_name(DecoderLM)
class _HeadGradientLost(DecoderLM):
    """Tied weights: the backward sends the gradient on through the head but never adds the
    head's own share to the embedding's gradient."""

    def backward(self, grad_logits):
        self.check_ready_for_backward()
        V = grad_logits.shape[-1]
        grad = (grad_logits.reshape(-1, V) @ self.tok_emb.weight.data).reshape(self._h.shape)
        # forgot: self.tok_emb.weight.grad += grad_logits^T h
        grad = self.ln_f.backward(self.hook_normalized.backward(grad))
        for block in reversed(self.blocks):
            grad = block.backward(grad)
        self._embed.backward(grad)


def _forgets_residual(grad, norm, sublayer, dropout, hook):
    """A pre-norm residual backward that drops the shortcut's gradient."""
    d_branch = sublayer.backward(hook.backward(dropout.backward(grad)))
    return norm.backward(d_branch), None  # should be grad + norm.backward(d_branch)


# --- planting ----------------------------------------------------------------------------
def _each_attention(model, cls):
    for block in model.blocks:
        block.attn.__class__ = cls


def _plant_layernorm(model):
    for block in model.blocks:
        block.ln1.__class__ = _NormOverTime


def _plant_dropout(model):
    for module in model.modules():
        if type(module) is Dropout:
            module.__class__ = _AlwaysDropout


def _plant_residual(model):
    for block in model.blocks:
        block.residual_backward = _forgets_residual


def _plant_large_init(model):
    rng = np.random.default_rng(model.config["seed"])
    weight = model.tok_emb.weight
    weight.data = rng.normal(0.0, 1.0, weight.shape)  # should be std 0.02


BUGS = {
    "causal_off_by_one": (
        "the causal mask lets each position also see the next token",
        lambda m: _each_attention(m, _SeesOneAhead),
    ),
    "softmax_wrong_axis": (
        "attention's softmax normalises over the queries instead of the keys",
        lambda m: _each_attention(m, _SoftmaxOverQueries),
    ),
    "kv_cache_offset": (
        "with a KV cache every new token is embedded at position 0",
        lambda m: setattr(m, "__class__", _CacheAtPositionZero),
    ),
    "layernorm_wrong_axis": (
        "the first LayerNorm of each block normalises over the positions, not the features",
        _plant_layernorm,
    ),
    "dropout_in_eval": (
        "dropout forgets to check the mode and drops in evaluation too",
        _plant_dropout,
    ),
    "tied_head_grad_lost": (
        "the tied output head never adds its gradient to the embedding's",
        lambda m: setattr(m, "__class__", _HeadGradientLost),
    ),
    "residual_backward_lost": (
        "the blocks' backward forgets the gradient of the residual shortcut",
        _plant_residual,
    ),
    "init_too_large": (
        "the token embedding (also the tied head) is drawn with std 1 instead of 0.02",
        _plant_large_init,
    ),
    "positions_from_end": (
        "the learned positions are counted from the end of the sequence",
        lambda m: setattr(m.pos_emb, "__class__", _PositionsFromTheEnd),
    ),
    "positions_never_learn": (
        "the position table's backward never adds to its own gradient",
        lambda m: setattr(m.pos_emb, "__class__", _PositionsNeverLearn),
    ),
}


def list_bugs():
    """The zoo: one row per planted bug.

    Returns:
        ``pandas.DataFrame`` with columns ``bug`` (the name :func:`make_model` takes) and
        ``description`` (one line).
    """
    import pandas as pd

    return pd.DataFrame(
        [(name, description) for name, (description, _) in BUGS.items()],
        columns=["bug", "description"],
    )


def make_model(bug: str | None = None, seed: int = 0, **config) -> DecoderLM:
    """A small ``DecoderLM`` with one planted bug (or none).

    Args:
        bug: a name from :func:`list_bugs`, or None for the correct model.
        seed: the model's seed (its weights and dropout masks).
        config: ``DecoderLM`` arguments that replace the small defaults (``vocab_size=16,
            d_model=32, n_heads=4, n_layers=2, max_len=32, dropout=0.1``; positions learned,
            pre-norm, tied head).

    Returns:
        the model, in training mode.
    """
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; the zoo has {sorted(BUGS)}")
    options = {**SMALL_MODEL, **config}
    if bug is not None and (
        options.get("pos", "learned") != "learned"
        or options.get("norm", "pre") != "pre"
        or not options.get("tie_weights", True)
    ):
        raise ValueError(
            "the zoo plants bugs into pre-norm models with learned positions and a tied head"
        )
    model = DecoderLM(seed=seed, **options)
    if bug is not None:
        BUGS[bug][1](model)
    return model


def make_batch(
    batch_size: int = 4, length: int = 12, vocab_size: int = 16, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Random token sequences as a language model's batch; the last row ends with padding.

    Args:
        batch_size, length: the batch's shape ``(B, T)``.
        vocab_size: ids are drawn from ``0 ... vocab_size - 1``.
        seed: seed of the draw.

    Returns:
        ``(inputs, targets)``, int ``(B, T)`` each: ``targets[:, t]`` is the token after
        ``inputs[:, t]``; the last row's final 3 targets are ``IGNORE_INDEX`` (padding).
    """
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab_size, size=(batch_size, length + 1))
    inputs, targets = tokens[:, :-1].copy(), tokens[:, 1:].copy()
    targets[-1, -3:] = F.IGNORE_INDEX
    return inputs, targets


MYSTERY_SEED = 219  # which bug each mystery model carries is drawn with this seed


def mystery_model(label: str, seed: int = 0) -> DecoderLM:
    """A small model with a planted bug that it does not name (notebook 16's exercises).

    Args:
        label: ``"A"``, ``"B"`` or ``"C"``.
        seed: the model's seed.

    Returns:
        a model built as :func:`make_model` builds one, with one of the zoo's bugs.
    """
    labels = ("A", "B", "C")
    if label not in labels:
        raise ValueError(f"label must be one of {labels}, got {label!r}")
    names = sorted(BUGS)
    order = np.random.default_rng(MYSTERY_SEED).permutation(len(names))
    return make_model(names[order[labels.index(label)]], seed=seed)
