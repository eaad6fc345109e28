"""Specifications of tfscratch.train: the loop's history, schedule, clipping, errors,
keep-best checkpoint and evaluation. Tiny models, so the whole file runs in about a second."""

import math

import numpy as np
import pandas as pd
import pytest

import tfscratch
from tfscratch import DecoderLM
from tfscratch.batching import infinite_batches
from tfscratch.functional import IGNORE_INDEX, cross_entropy
from tfscratch.optim import SGD, Adam, WarmupCosineSchedule, clip_grad_norm, warmup_cosine
from tfscratch.train import HISTORY_COLUMNS, LanguageModelTask, evaluate, train

from .conftest import expect

VOCAB = 7
SEQ_LEN = 6


def tiny_model(seed=0, dropout=0.0):
    return DecoderLM(
        VOCAB, d_model=8, n_heads=2, n_layers=1, max_len=SEQ_LEN, dropout=dropout, seed=seed
    )


def lm_data(n_rows=16, seed=0):
    """Random token rows and their next tokens: ``(tokens, targets)``, both ``(n_rows, 6)``."""
    rows = np.random.default_rng(seed).integers(0, VOCAB, size=(n_rows, SEQ_LEN + 1))
    return rows[:, :-1], rows[:, 1:]


def stream(seed=0):
    return infinite_batches(lm_data(), batch_size=4, seed=seed)


def val_batches():
    tokens, targets = lm_data(n_rows=8, seed=1)
    return [(tokens[:4], targets[:4]), (tokens[4:], targets[4:])]


# --- the history table -------------------------------------------------------------------------
def test_history_has_one_row_per_step_and_the_documented_columns():
    model = tiny_model()
    history = train(
        model,
        Adam(model.parameters(), lr=1e-2),
        stream(),
        steps=7,
        val_batches=val_batches(),
        eval_every=3,
        progress=False,
    )
    assert tuple(history.columns) == HISTORY_COLUMNS
    assert len(history) == 7
    assert history["step"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    # validation every 3 steps and after the last one, NaN elsewhere
    assert history.loc[history["val_loss"].notna(), "step"].tolist() == [3, 6, 7]
    assert np.isfinite(history[["train_loss", "grad_norm", "tokens_per_s"]].to_numpy()).all()
    assert (history["tokens_per_s"] > 0).all()


def test_first_train_loss_is_the_loss_of_the_untrained_model_on_the_first_batch():
    model, reference = tiny_model(), tiny_model()
    first_batch = next(stream())
    expected = cross_entropy(reference(first_batch[0]), first_batch[1])
    history = train(model, Adam(model.parameters()), stream(), steps=2, progress=False)
    assert history["train_loss"].iloc[0] == pytest.approx(expected, rel=1e-6)


def test_lr_column_follows_the_warmup_cosine_schedule():
    model = tiny_model()
    optimizer = Adam(model.parameters(), lr=0.01)
    schedule = WarmupCosineSchedule(optimizer, warmup_steps=3, total_steps=10, min_lr=0.001)
    history = train(model, optimizer, stream(), steps=10, schedule=schedule, progress=False)
    expected = [warmup_cosine(step, 0.01, 3, 10, 0.001) for step in range(10)]
    np.testing.assert_allclose(history["lr"], expected, rtol=1e-12)
    assert optimizer.lr == pytest.approx(0.001)  # the schedule ended at min_lr


# --- gradient clipping ---------------------------------------------------------------------------
def test_clipping_records_the_norm_before_clipping_and_limits_the_update():
    max_norm = 1e-3
    model, reference = tiny_model(), tiny_model()
    # The pre-clip gradient norm of the first batch, measured on an identical model.
    tokens, targets = next(stream())
    LanguageModelTask()(reference, (tokens, targets))
    norm_before = clip_grad_norm(reference.parameters(), math.inf)
    assert norm_before > 100 * max_norm  # so clipping really has work to do

    before = [p.data.copy() for p in model.parameters()]
    # Plain SGD with lr=1 moves the weights by exactly the (clipped) gradient.
    history = train(
        model,
        SGD(model.parameters(), lr=1.0),
        stream(),
        steps=1,
        max_grad_norm=max_norm,
        progress=False,
    )
    update = np.sqrt(sum(np.sum((p.data - b) ** 2) for p, b in zip(model.parameters(), before)))
    assert history["grad_norm"].iloc[0] == pytest.approx(norm_before, rel=1e-5)
    assert update == pytest.approx(max_norm, rel=1e-3)


def test_without_clipping_the_update_is_the_whole_gradient():
    model = tiny_model()
    before = [p.data.copy() for p in model.parameters()]
    history = train(model, SGD(model.parameters(), lr=1.0), stream(), steps=1, progress=False)
    update = np.sqrt(sum(np.sum((p.data - b) ** 2) for p, b in zip(model.parameters(), before)))
    assert update == pytest.approx(history["grad_norm"].iloc[0], rel=1e-4)


# --- errors ------------------------------------------------------------------------------------
def test_nan_weights_raise_floating_point_error_at_step_1():
    model = tiny_model()
    model.tok_emb.weight.data[0, 0] = np.nan
    with pytest.raises(FloatingPointError, match=expect("step 1", "lr=")):
        train(model, Adam(model.parameters()), stream(), steps=5, progress=False)


class NanOnCall(LanguageModelTask):
    """A language-model task whose loss turns NaN on its n-th call (1-based)."""

    def __init__(self, nan_call):
        super().__init__()
        self.nan_call, self.calls = nan_call, 0

    def __call__(self, model, batch, backward=True):
        self.calls += 1
        loss, count = super().__call__(model, batch, backward)
        return (math.nan if self.calls == self.nan_call else loss), count


def test_divergence_error_names_the_step_where_the_loss_became_nan():
    model = tiny_model()
    model.eval()
    with pytest.raises(FloatingPointError, match=expect("step 4", "loss", "nan")):
        train(
            model, Adam(model.parameters()), stream(), steps=10, task=NanOnCall(4), progress=False
        )
    assert not model.training  # the mode is restored even when training fails


def test_running_out_of_batches_raises_value_error():
    tokens, targets = lm_data(n_rows=8)
    two_batches = [(tokens[:4], targets[:4]), (tokens[4:], targets[4:])]
    model = tiny_model()
    with pytest.raises(ValueError, match=expect("batches", "2", "steps=5")):
        train(model, Adam(model.parameters()), two_batches, steps=5, progress=False)


def test_one_shot_iterator_for_val_batches_raises_type_error():
    model = tiny_model()
    with pytest.raises(TypeError, match=expect("val_batches", "re-iterable")):
        train(
            model,
            Adam(model.parameters()),
            stream(),
            steps=2,
            val_batches=iter(val_batches()),
            progress=False,
        )


def test_a_function_returning_a_fresh_iterator_is_accepted_as_val_batches():
    model, twin = tiny_model(), tiny_model()
    as_list = train(
        model,
        Adam(model.parameters()),
        stream(),
        steps=4,
        val_batches=val_batches(),
        eval_every=2,
        progress=False,
    )
    as_function = train(
        twin,
        Adam(twin.parameters()),
        stream(),
        steps=4,
        val_batches=lambda: iter(val_batches()),
        eval_every=2,
        progress=False,
    )
    pd.testing.assert_series_equal(as_list["val_loss"], as_function["val_loss"])


def test_checkpoint_path_without_validation_is_refused(tmp_path):
    model = tiny_model()
    with pytest.raises(ValueError, match=expect("checkpoint_path", "val_batches")):
        train(
            model,
            Adam(model.parameters()),
            stream(),
            steps=2,
            checkpoint_path=tmp_path / "best.npz",
            progress=False,
        )


# --- keep-best checkpoint ------------------------------------------------------------------------
def test_checkpoint_holds_the_model_with_the_best_validation_loss(tmp_path):
    # Training data always continue 3 with 4; validation continues 3 with 5. The longer the
    # model trains, the surer it is of 4 and the worse its validation loss: the best
    # validation comes early, so the kept checkpoint is not simply the final model.
    tokens = np.full((4, SEQ_LEN), 3)
    train_batch = (tokens, np.full_like(tokens, 4))
    val = [(tokens, np.full_like(tokens, 5))]
    model = tiny_model()
    path = tmp_path / "best.npz"
    history = train(
        model,
        Adam(model.parameters(), lr=0.05),
        [train_batch] * 12,
        steps=12,
        val_batches=val,
        eval_every=2,
        checkpoint_path=path,
        progress=False,
    )
    val_losses = history["val_loss"].dropna()
    best_step = int(history.loc[val_losses.idxmin(), "step"])
    assert history.attrs["best_step"] == best_step
    assert history.attrs["best_val_loss"] == val_losses.min()
    assert best_step < 12 and val_losses.iloc[-1] > val_losses.min()

    restored = tfscratch.load(path)
    assert isinstance(restored, DecoderLM)
    assert evaluate(restored, val) == pytest.approx(history.attrs["best_val_loss"], rel=1e-6)
    assert evaluate(model, val) == pytest.approx(val_losses.iloc[-1], rel=1e-6)


# --- evaluate ----------------------------------------------------------------------------------
def test_evaluate_weights_batches_by_their_number_of_scored_targets():
    model = tiny_model()
    tokens, targets = lm_data(n_rows=2)
    targets = targets.copy()
    targets[0, 1:] = IGNORE_INDEX  # row 0 scores 1 target, row 1 scores all 6
    one_by_one = [(tokens[:1], targets[:1]), (tokens[1:], targets[1:])]
    together = cross_entropy(model(tokens), targets, ignore_index=IGNORE_INDEX)
    batch_means = [cross_entropy(model(x), y, ignore_index=IGNORE_INDEX) for x, y in one_by_one]
    assert evaluate(model, one_by_one) == pytest.approx(together, rel=1e-6)
    assert abs(together - np.mean(batch_means)) > 1e-3  # a plain mean of batches would differ


def test_evaluate_of_no_scored_targets_raises_value_error():
    tokens, _ = lm_data(n_rows=2)
    with pytest.raises(ValueError, match=expect("batches", "no scored targets")):
        evaluate(tiny_model(), [(tokens, np.full_like(tokens, IGNORE_INDEX))])


@pytest.mark.parametrize("training", [True, False])
def test_train_and_evaluate_restore_the_mode_of_every_submodule(training):
    model = tiny_model(dropout=0.1).train(training)
    train(
        model,
        Adam(model.parameters()),
        stream(),
        steps=2,
        val_batches=val_batches(),
        progress=False,
    )
    assert {module.training for module in model.modules()} == {training}
    evaluate(model, val_batches())
    assert {module.training for module in model.modules()} == {training}


def test_evaluate_runs_without_dropout():
    model = tiny_model(dropout=0.5).train()
    assert evaluate(model, val_batches()) == evaluate(model, val_batches())


# --- determinism -------------------------------------------------------------------------------
def run_seeded(seed):
    model = tiny_model(seed=seed, dropout=0.1)
    optimizer = Adam(model.parameters(), lr=0.01)
    schedule = WarmupCosineSchedule(optimizer, warmup_steps=2, total_steps=8)
    return train(
        model,
        optimizer,
        stream(seed=seed),
        steps=8,
        schedule=schedule,
        max_grad_norm=0.5,
        val_batches=val_batches(),
        eval_every=4,
        progress=False,
    )


def test_seeded_runs_give_identical_histories_apart_from_the_timing():
    first, second = run_seeded(0), run_seeded(0)
    pd.testing.assert_frame_equal(
        first.drop(columns="tokens_per_s"), second.drop(columns="tokens_per_s")
    )
    other = run_seeded(1)
    assert not np.allclose(first["train_loss"], other["train_loss"])


def test_evaluate_scores_a_large_batch_in_chunks_with_the_same_mean():
    """A whole test set passed as one batch is scored chunk_rows rows at a time: the mean
    over every target is the same, and the model keeps only the last chunk's attention."""
    model = tfscratch.DecoderLM(7, 8, 2, 1, max_len=6, seed=0, dtype=np.float64)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 7, (50, 5))
    targets = np.where(rng.random((50, 5)) < 0.3, -100, rng.integers(0, 7, (50, 5)))
    whole = evaluate(model, [(tokens, targets)], chunk_rows=50)
    assert model.blocks[0].attn.attn_weights.shape[0] == 50
    chunked = evaluate(model, [(tokens, targets)], chunk_rows=8)
    assert model.blocks[0].attn.attn_weights.shape[0] == 50 - 6 * 8  # the last chunk
    assert chunked == pytest.approx(whole, rel=1e-12)
    with pytest.raises(ValueError, match="chunk_rows"):
        evaluate(model, [(tokens, targets)], chunk_rows=0)


def test_the_progress_bar_starts_no_thread_and_leaves_tqdm_as_it_was():
    import threading

    from tqdm.auto import tqdm

    interval = tqdm.monitor_interval
    before = set(threading.enumerate())
    model = tiny_model()
    train(model, Adam(model.parameters()), stream(), steps=3, progress=True)
    assert set(threading.enumerate()) == before  # tqdm's monitor thread was not started
    assert tqdm.monitor_interval == interval  # a learner's own bars keep tqdm's default


def test_the_training_loop_imports_no_ipython():
    import ast
    from pathlib import Path

    import tfscratch.train

    tree = ast.parse(Path(tfscratch.train.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in {"IPython", "tqdm"}}


def test_train_refuses_an_optimiser_built_for_another_model():
    old = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    new = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    optimizer = Adam(old.parameters(), lr=0.01)
    batch = (np.ones((2, 4), dtype=np.int64), np.ones((2, 4), dtype=np.int64))
    with pytest.raises(
        ValueError, match=expect("optimizer holds", "does not have", "after the model")
    ):
        train(new, optimizer, iter([batch] * 3), steps=3, progress=False)


def test_train_refuses_an_optimiser_built_before_a_submodule_was_replaced():
    model = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    optimizer = Adam(model.parameters(), lr=0.01)
    model.blocks[0] = DecoderLM(11, 8, 2, 1, max_len=8, seed=1).blocks[0]
    batch = (np.ones((2, 4), dtype=np.int64), np.ones((2, 4), dtype=np.int64))
    with pytest.raises(ValueError, match=expect("replacing a submodule")):
        train(model, optimizer, iter([batch] * 3), steps=3, progress=False)


def test_train_accepts_an_optimiser_over_part_of_the_model():
    model = DecoderLM(11, 8, 2, 1, max_len=8, seed=0)
    head = model.blocks[0].parameters()
    optimizer = SGD(head, lr=0.1)
    before = model.tok_emb.weight.data.copy()
    batch = (np.ones((2, 4), dtype=np.int64), np.ones((2, 4), dtype=np.int64))
    train(model, optimizer, iter([batch] * 2), steps=2, progress=False)
    np.testing.assert_array_equal(model.tok_emb.weight.data, before)  # not in the optimiser
