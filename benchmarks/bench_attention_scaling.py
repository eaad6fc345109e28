"""How the cost of attention grows with the sequence length T.

Self-attention compares every position with every other one: the scores are a ``(T, T)``
matrix per head, so time should grow like ``T^2`` once T is large enough for those scores
to dominate (below that, the projections, which cost ``O(T)``, and fixed Python overhead
flatten the curve). The script times the forward pass of ``tfscratch.nn.MultiHeadAttention``
(``d_model=64``, 4 heads, batch 1, causal mask, float32) and of the bare
``tfscratch.functional.scaled_dot_product_attention`` for T = 64, 128, ..., 2048, and fits
the exponent ``p`` of ``time = c * T^p`` on the largest sizes (a straight line on log-log
axes, ``tfscratch.timing.fit_loglog``). Expected: ``p`` close to 2.

Usage: ``.venv/bin/python benchmarks/bench_attention_scaling.py [--max-len 2048]``
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import markdown_table, print_header

from tfscratch import functional as F
from tfscratch.nn import MultiHeadAttention
from tfscratch.timing import measure_scaling

D_MODEL, N_HEADS = 64, 4
FIT_LAST = 4  # the four largest sizes: 256 ... 2048 by default


def module_forward_at(T: int):
    """``MultiHeadAttention`` forward on ``(1, T, 64)`` with a causal mask."""
    rng = np.random.default_rng(T)
    attention = MultiHeadAttention(D_MODEL, N_HEADS, seed=0).eval()
    x = rng.standard_normal((1, T, D_MODEL)).astype(np.float32)
    mask = F.causal_mask(T)
    return lambda: attention(x, mask=mask)


def sdpa_at(T: int):
    """``scaled_dot_product_attention`` on ``(1, 4, T, 16)`` queries, keys and values."""
    rng = np.random.default_rng(T)
    q, k, v = rng.standard_normal((3, 1, N_HEADS, T, D_MODEL // N_HEADS)).astype(np.float32)
    mask = F.causal_mask(T)
    return lambda: F.scaled_dot_product_attention(q, k, v, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=2048, help="largest T (a power of two)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per size (median)")
    args = parser.parse_args()
    sizes = [2**power for power in range(6, int(np.log2(args.max_len)) + 1)]
    fit_last = min(FIT_LAST, len(sizes))

    print_header("Attention forward: time against sequence length", compares_torch=False)
    results = {
        "MultiHeadAttention": measure_scaling(
            module_forward_at, sizes, repeats=args.repeats, fit_last=fit_last
        ),
        "scaled_dot_product_attention": measure_scaling(
            sdpa_at, sizes, repeats=args.repeats, fit_last=fit_last
        ),
    }
    module, sdpa = results["MultiHeadAttention"], results["scaled_dot_product_attention"]
    rows = []
    for index, T in enumerate(sizes):
        growth = "-" if index == 0 else f"{module.seconds[index] / module.seconds[index - 1]:.2f}x"
        rows.append(
            [
                str(T),
                f"{module.seconds[index] * 1e3:.3f}",
                growth,
                f"{sdpa.seconds[index] * 1e3:.3f}",
            ]
        )
    print(
        f"B=1, d_model={D_MODEL}, {N_HEADS} heads, causal mask, float32; median of "
        f"{args.repeats} calls:\n"
    )
    print(
        markdown_table(
            ["T", "MultiHeadAttention ms", "x previous T", "scaled_dot_product_attention ms"], rows
        )
    )
    fitted = f"T = {sizes[-fit_last]} ... {sizes[-1]}"
    print(
        f"\nFitted exponent p in time ~ T^p over {fitted} (target 1.8-2.2; doubling T "
        f"multiplies time by 2^p, 4x for p = 2):\n"
    )
    print(
        markdown_table(
            ["function", "exponent p"],
            [[name, f"{result.exponent:.2f}"] for name, result in results.items()],
        )
    )
    print()


if __name__ == "__main__":
    main()
