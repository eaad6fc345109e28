"""Train the character-level names model that tfscratch ships (``tfscratch.pretrained``).

A decoder-only Transformer (``DecoderLM``) learns to spell US baby names (``load_names()``,
2017, 29,910 names) one character at a time. The split is ``train_val_test_split(names,
seed=0)`` (80/10/10), the same one notebooks 07 and 08 use, so the validation loss printed
here is comparable with theirs. Everything is seeded: the same command gives the same model.

The yardstick is makemore's (Karpathy) small Transformer, which reaches about 1.92 nats per
character on validation with ~200K parameters. This script prints what it reaches, whatever
it is, as a markdown table with the two baselines every language model must beat:

* uniform: ``ln(vocab_size)``, a model that knows nothing;
* bigram: counts of (previous, next) characters on the training names.

and writes ``names_lm.npz`` (``tfscratch.save``: config and weights, no pickle) and
``names_tokenizer.json`` into ``--out`` (default: the package's ``tfscratch/assets``).

Usage (about 5 minutes on two quiet cores)::

    .venv/bin/python benchmarks/train_names_long.py
    .venv/bin/python benchmarks/train_names_long.py --steps 300 --out /tmp/names   # a quick try
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import tfscratch
from tfscratch.baselines import BigramModel, uniform_loss
from tfscratch.data import batches, infinite_batches, lm_examples, load_names, train_val_test_split
from tfscratch.optim import AdamW, WarmupCosineSchedule
from tfscratch.tokenizers import CharTokenizer
from tfscratch.train import evaluate, train

ASSETS = Path(__file__).resolve().parent.parent / "tfscratch" / "assets"
MODEL_FILE = "names_lm.npz"
TOKENIZER_FILE = "names_tokenizer.json"
EVAL_BATCH_SIZE = 1024


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2600, help="optimiser steps")
    parser.add_argument("--batch-size", type=int, default=64, help="names per step")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=200, help="warm-up steps")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and batches")
    parser.add_argument("--out", type=Path, default=ASSETS, help="folder for the two files")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    names = load_names()
    train_names, val_names, test_names = train_val_test_split(names, seed=0)
    tokenizer = CharTokenizer.fit(names)
    # Every name with its <bos> fits in one row: max_len is the longest name + 1.
    block_size = max(len(name) for name in names) + 1
    X_train, Y_train = lm_examples(train_names, tokenizer, block_size)
    X_val, Y_val = lm_examples(val_names, tokenizer, block_size)
    X_test, Y_test = lm_examples(test_names, tokenizer, block_size)

    def eval_batches(X, Y):
        return list(batches((X, Y), EVAL_BATCH_SIZE, shuffle=False))

    val_batches = eval_batches(X_val, Y_val)

    model = tfscratch.DecoderLM(
        tokenizer.vocab_size,
        d_model=args.d_model,
        n_heads=args.n_heads,
        n_layers=args.n_layers,
        max_len=block_size,
        seed=args.seed,
    )
    optimizer = AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = WarmupCosineSchedule(
        optimizer,
        warmup_steps=min(args.warmup, args.steps),
        total_steps=args.steps,
        min_lr=args.lr / 10,
    )
    start, start_cpu = time.perf_counter(), time.process_time()
    history = train(
        model,
        optimizer,
        infinite_batches((X_train, Y_train), args.batch_size, seed=args.seed),
        args.steps,
        schedule=schedule,
        max_grad_norm=1.0,
        val_batches=val_batches,
        eval_every=max(1, args.steps // 10),
        progress=not args.quiet,
        desc="names LM",
    )
    wall_time = time.perf_counter() - start
    # On a shared machine the wall time counts other people's work too; CPU time does not.
    cpu_time = time.process_time() - start_cpu

    # The model at the end of the cosine is the one we ship (the schedule ends at its
    # lowest rate, so the last evaluation is in practice also the best).
    result = {
        "parameters": model.num_parameters(),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "wall_time_s": wall_time,
        "cpu_time_s": cpu_time,
        "best_val_loss_during_training": history.attrs["best_val_loss"],
        "train_loss": evaluate(model, eval_batches(X_train, Y_train)),
        "val_loss": evaluate(model, val_batches),
        "test_loss": evaluate(model, eval_batches(X_test, Y_test)),
        "uniform": uniform_loss(tokenizer.vocab_size),
        "bigram_val": BigramModel.fit(X_train, Y_train, tokenizer.vocab_size).loss(X_val, Y_val),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    tfscratch.save(model, args.out / MODEL_FILE)
    tokenizer.save(args.out / TOKENIZER_FILE)
    result["asset_bytes"] = (args.out / MODEL_FILE).stat().st_size

    config = model.config
    print(
        f"\nDecoderLM d_model={config['d_model']} n_heads={config['n_heads']} "
        f"n_layers={config['n_layers']} d_ff={config['d_ff']} max_len={config['max_len']}, "
        f"AdamW lr={args.lr} warm-up {args.warmup} + cosine, clip 1.0, "
        f"batch {args.batch_size} names, seed {args.seed}\n"
    )
    print("| parameters | steps | wall time | train | val | test | uniform | bigram (val) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {result['parameters']:,} | {result['steps']:,} | {wall_time:.0f} s "
        f"| {result['train_loss']:.3f} | {result['val_loss']:.3f} | {result['test_loss']:.3f} "
        f"| {result['uniform']:.3f} | {result['bigram_val']:.3f} |"
    )
    print(f"\nCPU time of the training: {cpu_time:.0f} s (all threads)")
    print("losses in nats per character (the <eos> that ends each name included)")
    print(f"asset: {MODEL_FILE} {result['asset_bytes'] / 1e3:.0f} kB")
    rng = np.random.default_rng(args.seed)
    samples = [
        tokenizer.decode(
            tfscratch.generate(
                model,
                [tokenizer.bos_id],
                block_size - 1,
                stop_token=tokenizer.eos_id,
                seed=int(rng.integers(2**31)),
            )
        )
        for _ in range(10)
    ]
    print("samples:", ", ".join(samples))
    return result


if __name__ == "__main__":
    main()
