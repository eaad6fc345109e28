"""Tiled attention (notebook 13): the online softmax, forward and backward in tiles.

The reference is the package's plain attention, `F.scaled_dot_product_attention` and its
backward: the tiled version must give the same numbers to float precision for every tile
size (dividing T or not, larger than T, 1), with and without masks, and its backward must
pass the central-difference check on its own.
"""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

from tests.conftest import GRAD_TOL, expect
from tfscratch import functional as F
from tfscratch import gradcheck
from tfscratch.tiled_attention import (
    online_softmax,
    tile_grid,
    tiled_attention,
    tiled_attention_backward,
)

# float64 agrees to round-off; float32 to its own precision (sums in another order)
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-5}
TILES = [(1, 1), (3, 5), (4, 4), (5, 2), (16, 7), (64, 64)]  # 4 divides T=12; 5, 7 do not


def qkv(rng, shape, dtype=np.float64, T_k=None, d_v=None):
    B, H, T, d = shape
    T_k = T if T_k is None else T_k
    q = rng.standard_normal((B, H, T, d))
    k = rng.standard_normal((B, H, T_k, d))
    v = rng.standard_normal((B, H, T_k, d if d_v is None else d_v))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def plain(q, k, v, mask=None, causal=False):
    """The package's attention with the causal mask made explicit; (out, weights)."""
    if causal:
        T_q, T_k = q.shape[2], k.shape[2]
        causal_part = F.causal_mask(T_q, offset=T_k - T_q)
        mask = causal_part if mask is None else mask | causal_part
    return F.scaled_dot_product_attention(q, k, v, mask)


def assert_close(actual, expected, dtype):
    assert actual.dtype == expected.dtype == dtype
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


# --- the online softmax ---------------------------------------------------------------------
@pytest.mark.parametrize("tile", [1, 3, 4, 12, 50])
def test_online_softmax_equals_softmax_for_any_tile(rng, tile):
    x = 5.0 * rng.standard_normal((3, 4, 12))
    x[0, 0, 7] = 800.0  # a late, huge maximum: the earlier sums must be rescaled, not overflow
    np.testing.assert_allclose(online_softmax(x, tile), F.softmax(x), rtol=1e-12, atol=1e-300)


def test_online_softmax_gives_zeros_for_a_row_of_minus_infinity(rng):
    x = rng.standard_normal((3, 6))
    x[1] = -np.inf
    x[2, :4] = -np.inf  # the first tiles of this row are all blocked
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 or inf - inf on the way
        probs = online_softmax(x, 2)
    np.testing.assert_array_equal(probs[1], 0.0)
    np.testing.assert_allclose(probs, F.softmax(x), rtol=1e-12)


# --- forward ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiles", TILES)
def test_tiled_forward_equals_plain_attention(rng, dtype, causal, tiles):
    q, k, v = qkv(rng, (2, 3, 12, 8), dtype)
    out, logsumexp = tiled_attention(q, k, v, causal=causal, tile_q=tiles[0], tile_k=tiles[1])
    expected, _ = plain(q, k, v, causal=causal)
    assert_close(out, expected, dtype)
    assert logsumexp.shape == (2, 3, 12) and logsumexp.dtype == dtype


@pytest.mark.parametrize("causal", [False, True])
def test_logsumexp_is_the_log_of_each_rows_softmax_denominator(rng, causal):
    q, k, v = qkv(rng, (2, 2, 9, 4))
    _, logsumexp = tiled_attention(q, k, v, causal=causal, tile_q=4, tile_k=2)
    scores = q @ k.swapaxes(-1, -2) / 2.0  # sqrt(d) = 2
    if causal:
        scores[..., F.causal_mask(9)] = -np.inf
    expected = np.log(np.exp(scores).sum(axis=-1))
    np.testing.assert_allclose(logsumexp, expected, rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_a_single_position_attends_to_itself(rng, causal):
    q, k, v = qkv(rng, (2, 3, 1, 4))
    out, logsumexp = tiled_attention(q, k, v, causal=causal, tile_q=3, tile_k=3)
    np.testing.assert_allclose(out, v, rtol=1e-12)  # one key: weight 1
    np.testing.assert_allclose(logsumexp[..., 0], (q * k).sum(-1)[..., 0] / 2.0, rtol=1e-12)


@pytest.mark.parametrize("tiles", [(2, 3), (5, 5), (1, 8)])
def test_causal_queries_are_the_last_positions_when_fewer_than_keys(rng, tiles):
    """Queries of a KV-cached step: query i sits at position T_k - T_q + i."""
    q, k, v = qkv(rng, (1, 2, 3, 4), T_k=10, d_v=5)
    out, _ = tiled_attention(q, k, v, causal=True, tile_q=tiles[0], tile_k=tiles[1])
    expected, _ = F.scaled_dot_product_attention(q, k, v, F.causal_mask(3, offset=7))
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert out.shape == (1, 2, 3, 5)


@pytest.mark.parametrize("causal", [False, True])
def test_boolean_mask_is_applied_like_plain_attention(rng, causal):
    q, k, v = qkv(rng, (2, 3, 11, 4))
    key_padding = np.zeros((2, 1, 1, 11), dtype=bool)
    key_padding[1, ..., 8:] = True  # the second sequence has 3 padding keys
    random_mask = rng.random((11, 11)) < 0.3
    for mask in (key_padding, random_mask, key_padding | random_mask):
        out, _ = tiled_attention(q, k, v, mask, causal=causal, tile_q=4, tile_k=3)
        np.testing.assert_allclose(out, plain(q, k, v, mask, causal)[0], rtol=1e-12, atol=1e-12)


def test_fully_blocked_rows_give_zero_output_and_gradients_without_warnings(rng):
    q, k, v = qkv(rng, (1, 2, 6, 4))
    mask = np.zeros((6, 6), dtype=bool)
    mask[2] = True  # query 2 may see nothing
    mask[:, 0] = True  # so, with the causal mask, may query 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, logsumexp = tiled_attention(q, k, v, mask, causal=True, tile_q=2, tile_k=2)
        grads = tiled_attention_backward(
            np.ones_like(out), q, k, v, out, logsumexp, mask, causal=True, tile_q=2, tile_k=2
        )
    np.testing.assert_array_equal(out[..., [0, 2], :], 0.0)
    np.testing.assert_array_equal(logsumexp[..., [0, 2]], -np.inf)
    np.testing.assert_array_equal(grads[0][..., [0, 2], :], 0.0)  # dq of the blocked rows
    assert all(np.isfinite(grad).all() for grad in grads)
    expected_out, weights = plain(q, k, v, mask, causal=True)
    np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-15)
    expected_grads = F.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, weights)
    for grad, expected in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-14)


# --- backward ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiles", TILES)
def test_tiled_backward_equals_plain_backward(rng, dtype, causal, tiles):
    q, k, v = qkv(rng, (2, 3, 12, 8), dtype)
    options = dict(causal=causal, tile_q=tiles[0], tile_k=tiles[1])
    out, logsumexp = tiled_attention(q, k, v, **options)
    grad_output = rng.standard_normal(out.shape).astype(dtype)
    grads = tiled_attention_backward(grad_output, q, k, v, out, logsumexp, **options)
    _, weights = plain(q, k, v, causal=causal)
    expected = F.scaled_dot_product_attention_backward(grad_output, q, k, v, weights)
    for grad, reference in zip(grads, expected, strict=True):
        assert_close(grad, reference, dtype)


def test_backward_tiles_need_not_be_the_forwards(rng):
    q, k, v = qkv(rng, (1, 2, 10, 4), T_k=13, d_v=3)
    out, logsumexp = tiled_attention(q, k, v, causal=True, tile_q=4, tile_k=4)
    grad_output = rng.standard_normal(out.shape)
    a = tiled_attention_backward(grad_output, q, k, v, out, logsumexp, causal=True, tile_q=3)
    b = tiled_attention_backward(grad_output, q, k, v, out, logsumexp, causal=True, tile_k=5)
    for grad_a, grad_b in zip(a, b, strict=True):
        np.testing.assert_allclose(grad_a, grad_b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiles", [(3, 2), (4, 4), (1, 7)])
def test_tiled_backward_matches_finite_differences(rng, causal, tiles):
    q, k, v = qkv(rng, (2, 2, 7, 3), d_v=5)
    mask = rng.random((7, 7)) < 0.2
    options = dict(causal=causal, tile_q=tiles[0], tile_k=tiles[1])

    def forward(q_, k_, v_):
        return tiled_attention(q_, k_, v_, mask, **options)[0]

    def backward(grad_output):
        out, logsumexp = tiled_attention(q, k, v, mask, **options)
        return tiled_attention_backward(grad_output, q, k, v, out, logsumexp, mask, **options)

    assert gradcheck(forward, q, k, v, backward=backward, max_coords=None) < GRAD_TOL


# --- the tile schedule ------------------------------------------------------------------------
def test_causal_grid_skips_the_tiles_above_the_diagonal():
    assert tile_grid(8, 8, 4, 4, causal=True) == [
        ((0, 4), (0, 4)),
        ((4, 8), (0, 4)),
        ((4, 8), (4, 8)),
    ]
    # the last query tile (positions 8, 9) still needs key tile (8, 10)
    assert tile_grid(10, 10, 4, 4, causal=True)[-3:] == [
        ((8, 10), (0, 4)),
        ((8, 10), (4, 8)),
        ((8, 10), (8, 10)),
    ]
    n = 16
    assert len(tile_grid(64, 64, 4, 4, causal=True)) == n * (n + 1) // 2
    assert len(tile_grid(64, 64, 4, 4)) == n * n


def test_causal_grid_with_fewer_queries_than_keys_starts_at_the_offset():
    # 3 queries at positions 7, 8, 9 of 10 keys: query 7 needs no key of the tile (8, 10)
    assert tile_grid(3, 10, 1, 4, causal=True) == [
        ((0, 1), (0, 4)),
        ((0, 1), (4, 8)),
        ((1, 2), (0, 4)),
        ((1, 2), (4, 8)),
        ((1, 2), (8, 10)),
        ((2, 3), (0, 4)),
        ((2, 3), (4, 8)),
        ((2, 3), (8, 10)),
    ]


def test_the_forward_visits_exactly_the_tiles_of_the_grid(rng, monkeypatch):
    """Count the score tiles the forward computes by watching its key slices of k."""
    import tfscratch.tiled_attention as tiled

    expected = tile_grid(10, 10, 4, 3, causal=True)
    visited = []
    real_key_tiles = tiled.key_tiles

    def recording_key_tiles(q_start, q_stop, *args):
        spans = real_key_tiles(q_start, q_stop, *args)
        visited.extend(((q_start, q_stop), span) for span in spans)
        return spans

    monkeypatch.setattr(tiled, "key_tiles", recording_key_tiles)
    q, k, v = qkv(rng, (1, 1, 10, 2))
    tiled.tiled_attention(q, k, v, causal=True, tile_q=4, tile_k=3)
    assert visited == expected


def test_extra_memory_is_a_few_tiles_not_the_score_matrix(rng):
    B, H, T, d, tile = 1, 2, 512, 16, 32
    q, k, v = qkv(rng, (B, H, T, d))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out, logsumexp = tiled_attention(q, k, v, causal=True, tile_q=tile, tile_k=tile)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    extra = peak - out.nbytes - logsumexp.nbytes
    tile_bytes = B * H * tile * tile * q.itemsize
    score_bytes = B * H * T * T * q.itemsize
    assert extra < 8 * tile_bytes < score_bytes / 30


def test_same_inputs_give_identical_bytes(rng):
    q, k, v = qkv(rng, (2, 2, 9, 4), np.float32)
    first = tiled_attention(q, k, v, causal=True, tile_q=4, tile_k=3)
    second = tiled_attention(q, k, v, causal=True, tile_q=4, tile_k=3)
    for a, b in zip(first, second, strict=True):
        assert a.tobytes() == b.tobytes()


# --- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"tile_q": 0}, ValueError, "tile_q=0"),
        ({"tile_k": -3}, ValueError, "tile_k=-3"),
        ({"tile_k": 2.5}, TypeError, "tile_k=2.5"),
        ({"tile_q": True}, TypeError, "tile_q=True"),
    ],
)
def test_bad_tile_sizes_are_refused_by_name(rng, options, error, words):
    q, k, v = qkv(rng, (1, 1, 4, 2))
    with pytest.raises(error, match=words):
        tiled_attention(q, k, v, **options)
    with pytest.raises(error, match=words):
        tile_grid(4, 4, options.get("tile_q", 2), options.get("tile_k", 2))


def test_bad_shapes_are_refused_with_the_shapes_in_the_message(rng):
    q, k, v = qkv(rng, (1, 2, 4, 3))
    with pytest.raises(ValueError, match=expect("q", "4-D", "(4, 3)")):
        tiled_attention(q[0, 0], k, v)
    with pytest.raises(ValueError, match="k has d_head 2"):
        tiled_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match=r"must share \(B, H\)"):
        tiled_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(ValueError, match="v has 3 positions"):
        tiled_attention(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match="at least one position"):
        tiled_attention(q[:, :, :0], k, v)
    with pytest.raises(ValueError, match=expect("T_q=4", "T_k=2")):
        tiled_attention(q, k[:, :, :2], v[:, :, :2], causal=True)
    with pytest.raises(TypeError, match="q must be a float numpy array"):
        tiled_attention(q.astype(int), k, v)
    with pytest.raises(TypeError, match="share one dtype"):
        tiled_attention(q.astype(np.float32), k, v)


def test_bad_masks_are_refused(rng):
    q, k, v = qkv(rng, (1, 2, 4, 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        tiled_attention(q, k, v, np.zeros((3, 4), dtype=bool))
    with pytest.raises(TypeError, match="boolean array"):
        tiled_attention(q, k, v, np.zeros((4, 4)))


def test_backward_refuses_results_of_another_shape(rng):
    q, k, v = qkv(rng, (1, 2, 4, 3))
    out, logsumexp = tiled_attention(q, k, v)
    with pytest.raises(ValueError, match=expect("grad_output", "(1, 2, 3, 3)")):
        tiled_attention_backward(out[:, :, :3], q, k, v, out, logsumexp)
    with pytest.raises(ValueError, match=expect("logsumexp", "3-D", "(1, 2, 4, 1)")):
        tiled_attention_backward(out, q, k, v, out, logsumexp[..., None])


def test_online_softmax_refuses_bad_input():
    with pytest.raises(ValueError, match="tile=0"):
        online_softmax(np.zeros(3), 0)
    with pytest.raises(TypeError, match="float numpy array"):
        online_softmax([1.0, 2.0], 2)
    with pytest.raises(ValueError, match="expected"):
        online_softmax(np.zeros((2, 0)), 2)
