"""Three models assembled from the blocks, minGPT-style: one class per model, a plain
``config`` dict that rebuilds it.

* :class:`DecoderLM`: a GPT (token + position embeddings, causal decoder blocks, LM head).
* :class:`Seq2SeqTransformer`: the encoder-decoder of "Attention Is All You Need".
* :class:`EncoderClassifier`: an encoder with mean or [CLS] pooling and a linear head.

Positions (``pos=``): ``"learned"`` or ``"sinusoidal"`` are added to the token embeddings
in the stem; ``"rope"`` (rotary, notebook 12) adds nothing there and instead rotates the
queries and keys of every *self*-attention by their positions (the encoder's too; never
cross-attention, whose queries and keys count positions in two different sequences). The
models share one :class:`~tfscratch.positional.RotaryPositionalEmbedding` between their
layers as ``model.rotary`` (None otherwise).

What the three share is written once below: the argument checks and the ``config`` entries
of the hyperparameters they have in common, the embedding stem (token embedding + positions
+ dropout) with its backward, and the vocabulary head (tied or not) with its backward.

Weights start as GPT-2's do, except one detail: every linear map and embedding drawn from
N(0, 0.02²) (std 0.02), biases zero, LayerNorm the identity. Small initial weights give
near-uniform first predictions, so the first loss is close to ln(vocab_size). (GPT-2 also scales the
weights of the layers that write into the residual stream, ``out_proj`` and ``fc2``, by
1/sqrt(2 n_layers); these models do not, which matters little at four layers.)
"""

from __future__ import annotations

import numpy as np

from .attention import KVCache
from .blocks import NORM_PLACEMENTS, DecoderBlock, EncoderBlock
from .checks import (
    check_choice,
    check_divisible,
    check_length,
    check_mask,
    check_positive_int,
    check_probability,
    check_token_ids,
    describe,
)
from .hooks import HookPoint
from .layers import ACTIVATIONS, Dropout, Embedding, LayerNorm, Linear
from .module import Module, Parameter, check_dtype, make_rng
from .positional import POSITIONAL_ENCODINGS, RotaryPositionalEmbedding

INIT_STD = 0.02
POSITIONS = (*POSITIONAL_ENCODINGS, "rope")  # the pos= choices of every model


TOKEN_TABLES = ("tok_emb.weight", "src_emb.weight", "tgt_emb.weight")


def _init_gpt2(model: Module, rng: np.random.Generator, scale_embeddings: bool = False) -> None:
    """N(0, 0.02²) (std 0.02, GPT-2's) for weight matrices and embedding tables, zeros for
    biases; GPT-2's extra 1/sqrt(2 n_layers) on the residual projections is not applied.

    With ``scale_embeddings`` the token tables are drawn N(0, 1/d_model) instead (as the
    tensor2tensor code does), so that after the forward's ``sqrt(d_model)`` scaling (the
    paper's §3.4, which gives no initialisation) their entries are of order 1, as the
    position vectors are.
    """
    token_std = 1.0 / np.sqrt(model.config["d_model"]) if scale_embeddings else INIT_STD
    for name, parameter in model.named_parameters().items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "bias":
            parameter.data[...] = 0
        elif leaf in ("weight", "cls_token"):
            std = token_std if name in TOKEN_TABLES else INIT_STD
            parameter.data[...] = rng.normal(0.0, std, parameter.shape)


def _shared_config(
    *,
    d_model,
    n_heads,
    d_ff,
    max_len,
    dropout,
    pos,
    norm,
    activation,
    dtype,
    scale_embeddings=False,
    positions=POSITIONS,
) -> dict:
    """Check the hyperparameters every model has; return their ``config`` entries, with
    ``d_ff`` filled in (4 d_model by default) and ``dtype`` as its name."""
    check_positive_int(d_model, "d_model")
    check_positive_int(n_heads, "n_heads")
    check_divisible(d_model, n_heads)
    if pos == "rope" and (d_model // n_heads) % 2:
        raise ValueError(
            f"pos='rope' rotates pairs of features in each head, so d_head must be even; "
            f"d_model={d_model} / n_heads={n_heads} gives d_head={d_model // n_heads}"
        )
    d_ff = 4 * d_model if d_ff is None else check_positive_int(d_ff, "d_ff")
    return dict(
        d_model=d_model,
        n_heads=n_heads,
        d_ff=d_ff,
        max_len=check_positive_int(max_len, "max_len"),
        # checked here, under the model's own argument name, before any Dropout(p) is built
        dropout=check_probability(dropout, "dropout"),
        pos=check_choice(pos, "pos", positions),
        norm=check_choice(norm, "norm", NORM_PLACEMENTS),
        activation=check_choice(activation, "activation", tuple(ACTIVATIONS)),
        dtype=check_dtype(dtype).name,
        scale_embeddings=bool(scale_embeddings),
    )


def _block_options(config: dict, rng, rotary: RotaryPositionalEmbedding | None) -> dict:
    """The keyword arguments every block of a model is built with."""
    return dict(
        rotary=rotary,
        d_ff=config["d_ff"],
        dropout=config["dropout"],
        norm=config["norm"],
        activation=config["activation"],
        rng=rng,
        dtype=np.dtype(config["dtype"]),
    )


def _final_norm(config: dict) -> LayerNorm | None:
    """Pre-norm leaves the residual stream un-normalised, so one last LayerNorm is needed."""
    return LayerNorm(config["d_model"], dtype=config["dtype"]) if config["norm"] == "pre" else None


class EmbeddingStem:
    """Token embedding (times ``sqrt(d_model)`` with ``scale_embeddings``) + positions +
    dropout, the first layer of every model, and its backward.

    Not a Module: it holds the model's own ``Embedding``, positional encoding (None for
    ``pos="none"`` and ``pos="rope"``, which add nothing here) and ``Dropout``, which stay the
    model's attributes, so the parameter names (``tok_emb.weight``, ``pos_emb.weight``, ...)
    are those of the model.

    Args:
        tokens: the token ``Embedding`` ``(vocab_size, D)``.
        positions: the positional encoding module, or None.
        dropout: the ``Dropout`` applied to the sum.
        scale: multiply the token vectors by ``sqrt(D)`` (``scale_embeddings``).
        hook: the model's ``hook_embed``, a :class:`~tfscratch.hooks.HookPoint` the token
            vectors pass through (a private one when not given).
    """

    def __init__(
        self,
        tokens: Embedding,
        positions: Module | None,
        dropout: Dropout,
        scale: bool = False,
        hook: HookPoint | None = None,
    ):
        self.tokens, self.positions, self.dropout = tokens, positions, dropout
        self.hook = HookPoint() if hook is None else hook
        # "we multiply those weights by sqrt(d_model)" (Attention Is All You Need, 3.4)
        self.scale = float(np.sqrt(tokens.dim)) if scale else None

    def __call__(self, token_ids: np.ndarray, offset: int = 0, prefix=None) -> np.ndarray:
        """Embed token ids.

        Args:
            token_ids: int ``(B, T)``.
            offset: position of the first token (the length of a KV cache).
            prefix: ``(B, P, D)`` vectors (a [CLS] token) put in front of the token vectors
                before the positions are added, or None.

        Returns:
            ``(B, P + T, D)``.
        """
        x = self.tokens(token_ids)
        if self.scale is not None:
            x = x * np.asarray(self.scale, dtype=x.dtype)
        x = self.hook(x)
        if prefix is not None:
            x = np.concatenate([prefix, x], axis=1)
        if self.positions is not None:
            x = self.positions(x, offset=offset)
        return self.dropout(x)

    def backward(self, grad: np.ndarray, prefix_length: int = 0) -> np.ndarray | None:
        """Accumulate the embeddings' gradients.

        Args:
            grad: dL/d(output), ``(B, P + T, D)``.
            prefix_length: ``P``, the number of prefix vectors of the forward.

        Returns:
            the prefix's gradient ``(B, P, D)``, or None without a prefix.
        """
        grad = self.dropout.backward(grad)
        if self.positions is not None:
            grad = self.positions.backward(grad)  # x + P: dx = grad (and learned P gathers it)
        token_grad = self.hook.backward(grad[:, prefix_length:])
        if self.scale is not None:
            token_grad = token_grad * np.asarray(self.scale, dtype=token_grad.dtype)
        self.tokens.backward(token_grad)
        return grad[:, :prefix_length] if prefix_length else None


def _make_positions(pos: str, max_len: int, d_model: int, rng, dtype) -> Module | None:
    """The additive positions of the stem (None when nothing is added)."""
    if pos in ("none", "rope"):
        return None
    if pos == "learned":
        return POSITIONAL_ENCODINGS[pos](max_len, d_model, rng=rng, dtype=dtype)
    return POSITIONAL_ENCODINGS[pos](max_len, d_model, dtype=dtype)


def _make_rotary(config: dict, max_len: int) -> RotaryPositionalEmbedding | None:
    """One rotary table for every self-attention of a ``pos="rope"`` model, else None."""
    if config["pos"] != "rope":
        return None
    d_head = config["d_model"] // config["n_heads"]
    return RotaryPositionalEmbedding(max_len, d_head, dtype=config["dtype"])


def _check_token_batch(tokens, name: str, vocab_size: int, max_len: int, offset: int = 0):
    tokens = check_token_ids(tokens, name, vocab_size, ndim=2)
    if tokens.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (shape {tokens.shape}); expected (B>=1, T)")
    if tokens.shape[1] == 0:
        raise ValueError(f"{name} has no positions (shape {tokens.shape}); expected (B, T>=1)")
    check_length(tokens.shape[1], max_len, f"{name} length", offset=offset)
    return tokens


def _check_grad_logits(grad_logits, expected_shape: tuple[int, ...]) -> np.ndarray:
    """``backward``'s input must have the shape of the logits the last ``forward`` returned."""
    if not isinstance(grad_logits, np.ndarray) or not np.issubdtype(grad_logits.dtype, np.floating):
        raise TypeError(f"grad_logits must be a float numpy array, got {describe(grad_logits)}")
    if grad_logits.shape != expected_shape:
        raise ValueError(
            f"grad_logits has shape {grad_logits.shape}; expected {expected_shape}, the shape "
            "of the logits of the last forward"
        )
    return grad_logits


def _vocab_logits(h: np.ndarray, lm_head: Linear | None, embedding: Embedding) -> np.ndarray:
    """Scores over the vocabulary for the final hidden states ``h`` ``(B, T, D)``.

    With ``lm_head=None`` the weights are tied: ``h @ E^T`` reuses the token embedding ``E``,
    so the same vector represents a token going in and scores it coming out.
    """
    if lm_head is not None:
        return lm_head(h)
    D = h.shape[-1]
    return (h.reshape(-1, D) @ embedding.weight.data.T).reshape(h.shape[:-1] + (-1,))


def _vocab_logits_backward(
    grad_logits: np.ndarray, h: np.ndarray, lm_head: Linear | None, embedding: Embedding
) -> np.ndarray:
    """Backward of :func:`_vocab_logits`: accumulates the head's (or ``E``'s) gradient and
    returns ``dL/dh``."""
    if lm_head is not None:
        return lm_head.backward(grad_logits)
    D, V = h.shape[-1], grad_logits.shape[-1]
    grad_rows = grad_logits.reshape(-1, V)
    embedding.weight.grad += grad_rows.T @ h.reshape(-1, D)
    return (grad_rows @ embedding.weight.data).reshape(h.shape)


class DecoderLM(Module):
    """A GPT: ``tokens (B, T) -> logits (B, T, vocab_size)``, each position predicting the next.

    Parameters: ``tok_emb``, ``pos_emb`` (learned only), ``blocks.{i}``, ``ln_f`` (pre-norm
    only), ``lm_head`` (only with ``tie_weights=False``). With ``pos="rope"`` the blocks'
    attention rotates queries and keys (``rotary``; the KV cache's length is its offset).

    ``attn_only=True`` builds blocks without the feed-forward sublayer (``ln1`` and ``attn``
    only), the attention-only models of the circuits papers (notebook 15).
    ``scale_embeddings=True`` multiplies the token rows by ``sqrt(d_model)`` before the
    positions are added, as the original paper does (§3.4), and draws the token table
    N(0, 1/d_model) (as the tensor2tensor code), so both parts are of order 1 (all three
    models take it).

    Args:
        vocab_size: the number of token ids (the tokenizer's ``vocab_size``).
        d_model: the width D of every position's vector.
        n_heads: attention heads per layer; must divide ``d_model``.
        n_layers: the number of decoder blocks.
        d_ff: the feed-forward width (default ``4 * d_model``).
        max_len: the longest sequence the model reads (the position tables' length).
        dropout: drop probability of the embeddings, attention weights, feed-forward activations and sublayer outputs
            (training mode only).
        pos: ``"learned"`` or ``"sinusoidal"`` (added to the token embeddings), or ``"rope"``
            (rotary: queries and keys of self-attention are rotated, notebook 12).
        norm: ``"pre"`` (LayerNorm before each sublayer, GPT-2) or ``"post"`` (after the
            residual addition, the original paper).
        activation: the feed-forward's non-linearity, ``"gelu"`` or ``"relu"``.
        tie_weights: score the vocabulary with the token embedding itself (``h @ E^T``)
            instead of a separate ``lm_head``.
        scale_embeddings: the paper's footing for token vectors (see above).
        attn_only: blocks without the feed-forward sublayer.
        seed: seed of the initial weights and the dropout masks (None: fresh randomness).
        dtype: ``np.float32`` (default) or ``np.float64`` (for gradient checks).

    ``model.config`` holds these arguments: ``DecoderLM(**model.config)`` rebuilds it.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int | None = None,
        max_len: int = 256,
        dropout: float = 0.0,
        pos: str = "learned",
        norm: str = "pre",
        activation: str = "gelu",
        tie_weights: bool = True,
        scale_embeddings: bool = False,
        attn_only: bool = False,
        seed: int | None = None,
        dtype=np.float32,
    ):
        self.config = dict(
            vocab_size=check_positive_int(vocab_size, "vocab_size"),
            n_layers=check_positive_int(n_layers, "n_layers"),
            tie_weights=bool(tie_weights),
            attn_only=bool(attn_only),
            seed=seed,
            **_shared_config(
                d_model=d_model, n_heads=n_heads, d_ff=d_ff, max_len=max_len, dropout=dropout,
                pos=pos, norm=norm, activation=activation, dtype=dtype,
                scale_embeddings=scale_embeddings,
            ),
        )  # fmt: skip
        config, rng = self.config, make_rng(seed)
        self.vocab_size, self.max_len, self.tie_weights = vocab_size, max_len, bool(tie_weights)
        self.tok_emb = Embedding(vocab_size, d_model, rng=rng, dtype=config["dtype"])
        self.hook_embed = HookPoint()  # the token vectors (B, T, D)
        self.pos_emb = _make_positions(pos, max_len, d_model, rng, config["dtype"])
        self.rotary = _make_rotary(config, max_len)
        self.emb_dropout = Dropout(dropout, rng=rng)
        self._embed = EmbeddingStem(
            self.tok_emb, self.pos_emb, self.emb_dropout, config["scale_embeddings"],
            self.hook_embed,
        )  # fmt: skip
        self.blocks = [
            DecoderBlock(
                d_model,
                n_heads,
                feed_forward=not attn_only,
                **_block_options(config, rng, self.rotary),
            )
            for _ in range(n_layers)
        ]
        self.ln_f = _final_norm(config)
        if self.ln_f is not None:
            self.hook_normalized = HookPoint()  # the final norm's output (B, T, D)
        self.lm_head = (
            None
            if tie_weights
            else Linear(d_model, vocab_size, bias=False, rng=rng, dtype=config["dtype"])
        )
        _init_gpt2(self, rng, config["scale_embeddings"])

    def new_kv_cache(self) -> list[KVCache]:
        """An empty cache, one :class:`KVCache` per block, for :func:`tfscratch.generate`."""
        return [KVCache(self.max_len) for _ in self.blocks]

    def forward(self, tokens: np.ndarray, kv_cache: list[KVCache] | None = None) -> np.ndarray:
        """Next-token scores for every position.

        Args:
            tokens: int ``(B, T)`` token ids, ``T <= max_len``.
            kv_cache: from :meth:`new_kv_cache`, or None. With it, ``tokens`` are the *new*
                positions only; they are placed after the ``kv_cache[0].length`` cached ones
                (the position offset), and their keys and values are appended.

        Returns:
            logits ``(B, T, vocab_size)``: position ``t`` scores the token after ``t``.
        """
        if kv_cache is not None and len(kv_cache) != len(self.blocks):
            raise ValueError(
                f"kv_cache has {len(kv_cache)} entries for a model of {len(self.blocks)} blocks; "
                "make it with this model's new_kv_cache()"
            )
        offset = kv_cache[0].length if kv_cache else 0
        tokens = _check_token_batch(tokens, "tokens", self.vocab_size, self.max_len, offset)
        x = self._embed(tokens, offset=offset)
        for index, block in enumerate(self.blocks):
            x = block(x, kv_cache=kv_cache[index] if kv_cache else None)
        if self.ln_f is not None:
            x = self.hook_normalized(self.ln_f(x))
        self.save_for_backward(h=x)
        return _vocab_logits(x, self.lm_head, self.tok_emb)

    def backward(self, grad_logits: np.ndarray) -> None:
        """Accumulate (``+=``) every parameter's gradient.

        Args:
            grad_logits: dL/dlogits ``(B, T, vocab_size)``, the shape of the last forward's
                logits (e.g. ``CrossEntropyLoss().backward()``).

        Returns:
            None: the tokens are integers, there is no input gradient.
        """
        self.check_ready_for_backward()
        _check_grad_logits(grad_logits, self._h.shape[:-1] + (self.vocab_size,))
        grad = _vocab_logits_backward(grad_logits, self._h, self.lm_head, self.tok_emb)
        if self.ln_f is not None:
            grad = self.ln_f.backward(self.hook_normalized.backward(grad))
        for block in reversed(self.blocks):
            grad = block.backward(grad)
        self._embed.backward(grad)


class Seq2SeqTransformer(Module):
    """Encoder-decoder: ``(src (B, S), tgt_in (B, T)) -> logits (B, T, tgt_vocab_size)``.

    Parameters: ``src_emb``, ``tgt_emb``, ``src_pos``/``tgt_pos`` (learned only),
    ``encoder_blocks.{i}``, ``encoder_ln`` and ``decoder_ln`` (pre-norm only),
    ``decoder_blocks.{i}`` (with ``cross_attn``), ``lm_head`` (with ``tie_weights=False``).
    With ``pos="rope"`` the encoder's and the decoder's self-attention rotate queries and keys
    (one shared ``rotary``); cross-attention does not.

    Args:
        src_vocab_size: the number of source token ids.
        tgt_vocab_size: the number of target token ids.
        d_model: the width D of every position's vector.
        n_heads: attention heads per layer; must divide ``d_model``.
        n_encoder_layers: encoder blocks.
        n_decoder_layers: decoder blocks (each with cross-attention over the encoder's output).
        d_ff: the feed-forward width (default ``4 * d_model``).
        max_len: the longest sequence the model reads (the position tables' length).
        dropout: drop probability of the embeddings, attention weights, feed-forward activations and sublayer outputs
            (training mode only).
        pos: ``"learned"`` or ``"sinusoidal"`` (added to the token embeddings), or ``"rope"``
            (rotary: queries and keys of self-attention are rotated, notebook 12).
        norm: ``"pre"`` (LayerNorm before each sublayer, GPT-2) or ``"post"`` (after the
            residual addition, the original paper).
        activation: the feed-forward's non-linearity, ``"gelu"`` or ``"relu"``.
        tie_weights: score the target vocabulary with ``tgt_emb`` itself.
        scale_embeddings: multiply token vectors by ``sqrt(d_model)`` (the paper's footing).
        seed: seed of the initial weights and the dropout masks.
        dtype: ``np.float32`` (default) or ``np.float64``.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int,
        n_heads: int,
        n_encoder_layers: int,
        n_decoder_layers: int,
        d_ff: int | None = None,
        max_len: int = 64,
        dropout: float = 0.0,
        pos: str = "sinusoidal",
        norm: str = "pre",
        activation: str = "gelu",
        tie_weights: bool = True,
        scale_embeddings: bool = False,
        seed: int | None = None,
        dtype=np.float32,
    ):
        self.config = dict(
            src_vocab_size=check_positive_int(src_vocab_size, "src_vocab_size"),
            tgt_vocab_size=check_positive_int(tgt_vocab_size, "tgt_vocab_size"),
            n_encoder_layers=check_positive_int(n_encoder_layers, "n_encoder_layers"),
            n_decoder_layers=check_positive_int(n_decoder_layers, "n_decoder_layers"),
            tie_weights=bool(tie_weights),
            seed=seed,
            **_shared_config(
                d_model=d_model, n_heads=n_heads, d_ff=d_ff, max_len=max_len, dropout=dropout,
                pos=pos, norm=norm, activation=activation, dtype=dtype,
                scale_embeddings=scale_embeddings,
            ),
        )  # fmt: skip
        config, rng = self.config, make_rng(seed)
        dtype = config["dtype"]
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.max_len = max_len
        self.src_emb = Embedding(src_vocab_size, d_model, rng=rng, dtype=dtype)
        self.src_pos = _make_positions(pos, max_len, d_model, rng, dtype)
        self.tgt_emb = Embedding(tgt_vocab_size, d_model, rng=rng, dtype=dtype)
        self.tgt_pos = _make_positions(pos, max_len, d_model, rng, dtype)
        self.rotary = _make_rotary(config, max_len)
        self.src_dropout = Dropout(dropout, rng=rng)
        self.tgt_dropout = Dropout(dropout, rng=rng)
        self._embed_src = EmbeddingStem(
            self.src_emb, self.src_pos, self.src_dropout, config["scale_embeddings"]
        )
        self._embed_tgt = EmbeddingStem(
            self.tgt_emb, self.tgt_pos, self.tgt_dropout, config["scale_embeddings"]
        )
        self.encoder_blocks = [
            EncoderBlock(d_model, n_heads, **_block_options(config, rng, self.rotary))
            for _ in range(n_encoder_layers)
        ]
        self.encoder_ln = _final_norm(config)
        self.decoder_blocks = [
            DecoderBlock(
                d_model, n_heads, cross_attention=True, **_block_options(config, rng, self.rotary)
            )
            for _ in range(n_decoder_layers)
        ]
        self.decoder_ln = _final_norm(config)
        self.lm_head = (
            None
            if tie_weights
            else Linear(d_model, tgt_vocab_size, bias=False, rng=rng, dtype=dtype)
        )
        _init_gpt2(self, rng, config["scale_embeddings"])

    def encode(self, src: np.ndarray, src_pad_mask: np.ndarray | None = None) -> np.ndarray:
        """Run the encoder.

        Args:
            src: int ``(B, S)`` source token ids.
            src_pad_mask: bool ``(B, S)``, True where ``src`` is padding, or None.

        Returns:
            memory ``(B, S, d_model)``, what the decoder's cross-attention reads.
        """
        src = _check_token_batch(src, "src", self.src_vocab_size, self.max_len)
        check_mask(src_pad_mask, "src_pad_mask", src.shape, broadcast=False)
        x = self._embed_src(src)
        for block in self.encoder_blocks:
            x = block(x, key_padding_mask=src_pad_mask)
        return self.encoder_ln(x) if self.encoder_ln is not None else x

    def decode(
        self,
        tgt_in: np.ndarray,
        memory: np.ndarray,
        src_pad_mask: np.ndarray | None = None,
        tgt_pad_mask: np.ndarray | None = None,
    ) -> np.ndarray:
        """Run the decoder over ``memory``.

        Args:
            tgt_in: int ``(B, T)``: ``<bos>`` and the target so far.
            memory: ``(B, S, D)`` from :meth:`encode`.
            src_pad_mask: bool ``(B, S)``, True where the source is padding, or None.
            tgt_pad_mask: bool ``(B, T)``, True where ``tgt_in`` is padding, or None.

        Returns:
            logits ``(B, T, tgt_vocab_size)``: position ``t`` scores target token ``t``.
        """
        tgt_in = _check_token_batch(tgt_in, "tgt_in", self.tgt_vocab_size, self.max_len)
        check_mask(tgt_pad_mask, "tgt_pad_mask", tgt_in.shape, broadcast=False)
        x = self._embed_tgt(tgt_in)
        for block in self.decoder_blocks:
            x = block(
                x, memory, key_padding_mask=tgt_pad_mask, memory_key_padding_mask=src_pad_mask
            )
        if self.decoder_ln is not None:
            x = self.decoder_ln(x)
        self.save_for_backward(h=x)
        return _vocab_logits(x, self.lm_head, self.tgt_emb)

    def forward(self, src, tgt_in, src_pad_mask=None, tgt_pad_mask=None) -> np.ndarray:
        """Teacher forcing: encode ``src``, decode ``tgt_in`` (the true previous targets).

        Args:
            src: int ``(B, S)``; tgt_in: int ``(B, T)`` (``<bos>`` + target).
            src_pad_mask: bool ``(B, S)``; tgt_pad_mask: bool ``(B, T)``; True = padding.
            :func:`tfscratch.batching.seq2seq_batch` makes all four.

        Returns:
            logits ``(B, T, tgt_vocab_size)``.
        """
        src = _check_token_batch(src, "src", self.src_vocab_size, self.max_len)
        tgt_in = _check_token_batch(tgt_in, "tgt_in", self.tgt_vocab_size, self.max_len)
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(
                f"src has batch size {src.shape[0]} but tgt_in has {tgt_in.shape[0]}; they must match"
            )
        memory = self.encode(src, src_pad_mask)
        return self.decode(tgt_in, memory, src_pad_mask, tgt_pad_mask)

    def backward(self, grad_logits: np.ndarray) -> None:
        """Accumulate (``+=``) every parameter's gradient, encoder's included.

        Args:
            grad_logits: dL/dlogits ``(B, T, tgt_vocab_size)`` of the last forward.

        Returns:
            None.
        """
        self.check_ready_for_backward()
        _check_grad_logits(grad_logits, self._h.shape[:-1] + (self.tgt_vocab_size,))
        grad = _vocab_logits_backward(grad_logits, self._h, self.lm_head, self.tgt_emb)
        if self.decoder_ln is not None:
            grad = self.decoder_ln.backward(grad)
        d_memory = 0.0
        for block in reversed(self.decoder_blocks):
            grad, d_memory_block = block.backward(grad)
            d_memory = d_memory + d_memory_block  # every decoder layer reads the same memory
        self._embed_tgt.backward(grad)

        grad = d_memory
        if self.encoder_ln is not None:
            grad = self.encoder_ln.backward(grad)
        for block in reversed(self.encoder_blocks):
            grad = block.backward(grad)
        self._embed_src.backward(grad)


class EncoderClassifier(Module):
    """Encoder + pooling + linear head: ``tokens (B, T) -> logits (B, n_classes)``.

    ``pooling="mean"`` averages the non-padding positions; ``pooling="cls"`` prepends a
    learned ``cls_token`` vector at position 0 and classifies from its final state (BERT).
    ``pos="none"`` drops positional information (an ablation: the encoder then sees a bag
    of tokens); ``pos="rope"`` rotates queries and keys in every block (the ``[CLS]`` vector
    is position 0). Parameters: ``tok_emb``, ``cls_token`` (cls only), ``pos_emb`` (learned
    only), ``blocks.{i}``, ``ln_f`` (pre-norm only), ``head``.

    Args:
        vocab_size: the number of token ids.
        n_classes: the number of labels.
        d_model: the width D of every position's vector.
        n_heads: attention heads per layer; must divide ``d_model``.
        n_layers: encoder blocks.
        d_ff: the feed-forward width (default ``4 * d_model``).
        max_len: the longest sequence (the ``[CLS]`` vector counts as one position).
        pooling: ``"mean"`` or ``"cls"`` (see above).
        dropout: drop probability (training mode only).
        pos: ``"learned"``, ``"sinusoidal"``, ``"rope"`` or ``"none"``.
        norm: ``"pre"`` or ``"post"``.
        activation: ``"gelu"`` or ``"relu"``.
        scale_embeddings: multiply token vectors by ``sqrt(d_model)``.
        seed: seed of the initial weights and the dropout masks.
        dtype: ``np.float32`` (default) or ``np.float64``.
    """

    def __init__(
        self,
        vocab_size: int,
        n_classes: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int | None = None,
        max_len: int = 64,
        pooling: str = "mean",
        dropout: float = 0.0,
        pos: str = "learned",
        norm: str = "pre",
        activation: str = "gelu",
        scale_embeddings: bool = False,
        seed: int | None = None,
        dtype=np.float32,
    ):
        self.config = dict(
            vocab_size=check_positive_int(vocab_size, "vocab_size"),
            n_classes=check_positive_int(n_classes, "n_classes"),
            n_layers=check_positive_int(n_layers, "n_layers"),
            pooling=check_choice(pooling, "pooling", ("mean", "cls")),
            seed=seed,
            **_shared_config(
                d_model=d_model, n_heads=n_heads, d_ff=d_ff, max_len=max_len, dropout=dropout,
                pos=pos, norm=norm, activation=activation, dtype=dtype,
                scale_embeddings=scale_embeddings,
                positions=POSITIONS + ("none",),
            ),
        )  # fmt: skip
        config, rng = self.config, make_rng(seed)
        dtype = config["dtype"]
        self.vocab_size, self.max_len, self.pooling = vocab_size, max_len, pooling
        self.tok_emb = Embedding(vocab_size, d_model, rng=rng, dtype=dtype)
        self.cls_token = Parameter(np.zeros(d_model, dtype=dtype)) if pooling == "cls" else None
        # The [CLS] vector takes position 0, so the table needs one more row.
        n_positions = max_len + (pooling == "cls")
        self.pos_emb = _make_positions(pos, n_positions, d_model, rng, dtype)
        self.rotary = _make_rotary(config, n_positions)
        self.emb_dropout = Dropout(dropout, rng=rng)
        self._embed = EmbeddingStem(
            self.tok_emb, self.pos_emb, self.emb_dropout, config["scale_embeddings"]
        )
        self.blocks = [
            EncoderBlock(d_model, n_heads, **_block_options(config, rng, self.rotary))
            for _ in range(n_layers)
        ]
        self.ln_f = _final_norm(config)
        self.head = Linear(d_model, n_classes, rng=rng, dtype=dtype)
        _init_gpt2(self, rng, config["scale_embeddings"])

    def forward(self, tokens: np.ndarray, pad_mask: np.ndarray | None = None) -> np.ndarray:
        """Class scores for each sequence.

        Args:
            tokens: int ``(B, T)``.
            pad_mask: bool ``(B, T)``, True where ``tokens`` is padding (ignored by attention
                and by mean pooling), or None.

        Returns:
            logits ``(B, n_classes)``.
        """
        tokens = _check_token_batch(tokens, "tokens", self.vocab_size, self.max_len)
        check_mask(pad_mask, "pad_mask", tokens.shape, broadcast=False)
        B, T = tokens.shape
        keep = np.ones((B, T), dtype=bool) if pad_mask is None else ~pad_mask
        cls = None
        if self.cls_token is not None:
            cls = np.broadcast_to(self.cls_token.data, (B, 1, self.cls_token.shape[0]))
            keep = np.concatenate([np.ones((B, 1), dtype=bool), keep], axis=1)
        key_padding_mask = None if pad_mask is None else ~keep
        x = self._embed(tokens, prefix=cls)
        for block in self.blocks:
            x = block(x, key_padding_mask=key_padding_mask)
        if self.ln_f is not None:
            x = self.ln_f(x)
        pool_weights = None
        if self.pooling == "cls":
            pooled = x[:, 0]
        else:
            weights = keep / np.maximum(keep.sum(axis=1, keepdims=True), 1)
            pool_weights = weights.astype(x.dtype)[:, :, None]  # (B, T, 1)
            pooled = np.sum(x * pool_weights, axis=1)
        self.save_for_backward(seq_shape=x.shape, pool_weights=pool_weights)
        return self.head(pooled)

    def backward(self, grad_logits: np.ndarray) -> None:
        """Accumulate (``+=``) every parameter's gradient.

        Args:
            grad_logits: dL/dlogits ``(B, n_classes)`` of the last forward.

        Returns:
            None.
        """
        self.check_ready_for_backward()
        _check_grad_logits(grad_logits, (self._seq_shape[0], self.head.d_out))
        d_pooled = self.head.backward(grad_logits)  # (B, D)
        if self.pooling == "cls":
            grad = np.zeros(self._seq_shape, dtype=d_pooled.dtype)
            grad[:, 0] = d_pooled
        else:
            grad = d_pooled[:, None, :] * self._pool_weights
        if self.ln_f is not None:
            grad = self.ln_f.backward(grad)
        for block in reversed(self.blocks):
            grad = block.backward(grad)
        d_cls = self._embed.backward(grad, prefix_length=1 if self.cls_token is not None else 0)
        if d_cls is not None:
            self.cls_token.grad += d_cls.sum(axis=(0, 1))


MODELS = {cls.__name__: cls for cls in (DecoderLM, Seq2SeqTransformer, EncoderClassifier)}
