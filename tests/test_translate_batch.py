"""Specification of tfscratch.generation.translate_batch: batched greedy translation."""

import numpy as np
import pytest

import tfscratch
from tfscratch.generation import translate_batch

from .conftest import expect, randomize

BOS, EOS = 1, 2


def random_model(seed=0, **options):
    model = tfscratch.Seq2SeqTransformer(
        12, 9, 16, 2, 2, 2, max_len=10, seed=seed, dtype=np.float64, **options
    )
    # order-one weights: the argmax is then decided by clear margins, not by round-off
    randomize(model, seed=seed, std=0.5)
    # a longer <eos> embedding (tied output weights) makes <eos> win now and then, so
    # some translations end early and others run to max_len
    model.tgt_emb.weight.data[EOS] *= 3
    return model


def random_sources(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 12, size=rng.integers(1, 8)).tolist() for _ in range(n)]


@pytest.mark.parametrize("batch_size", [512, 3])
def test_translate_batch_equals_greedy_translate_of_each_source(batch_size):
    model = random_model()
    sources = random_sources(40)
    expected = [tfscratch.translate(model, src, 8, BOS, EOS) for src in sources]
    got = translate_batch(model, sources, 8, BOS, EOS, batch_size=batch_size)
    assert got == expected
    # the case is a real one: some rows stop at <eos>, others run to max_len
    lengths = {len(tokens) for tokens in got}
    assert 8 in lengths and min(lengths) < 8


def test_translate_batch_ignores_the_padding_of_shorter_sources():
    model = random_model(seed=1)
    short, long = [5, 6], [7, 8, 9, 10, 11, 3]
    alone = translate_batch(model, [short], 8, BOS, EOS)
    together = translate_batch(model, [short, long], 8, BOS, EOS)
    assert together[0] == alone[0]


def test_translate_batch_stops_at_the_model_length_and_restores_train_mode():
    model = random_model(seed=2)
    model.train()
    out = translate_batch(model, random_sources(5), 50, BOS, EOS)
    assert max(len(tokens) for tokens in out) <= model.max_len - 1
    assert model.training


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"srcs": "abc"}, TypeError, expect("srcs", "str", "list")),
        ({"srcs": [[1, 2], []]}, ValueError, expect("srcs[1]=[]", "empty")),
        ({"srcs": [[1, 99]]}, ValueError, expect("srcs[0]", "99", "[0, 12)")),
        ({"max_len": 0}, ValueError, expect("max_len=0", "positive int")),
        ({"eos": 9}, ValueError, expect("eos=9", "[0, 9)")),
        ({"batch_size": 0}, ValueError, expect("batch_size=0", "positive int")),
    ],
)
def test_translate_batch_rejects_bad_input(arguments, error, message):
    model = random_model()
    call = {"srcs": [[1, 2]], "max_len": 5, "bos": BOS, "eos": EOS} | arguments
    with pytest.raises(error, match=message):
        translate_batch(model, **call)


def test_translate_batch_needs_a_seq2seq_model():
    lm = tfscratch.DecoderLM(9, 8, 2, 1, max_len=8, seed=0)
    with pytest.raises(TypeError, match=expect("Seq2SeqTransformer", "DecoderLM")):
        translate_batch(lm, [[1]], 5, BOS, EOS)
