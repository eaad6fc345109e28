"""``tfscratch.nn``: every module class, whichever file implements it (as ``torch.nn``)."""

from .attention import KVCache, MultiHeadAttention, merge_heads, split_heads
from .blocks import DecoderBlock, EncoderBlock
from .hooks import HookPoint
from .layers import (
    GELU,
    Dropout,
    Embedding,
    FeedForward,
    LayerNorm,
    Linear,
    ReLU,
    RMSNorm,
    SiLU,
)
from .lora import LoRALinear, add_lora, merge_lora
from .loss import CrossEntropyLoss
from .module import Module, Parameter
from .positional import (
    LearnedPositionalEmbedding,
    RotaryPositionalEmbedding,
    SinusoidalPositionalEncoding,
)

__all__ = [
    "GELU",
    "CrossEntropyLoss",
    "DecoderBlock",
    "Dropout",
    "Embedding",
    "EncoderBlock",
    "FeedForward",
    "HookPoint",
    "KVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "LoRALinear",
    "Module",
    "MultiHeadAttention",
    "Parameter",
    "RMSNorm",
    "ReLU",
    "RotaryPositionalEmbedding",
    "SiLU",
    "SinusoidalPositionalEncoding",
    "add_lora",
    "merge_heads",
    "merge_lora",
    "split_heads",
]
