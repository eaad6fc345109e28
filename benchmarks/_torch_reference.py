"""The PyTorch yardstick: tfscratch's ``DecoderLM`` written again in plain ``torch.nn``.

Same architecture as ``tfscratch.DecoderLM(norm="pre", pos="learned", activation="gelu",
tie_weights=True)``: token + learned position embeddings, pre-LN blocks (causal self-attention
with one fused Q/K/V projection, tanh-GELU feed-forward), a final LayerNorm and an output layer
tied to the token embedding. :func:`copy_weights` loads a tfscratch model's weights, so the
benchmarks can check that both compute the same logits before timing them.

A second flavour, ``attention="nn.MultiheadAttention"``, builds each block's attention from
``torch.nn.MultiheadAttention`` (the module a PyTorch user reaches for first) instead of
``F.scaled_dot_product_attention`` on a hand-split fused projection; it is used for training
only (that module has no KV cache).

Generation uses a KV cache written by hand (preallocated ``(B, H, max_len, d_head)`` buffers,
like ``tfscratch.attention.KVCache``), run under ``torch.inference_mode()``.

Only the benchmarks import this file: the tfscratch package never imports torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class TorchKVCache:
    """Keys and values of one layer, in buffers allocated once at ``max_len``."""

    def __init__(self, max_len: int):
        self.max_len = max_len
        self.length = 0
        self.keys = None  # (B, H, max_len, d_head) once the first step arrives
        self.values = None

    def append(self, keys: torch.Tensor, values: torch.Tensor):
        """Add ``(B, H, T_new, d_head)``; return views of every cached position."""
        if self.keys is None:
            B, H, _, d_head = keys.shape
            self.keys = keys.new_empty((B, H, self.max_len, d_head))
            self.values = values.new_empty((B, H, self.max_len, d_head))
        stop = self.length + keys.shape[2]
        self.keys[:, :, self.length : stop] = keys
        self.values[:, :, self.length : stop] = values
        self.length = stop
        return self.keys[:, :, :stop], self.values[:, :, :stop]


class TorchDecoderBlock(nn.Module):
    """Pre-LN GPT block: ``x + attn(ln1(x))``, then ``x + ffn(ln2(x))``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)  # Q, K and V in one matmul
        self.out_proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def attention(self, h: torch.Tensor, cache: TorchKVCache | None) -> torch.Tensor:
        B, T, D = h.shape
        # (B, T, 3D) -> three (B, H, T, d_head) views, no copy
        q, k, v = self.qkv(h).view(B, T, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        offset = 0
        if cache is not None:
            offset = cache.length
            k, v = cache.append(k, v)
        if offset == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif T == 1:  # one new query may see every cached key: no mask needed
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            allowed = torch.ones(T, offset + T, dtype=torch.bool).tril(diagonal=offset)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, D))

    def forward(self, x: torch.Tensor, cache: TorchKVCache | None = None) -> torch.Tensor:
        x = x + self.attention(self.ln1(x), cache)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class TorchMultiheadAttentionBlock(TorchDecoderBlock):
    """The same block with ``torch.nn.MultiheadAttention`` (fused in-projection inside)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__(d_model, n_heads, d_ff)
        del self.qkv, self.out_proj
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def attention(self, h: torch.Tensor, cache: TorchKVCache | None) -> torch.Tensor:
        if cache is not None:
            raise ValueError("nn.MultiheadAttention has no KV cache: use the sdpa reference")
        T = h.shape[1]
        blocked = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # True = blocked
        out, _ = self.mha(h, h, h, attn_mask=blocked, need_weights=False, is_causal=True)
        return out


ATTENTION_FLAVOURS = {
    "sdpa": TorchDecoderBlock,
    "nn.MultiheadAttention": TorchMultiheadAttentionBlock,
}


class TorchDecoderLM(nn.Module):
    """``tokens (B, T) -> logits (B, T, vocab_size)``; ``caches`` for cached generation."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        max_len: int,
        attention: str = "sdpa",
    ):
        super().__init__()
        self.max_len = max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Parameter(torch.zeros(max_len, d_model))
        block = ATTENTION_FLAVOURS[attention]
        self.blocks = nn.ModuleList(block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)

    def new_kv_cache(self) -> list[TorchKVCache]:
        return [TorchKVCache(self.max_len) for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, caches: list[TorchKVCache] | None = None):
        offset = caches[0].length if caches else 0
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb[offset : offset + T]
        for index, block in enumerate(self.blocks):
            x = block(x, caches[index] if caches else None)
        # tied weights: the token embedding scores the output
        return F.linear(self.ln_f(x), self.tok_emb.weight)


def from_tfscratch(model, attention: str = "sdpa") -> TorchDecoderLM:
    """A :class:`TorchDecoderLM` with the config and weights of a tfscratch ``DecoderLM``;
    ``attention`` is ``"sdpa"`` or ``"nn.MultiheadAttention"``."""
    config = model.config
    expected = {"pos": "learned", "norm": "pre", "activation": "gelu", "tie_weights": True}
    different = {key: config[key] for key in expected if config[key] != expected[key]}
    if different:
        raise ValueError(f"the PyTorch reference only mirrors {expected}, got {different}")
    reference = TorchDecoderLM(
        config["vocab_size"],
        config["d_model"],
        config["n_heads"],
        config["n_layers"],
        config["d_ff"],
        config["max_len"],
        attention,
    )
    copy_weights(model, reference)
    return reference


def copy_weights(model, reference: TorchDecoderLM) -> None:
    """Load tfscratch weights (``Linear`` stores ``(d_in, d_out)``; torch the transpose)."""
    params = {name: p.data for name, p in model.named_parameters().items()}

    def put(tensor: torch.Tensor, array: np.ndarray) -> None:
        with torch.no_grad():
            tensor.copy_(torch.from_numpy(np.ascontiguousarray(array)))

    put(reference.tok_emb.weight, params["tok_emb.weight"])
    put(reference.pos_emb, params["pos_emb.weight"])
    put(reference.ln_f.weight, params["ln_f.gamma"])
    put(reference.ln_f.bias, params["ln_f.beta"])
    for index, block in enumerate(reference.blocks):
        prefix = f"blocks.{index}."
        for ours, theirs in (("ln1", block.ln1), ("ln2", block.ln2)):
            put(theirs.weight, params[prefix + ours + ".gamma"])
            put(theirs.bias, params[prefix + ours + ".beta"])
        attn = prefix + "attn."
        # nn.MultiheadAttention keeps the fused projection as in_proj_weight / in_proj_bias
        fused = block.mha if hasattr(block, "mha") else None
        qkv_weight = fused.in_proj_weight if fused is not None else block.qkv.weight
        qkv_bias = fused.in_proj_bias if fused is not None else block.qkv.bias
        out_proj = fused.out_proj if fused is not None else block.out_proj
        put(
            qkv_weight,
            np.concatenate(
                [params[attn + f"{name}.weight"] for name in ("q_proj", "k_proj", "v_proj")], axis=1
            ).T,
        )
        put(
            qkv_bias,
            np.concatenate(
                [params[attn + f"{name}.bias"] for name in ("q_proj", "k_proj", "v_proj")]
            ),
        )
        for ours, theirs in (
            (attn + "out_proj", out_proj),
            (prefix + "ffn.fc1", block.fc1),
            (prefix + "ffn.fc2", block.fc2),
        ):
            put(theirs.weight, params[ours + ".weight"].T)
            put(theirs.bias, params[ours + ".bias"])
