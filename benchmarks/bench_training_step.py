"""One training step of a small GPT: tfscratch (NumPy) against PyTorch eager.

The step is what every training loop repeats: ``zero_grad``, forward, cross-entropy,
backward, Adam. The model is ``DecoderLM(vocab_size=28, d_model=64, n_heads=4, n_layers=4,
d_ff=256)`` (the course's names model, 200K parameters) on a batch of 32 sequences of 32
tokens, float32.

With PyTorch installed the same architecture (``_torch_reference.py``) gets tfscratch's
weights, the script checks that both compute the same logits, loss and gradients, and then
times both with the same number of threads: PyTorch is told to use as many threads as
NumPy's BLAS uses. Calls alternate (tfscratch, PyTorch, tfscratch, ...) so a change in the
machine's speed hits both; the ratio is the median of the per-round ratios.

``--before DIR`` adds the same step run by another copy of the package (a git worktree of an
earlier commit), alternating with the others round by round, to measure a change.

Usage: ``.venv/bin/python benchmarks/bench_training_step.py [--rounds 10] [--before DIR]``
"""

from __future__ import annotations

import argparse
from pathlib import Path
from time import perf_counter

import numpy as np
from _common import (
    describe_checkout,
    load_package_copy,
    load_torch,
    markdown_table,
    median,
    milliseconds,
    numpy_blas_threads,
    print_header,
)

import tfscratch
from tfscratch.timing import time_call

CONFIG = {"vocab_size": 28, "d_model": 64, "n_heads": 4, "n_layers": 4, "d_ff": 256, "max_len": 64}
BATCH, SEQ_LEN, LR = 32, 32, 1e-3


class NumpyStep:
    """tfscratch's training step, split in phases so each can be timed alone."""

    def __init__(self, model, inputs, targets, package=tfscratch):
        self.model, self.inputs, self.targets = model, inputs, targets
        self.loss_fn = package.nn.CrossEntropyLoss()
        self.optimizer = package.optim.Adam(model.parameters(), lr=LR)

    def forward(self) -> float:
        self.optimizer.zero_grad()
        return self.loss_fn(self.model(self.inputs), self.targets)

    def backward(self) -> None:
        self.model.backward(self.loss_fn.backward())

    def update(self) -> None:
        self.optimizer.step()

    def __call__(self) -> float:
        loss = self.forward()
        self.backward()
        self.update()
        return loss


class TorchStep:
    """The same step in PyTorch eager (``torch.optim.Adam`` with its defaults)."""

    def __init__(self, torch, reference, inputs, targets):
        self.torch, self.model = torch, reference
        self.inputs = torch.from_numpy(inputs).long()
        self.targets = torch.from_numpy(targets).long()
        self.optimizer = torch.optim.Adam(reference.parameters(), lr=LR)
        self.loss = None

    def forward(self):
        self.optimizer.zero_grad()
        logits = self.model(self.inputs)
        self.loss = self.torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), self.targets.reshape(-1)
        )
        return self.loss

    def backward(self) -> None:
        self.loss.backward()

    def update(self) -> None:
        self.optimizer.step()

    def __call__(self):
        loss = self.forward()
        self.backward()
        self.update()
        return loss


def time_phases(step, repeats: int) -> dict[str, float]:
    """Median seconds of each phase of ``step`` over ``repeats`` whole steps."""
    timings = {"forward + loss": [], "backward": [], "Adam step": []}
    for _ in range(repeats):
        start = perf_counter()
        step.forward()
        after_forward = perf_counter()
        step.backward()
        after_backward = perf_counter()
        step.update()
        timings["forward + loss"].append(after_forward - start)
        timings["backward"].append(after_backward - after_forward)
        timings["Adam step"].append(perf_counter() - after_backward)
    return {phase: median(seconds) for phase, seconds in timings.items()}


def check_same_computation(torch, model, reference, inputs, targets) -> list[str]:
    """Logits, loss and the gradient of the tied embedding agree before anything is timed;
    returns the three max abs differences, formatted."""
    from _torch_reference import copy_weights

    copy_weights(model, reference)
    numpy_step = NumpyStep(model, inputs, targets)
    torch_step = TorchStep(torch, reference, inputs, targets)
    numpy_loss = numpy_step.forward()
    numpy_step.backward()
    torch_step.forward()
    torch_step.backward()
    torch_logits = reference(torch_step.inputs).detach().numpy()
    logits_error = float(np.max(np.abs(model(inputs) - torch_logits)))
    loss_error = abs(numpy_loss - torch_step.loss.item())
    # tok_emb is used twice (input and tied output layer): the hardest gradient to get right
    grad_error = float(
        np.max(np.abs(model.tok_emb.weight.grad - reference.tok_emb.weight.grad.numpy()))
    )
    errors = [f"{logits_error:.1e}", f"{loss_error:.1e}", f"{grad_error:.1e}"]
    # float32 through 4 layers: a few 1e-6 at most; a wrong weight copy gives ~1e-2
    if logits_error > 1e-4 or loss_error > 1e-5 or grad_error > 1e-5:
        raise SystemExit(
            "tfscratch and PyTorch disagree (max abs differences of logits, loss, tok_emb "
            f"gradient: {', '.join(errors)}); not timing two different computations"
        )
    model.zero_grad()
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="alternating timing rounds (each: 5 steps of each framework)",
    )
    parser.add_argument(
        "--before", type=Path, help="a folder holding another tfscratch/ to time alongside"
    )
    args = parser.parse_args()

    torch = load_torch()
    threads = numpy_blas_threads()
    if torch is not None:
        torch.manual_seed(0)
        torch.set_num_threads(threads)  # same parallelism as NumPy's BLAS
    print_header("Training step: forward + backward + Adam", torch)

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, CONFIG["vocab_size"], size=(BATCH, SEQ_LEN + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    model = tfscratch.DecoderLM(**CONFIG, seed=0)
    print(
        f"DecoderLM({', '.join(f'{k}={v}' for k, v in CONFIG.items())}): "
        f"{model.num_parameters():,} parameters; batch {BATCH} x {SEQ_LEN} tokens, float32\n"
    )

    numpy_step = NumpyStep(model, inputs, targets)
    steps = {"tfscratch (NumPy)": numpy_step}
    if args.before is not None:
        before = load_package_copy(args.before)
        old_model = before.DecoderLM(**CONFIG, seed=0)
        old_step = NumpyStep(old_model, inputs, targets, package=before)
        if abs(old_step.forward() - numpy_step.forward()) > 1e-5:
            raise SystemExit("the two tfscratch versions compute different losses")
        old_model.zero_grad()
        model.zero_grad()
        steps[f"tfscratch before ({describe_checkout(args.before)})"] = old_step
    if torch is not None:
        from _torch_reference import ATTENTION_FLAVOURS, from_tfscratch

        checks = []
        for flavour in ATTENTION_FLAVOURS:
            reference = from_tfscratch(model, attention=flavour)
            errors = check_same_computation(torch, model, reference, inputs, targets)
            name = f"PyTorch eager ({flavour})"
            checks.append([name, *errors])
            steps[name] = TorchStep(torch, reference, inputs, targets)
        print("Same computation (max abs difference from tfscratch):\n")
        print(markdown_table(["reference", "logits", "loss", "tok_emb gradient"], checks))
        print()

    # Whole steps, alternating frameworks round by round.
    for step in steps.values():
        time_call(step, repeats=1, warmup=3)
    per_round = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            per_round[name].append(time_call(step, repeats=5, warmup=0))
    # The phases, for "where does the time go": each timed on its own within whole steps.
    phases = {name: time_phases(step, repeats=7) for name, step in steps.items()}

    header = [
        "implementation",
        "ms / step",
        "steps / s",
        "forward + loss ms",
        "backward ms",
        "Adam ms",
    ]
    rows = []
    for name in steps:
        seconds = median(per_round[name])
        phase = phases[name]
        rows.append(
            [
                name,
                milliseconds(seconds),
                f"{1 / seconds:.1f}",
                milliseconds(phase["forward + loss"]),
                milliseconds(phase["backward"]),
                milliseconds(phase["Adam step"]),
            ]
        )
    print(f"Median of {args.rounds} rounds x 5 steps (phases: median of 7 steps each):\n")
    print(markdown_table(header, rows))
    if len(steps) > 1:
        ours = per_round["tfscratch (NumPy)"]
        print()
        for name in list(steps)[1:]:
            ratios = [a / b for a, b in zip(ours, per_round[name])]
            print(
                f"ratio tfscratch / {name} (time per step, median of per-round ratios): "
                f"{median(ratios):.2f} (rounds {min(ratios):.2f} to {max(ratios):.2f})"
            )
        torch_threads = f", PyTorch {torch.get_num_threads()}" if torch is not None else ""
        print(
            f"(<= 1.0: tfscratch is as fast or faster); threads: NumPy BLAS {threads}"
            + torch_threads
        )
    print()


if __name__ == "__main__":
    main()
