"""tfscratch: Transformers from scratch, in NumPy, every gradient visible.

Top level: the models, ``generate``, ``translate``, ``save``, ``load``, ``gradcheck``.
Sub-modules: ``tfscratch.functional``, ``tfscratch.nn``, ``tfscratch.optim``,
``tfscratch.data``, ``tfscratch.tokenizers``, ``tfscratch.train``, ``tfscratch.viz``.
"""

from . import functional, nn
from ._memory import tune_malloc
from .checkpoint import load, save
from .generate import generate, translate
from .gradcheck import gradcheck
from .models import DecoderLM, EncoderClassifier, Seq2SeqTransformer

__version__ = "0.1.0"

tune_malloc()

__all__ = [
    "DecoderLM", "EncoderClassifier", "Seq2SeqTransformer", "functional", "generate",
    "gradcheck", "load", "nn", "save", "translate",
]
