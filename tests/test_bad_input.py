"""Every bad input raises a ValueError/TypeError naming the argument, the value and what was
expected, instead of a NumPy traceback from deep inside (or, worse, a silent wrong answer).

Generation and checkpoint errors live in test_generate.py and test_checkpoint.py; the
module-level checks already in test_layers.py, test_attention.py and test_functional.py are
not repeated here.
"""

import numpy as np
import pytest

from tfscratch import DecoderLM, EncoderClassifier, Seq2SeqTransformer, nn
from tfscratch import functional as F

from .conftest import expect

F32 = np.float32


def lm():
    return DecoderLM(11, 16, 2, 2, max_len=8, seed=0)


def seq2seq():
    return Seq2SeqTransformer(9, 7, 8, 2, 1, 1, max_len=8, seed=0)


def classifier(**options):
    return EncoderClassifier(5, 3, 8, 2, 1, max_len=8, seed=0, **options)


def ids(*shape, high=5):
    return np.random.default_rng(0).integers(0, high, shape)


# --- model construction -----------------------------------------------------------------
@pytest.mark.parametrize(
    "build",
    [
        lambda: DecoderLM(11, 30, 4, 1),
        lambda: Seq2SeqTransformer(5, 5, 30, 4, 1, 1),
        lambda: EncoderClassifier(5, 2, 30, 4, 1),
        lambda: nn.EncoderBlock(30, 4),
        lambda: nn.DecoderBlock(30, 4, cross_attention=True),
    ],
)
def test_d_model_not_divisible_by_n_heads(build):
    with pytest.raises(ValueError, match=expect("d_model=30", "n_heads=4", "divisible")):
        build()


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, float("nan")])
@pytest.mark.parametrize(
    "build",
    [
        lambda p: DecoderLM(11, 8, 2, 1, dropout=p),
        lambda p: Seq2SeqTransformer(5, 5, 8, 2, 1, 1, dropout=p),
        lambda p: EncoderClassifier(5, 2, 8, 2, 1, dropout=p),
        lambda p: nn.MultiHeadAttention(8, 2, dropout=p),
        lambda p: nn.FeedForward(8, 16, dropout=p),
        lambda p: nn.EncoderBlock(8, 2, dropout=p),
    ],
)
def test_dropout_outside_zero_one_names_the_dropout_argument(build, dropout):
    with pytest.raises(ValueError, match=expect(f"dropout={dropout!r}", "[0, 1)")):
        build(dropout)


def test_dropout_p_nan_is_rejected():
    with pytest.raises(ValueError, match=expect("p=nan", "[0, 1)")):
        nn.Dropout(float("nan"))


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: DecoderLM(11, 8, 2, 1, dropout="0.1"), "dropout must be"),
        (lambda: nn.Dropout("0.1"), "p must be"),
    ],
)
def test_dropout_that_is_not_a_number_is_a_type_error(build, name):
    with pytest.raises(TypeError, match=expect(name, "'0.1'", "[0, 1)", "float")):
        build()


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"vocab_size": 0}, expect("vocab_size=0", "positive int")),
        ({"max_len": -4}, expect("max_len=-4", "positive int")),
        ({"pos": "rotary"}, expect("pos='rotary'", "learned", "sinusoidal")),
        ({"norm": "mid"}, expect("norm='mid'", "pre", "post")),
        ({"activation": "tanh"}, expect("activation='tanh'", "gelu", "relu")),
    ],
)
def test_bad_model_hyper_parameters(kwargs, pattern):
    arguments = {"vocab_size": 11, "d_model": 8, "n_heads": 2, "n_layers": 1, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        DecoderLM(**arguments)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"n_layers": 1.5}, expect("n_layers=1.5", "positive int", "float")),
        ({"d_model": "8"}, expect("d_model='8'", "positive int", "str")),
        ({"max_len": True}, expect("max_len=True", "positive int", "bool")),
    ],
)
def test_hyper_parameter_of_the_wrong_type_is_a_type_error(kwargs, pattern):
    """One policy everywhere: a wrong type is a TypeError, a wrong value a ValueError."""
    arguments = {"vocab_size": 11, "d_model": 8, "n_heads": 2, "n_layers": 1, **kwargs}
    with pytest.raises(TypeError, match=pattern):
        DecoderLM(**arguments)


# --- token ids --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tokens, error, pattern",
    [
        (np.array([[1, 11]]), ValueError, expect("tokens", "token id 11", "[0, 11)")),
        (np.array([[-1, 2]]), ValueError, expect("tokens", "token id -1", "[0, 11)")),
        (np.array([[1.0, 2.0]]), TypeError, expect("tokens", "dtype float64", "integer")),
        (np.array([[True, False]]), TypeError, expect("tokens", "dtype bool", "integer")),
        ([[1.5, 2.0]], TypeError, expect("tokens", "dtype float64", "integer")),
        ("hello", TypeError, expect("tokens", "'hello'", "integer array")),
    ],
)
def test_decoder_rejects_bad_token_ids(tokens, error, pattern):
    with pytest.raises(error, match=pattern):
        lm()(tokens)


def test_decoder_accepts_a_list_of_int_lists():
    np.testing.assert_array_equal(lm()([[1, 2, 3]]), lm()(np.array([[1, 2, 3]])))


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda m: m(np.array([[1, 9]]), ids(1, 3, high=7)), expect("src", "token id 9", "[0, 9)")),
        (
            lambda m: m(ids(1, 3, high=9), np.array([[0, 7]])),
            expect("tgt_in", "token id 7", "[0, 7)"),
        ),
        (
            lambda m: m(ids(1, 3, high=9), np.array([[0, -2]])),
            expect("tgt_in", "token id -2", "[0, 7)"),
        ),
    ],
)
def test_seq2seq_rejects_bad_token_ids_naming_src_or_tgt_in(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(seq2seq())


def test_classifier_rejects_out_of_range_token_ids():
    with pytest.raises(ValueError, match=expect("tokens", "token id 5", "[0, 5)")):
        classifier()(np.array([[0, 5, 1]]))


# --- sequence length --------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: lm()(ids(1, 9)), expect("tokens length 9", "max_len=8")),
        (lambda: seq2seq()(ids(1, 9), ids(1, 3)), expect("src length 9", "max_len=8")),
        (lambda: seq2seq()(ids(1, 3), ids(1, 9)), expect("tgt_in length 9", "max_len=8")),
        (lambda: classifier(pooling="cls")(ids(1, 9)), expect("tokens length 9", "max_len=8")),
    ],
)
def test_sequence_longer_than_max_len(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_cached_forward_past_max_len_names_the_cached_positions():
    model = lm()
    cache = model.new_kv_cache()
    model(ids(1, 6), kv_cache=cache)
    with pytest.raises(
        ValueError,
        match=expect("tokens length 3", "after 6 cached positions", "max_len=8", "at most 2"),
    ):
        model(ids(1, 3), kv_cache=cache)


def test_cache_refuses_a_new_batch_size():
    model = lm()
    cache = model.new_kv_cache()
    model(ids(1, 2), kv_cache=cache)
    with pytest.raises(ValueError, match=expect("kv_cache", "(1, 2, 8)", "(2, 2, 8)", "new cache")):
        model(ids(2, 1), kv_cache=cache)


# --- ranks and sizes --------------------------------------------------------------------
@pytest.mark.parametrize(
    "tokens, pattern",
    [
        (ids(5), expect("tokens", "2-D", "(5,)")),
        (ids(1, 2, 3), expect("tokens", "2-D", "(1, 2, 3)")),
        (np.zeros((2, 0), dtype=np.int64), expect("tokens", "(2, 0)", "T>=1")),
    ],
)
def test_tokens_of_the_wrong_rank_or_size(tokens, pattern):
    with pytest.raises(ValueError, match=pattern):
        lm()(tokens)


def test_seq2seq_batch_sizes_must_match():
    with pytest.raises(ValueError, match=expect("src", "batch size 2", "tgt_in", "3", "match")):
        seq2seq()(ids(2, 3), ids(3, 3))


@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (
            lambda: nn.MultiHeadAttention(8, 2)(np.zeros((4, 8), F32)),
            ValueError,
            expect("x must be 3-D", "(4, 8)"),
        ),
        (
            lambda: nn.MultiHeadAttention(8, 2)(np.zeros((1, 4, 8), np.int64)),
            TypeError,
            expect("x must be a float", "dtype int64"),
        ),
        (
            lambda: nn.MultiHeadAttention(8, 2)(
                np.zeros((1, 4, 8), F32), context=np.zeros((1, 3, 6), F32)
            ),
            ValueError,
            expect("context has last dimension 6", "expected 8"),
        ),
        (
            lambda: nn.MultiHeadAttention(8, 2)(
                np.zeros((2, 4, 8), F32), context=np.zeros((1, 3, 8), F32)
            ),
            ValueError,
            expect("context", "batch size 1", "x has 2"),
        ),
        (
            lambda: nn.LayerNorm(8)(np.zeros((2, 6), F32)),
            ValueError,
            expect("x has last dimension 6", "expected 8"),
        ),
        (
            lambda: nn.LayerNorm(8)(np.zeros((), F32)),
            ValueError,
            expect("x must be", "shape ()", "1-D"),
        ),
        (
            lambda: nn.FeedForward(8, 16)(np.zeros((2, 3, 6), F32)),
            ValueError,
            expect("x has last dimension 6", "expected 8"),
        ),
        (
            lambda: nn.LearnedPositionalEmbedding(8, 4)(np.zeros((3, 4), F32)),
            ValueError,
            expect("x must be 3-D", "(3, 4)"),
        ),
        (
            lambda: nn.SinusoidalPositionalEncoding(8, 4)(np.zeros((1, 3, 5), F32)),
            ValueError,
            expect("x has last dimension 5", "expected 4"),
        ),
        (
            lambda: nn.EncoderBlock(8, 2)(np.zeros((1, 3, 6), F32)),
            ValueError,
            expect("x has last dimension 6", "expected 8"),
        ),
        (
            lambda: nn.DecoderBlock(8, 2, cross_attention=True)(
                np.zeros((1, 3, 8), F32), np.zeros((1, 4, 5), F32)
            ),
            ValueError,
            expect("context has last dimension 5", "expected 8"),
        ),
        (
            lambda: seq2seq().decode(ids(2, 3, high=7), np.zeros((2, 4, 6), F32)),
            ValueError,
            expect("context has last dimension 6", "expected 8"),
        ),
    ],
)
def test_activations_of_the_wrong_rank_size_or_dtype(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


@pytest.mark.parametrize(
    "make, forward, shape",
    [
        (lm, lambda m: m(ids(2, 3)), (2, 3, 11)),
        (seq2seq, lambda m: m(ids(2, 4, high=9), ids(2, 3, high=7)), (2, 3, 7)),
        (classifier, lambda m: m(ids(2, 3)), (2, 3)),
    ],
)
@pytest.mark.parametrize("bad", ["size", "rank"])
def test_backward_refuses_a_gradient_not_shaped_like_the_logits(make, forward, shape, bad):
    model = make()
    forward(model)
    wrong = shape[:-1] + (shape[-1] + 1,) if bad == "size" else shape[:-1]
    with pytest.raises(ValueError, match=expect("grad_logits", str(wrong), str(shape))):
        model.backward(np.ones(wrong, F32))
    assert all(not p.grad.any() for p in model.parameters())  # nothing was accumulated


def test_backward_refuses_an_integer_gradient():
    model = lm()
    model(ids(2, 3))
    with pytest.raises(TypeError, match=expect("grad_logits", "float", "int64")):
        model.backward(np.ones((2, 3, 11), np.int64))


# --- masks ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (
            lambda: classifier()(ids(2, 3), pad_mask=np.zeros(3, bool)),
            ValueError,
            expect("pad_mask", "(2, 3)", "(3,)"),
        ),
        (
            lambda: classifier()(ids(2, 3), pad_mask=np.zeros((2, 3), np.int64)),
            TypeError,
            expect("pad_mask", "boolean", "dtype int64"),
        ),
        (
            lambda: classifier()(ids(2, 3), pad_mask=[[False] * 3] * 2),
            TypeError,
            expect("pad_mask", "boolean", "list"),
        ),
        (
            lambda: seq2seq()(ids(2, 3), ids(2, 3), src_pad_mask=np.zeros((2, 4), bool)),
            ValueError,
            expect("src_pad_mask", "(2, 3)", "(2, 4)"),
        ),
        (
            lambda: seq2seq()(ids(2, 3), ids(2, 3), tgt_pad_mask=np.zeros((3, 3), bool)),
            ValueError,
            expect("tgt_pad_mask", "(2, 3)", "(3, 3)"),
        ),
        (
            lambda: nn.MultiHeadAttention(8, 2)(
                np.zeros((1, 4, 8), F32), mask=np.zeros((1, 1, 1, 4, 4), bool)
            ),
            ValueError,
            expect("mask of shape (1, 1, 1, 4, 4)", "(1, 2, 4, 4)"),
        ),
        (
            lambda: nn.MultiHeadAttention(8, 2)(
                np.zeros((1, 4, 8), F32), key_padding_mask=np.zeros(4, bool)
            ),
            ValueError,
            expect("key_padding_mask", "(1, 4)", "(4,)"),
        ),
    ],
)
def test_masks_of_the_wrong_shape_or_dtype(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# --- targets and the loss ---------------------------------------------------------------
@pytest.mark.parametrize(
    "logits, targets, error, pattern",
    [
        (np.zeros((2, 3)), np.array([0, 3]), ValueError, expect("targets", "3", "[0, 3)")),
        (np.zeros((2, 3)), np.array([-1, 0]), ValueError, expect("targets", "-1", "[0, 3)")),
        (
            np.zeros((2, 4, 3)),
            np.zeros((2, 3), np.int64),
            ValueError,
            expect("targets", "(2, 3)", "(2, 4)"),
        ),
        (np.zeros((2, 3)), [0, 1], TypeError, expect("targets", "integer", "list")),
        (
            np.zeros((2, 3)),
            np.array([0.0, 1.0]),
            TypeError,
            expect("targets", "integer", "float64"),
        ),
        (np.zeros(()), np.array(0), ValueError, expect("logits", "shape ()", "(..., V)")),
        (
            np.zeros((2, 3), np.int64),
            np.array([0, 1]),
            TypeError,
            expect("logits", "float", "int64"),
        ),
    ],
)
def test_cross_entropy_loss_module_rejects_bad_targets_and_logits(logits, targets, error, pattern):
    with pytest.raises(error, match=pattern):
        nn.CrossEntropyLoss()(logits, targets)


def test_out_of_range_target_is_reported_even_next_to_ignored_ones():
    with pytest.raises(ValueError, match=expect("targets", "5", "[0, 3)", "ignore_index=-100")):
        nn.CrossEntropyLoss(ignore_index=-100)(np.zeros((3, 3)), np.array([-100, 5, 0]))


@pytest.mark.parametrize("smoothing", [-0.1, 1.0])
def test_label_smoothing_outside_zero_one(smoothing):
    with pytest.raises(ValueError, match=expect(f"label_smoothing={smoothing}", "[0, 1)")):
        nn.CrossEntropyLoss(label_smoothing=smoothing)


# --- load_state_dict on a model ---------------------------------------------------------
def test_model_load_state_dict_lists_every_mismatch_and_changes_nothing():
    model = lm()
    before = model.state_dict()
    state = DecoderLM(11, 16, 2, 2, max_len=8, seed=1).state_dict()
    del state["blocks.1.ln2.beta"]
    state["blocks.9.attn.q_proj.weight"] = np.zeros((16, 16))
    state["pos_emb.weight"] = np.zeros((9, 16))
    with pytest.raises(ValueError) as error:
        model.load_state_dict(state)
    message = str(error.value)
    assert "DecoderLM" in message
    assert "missing entries: ['blocks.1.ln2.beta']" in message
    assert "unexpected entries: ['blocks.9.attn.q_proj.weight']" in message
    assert "pos_emb.weight: checkpoint (9, 16) vs model (8, 16)" in message
    for name, value in model.state_dict().items():  # strict: all or nothing
        np.testing.assert_array_equal(value, before[name])


@pytest.mark.parametrize(
    "value, dtype",
    [
        (np.array(["a"] * 16), "<U1"),
        ([None] * 16, "object"),
    ],
)
def test_load_state_dict_refuses_non_numeric_entries_before_changing_anything(value, dtype):
    model = lm()
    before = model.state_dict()
    state = DecoderLM(11, 16, 2, 2, max_len=8, seed=1).state_dict()
    state["ln_f.beta"] = value
    with pytest.raises(ValueError, match=expect("non-numeric", "ln_f.beta", f"dtype {dtype}")):
        model.load_state_dict(state)
    for name, array in model.state_dict().items():
        np.testing.assert_array_equal(array, before[name])


def test_load_state_dict_needs_a_dict():
    with pytest.raises(TypeError, match=expect("state", "dict", "list")):
        lm().load_state_dict([("tok_emb.weight", np.zeros((11, 16)))])


# --- a fully masked attention row -------------------------------------------------------
def test_fully_padded_sequence_gives_finite_logits_and_gradients():
    model = classifier(dtype=np.float64)
    tokens = ids(2, 4)
    pad_mask = np.array([[False, False, True, True], [True, True, True, True]])
    logits = model(tokens, pad_mask=pad_mask)
    assert np.isfinite(logits).all()
    for block in model.blocks:
        np.testing.assert_array_equal(block.attn.attn_weights[1], 0.0)  # zeros, not NaN
    model.backward(np.ones_like(logits))
    assert all(np.isfinite(p.grad).all() for p in model.parameters())


def test_fully_padded_source_gives_zero_cross_attention_not_nan():
    model = Seq2SeqTransformer(9, 7, 8, 2, 1, 1, max_len=8, seed=0, dtype=np.float64)
    src_pad = np.array([[False, False, False], [True, True, True]])
    logits = model(ids(2, 3, high=9), ids(2, 4, high=7), src_pad_mask=src_pad)
    assert np.isfinite(logits).all()
    np.testing.assert_array_equal(model.decoder_blocks[0].cross_attn.attn_weights[1], 0.0)
    model.backward(np.ones_like(logits))
    assert all(np.isfinite(p.grad).all() for p in model.parameters())


def test_fully_masked_row_in_scaled_dot_product_attention_is_zero():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
    mask = np.zeros((3, 3), bool)
    mask[1] = True
    out, weights = F.scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(weights[:, :, 1], 0.0)
    np.testing.assert_array_equal(out[:, :, 1], 0.0)
    assert np.isfinite(out).all()


# --- the reliability probe's unclear errors and silent cases (issue 37) ----------------------
def test_softmax_and_log_softmax_of_an_empty_array_are_empty_as_in_pytorch():
    for function in (F.softmax, F.log_softmax):
        result = function(np.zeros((2, 0)))
        assert result.shape == (2, 0) and result.dtype == np.float64


def test_layer_norm_with_gamma_of_the_wrong_length_names_it():
    with pytest.raises(ValueError, match=expect("gamma", "(3,)", "expected (4,)")):
        F.layer_norm(np.zeros((2, 4)), np.ones(3), np.zeros(4))


@pytest.mark.parametrize("mask", [np.triu(np.ones((3, 3), int), 1), np.zeros((3, 3))])
def test_functional_attention_refuses_a_non_boolean_mask_with_a_sentence(mask):
    q = np.zeros((1, 1, 3, 4))
    with pytest.raises(TypeError, match=expect("mask must be a boolean array", "True = blocked")):
        F.scaled_dot_product_attention(q, q, q, mask=mask)


def test_functional_attention_refuses_queries_and_keys_of_different_widths():
    q, k = np.zeros((1, 1, 3, 4)), np.zeros((1, 1, 3, 3))
    with pytest.raises(ValueError, match=expect("same d_head", "(1, 1, 3, 4)", "(1, 1, 3, 3)")):
        F.scaled_dot_product_attention(q, k, k)


def test_padding_targets_without_ignore_index_name_the_option():
    targets = np.array([[1, 2, F.IGNORE_INDEX]])
    with pytest.raises(ValueError, match=expect("-100", "ignore_index=tfscratch.functional")):
        nn.CrossEntropyLoss()(np.zeros((1, 3, 5)), targets)


def test_cross_entropy_loss_checks_its_options():
    with pytest.raises(TypeError, match=expect("ignore_index='pad'", "int")):
        nn.CrossEntropyLoss(ignore_index="pad")
    with pytest.raises(TypeError, match=expect("label_smoothing='0.1'", "[0, 1)")):
        nn.CrossEntropyLoss(label_smoothing="0.1")


def test_a_ragged_token_list_is_named():
    model = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    with pytest.raises(ValueError, match=expect("tokens", "ragged", "pad the rows")):
        model([[1, 2], [3]])


def test_a_kv_cache_of_another_model_is_refused_by_count():
    small = DecoderLM(11, 8, 2, 2, max_len=8, seed=0)
    large = DecoderLM(11, 8, 2, 3, max_len=8, seed=0)
    with pytest.raises(ValueError, match=expect("kv_cache has 2 entries", "3 blocks")):
        large(np.array([[1]]), kv_cache=small.new_kv_cache())


def test_schedule_state_without_a_key_names_it():
    from tfscratch.optim import SGD, WarmupCosineSchedule

    schedule = WarmupCosineSchedule(SGD([nn.Parameter(np.zeros(2))], lr=0.1), 2, 10)
    with pytest.raises(ValueError, match=expect("lacks ['base_lr']", "step_count")):
        schedule.load_state_dict({"step_count": 3})


@pytest.mark.parametrize("temperature", [1e-45, 1e-300])
def test_a_tiny_temperature_is_greedy_instead_of_a_crash(temperature):
    import tfscratch

    model = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    greedy = tfscratch.generate(model, [1], 4, temperature=0)
    assert tfscratch.generate(model, [1], 4, temperature=temperature, seed=0) == greedy


def test_a_batch_of_prompts_is_named_as_such():
    import tfscratch

    model = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    with pytest.raises(
        ValueError, match=expect("prompt is nested (2 sequences", "one flat sequence")
    ):
        tfscratch.generate(model, np.array([[1, 5], [1, 6]]), 3)


def test_a_position_table_too_large_for_memory_is_a_value_error():
    with pytest.raises(
        ValueError, match=expect("max_len=1000000000", "GiB, more than this machine")
    ):
        DecoderLM(11, 64, 2, 1, max_len=10**9, pos="sinusoidal", seed=0)


def test_number_words_beyond_the_library_are_a_value_error():
    from tfscratch import data

    with pytest.raises(ValueError, match=expect("num2words cannot write", str(10**40))):
        data.number_pairs([3, 10**40])


@pytest.mark.parametrize("texts", [[], ["", ""]])
def test_a_tokenizer_fitted_on_nothing_is_refused(texts):
    from tfscratch.tokenizers import CharTokenizer

    with pytest.raises(ValueError, match=expect("no symbol to learn", "all empty")):
        CharTokenizer.fit(texts)


@pytest.mark.parametrize(
    "layer, x, wrong",
    [
        (nn.Linear(4, 3, seed=0), np.zeros((2, 4)), np.zeros((3, 3))),
        (nn.LayerNorm(5), np.ones((2, 5)), np.zeros(8)),
        (nn.MultiHeadAttention(8, 2, seed=0), np.zeros((1, 3, 8)), np.zeros((1, 2, 8))),
    ],
    ids=["Linear", "LayerNorm", "MultiHeadAttention"],
)
def test_a_layer_backward_names_a_gradient_of_the_wrong_shape(layer, x, wrong):
    output = layer(x)
    with pytest.raises(ValueError, match=expect(f"shape {wrong.shape}", f"{output.shape}")):
        layer.backward(wrong)
