"""The training loop: mini-batches in, a history table out.

One loop serves all three models of the course. What differs between them (how a batch is
fed to the model and turned into a loss) lives in a small *task* object:

* :class:`LanguageModelTask`: batch ``(tokens (B, T), targets (B, T))``, the next-token loss.
* :class:`Seq2SeqTask`: batch ``(src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask)``,
  teacher forcing: the decoder reads ``tgt_in`` and is scored on ``tgt_out``.
* :class:`ClassificationTask`: batch ``(tokens, labels)`` or ``(tokens, labels, pad_mask)``.

A task is called as ``task(model, batch, backward=True) -> (loss, n_targets)``: it runs the
forward pass, returns the mean loss over the batch's scored targets and, when asked, runs
the backward pass so that every parameter's ``.grad`` holds d(loss)/d(parameter).

:func:`train` then does, once per step::

    zero_grad -> task (forward + loss + backward) -> clip -> optimizer.step -> schedule.step

with a progress bar (:mod:`tfscratch.progress`), periodic validation, an optional keep-best
checkpoint, and a clear error naming the step when the loss turns NaN or infinite. It returns the history as a pandas
DataFrame with one row per step: ``step, lr, train_loss, val_loss, grad_norm, tokens_per_s``
(``val_loss`` is NaN on steps without validation).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from .checkpoint import save
from .checks import check_positive_int
from .functional import IGNORE_INDEX
from .loss import CrossEntropyLoss
from .module import Module, evaluating, in_mode, no_grad
from .optim import clip_grad_norm
from .progress import progress_bar

__all__ = [
    "ClassificationTask",
    "LanguageModelTask",
    "Seq2SeqTask",
    "evaluate",
    "train",
]

HISTORY_COLUMNS = ("step", "lr", "train_loss", "val_loss", "grad_norm", "tokens_per_s")


class _CrossEntropyTask:
    """Shared part of the tasks: a cross-entropy loss and the model's backward."""

    def __init__(self, ignore_index: int | None = IGNORE_INDEX, label_smoothing: float = 0.0):
        self.loss = CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=label_smoothing)

    def _count(self, targets: np.ndarray) -> int:
        """How many targets the loss scores (the ignored ones don't count)."""
        if self.loss.ignore_index is None:
            return int(targets.size)
        return int(np.count_nonzero(targets != self.loss.ignore_index))

    def _finish(self, model: Module, logits: np.ndarray, targets: np.ndarray, backward: bool):
        value = self.loss(logits, targets)
        if backward:
            model.backward(self.loss.backward())
        return value, self._count(targets)


def _unpack(batch, sizes: tuple[int, ...], layout: str) -> tuple:
    if not isinstance(batch, (tuple, list)) or len(batch) not in sizes:
        got = (
            f"a {type(batch).__name__} of length {len(batch)}"
            if isinstance(batch, (tuple, list))
            else f"a {type(batch).__name__}"
        )
        raise TypeError(f"batch must be a tuple {layout}; got {got}")
    return tuple(batch)


class LanguageModelTask(_CrossEntropyTask):
    """Next-token prediction for :class:`~tfscratch.DecoderLM`.

    ``batch = (tokens, targets)``, both ``(B, T)`` integer arrays; ``targets[b, t]`` is the
    token that follows ``tokens[b, :t+1]``, or ``ignore_index`` (default -100) where there is
    none (padding). The loss is the mean over the scored targets, in nats per token.

    Called as ``task(model, batch, backward=True) -> (loss, n_targets)``: the forward, the
    mean loss over the batch's scored targets, and (when ``backward``) the model's backward.

    Args:
        ignore_index: the target value not scored (default ``IGNORE_INDEX``, -100).
        label_smoothing: as in :class:`~tfscratch.nn.CrossEntropyLoss`.
    """

    def __call__(self, model: Module, batch, backward: bool = True) -> tuple[float, int]:
        tokens, targets = _unpack(batch, (2,), "(tokens, targets)")
        return self._finish(model, model(tokens), targets, backward)


class Seq2SeqTask(_CrossEntropyTask):
    """Teacher-forced translation for :class:`~tfscratch.Seq2SeqTransformer`.

    ``batch = (src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask)``: ``src (B, S)``,
    ``tgt_in (B, T)`` (``<bos>`` + target), ``tgt_out (B, T)`` (target + ``<eos>``, padding
    as ``ignore_index``), and the boolean padding masks ``(B, S)`` / ``(B, T)`` (True = pad),
    either of which may be None. :func:`tfscratch.batching.seq2seq_batch` builds one.

    Called as ``task(model, batch, backward=True) -> (loss, n_targets)``: the forward, the
    mean loss over the batch's scored targets, and (when ``backward``) the model's backward.

    Args:
        ignore_index: the target value not scored (default ``IGNORE_INDEX``, -100).
        label_smoothing: as in :class:`~tfscratch.nn.CrossEntropyLoss`.
    """

    def __call__(self, model: Module, batch, backward: bool = True) -> tuple[float, int]:
        src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask = _unpack(
            batch, (5,), "(src, tgt_in, tgt_out, src_pad_mask, tgt_pad_mask)"
        )
        logits = model(src, tgt_in, src_pad_mask=src_pad_mask, tgt_pad_mask=tgt_pad_mask)
        return self._finish(model, logits, tgt_out, backward)


class ClassificationTask(_CrossEntropyTask):
    """Sequence classification for :class:`~tfscratch.EncoderClassifier`.

    ``batch = (tokens (B, T), labels (B,))`` or ``(tokens, labels, pad_mask (B, T))``.

    Called as ``task(model, batch, backward=True) -> (loss, n_targets)``: the forward, the
    mean loss over the batch's scored targets, and (when ``backward``) the model's backward.

    Args:
        label_smoothing: as in :class:`~tfscratch.nn.CrossEntropyLoss`.
    """

    def __init__(self, label_smoothing: float = 0.0):
        super().__init__(ignore_index=None, label_smoothing=label_smoothing)

    def __call__(self, model: Module, batch, backward: bool = True) -> tuple[float, int]:
        tokens, labels, *rest = _unpack(batch, (2, 3), "(tokens, labels[, pad_mask])")
        logits = model(tokens, pad_mask=rest[0] if rest else None)
        return self._finish(model, logits, labels, backward)


Task = Callable[..., tuple[float, int]]


EVAL_CHUNK_ROWS = 256


def evaluate(
    model: Module, batches: Iterable, task: Task | None = None, chunk_rows: int = EVAL_CHUNK_ROWS
) -> float:
    """Mean loss of ``model`` over ``batches``, in eval mode (no dropout), under
    :func:`~tfscratch.no_grad` (no backward, so nothing is kept for one).

    Args:
        model: the model to score; its train/eval mode is restored afterwards.
        batches: an iterable of batches in the layout ``task`` reads (every array's first
            axis is the batch).
        task: how a batch becomes a loss (default :class:`LanguageModelTask`).
        chunk_rows: a batch with more rows is scored ``chunk_rows`` rows at a time, so a
            whole test set passed as one batch costs the memory of one chunk.

    Returns:
        The mean loss over every scored target (batches and chunks are weighted by how many
        targets they score), whatever the batch sizes.
    """
    task = LanguageModelTask() if task is None else task
    chunk_rows = check_positive_int(chunk_rows, "chunk_rows")
    total, count = 0.0, 0
    with evaluating(model), no_grad():
        for batch in batches:
            for chunk in _row_chunks(batch, chunk_rows):
                loss, n = task(model, chunk, backward=False)
                total += loss * n
                count += n
    if count == 0:
        raise ValueError("batches gave no scored targets: cannot evaluate an empty data set")
    return total / count


def _row_chunks(batch, rows: int):
    """``batch`` (a tuple of arrays sharing their first axis, or None entries) in pieces of
    at most ``rows`` rows; anything else is passed through whole for the task to judge."""
    whole = not isinstance(batch, (tuple, list)) or not batch or not hasattr(batch[0], "shape")
    if whole or len(batch[0]) <= rows:
        yield batch
        return
    for start in range(0, len(batch[0]), rows):
        yield tuple(None if array is None else array[start : start + rows] for array in batch)


def _validation_source(val_batches) -> Callable[[], Iterable]:
    """``val_batches`` is re-read at every evaluation, so a one-shot iterator won't do."""
    if val_batches is None or callable(val_batches):
        return val_batches
    if isinstance(val_batches, Iterator):
        raise TypeError(
            "val_batches must be re-iterable (a list of batches) or a function returning an "
            f"iterable of batches; got a one-shot {type(val_batches).__name__}, which would be "
            "empty at the second evaluation"
        )
    return lambda: val_batches


def _check_optimizer_holds(optimizer, params: list) -> None:
    """Refuse an optimiser that updates parameters the model does not have: it was built for
    another model (the model cell re-run after the optimiser's), or before a submodule was
    replaced. Training would then change nothing the model computes with, silently. An
    optimiser over a subset of the model's parameters (fine-tuning a part) is fine."""
    held = getattr(optimizer, "params", None)
    if held is None:  # a learner's own optimiser may keep its parameters its own way
        return
    own = {id(parameter) for parameter in params}
    foreign = [parameter for parameter in held if id(parameter) not in own]
    if foreign:
        raise ValueError(
            f"the optimizer holds {len(foreign)} of its {len(held)} parameters that this model "
            f"does not have, so its steps would not train the model: build the optimiser from "
            f"this model's parameters (e.g. AdamW(model.parameters(), lr=...)) after the model, "
            f"and again after replacing a submodule"
        )


def train(
    model: Module,
    optimizer,
    batches: Iterable,
    steps: int,
    *,
    task: Task | None = None,
    schedule=None,
    max_grad_norm: float | None = None,
    val_batches=None,
    eval_every: int | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    progress: bool = True,
    desc: str = "training",
) -> pd.DataFrame:
    """Train ``model`` for ``steps`` optimiser steps and return the history.

    Args:
        model: a tfscratch model; trained in train mode, its mode restored at the end.
        optimizer: a :mod:`tfscratch.optim` optimiser over ``model``'s parameters.
        batches: an iterable of batches with at least ``steps`` of them (e.g.
            :func:`tfscratch.batching.infinite_batches`); batch layout as ``task`` expects.
        steps: number of optimiser steps.
        task: how a batch becomes a loss (default :class:`LanguageModelTask`).
        schedule: optional learning-rate schedule with ``step()`` (e.g.
            :class:`tfscratch.optim.WarmupCosineSchedule`), advanced after every step.
        max_grad_norm: clip the global gradient norm to this value (None: no clipping; the
            norm is still measured and recorded).
        val_batches: a list of batches, or a function returning an iterable of them,
            evaluated every ``eval_every`` steps and after the last step.
        eval_every: steps between validations (default: ``steps // 10``, at least 1).
        checkpoint_path: keep-best checkpoint: whenever the validation loss reaches a new
            minimum the model is saved there (:func:`tfscratch.save`); needs ``val_batches``.
        progress: show a tqdm progress bar (a widget in Jupyter, text in a terminal).
        desc: the progress bar's label.

    Returns:
        A DataFrame, one row per step, columns ``step`` (1-based), ``lr`` (the rate that
        step used), ``train_loss`` (the batch's mean loss before the update), ``val_loss``
        (NaN where not evaluated), ``grad_norm`` (before clipping) and ``tokens_per_s``
        (scored targets per second of that step). ``history.attrs`` holds ``best_val_loss``
        and ``best_step`` when there was validation.

    Raises:
        FloatingPointError: the loss or the gradient norm became NaN or infinite; the
            message names the step and the learning rate.
    """
    steps = check_positive_int(steps, "steps")
    task = LanguageModelTask() if task is None else task
    validation = _validation_source(val_batches)
    if eval_every is None:
        eval_every = max(1, steps // 10)
    eval_every = check_positive_int(eval_every, "eval_every")
    if checkpoint_path is not None and validation is None:
        raise ValueError(
            f"checkpoint_path={os.fspath(checkpoint_path)!r} keeps the best model by validation "
            "loss, so it needs val_batches"
        )
    if max_grad_norm is not None and not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm={max_grad_norm!r} must be > 0 (or None: no clipping)")

    params = model.parameters()
    _check_optimizer_holds(optimizer, params)
    batch_stream = iter(batches)
    model.forget_forwards()  # a forward run before train() (to look) has no backward coming
    rows: list[tuple] = []
    best_val, best_step = math.inf, None
    with in_mode(model, training=True), progress_bar(steps, desc, progress) as bar:
        for step in range(1, steps + 1):
            try:
                batch = next(batch_stream)
            except StopIteration:
                raise ValueError(
                    f"batches ran out after {step - 1} of steps={steps} steps; pass more "
                    "batches, e.g. tfscratch.batching.infinite_batches(...)"
                ) from None
            lr = float(optimizer.lr)
            start = time.perf_counter()
            model.zero_grad()
            loss, n_targets = task(model, batch, backward=True)
            grad_norm = clip_grad_norm(params, math.inf if max_grad_norm is None else max_grad_norm)
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                what = "loss" if not math.isfinite(loss) else "gradient norm"
                value = loss if what == "loss" else grad_norm
                raise FloatingPointError(
                    f"training diverged at step {step}: the {what} became {value} (lr={lr:.3g}); "
                    "try a smaller learning rate, a longer warm-up or max_grad_norm"
                )
            optimizer.step()
            if schedule is not None:
                schedule.step()
            tokens_per_s = n_targets / max(time.perf_counter() - start, 1e-12)

            val_loss = math.nan
            if validation is not None and (step % eval_every == 0 or step == steps):
                val_loss = evaluate(model, validation(), task)
                if val_loss < best_val:
                    best_val, best_step = val_loss, step
                    if checkpoint_path is not None:
                        save(model, checkpoint_path)
            rows.append((step, lr, float(loss), val_loss, grad_norm, tokens_per_s))
            postfix = {"loss": f"{loss:.3f}"}
            if best_step is not None:
                postfix["val"] = f"{best_val:.3f}"
            bar.set_postfix(postfix, refresh=False)
            bar.update(1)

    history = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    if best_step is not None:
        history.attrs["best_val_loss"] = best_val
        history.attrs["best_step"] = best_step
    return history
