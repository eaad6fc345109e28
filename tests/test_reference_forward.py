"""An independent forward reference for the blocks and the three models.

The reference below is plain NumPy written from the equations (the paper's, GPT-2's, RoPE's),
reading its weights from ``module.state_dict()`` by name. It shares no code with the
package: nothing from ``tfscratch`` is called to compute it, so a wrong convention in the
package (a transposed weight, a shifted position, a mask that leaks one token, LayerNorm's
variance, the GELU formula, which features RoPE turns) shows up as a mismatch here.

Everything is float64 with random weights of order one (the models start with zero biases
and identity LayerNorms, which would hide half the parameters), in evaluation mode with
dropout 0, and the package must agree to 1e-12 of the output's scale: round-off, nothing
more. The last tests show the comparison is sharp: a reference that is wrong by one
position, or lets one future token through, misses by many orders of magnitude more.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tfscratch
from tfscratch import nn

F64 = np.float64
LN_EPS = 1e-5
ROPE_BASE = 10000.0
TOLERANCE = 1e-12  # relative to the output's largest entry (absolute below scale 1)


# =============================================================================================
# The reference: plain NumPy, from the equations
# =============================================================================================
def linear(x, state, name):
    """``x @ W + b``: x ``(..., d_in)``, ``W = state[name.weight]`` ``(d_in, d_out)``,
    ``b = state[name.bias]`` ``(d_out,)`` when the map has one -> ``(..., d_out)``."""
    y = x @ state[f"{name}.weight"]
    bias = state.get(f"{name}.bias")
    return y if bias is None else y + bias


def layer_norm(x, state, name):
    """x ``(..., D)``: ``gamma * (x - mean) / sqrt(var + eps) + beta`` over the last axis,
    with the biased variance (divided by D)."""
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    x_hat = (x - mean) / np.sqrt(variance + LN_EPS)
    return state[f"{name}.gamma"] * x_hat + state[f"{name}.beta"]


def gelu(x):
    """GPT-2's tanh GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def relu(x):
    return np.maximum(x, 0.0)


def feed_forward(x, state, name, activation):
    """``fc2(act(fc1(x)))``: x ``(B, T, D)`` -> ``(B, T, D)``."""
    act = {"gelu": gelu, "relu": relu}[activation]
    return linear(act(linear(x, state, f"{name}.fc1")), state, f"{name}.fc2")


def sinusoidal_positions(T, D, offset=0):
    """``(T, D)``: row ``p`` (position ``offset + p``), column ``j`` is
    ``sin(p / 10000^(2i/D))`` for ``j = 2i`` and ``cos(p / 10000^(2i/D))`` for ``j = 2i + 1``."""
    position = np.arange(offset, offset + T, dtype=F64)[:, None]  # (T, 1)
    j = np.arange(D)
    pair = j // 2  # i: columns 2i and 2i+1 share one frequency
    angle = position / 10000.0 ** (2 * pair / D)  # (T, D)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))


def rope_phases(T, d_head, offset=0):
    """``(T, d_head/2)`` complex: ``exp(1j m theta_i)`` at positions ``m = offset .. offset+T-1``
    with ``theta_i = 10000^(-2i/d_head)``."""
    theta = ROPE_BASE ** (-np.arange(d_head // 2) * 2.0 / d_head)
    m = np.arange(offset, offset + T, dtype=F64)[:, None]
    return np.exp(1j * m * theta)


def rope_rotate(x, offset=0):
    """RoPE on queries or keys ``x`` ``(B, H, T, d_head)``: features ``(2i, 2i+1)`` form the
    complex number ``x_2i + 1j x_2i+1``, turned by multiplying with its position's phase."""
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * rope_phases(x.shape[-2], x.shape[-1], offset)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def causal_mask(T):
    """``(T, T)`` bool, True (blocked) where the key comes after the query."""
    query, key = np.arange(T)[:, None], np.arange(T)[None, :]
    return key > query


def padding_mask(key_padding):
    """``(B, T_k)`` True = padding -> ``(B, 1, 1, T_k)``: every head and query skips it."""
    return key_padding[:, None, None, :]


def attention(x, context, state, name, n_heads, blocked=None, rope=False):
    """Multi-head attention from ``x`` ``(B, T_q, D)`` to ``context`` ``(B, T_k, D)``.

    Q, K, V are ``q_proj(x)``, ``k_proj(context)``, ``v_proj(context)``, split into heads as
    ``(B, T, H, d_head) -> (B, H, T, d_head)``; with ``rope`` Q and K are rotated by their
    positions. ``blocked``: bool, True = may not attend, broadcastable to ``(B, H, T_q, T_k)``.
    Each head: ``softmax(Q K^T / sqrt(d_head))`` over the allowed keys (a query with none
    gets all-zero weights) times V; heads concatenated, then ``out_proj``. -> ``(B, T_q, D)``.
    """
    B, T_q, D = x.shape
    T_k, d_head = context.shape[1], D // n_heads

    def heads(y, T):  # (B, T, D) -> (B, H, T, d_head)
        return y.reshape(B, T, n_heads, d_head).transpose(0, 2, 1, 3)

    q = heads(linear(x, state, f"{name}.q_proj"), T_q)
    k = heads(linear(context, state, f"{name}.k_proj"), T_k)
    v = heads(linear(context, state, f"{name}.v_proj"), T_k)
    if rope:
        q, k = rope_rotate(q), rope_rotate(k)
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d_head)
    allowed = np.ones(scores.shape, dtype=bool)
    if blocked is not None:
        allowed &= ~np.broadcast_to(blocked, scores.shape)
    row_max = np.max(scores, axis=-1, keepdims=True, where=allowed, initial=-np.inf)
    row_max[~np.isfinite(row_max)] = 0.0  # a query with no allowed key
    exp_scores = np.where(allowed, np.exp(scores - row_max), 0.0)
    total = exp_scores.sum(axis=-1, keepdims=True)
    weights = np.divide(exp_scores, total, out=np.zeros_like(exp_scores), where=total > 0)
    head_out = np.einsum("bhqk,bhkd->bhqd", weights, v)  # (B, H, T_q, d_head)
    merged = head_out.transpose(0, 2, 1, 3).reshape(B, T_q, D)
    return linear(merged, state, f"{name}.out_proj")


def block(
    x,
    state,
    name,
    n_heads,
    norm,
    activation,
    causal,
    key_padding=None,
    memory=None,
    memory_padding=None,
    rope=False,
    with_ffn=True,
):
    """One Transformer block: x ``(B, T, D)`` -> ``(B, T, D)``; ``name`` is its prefix
    (``""`` for a block on its own, ``"blocks.0."`` inside a model).

    Self-attention (``causal`` or not, keys padded by ``key_padding`` ``(B, T)``, rotary with
    ``rope``), then with ``memory`` ``(B, S, D)`` cross-attention (keys padded by
    ``memory_padding`` ``(B, S)``, never rotary), then the feed-forward (left out with
    ``with_ffn=False``). The feed-forward's norm is ``ln3`` after cross-attention, else
    ``ln2``.

    pre:  ``h = x + attn(ln1(x)); h = h + cross(ln2(h), memory); out = h + ffn(ln(h))``
    post: ``h = ln1(x + attn(x)); h = ln2(h + cross(h, memory)); out = ln(h + ffn(h))``
    """
    T = x.shape[1]
    self_blocked = causal_mask(T) if causal else None
    if key_padding is not None:
        padded = padding_mask(key_padding)
        self_blocked = padded if self_blocked is None else self_blocked | padded
    cross_blocked = None if memory_padding is None else padding_mask(memory_padding)
    ffn_norm = f"{name}ln3" if memory is not None else f"{name}ln2"

    def self_attn(y):
        return attention(y, y, state, f"{name}attn", n_heads, self_blocked, rope)

    def cross_attn(y):
        return attention(y, memory, state, f"{name}cross_attn", n_heads, cross_blocked)

    def ffn(y):
        return feed_forward(y, state, f"{name}ffn", activation)

    def ln(y, which):
        return layer_norm(y, state, which)

    if norm == "pre":
        h = x + self_attn(ln(x, f"{name}ln1"))
        if memory is not None:
            h = h + cross_attn(ln(h, f"{name}ln2"))
        return h + ffn(ln(h, ffn_norm)) if with_ffn else h
    h = ln(x + self_attn(x), f"{name}ln1")
    if memory is not None:
        h = ln(h + cross_attn(h), f"{name}ln2")
    return ln(h + ffn(h), ffn_norm) if with_ffn else h


def n_blocks(state, prefix):
    """How many blocks ``{prefix}.{i}.`` the state holds."""
    return len({key.split(".")[1] for key in state if key.startswith(f"{prefix}.")})


def add_positions(state, position_table, x, pos, offset=0):
    """``x`` ``(B, T, D)`` plus the vectors of positions ``offset .. offset+T-1``: rows of the
    learned ``state[position_table]``, the sinusoidal table, or nothing (rope, none)."""
    T, D = x.shape[1:]
    if pos == "learned":
        return x + state[position_table][offset : offset + T]
    if pos == "sinusoidal":
        return x + sinusoidal_positions(T, D, offset)
    return x


def token_vectors(state, table, tokens, config):
    """Rows of ``state[table]`` for ``tokens``, times ``sqrt(D)`` with ``scale_embeddings``
    (the paper's "we multiply those weights by sqrt(d_model)")."""
    vectors = state[table][tokens]
    return vectors * np.sqrt(vectors.shape[-1]) if config.get("scale_embeddings") else vectors


def vocab_logits(h, state, head, embedding):
    """``(B, T, D)`` -> ``(B, T, V)``: ``h @ lm_head.weight`` or, tied, ``h @ E^T``."""
    if f"{head}.weight" in state:
        return linear(h, state, head)
    return h @ state[f"{embedding}.weight"].T


def decoder_lm_reference(state, config, tokens, offset=0):
    """GPT: tokens ``(B, T)`` -> logits ``(B, T, vocab_size)``; causal blocks ``blocks.{i}``,
    ``ln_f`` with pre-norm, tied or untied head. ``offset``: the position of the first token
    in the added positions (learned, sinusoidal; rope scores see only relative positions)."""
    pos, rope = config["pos"], config["pos"] == "rope"
    x = token_vectors(state, "tok_emb.weight", tokens, config)
    x = add_positions(state, "pos_emb.weight", x, pos, offset)
    for i in range(n_blocks(state, "blocks")):
        x = block(
            x, state, f"blocks.{i}.", config["n_heads"], config["norm"], config["activation"],
            causal=True, rope=rope, with_ffn=not config.get("attn_only"),
        )  # fmt: skip
    if config["norm"] == "pre":
        x = layer_norm(x, state, "ln_f")
    return vocab_logits(x, state, "lm_head", "tok_emb")


def encoder_classifier_reference(state, config, tokens, pad_mask=None):
    """tokens ``(B, T)``, pad_mask ``(B, T)`` (True = padding) -> logits ``(B, n_classes)``.

    ``cls`` pooling puts ``cls_token`` in front (position 0, never padding) and classifies
    its final vector; ``mean`` pooling averages the final vectors of the non-padding
    positions (zero for a row with none).
    """
    B, T = tokens.shape
    keep = np.ones((B, T), dtype=bool) if pad_mask is None else ~pad_mask
    x = token_vectors(state, "tok_emb.weight", tokens, config)
    if config["pooling"] == "cls":
        cls = np.tile(state["cls_token"], (B, 1, 1))  # (B, 1, D)
        x = np.concatenate([cls, x], axis=1)
        keep = np.concatenate([np.ones((B, 1), dtype=bool), keep], axis=1)
    x = add_positions(state, "pos_emb.weight", x, config["pos"])
    for i in range(n_blocks(state, "blocks")):
        x = block(
            x, state, f"blocks.{i}.", config["n_heads"], config["norm"], config["activation"],
            causal=False, key_padding=~keep, rope=config["pos"] == "rope",
        )  # fmt: skip
    if config["norm"] == "pre":
        x = layer_norm(x, state, "ln_f")
    if config["pooling"] == "cls":
        pooled = x[:, 0]
    else:
        count = keep.sum(axis=1, keepdims=True)  # (B, 1)
        total = (x * keep[:, :, None]).sum(axis=1)  # (B, D)
        pooled = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    return linear(pooled, state, "head")


def seq2seq_reference(state, config, src, tgt_in, src_pad_mask=None, tgt_pad_mask=None):
    """src ``(B, S)``, tgt_in ``(B, T)``, pad masks True = padding -> logits ``(B, T, V_tgt)``.

    Encoder: self-attention with ``src_pad_mask`` on the keys, ``encoder_ln`` (pre-norm).
    Decoder: causal self-attention with ``tgt_pad_mask`` on the keys, cross-attention over
    the memory with ``src_pad_mask`` on the keys, ``decoder_ln`` (pre-norm), tied or untied
    head. With rope both self-attentions rotate; cross-attention does not.
    """
    pos, rope = config["pos"], config["pos"] == "rope"
    n_heads, norm, activation = config["n_heads"], config["norm"], config["activation"]
    memory = token_vectors(state, "src_emb.weight", src, config)
    memory = add_positions(state, "src_pos.weight", memory, pos)
    for i in range(n_blocks(state, "encoder_blocks")):
        memory = block(
            memory, state, f"encoder_blocks.{i}.", n_heads, norm, activation, causal=False,
            key_padding=src_pad_mask, rope=rope,
        )  # fmt: skip
    if norm == "pre":
        memory = layer_norm(memory, state, "encoder_ln")
    x = token_vectors(state, "tgt_emb.weight", tgt_in, config)
    x = add_positions(state, "tgt_pos.weight", x, pos)
    for i in range(n_blocks(state, "decoder_blocks")):
        x = block(
            x, state, f"decoder_blocks.{i}.", n_heads, norm, activation, causal=True,
            key_padding=tgt_pad_mask, memory=memory, memory_padding=src_pad_mask, rope=rope,
        )  # fmt: skip
    if norm == "pre":
        x = layer_norm(x, state, "decoder_ln")
    return vocab_logits(x, state, "lm_head", "tgt_emb")


# =============================================================================================
# Helpers of the tests
# =============================================================================================
D_MODEL, N_HEADS, D_FF, VOCAB, MAX_LEN = 16, 4, 24, 11, 12


def randomized(module, seed=0):
    """Overwrite every parameter (through ``load_state_dict``) with random values of order
    one: weights, biases, embeddings and LayerNorm ``beta`` ~ N(0, 0.3), ``gamma`` ~
    1 + N(0, 0.2). Returns the module in evaluation mode and the state it now holds."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in module.state_dict().items():
        if name.endswith("gamma"):
            state[name] = 1.0 + rng.normal(0.0, 0.2, value.shape)
        else:
            state[name] = rng.normal(0.0, 0.3, value.shape)
    module.load_state_dict(state)
    held = module.state_dict()
    for name, value in state.items():
        np.testing.assert_array_equal(held[name], value)
    return module.eval(), held


def assert_matches(actual, expected):
    """Equal to round-off: within 1e-12 of the output's scale (absolute below scale 1)."""
    assert actual.dtype == F64
    assert actual.shape == expected.shape
    assert np.all(np.isfinite(actual))
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOLERANCE * scale)


def relative_gap(actual, expected):
    return float(np.abs(actual - expected).max() / max(1.0, np.abs(expected).max()))


def batch_of_tokens(rng, B, T, vocab):
    return rng.integers(1, vocab, size=(B, T))


def padding_rows(B, T, pad_lengths):
    """``(B, T)`` bool: the last ``pad_lengths[b]`` positions of row ``b`` are padding."""
    mask = np.zeros((B, T), dtype=bool)
    for row, n_pad in enumerate(pad_lengths):
        if n_pad:
            mask[row, T - n_pad :] = True
    return mask


# =============================================================================================
# Blocks
# =============================================================================================
BLOCK_KINDS = ["encoder", "decoder", "decoder_cross"]


def make_block(kind, norm, activation, rotary=None):
    options = dict(norm=norm, activation=activation, rotary=rotary, seed=3, dtype=F64)
    if kind == "encoder":
        return nn.EncoderBlock(D_MODEL, N_HEADS, D_FF, **options)
    return nn.DecoderBlock(
        D_MODEL, N_HEADS, D_FF, cross_attention=kind == "decoder_cross", **options
    )


def run_block(kind, module, state, norm, activation, x, padding, memory, memory_padding, rope):
    """The package's output and the reference's for one block."""
    if kind == "decoder_cross":
        actual = module(x, memory, key_padding_mask=padding, memory_key_padding_mask=memory_padding)
    else:
        actual = module(x, key_padding_mask=padding)
    cross = kind == "decoder_cross"
    expected = block(
        x, state, "", N_HEADS, norm, activation, causal=kind != "encoder", key_padding=padding,
        memory=memory if cross else None, memory_padding=memory_padding if cross else None,
        rope=rope,
    )  # fmt: skip
    return actual, expected


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("kind", BLOCK_KINDS)
def test_block_matches_reference(kind, norm, activation):
    module, state = randomized(make_block(kind, norm, activation), seed=1)
    rng = np.random.default_rng(2)
    x, memory = rng.standard_normal((3, 5, D_MODEL)), rng.standard_normal((3, 7, D_MODEL))
    padding = padding_rows(3, 5, [0, 2, 0])
    memory_padding = padding_rows(3, 7, [0, 0, 4])
    actual, expected = run_block(
        kind, module, state, norm, activation, x, padding, memory, memory_padding, rope=False
    )
    assert_matches(actual, expected)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("kind", BLOCK_KINDS)
def test_block_with_rotary_positions_matches_reference(kind, norm):
    rotary = nn.RotaryPositionalEmbedding(MAX_LEN, D_MODEL // N_HEADS, dtype=F64)
    module, state = randomized(make_block(kind, norm, "gelu", rotary), seed=4)
    rng = np.random.default_rng(5)
    x, memory = rng.standard_normal((2, 6, D_MODEL)), rng.standard_normal((2, 4, D_MODEL))
    actual, expected = run_block(kind, module, state, norm, "gelu", x, None, memory, None, True)
    assert_matches(actual, expected)


def test_decoder_block_query_with_every_key_blocked_gets_zero_attention_not_nan():
    # Left padding: in row 1, positions 0 and 1 are padding, so under the causal mask
    # queries 0 and 1 have no key at all; their attention output is zero (then out_proj's bias).
    module, state = randomized(make_block("decoder", "pre", "gelu"), seed=6)
    x = np.random.default_rng(7).standard_normal((2, 5, D_MODEL))
    padding = np.zeros((2, 5), dtype=bool)
    padding[1, :2] = True
    actual, expected = run_block(
        "decoder", module, state, "pre", "gelu", x, padding, None, None, False
    )
    assert_matches(actual, expected)


# =============================================================================================
# Models
# =============================================================================================
POSITIONS = ["learned", "sinusoidal", "rope"]


def make_decoder_lm(pos, tie_weights, norm="pre", activation="gelu"):
    model = tfscratch.DecoderLM(
        VOCAB, D_MODEL, N_HEADS, n_layers=2, d_ff=D_FF, max_len=MAX_LEN, dropout=0.0, pos=pos,
        norm=norm, activation=activation, tie_weights=tie_weights, seed=0, dtype=F64,
    )  # fmt: skip
    return randomized(model, seed=10)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("tie_weights", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("pos", POSITIONS)
def test_decoder_lm_matches_reference(pos, tie_weights, norm):
    model, state = make_decoder_lm(pos, tie_weights, norm)
    assert ("lm_head.weight" in state) == (not tie_weights)
    tokens = batch_of_tokens(np.random.default_rng(11), 3, 9, VOCAB)
    tokens[1, 5:] = 0  # a padded row: the LM has no pad mask, the pads are ordinary tokens
    actual = model(tokens)
    assert_matches(actual, decoder_lm_reference(state, model.config, tokens))
    # each row on its own gives the same logits: rows of a batch never mix
    one_by_one = np.concatenate(
        [decoder_lm_reference(state, model.config, row[None]) for row in tokens]
    )
    assert_matches(actual, one_by_one)


def test_decoder_lm_with_relu_matches_reference():
    model, state = make_decoder_lm("learned", True, "pre", activation="relu")
    tokens = batch_of_tokens(np.random.default_rng(12), 2, MAX_LEN, VOCAB)  # the full length
    assert_matches(model(tokens), decoder_lm_reference(state, model.config, tokens))


def make_classifier(pooling, pos, norm="pre"):
    model = tfscratch.EncoderClassifier(
        VOCAB, 3, D_MODEL, N_HEADS, n_layers=2, d_ff=D_FF, max_len=MAX_LEN, pooling=pooling,
        dropout=0.0, pos=pos, norm=norm, seed=0, dtype=F64,
    )  # fmt: skip
    return randomized(model, seed=20)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("pos", [*POSITIONS, "none"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_classifier_with_padding_matches_reference(pooling, pos, norm):
    model, state = make_classifier(pooling, pos, norm)
    assert ("cls_token" in state) == (pooling == "cls")
    tokens = batch_of_tokens(np.random.default_rng(21), 3, 7, VOCAB)
    pad_mask = padding_rows(3, 7, [0, 3, 1])
    tokens[pad_mask] = 0
    actual = model(tokens, pad_mask=pad_mask)
    assert actual.shape == (3, 3)
    assert_matches(actual, encoder_classifier_reference(state, model.config, tokens, pad_mask))


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_classifier_without_pad_mask_matches_reference(pooling):
    model, state = make_classifier(pooling, "learned")
    tokens = batch_of_tokens(np.random.default_rng(22), 2, MAX_LEN, VOCAB)
    assert_matches(model(tokens), encoder_classifier_reference(state, model.config, tokens))


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_classifier_padding_changes_nothing_but_the_padded_row(pooling):
    # The reference ignores a padded position's token; so must the package.
    model, state = make_classifier(pooling, "sinusoidal")
    tokens = batch_of_tokens(np.random.default_rng(23), 2, 6, VOCAB)
    pad_mask = padding_rows(2, 6, [0, 2])
    other = tokens.copy()
    other[pad_mask] = (other[pad_mask] % (VOCAB - 1)) + 1  # different tokens under the padding
    expected = encoder_classifier_reference(state, model.config, tokens, pad_mask)
    assert_matches(model(tokens, pad_mask=pad_mask), expected)
    assert_matches(model(other, pad_mask=pad_mask), expected)


def make_seq2seq(pos, norm, tie_weights):
    model = tfscratch.Seq2SeqTransformer(
        VOCAB, VOCAB + 2, D_MODEL, N_HEADS, n_encoder_layers=2, n_decoder_layers=2, d_ff=D_FF,
        max_len=MAX_LEN, dropout=0.0, pos=pos, norm=norm, tie_weights=tie_weights, seed=0,
        dtype=F64,
    )  # fmt: skip
    return randomized(model, seed=30)


@pytest.mark.parametrize("tie_weights", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("pos", POSITIONS)
def test_seq2seq_with_both_padding_masks_matches_reference(pos, norm, tie_weights):
    model, state = make_seq2seq(pos, norm, tie_weights)
    rng = np.random.default_rng(31)
    src, tgt_in = batch_of_tokens(rng, 3, 8, VOCAB), batch_of_tokens(rng, 3, 6, VOCAB + 2)
    src_pad_mask = padding_rows(3, 8, [0, 3, 0])  # a padded source row
    tgt_pad_mask = padding_rows(3, 6, [0, 0, 2])  # a padded target row
    src[src_pad_mask], tgt_in[tgt_pad_mask] = 0, 0
    actual = model(src, tgt_in, src_pad_mask, tgt_pad_mask)
    expected = seq2seq_reference(state, model.config, src, tgt_in, src_pad_mask, tgt_pad_mask)
    assert actual.shape == (3, 6, VOCAB + 2)
    assert_matches(actual, expected)


def test_seq2seq_without_padding_masks_matches_reference():
    model, state = make_seq2seq("sinusoidal", "pre", True)
    rng = np.random.default_rng(32)
    src, tgt_in = batch_of_tokens(rng, 2, 5, VOCAB), batch_of_tokens(rng, 2, 7, VOCAB + 2)
    assert_matches(model(src, tgt_in), seq2seq_reference(state, model.config, src, tgt_in))


# --- the options of notebooks 10 and 15: scaled token embeddings, attention-only blocks -------
@pytest.mark.parametrize("pos", POSITIONS)
def test_models_with_scaled_token_embeddings_match_reference(pos):
    rng = np.random.default_rng(40)
    options = dict(dropout=0.0, pos=pos, scale_embeddings=True, seed=0, dtype=F64)
    lm, lm_state = randomized(
        tfscratch.DecoderLM(VOCAB, D_MODEL, N_HEADS, 2, D_FF, MAX_LEN, **options), seed=41
    )
    tokens = batch_of_tokens(rng, 2, 7, VOCAB)
    assert_matches(lm(tokens), decoder_lm_reference(lm_state, lm.config, tokens))
    classifier, classifier_state = randomized(
        tfscratch.EncoderClassifier(VOCAB, 3, D_MODEL, N_HEADS, 1, D_FF, MAX_LEN, "cls", **options)
    )
    assert_matches(
        classifier(tokens),
        encoder_classifier_reference(classifier_state, classifier.config, tokens),
    )
    translator, translator_state = randomized(
        tfscratch.Seq2SeqTransformer(VOCAB, VOCAB, D_MODEL, N_HEADS, 1, 1, D_FF, MAX_LEN, **options)
    )
    assert_matches(
        translator(tokens, tokens[:, :5]),
        seq2seq_reference(translator_state, translator.config, tokens, tokens[:, :5]),
    )
    # the scale is real: without it the reference misses by far more than round-off
    unscaled = decoder_lm_reference(lm_state, {**lm.config, "scale_embeddings": False}, tokens)
    assert relative_gap(lm(tokens), unscaled) > FAR_OFF


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("pos", POSITIONS)
def test_attention_only_decoder_lm_matches_reference(pos, norm):
    lm = tfscratch.DecoderLM(
        VOCAB, D_MODEL, N_HEADS, 2, D_FF, MAX_LEN, pos=pos, norm=norm, attn_only=True, seed=0,
        dtype=F64,
    )  # fmt: skip
    model, state = randomized(lm, seed=42)
    assert not any(".ffn." in name or ".ln2." in name for name in state)
    tokens = batch_of_tokens(np.random.default_rng(43), 3, 8, VOCAB)
    assert_matches(model(tokens), decoder_lm_reference(state, model.config, tokens))


# =============================================================================================
# The comparison is sharp: a reference wrong by one token misses by far more than round-off
# =============================================================================================
THIS_MODULE = sys.modules[__name__]
FAR_OFF = 1e-3  # relative; a correct reference is within 1e-12


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_reference_with_positions_shifted_by_one_does_not_match(pos):
    model, state = make_decoder_lm(pos, True)
    tokens = batch_of_tokens(np.random.default_rng(40), 2, 8, VOCAB)
    actual = model(tokens)
    assert_matches(actual, decoder_lm_reference(state, model.config, tokens, offset=0))
    shifted = decoder_lm_reference(state, model.config, tokens, offset=1)
    assert relative_gap(actual, shifted) > FAR_OFF


def test_reference_with_a_causal_mask_leaking_one_future_token_does_not_match(monkeypatch):
    model, state = make_decoder_lm("learned", True)
    tokens = batch_of_tokens(np.random.default_rng(41), 2, 8, VOCAB)
    actual = model(tokens)
    monkeypatch.setattr(THIS_MODULE, "causal_mask", lambda T: np.triu(np.ones((T, T), bool), 2))
    leaky = decoder_lm_reference(state, model.config, tokens)
    assert relative_gap(actual, leaky) > FAR_OFF


def rope_rotate_halves(x, offset=0):
    """The other common RoPE layout (GPT-NeoX): feature ``i`` pairs with ``i + d_head/2``."""
    half = x.shape[-1] // 2
    z = (x[..., :half] + 1j * x[..., half:]) * rope_phases(x.shape[-2], x.shape[-1], offset)
    return np.concatenate([z.real, z.imag], axis=-1)


def test_reference_with_the_other_rope_pair_layout_does_not_match(monkeypatch):
    model, state = make_decoder_lm("rope", True)
    tokens = batch_of_tokens(np.random.default_rng(42), 2, 8, VOCAB)
    actual = model(tokens)
    monkeypatch.setattr(THIS_MODULE, "rope_rotate", rope_rotate_halves)
    assert relative_gap(actual, decoder_lm_reference(state, model.config, tokens)) > FAR_OFF


def test_reference_mean_pooling_over_padding_too_does_not_match():
    model, state = make_classifier("mean", "learned")
    tokens = batch_of_tokens(np.random.default_rng(43), 2, 7, VOCAB)
    pad_mask = padding_rows(2, 7, [0, 3])
    actual = model(tokens, pad_mask=pad_mask)
    unmasked = encoder_classifier_reference(state, model.config, tokens, pad_mask=None)
    assert_matches(actual[0], unmasked[0])  # the row without padding agrees
    assert relative_gap(actual[1], unmasked[1]) > FAR_OFF
