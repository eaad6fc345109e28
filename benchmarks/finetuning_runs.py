"""Notebook 17: adapting the shipped names model to the names of 1920, over paired seeds.

The shipped names model (``tfscratch.pretrained.load_names_model``: 203,008 parameters, trained
on the names of 2017) is adapted to the names given in 1920 (``load_names(1920)``, split
80/10/10 by ``train_val_test_split(..., seed=0)``) in six ways, each for ``STEPS`` AdamW steps
of ``BATCH`` names:

* ``full``: every parameter trains (lr ``LR_FULL``);
* ``lora`` at ranks ``RANKS``: the model frozen, ``nn.add_lora`` on every ``Linear`` of every
  block (``TARGETS``, alpha = rank), only the low-rank factors train (lr ``LR_LORA``);
* ``matrices only``: full fine-tuning of exactly the 24 weight matrices LoRA adapts (lr
  ``LR_FULL``), everything else frozen (``Module.freeze``, then ``requires_grad = True`` on those
  weights): the embeddings, LayerNorms and biases stay as shipped, as under LoRA, so the arm
  separates the rank of the update from the 6,400 parameters LoRA never trains;
* ``scratch``: the same architecture from random weights (``DecoderLM(**config, seed=seed)``),
  trained on the 1920 names only (lr ``LR_SCRATCH``).

The learning rates were chosen once, not tuned per method. Seed ``s`` draws the batches from
``100 + s`` (the same batches for every method: the runs are paired) and LoRA's ``A`` (or the
scratch model's weights) from ``s``. Each run's row records the loss (nats per character) on
all 1920 validation names, on all 2017 validation names of ``train_val_test_split(load_names(),
seed=0)`` (what the model had learned: forgetting shows as a rise from 1.939), the trainable
parameters and the bytes of AdamW's state (its ``m`` and ``v``, built over the trainable
parameters only), and ``cpu_s``: the process's CPU time around the run and its two evaluations,
rounded to 0.1 s. CPU time is not a clean cost per method: it moves with what else the machine
runs (seeds run at a busy moment are slower for every method), and the ``matrices only`` rows
were added by a later run than the others, so their times are not comparable with the rest.
The CSV is ``tfscratch/assets/finetuning_runs.csv``; the notebook re-runs seed 0 of all five
methods it trains itself and checks they match the stored rows.

Usage (the machine is shared: one BLAS thread, low priority; about 6 CPU-minutes for 8 seeds)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/finetuning_runs.py
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/finetuning_runs.py \
        --seeds 0 --out /tmp/check.csv     # the notebook's own runs, alone
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from _common import write_runs

from tfscratch import DecoderLM
from tfscratch.batching import infinite_batches, lm_examples
from tfscratch.data import load_names, train_val_test_split
from tfscratch.nn import add_lora
from tfscratch.optim import AdamW
from tfscratch.pretrained import load_names_model
from tfscratch.stats import paired_difference, summarize
from tfscratch.train import evaluate, train

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tfscratch" / "assets" / "finetuning_runs.csv"
# Notebook 17's recipe (section 4 of 17_finetuning_and_lora.ipynb): keep the two in step.
ERA, STEPS, BATCH = 1920, 200, 32
LR_FULL, LR_LORA, LR_SCRATCH = 1e-3, 1e-2, 3e-3
RANKS = (1, 4, 16)
TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
METHODS = ("full", *(f"lora r={rank}" for rank in RANKS), "scratch", "matrices only")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write")
    return parser.parse_args(argv)


def build(method: str, seed: int):
    """The model to train and the parameters to give the optimiser, for one method."""
    model, _ = load_names_model()
    if method == "full":
        return model, model.trainable_parameters(), LR_FULL
    if method == "matrices only":
        model.freeze()
        for name, parameter in model.named_parameters().items():
            if name.endswith(".weight") and name.split(".")[-2] in TARGETS:
                parameter.requires_grad = True
        return model, model.trainable_parameters(), LR_FULL
    if method.startswith("lora"):
        add_lora(model, int(method.split("=")[1]), targets=TARGETS, seed=seed)
        return model, model.trainable_parameters(), LR_LORA
    config = {key: value for key, value in model.config.items() if key != "seed"}
    scratch = DecoderLM(**config, seed=seed)
    return scratch, scratch.trainable_parameters(), LR_SCRATCH


def adapt(method: str, seed: int, train_data, val_new, val_2017) -> dict:
    """Train one method from one seed; its row of the table."""
    model, params, lr = build(method, seed)
    optimizer = AdamW(params, lr=lr, weight_decay=0.0)
    batches = infinite_batches(train_data, BATCH, seed=100 + seed)
    history = train(model, optimizer, batches, STEPS, progress=False)
    return {
        "method": method,
        "seed": seed,
        "trainable_params": model.num_parameters(trainable_only=True),
        "optimizer_bytes": sum(
            a.nbytes for arrays in optimizer.buffers.values() for a in arrays.values()
        ),
        "train_loss_last": float(history["train_loss"].iloc[-1]),
        "val_loss_new": evaluate(model, [val_new]),
        "val_loss_2017": evaluate(model, [val_2017]),
    }


def data():
    """``(train, val)`` examples of the 1920 names and the 2017 validation examples."""
    model, tokenizer = load_names_model()
    block_size = model.max_len
    train_new, val_new, _ = train_val_test_split(load_names(ERA), seed=0)
    _, val_2017, _ = train_val_test_split(load_names(), seed=0)
    return tuple(
        lm_examples(names, tokenizer, block_size) for names in (train_new, val_new, val_2017)
    )


def main(argv=None) -> pd.DataFrame:
    args = parse_args(argv)
    train_data, val_new, val_2017 = data()
    rows = []
    for seed in args.seeds:
        for method in args.methods:
            start = time.process_time()
            row = adapt(method, seed, train_data, val_new, val_2017)
            row["cpu_s"] = round(time.process_time() - start, 1)
            rows.append(row)
            print(
                f"{method:>11}, seed {seed}: {ERA} val {row['val_loss_new']:.4f}, 2017 val "
                f"{row['val_loss_2017']:.4f}, {row['trainable_params']:,} trainable "
                f"({row['cpu_s']} CPU-s)",
                flush=True,
            )
    table = write_runs(pd.DataFrame(rows), args.out)
    report(table)
    return table


def report(table: pd.DataFrame) -> None:
    """Each method's losses (mean ± SE) and its paired difference from full fine-tuning."""
    for column in ("val_loss_new", "val_loss_2017"):
        wide = table.pivot(index="seed", columns="method", values=column)
        print(column)
        if len(wide) < 2:
            print(wide.to_string())  # one seed: no spread to report
            continue
        for method in wide:
            print(f"{method:>12}: {summarize(wide[method])}")
            if method != "full" and "full" in wide:
                print(f"{'- full':>12}: {paired_difference(wide[method], wide['full'])}")


if __name__ == "__main__":
    main()
