"""Rotary position embeddings (RoPE): the rotation, its backward, and ``pos="rope"`` models."""

import json
import re

import numpy as np
import pytest

import tfscratch
from tfscratch import DecoderLM, EncoderClassifier, Seq2SeqTransformer, gradcheck
from tfscratch.attention import MultiHeadAttention
from tfscratch.positional import (
    RotaryPositionalEmbedding,
    rope_frequencies,
    rotate_pairs,
    sinusoidal_table,
)

from .conftest import GRAD_TOL, expect, randomize

F64 = np.float64


def rotation_matrix(position, d_head, base=10000.0):
    """The (d_head, d_head) block-diagonal matrix of RoPE at one position, written out:
    a 2x2 rotation by position * theta_i on the diagonal for each pair (2i, 2i+1)."""
    R = np.zeros((d_head, d_head))
    for i in range(d_head // 2):
        angle = position * base ** (-2 * i / d_head)
        c, s = np.cos(angle), np.sin(angle)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return R


# --- the rotation ----------------------------------------------------------------------
def test_rotation_equals_the_block_diagonal_rotation_matrix_at_every_position(rng):
    rope = RotaryPositionalEmbedding(12, 6, dtype=F64)
    x = rng.standard_normal((2, 3, 5, 6))  # (B, H, T, d_head)
    rotated = rope(x, offset=4)
    for t in range(5):
        expected = x[:, :, t] @ rotation_matrix(4 + t, 6).T  # rows are vectors: x R^T
        np.testing.assert_allclose(rotated[:, :, t], expected, rtol=1e-12, atol=1e-14)


def test_rotation_equals_multiplying_complex_pairs_by_e_to_the_i_position_theta(rng):
    x = rng.standard_normal((4, 8))
    rope = RotaryPositionalEmbedding(10, 8, base=100.0, dtype=F64)
    as_complex = x[:, 0::2] + 1j * x[:, 1::2]
    turned = as_complex * np.exp(1j * np.arange(4)[:, None] * rope_frequencies(8, 100.0))
    expected = np.stack([turned.real, turned.imag], axis=-1).reshape(4, 8)
    np.testing.assert_allclose(rope(x), expected, rtol=1e-12, atol=1e-14)


def test_frequencies_are_base_to_the_minus_2i_over_d_and_those_of_the_sinusoidal_table():
    np.testing.assert_allclose(rope_frequencies(8), 10000.0 ** (-np.arange(4) * 2 / 8), rtol=1e-13)
    # the sinusoidal table's column 2i is sin(position * theta_i) with the same theta_i
    table = sinusoidal_table(20, 8, dtype=F64)
    np.testing.assert_allclose(
        table[:, 0::2], np.sin(np.arange(20)[:, None] * rope_frequencies(8)), atol=1e-13
    )


def test_position_zero_is_the_identity_and_every_pair_keeps_its_length(rng):
    rope = RotaryPositionalEmbedding(16, 8, dtype=F64)
    x = rng.standard_normal((3, 16, 8))
    rotated = rope(x)
    np.testing.assert_array_equal(rotated[:, 0], x[:, 0])
    pair_lengths = np.hypot(x[..., 0::2], x[..., 1::2])
    np.testing.assert_allclose(np.hypot(rotated[..., 0::2], rotated[..., 1::2]), pair_lengths)
    assert not np.allclose(rotated[:, 1:], x[:, 1:])


def test_scores_depend_only_on_the_distance_between_query_and_key(rng):
    rope = RotaryPositionalEmbedding(64, 16, dtype=F64)
    q, k = rng.standard_normal(16), rng.standard_normal(16)

    def score(m, n):
        return rope(q[None], offset=m)[0] @ rope(k[None], offset=n)[0]

    for m, n in [(5, 2), (9, 9), (3, 7), (40, 1)]:
        for shift in (1, 7, 20):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), rel=1e-10, abs=1e-12)
    assert abs(score(5, 2) - score(5, 3)) > 1e-3  # but the distance itself matters


def test_offset_rotates_as_the_rows_at_that_offset(rng):
    """An off-by-one in the offset would rotate the cached step by the wrong angle."""
    rope = RotaryPositionalEmbedding(16, 4, dtype=F64)
    x = rng.standard_normal((2, 10, 4))
    whole = rope(x)
    np.testing.assert_allclose(rope(x[:, 6:], offset=6), whole[:, 6:], rtol=1e-13)
    np.testing.assert_allclose(rope(x[:, 6:7], offset=6), whole[:, 6:7], rtol=1e-13)
    assert not np.allclose(rope(x[:, 6:7], offset=5), whole[:, 6:7])
    assert not np.allclose(rope(x[:, 6:7], offset=7), whole[:, 6:7])


def test_backward_is_the_inverse_rotation(rng):
    rope = RotaryPositionalEmbedding(16, 6, dtype=F64)
    x = rng.standard_normal((2, 2, 7, 6))
    np.testing.assert_allclose(rope.rotate_backward(rope.rotate(x, 3), 3), x, rtol=1e-12)
    cos, sin = rope.tables(3, 7)
    np.testing.assert_allclose(rope.rotate_backward(x, 3), rotate_pairs(x, cos, -sin))


@pytest.mark.parametrize("offset", [0, 5])
def test_rotation_backward_matches_finite_differences(rng, offset):
    rope = RotaryPositionalEmbedding(16, 8, dtype=F64)
    x = rng.standard_normal((2, 2, 6, 8))
    assert gradcheck(rope, x, kwargs={"offset": offset}, max_coords=None) < GRAD_TOL


def test_float32_tables_keep_float32_activations(rng):
    rope = RotaryPositionalEmbedding(8, 4)
    assert rope(rng.standard_normal((1, 8, 4)).astype(np.float32)).dtype == np.float32


# --- attention and blocks --------------------------------------------------------------
def test_attention_with_rotary_equals_rotating_q_and_k_by_hand(rng):
    from tfscratch import functional as F
    from tfscratch.attention import merge_heads, split_heads

    rope = RotaryPositionalEmbedding(8, 4, dtype=F64)
    mha = randomize(MultiHeadAttention(8, 2, rotary=rope, seed=0, dtype=F64))
    x = rng.standard_normal((2, 5, 8))
    q, k, v = (
        split_heads(x @ p.weight.data + p.bias.data, 2)
        for p in (mha.q_proj, mha.k_proj, mha.v_proj)
    )
    heads, _ = F.scaled_dot_product_attention(rope(q), rope(k), v, F.causal_mask(5))
    expected = merge_heads(heads) @ mha.out_proj.weight.data + mha.out_proj.bias.data
    np.testing.assert_allclose(mha(x, is_causal=True), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_with_rotary_backward_matches_finite_differences(rng, is_causal):
    rope = RotaryPositionalEmbedding(8, 4, dtype=F64)
    mha = randomize(MultiHeadAttention(8, 2, rotary=rope, seed=0, dtype=F64))
    x = rng.standard_normal((2, 6, 8))
    assert gradcheck(mha, x, kwargs={"is_causal": is_causal}, max_coords=12) < GRAD_TOL


def test_cross_attention_is_never_rotated(rng):
    rope = RotaryPositionalEmbedding(8, 4, dtype=F64)
    rotary, plain = (
        randomize(MultiHeadAttention(8, 2, rotary=r, seed=0, dtype=F64)) for r in (rope, None)
    )
    x, memory = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8))
    np.testing.assert_array_equal(rotary(x, context=memory), plain(x, context=memory))
    model = Seq2SeqTransformer(9, 7, 8, 2, 1, 2, max_len=8, pos="rope", seed=0)
    assert model.encoder_blocks[0].attn.rotary is model.rotary
    assert all(block.attn.rotary is model.rotary for block in model.decoder_blocks)
    assert all(block.cross_attn.rotary is None for block in model.decoder_blocks)


# --- models with pos="rope" ------------------------------------------------------------
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("tie_weights", [True, False])
def test_decoder_lm_with_rope_backward_matches_finite_differences(rng, norm, tie_weights):
    model = randomize(
        DecoderLM(
            11, 8, 2, 2, d_ff=16, max_len=8, pos="rope", norm=norm, tie_weights=tie_weights,
            seed=0, dtype=F64,
        )
    )  # fmt: skip
    assert gradcheck(model, rng.integers(0, 11, (2, 6)), max_coords=8) < GRAD_TOL


def test_seq2seq_with_rope_backward_matches_finite_differences(rng):
    model = randomize(
        Seq2SeqTransformer(9, 7, 8, 2, 2, 2, d_ff=16, max_len=8, pos="rope", seed=0, dtype=F64)
    )
    src, tgt = rng.integers(0, 9, (2, 5)), rng.integers(0, 7, (2, 4))
    kwargs = {"src_pad_mask": np.array([[False] * 5, [False, False, False, True, True]])}
    assert gradcheck(model, src, tgt, kwargs=kwargs, max_coords=6) < GRAD_TOL


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_classifier_with_rope_backward_matches_finite_differences(rng, pooling):
    model = randomize(
        EncoderClassifier(
            5, 3, 8, 2, 2, d_ff=16, max_len=8, pooling=pooling, pos="rope", seed=0, dtype=F64
        )
    )
    pad = np.zeros((3, 6), dtype=bool)
    pad[2, 4:] = True
    tokens = rng.integers(0, 5, (3, 6))
    assert gradcheck(model, tokens, kwargs={"pad_mask": pad}, max_coords=8) < GRAD_TOL


def test_rope_model_has_no_position_table_and_starts_from_the_sinusoidal_models_weights():
    rope = DecoderLM(11, 16, 4, 2, max_len=16, pos="rope", seed=0)
    sinusoidal = DecoderLM(11, 16, 4, 2, max_len=16, pos="sinusoidal", seed=0)
    assert rope.pos_emb is None and rope.rotary is not None and sinusoidal.rotary is None
    assert not any("pos" in name for name in rope.named_parameters())
    # neither draws random numbers for its positions, so one seed gives the same weights
    for (name, a), (other, b) in zip(rope.state_dict().items(), sinusoidal.state_dict().items()):
        assert name == other
        np.testing.assert_array_equal(a, b)


def test_rope_gives_the_encoder_order_but_no_absolute_position(rng):
    tokens = rng.integers(0, 5, (2, 6))
    shuffled = tokens[:, ::-1]
    rope = randomize(EncoderClassifier(5, 3, 8, 2, 1, max_len=8, pos="rope", seed=0, dtype=F64))
    bag = randomize(EncoderClassifier(5, 3, 8, 2, 1, max_len=8, pos="none", seed=0, dtype=F64))
    np.testing.assert_allclose(bag(shuffled), bag(tokens), rtol=1e-12)
    assert not np.allclose(rope(shuffled), rope(tokens))


def test_rope_attention_is_unchanged_when_every_position_shifts_by_the_same_amount(rng):
    """Positions 7..11 instead of 0..4 (after 7 cached positions that the mask hides from
    the new queries): a rope layer sees only distances, so its output is the same."""
    rope = RotaryPositionalEmbedding(16, 4, dtype=F64)
    mha = randomize(MultiHeadAttention(8, 2, rotary=rope, seed=0, dtype=F64))
    x = rng.standard_normal((1, 5, 8))
    at_zero = mha(x, is_causal=True)
    cache = tfscratch.nn.KVCache(16)
    mha(np.zeros((1, 7, 8)), kv_cache=cache, is_causal=True)
    blocked = np.zeros((5, 12), dtype=bool)
    blocked[:, :7] = True
    at_seven = mha(x, kv_cache=cache, mask=blocked, is_causal=True)
    np.testing.assert_allclose(at_seven, at_zero, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pieces", [(4, 1, 1, 1, 1, 1), (1, 3, 2, 3), (9,)])
def test_cached_logits_equal_uncached_with_rope(rng, pieces):
    model = randomize(DecoderLM(11, 16, 4, 2, max_len=16, pos="rope", seed=0, dtype=F64), std=0.3)
    tokens = rng.integers(0, 11, (2, sum(pieces)))
    full = model(tokens)
    cache, start, outputs = model.new_kv_cache(), 0, []
    for size in pieces:
        outputs.append(model(tokens[:, start : start + size], kv_cache=cache))
        start += size
    assert cache[0].length == sum(pieces)
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, rtol=1e-10, atol=1e-12)


def test_each_cached_step_is_rotated_at_the_cache_length(rng, monkeypatch):
    model = DecoderLM(11, 16, 4, 2, max_len=16, pos="rope", seed=0)
    offsets = []
    rotate = model.rotary.rotate

    def spy(x, offset=0):
        offsets.append((offset, x.shape[-2]))
        return rotate(x, offset)

    monkeypatch.setattr(model.rotary, "rotate", spy)
    cache = model.new_kv_cache()
    model(rng.integers(0, 11, (1, 3)), kv_cache=cache)
    for _ in range(3):
        model(rng.integers(0, 11, (1, 1)), kv_cache=cache)
    per_call = [(0, 3), (3, 1), (4, 1), (5, 1)]  # q and k, in each of the 2 layers
    assert offsets == [call for call in per_call for _ in range(2 * 2)]


def test_an_off_by_one_in_the_rotary_offset_breaks_cached_equals_uncached(rng, monkeypatch):
    """The cached == uncached test is sensitive: rotating cached steps one position too far
    (a plausible bug) changes the logits."""
    model = randomize(DecoderLM(11, 16, 4, 2, max_len=16, pos="rope", seed=0, dtype=F64), std=0.3)
    tokens = rng.integers(0, 11, (1, 6))
    full = model(tokens)
    rotate = model.rotary.rotate
    monkeypatch.setattr(
        model.rotary, "rotate", lambda x, offset=0: rotate(x, offset + 1 if offset else 0)
    )
    cache = model.new_kv_cache()
    model(tokens[:, :5], kv_cache=cache)
    step = model(tokens[:, 5:], kv_cache=cache)
    assert np.abs(step[0, 0] - full[0, 5]).max() > 1e-3


def test_greedy_generation_with_rope_is_the_same_with_and_without_cache():
    model = randomize(DecoderLM(13, 16, 4, 2, max_len=32, pos="rope", seed=0), seed=3, std=0.3)
    prompt = [1, 2, 3]
    cached = tfscratch.generate(model, prompt, 20, temperature=0)
    uncached = tfscratch.generate(model, prompt, 20, temperature=0, use_kv_cache=False)
    assert cached == uncached
    assert len(set(cached)) > 2  # a varied continuation, not one token repeated
    sampled = [tfscratch.generate(model, prompt, 20, seed=5, use_kv_cache=c) for c in (True, False)]
    assert sampled[0] == sampled[1]


def test_generation_with_rope_stops_at_max_len():
    model = DecoderLM(13, 16, 4, 1, max_len=8, pos="rope", seed=0)
    assert len(tfscratch.generate(model, [1, 2, 3], 5, temperature=0)) == 5
    with pytest.raises(ValueError, match="max_len=8"):
        tfscratch.generate(model, [1, 2, 3], 6)


# --- save and load ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: DecoderLM(11, 16, 4, 2, max_len=16, pos="rope", seed=0),
        lambda: Seq2SeqTransformer(9, 7, 8, 2, 1, 1, max_len=8, pos="rope", seed=0),
        lambda: EncoderClassifier(6, 3, 8, 2, 1, max_len=8, pooling="cls", pos="rope", seed=0),
    ],
)
def test_save_and_load_keep_pos_rope(tmp_path, rng, make):
    model = randomize(make(), std=0.3)
    loaded = tfscratch.load(tfscratch.save(model, tmp_path / "rope.npz"))
    assert loaded.config == model.config and loaded.config["pos"] == "rope"
    assert loaded.rotary is not None
    if isinstance(model, Seq2SeqTransformer):
        src, tgt = rng.integers(0, 7, (2, 5)), rng.integers(0, 7, (2, 4))
        np.testing.assert_array_equal(loaded(src, tgt), model(src, tgt))
    else:
        tokens = rng.integers(0, 6, (2, 7))
        np.testing.assert_array_equal(loaded(tokens), model(tokens))


def _resave_with_config(saved, path, **changes):
    with np.load(saved) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(str(arrays["__tfscratch__"]))
    meta["config"].update(changes)
    arrays["__tfscratch__"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)
    return path


def test_learned_weights_under_a_rope_config_say_what_does_not_fit(tmp_path):
    saved = tfscratch.save(DecoderLM(11, 16, 4, 1, max_len=16, seed=0), tmp_path / "learned.npz")
    path = _resave_with_config(saved, tmp_path / "mixed.npz", pos="rope")
    with pytest.raises(ValueError) as error:
        tfscratch.load(path)
    message = str(error.value)
    assert "unexpected entries: ['pos_emb.weight']" in message
    assert "config says pos='rope'" in message and "from a pos='learned' model" in message


def test_rope_weights_under_a_learned_config_say_what_does_not_fit(tmp_path):
    saved = tfscratch.save(
        Seq2SeqTransformer(9, 7, 8, 2, 1, 1, max_len=8, pos="rope", seed=0), tmp_path / "r.npz"
    )
    path = _resave_with_config(saved, tmp_path / "mixed.npz", pos="learned")
    with pytest.raises(ValueError) as error:
        tfscratch.load(path)
    message = str(error.value)
    assert "missing entries: ['src_pos.weight', 'tgt_pos.weight']" in message
    assert "config says pos='learned'" in message and "pos='rope'" in message


def test_a_rope_config_with_odd_heads_is_reported_by_load(tmp_path):
    saved = tfscratch.save(
        DecoderLM(11, 12, 2, 1, max_len=8, pos="rope", seed=0), tmp_path / "a.npz"
    )
    path = _resave_with_config(saved, tmp_path / "odd.npz", n_heads=4)  # d_head 3
    with pytest.raises(ValueError, match=expect("DecoderLM", "d_head", "even")):
        tfscratch.load(path)


# --- bad input -------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [DecoderLM, EncoderClassifier])
def test_rope_needs_an_even_head_width(cls):
    args = (11, 12, 4, 1) if cls is DecoderLM else (11, 3, 12, 4, 1)
    with pytest.raises(ValueError, match=expect("d_model=12", "n_heads=4", "d_head=3")):
        cls(*args, pos="rope")
    cls(*args, pos="learned")  # odd heads are fine when nothing is rotated


def test_seq2seq_rope_needs_an_even_head_width():
    with pytest.raises(ValueError, match=expect("pos='rope'", "d_head", "even")):
        Seq2SeqTransformer(9, 7, 10, 2, 1, 1, pos="rope")


def test_an_unknown_pos_lists_rope_among_the_choices():
    with pytest.raises(ValueError, match=expect("pos='rotary'", "'rope'")) as error:
        DecoderLM(11, 8, 2, 1, pos="rotary")
    assert "'rope'" in str(error.value)


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"d_head": 5}, ValueError, "d_head=5"),
        ({"d_head": 0}, ValueError, "d_head=0"),
        ({"max_len": 2.5}, TypeError, "max_len=2.5"),
        ({"base": 1.0}, ValueError, "base=1.0"),
        ({"base": "big"}, TypeError, "base='big'"),
    ],
)
def test_rotary_constructor_rejects_bad_arguments(kwargs, error, pattern):
    arguments = {"max_len": 8, "d_head": 4} | kwargs
    with pytest.raises(error, match=re.escape(pattern)):
        RotaryPositionalEmbedding(**arguments)


def test_rotary_forward_rejects_positions_past_max_len_and_wrong_widths(rng):
    rope = RotaryPositionalEmbedding(8, 4)
    x = rng.standard_normal((1, 3, 4)).astype(np.float32)
    rope(x, offset=5)
    with pytest.raises(ValueError, match=expect("3", "6 cached positions", "max_len=8")):
        rope(x, offset=6)
    with pytest.raises(ValueError, match=re.escape("expected 4")):
        rope(rng.standard_normal((1, 3, 6)))
    with pytest.raises(ValueError, match="offset=-1"):
        rope(x, offset=-1)


def test_attention_rejects_a_rotary_of_the_wrong_width():
    with pytest.raises(ValueError, match=expect("rotary", "d_head=4", "2")):
        MultiHeadAttention(8, 4, rotary=RotaryPositionalEmbedding(8, 4))
    with pytest.raises(TypeError, match=expect("rotary", "RotaryPositionalEmbedding")):
        MultiHeadAttention(8, 2, rotary="rope")
