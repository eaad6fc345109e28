"""Decoding: turning next-token logits into text (the module ``tfscratch.generation``).

:func:`generate` samples from a :class:`~tfscratch.models.DecoderLM` one token at a time
(greedy, temperature, top-k, top-p, stop token), optionally with a KV cache so each step
costs O(T) instead of recomputing the whole prefix. :func:`translate` decodes a
:class:`~tfscratch.models.Seq2SeqTransformer` greedily or with beam search, and
:func:`translate_batch` many sources at once. ``tfscratch.generate`` and
``tfscratch.translate`` are these functions; the helpers (:func:`filter_logits`,
:func:`sample_next`) are reached through this module: ``tfscratch.generation.filter_logits``.
"""

from __future__ import annotations

import math

import numpy as np

from . import functional as F
from .checks import (
    check_number,
    check_positive_int,
    check_seed,
    check_token_id,
    check_token_list,
)
from .models import DecoderLM, Seq2SeqTransformer
from .module import evaluating, no_grad


# --- choosing the next token ------------------------------------------------------------
def filter_logits(
    logits: np.ndarray, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """Set to ``-inf`` every logit outside the top-k and outside the top-p nucleus.

    Top-p keeps the smallest set of most likely tokens whose probability adds up to at least
    ``top_p`` (the most likely token is always kept).

    Args:
        logits: ``(V,)``, one position's next-token scores.
        top_k: keep the ``top_k`` largest logits (ties at the k-th value are all kept);
            None: no limit.
        top_p: keep the nucleus of probability ``top_p``, in ``(0, 1]``; None or 1: no limit.

    Returns:
        float64 ``(V,)``: a copy of ``logits`` with the dropped entries set to ``-inf``.
    """
    logits = logits.astype(np.float64, copy=True)
    if top_k is not None and top_k < logits.size:
        kth_largest = np.partition(logits, -top_k)[-top_k]
        logits[logits < kth_largest] = -np.inf
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-logits, kind="stable")
        probs = F.softmax(logits[order])
        # a token is dropped when the tokens *before* it already reach top_p
        mass_before = np.cumsum(probs) - probs
        logits[order[mass_before >= top_p]] = -np.inf
    return logits


def sample_next(
    logits: np.ndarray, temperature: float, top_k, top_p, rng: np.random.Generator
) -> int:
    """One token id from one position's logits.

    Args:
        logits: ``(V,)`` next-token scores.
        temperature: divides the logits before the softmax (below 1 sharper, above 1
            flatter); 0 is greedy: the argmax, no randomness.
        top_k, top_p: as in :func:`filter_logits`.
        rng: the generator the draw comes from.

    Returns:
        the token id, an int in ``[0, V)``.
    """
    if temperature == 0:
        return int(np.argmax(logits))
    with np.errstate(over="ignore", divide="ignore"):  # the overflow is handled just below
        scaled = logits / temperature
    if np.isinf(scaled).any() and not np.isinf(logits).any():
        # A tiny temperature overflows the division; shifted by the maximum (softmax does not
        # see a shift) and in float64 it gives the limit instead: all the mass on the argmax.
        scaled = (logits.astype(np.float64) - logits.max()) / temperature
    probs = F.softmax(filter_logits(scaled, top_k, top_p))
    return int(rng.choice(probs.size, p=probs))


def _check_sampling(temperature, top_k, top_p) -> None:
    # `not 0 <= t < inf` also catches NaN, which would otherwise surface as NaN probabilities
    check_number(
        temperature, "temperature", low=0.0, expected="a finite number >= 0 (0 means greedy)"
    )
    if top_k is not None:
        check_positive_int(top_k, "top_k")
    if top_p is not None:
        check_number(
            top_p, "top_p", low=0.0, low_inclusive=False, high=1.0, high_inclusive=True,
            expected="a probability in (0, 1], or None",
        )  # fmt: skip


# --- decoder-only generation ------------------------------------------------------------
def generate(
    model: DecoderLM,
    prompt,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_token: int | None = None,
    use_kv_cache: bool = True,
    seed: int | None = None,
    return_attention: bool = False,
):
    """Continue ``prompt`` by up to ``max_new_tokens`` tokens, one at a time.

    With the cache, the prompt is run once and each later step feeds only the newest token,
    at position offset ``len(cache)``; without it, every step re-runs the whole sequence.
    Greedy decoding gives the same tokens either way. The model runs in eval mode under
    :func:`~tfscratch.no_grad`; its mode is restored afterwards.

    Args:
        model: a :class:`~tfscratch.models.DecoderLM`.
        prompt: the token ids to continue (a non-empty list, tuple or 1-D int array), e.g.
            ``[tokenizer.bos_id]``.
        max_new_tokens: at most this many new tokens; ``len(prompt) + max_new_tokens`` must
            not exceed ``model.max_len``.
        temperature: 0 is greedy (argmax); otherwise the logits are divided by it before
            sampling (below 1 sharper, above 1 flatter).
        top_k: sample only among the ``top_k`` most likely tokens (None: all).
        top_p: sample only from the smallest set of tokens whose probability reaches
            ``top_p`` (None: all).
        stop_token: stop after producing this id (e.g. ``tokenizer.eos_id``).
        use_kv_cache: reuse the keys and values of earlier positions (O(T) work per token)
            instead of re-running the whole sequence (O(T^2)).
        seed: seed of the sampling draws (None: fresh randomness each call).
        return_attention: also return what each new token's position attended to.

    Returns:
        list of int: the new tokens only, ending with ``stop_token`` if it was produced.
        With ``return_attention=True``, ``(tokens, attention)``: ``attention[i]`` is the
        ``(n_layers, n_heads, T_k)`` attention row of the position that produced token ``i``,
        the same with and without the cache.
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM for generate, got {type(model).__name__}")
    prompt = check_token_list(prompt, "prompt", model.vocab_size)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    _check_sampling(temperature, top_k, top_p)
    if stop_token is not None:
        # an id outside the vocabulary can never be sampled, so generation would never stop
        check_token_id(stop_token, "stop_token", model.vocab_size)
    if len(prompt) + max_new_tokens > model.max_len:
        raise ValueError(
            f"len(prompt)={len(prompt)} + max_new_tokens={max_new_tokens} exceeds "
            f"max_len={model.max_len} of this model"
        )
    rng = np.random.default_rng(check_seed(seed))
    tokens = list(prompt)
    new_tokens, attention = [], []
    cache = model.new_kv_cache() if use_kv_cache else None
    step_input = tokens
    with evaluating(model), no_grad():
        for _ in range(max_new_tokens):
            if use_kv_cache:
                logits = model(np.asarray([step_input]), kv_cache=cache)
            else:
                logits = model(np.asarray([tokens]))
            if return_attention:
                # last query row of every layer: (n_layers, n_heads, T_k)
                attention.append(np.stack([b.attn.attn_weights[0, :, -1] for b in model.blocks]))
            next_token = sample_next(logits[0, -1], temperature, top_k, top_p, rng)
            tokens.append(next_token)
            new_tokens.append(next_token)
            step_input = [next_token]
            if stop_token is not None and next_token == stop_token:
                break
    return (new_tokens, attention) if return_attention else new_tokens


# --- encoder-decoder translation --------------------------------------------------------
def translate(
    model: Seq2SeqTransformer,
    src,
    max_len: int,
    bos: int,
    eos: int,
    beam_size: int = 1,
    length_penalty: float = 1.0,
) -> list[int]:
    """Translate one source sequence with an encoder-decoder.

    ``beam_size=1`` is greedy. With a beam, the ``beam_size`` best partial translations are
    kept at each step, all decoded as one batch; finished ones are ranked by their total
    log-probability divided by ``length ** length_penalty`` (length normalisation: without
    it, shorter translations win simply for having fewer negative terms; the length counts
    the written tokens, ``eos`` included). The search stops only when no live hypothesis can
    still beat the best finished one (or after ``max_len`` steps, when the live ones, cut off
    as a greedy translation is, compete too): stopping as soon as ``beam_size`` hypotheses
    have finished (Hugging Face's ``early_stopping=True``) can return a translation that
    scores worse than the greedy one. The model runs in eval mode under
    :func:`~tfscratch.no_grad`.

    Args:
        model: a :class:`~tfscratch.models.Seq2SeqTransformer`.
        src: the source token ids (a non-empty list or 1-D int array), no padding.
        max_len: at most this many target tokens (and at most ``model.max_len - 1``).
        bos: the target vocabulary's ``<bos>`` id, the decoder's first input.
        eos: its ``<eos>`` id, which ends a translation.
        beam_size: partial translations kept per step (1: greedy).
        length_penalty: the exponent of the length normalisation (0: none).

    Returns:
        list of int: the target token ids, without ``bos`` and ``eos``.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(
            f"model must be a Seq2SeqTransformer for translate, got {type(model).__name__}"
        )
    src = check_token_list(src, "src", model.src_vocab_size)
    max_len = check_positive_int(max_len, "max_len")
    beam_size = check_positive_int(beam_size, "beam_size")
    bos = check_token_id(bos, "bos", model.tgt_vocab_size)
    eos = check_token_id(eos, "eos", model.tgt_vocab_size)
    length_penalty = check_number(
        length_penalty, "length_penalty", high=math.inf, expected="a finite number"
    )
    if beam_size == 1:  # greedy: the same decoding as translate_batch, for a batch of one
        return translate_batch(model, [src], max_len, bos, eos)[0]
    steps = min(max_len, model.max_len - 1)

    def normalised(hypothesis):  # total log-prob / (tokens written, eos included) ** penalty
        tokens, score = hypothesis
        return score / max(len(tokens) - 1, 1) ** length_penalty

    with evaluating(model), no_grad():
        memory = model.encode(np.asarray([src]))
        beams = [([int(bos)], 0.0)]  # live hypotheses: (tokens, total log-prob)
        finished = []
        for step in range(1, steps + 1):
            batch = np.asarray([tokens for tokens, _ in beams])
            logits = model.decode(batch, np.repeat(memory, len(beams), axis=0))
            log_probs = F.log_softmax(logits[:, -1].astype(np.float64))  # (n_beams, V)
            totals = np.asarray([score for _, score in beams])[:, None] + log_probs
            best = np.argsort(-totals, axis=None, kind="stable")[: 2 * beam_size]
            candidates = []
            for rank, flat_index in enumerate(best):
                beam_index, token = divmod(int(flat_index), log_probs.shape[1])
                hypothesis = (beams[beam_index][0] + [token], float(totals[beam_index, token]))
                if token == eos:
                    if rank < beam_size:  # an ending that made the top beam_size is finished
                        finished.append(hypothesis)
                else:
                    candidates.append(hypothesis)
                if len(candidates) == beam_size:
                    break
            beams = candidates
            if not beams:
                break
            if finished:
                # The best a live hypothesis can still reach: its total only falls (every
                # log-prob is <= 0) and it ends with between step + 1 and `steps` tokens
                # (`steps` if cut off), so its score is at most its total divided by the
                # most favourable of those lengths ** length_penalty.
                live_totals = np.asarray([score for _, score in beams])
                reachable = np.maximum(
                    live_totals / min(step + 1, steps) ** length_penalty,
                    live_totals / steps**length_penalty,
                )
                if max(map(normalised, finished)) >= reachable.max():
                    break
        else:  # out of steps: the live hypotheses are cut off there and compete too
            finished.extend(beams)
        best_tokens = max(finished, key=normalised)[0]
    return [t for t in best_tokens[1:] if t != eos]


def translate_batch(
    model: Seq2SeqTransformer, srcs, max_len: int, bos: int, eos: int, batch_size: int = 512
) -> list[list[int]]:
    """Greedy translation of many source sequences at once.

    The same result as ``[translate(model, src, max_len, bos, eos) for src in srcs]``, but
    each decoding step runs the whole batch through the decoder in one call: the sources are
    padded into one ``(B, S)`` array, encoded once with their padding mask (so the padding
    changes nothing), then every row's prefix grows by its argmax token until all rows have
    produced ``eos`` or ``max_len`` tokens.

    Args:
        model: a :class:`~tfscratch.models.Seq2SeqTransformer`.
        srcs: a list of source sequences (each a non-empty list or 1-D array of ids).
        max_len, bos, eos: as in :func:`translate`.
        batch_size: sources decoded together (bounds the memory used).

    Returns:
        one list of target ids per source, without ``bos`` and ``eos``.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"translate_batch expects a Seq2SeqTransformer, got {type(model).__name__}")
    if isinstance(srcs, (str, np.ndarray)) or not isinstance(srcs, (list, tuple)):
        raise TypeError(
            f"srcs must be a list of source sequences (lists of ids), got {type(srcs).__name__}"
        )
    sources = [
        check_token_list(src, f"srcs[{i}]", model.src_vocab_size) for i, src in enumerate(srcs)
    ]
    max_len = check_positive_int(max_len, "max_len")
    batch_size = check_positive_int(batch_size, "batch_size")
    bos = check_token_id(bos, "bos", model.tgt_vocab_size)
    eos = check_token_id(eos, "eos", model.tgt_vocab_size)
    steps = min(max_len, model.max_len - 1)  # as translate: bos + steps tokens must fit
    results: list[list[int]] = []
    with evaluating(model), no_grad():
        for start in range(0, len(sources), batch_size):
            chunk = sources[start : start + batch_size]
            lengths = np.array([len(src) for src in chunk])
            src_pad_mask = np.arange(lengths.max())[None, :] >= lengths[:, None]
            src = np.zeros(src_pad_mask.shape, dtype=np.int64)  # padding id 0: masked anyway
            src[~src_pad_mask] = np.concatenate(chunk)
            memory = model.encode(src, src_pad_mask)
            tokens = np.full((len(chunk), 1), bos, dtype=np.int64)
            done = np.zeros(len(chunk), dtype=bool)
            for _ in range(steps):
                logits = model.decode(tokens, memory, src_pad_mask)
                # argmax of the float64 log-probabilities, exactly as translate ranks them
                next_tokens = np.argmax(F.log_softmax(logits[:, -1].astype(np.float64)), axis=-1)
                # a finished row keeps growing (the batch stays a rectangle); cut off below
                tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
                done |= next_tokens == eos
                if done.all():
                    break
            for row in tokens[:, 1:].tolist():
                results.append(row[: row.index(eos)] if eos in row else row)
    return results
