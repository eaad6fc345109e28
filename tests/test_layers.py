import numpy as np
import pytest

from tfscratch import gradcheck, nn

from .conftest import GRAD_TOL, expect

F64 = np.float64


@pytest.mark.parametrize(
    "module",
    [
        nn.Linear(5, 3, seed=0, dtype=F64),
        nn.Linear(5, 3, bias=False, seed=0, dtype=F64),
        nn.LayerNorm(5, dtype=F64),
        nn.GELU("tanh"),
        nn.GELU("none"),
        nn.FeedForward(5, 12, "gelu", seed=0, dtype=F64),
        nn.FeedForward(5, 12, "relu", seed=0, dtype=F64),
    ],
    ids=["linear", "linear-nobias", "layernorm", "gelu-tanh", "gelu-exact", "ffn-gelu", "ffn-relu"],
)
def test_module_backward_matches_finite_differences(rng, module):
    x = rng.standard_normal((2, 4, 5))
    if isinstance(module, nn.LayerNorm):  # make gamma/beta non-trivial
        module.gamma.data[:] = rng.standard_normal(5)
        module.beta.data[:] = rng.standard_normal(5)
    assert gradcheck(module, x) < GRAD_TOL


def test_embedding_backward_accumulates_repeated_tokens(rng):
    emb = nn.Embedding(6, 4, seed=0, dtype=F64)
    ids = np.array([[1, 1, 3], [5, 1, 0]])
    assert gradcheck(emb, ids) < GRAD_TOL
    emb.zero_grad()
    emb(ids)
    emb.backward(np.ones((2, 3, 4)))
    np.testing.assert_array_equal(emb.weight.grad[:, 0], [1, 3, 0, 1, 0, 1])


def test_backward_accumulates_into_grad():
    layer = nn.Linear(3, 2, seed=0, dtype=F64)
    x = np.ones((1, 3))
    layer(x)
    layer.backward(np.ones((1, 2)))
    once = layer.weight.grad.copy()
    layer(x)
    layer.backward(np.ones((1, 2)))
    np.testing.assert_allclose(layer.weight.grad, 2 * once)


def test_linear_stores_weight_in_by_out_and_computes_x_at_w():
    layer = nn.Linear(3, 2, seed=0)
    assert layer.weight.shape == (3, 2) and layer.bias.shape == (2,)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(layer(x), x @ layer.weight.data + layer.bias.data, rtol=1e-6)


def test_float32_in_float32_out(rng):
    ffn = nn.FeedForward(8, 16, seed=0)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    y = ffn(x)
    assert y.dtype == np.float32
    assert ffn.backward(np.ones_like(y)).dtype == np.float32


def test_dropout_is_identity_in_eval(rng):
    drop = nn.Dropout(0.5, seed=0).eval()
    x = rng.standard_normal((10, 10))
    assert drop(x) is x


def test_dropout_keep_rate_and_scaling_in_train():
    drop = nn.Dropout(0.25, seed=0)
    y = drop(np.ones((400, 500), dtype=np.float32))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.005  # 200,000 draws: std of the rate ~0.001
    np.testing.assert_allclose(np.unique(y[kept]), 1 / 0.75, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.01  # inverted dropout keeps the expectation


def test_dropout_backward_uses_the_same_mask():
    drop = nn.Dropout(0.5, seed=3)
    y = drop(np.ones((4, 4)))
    np.testing.assert_array_equal(drop.backward(np.ones((4, 4))), y)


def test_dropout_is_repeatable_for_a_seed():
    a = nn.Dropout(0.3, seed=7)(np.ones((5, 5)))
    b = nn.Dropout(0.3, seed=7)(np.ones((5, 5)))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_dropout_rejects_p_outside_unit_interval(p):
    with pytest.raises(ValueError, match=f"p={p}"):
        nn.Dropout(p)


@pytest.mark.parametrize(
    "pos_class", [nn.SinusoidalPositionalEncoding, nn.LearnedPositionalEmbedding]
)
def test_positional_encoding_backward_matches_finite_differences(rng, pos_class):
    pe = pos_class(10, 6, dtype=F64)
    x = rng.standard_normal((2, 4, 6))
    assert gradcheck(pe, x, kwargs={"offset": 3}) < GRAD_TOL


@pytest.mark.parametrize(
    "pos_class", [nn.SinusoidalPositionalEncoding, nn.LearnedPositionalEmbedding]
)
def test_positional_offset_adds_the_rows_at_that_offset(pos_class):
    pe = pos_class(10, 6)
    zeros = np.zeros((1, 3, 6), dtype=np.float32)
    full = pe(np.zeros((1, 10, 6), dtype=np.float32))
    np.testing.assert_array_equal(pe(zeros, offset=4), full[:, 4:7])


def test_sinusoidal_table_follows_the_paper():
    pe = nn.SinusoidalPositionalEncoding(50, 8, dtype=F64).table
    pos, i = 7, 2
    assert pe[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / 8)))
    assert pe[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / 8)))


def test_positional_encoding_rejects_sequence_past_max_len():
    pe = nn.SinusoidalPositionalEncoding(8, 4)
    with pytest.raises(ValueError, match=expect("5", "offset=4", "max_len=8")):
        pe(np.zeros((1, 5, 4), dtype=np.float32), offset=4)


def test_named_parameters_use_dotted_paths():
    ffn = nn.FeedForward(4, 8, seed=0)
    assert list(ffn.named_parameters()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert ffn.num_parameters() == 4 * 8 + 8 + 8 * 4 + 4


def test_load_state_dict_reports_missing_unexpected_and_misshaped():
    ffn = nn.FeedForward(4, 8, seed=0)
    state = ffn.state_dict()
    del state["fc1.bias"]
    state["fc3.weight"] = np.zeros((2, 2))
    state["fc2.weight"] = np.zeros((3, 3))
    with pytest.raises(ValueError) as error:
        ffn.load_state_dict(state)
    message = str(error.value)
    facts = ["missing", "fc1.bias", "unexpected", "fc3.weight", "fc2.weight", "(3, 3)", "(8, 4)"]
    assert all(fact in message for fact in facts), message


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (np.zeros((2, 4), dtype=np.int64), TypeError, expect("x", "float", "int64")),
        (np.zeros((2, 3), dtype=np.float32), ValueError, expect("x", "3", "4")),
        ([1.0, 2.0, 3.0, 4.0], TypeError, expect("x", "list")),
    ],
)
def test_linear_rejects_bad_activations(bad, error, message):
    with pytest.raises(error, match=message):
        nn.Linear(4, 2, seed=0)(bad)


@pytest.mark.parametrize(
    "ids, error, message",
    [
        (np.array([[0, 7]]), ValueError, expect("ids", "7", "[0, 1]", "[0, 6)")),
        (np.array([[-1, 2]]), ValueError, expect("ids", "-1")),
        (np.array([[0.0, 2.0]]), TypeError, expect("ids", "integer", "float64")),
    ],
)
def test_embedding_rejects_bad_ids(ids, error, message):
    with pytest.raises(error, match=message):
        nn.Embedding(6, 4, seed=0)(ids)
