"""Notebook 14's GPT-2-style page against its Llama-style page, over paired seeds.

Notebook 14 trains its one-page GPT (width 48, 4 heads, 2 layers, F = 192, 58,848 parameters)
and its Llama-style page (RMSNorm, SwiGLU with F = 134, rotary positions, no biases, 58,704
parameters) on the names, 300 AdamW steps of 32 names at lr 3e-3, and asks whether the Llama
changes pay at this size. One pair of runs cannot say; ten pairs are more than the notebook's
time budget. This script runs them and writes each run's validation curve (the loss on 500
validation names every 25 steps) to ``tfscratch/assets/gpt_vs_llama_runs.csv``, one row per
run and step, each loss in full (float32's value, written with every digit), and in the column
``val_loss_all`` the final model's loss on **all** 2,991 validation names (on the final step's
rows only; every seed is scored on the same names). The notebook trains seed 0 of both pages
itself and checks that its curves and final losses agree with the stored ones.

The two pages are the notebook's own code: the script reads ``notebooks/14_gpt_in_one_page.ipynb``
and runs every code cell that only defines functions, constants or imports (Parts 1-6 of the
page, RMSNorm, SwiGLU, RoPE and the Llama-style page), so there is no second copy to keep in
step. Seed ``s`` draws both pages' initial weights from ``s`` and their batches from
``100 + s``: the same batches for both, so the two can be compared seed by seed
(``tfscratch.stats.paired_difference``). The initial weights of a pair are *not* the same
numbers: both inits draw the token embedding first (so it is identical), and then different
shapes in a different order.

Usage (the machine is shared: one BLAS thread, low priority). Ten seeds are 20 runs of 300 steps;
each takes about as long as the notebook's own 300-step runs (5 s each on a quiet 2-core machine,
up to 26 s on a shared one, in executions of the notebook), so expect some 2 to 9 CPU-minutes in
all (an estimate from those runs, not a timing of this script)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/gpt_vs_llama_runs.py
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/gpt_vs_llama_runs.py \
        --seeds 0 --out /tmp/check.csv     # the notebook's own runs, alone
"""

from __future__ import annotations

import argparse
import ast
import time
from pathlib import Path

import nbformat
import pandas as pd
from _common import write_runs

from tfscratch.stats import paired_difference, summarize

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "14_gpt_in_one_page.ipynb"
OUT = ROOT / "tfscratch" / "assets" / "gpt_vs_llama_runs.csv"
# The notebook's comparison (section 3 of 14_gpt_in_one_page.ipynb): keep the two in step.
STEPS, D_MODEL, N_HEADS, N_LAYERS, F_GPT, F_LLAMA = 300, 48, 4, 2, 192, 134
ARCHS = ("GPT-2 style", "Llama style")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write")
    return parser.parse_args(argv)


def only_definitions(source: str) -> bool:
    """True for a cell of imports, function definitions and UPPER_CASE constants only."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef)
    return bool(body) and all(
        isinstance(node, allowed)
        or (
            isinstance(node, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
        )
        for node in body
    )


def load_page(path: Path = NOTEBOOK) -> dict:
    """The notebook's definitions (the two pages and their helpers), as a namespace."""
    namespace: dict = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and only_definitions(cell.source):
            exec(compile(cell.source, path.name, "exec"), namespace)  # noqa: S102 (our notebook)
    return namespace


def main(argv=None) -> pd.DataFrame:
    args = parse_args(argv)
    page = load_page()
    from tfscratch.batching import lm_examples
    from tfscratch.data import load_names, train_val_test_split
    from tfscratch.tokenizers import CharTokenizer

    # the data of the notebook's cell "Loading the package's weights"
    names = load_names()
    train_names, val_names, _ = train_val_test_split(names, seed=0)
    tokenizer = CharTokenizer.fit(names)
    block_size = max(len(name) for name in names) + 1
    data = lm_examples(train_names, tokenizer, block_size)
    val = lm_examples(val_names[:500], tokenizer, block_size)
    val_all = lm_examples(val_names, tokenizer, block_size)  # all 2,991: the final models only
    base = dict(
        vocab_size=tokenizer.vocab_size,
        d_model=D_MODEL,
        n_heads=N_HEADS,
        n_layers=N_LAYERS,
        max_len=block_size,
    )
    setups = {
        "GPT-2 style": (
            dict(base, d_ff=F_GPT),
            page["init_gpt"],
            page["gpt"],
            page["gpt_backward"],
        ),
        "Llama style": (
            dict(base, d_ff=F_LLAMA),
            page["init_llama"],
            page["llama"],
            page["llama_backward"],
        ),
    }
    rows = []
    for seed in args.seeds:
        for arch in ARCHS:
            cfg, init, forward, backward = setups[arch]
            start = time.process_time()
            P = init(cfg, seed)
            curve = page["train"](
                P,
                cfg,
                data,
                val,
                STEPS,
                100 + seed,
                forward=forward,
                backward=backward,
            )
            cpu_s = round(time.process_time() - start, 1)
            final_all = page["cross_entropy"](forward(val_all[0], P, cfg, {}), val_all[1], {})
            rows += [
                {
                    "arch": arch,
                    "seed": seed,
                    "step": step,
                    "val_loss": loss,
                    "val_loss_all": final_all if step == STEPS else None,
                    "cpu_s": cpu_s,
                }
                for step, loss in curve.items()
            ]
            print(
                f"{arch}, seed {seed}: {curve[STEPS]:.4f} after {STEPS} steps, "
                f"{final_all:.4f} on all validation names ({cpu_s} CPU-s)"
            )
    table = write_runs(pd.DataFrame(rows), args.out)
    report(table)
    return table


def report(table: pd.DataFrame) -> None:
    """Final validation loss per page (mean ± SE) and the paired difference GPT - Llama,
    on the 500 names of the curves and on all validation names."""
    for column in ("val_loss", "val_loss_all"):
        final = table[table["step"] == table["step"].max()].pivot(
            index="seed", columns="arch", values=column
        )
        print(column)
        if len(final) < 2:
            print(final.to_string())  # one seed: no spread to report
            continue
        for arch in final:
            print(f"{arch:>12}: {summarize(final[arch])}")
        difference = paired_difference(final["GPT-2 style"], final["Llama style"])
        print(f" GPT - Llama: {difference}")


if __name__ == "__main__":
    main()
