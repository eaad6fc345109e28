"""Looking inside a model: read, replace and differentiate every activation (notebook 15).

The names follow TransformerLens, so a learner can move there with the same words::

    hook_embed, hook_pos_embed                      the token and position vectors (B, T, D)
    blocks.{i}.hook_resid_pre                       the residual stream entering block i
    blocks.{i}.attn.hook_pattern                    attention weights (B, H, T_q, T_k)
    blocks.{i}.attn.hook_z                          each head's output before out_proj (B, T, H, d_head)
    blocks.{i}.hook_attn_out                        the attention sublayer's output (B, T, D)
    blocks.{i}.hook_resid_mid                       resid_pre + attn_out
    blocks.{i}.hook_mlp_out                         the feed-forward's output (not with attn_only)
    blocks.{i}.hook_resid_post                      resid_mid + mlp_out (the block's output)
    ln_final.hook_normalized                        the final LayerNorm's output

How: the model's forward passes each of these activations through a
:class:`~tfscratch.hooks.HookPoint`, an identity module (``blocks.{i}.hook_resid_pre`` is
``model.blocks[i].hook_resid_pre``), and its backward passes the gradient back through the
same point. The functions here hang functions on the hook points for the length of a call,
:func:`hooks` for the length of a ``with`` block. The names come from the module tree; two
are TransformerLens's instead of the attribute path (:data:`ALIASES`).

Only a pre-LN :class:`~tfscratch.DecoderLM` is supported (the layout these names describe).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from .checks import check_choice, check_int, describe
from .hooks import HookPoint
from .models import DecoderLM
from .module import Module, evaluating, no_grad

__all__ = [
    "ablate_heads", "hook_names", "hook_points", "hooks", "run_with_cache", "run_with_hooks"
]  # fmt: skip

ALIASES = {
    "pos_emb.hook_pos_embed": "hook_pos_embed",
    "hook_normalized": "ln_final.hook_normalized",
}
"""Module-tree names -> TransformerLens's names, where they differ."""

ABLATIONS = ("zero", "mean")


def _check_model(model) -> DecoderLM:
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a tfscratch.DecoderLM, got {describe(model)}")
    if model.config["norm"] != "pre":
        raise ValueError(
            "tfscratch.inspect reads pre-LN models (norm='pre'); this model has "
            f"norm={model.config['norm']!r}"
        )
    return model


def hook_points(model: Module, prefix: str = "") -> dict[str, HookPoint]:
    """Every :class:`~tfscratch.hooks.HookPoint` under ``model`` by name.

    Args:
        model: any :class:`~tfscratch.module.Module`.
        prefix: put in front of every name.

    Returns:
        dict of name -> hook point, in the order of the module tree: the order the forward
        meets them, except that an attention's ``hook_z`` comes before its ``hook_pattern``.
    """
    points = {}
    for name, child in model.named_children():
        if isinstance(child, HookPoint):
            points[ALIASES.get(prefix + name, prefix + name)] = child
        else:
            points.update(hook_points(child, f"{prefix}{name}."))
    return points


def hook_names(model: DecoderLM) -> list[str]:
    """Every activation name of ``model``, in the order of :func:`hook_points`.

    Args:
        model: a pre-LN :class:`~tfscratch.DecoderLM`.

    Returns:
        list of names, e.g. ``["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", ...]``
        (no ``hook_pos_embed`` for ``pos="rope"``, no ``hook_mlp_out`` with ``attn_only``).
    """
    return list(hook_points(_check_model(model)))


def _check_name(model: DecoderLM, name, valid: list[str]) -> str:
    if not isinstance(name, str):
        raise TypeError(f"an activation name must be a str, got {describe(name)}")
    if name in valid:
        return name
    hint = ""
    if name.endswith("hook_mlp_out") and model.config["attn_only"]:
        hint = " This model is attention-only (attn_only=True): it has no hook_mlp_out."
    elif name.endswith("_grad"):
        hint = " Gradients are read from run_with_cache(..., metric=...), not hooked."
    else:
        close = difflib.get_close_matches(name, valid, n=1)
        if close:
            hint = f" Did you mean {close[0]!r}?"
    raise ValueError(
        f"unknown activation name {name!r}.{hint} This model's names: {', '.join(valid)}"
    )


def _check_hooks(model: DecoderLM, pairs, argument: str, valid) -> list[tuple[str, Callable]]:
    try:
        pairs = list(pairs)
    except TypeError:
        raise TypeError(
            f"{argument} must be a list of (name, fn) pairs, got {describe(pairs)}"
        ) from None
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                f"each entry of {argument} must be a (name, fn) pair, got {describe(pair)}"
            )
        name, fn = pair
        _check_name(model, name, valid)
        if not callable(fn):
            raise TypeError(
                f"the hook for {name!r} must be callable fn(array, name), got {describe(fn)}"
            )
    return pairs


@contextmanager
def hooks(model: DecoderLM, fwd_hooks=(), bwd_hooks=()) -> Iterator[DecoderLM]:
    """``with hooks(model, fwd_hooks, bwd_hooks):`` every forward and backward of ``model``
    inside the block runs with these functions on its hook points (TransformerLens's
    ``model.hooks``); they come off when the block ends, also when it raises.

    A replaced activation is a constant to the backward: the gradient reaches it (and the
    ``bwd_hooks``) but goes no further back through the entries a hook changed.

    Args:
        model: a pre-LN :class:`~tfscratch.DecoderLM`.
        fwd_hooks: list of ``(name, fn)``: ``fn(activation, name)`` returns a replacement of
            the same shape, or None to keep the activation. Several run in list order, after
            the functions already there (an enclosing :func:`ablate_heads`).
        bwd_hooks: list of ``(name, fn)``: ``fn(grad, name)`` is shown d(loss)/d(activation).

    Returns:
        a context manager that yields ``model``.
    """
    points = hook_points(_check_model(model))
    valid = list(points)
    hung = [
        (getattr(points[name], kind), lambda value, fn=fn, name=name: fn(value, name))
        for kind, argument, pairs in (
            ("forward_hooks", "fwd_hooks", fwd_hooks), ("backward_hooks", "bwd_hooks", bwd_hooks)
        )
        for name, fn in _check_hooks(model, pairs, argument, valid)
    ]  # fmt: skip
    for functions, function in hung:
        functions.append(function)
    try:
        yield model
    finally:
        for functions, function in hung:
            functions.remove(function)


def _recorder(store: dict, name: str) -> Callable:
    """A hook that keeps what passes."""
    return lambda value, _: store.__setitem__(name, value)


def _check_tokens(model: DecoderLM, tokens) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.ndim == 1:
        raise ValueError(
            f"tokens must be a batch (B, T); got shape {tokens.shape}: use tokens[None] for one sequence"
        )
    return tokens  # the model's forward checks ids, length and dtype


def run_with_cache(
    model: DecoderLM, tokens, metric: Callable | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Run ``model`` once and keep every activation (and, with ``metric``, its gradient).

    The model runs in evaluation mode (no dropout); its mode, parameters and their
    ``.grad`` are as before afterwards.

    Args:
        model: a pre-LN :class:`~tfscratch.DecoderLM`.
        tokens: int ``(B, T)``.
        metric: None, or a function ``metric(logits) -> (value, dlogits)`` of the logits
            ``(B, T, V)``: a number and its gradient ``dlogits`` ``(B, T, V)``. With it the model
            also runs its own backward once, from ``dlogits``.

    Returns:
        ``(logits, cache)``: logits ``(B, T, V)``, equal to ``model(tokens)``; ``cache`` a dict of
        name -> array for every name of :func:`hook_names` (shapes in the module docstring),
        and with ``metric`` also ``name + "_grad"``, d(value)/d(activation), the same shape.
    """
    _check_model(model)
    tokens = _check_tokens(model, tokens)
    if metric is not None and not callable(metric):
        raise TypeError(
            f"metric must be a function logits -> (value, dlogits), got {describe(metric)}"
        )
    names = hook_names(model)
    cache, grads = dict.fromkeys(names), dict.fromkeys(names)  # in the order of the names
    keep = [(name, _recorder(cache, name)) for name in names]
    keep_grads = [(name, _recorder(grads, name)) for name in names] if metric else []
    with evaluating(model), hooks(model, keep, keep_grads):
        if metric is None:
            with no_grad():
                return model(tokens), cache
        logits = model(tokens)
        result = metric(logits)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"metric must return (value, dlogits), got {describe(result)}")
        dlogits = np.asarray(result[1])
        if dlogits.shape != logits.shape:
            raise ValueError(
                f"metric returned dlogits of shape {dlogits.shape}; it must have the logits' "
                f"shape {logits.shape}"
            )
        parameters = model.parameters()
        kept = [p.grad.copy() for p in parameters]  # the caller's gradients stay untouched
        try:
            model.backward(dlogits.astype(logits.dtype, copy=False))
        finally:
            for parameter, grad in zip(parameters, kept, strict=True):
                parameter.grad[...] = grad
    cache.update({f"{name}_grad": grad for name, grad in grads.items()})
    return logits, cache


def run_with_hooks(model: DecoderLM, tokens, fwd_hooks) -> np.ndarray:
    """Run ``model`` with some activations read or replaced (activation patching).

    Args:
        model: a pre-LN :class:`~tfscratch.DecoderLM` (run in evaluation mode).
        tokens: int ``(B, T)``.
        fwd_hooks: list of ``(name, fn)``; at activation ``name`` (see :func:`hook_names`),
            ``fn(activation, name)`` returns its replacement, an array of the same shape, or
            None to keep it. Several hooks on one name run in list order. A replaced
            ``attn.hook_pattern`` is what multiplies the values (pattern patching).

    Returns:
        logits ``(B, T, V)`` of the run with the replacements.
    """
    tokens = _check_tokens(model, tokens)
    with evaluating(model), no_grad(), hooks(model, fwd_hooks):
        return model(tokens)


def _check_heads(model: DecoderLM, heads) -> list[tuple[int, int]]:
    n_layers, n_heads = model.config["n_layers"], model.config["n_heads"]
    try:
        pairs = [tuple(pair) for pair in heads]
    except TypeError:
        raise TypeError(
            f"heads must be a list of (layer, head) pairs, got {describe(heads)}"
        ) from None
    for pair in pairs:
        if len(pair) != 2:
            raise TypeError(f"each entry of heads must be a (layer, head) pair, got {pair!r}")
        layer, head = check_int(pair[0], "layer"), check_int(pair[1], "head")
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(
                f"heads: ({layer}, {head}) is not a head of this model (layers 0..{n_layers - 1}, "
                f"heads 0..{n_heads - 1})"
            )
    return [(int(layer), int(head)) for layer, head in pairs]


@contextmanager
def ablate_heads(model: DecoderLM, heads, how: str = "zero") -> Iterator[DecoderLM]:
    """``with ablate_heads(model, [(1, 3)]):`` every forward inside the block runs without
    those heads.

    Each listed head's ``hook_z`` (its output before ``out_proj``) is replaced by zeros
    (``how="zero"``), or by its mean over the batch and the positions of the current input
    (``how="mean"``), so ``out_proj`` adds only its bias (or the head's average contribution).
    Works for ``model(tokens)``, :func:`run_with_cache` and :func:`run_with_hooks` inside the
    block, and nests.

    Args:
        model: a pre-LN :class:`~tfscratch.DecoderLM`.
        heads: list of ``(layer, head)`` pairs.
        how: ``"zero"`` or ``"mean"``.

    Returns:
        a context manager that yields ``model``.
    """
    heads = _check_heads(_check_model(model), heads)
    how = check_choice(how, "how", ABLATIONS)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def make_hook(chosen: list[int]):
        def ablate(z, name):
            z = z.copy()
            if how == "zero":
                z[:, :, chosen] = 0
            else:
                z[:, :, chosen] = z[:, :, chosen].mean(axis=(0, 1), keepdims=True)
            return z

        return ablate

    new_hooks = [
        (f"blocks.{layer}.attn.hook_z", make_hook(chosen)) for layer, chosen in by_layer.items()
    ]
    with hooks(model, new_hooks):
        yield model
