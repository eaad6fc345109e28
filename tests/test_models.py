import numpy as np
import pytest

import tfscratch
from tfscratch import DecoderLM, EncoderClassifier, Seq2SeqTransformer, gradcheck
from tfscratch import functional as F

from .conftest import GRAD_TOL, expect, randomize

F64 = np.float64


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
@pytest.mark.parametrize("tie_weights", [True, False])
def test_decoder_lm_backward_matches_finite_differences(rng, norm, pos, tie_weights):
    model = randomize(
        DecoderLM(
            11,
            8,
            2,
            2,
            d_ff=16,
            max_len=8,
            pos=pos,
            norm=norm,
            tie_weights=tie_weights,
            seed=0,
            dtype=F64,
        )
    )
    tokens = rng.integers(0, 11, (2, 6))
    assert gradcheck(model, tokens, max_coords=8) < GRAD_TOL


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_seq2seq_backward_matches_finite_differences(rng, norm, pos):
    # Post-norm with two decoder layers leaves the first cross-attention's query/key
    # gradients at ~1e-6, below what finite differences resolve (round-off, shrinking as
    # the step grows); one layer each keeps every gradient measurable.
    layers = 2 if norm == "pre" else 1
    model = randomize(
        Seq2SeqTransformer(
            9, 7, 8, 2, layers, layers, d_ff=16, max_len=8, pos=pos, norm=norm, seed=0, dtype=F64
        )
    )
    src, tgt = rng.integers(0, 9, (2, 5)), rng.integers(0, 7, (2, 4))
    src_pad = np.array([[False] * 5, [False, False, False, True, True]])
    tgt_pad = np.array([[False] * 4, [False, False, False, True]])
    kwargs = {"src_pad_mask": src_pad, "tgt_pad_mask": tgt_pad}
    assert gradcheck(model, src, tgt, kwargs=kwargs, max_coords=6) < GRAD_TOL


@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "none"])
def test_encoder_classifier_backward_matches_finite_differences(rng, pooling, pos):
    model = randomize(
        EncoderClassifier(
            5, 3, 8, 2, 2, d_ff=16, max_len=8, pooling=pooling, pos=pos, seed=0, dtype=F64
        )
    )
    tokens = rng.integers(0, 5, (3, 6))
    pad = np.zeros((3, 6), dtype=bool)
    pad[2, 4:] = True
    assert gradcheck(model, tokens, kwargs={"pad_mask": pad}, max_coords=8) < GRAD_TOL


def test_post_norm_classifier_backward_matches_finite_differences(rng):
    model = randomize(EncoderClassifier(5, 3, 8, 2, 1, max_len=8, norm="post", seed=0, dtype=F64))
    assert gradcheck(model, rng.integers(0, 5, (2, 6)), max_coords=8) < GRAD_TOL


def test_decoder_lm_changing_a_future_token_never_changes_earlier_logits(rng):
    model = DecoderLM(11, 16, 2, 2, max_len=16, seed=0)
    tokens = rng.integers(0, 11, (1, 10))
    before = model(tokens)
    tokens[0, 6] = (tokens[0, 6] + 1) % 11
    after = model(tokens)
    np.testing.assert_array_equal(before[0, :6], after[0, :6])
    assert not np.allclose(before[0, 6:], after[0, 6:])


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_cached_logits_equal_uncached_logits_at_every_position(rng, pos):
    model = DecoderLM(11, 16, 4, 2, max_len=16, pos=pos, seed=0, dtype=F64)
    tokens = rng.integers(0, 11, (2, 9))
    full = model(tokens)
    cache = model.new_kv_cache()
    pieces = [model(tokens[:, :4], kv_cache=cache)]
    pieces += [model(tokens[:, t : t + 1], kv_cache=cache) for t in range(4, 9)]
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=1e-10, atol=1e-12)


def test_cache_position_offset_matters(rng):
    """Feeding the step token at offset 0 (the classic off-by-one) gives different logits."""
    model = DecoderLM(11, 16, 2, 1, max_len=16, seed=0, dtype=F64)
    tokens = rng.integers(0, 11, (1, 5))
    full = model(tokens)
    cache = model.new_kv_cache()
    model(tokens[:, :4], kv_cache=cache)
    assert cache[0].length == 4
    step = model(tokens[:, 4:], kv_cache=cache)
    np.testing.assert_allclose(step[0, 0], full[0, 4], rtol=1e-10)
    no_offset = model(tokens[:, 4:])  # position 0 instead of 4
    assert not np.allclose(no_offset[0, 0], full[0, 4])


def test_weight_tying_shares_the_embedding():
    tied = DecoderLM(30, 16, 2, 1, max_len=8, seed=0)
    untied = DecoderLM(30, 16, 2, 1, max_len=8, tie_weights=False, seed=0)
    assert "lm_head.weight" not in tied.named_parameters()
    assert untied.num_parameters() - tied.num_parameters() == 30 * 16


def test_parameter_names_follow_the_contract():
    names = DecoderLM(10, 8, 2, 2, max_len=8, seed=0).named_parameters()
    for name in [
        "tok_emb.weight",
        "pos_emb.weight",
        "blocks.0.attn.q_proj.weight",
        "blocks.1.ffn.fc2.bias",
        "blocks.1.ln2.gamma",
        "ln_f.beta",
    ]:
        assert name in names
    seq2seq = Seq2SeqTransformer(5, 6, 8, 2, 1, 1, seed=0).named_parameters()
    assert "decoder_blocks.0.cross_attn.k_proj.weight" in seq2seq
    assert "decoder_blocks.0.ln3.gamma" in seq2seq


def test_same_seed_same_weights_different_seed_different_weights():
    a, b, c = (DecoderLM(10, 8, 2, 1, max_len=8, seed=s) for s in (1, 1, 2))
    for name, value in a.state_dict().items():
        np.testing.assert_array_equal(value, b.state_dict()[name])
    assert not np.array_equal(a.tok_emb.weight.data, c.tok_emb.weight.data)


def test_initial_loss_is_close_to_uniform(rng):
    model = DecoderLM(28, 32, 4, 2, max_len=16, seed=0)
    tokens = rng.integers(0, 28, (8, 16))
    targets = rng.integers(0, 28, (8, 16))
    assert abs(F.cross_entropy(model(tokens), targets) - np.log(28)) < 0.1


def test_config_rebuilds_an_identical_model():
    for model in (
        DecoderLM(10, 8, 2, 1, max_len=8, seed=3),
        Seq2SeqTransformer(5, 6, 8, 2, 1, 1, seed=3),
        EncoderClassifier(4, 3, 8, 2, 1, pooling="cls", seed=3),
    ):
        clone = type(model)(**model.config)
        for name, value in model.state_dict().items():
            np.testing.assert_array_equal(value, clone.state_dict()[name])


def test_float32_model_makes_float32_logits_and_grads(rng):
    model = DecoderLM(10, 8, 2, 1, max_len=8, seed=0)
    logits = model(rng.integers(0, 10, (2, 5)))
    assert logits.dtype == np.float32
    model.backward(np.ones_like(logits))
    assert all(p.grad.dtype == np.float32 for p in model.parameters())


def test_mean_pooling_ignores_padding(rng):
    model = EncoderClassifier(5, 3, 8, 2, 1, max_len=8, seed=0, dtype=F64)
    tokens = rng.integers(0, 5, (1, 4))
    short = model(tokens[:, :3])
    padded_tokens = tokens.copy()
    padded_tokens[0, 3] = 0
    pad = np.array([[False, False, False, True]])
    np.testing.assert_allclose(model(padded_tokens, pad_mask=pad), short, rtol=1e-10)


def test_seq2seq_pad_tokens_in_source_do_not_change_output(rng):
    model = Seq2SeqTransformer(9, 7, 8, 2, 1, 1, max_len=8, seed=0, dtype=F64)
    src, tgt = rng.integers(0, 9, (1, 3)), rng.integers(0, 7, (1, 4))
    plain = model(src, tgt)
    padded = np.concatenate([src, [[0, 0]]], axis=1)
    mask = np.array([[False, False, False, True, True]])
    np.testing.assert_allclose(model(padded, tgt, src_pad_mask=mask), plain, rtol=1e-10)


def test_top_level_api_names_exist():
    for name in [
        "DecoderLM",
        "Seq2SeqTransformer",
        "EncoderClassifier",
        "generate",
        "translate",
        "save",
        "load",
        "gradcheck",
    ]:
        assert hasattr(tfscratch, name)


# --- scale_embeddings (notebook 10) and attn_only (notebook 15) --------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda **o: tfscratch.DecoderLM(9, 8, 2, 2, max_len=8, attn_only=True, **o),
        lambda **o: tfscratch.DecoderLM(9, 8, 2, 1, max_len=8, scale_embeddings=True, **o),
        lambda **o: tfscratch.EncoderClassifier(
            9, 3, 8, 2, 1, max_len=8, pooling="cls", scale_embeddings=True, **o
        ),
    ],
    ids=["attn_only", "lm scaled", "classifier scaled"],
)
def test_attention_only_and_scaled_embedding_models_pass_gradcheck(make):
    model = randomize(make(seed=0, dtype=np.float64))
    tokens = np.random.default_rng(0).integers(0, 9, (2, 6))
    assert tfscratch.gradcheck(model, tokens, max_coords=12) < GRAD_TOL


def test_seq2seq_with_scaled_embeddings_passes_gradcheck():
    model = randomize(
        tfscratch.Seq2SeqTransformer(9, 7, 8, 2, 1, 1, max_len=8, scale_embeddings=True, seed=0,
                                     dtype=np.float64)
    )  # fmt: skip
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(0, 9, (2, 5)), rng.integers(0, 7, (2, 4))
    assert tfscratch.gradcheck(model, src, tgt, max_coords=12) < GRAD_TOL


def test_scaled_token_vectors_are_as_loud_as_the_positions():
    """N(0, 1/d) rows times sqrt(d): norms about sqrt(d), as a sinusoidal row's sqrt(d/2)."""
    d = 64
    scaled = tfscratch.EncoderClassifier(
        20, 3, d, 4, 1, pos="sinusoidal", scale_embeddings=True, seed=0
    )
    plain = tfscratch.EncoderClassifier(20, 3, d, 4, 1, pos="sinusoidal", seed=0)
    positions = np.linalg.norm(scaled.pos_emb.table[:16], axis=-1).mean()
    for model, low, high in [(scaled, positions / 2, positions * 2), (plain, 0, positions / 20)]:
        tokens = np.linalg.norm(
            model._embed(np.arange(20)[None]) - model.pos_emb.table[:20], axis=-1
        )
        assert low < tokens.mean() < high


def test_the_new_options_are_saved_and_default_to_the_old_models(tmp_path):
    model = tfscratch.DecoderLM(
        9, 8, 2, 2, max_len=8, attn_only=True, scale_embeddings=True, seed=0
    )
    tfscratch.save(model, tmp_path / "m.npz")
    loaded = tfscratch.load(tmp_path / "m.npz")
    assert loaded.config["attn_only"] and loaded.config["scale_embeddings"]
    tokens = np.arange(6)[None] % 9
    np.testing.assert_array_equal(loaded(tokens), model(tokens))
    default = tfscratch.DecoderLM(9, 8, 2, 2, max_len=8, seed=0)
    assert not default.config["attn_only"] and not default.config["scale_embeddings"]
    assert {"ffn", "ln2"} <= {name for name, _ in default.blocks[0].named_children()}


def test_gradcheck_refuses_a_float32_model_instead_of_reporting_a_large_error():
    model = tfscratch.DecoderLM(11, 8, 2, 1, max_len=8, seed=0)  # float32, the default
    with pytest.raises(
        TypeError, match=expect("float64 parameters", "float32", "dtype=np.float64")
    ):
        tfscratch.gradcheck(model, np.array([[1, 2, 3]]))
    model64 = tfscratch.DecoderLM(11, 8, 2, 1, max_len=8, seed=0, dtype=np.float64)
    assert tfscratch.gradcheck(model64, np.array([[1, 2, 3]])) < GRAD_TOL
