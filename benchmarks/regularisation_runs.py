"""Notebook 07's main run with and without dropout and weight decay, over seeds.

Notebook 07 trains one names model (its section 7) and asks whether its small gap between
training and validation loss is thanks to dropout and weight decay. Answering that takes the
same run in four arms (neither, dropout only, weight decay only, both: the notebook's recipe)
over several seeds, about 20 runs of a minute each: more than the notebook's time budget. This
script runs them and writes one row per run to ``tfscratch/assets/regularisation_runs.csv``,
which the notebook reads; the notebook trains seed 0 of the "both" arm itself and checks that
its numbers agree with the stored row.

Every run is the notebook's cell, with the arm's dropout and weight decay and the seed of the
weights and of the batches: ``DecoderLM(30, d_model=64, n_heads=4, n_layers=2)``, AdamW (peak
lr 4e-3, 200 warm-up steps, a cosine down to lr / 10 at the last step), batches of 64
training names trimmed of padding, clipping at 1.0, validation every 500 steps. Then, in
evaluation mode, the loss on the validation names and on as many training names (the first
2,991), and the gap between the two. The same seed drives the four arms of a row of the
table, so the arms can be compared seed by seed (``tfscratch.stats.paired_difference``).

Usage (the machine is shared: one BLAS thread, low priority; about 25 CPU-minutes)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/regularisation_runs.py
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/regularisation_runs.py \
        --seeds 0 --arms both --out /tmp/check.csv     # the notebook's own run, alone
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from _common import write_runs

from tfscratch import DecoderLM
from tfscratch.batching import batches, infinite_batches, lm_examples, trim_padding
from tfscratch.data import load_names, train_val_test_split
from tfscratch.optim import AdamW, WarmupCosineSchedule
from tfscratch.stats import paired_difference, summarize
from tfscratch.tokenizers import CharTokenizer
from tfscratch.train import evaluate, train

OUT = Path(__file__).resolve().parent.parent / "tfscratch" / "assets" / "regularisation_runs.csv"
# The notebook's recipe (section 7 of 07_training.ipynb): keep the two in step.
STEPS, BATCH_SIZE, PEAK_LR, WARMUP = 4000, 64, 4e-3, 200
DROPOUT, WEIGHT_DECAY = 0.05, 0.01
ARMS = {
    "neither": (0.0, 0.0),
    "dropout": (DROPOUT, 0.0),
    "weight decay": (0.0, WEIGHT_DECAY),
    "both": (DROPOUT, WEIGHT_DECAY),
}


def train_names_model(
    vocab_size,
    block_size,
    train_xy,
    seed,
    *,
    dropout,
    weight_decay,
    warmup=WARMUP,
    run_steps=STEPS,
    **train_options,
):
    """Notebook 07's names model and run (its 4,000-step warm-up + cosine schedule), for
    ``run_steps`` steps of it: the recipe this script and ``warmup_runs.py`` share.

    Returns:
        ``(model, history)`` as ``tfscratch.train`` leaves them.
    """
    model = DecoderLM(
        vocab_size,
        d_model=64,
        n_heads=4,
        n_layers=2,
        max_len=block_size,
        dropout=dropout,
        seed=seed,
    )
    optimizer = AdamW(model.parameters(), lr=PEAK_LR, weight_decay=weight_decay)
    schedule = WarmupCosineSchedule(
        optimizer, warmup_steps=warmup, total_steps=STEPS, min_lr=PEAK_LR / 10
    )
    history = train(
        model,
        optimizer,
        trim_padding(infinite_batches(train_xy, BATCH_SIZE, seed=seed)),
        run_steps,
        schedule=schedule,
        max_grad_norm=1.0,
        progress=False,
        **train_options,
    )
    return model, history


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write")
    return parser.parse_args(argv)


def main(argv=None) -> pd.DataFrame:
    args = parse_args(argv)
    names = load_names()
    train_names, val_names, _ = train_val_test_split(names, seed=0)
    tokenizer = CharTokenizer.fit(names)
    block_size = max(len(name) for name in names) + 1

    def eval_batches(names_list, batch_size=128):
        X, Y = lm_examples(sorted(names_list, key=len), tokenizer, block_size)
        return list(trim_padding(batches((X, Y), batch_size, shuffle=False)))

    X_train, Y_train = lm_examples(train_names, tokenizer, block_size)
    val_batches = eval_batches(val_names)
    train_sample = eval_batches(train_names[: len(val_names)])
    rows = []
    for seed in args.seeds:
        for arm in args.arms:
            dropout, weight_decay = ARMS[arm]
            start = time.process_time()
            model, history = train_names_model(
                tokenizer.vocab_size,
                block_size,
                (X_train, Y_train),
                seed,
                dropout=dropout,
                weight_decay=weight_decay,
                val_batches=val_batches,
                eval_every=500,
            )
            val_loss, train_loss = evaluate(model, val_batches), evaluate(model, train_sample)
            rows.append(
                {
                    "arm": arm,
                    "dropout": dropout,
                    "weight_decay": weight_decay,
                    "seed": seed,
                    "train_loss": round(train_loss, 6),
                    "val_loss": round(val_loss, 6),
                    "gap": round(val_loss - train_loss, 6),
                    "best_val_loss": round(history.attrs["best_val_loss"], 6),
                    "best_step": int(history.attrs["best_step"]),
                    "cpu_s": round(time.process_time() - start, 1),
                }
            )
            print(rows[-1], flush=True)
    table = write_runs(pd.DataFrame(rows), args.out)
    report(table)
    return table


def report(table: pd.DataFrame) -> None:
    """Mean ± SE per arm, and each arm's paired difference with 'neither' (markdown)."""
    print("| arm | val | gap | gap - neither's (paired, 95% interval) |")
    print("|---|---|---|---|")
    by_arm = {arm: part.sort_values("seed") for arm, part in table.groupby("arm", sort=False)}
    for arm, part in by_arm.items():
        line = f"| {arm} | {summarize(part['val_loss'])} | {summarize(part['gap'])} |"
        if arm != "neither" and "neither" in by_arm and len(part) >= 2:
            line += f" {paired_difference(part['gap'], by_arm['neither']['gap'])} |"
        else:
            line += " |"
        print(line)


if __name__ == "__main__":
    main()
