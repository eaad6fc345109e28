import numpy as np
import pytest

from tfscratch import functional as F
from tfscratch import gradcheck, nn

from .conftest import GRAD_TOL, expect

F64 = np.float64


def make_mha(**options):
    return nn.MultiHeadAttention(8, 2, seed=0, dtype=F64, **options)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "both"])
def test_self_attention_backward_matches_finite_differences(rng, mask_kind):
    mha = make_mha()
    x = rng.standard_normal((2, 5, 8))
    padding = np.zeros((2, 5), dtype=bool)
    padding[1, 3:] = True
    kwargs = {
        "none": {},
        "causal": {"mask": F.causal_mask(5)},
        "padding": {"key_padding_mask": padding},
        "both": {"mask": F.causal_mask(5), "key_padding_mask": padding},
    }[mask_kind]
    assert gradcheck(mha, x, kwargs=kwargs) < GRAD_TOL


def test_cross_attention_backward_checks_both_inputs(rng):
    mha = make_mha()
    x, context = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 6, 8))
    padding = np.zeros((2, 6), dtype=bool)
    padding[0, 4:] = True
    worst, errors = gradcheck(
        mha, x, context, kwargs={"key_padding_mask": padding}, return_errors=True
    )
    assert {"input0", "input1"} <= set(errors)
    assert worst < GRAD_TOL


def test_attention_dropout_backward_matches_finite_differences(rng):
    mha = make_mha(dropout=0.3)
    mha.attn_dropout._rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8))
    # a fixed dropout mask: reseed before every forward so finite differences see the same one

    def forward(x_):
        mha.attn_dropout._rng = np.random.default_rng(0)
        return mha.forward(x_)

    assert gradcheck(forward, x, backward=mha.backward, params=mha.named_parameters()) < GRAD_TOL


def test_multi_head_equals_per_head_loop(rng):
    mha = nn.MultiHeadAttention(8, 2, seed=0, dtype=F64)
    x = rng.standard_normal((2, 4, 8))
    out = mha(x, mask=F.causal_mask(4))
    heads = []
    for h in range(2):
        cols = slice(4 * h, 4 * h + 4)
        q = x @ mha.q_proj.weight.data[:, cols] + mha.q_proj.bias.data[cols]
        k = x @ mha.k_proj.weight.data[:, cols] + mha.k_proj.bias.data[cols]
        v = x @ mha.v_proj.weight.data[:, cols] + mha.v_proj.bias.data[cols]
        heads.append(F.scaled_dot_product_attention(q, k, v, F.causal_mask(4))[0])
    expected = np.concatenate(heads, axis=-1) @ mha.out_proj.weight.data + mha.out_proj.bias.data
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


def test_causal_attention_weights_are_zero_above_the_diagonal(rng):
    mha = make_mha()
    mha(rng.standard_normal((1, 5, 8)), is_causal=True)
    upper = np.triu(np.ones((5, 5), dtype=bool), k=1)
    assert (mha.attn_weights[..., upper] == 0).all()
    np.testing.assert_allclose(mha.attn_weights.sum(-1), 1.0)


def test_changing_a_future_token_never_changes_earlier_outputs(rng):
    mha = make_mha()
    x = rng.standard_normal((1, 6, 8))
    before = mha(x, is_causal=True)
    x2 = x.copy()
    x2[0, 4] += 10.0
    after = mha(x2, is_causal=True)
    np.testing.assert_array_equal(before[0, :4], after[0, :4])
    assert not np.allclose(before[0, 4:], after[0, 4:])


def test_padding_keys_get_zero_weight(rng):
    mha = make_mha()
    padding = np.array([[False, False, True, True]])
    mha(rng.standard_normal((1, 4, 8)), key_padding_mask=padding)
    assert (mha.attn_weights[..., 2:] == 0).all()


def test_fully_masked_row_gives_zero_head_output_not_nan(rng):
    mha = make_mha()
    mask = np.zeros((3, 3), dtype=bool)
    mask[0] = True
    out = mha(rng.standard_normal((1, 3, 8)), mask=mask)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(mha.attn_weights[0, :, 0], 0.0)
    np.testing.assert_allclose(out[0, 0], mha.out_proj.bias.data)  # zero head output
    grad = mha.backward(np.ones_like(out))
    assert np.isfinite(grad).all()


def test_kv_cache_step_by_step_equals_full_causal_forward(rng):
    mha = make_mha()
    x = rng.standard_normal((2, 6, 8))
    full = mha(x, is_causal=True)
    cache = nn.KVCache(max_len=8)
    first = mha(x[:, :3], kv_cache=cache, is_causal=True)
    steps = [mha(x[:, t : t + 1], kv_cache=cache, is_causal=True) for t in range(3, 6)]
    assert cache.length == 6
    np.testing.assert_allclose(np.concatenate([first, *steps], axis=1), full, atol=1e-12)


def test_kv_cache_refuses_to_grow_past_max_len(rng):
    mha = make_mha()
    cache = nn.KVCache(max_len=4)
    mha(rng.standard_normal((1, 3, 8)), kv_cache=cache, is_causal=True)
    with pytest.raises(ValueError, match=expect("3 cached positions", "max_len=4")):
        mha(rng.standard_normal((1, 2, 8)), kv_cache=cache, is_causal=True)


def test_d_model_must_divide_into_heads():
    with pytest.raises(ValueError, match=expect("d_model=30", "n_heads=4", "divisible")):
        nn.MultiHeadAttention(30, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mask": np.zeros((5, 5), dtype=bool)}, expect("mask", "(5, 5)", "(B, H, T_q, T_k)")),
        ({"mask": np.zeros((4, 4), dtype=np.int64)}, expect("mask", "boolean", "int64")),
        (
            {"key_padding_mask": np.zeros((2, 5), dtype=bool)},
            expect("key_padding_mask", "(1, 4)", "(2, 5)"),
        ),
    ],
)
def test_bad_masks_are_rejected_with_their_name(rng, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make_mha()(rng.standard_normal((1, 4, 8)), **kwargs)


def test_wrong_width_activation_is_rejected(rng):
    with pytest.raises(ValueError, match=expect("x", "6", "8")):
        make_mha()(rng.standard_normal((1, 4, 6)))


def test_split_and_merge_heads_are_inverse(rng):
    x = rng.standard_normal((2, 5, 12))
    split = nn.split_heads(x, 3)
    assert split.shape == (2, 3, 5, 4)
    np.testing.assert_array_equal(split[:, 1], x[:, :, 4:8])
    np.testing.assert_array_equal(nn.merge_heads(split), x)
