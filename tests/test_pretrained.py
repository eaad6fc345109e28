"""Specification of tfscratch.pretrained: the names model the package ships.

The assets are made by ``benchmarks/train_names_long.py``; these tests hold them to what
``tfscratch.pretrained`` promises (its documented validation loss, the baselines it beats).
"""

import string
from importlib import resources

import numpy as np
import pytest

import tfscratch
from tfscratch.baselines import BigramModel, uniform_loss
from tfscratch.batching import lm_examples
from tfscratch.data import load_names, train_val_test_split
from tfscratch.pretrained import (
    NAMES_MODEL_FILE,
    NAMES_MODEL_VAL_LOSS,
    NAMES_TOKENIZER_FILE,
    load_names_model,
)
from tfscratch.tokenizers import CharTokenizer
from tfscratch.train import evaluate

# float32 sums over a different batching may move the last digits of the documented loss.
LOSS_TOLERANCE = 0.005


@pytest.fixture(scope="module")
def shipped():
    return load_names_model()


@pytest.fixture(scope="module")
def names_split():
    train, val, _ = train_val_test_split(load_names(), seed=0)
    return train, val


def test_pretrained_is_a_lazy_submodule_of_the_package():
    assert tfscratch.pretrained.load_names_model is load_names_model


def test_assets_are_small_package_files_readable_by_everyone():
    assets = resources.files("tfscratch") / "assets"
    for name in (NAMES_MODEL_FILE, NAMES_TOKENIZER_FILE):
        with resources.as_file(assets / name) as path:
            assert path.stat().st_mode & 0o444 == 0o444, f"{name} is not world-readable"
            assert path.stat().st_size < 1_000_000, f"{name} should stay under 1 MB"


def test_names_model_has_a_sane_config(shipped, names_split):
    model, tokenizer = shipped
    assert isinstance(model, tfscratch.DecoderLM)
    assert isinstance(tokenizer, CharTokenizer)
    assert tokenizer.vocab == list(string.ascii_lowercase)
    config = model.config
    assert config["vocab_size"] == tokenizer.vocab_size == 30
    longest = max(len(name) for names in names_split for name in names)
    assert config["max_len"] == longest + 1, "room for <bos> and the longest name"
    assert config["dtype"] == "float32"
    assert config["d_model"] % config["n_heads"] == 0
    # The config records the dropout it was trained with; dropout acts only in train mode.
    assert 0.0 <= config["dropout"] < 0.5
    assert not model.training, "a loaded model is returned in eval mode"


def test_each_call_returns_a_fresh_model(shipped):
    model, _ = shipped
    other, _ = load_names_model()
    other.tok_emb.weight.data[...] = 0.0
    assert np.abs(model.tok_emb.weight.data).max() > 0


def exact_length_batches(names, tokenizer):
    """One batch per name length, each exactly as wide as its names: no padding to compute."""
    by_length = {}
    for name in names:
        by_length.setdefault(len(name), []).append(name)
    return [lm_examples(group, tokenizer, length + 1) for length, group in by_length.items()]


def test_validation_loss_is_the_documented_one_and_beats_the_baselines(shipped, names_split):
    model, tokenizer = shipped
    train_names, val_names = names_split
    val_batches = exact_length_batches(val_names, tokenizer)
    # evaluate() weights each batch by its targets: the mean over every character of val.
    val_loss = evaluate(model, val_batches)
    X_train, Y_train = lm_examples(train_names, tokenizer, model.max_len)
    bigram = BigramModel.fit(X_train, Y_train, tokenizer.vocab_size)
    bigram_loss = np.average(
        [bigram.loss(X, Y) for X, Y in val_batches], weights=[X.size for X, _ in val_batches]
    )
    assert val_loss == pytest.approx(NAMES_MODEL_VAL_LOSS, abs=LOSS_TOLERANCE)
    assert val_loss < bigram_loss - 0.2 < uniform_loss(tokenizer.vocab_size)


def test_sampled_names_are_names_and_deterministic(shipped):
    model, tokenizer = shipped

    def sample(seed):
        ids = tfscratch.generate(
            model, [tokenizer.bos_id], model.max_len - 1, stop_token=tokenizer.eos_id, seed=seed
        )
        return ids, tokenizer.decode(ids)

    samples = [sample(seed) for seed in range(8)]
    assert samples == [sample(seed) for seed in range(8)]
    names = [name for _, name in samples]
    assert all(name and set(name) <= set(string.ascii_lowercase) for name in names), names
    # A trained model ends its names: most samples stop with <eos> well before max_len.
    assert sum(ids[-1] == tokenizer.eos_id for ids, _ in samples) >= 6
    assert len(set(names)) >= 6, names
