"""Decoding: greedy and sampled generation with and without the KV cache, and translation."""

import itertools

import numpy as np
import pytest

import tfscratch
from tfscratch import DecoderLM, Seq2SeqTransformer
from tfscratch import functional as F
from tfscratch.generation import filter_logits, sample_next

from .conftest import expect, randomize

PROMPT = [1, 2, 3]

# Randomised weights whose greedy continuation is not one token repeated (most random
# models collapse onto one token): (weight seed, std) per positional encoding.
VARIED_WEIGHTS = {"learned": (3, 0.3), "sinusoidal": (3, 0.3)}


def make_lm(pos="learned", dtype=np.float32, **options):
    seed, std = VARIED_WEIGHTS[pos]
    model = DecoderLM(13, 16, 4, 2, max_len=32, pos=pos, seed=0, dtype=dtype, **options)
    return randomize(model, seed=seed, std=std)


def argmax_loop(model, prompt, n_tokens):
    """Greedy decoding written out: rerun the whole sequence, take the argmax, append."""
    tokens = list(prompt)
    for _ in range(n_tokens):
        tokens.append(int(np.argmax(model(np.asarray([tokens]))[0, -1])))
    return tokens[len(prompt) :]


# --- greedy decoding and the KV cache ---------------------------------------------------
@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_greedy_tokens_are_identical_with_and_without_kv_cache(pos):
    model = make_lm(pos)
    cached = tfscratch.generate(model, PROMPT, 20, temperature=0, use_kv_cache=True)
    uncached = tfscratch.generate(model, PROMPT, 20, temperature=0, use_kv_cache=False)
    assert cached == uncached
    assert len(cached) == 20
    assert len(set(cached)) >= 3  # a varied continuation, so a wrong offset would show


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_temperature_zero_is_the_argmax_of_the_models_logits(pos):
    model = make_lm(pos)
    assert tfscratch.generate(model, PROMPT, 12, temperature=0) == argmax_loop(model, PROMPT, 12)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_cached_logits_equal_uncached_for_a_prompt_fed_in_uneven_pieces(rng, pos):
    model = randomize(
        DecoderLM(
            11,
            16,
            4,
            2,
            max_len=16,
            pos=pos,
            norm="post",
            tie_weights=False,
            seed=0,
            dtype=np.float64,
        ),
        std=0.3,
    )
    tokens = rng.integers(0, 11, (2, 13))
    full = model(tokens)
    cache = model.new_kv_cache()
    pieces, start = [], 0
    for size in (3, 1, 4, 2, 1, 2):
        pieces.append(model(tokens[:, start : start + size], kv_cache=cache))
        start += size
    assert start == 13 and cache[0].length == 13
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_return_attention_is_the_same_with_and_without_cache(pos):
    model = make_lm(pos)
    n_layers, n_heads, n_new = 2, 4, 6
    tokens, cached = tfscratch.generate(model, PROMPT, n_new, temperature=0, return_attention=True)
    tokens_uncached, uncached = tfscratch.generate(
        model, PROMPT, n_new, temperature=0, use_kv_cache=False, return_attention=True
    )
    assert tokens == tokens_uncached
    assert len(cached) == len(uncached) == n_new
    # the reference: one full forward over prompt + new tokens, read row by row
    model(np.asarray([PROMPT + tokens]))
    full = np.stack([block.attn.attn_weights[0] for block in model.blocks])  # (L, H, T, T)
    for step, (with_cache, without_cache) in enumerate(zip(cached, uncached, strict=True)):
        query = len(PROMPT) + step - 1  # the position whose logits chose token `step`
        assert with_cache.shape == without_cache.shape == (n_layers, n_heads, query + 1)
        np.testing.assert_allclose(with_cache.sum(axis=-1), 1.0, rtol=1e-6)
        np.testing.assert_allclose(with_cache, without_cache, atol=1e-6)
        np.testing.assert_allclose(with_cache, full[:, :, query, : query + 1], atol=1e-6)


# --- sampling ---------------------------------------------------------------------------
def test_top_k_of_one_is_greedy():
    model = make_lm()
    greedy = tfscratch.generate(model, PROMPT, 12, temperature=0)
    assert tfscratch.generate(model, PROMPT, 12, temperature=2.0, top_k=1, seed=5) == greedy


def test_tiny_top_p_is_greedy():
    model = make_lm()
    greedy = tfscratch.generate(model, PROMPT, 12, temperature=0)
    assert tfscratch.generate(model, PROMPT, 12, temperature=2.0, top_p=1e-6, seed=5) == greedy


def test_stop_token_ends_generation_and_is_included():
    model = make_lm()
    greedy = tfscratch.generate(model, PROMPT, 20, temperature=0)
    stop = next(t for t in greedy if t != greedy[0])  # the first token that differs from the 1st
    first = greedy.index(stop)
    assert first >= 1
    stopped = tfscratch.generate(model, PROMPT, 20, temperature=0, stop_token=stop)
    assert stopped == greedy[: first + 1]
    assert stopped[-1] == stop


def test_sampled_generation_stops_at_the_first_stop_token():
    model = make_lm()
    sampled = tfscratch.generate(model, PROMPT, 25, temperature=3.0, seed=0)
    stop = sampled[len(sampled) // 2]
    first = sampled.index(stop)
    assert (
        tfscratch.generate(model, PROMPT, 25, temperature=3.0, seed=0, stop_token=stop)
        == (sampled[: first + 1])
    )


def test_same_seed_repeats_and_another_seed_differs():
    model = make_lm()
    a, b, c = (tfscratch.generate(model, PROMPT, 20, temperature=3.0, seed=s) for s in (7, 7, 8))
    assert a == b
    assert a != c


def test_sampling_with_and_without_cache_agree_for_a_seed():
    model = make_lm()
    cached = tfscratch.generate(model, PROMPT, 15, temperature=1.5, top_k=5, seed=3)
    uncached = tfscratch.generate(
        model, PROMPT, 15, temperature=1.5, top_k=5, seed=3, use_kv_cache=False
    )
    assert cached == uncached


def test_sample_frequencies_follow_softmax_of_logits_over_temperature():
    logits = np.array([2.0, 1.0, 0.0, -1.0])
    temperature, n = 0.7, 3_000
    rng = np.random.default_rng(0)
    draws = [sample_next(logits, temperature, None, None, rng) for _ in range(n)]
    frequencies = np.bincount(draws, minlength=4) / n
    expected = F.softmax(logits / temperature)
    # four standard errors of a binomial proportion: fails by chance ~1 in 10,000 runs
    np.testing.assert_array_less(
        np.abs(frequencies - expected), 4 * np.sqrt(expected * (1 - expected) / n)
    )


def test_top_k_keeps_the_k_largest_logits():
    logits = np.array([0.5, 3.0, -1.0, 2.0, 1.0])
    kept = np.isfinite(filter_logits(logits, top_k=2))
    np.testing.assert_array_equal(kept, [False, True, False, True, False])


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = np.array([0.05, 0.5, 0.15, 0.3])
    logits = np.log(probs)
    # sorted: 0.5, 0.3 (0.8 >= 0.7 reached), so 0.15 and 0.05 are dropped
    np.testing.assert_array_equal(
        np.isfinite(filter_logits(logits, top_p=0.7)), [False, True, False, True]
    )
    np.testing.assert_array_equal(
        np.isfinite(filter_logits(logits, top_p=0.85)), [False, True, True, True]
    )
    assert np.isfinite(filter_logits(logits, top_p=1.0)).all()


def test_generate_restores_training_mode_and_leaves_global_rng_alone():
    model = make_lm(dropout=0.2).train()
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    tokens = tfscratch.generate(model, PROMPT, 8, temperature=0)
    assert model.training
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    # dropout was off while generating: the result is the eval-mode greedy continuation
    assert tokens == argmax_loop(model.eval(), PROMPT, 8)


def test_prompt_may_be_a_numpy_array_or_tuple():
    model = make_lm()
    expected = tfscratch.generate(model, PROMPT, 5, temperature=0)
    assert tfscratch.generate(model, np.array(PROMPT), 5, temperature=0) == expected
    assert tfscratch.generate(model, tuple(PROMPT), 5, temperature=0) == expected


def test_prompt_plus_new_tokens_may_fill_max_len_exactly():
    model = make_lm()
    tokens = tfscratch.generate(model, PROMPT, 32 - len(PROMPT), temperature=0)
    assert len(tokens) == 32 - len(PROMPT)


# --- translation ------------------------------------------------------------------------
def make_seq2seq(tgt_vocab=9, max_len=10, weight_seed=6, std=0.2):
    """Randomised weights (seed, std) whose greedy translation of SRC is varied."""
    model = Seq2SeqTransformer(
        11, tgt_vocab, 16, 4, 1, 2, max_len=max_len, seed=0, dtype=np.float64
    )
    return randomize(model, seed=weight_seed, std=std)


def greedy_translation(model, src, steps, bos, eos):
    """Greedy decoding written out: whole prefix through the decoder, argmax, stop at eos."""
    memory = model.encode(np.asarray([src]))
    tokens = [bos]
    for _ in range(steps):
        next_token = int(np.argmax(model.decode(np.asarray([tokens]), memory)[0, -1]))
        if next_token == eos:
            break
        tokens.append(next_token)
    return tokens[1:]


SRC = [4, 7, 1, 9, 2]


def test_translate_with_beam_size_one_is_greedy_decoding():
    model, bos = make_seq2seq(), 0
    steps = 9  # the model's max_len - 1: bos plus 9 tokens fill its 10 positions
    unstopped = greedy_translation(model, SRC, steps, bos, eos=-1)  # -1: never produced
    assert len(unstopped) == steps
    eos = unstopped[3]
    expected = unstopped[: unstopped.index(eos)]
    assert len(expected) >= 2  # eos arrives after a few tokens, not at once
    assert tfscratch.translate(model, SRC, 20, bos, eos, beam_size=1) == expected
    assert expected == greedy_translation(model, SRC, steps, bos, eos)


def test_translate_stops_at_max_len_without_eos():
    model = make_seq2seq()
    unstopped = greedy_translation(model, SRC, 4, 0, eos=-1)
    never = next(t for t in range(1, 9) if t not in greedy_translation(model, SRC, 9, 0, -1))
    assert tfscratch.translate(model, SRC, 4, 0, never) == unstopped


@pytest.mark.parametrize("beam_size", [2, 4])
def test_beam_search_returns_valid_ids_without_eos(beam_size):
    model = make_seq2seq()
    was_training = model.training
    result = tfscratch.translate(model, SRC, 8, bos=0, eos=1, beam_size=beam_size)
    assert all(isinstance(t, int) and 0 <= t < 9 for t in result)
    assert 1 not in result
    assert len(result) <= 8
    assert result == tfscratch.translate(model, SRC, 8, bos=0, eos=1, beam_size=beam_size)
    assert model.training == was_training


def sequence_log_prob(model, src, tokens):
    """Total log-probability of ``tokens[1:]`` given ``tokens[:-1]`` (teacher forcing)."""
    logits = model(np.asarray([src]), np.asarray([tokens[:-1]]))
    log_probs = F.log_softmax(logits[0].astype(np.float64))
    return float(log_probs[np.arange(len(tokens) - 1), tokens[1:]].sum())


@pytest.mark.parametrize("penalty", [0.0, 1.0])
def test_wide_beam_finds_the_best_normalised_translation_by_exhaustive_search(penalty):
    """A beam wider than every hypothesis keeps them all: it must find the exact optimum."""
    # 3 steps (max_len 4 holds bos + 3 tokens), 4 target ids: 13 hypotheses end with eos, and
    # the 27 cut off after 3 tokens without eos compete too (as a greedy translation can be)
    model = make_seq2seq(tgt_vocab=4, max_len=4, weight_seed=28, std=0.5)
    src, bos, eos = [4, 7, 1], 0, 3
    best_score, best = -np.inf, None
    for length in range(4):  # body tokens before eos (or, for 3, the cut-off translation)
        for body in itertools.product([t for t in range(4) if t != eos], repeat=length):
            tokens = [bos, *body] + ([eos] if length < 3 else [])
            score = sequence_log_prob(model, src, tokens) / (len(tokens) - 1) ** penalty
            if score > best_score:
                best_score, best = score, list(body)
    assert (
        tfscratch.translate(model, src, 3, bos, eos, beam_size=64, length_penalty=penalty) == best
    )
    # greedy misses this optimum, so the test tells a beam search from a greedy one
    assert tfscratch.translate(model, src, 3, bos, eos, length_penalty=penalty) != best


class TableSeq2Seq(Seq2SeqTransformer):
    """A Seq2SeqTransformer whose next-token probabilities are read off a table of prefixes."""

    def __init__(self, table):
        super().__init__(3, 5, 8, 2, 1, 1, max_len=8, seed=0)
        self.table = table  # prefix (tuple of ids, bos first) -> probabilities of ids 0..4

    def decode(self, tgt, memory, *args, **kwargs):
        probs = np.array([self.table.get(tuple(row), [0.2] * 5) for row in tgt.tolist()])
        logits = np.log(np.maximum(probs, 1e-300))
        return np.repeat(logits[:, None, :], tgt.shape[1], axis=1)  # the last position counts


@pytest.mark.parametrize("penalty", [0.0, 1.0])
def test_beam_does_not_stop_when_beam_size_hypotheses_have_finished(penalty):
    """Stopping once beam_size hypotheses have finished returns a worse one: not any more."""
    bos, eos, a, b, c = 0, 1, 2, 3, 4
    model = TableSeq2Seq(
        {
            (bos,): [0, 0.3, 0.5, 0.2, 0],  # ranks: a, eos (finished ''), b
            (bos, a): [0, 0.01, 0, 0, 0.99],  # a c: total log 0.495, live
            (bos, b): [0, 0.9, 0.1, 0, 0],  # b eos: the second finished hypothesis
            (bos, a, c): [0, 0.99, 0.01, 0, 0],  # a c eos: total log 0.49
        }
    )
    # after step 2 two hypotheses have finished ('' at log 0.3, b at log 0.18) while a c
    # (log 0.495) is live: a search that stopped at beam_size = 2 finished ones returned ''
    # (penalty 0) or b (penalty 1), both worse than a c, which wins at either penalty
    score = {(): np.log(0.3), (b,): np.log(0.18) / 2**penalty}
    score[(a, c)] = np.log(0.5 * 0.99 * 0.99) / 3**penalty
    assert score[(a, c)] > max(score[()], score[(b,)])
    result = tfscratch.translate(model, [1, 2], 6, bos, eos, beam_size=2, length_penalty=penalty)
    assert result == [a, c]


def normalised_score(model, src, result, max_len, bos, eos, penalty):
    """translate's score of a result: eos counted unless the translation was cut off."""
    cut_off = len(result) == min(max_len, model.max_len - 1)
    tokens = [bos, *result] + ([] if cut_off else [eos])
    return sequence_log_prob(model, src, tokens) / (len(tokens) - 1) ** penalty


@pytest.mark.parametrize("penalty", [0.0, 0.5, 1.0])
def test_beam_never_scores_worse_than_greedy_on_a_small_model(penalty):
    """Greedy's path is one the beam can keep: with the exact stop it never ends up worse."""
    model = make_seq2seq(weight_seed=6, std=0.4)
    rng = np.random.default_rng(0)
    differs = 0
    for _ in range(12):
        src = rng.integers(0, 11, size=rng.integers(2, 7)).tolist()
        for eos in (1, 5):
            greedy = tfscratch.translate(model, src, 6, 0, eos)
            greedy_score = normalised_score(model, src, greedy, 6, 0, eos, penalty)
            for beam_size in (2, 4):
                beam = tfscratch.translate(
                    model, src, 6, 0, eos, beam_size=beam_size, length_penalty=penalty
                )
                beam_score = normalised_score(model, src, beam, 6, 0, eos, penalty)
                assert beam_score >= greedy_score - 1e-9, (src, eos, beam_size, beam, greedy)
                differs += beam != greedy
    assert differs >= 10  # the beams really search: they often find something else


# --- bad arguments ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"temperature": -1}, ValueError, expect("temperature=-1", ">= 0")),
        ({"temperature": -0.5}, ValueError, expect("temperature=-0.5", ">= 0")),
        ({"temperature": float("nan")}, ValueError, expect("temperature=nan", "finite")),
        ({"temperature": "hot"}, TypeError, expect("temperature", "'hot'", "number")),
        ({"top_k": 0}, ValueError, expect("top_k=0", "positive int", "at least 1")),
        ({"top_k": -3}, ValueError, expect("top_k=-3", "positive int", "at least 1")),
        ({"top_k": 2.5}, TypeError, expect("top_k=2.5", "int")),
        ({"top_p": 0}, ValueError, expect("top_p=0", "(0, 1]")),
        ({"top_p": 0.0}, ValueError, expect("top_p=0.0", "(0, 1]")),
        ({"top_p": 1.5}, ValueError, expect("top_p=1.5", "(0, 1]")),
        ({"top_p": -0.1}, ValueError, expect("top_p=-0.1", "(0, 1]")),
        ({"stop_token": 13}, ValueError, expect("stop_token=13", "[0, 13)")),
        ({"stop_token": -1}, ValueError, expect("stop_token=-1", "[0, 13)")),
        ({"stop_token": 2.0}, TypeError, expect("stop_token", "2.0", "int")),
        ({"max_new_tokens": 0}, ValueError, expect("max_new_tokens=0", "positive int")),
        (
            {"max_new_tokens": 30},
            ValueError,
            expect("len(prompt)=3", "max_new_tokens=30", "exceeds max_len=32"),
        ),
    ],
)
def test_bad_sampling_arguments_are_rejected(kwargs, error, pattern):
    arguments = {"prompt": PROMPT, "max_new_tokens": 4, **kwargs}
    with pytest.raises(error, match=pattern):
        tfscratch.generate(make_lm(), **arguments)


@pytest.mark.parametrize(
    "prompt, error, pattern",
    [
        ([], ValueError, expect("prompt=[]", "empty", "at least one token")),
        (np.array([], dtype=np.int64), ValueError, expect("prompt=[]", "empty")),
        ([1, 13], ValueError, expect("prompt", "token id 13", "[0, 13)")),
        ([-1, 2], ValueError, expect("prompt", "token id -1", "[0, 13)")),
        ([1.0, 2.0], TypeError, expect("prompt", "[1.0, 2.0]", "int token ids")),
        ([[1, 2]], ValueError, expect("prompt", "nested (1 sequence of ids)", "one flat sequence")),
        ([True, 2], TypeError, expect("prompt", "[True, 2]", "int token ids")),
        ("hello", TypeError, expect("prompt", "'hello'", "list of token ids")),
    ],
)
def test_bad_prompts_are_rejected(prompt, error, pattern):
    with pytest.raises(error, match=pattern):
        tfscratch.generate(make_lm(), prompt, 4)


def test_generate_refuses_a_prompt_that_already_fills_max_len():
    with pytest.raises(
        ValueError, match=expect("len(prompt)=32", "max_new_tokens=1", "max_len=32")
    ):
        tfscratch.generate(make_lm(), [1] * 32, 1)


def test_generate_needs_a_decoder_lm():
    with pytest.raises(TypeError, match=expect("model", "DecoderLM", "Seq2SeqTransformer")):
        tfscratch.generate(make_seq2seq(), PROMPT, 3)


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"src": []}, ValueError, expect("src=[]", "empty")),
        ({"src": [1, 11]}, ValueError, expect("src", "token id 11", "[0, 11)")),
        ({"src": list(range(11))}, ValueError, expect("src length 11", "max_len=10")),
        ({"bos": 9}, ValueError, expect("bos=9", "[0, 9)")),
        ({"eos": -1}, ValueError, expect("eos=-1", "[0, 9)")),
        ({"eos": 1.0}, TypeError, expect("eos", "1.0", "int")),
        ({"beam_size": 0}, ValueError, expect("beam_size=0", "positive int")),
        ({"max_len": 0}, ValueError, expect("max_len=0", "positive int")),
        ({"length_penalty": "long"}, TypeError, expect("length_penalty", "'long'", "number")),
        ({"length_penalty": float("inf")}, ValueError, expect("length_penalty=inf", "finite")),
    ],
)
def test_bad_translate_arguments_are_rejected(kwargs, error, pattern):
    arguments = {"src": SRC, "max_len": 5, "bos": 0, "eos": 1, **kwargs}
    with pytest.raises(error, match=pattern):
        tfscratch.translate(make_seq2seq(), **arguments)


def test_translate_needs_a_seq2seq_model():
    with pytest.raises(TypeError, match=expect("model", "Seq2SeqTransformer", "DecoderLM")):
        tfscratch.translate(make_lm(), SRC, 5, 0, 1)
