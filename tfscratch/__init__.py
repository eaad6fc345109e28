"""tfscratch: Transformers from scratch, in NumPy, every gradient visible.

Top level: the models, ``generate``, ``translate``, ``save``, ``load``, ``gradcheck``,
``no_grad`` (forwards that keep nothing for a backward, as ``torch.no_grad``).
Sub-modules: ``tfscratch.functional``, ``tfscratch.nn``, ``tfscratch.optim``,
``tfscratch.generation`` (``generate``, ``translate`` and their helpers), ``tfscratch.data``
(the data sets), ``tfscratch.batching`` (padding and batches), ``tfscratch.tokenizers``,
``tfscratch.train``, ``tfscratch.progress``, ``tfscratch.viz``, ``tfscratch.widgets``,
``tfscratch.timing``, ``tfscratch.baselines``, ``tfscratch.inspect`` (activations, hooks
and their gradients, notebook 15), ``tfscratch.doctor`` (``tfscratch.diagnose``, notebook 16), ``tfscratch.bugs`` (its zoo
of planted bugs), and ``tfscratch.tiled_attention`` (a teaching
module of notebook 13, not used by the models).

The numerical core imports only NumPy. The sub-modules that need pandas, matplotlib, tqdm
or ipywidgets are imported on first use (``tfscratch.viz`` works without an explicit
``import tfscratch.viz``), so ``import tfscratch`` stays fast. Importing changes nothing outside the package (no global
random state, allocator or warning settings).
"""

import importlib

from . import functional, nn, optim
from .checkpoint import load, save
from .generation import generate, translate
from .gradient_check import gradcheck
from .models import DecoderLM, EncoderClassifier, Seq2SeqTransformer
from .module import is_grad_enabled, no_grad

__version__ = "0.1.0"

_LAZY_SUBMODULES = {
    "baselines",
    "batching",
    "bugs",
    "data",
    "doctor",
    "inspect",
    "pretrained",
    "progress",
    "stats",
    "tiled_attention",
    "timing",
    "tokenizers",
    "train",
    "viz",
    "widgets",
}


def __getattr__(name: str):
    if name == "diagnose":  # tfscratch.doctor.diagnose; imported on first use (pandas)
        return importlib.import_module(".doctor", __name__).diagnose
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tfscratch' has no attribute {name!r}")


__all__ = [
    "DecoderLM",
    "EncoderClassifier",
    "Seq2SeqTransformer",
    "functional",
    "generate",
    "gradcheck",
    "is_grad_enabled",
    "load",
    "nn",
    "no_grad",
    "optim",
    "save",
    "translate",
]
