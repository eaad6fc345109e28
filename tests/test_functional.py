import numpy as np
import pytest

from tfscratch import functional as F
from tfscratch import gradcheck

from .conftest import GRAD_TOL, expect


def test_softmax_rows_sum_to_one_and_survive_huge_logits():
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]])
    probs = F.softmax(x)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0)
    np.testing.assert_allclose(probs[0], F.softmax(np.array([0.0, 1.0, 2.0])))


def test_softmax_of_fully_blocked_row_is_zero_not_nan():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    probs = F.softmax(x)
    np.testing.assert_array_equal(probs, [[0.0, 0.0], [1.0, 0.0]])


def test_log_softmax_equals_log_of_softmax(rng):
    x = rng.standard_normal((4, 7)) * 10
    np.testing.assert_allclose(F.log_softmax(x), np.log(F.softmax(x)), atol=1e-12)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_backward_matches_finite_differences(rng, name):
    x = rng.standard_normal((3, 5))
    forward = getattr(F, name)
    out = forward(x)
    backward = {"softmax": F.softmax_backward, "log_softmax": F.log_softmax_backward}[name]
    assert gradcheck(forward, x, backward=lambda g: backward(g, out), max_coords=None) < GRAD_TOL


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_backward_matches_finite_differences(rng, approximate):
    x = rng.standard_normal((4, 6)) * 3
    assert (
        gradcheck(
            lambda v: F.gelu(v, approximate),
            x,
            backward=lambda g: F.gelu_backward(g, x, approximate),
            max_coords=None,
        )
        < GRAD_TOL
    )


def test_gelu_tanh_is_close_to_exact_and_keeps_float32():
    x = np.linspace(-5, 5, 101).astype(np.float32)
    assert F.gelu(x).dtype == np.float32
    assert F.gelu(x, "none").dtype == np.float32
    assert np.max(np.abs(F.gelu(x, "tanh") - F.gelu(x, "none"))) < 1e-3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_gelu_is_the_textbook_formula_and_exact_in_its_limits(dtype):
    # The package computes (1 + tanh u) / 2 as a sigmoid of 2u; it must be the same function,
    # and far from 0 it must give x and 0 (slopes 1 and 0) with no overflow warning or NaN.
    x = np.linspace(-6, 6, 121).astype(dtype)
    u = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    textbook = 0.5 * x * (1 + np.tanh(u))
    textbook_slope = 0.5 * (1 + np.tanh(u)) + 0.5 * x * (1 - np.tanh(u) ** 2) * np.sqrt(
        2 / np.pi
    ) * (1 + 3 * 0.044715 * x**2)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(F.gelu(x), textbook, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(
        F.gelu_backward(np.ones_like(x), x), textbook_slope, rtol=rtol, atol=rtol
    )
    far = np.array([-1e4, -100.0, 100.0, 1e4], dtype=dtype)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # as warnings would show
        assert np.array_equal(F.gelu(far), [0.0, 0.0, 100.0, 1e4])
        assert np.array_equal(F.gelu_backward(np.ones_like(far), far), [0.0, 0.0, 1.0, 1.0])


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate='fast'"):
        F.gelu(np.zeros(3), approximate="fast")


def test_relu_backward_matches_finite_differences(rng):
    x = rng.standard_normal((5, 5)) + 0.05  # keep away from the kink
    x[np.abs(x) < 1e-3] = 0.5
    assert (
        gradcheck(F.relu, x, backward=lambda g: F.relu_backward(g, x), max_coords=None) < GRAD_TOL
    )


def test_layer_norm_output_has_zero_mean_unit_variance(rng):
    x = rng.standard_normal((4, 16)) * 5 + 3
    y = F.layer_norm(x, np.ones(16), np.zeros(16), eps=0.0)
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, atol=1e-12)


def test_layer_norm_backward_matches_finite_differences(rng):
    x = rng.standard_normal((2, 3, 8))
    gamma, beta = rng.standard_normal(8), rng.standard_normal(8)
    _, x_hat, inv_std = F.layer_norm_forward(x, gamma, beta)

    def backward(g):
        return F.layer_norm_backward(g, x_hat, inv_std, gamma)[0]

    assert (
        gradcheck(lambda v: F.layer_norm(v, gamma, beta), x, backward=backward, max_coords=None)
        < GRAD_TOL
    )


def test_causal_mask_hides_future_tokens():
    mask = F.causal_mask(4)
    expected = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(mask, expected)


def test_causal_mask_with_offset_lets_new_queries_see_the_cache():
    mask = F.causal_mask(2, offset=3)  # queries at positions 3 and 4 over keys 0..4
    np.testing.assert_array_equal(mask, [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])


def test_attention_backward_matches_finite_differences(rng):
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    mask = F.causal_mask(5)

    def forward(q_, k_, v_):
        return F.scaled_dot_product_attention(q_, k_, v_, mask)[0]

    def backward(g):
        weights = F.scaled_dot_product_attention(q, k, v, mask)[1]
        return F.scaled_dot_product_attention_backward(g, q, k, v, weights)

    assert gradcheck(forward, q, k, v, backward=backward) < GRAD_TOL


def test_attention_fully_blocked_query_gives_zero_output(rng):
    q, k, v = (rng.standard_normal((1, 1, 3, 4)) for _ in range(3))
    mask = np.zeros((3, 3), dtype=bool)
    mask[1] = True
    out, weights = F.scaled_dot_product_attention(q, k, v, mask)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0, 0, 1], 0.0)
    np.testing.assert_array_equal(weights[0, 0, 1], 0.0)


def test_cross_entropy_matches_hand_computation():
    logits = np.array([[2.0, 1.0, 0.1]])
    expected = -np.log(np.exp(2.0) / np.exp([2.0, 1.0, 0.1]).sum())
    assert F.cross_entropy(logits, np.array([0])) == pytest.approx(expected)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_backward_matches_finite_differences(rng, smoothing):
    logits = rng.standard_normal((3, 4, 6))
    targets = rng.integers(0, 6, (3, 4))
    targets[0, 1] = -100

    def forward(z):
        return np.array(F.cross_entropy(z, targets, -100, smoothing))

    def backward(g):
        return F.cross_entropy_backward(logits, targets, -100, smoothing) * g

    assert gradcheck(forward, logits, backward=backward, max_coords=None) < GRAD_TOL


def test_cross_entropy_label_smoothing_matches_pytorch_definition(rng):
    logits = rng.standard_normal((5, 4))
    targets = rng.integers(0, 4, 5)
    log_probs = F.log_softmax(logits)
    q = np.full((5, 4), 0.2 / 4)
    q[np.arange(5), targets] += 0.8
    expected = -(q * log_probs).sum(axis=-1).mean()
    assert F.cross_entropy(logits, targets, label_smoothing=0.2) == pytest.approx(expected)


def test_cross_entropy_ignores_ignore_index_and_is_zero_when_all_ignored(rng):
    logits = rng.standard_normal((4, 3))
    targets = np.array([0, -1, 2, -1])
    kept = F.cross_entropy(logits[[0, 2]], targets[[0, 2]])
    assert F.cross_entropy(logits, targets, ignore_index=-1) == pytest.approx(kept)
    all_ignored = np.full(4, -1)
    assert F.cross_entropy(logits, all_ignored, ignore_index=-1) == 0.0
    assert not F.cross_entropy_backward(logits, all_ignored, ignore_index=-1).any()


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.array([0, 3]), expect("targets", "3", "[0, 3)")),
        (np.array([0, -2]), expect("targets", "-2")),
        (np.array([0.0, 1.0]), expect("targets", "integer", "float64")),
        (np.array([0, 1, 2]), expect("targets", "(3,)", "(2, 3)")),
    ],
)
def test_cross_entropy_rejects_bad_targets(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        F.cross_entropy(np.zeros((2, 3)), bad)
