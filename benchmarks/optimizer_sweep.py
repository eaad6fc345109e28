"""Notebook 07's SGD against Adam comparison, over learning rates and seeds.

Notebook 07 (section 5, "Adam against plain SGD") trains the memorisation task (read
1, 2, 3, 4, 5, predict 2, 3, 4, 5, 6) with SGD at one learning rate and Adam at another. One
rate each only shows what those two rates do. This script trains the same task with each
optimiser at several learning rates and seeds 0-4 (the seed fixes the initial weights; the
batch is always the same one sequence), 300 steps, no clipping, exactly as the notebook's
cell, and writes one row per run to ``tfscratch/assets/optimizer_sweep.csv``, which the notebook
reads: the first step whose loss is below 0.01 (empty if none), the last loss, and whether
every loss stayed finite and below 10 (a diverged run's loss explodes or becomes NaN).

Usage (one BLAS thread; about 2 CPU-minutes)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/optimizer_sweep.py
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import write_runs

from tfscratch import DecoderLM
from tfscratch.nn import CrossEntropyLoss
from tfscratch.optim import SGD, Adam

OUT = Path(__file__).resolve().parent.parent / "tfscratch" / "assets" / "optimizer_sweep.csv"
# The notebook's task and model (07_training.ipynb, "Adam against plain SGD"): keep in step.
TOKENS, TARGETS = np.array([[1, 2, 3, 4, 5]]), np.array([[2, 3, 4, 5, 6]])
TOY = dict(vocab_size=20, d_model=32, n_heads=4, n_layers=1, max_len=6)
STEPS, THRESHOLD = 300, 0.01
RATES = {
    "SGD": (0.05, 0.1, 0.2, 0.5, 1.0, 2.0),
    "Adam": (0.001, 0.003, 0.01, 0.03, 0.1),
}
OPTIMIZERS = {"SGD": SGD, "Adam": Adam}


def run(optimizer_name: str, lr: float, seed: int) -> np.ndarray:
    """The loss of every step of one run (the notebook's loop)."""
    model = DecoderLM(**TOY, seed=seed)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters(), lr=lr)
    loss_fn = CrossEntropyLoss()
    curve = []
    with np.errstate(all="ignore"):  # a diverging run overflows; its row says so
        for _ in range(STEPS):
            model.zero_grad()
            curve.append(loss_fn(model(TOKENS), TARGETS))
            model.backward(loss_fn.backward())
            optimizer.step()
    return np.array(curve)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write")
    args = parser.parse_args(argv)
    rows = []
    for optimizer_name, rates in RATES.items():
        for lr in rates:
            for seed in args.seeds:
                start = time.process_time()
                curve = run(optimizer_name, lr, seed)
                below = np.flatnonzero(curve < THRESHOLD)
                rows.append(
                    {
                        "optimizer": optimizer_name,
                        "lr": lr,
                        "seed": seed,
                        "first_below_0.01": int(below[0]) if len(below) else None,
                        "last_loss": float(curve[-1]),
                        "stable": bool(np.isfinite(curve).all() and curve.max() < 10),
                        "cpu_s": round(time.process_time() - start, 2),
                    }
                )
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows).astype({"first_below_0.01": "Int64"})
    write_runs(table, args.out, float_format="%.6g")
    print(table.groupby(["optimizer", "lr"], sort=False)["first_below_0.01"].describe())
    return table


if __name__ == "__main__":
    main()
