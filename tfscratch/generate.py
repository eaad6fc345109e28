"""Decoding: turning next-token logits into text.

:func:`generate` samples from a :class:`~tfscratch.models.DecoderLM` one token at a time
(greedy, temperature, top-k, top-p, stop token), optionally with a KV cache so each step
costs O(T) instead of recomputing the whole prefix. :func:`translate` decodes a
:class:`~tfscratch.models.Seq2SeqTransformer` greedily or with beam search.
"""

from __future__ import annotations

import numpy as np

from . import functional as F
from .checks import check_positive_int, check_token_ids
from .models import DecoderLM, Seq2SeqTransformer


# --- choosing the next token ------------------------------------------------------------
def filter_logits(logits: np.ndarray, top_k: int | None = None,
                  top_p: float | None = None) -> np.ndarray:
    """Set to ``-inf`` every logit outside the top-k and outside the top-p nucleus.

    logits: ``(V,)``. Top-p keeps the smallest set of most likely tokens whose probability
    adds up to at least ``top_p`` (the most likely token is always kept).
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


def sample_next(logits: np.ndarray, temperature: float, top_k, top_p,
                rng: np.random.Generator) -> int:
    """One token id from ``(V,)`` logits; ``temperature == 0`` is greedy (argmax)."""
    if temperature == 0:
        return int(np.argmax(logits))
    probs = F.softmax(filter_logits(logits / temperature, top_k, top_p))
    return int(rng.choice(probs.size, p=probs))


def _check_sampling(temperature, top_k, top_p) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.floating)):
        raise TypeError(f"temperature must be a number >= 0, got {temperature!r}")
    if temperature < 0:
        raise ValueError(f"temperature={temperature!r} must be >= 0 (0 means greedy)")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k={top_k!r} must be an int >= 1 or None")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.floating)) or not (
            0.0 < top_p <= 1.0
        ):
            raise ValueError(f"top_p={top_p!r} must be in (0, 1] or None")


def _check_prompt(prompt, vocab_size: int) -> list[int]:
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    if not isinstance(prompt, (list, tuple)):
        raise TypeError(f"prompt must be a list of token ids, got {type(prompt).__name__}")
    if len(prompt) == 0:
        raise ValueError("prompt is empty; give at least one token (e.g. the <bos> id)")
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in prompt):
        raise TypeError(f"prompt must hold int token ids, got {prompt[:8]!r}")
    check_token_ids(np.asarray(prompt), "prompt", vocab_size)
    return [int(t) for t in prompt]


# --- decoder-only generation ------------------------------------------------------------
def generate(model: DecoderLM, prompt, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None,
             stop_token: int | None = None, use_kv_cache: bool = True,
             seed: int | None = None, return_attention: bool = False):
    """Continue ``prompt`` (a list of ids) by up to ``max_new_tokens`` tokens.

    Returns the new tokens only (ending with ``stop_token`` if it was produced). With
    ``return_attention=True`` returns ``(tokens, attention)`` where ``attention[i]`` is the
    ``(n_layers, n_heads, T_k)`` attention of the position that produced token ``i`` (its
    query row); it is the same with and without the cache.

    With the cache, the prompt is run once and each later step feeds only the newest token,
    at position offset ``len(cache)``; without it, every step re-runs the whole sequence.
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"generate expects a DecoderLM, got {type(model).__name__}")
    prompt = _check_prompt(prompt, model.vocab_size)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    _check_sampling(temperature, top_k, top_p)
    if len(prompt) + max_new_tokens > model.max_len:
        raise ValueError(
            f"len(prompt)={len(prompt)} + max_new_tokens={max_new_tokens} exceeds "
            f"max_len={model.max_len} of this model"
        )
    rng = np.random.default_rng(seed)
    was_training = model.training
    model.eval()
    tokens = list(prompt)
    new_tokens, attention = [], []
    cache = model.new_kv_cache() if use_kv_cache else None
    step_input = tokens
    try:
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
    finally:
        model.train(was_training)
    return (new_tokens, attention) if return_attention else new_tokens


# --- encoder-decoder translation --------------------------------------------------------
def translate(model: Seq2SeqTransformer, src, max_len: int, bos: int, eos: int,
              beam_size: int = 1, length_penalty: float = 1.0) -> list[int]:
    """Translate one source sequence (list of ids); returns target ids without bos/eos.

    ``beam_size=1`` is greedy. With a beam, the ``beam_size`` best partial translations are
    kept at each step, all decoded as one batch; finished ones are ranked by their total
    log-probability divided by ``length ** length_penalty`` (length normalisation: without
    it, shorter translations win simply for having fewer negative terms).
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"translate expects a Seq2SeqTransformer, got {type(model).__name__}")
    src = _check_prompt(src, model.src_vocab_size)
    max_len = check_positive_int(max_len, "max_len")
    beam_size = check_positive_int(beam_size, "beam_size")
    for name, value in (("bos", bos), ("eos", eos)):
        if not isinstance(value, (int, np.integer)) or not 0 <= value < model.tgt_vocab_size:
            raise ValueError(f"{name}={value!r} must be a token id in [0, {model.tgt_vocab_size})")
    steps = min(max_len, model.max_len - 1)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(np.asarray([src]))
        beams = [([int(bos)], 0.0)]  # (tokens, total log-prob)
        finished = []
        for _ in range(steps):
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
            if len(finished) >= beam_size or not beams:
                break
        finished.extend(beams if not finished else [])

        def normalised(item):
            tokens, score = item
            return score / (max(len(tokens) - 1, 1) ** length_penalty)

        best_tokens = max(finished, key=normalised)[0]
    finally:
        model.train(was_training)
    return [t for t in best_tokens[1:] if t != eos]
