"""Notebook 10's position-encoding ablation over more seeds than the notebook runs.

Notebook 10 (section 7) trains mean-pooling ``EncoderClassifier``s on the harder majority
task (8 letters, 16 tokens, 4000 training sequences, 2000 unseen test sequences) with
learned, sinusoidal or no positions, token vectors scaled by sqrt(d) or not, over ten seeds
each. This script runs the same recipe (the same data, model, Adam, warm-up + cosine, batch
order and seeds) for more seeds, so the notebook's intervals can be checked against a larger
sample. It writes one row per run to a CSV (``--out``): the arm, the seed, the test accuracy
and the test errors split by the sequence's margin (top count minus second count), then
prints each arm's error rate as mean ± SE with ``tfscratch.stats`` and the paired differences.

Usage (one BLAS thread: the machine is shared; about 2 s per run)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/majority_position_ablation.py

writes ``benchmarks/majority_position_ablation.csv`` (20 seeds per arm, 120 runs); the results
are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

import tfscratch
from tfscratch import batching, data, optim, stats
from tfscratch.train import ClassificationTask, train

VOCAB, SEQ_LEN, D_MODEL, STEPS = 8, 16, 32, 300
ENCODINGS = ("learned", "sinusoidal", "none")
OUT = Path(__file__).resolve().parent / "majority_position_ablation.csv"


def make_classifier(pos: str, scaled: bool, seed: int) -> tfscratch.EncoderClassifier:
    """The notebook's ``make_classifier("mean", pos=pos, vocab=8, seed=seed)``."""
    return tfscratch.EncoderClassifier(
        vocab_size=VOCAB, n_classes=VOCAB, d_model=D_MODEL, n_heads=4, n_layers=1,
        max_len=16, pooling="mean", pos=pos, scale_embeddings=scaled, seed=seed,
    )  # fmt: skip


def fit(model, train_set, seed: int) -> None:
    """The notebook's ``fit``: Adam 3e-3, 30 warm-up steps then cosine, batches of 64, clip 1."""
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    schedule = optim.WarmupCosineSchedule(optimizer, warmup_steps=30, total_steps=STEPS)
    train(
        model, optimizer, batching.infinite_batches(train_set, 64, seed=seed), STEPS,
        task=ClassificationTask(), schedule=schedule, max_grad_norm=1.0, progress=False,
    )  # fmt: skip


def predict(model, X: np.ndarray, batch_size: int = 250) -> np.ndarray:
    model.eval()
    with tfscratch.no_grad():
        return np.concatenate(
            [model(X[i : i + batch_size]).argmax(axis=-1) for i in range(0, len(X), batch_size)]
        )


def margins(X: np.ndarray) -> np.ndarray:
    counts = np.sort((X[:, :, None] == np.arange(VOCAB)).sum(axis=1), axis=1)
    return counts[:, -1] - counts[:, -2]


def arm_name(arm: tuple[str, bool]) -> str:
    positions, scaled = arm
    return f"{positions} ({'x sqrt(d)' if scaled else 'unscaled'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0 .. N-1 per arm")
    parser.add_argument(
        "--out", type=Path, default=OUT, help="the CSV to write (default: %(default)s)"
    )
    args = parser.parse_args()

    X_train, y_train = data.majority_dataset(4000, seq_len=SEQ_LEN, vocab=VOCAB, seed=0)
    X_test, y_test = data.majority_dataset(2000, seq_len=SEQ_LEN, vocab=VOCAB, seed=1)
    test_margins = margins(X_test)
    rows = []
    start = time.process_time()
    for scaled in (True, False):
        for pos in ENCODINGS:
            for seed in range(args.seeds):
                model = make_classifier(pos, scaled, seed)
                fit(model, (X_train, y_train), seed)
                wrong = predict(model, X_test) != y_test
                rows.append({
                    "positions": pos, "scale_embeddings": scaled, "seed": seed,
                    "test_accuracy": 1 - wrong.mean(),
                    "errors": int(wrong.sum()),
                    "errors_margin_0": int(wrong[test_margins == 0].sum()),
                    "errors_margin_1": int(wrong[test_margins == 1].sum()),
                    "errors_margin_2_or_more": int(wrong[test_margins >= 2].sum()),
                })  # fmt: skip
                print(f"{pos:>10} scaled={scaled!s:5} seed {seed:2}: accuracy "
                      f"{rows[-1]['test_accuracy']:.4f}", flush=True)  # fmt: skip
    cpu = time.process_time() - start
    with args.out.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    def error_rates(pos, scaled):
        return np.array(
            [r["errors"] / len(y_test) for r in rows if r["positions"] == pos and r["scale_embeddings"] == scaled]
        )  # fmt: skip

    print(f"\n{len(rows)} runs, {cpu:.0f} CPU seconds; test error rate, mean ± SE over seeds\n")
    print("| token vectors | positions | error rate | 95% interval | min - max |")
    print("|---|---|---|---|---|")
    for scaled in (True, False):
        for pos in ENCODINGS:
            rates = error_rates(pos, scaled)
            summary = stats.summarize(100 * rates)
            low, high = summary.interval
            print(f"| {'x sqrt(d)' if scaled else 'unscaled'} | {pos} | {summary.mean:.2f}% ± "
                  f"{summary.standard_error:.2f} | [{low:.2f}, {high:.2f}] | "
                  f"{100 * rates.min():.2f} - {100 * rates.max():.2f} |")  # fmt: skip
    print("\npaired differences of error rate (percentage points, same seeds)\n")
    pairs = [
        (("sinusoidal", True), ("learned", True)),
        (("sinusoidal", True), ("none", True)),
        (("none", True), ("learned", True)),
        (("sinusoidal", False), ("none", False)),
        (("learned", False), ("none", False)),
        (("learned", True), ("learned", False)),
        (("none", True), ("none", False)),
        (("sinusoidal", False), ("sinusoidal", True)),
    ]
    for a, b in pairs:
        diff = stats.paired_difference(100 * error_rates(*a), 100 * error_rates(*b))
        low, high = diff.interval
        print(f"{arm_name(a)} - {arm_name(b)}: {diff.mean:+.2f} ± {diff.standard_error:.2f} "
              f"[{low:+.2f}, {high:+.2f}]")  # fmt: skip


if __name__ == "__main__":
    main()
