"""Small trained models that ship inside the package, so a notebook can use one at once.

:func:`load_names_model` returns a character-level :class:`~tfscratch.DecoderLM` trained on
US baby names and the :class:`~tfscratch.tokenizers.CharTokenizer` it reads. Both files were
made by the committed script ``benchmarks/train_names_long.py`` with its default options, the
recipe of issue 22 (d_model=64, 4 heads, 4 layers, 203,008 parameters; dropout 0.2; 70,000
AdamW steps of 64 names, weight decay 0.01, warm-up + cosine, gradient clipping; seeded;
37 minutes of training at one thread) on the training part of
``train_val_test_split(load_names(), seed=0)``; re-running it rebuilds them, and its curve and
report are in ``benchmarks/names_lm_run/``. Its loss on that split's validation names is
:data:`NAMES_MODEL_VAL_LOSS` = 1.939 nats per character (test 1.938, train 1.809; the ``<eos>``
that ends a name included), against ``ln 30 = 3.40`` for a uniform guess and 2.46 for a bigram
model. makemore's 200K-parameter Transformer reports about 1.92 on its own list of names (32,033
names of 2018, 1,000 test names; ours are the 29,910 of 2017): this model comes within 0.02 of
it but does not reach it (``benchmarks/README.md`` says what was tried and what limits it).

The model is read with :func:`tfscratch.load` (an ``.npz`` of plain arrays and a JSON config:
nothing is unpickled) and the tokenizer from a small JSON file.
"""

from __future__ import annotations

from importlib import resources

from .checkpoint import load
from .models import DecoderLM
from .tokenizers import CharTokenizer

__all__ = ["NAMES_MODEL_VAL_LOSS", "load_names_model"]

NAMES_MODEL_FILE = "names_lm.npz"
NAMES_TOKENIZER_FILE = "names_tokenizer.json"

NAMES_MODEL_VAL_LOSS = 1.939
"""Validation loss (nats per character) of the shipped names model, as measured by
``benchmarks/train_names_long.py`` on the validation part of
``train_val_test_split(load_names(), seed=0)``."""


def load_names_model() -> tuple[DecoderLM, CharTokenizer]:
    """The shipped names model and its tokenizer, ready to sample from.

    Returns:
        ``(model, tokenizer)``: a float32 :class:`~tfscratch.DecoderLM` in eval mode
        (``model.max_len`` = longest name + 1 = 16 positions: ``<bos>`` and up to 15
        letters) and the :class:`~tfscratch.tokenizers.CharTokenizer` of its 30 ids
        (4 specials and a-z). Each call builds a fresh model, so training or changing it
        never alters what the next call returns.

    Example::

        model, tokenizer = load_names_model()
        ids = tfscratch.generate(model, [tokenizer.bos_id], 15, stop_token=tokenizer.eos_id,
                                 seed=0)
        tokenizer.decode(ids)
    """
    assets = resources.files(__package__) / "assets"
    # as_file gives a real file path even when the package is imported from a zip.
    with resources.as_file(assets / NAMES_MODEL_FILE) as model_path:
        model = load(model_path)
    with resources.as_file(assets / NAMES_TOKENIZER_FILE) as tokenizer_path:
        tokenizer = CharTokenizer.load(tokenizer_path)
    if not isinstance(model, DecoderLM) or model.vocab_size != tokenizer.vocab_size:
        raise ValueError(
            f"the shipped assets do not match: {type(model).__name__} with vocab_size="
            f"{getattr(model, 'vocab_size', None)} and a tokenizer of {tokenizer.vocab_size} "
            "ids; re-run benchmarks/train_names_long.py"
        )
    model.eval()
    return model, tokenizer
