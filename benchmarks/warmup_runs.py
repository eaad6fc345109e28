"""Notebook 07's main run with and without its warm-up, over seeds, for its first 500 steps.

Notebook 07 trains its names model with a learning rate that warms up linearly over 200 steps
before the cosine decay. Does the warm-up help this model? This script trains the notebook's run
(the recipe of ``regularisation_runs.py``'s "both" arm: dropout 0.05, weight decay 0.01) with
seeds 0-4, each with the notebook's warm-up (200 steps) and with none (``warmup_steps=0``: the
cosine starts at the peak rate at step 0), the same 4,000-step schedule in both, and stops at
step 500, the notebook's first validation. It writes one row per run to
``tfscratch/assets/warmup_runs.csv``, which the notebook reads: the validation loss at step
500, the mean training loss of the first 200 steps and the share of those 200 steps whose
gradient norm was clipped. The same seed drives both arms of a pair (initial weights, batch
order), so they can be compared seed by seed (``tfscratch.stats.paired_difference``). Only the
start of training is compared; what warm-up changes at step 4,000 these runs do not say.

Usage (one BLAS thread; about 2 CPU-minutes)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/warmup_runs.py
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from _common import write_runs
from regularisation_runs import train_names_model  # the notebook's recipe, shared

from tfscratch.batching import batches, lm_examples, trim_padding
from tfscratch.data import load_names, train_val_test_split
from tfscratch.stats import paired_difference, summarize
from tfscratch.tokenizers import CharTokenizer
from tfscratch.train import evaluate

OUT = Path(__file__).resolve().parent.parent / "tfscratch" / "assets" / "warmup_runs.csv"
# The notebook's recipe (section 7 of 07_training.ipynb): keep the two in step.
STEPS, BATCH_SIZE, PEAK_LR, DROPOUT, WEIGHT_DECAY = 4000, 64, 4e-3, 0.05, 0.01
ARMS = {"warm-up": 200, "no warm-up": 0}
RUN_STEPS, EARLY = 500, 200


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write")
    args = parser.parse_args(argv)
    names = load_names()
    train_names, val_names, _ = train_val_test_split(names, seed=0)
    tokenizer = CharTokenizer.fit(names)
    block_size = max(len(name) for name in names) + 1
    X_train, Y_train = lm_examples(train_names, tokenizer, block_size)
    X_val, Y_val = lm_examples(sorted(val_names, key=len), tokenizer, block_size)
    val_batches = list(trim_padding(batches((X_val, Y_val), 128, shuffle=False)))
    rows = []
    for seed in args.seeds:
        for arm, warmup in ARMS.items():
            start = time.process_time()
            model, history = train_names_model(
                tokenizer.vocab_size,
                block_size,
                (X_train, Y_train),
                seed,
                dropout=DROPOUT,
                weight_decay=WEIGHT_DECAY,
                warmup=warmup,
                run_steps=RUN_STEPS,
            )
            early = history.iloc[:EARLY]
            rows.append(
                {
                    "arm": arm,
                    "warmup_steps": warmup,
                    "seed": seed,
                    "val_loss_500": round(evaluate(model, val_batches), 6),
                    "train_loss_first_200": round(float(early["train_loss"].mean()), 6),
                    "clipped_first_200": round(float((early["grad_norm"] > 1.0).mean()), 4),
                    "cpu_s": round(time.process_time() - start, 1),
                }
            )
            print(rows[-1], flush=True)
    table = write_runs(pd.DataFrame(rows), args.out)
    by_arm = {arm: part.sort_values("seed") for arm, part in table.groupby("arm", sort=False)}
    for arm, part in by_arm.items():
        print(f"{arm:>10}: val at {RUN_STEPS} {summarize(part['val_loss_500'])}")
    if len(by_arm) == 2 and len(args.seeds) >= 2:
        difference = paired_difference(
            by_arm["no warm-up"]["val_loss_500"], by_arm["warm-up"]["val_loss_500"]
        )
        print(f"no warm-up - warm-up: {difference}")
    return table


if __name__ == "__main__":
    main()
