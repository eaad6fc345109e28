import numpy as np
import pytest

from tfscratch import gradcheck, nn

from .conftest import GRAD_TOL, expect

F64 = np.float64


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_encoder_block_backward_matches_finite_differences(rng, norm):
    block = nn.EncoderBlock(8, 2, 16, norm=norm, seed=0, dtype=F64)
    x = rng.standard_normal((2, 4, 8))
    padding = np.array([[False] * 4, [False, False, True, True]])
    assert gradcheck(block, x, kwargs={"key_padding_mask": padding}, max_coords=20) < GRAD_TOL


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_decoder_block_backward_matches_finite_differences(rng, norm):
    block = nn.DecoderBlock(8, 2, 16, norm=norm, seed=0, dtype=F64)
    assert gradcheck(block, rng.standard_normal((2, 5, 8)), max_coords=20) < GRAD_TOL


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_cross_attention_decoder_block_checks_x_and_memory(rng, norm):
    block = nn.DecoderBlock(8, 2, 16, norm=norm, cross_attention=True, seed=0, dtype=F64)
    x, memory = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8))
    padding = np.zeros((2, 5), dtype=bool)
    padding[1, 3:] = True
    worst, errors = gradcheck(
        block,
        x,
        memory,
        kwargs={"memory_key_padding_mask": padding},
        max_coords=20,
        return_errors=True,
    )
    assert {"input0", "input1"} <= set(errors)
    assert worst < GRAD_TOL


def test_decoder_block_parameter_names_follow_the_contract():
    def weighted(block):  # the submodules with parameters (not dropouts, not hook points)
        return [name for name, child in block.named_children() if child.parameters()]

    with_cross = nn.DecoderBlock(8, 2, 16, cross_attention=True, seed=0)
    assert weighted(with_cross) == ["ln1", "attn", "ln2", "cross_attn", "ln3", "ffn"]
    plain = nn.DecoderBlock(8, 2, 16, seed=0)
    assert weighted(plain) == ["ln1", "attn", "ln2", "ffn"]
    hooks = [name for name, child in plain.named_children() if isinstance(child, nn.HookPoint)]
    assert hooks == [
        "hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"
    ]  # fmt: skip


def test_pre_and_post_norm_differ_but_both_keep_shape(rng):
    x = rng.standard_normal((1, 4, 8))
    pre = nn.EncoderBlock(8, 2, seed=0, dtype=F64, norm="pre")(x)
    post = nn.EncoderBlock(8, 2, seed=0, dtype=F64, norm="post")(x)
    assert pre.shape == post.shape == x.shape
    assert not np.allclose(pre, post)
    np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-12)  # post-LN ends on a LayerNorm


def test_decoder_block_is_causal(rng):
    block = nn.DecoderBlock(8, 2, seed=0, dtype=F64)
    x = rng.standard_normal((1, 5, 8))
    before = block(x)
    x[0, 3] += 5.0
    np.testing.assert_array_equal(block(x)[0, :3], before[0, :3])


def test_decoder_block_memory_must_match_cross_attention(rng):
    with pytest.raises(ValueError, match=expect("memory", "required")):
        nn.DecoderBlock(8, 2, cross_attention=True, seed=0)(np.zeros((1, 2, 8), np.float32))
    with pytest.raises(ValueError, match=expect("memory", "no cross-attention")):
        nn.DecoderBlock(8, 2, seed=0)(
            np.zeros((1, 2, 8), np.float32), np.zeros((1, 2, 8), np.float32)
        )
