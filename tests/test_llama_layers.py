"""The two Llama building blocks of notebook 14: ``nn.RMSNorm`` and the gated feed-forward
network ``nn.FeedForward(..., activation="swiglu")`` (with its ``nn.SiLU`` gate).

Each backward is checked in float64 against central finite differences, each forward
against a plain-NumPy reference written here from the formula, and the GELU network is
shown unchanged by the new option.
"""

import numpy as np
import pytest

from tfscratch import gradcheck, nn

from .conftest import GRAD_TOL, expect, randomize

F64 = np.float64


# --- plain-NumPy references, written from the formulas -----------------------------------
def reference_rms_norm(x, weight, eps=1e-6):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * weight


def reference_silu(a):
    return a / (1.0 + np.exp(-a))


def reference_swiglu(x, w_gate, b_gate, w_up, b_up, w_down, b_down):
    return (reference_silu(x @ w_gate + b_gate) * (x @ w_up + b_up)) @ w_down + b_down


# --- RMSNorm ------------------------------------------------------------------------------
def test_rms_norm_forward_matches_the_formula(rng):
    norm = nn.RMSNorm(6, dtype=F64)
    norm.weight.data[:] = rng.standard_normal(6)
    x = rng.standard_normal((3, 4, 6)) * 3.0
    np.testing.assert_allclose(norm(x), reference_rms_norm(x, norm.weight.data), rtol=1e-13)


def test_rms_norm_output_has_unit_root_mean_square_with_unit_weight(rng):
    x = rng.standard_normal((5, 8)) * 10.0
    y = nn.RMSNorm(8, eps=1e-12, dtype=F64)(x)
    np.testing.assert_allclose(np.sqrt(np.mean(y**2, axis=-1)), 1.0, rtol=1e-10)


def test_rms_norm_default_eps_is_llamas():
    assert nn.RMSNorm(4).eps == 1e-6


@pytest.mark.parametrize("shape", [(7, 5), (2, 4, 5), (2, 3, 2, 5)])
def test_rms_norm_backward_matches_finite_differences(rng, shape):
    norm = nn.RMSNorm(5, dtype=F64)
    norm.weight.data[:] = rng.standard_normal(5)
    x = rng.standard_normal(shape)
    assert gradcheck(norm, x, max_coords=None) < GRAD_TOL


def test_rms_norm_backward_accumulates_the_weight_gradient(rng):
    norm = nn.RMSNorm(4, dtype=F64)
    x, dy = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    norm(x)
    norm.backward(dy)
    once = norm.weight.grad.copy()
    norm(x)
    norm.backward(dy)
    np.testing.assert_allclose(norm.weight.grad, 2 * once)


def test_rms_norm_parameters_and_dtypes():
    norm = nn.RMSNorm(4)
    assert list(norm.named_parameters()) == ["weight"]
    np.testing.assert_array_equal(norm.weight.data, np.ones(4, dtype=np.float32))
    x = np.ones((2, 4), dtype=np.float32)
    y = norm(x)
    assert y.dtype == np.float32 and norm.backward(np.ones_like(y)).dtype == np.float32


def test_rms_norm_backward_before_forward_raises():
    with pytest.raises(RuntimeError, match="before any forward"):
        nn.RMSNorm(4).backward(np.ones((1, 4)))


@pytest.mark.parametrize(
    "build, facts",
    [
        (lambda: nn.RMSNorm(0), ("dim=0",)),
        (lambda: nn.RMSNorm(4, eps=0.0), ("eps=0.0", "eps > 0")),
        (lambda: nn.RMSNorm(4, eps=-1e-6), ("eps=-1e-06", "eps > 0")),
    ],
)
def test_rms_norm_rejects_bad_arguments(build, facts):
    with pytest.raises(ValueError, match=expect(*facts)):
        build()


def test_rms_norm_rejects_input_of_the_wrong_width():
    with pytest.raises(ValueError, match=expect("x", "last dimension 3", "expected 4")):
        nn.RMSNorm(4)(np.ones((2, 3), dtype=np.float32))


def test_rms_norm_rejects_integer_input():
    with pytest.raises(TypeError, match=expect("x", "float")):
        nn.RMSNorm(4)(np.ones((2, 4), dtype=np.int64))


# --- SiLU and the SwiGLU network --------------------------------------------------------
def test_silu_forward_and_backward(rng):
    a = rng.standard_normal((3, 7)) * 4.0
    np.testing.assert_allclose(nn.SiLU()(a), reference_silu(a), rtol=1e-13, atol=1e-15)
    assert gradcheck(nn.SiLU(), a, max_coords=None) < GRAD_TOL


def test_silu_does_not_overflow_for_large_negative_inputs():
    with np.errstate(all="raise"):
        y = nn.SiLU()(np.array([-1000.0, 0.0, 1000.0]))
    np.testing.assert_array_equal(y, [-0.0, 0.0, 1000.0])


def swiglu(seed=0, bias=True, d_model=5, d_ff=7):
    return nn.FeedForward(d_model, d_ff, "swiglu", bias=bias, seed=seed, dtype=F64)


def test_swiglu_parameter_names_gate_up_down():
    ffn = swiglu(d_model=4, d_ff=6)
    assert list(ffn.named_parameters()) == [
        "fc1.weight", "fc1.bias", "gate.weight", "gate.bias", "fc2.weight", "fc2.bias",
    ]  # fmt: skip
    assert ffn.fc1.weight.shape == ffn.gate.weight.shape == (4, 6)  # up and gate: d -> d_ff
    assert ffn.fc2.weight.shape == (6, 4)  # down: d_ff -> d
    no_bias = swiglu(bias=False, d_model=4, d_ff=6)
    assert list(no_bias.named_parameters()) == ["fc1.weight", "gate.weight", "fc2.weight"]
    assert no_bias.num_parameters() == 3 * 4 * 6


@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_forward_matches_the_formula(rng, bias):
    ffn = randomize(swiglu(bias=bias), seed=3)
    x = rng.standard_normal((2, 3, 5))
    zero = np.zeros(7)
    expected = reference_swiglu(
        x,
        ffn.gate.weight.data, ffn.gate.bias.data if bias else zero,
        ffn.fc1.weight.data, ffn.fc1.bias.data if bias else zero,
        ffn.fc2.weight.data, ffn.fc2.bias.data if bias else np.zeros(5),
    )  # fmt: skip
    np.testing.assert_allclose(ffn(x), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_backward_matches_finite_differences(rng, bias):
    ffn = randomize(swiglu(bias=bias), seed=4)
    x = rng.standard_normal((2, 4, 5))
    assert gradcheck(ffn, x, max_coords=None) < GRAD_TOL


def test_swiglu_with_dropout_backward_uses_the_forward_mask(rng):
    ffn = randomize(nn.FeedForward(5, 7, "swiglu", dropout=0.3, seed=0, dtype=F64), seed=5)
    x = rng.standard_normal((2, 4, 5))
    # gradcheck re-runs the forward, which would draw new masks: compare against a fixed one
    ffn(x)
    mask = ffn.dropout._mask
    assert mask is not None and (mask == 0).any()
    gate = reference_silu(x @ ffn.gate.weight.data + ffn.gate.bias.data)
    up = x @ ffn.fc1.weight.data + ffn.fc1.bias.data
    dy = rng.standard_normal((2, 4, 5))
    dh = (dy @ ffn.fc2.weight.data.T) * mask
    expected_dx = (dh * gate) @ ffn.fc1.weight.data.T
    sigmoid = 1 / (1 + np.exp(-(x @ ffn.gate.weight.data + ffn.gate.bias.data)))
    a = x @ ffn.gate.weight.data + ffn.gate.bias.data
    expected_dx += (dh * up * sigmoid * (1 + a * (1 - sigmoid))) @ ffn.gate.weight.data.T
    np.testing.assert_allclose(ffn.backward(dy), expected_dx, rtol=1e-12, atol=1e-14)


def test_swiglu_float32_in_float32_out(rng):
    ffn = nn.FeedForward(8, 16, "swiglu", seed=0)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    y = ffn(x)
    assert y.dtype == np.float32 and ffn.backward(np.ones_like(y)).dtype == np.float32


def test_swiglu_backward_before_forward_raises():
    with pytest.raises(RuntimeError, match="before any forward"):
        nn.FeedForward(4, 6, "swiglu", seed=0).backward(np.ones((1, 4), dtype=np.float32))


def test_feed_forward_rejects_an_unknown_activation():
    with pytest.raises(ValueError, match=expect("activation='swish'", "swiglu", "gelu")):
        nn.FeedForward(4, 8, "swish")


# --- the default network is unchanged -----------------------------------------------------
def test_default_feed_forward_is_the_gelu_network_bit_for_bit(rng):
    """Same seed -> the same weights as before SwiGLU existed (fc1 draws, then fc2), and the
    forward is fc2(gelu(fc1(x))) exactly."""
    ffn = nn.FeedForward(6, 10, seed=11)
    assert list(ffn.named_parameters()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    draw = np.random.default_rng(11)
    bound1, bound2 = 1 / np.sqrt(6), 1 / np.sqrt(10)
    w1 = draw.uniform(-bound1, bound1, (6, 10)).astype(np.float32)
    b1 = draw.uniform(-bound1, bound1, (10,)).astype(np.float32)
    w2 = draw.uniform(-bound2, bound2, (10, 6)).astype(np.float32)
    b2 = draw.uniform(-bound2, bound2, (6,)).astype(np.float32)
    for name, expected in zip(ffn.named_parameters(), (w1, b1, w2, b2)):
        np.testing.assert_array_equal(ffn.named_parameters()[name].data, expected)
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    by_hand = nn.Linear(10, 6, seed=0)
    by_hand.weight.data, by_hand.bias.data = w2, b2
    gelu = nn.GELU()
    hidden = x.reshape(-1, 6) @ w1
    hidden += b1
    np.testing.assert_array_equal(ffn(x), by_hand(gelu(hidden.reshape(2, 3, 10))))
    assert isinstance(ffn.act, nn.GELU) and not hasattr(ffn, "gate")
