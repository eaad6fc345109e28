"""Notebook 10's position-encoding ablation over more seeds than the notebook runs.

Notebook 10 (sections 7-8) trains mean-pooling ``EncoderClassifier``s on the harder majority
task (8 letters, 16 tokens, 4000 training sequences, 2000 unseen test sequences) with
learned, sinusoidal or no positions, token vectors scaled by sqrt(d) or not, over ten seeds
each, and one more arm (the "started-small" arm: sinusoidal positions, ``scale_embeddings=True``, but the token
table drawn as the unscaled model's and divided by sqrt(d), so the model starts exactly as the
unscaled one). This script runs the same recipe (the same data, model, Adam, warm-up + cosine,
batch order and seeds) for seeds 0-19 and writes one row per run to
``tfscratch/assets/majority_position_ablation.csv`` (``--out``), which the notebook reads to
show what the fresh seeds 10-19 give: the arm, the seed, the test accuracy and the test errors
split by the sequence's margin (top count minus second count). It then prints each arm's error
rate as mean ± SE with ``tfscratch.stats`` and the paired differences the notebook reads as
verdicts, for seeds 0-9 (the notebook's), 10-19 and 0-19.

Usage (one BLAS thread: the machine is shared; about 2 s per run, 140 runs)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/majority_position_ablation.py
    .venv/bin/python benchmarks/majority_position_ablation.py --from-csv   # the tables only

``--unclipped`` runs the clipping control instead: the started-small arm and the scaled
sinusoidal arm again, seeds 0-19, with the same recipe but no gradient clipping
(``max_grad_norm=None``), and writes them to ``majority_position_unclipped.csv`` beside the main
table (which it leaves untouched), with each trained model's mean token-vector norm::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/majority_position_ablation.py --unclipped

The results are in ``benchmarks/README.md``.
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
OUT = (
    Path(__file__).resolve().parents[1] / "tfscratch" / "assets" / "majority_position_ablation.csv"
)
# (positions, scale_embeddings, tokens_started_small): the six arms of the 2 x 3 design, and the started-small arm
ARMS = [(pos, scaled, False) for scaled in (True, False) for pos in ENCODINGS]
ARMS.append(("sinusoidal", True, True))
UNCLIPPED_OUT = OUT.with_name("majority_position_unclipped.csv")
# the clipping control: the started-small arm and the scaled sinusoidal arm, without clipping
UNCLIPPED_ARMS = [("sinusoidal", True, True), ("sinusoidal", True, False)]


def make_classifier(pos: str, scaled: bool, seed: int, small: bool = False):
    """The notebook's ``make_classifier("mean", pos=pos, vocab=8, seed=seed)``.

    With ``small=True`` (the started-small arm), the scaled model's token table is the unscaled model's of the
    same seed divided by sqrt(d): ``sqrt(d) E`` starts as the unscaled ``E``.
    """
    model = tfscratch.EncoderClassifier(
        vocab_size=VOCAB, n_classes=VOCAB, d_model=D_MODEL, n_heads=4, n_layers=1,
        max_len=16, pooling="mean", pos=pos, scale_embeddings=scaled, seed=seed,
    )  # fmt: skip
    if small:
        unscaled = make_classifier(pos, False, seed)
        model.tok_emb.weight.data[...] = unscaled.tok_emb.weight.data / np.sqrt(D_MODEL)
    return model


def fit(model, train_set, seed: int, max_grad_norm: float | None = 1.0) -> None:
    """The notebook's ``fit``: Adam 3e-3, 30 warm-up steps then cosine, batches of 64, clip 1
    (``max_grad_norm=None``: no clipping, the control)."""
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    schedule = optim.WarmupCosineSchedule(optimizer, warmup_steps=30, total_steps=STEPS)
    train(
        model, optimizer, batching.infinite_batches(train_set, 64, seed=seed), STEPS,
        task=ClassificationTask(), schedule=schedule, max_grad_norm=max_grad_norm, progress=False,
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


def arm_name(arm: tuple[str, bool, bool]) -> str:
    positions, scaled, small = arm
    if small:
        return "started small (sinusoidal, x sqrt(d))"
    return f"{positions} ({'x sqrt(d)' if scaled else 'unscaled'})"


def error_counts(wrong: np.ndarray, test_margins: np.ndarray) -> dict:
    """The test errors of one run, in all and by the majority's margin (0, 1, 2 or more)."""
    return {
        "errors": int(wrong.sum()),
        "errors_margin_0": int(wrong[test_margins == 0].sum()),
        "errors_margin_1": int(wrong[test_margins == 1].sum()),
        "errors_margin_2_or_more": int(wrong[test_margins >= 2].sum()),
    }


def write_rows(rows: list[dict], out: Path) -> None:
    """One CSV row per run, the columns in the rows' order."""
    with out.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def run(seeds: int, out: Path) -> None:
    X_train, y_train = data.majority_dataset(4000, seq_len=SEQ_LEN, vocab=VOCAB, seed=0)
    X_test, y_test = data.majority_dataset(2000, seq_len=SEQ_LEN, vocab=VOCAB, seed=1)
    test_margins = margins(X_test)
    rows = []
    start = time.process_time()
    for pos, scaled, small in ARMS:
        for seed in range(seeds):
            model = make_classifier(pos, scaled, seed, small)
            fit(model, (X_train, y_train), seed)
            wrong = predict(model, X_test) != y_test
            rows.append({
                "positions": pos, "scale_embeddings": scaled, "tokens_started_small": small,
                "seed": seed, "test_accuracy": 1 - wrong.mean(),
                **error_counts(wrong, test_margins),
            })  # fmt: skip
            print(f"{arm_name((pos, scaled, small)):>45} seed {seed:2}: accuracy "
                  f"{rows[-1]['test_accuracy']:.4f}", flush=True)  # fmt: skip
    print(f"{len(rows)} runs, {time.process_time() - start:.0f} CPU seconds")
    write_rows(rows, out)


def run_unclipped(seeds: int, out: Path) -> None:
    """The clipping control: ``UNCLIPPED_ARMS`` trained without clipping, one row per run."""
    X_train, y_train = data.majority_dataset(4000, seq_len=SEQ_LEN, vocab=VOCAB, seed=0)
    X_test, y_test = data.majority_dataset(2000, seq_len=SEQ_LEN, vocab=VOCAB, seed=1)
    test_margins = margins(X_test)
    rows = []
    start = time.process_time()
    for pos, scaled, small in UNCLIPPED_ARMS:
        for seed in range(seeds):
            model = make_classifier(pos, scaled, seed, small)
            fit(model, (X_train, y_train), seed, max_grad_norm=None)
            wrong = predict(model, X_test) != y_test
            tokens = model.tok_emb.weight.data * (np.sqrt(D_MODEL) if scaled else 1)
            rows.append({
                "positions": pos, "scale_embeddings": scaled, "tokens_started_small": small,
                "max_grad_norm": "none", "seed": seed, "test_accuracy": 1 - wrong.mean(),
                **error_counts(wrong, test_margins),
                "token_vector_norm": round(float(np.linalg.norm(tokens, axis=-1).mean()), 4),
            })  # fmt: skip
            print(f"{arm_name((pos, scaled, small)):>45} seed {seed:2}, no clipping: accuracy "
                  f"{rows[-1]['test_accuracy']:.4f}", flush=True)  # fmt: skip
    print(f"{len(rows)} runs, {time.process_time() - start:.0f} CPU seconds")
    write_rows(rows, out)


def report_unclipped(path: Path, clipped_path: Path) -> None:
    """Print the control: each unclipped arm, and the paired differences it is read by."""
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    with clipped_path.open(newline="") as file:
        clipped_rows = list(csv.DictReader(file))
    n_seeds = 1 + max(int(r["seed"]) for r in rows)
    halves = {"seeds 0-9": range(10), f"seeds 10-{n_seeds - 1}": range(10, n_seeds),
              f"seeds 0-{n_seeds - 1}": range(n_seeds)}  # fmt: skip

    def rates(table, arm, seeds):
        pos, scaled, small = arm
        by_seed = {
            int(r["seed"]): 100 * int(r["errors"]) / 2000
            for r in table
            if (r["positions"], r["scale_embeddings"], r["tokens_started_small"])
            == (pos, str(scaled), str(small))
        }
        return np.array([by_seed[seed] for seed in seeds])

    small, scaled = UNCLIPPED_ARMS
    differences = {
        "started small - scaled sinusoidal, no clipping": lambda s: (
            rates(rows, small, s), rates(rows, scaled, s)),
        "started small - scaled sinusoidal, clipped at 1": lambda s: (
            rates(clipped_rows, small, s), rates(clipped_rows, scaled, s)),
        "started small: no clipping - clipped": lambda s: (
            rates(rows, small, s), rates(clipped_rows, small, s)),
        "scaled sinusoidal: no clipping - clipped": lambda s: (
            rates(rows, scaled, s), rates(clipped_rows, scaled, s)),
    }  # fmt: skip
    print("\nno clipping: test error rate (%), mean ± SE [95% interval] over the seeds\n")
    for arm in UNCLIPPED_ARMS:
        print(
            f"{arm_name(arm)}: "
            + "; ".join(
                f"{name} {stats.summarize(rates(rows, arm, seeds))}"
                for name, seeds in halves.items()
            )
        )
    print("\npaired differences of error rate (points, seed by seed)\n")
    for name, pair in differences.items():
        print(
            f"{name}: "
            + "; ".join(
                f"{label} {stats.paired_difference(*pair(seeds))}"
                for label, seeds in halves.items()
            )
        )


def report(path: Path) -> None:
    """Print the arms and the paired differences for seeds 0-9, 10-19 and all of them."""
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    n_seeds = 1 + max(int(r["seed"]) for r in rows)
    halves = {"seeds 0-9": range(10), f"seeds 10-{n_seeds - 1}": range(10, n_seeds),
              f"seeds 0-{n_seeds - 1}": range(n_seeds)}  # fmt: skip

    def error_rates(arm, seeds):  # % of the 2000 test sequences, in seed order
        pos, scaled, small = arm
        by_seed = {
            int(r["seed"]): 100 * int(r["errors"]) / 2000
            for r in rows
            if (r["positions"], r["scale_embeddings"], r["tokens_started_small"])
            == (pos, str(scaled), str(small))
        }
        return np.array([by_seed[seed] for seed in seeds])

    def cell(summary, sign: str = "+") -> str:
        low, high = summary.interval
        return (
            f"{summary.mean:{sign}.2f} ± {summary.standard_error:.2f} "
            f"[{low:{sign}.2f}, {high:{sign}.2f}]"
        )

    print("\ntest error rate (%), mean ± SE [95% interval] over the seeds\n")
    print("| arm | " + " | ".join(halves) + " |")
    print("|---|" + "---|" * len(halves))
    for arm in ARMS:
        cells = [cell(stats.summarize(error_rates(arm, seeds)), "") for seeds in halves.values()]
        print(f"| {arm_name(arm)} | " + " | ".join(cells) + " |")

    learned, sinusoidal, none = (("learned", True, False), ("sinusoidal", True, False),
                                 ("none", True, False))  # fmt: skip
    learned_u, sinusoidal_u, none_u = (("learned", False, False), ("sinusoidal", False, False),
                                       ("none", False, False))  # fmt: skip
    arm_b = ("sinusoidal", True, True)
    differences = {
        "sinusoidal - learned (x sqrt(d))": (sinusoidal, learned),
        "sinusoidal - none (x sqrt(d))": (sinusoidal, none),
        "none - learned (x sqrt(d))": (none, learned),
        "sinusoidal - none (unscaled)": (sinusoidal_u, none_u),
        "started small - sinusoidal (unscaled)": (arm_b, sinusoidal_u),
        "started small - sinusoidal (x sqrt(d))": (arm_b, sinusoidal),
        "none: x sqrt(d) - unscaled": (none, none_u),
        "learned - none (unscaled)": (learned_u, none_u),
        "interaction: (learned - none) unscaled - (learned - none) x sqrt(d)": None,
    }
    print("\npaired differences of error rate (points, seed by seed), mean ± SE [95% interval]\n")
    print("| difference | " + " | ".join(halves) + " |")
    print("|---|" + "---|" * len(halves))
    for name, pair in differences.items():
        cells = []
        for seeds in halves.values():
            if pair is None:
                a = error_rates(learned_u, seeds) - error_rates(none_u, seeds)
                b = error_rates(learned, seeds) - error_rates(none, seeds)
            else:
                a, b = (error_rates(arm, seeds) for arm in pair)
            cells.append(cell(stats.paired_difference(a, b)))
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0 .. N-1 per arm")
    parser.add_argument(
        "--out", type=Path, default=OUT, help="the CSV to write or read (default: %(default)s)"
    )
    parser.add_argument(
        "--from-csv", action="store_true", help="print the tables of an existing CSV, train nothing"
    )
    parser.add_argument(
        "--unclipped", action="store_true",
        help="the clipping control: train two arms without clipping into majority_position_unclipped.csv",
    )  # fmt: skip
    args = parser.parse_args()
    if args.unclipped:
        if not args.from_csv:
            run_unclipped(args.seeds, UNCLIPPED_OUT)
        report_unclipped(UNCLIPPED_OUT, args.out)
        return
    if not args.from_csv:
        run(args.seeds, args.out)
    report(args.out)


if __name__ == "__main__":
    main()
