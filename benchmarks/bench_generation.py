"""Greedy generation of 256 tokens, with and without the KV cache.

Without a cache, token ``t`` re-runs the model on all ``t`` tokens so far, so each new token
costs more than the last (O(T^2) work in total for T tokens, O(T^3) inside attention); with
the cache each step runs the model on the newest token only and reads the cached keys and
values. The model is the one of ``bench_training_step.py``:
``DecoderLM(vocab_size=28, d_model=64, n_heads=4, n_layers=4, d_ff=256)``, float32, batch 1.

Prints tokens/s for ``tfscratch.generate(..., temperature=0)`` with and without the cache;
with PyTorch installed, also the same model in PyTorch (``_torch_reference.py``) generating
greedily with its own KV cache under ``torch.inference_mode()``, with as many threads as
NumPy's BLAS uses. A second table shows the cost of one token at several positions: flat with
the cache, growing without it.

``--before DIR`` also times another copy of the package (a git worktree of an earlier
commit) in rounds alternating with this one, to measure a change.

Usage: ``.venv/bin/python benchmarks/bench_generation.py [--new-tokens 256] [--before DIR]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _common import (
    describe_checkout,
    load_package_copy,
    load_torch,
    markdown_table,
    numpy_blas_threads,
    print_header,
)

import tfscratch
from tfscratch.timing import time_call

CONFIG = {"vocab_size": 28, "d_model": 64, "n_heads": 4, "n_layers": 4, "d_ff": 256}
PROMPT = [0]
POSITIONS = (1, 32, 64, 128, 192, 255)


def torch_greedy(
    torch, reference, prompt: list[int], max_new_tokens: int, use_kv_cache: bool = True
) -> list[int]:
    """PyTorch's greedy loop: the prompt once, then one token per step (with the cache)."""
    tokens = list(prompt)
    with torch.inference_mode():
        caches = reference.new_kv_cache() if use_kv_cache else None
        step_input = tokens
        for _ in range(max_new_tokens):
            source = step_input if use_kv_cache else tokens
            logits = reference(torch.tensor([source]), caches)
            next_token = int(logits[0, -1].argmax())
            tokens.append(next_token)
            step_input = [next_token]
    return tokens[len(prompt) :]


def tfscratch_step_at(model, position: int, use_kv_cache: bool):
    """A callable producing the token at ``position`` (``position`` tokens already seen)."""
    tokens = np.random.default_rng(position).integers(0, model.vocab_size, (1, position + 1))
    if not use_kv_cache:
        return lambda: model(tokens)  # the whole prefix, every time
    cache = model.new_kv_cache()
    model(tokens[:, :position], kv_cache=cache)
    newest = tokens[:, position:]

    def cached_step():
        for layer_cache in cache:
            layer_cache.length = position  # forget the previous timed step's token
        return model(newest, kv_cache=cache)

    return cached_step


def torch_step_at(torch, reference, position: int):
    tokens = torch.from_numpy(
        np.random.default_rng(position).integers(
            0, reference.tok_emb.num_embeddings, (1, position + 1)
        )
    )
    with torch.inference_mode():
        caches = reference.new_kv_cache()
        reference(tokens[:, :position], caches)
    newest = tokens[:, position:]

    def cached_step():
        with torch.inference_mode():
            for layer_cache in caches:
                layer_cache.length = position
            return reference(newest, caches)

    return cached_step


def compare_with_before(args, model, n_new: int, run, cached_tokens) -> None:
    """This version's generation against another copy's, in alternating rounds."""
    before = load_package_copy(args.before)
    old_model = before.DecoderLM(**CONFIG, max_len=model.max_len, seed=0).eval()

    def run_before(use_kv_cache):
        return before.generate(old_model, PROMPT, n_new, temperature=0, use_kv_cache=use_kv_cache)

    if run_before(True) != cached_tokens:
        raise SystemExit("the two tfscratch versions generate different tokens")
    print(f"\nAgainst tfscratch before ({describe_checkout(args.before)}), same tokens:\n")
    rows = []
    for use_kv_cache in (True, False):
        ratios = []
        for _ in range(args.rounds if use_kv_cache else 3):
            ours = time_call(lambda c=use_kv_cache: run(c), repeats=1, warmup=0)
            theirs = time_call(lambda c=use_kv_cache: run_before(c), repeats=1, warmup=0)
            ratios.append(ours / theirs)
        rows.append(
            [
                "KV cache" if use_kv_cache else "recompute",
                f"{float(np.median(ratios)):.2f}",
                f"{min(ratios):.2f} to {max(ratios):.2f}",
            ]
        )
    print(markdown_table(["generation", "time now / before (median)", "rounds"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per row (median)")
    parser.add_argument(
        "--rounds", type=int, default=9, help="alternating rounds for the cached ratio"
    )
    parser.add_argument(
        "--before", type=Path, help="a folder holding another tfscratch/ to time alongside"
    )
    args = parser.parse_args()
    n_new = args.new_tokens

    torch = load_torch()
    threads = numpy_blas_threads()
    if torch is not None:
        torch.set_num_threads(threads)
    print_header(f"Greedy generation of {n_new} tokens", torch)

    model = tfscratch.DecoderLM(**CONFIG, max_len=len(PROMPT) + n_new, seed=0).eval()
    print(
        f"DecoderLM({', '.join(f'{k}={v}' for k, v in CONFIG.items())}), "
        f"prompt {PROMPT}, batch 1, float32\n"
    )

    def run(use_kv_cache):
        return tfscratch.generate(model, PROMPT, n_new, temperature=0, use_kv_cache=use_kv_cache)

    # These first runs check the cache and warm up; the timed runs below need no more warm-up.
    cached_tokens, recomputed_tokens = run(True), run(False)
    if cached_tokens != recomputed_tokens:
        raise SystemExit("greedy tokens differ with and without the KV cache: a cache bug")

    seconds = {
        "tfscratch, KV cache": time_call(lambda: run(True), repeats=args.repeats, warmup=0),
        "tfscratch, recompute": time_call(lambda: run(False), repeats=args.repeats, warmup=0),
    }
    agreement = None
    if torch is not None:
        from _torch_reference import from_tfscratch

        reference = from_tfscratch(model)
        with torch.inference_mode():
            prompt_logits = reference(torch.tensor([PROMPT])).numpy()
        logits_error = float(np.max(np.abs(model(np.asarray([PROMPT])) - prompt_logits)))
        if logits_error > 1e-4:
            raise SystemExit(f"tfscratch and PyTorch logits differ by {logits_error:.1e}")
        torch_tokens = torch_greedy(torch, reference, PROMPT, n_new)
        # Greedy argmax can flip on a near-tie after float32 rounding, so count, don't assert.
        agreement = sum(a == b for a, b in zip(torch_tokens, cached_tokens))
        seconds["PyTorch eager, KV cache"] = time_call(
            lambda: torch_greedy(torch, reference, PROMPT, n_new), repeats=args.repeats, warmup=0
        )
        seconds["PyTorch eager, recompute"] = time_call(
            lambda: torch_greedy(torch, reference, PROMPT, n_new, use_kv_cache=False),
            repeats=args.repeats,
            warmup=0,
        )

    baseline = seconds["tfscratch, KV cache"]
    rows = [
        [name, f"{value:.3f}", f"{n_new / value:.0f}", f"{value / baseline:.2f}"]
        for name, value in seconds.items()
    ]
    print(f"Whole generation, median of {args.repeats} runs:\n")
    print(
        markdown_table(["implementation", "seconds", "tokens / s", "time / tfscratch cached"], rows)
    )
    speedup = seconds["tfscratch, recompute"] / baseline
    print(
        f"\nKV cache speed-up (tfscratch, {n_new} tokens): {speedup:.1f}x "
        "(target >= 5x at 256 tokens)"
    )
    print("greedy tokens identical with and without the cache: yes")
    if torch is not None:
        # The ratio from rounds that alternate the two (as bench_training_step does), so a
        # change in the machine's speed during the run hits both alike.
        ratios = []
        for _ in range(args.rounds):
            ours = time_call(lambda: run(True), repeats=1, warmup=0)
            theirs = time_call(
                lambda: torch_greedy(torch, reference, PROMPT, n_new), repeats=1, warmup=0
            )
            ratios.append(theirs / ours)  # tokens/s ratio = inverse time ratio
        ratio = float(np.median(ratios))
        print(
            f"tfscratch / PyTorch tokens/s, both cached (median of {args.rounds} alternating "
            f"rounds): {ratio:.2f} (target >= 1.0); "
            f"PyTorch's greedy tokens equal tfscratch's at {agreement}/{n_new} positions; "
            f"first-step logits differ by {logits_error:.1e}"
        )

    if args.before is not None:
        compare_with_before(args, model, n_new, run, cached_tokens)

    header = ["position", "tfscratch cached ms", "tfscratch recompute ms"]
    if torch is not None:
        header.append("PyTorch cached ms")
    rows = []
    for position in POSITIONS:
        if position >= model.max_len:
            continue
        row = [
            str(position),
            f"{time_call(tfscratch_step_at(model, position, True), repeats=15) * 1e3:.3f}",
            f"{time_call(tfscratch_step_at(model, position, False), repeats=5) * 1e3:.3f}",
        ]
        if torch is not None:
            row.append(f"{time_call(torch_step_at(torch, reference, position), 15) * 1e3:.3f}")
        rows.append(row)
    print(
        "\nCost of one new token after `position` tokens (median of 15 cached / 5 recomputed "
        "calls; model forward only, no sampling):\n"
    )
    print(markdown_table(header, rows))
    print()


if __name__ == "__main__":
    main()
