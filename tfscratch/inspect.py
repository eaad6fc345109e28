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

How: there is no second copy of the forward maths here. For the length of a call, the
model's own modules get an instance attribute ``forward`` (``module(x)`` calls
``self.forward``) that runs the class's forward and, on the way in or out, records the
activation or hands it to your hook; ``backward`` is wrapped the same way to record each
activation's gradient. The one hook point inside the model's code is
``TransformerBlock.hook_resid_mid``, an identity between the two residual sums of a block.
Everything is put back when the call returns, also when it raises.

Only a pre-LN :class:`~tfscratch.DecoderLM` is supported (the layout these names describe).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from .checks import check_choice, describe
from .models import DecoderLM
from .module import evaluating, no_grad

__all__ = ["ablate_heads", "hook_names", "run_with_cache", "run_with_hooks"]

READ_ONLY = ("attn.hook_pattern",)
"""Activations that can be read (and differentiated) but not replaced: the attention
weights are an intermediate of one function, :func:`tfscratch.functional.scaled_dot_product_attention`."""

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


def hook_names(model: DecoderLM) -> list[str]:
    """Every activation name of ``model``, in the order the forward meets them.

    Args:
        model: a pre-LN :class:`~tfscratch.DecoderLM`.

    Returns:
        list of names, e.g. ``["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", ...]``
        (no ``hook_pos_embed`` for ``pos="rope"``, no ``hook_mlp_out`` with ``attn_only``).
    """
    _check_model(model)
    names = ["hook_embed"] + (["hook_pos_embed"] if model.pos_emb is not None else [])
    for i, block in enumerate(model.blocks):
        names += [f"blocks.{i}.{suffix}" for suffix in (
            "hook_resid_pre", "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_resid_mid"
        )]  # fmt: skip
        if block.has_feed_forward:
            names.append(f"blocks.{i}.hook_mlp_out")
        names.append(f"blocks.{i}.hook_resid_post")
    return names + ["ln_final.hook_normalized"]


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


def _check_hooks(model: DecoderLM, fwd_hooks) -> list[tuple[str, Callable]]:
    valid = hook_names(model)
    try:
        pairs = list(fwd_hooks)
    except TypeError:
        raise TypeError(
            f"fwd_hooks must be a list of (name, fn) pairs, got {describe(fwd_hooks)}"
        ) from None
    checked = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                f"each entry of fwd_hooks must be a (name, fn) pair, got {describe(pair)}"
            )
        name, fn = pair
        _check_name(model, name, valid)
        if not callable(fn):
            raise TypeError(
                f"the hook for {name!r} must be callable fn(activation, name), got {describe(fn)}"
            )
        checked.append((name, fn))
    return checked


class _Session:
    """The wrappers of one call: hooks to apply, and where to record activations/gradients."""

    def __init__(self, model: DecoderLM, hooks, cache: dict | None, grads: dict | None):
        self.model = model
        self.hooks: dict[str, list[Callable]] = {}
        for name, fn in hooks:
            self.hooks.setdefault(name, []).append(fn)
        self.cache, self.grads = cache, grads
        self._saved: list[tuple[object, str, object]] = []

    def point(self, name: str, value: np.ndarray) -> np.ndarray:
        """Hand ``value`` to the hooks of ``name`` in turn; record what comes out."""
        for fn in self.hooks.get(name, ()):
            replacement = fn(value, name)
            if replacement is None or replacement is value:
                continue
            if any(name.endswith(suffix) for suffix in READ_ONLY):
                raise ValueError(
                    f"{name} can be read but not replaced (the attention weights live inside "
                    "one function); patch the heads' outputs, attn.hook_z, instead"
                )
            replacement = np.asarray(replacement)
            if replacement.shape != value.shape:
                raise ValueError(
                    f"the hook for {name} returned shape {replacement.shape}; the activation "
                    f"has shape {value.shape} and its replacement must too"
                )
            value = replacement.astype(value.dtype, copy=False)
        if self.cache is not None:
            self.cache[name] = value
        return value

    # --- putting wrappers on and taking them off -------------------------------------------
    def _wrap(self, module, method: str, make: Callable) -> None:
        """Set ``module.<method>`` (an instance attribute) to ``make(class_method)``."""
        self._saved.append((module, method, vars(module).get(method, _ABSENT)))
        setattr(module, method, make(getattr(type(module), method).__get__(module)))

    def remove(self) -> None:
        """Put back every attribute this session replaced, in reverse order."""
        for module, method, previous in reversed(self._saved):
            if previous is _ABSENT:
                vars(module).pop(method, None)
            else:
                setattr(module, method, previous)
        self._saved.clear()

    def install(self) -> None:
        """Wrap the model's modules (forwards always, backwards when gradients are wanted)."""
        model = self.model
        try:
            self._install_stem(model)
            for i, block in enumerate(model.blocks):
                self._install_block(f"blocks.{i}.", block)
            self._wrap(model.ln_f, "forward", lambda forward: lambda x: self.point(
                "ln_final.hook_normalized", forward(x)))  # fmt: skip
            if self.grads is not None:
                self._wrap(model.ln_f, "backward", self._recording("ln_final.hook_normalized"))
        except BaseException:
            self.remove()
            raise

    def _recording(self, *names: str) -> Callable:
        """A backward wrapper that records its incoming gradient under ``names``."""

        def make(backward):
            def recorded(grad_output):
                for name in names:
                    self.grads[name] = grad_output
                return backward(grad_output)

            return recorded

        return make

    def _install_stem(self, model: DecoderLM) -> None:
        positions = model.pos_emb
        if positions is None:  # rope: the stream starts as the token vectors alone
            self._wrap(model.emb_dropout, "forward", lambda forward: lambda x: forward(
                self.point("hook_embed", x)))  # fmt: skip
        else:

            def make(forward):
                def add_positions(x, offset=0):
                    x = self.point("hook_embed", x)
                    # the module's own position vectors: its forward applied to zeros
                    pos = forward(np.zeros_like(x), offset=offset)
                    new_pos = self.point("hook_pos_embed", pos)
                    return forward(x, offset=offset) if new_pos is pos else x + new_pos

                return add_positions

            self._wrap(positions, "forward", make)
        if self.grads is not None:
            names = ["hook_embed"] + (["hook_pos_embed"] if positions is not None else [])

            def make_backward(backward):
                def recorded(grad_output):
                    grad = backward(grad_output)  # y = x + P: both get dL/dy (eval: no dropout)
                    for name in names:
                        self.grads[name] = grad
                    return grad

                return recorded

            self._wrap(model.emb_dropout, "backward", make_backward)

    def _install_block(self, prefix: str, block) -> None:
        attn = block.attn
        H, d_head = attn.n_heads, attn.d_head

        def make_block(forward):
            def block_forward(x, *args, **kwargs):
                x = self.point(prefix + "hook_resid_pre", x)
                return self.point(prefix + "hook_resid_post", forward(x, *args, **kwargs))

            return block_forward

        def make_attn(forward):
            def attn_forward(*args, **kwargs):
                out = forward(*args, **kwargs)
                self.point(prefix + "attn.hook_pattern", attn.attn_weights)
                return self.point(prefix + "hook_attn_out", out)

            return attn_forward

        def make_out_proj(forward):
            def out_proj_forward(merged):
                B, T, D = merged.shape  # merged heads: head h owns features h*d_head ...
                z = self.point(prefix + "attn.hook_z", merged.reshape(B, T, H, d_head))
                return forward(z.reshape(B, T, D))

            return out_proj_forward

        self._wrap(block, "forward", make_block)
        self._wrap(attn, "forward", make_attn)
        self._wrap(attn.out_proj, "forward", make_out_proj)
        self._wrap(block, "hook_resid_mid", lambda identity: lambda h: identity(
            self.point(prefix + "hook_resid_mid", h)))  # fmt: skip
        if block.has_feed_forward:
            self._wrap(block.ffn, "forward", lambda forward: lambda x: self.point(
                prefix + "hook_mlp_out", forward(x)))  # fmt: skip
        if self.grads is None:
            return

        def make_block_backward(backward):
            def block_backward(grad_output):
                self.grads[prefix + "hook_resid_post"] = grad_output
                grad = backward(grad_output)
                self.grads[prefix + "hook_resid_pre"] = grad
                return grad

            return block_backward

        def make_out_proj_backward(backward):
            def out_proj_backward(grad_output):
                d_merged = backward(grad_output)
                B, T, _ = d_merged.shape
                d_z = d_merged.reshape(B, T, H, d_head)
                self.grads[prefix + "attn.hook_z"] = d_z
                # z = pattern @ v per head, so dL/dpattern = dL/dz @ v^T (the first line of
                # scaled_dot_product_attention_backward; no attention dropout in eval mode)
                self.grads[prefix + "attn.hook_pattern"] = d_z.transpose(0, 2, 1, 3) @ np.swapaxes(
                    attn._v, -1, -2
                )
                return d_merged

            return out_proj_backward

        self._wrap(block, "backward", make_block_backward)
        # resid_mid = resid_pre + attn_out: one gradient reaches both sums' outputs
        self._wrap(
            attn, "backward", self._recording(prefix + "hook_attn_out", prefix + "hook_resid_mid")
        )
        self._wrap(attn.out_proj, "backward", make_out_proj_backward)
        if block.has_feed_forward:
            self._wrap(block.ffn, "backward", self._recording(prefix + "hook_mlp_out"))


_ABSENT = object()


@contextmanager
def _session(model: DecoderLM, hooks, cache=None, grads=None) -> Iterator[_Session]:
    """Install a session with the model's active :func:`ablate_heads` hooks first."""
    session = _Session(
        model, list(getattr(model, "_inspect_hooks", [])) + list(hooks), cache, grads
    )
    session.install()
    try:
        yield session
    finally:
        session.remove()


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
    cache: dict[str, np.ndarray] = {}
    grads: dict[str, np.ndarray] | None = {} if metric is not None else None
    with evaluating(model), _session(model, [], cache, grads):
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
            None to keep it. Several hooks on one name run in list order.
            ``attn.hook_pattern`` can be read but not replaced.

    Returns:
        logits ``(B, T, V)`` of the run with the replacements.
    """
    _check_model(model)
    hooks = _check_hooks(model, fwd_hooks)
    tokens = _check_tokens(model, tokens)
    with evaluating(model), no_grad(), _session(model, hooks):
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
        ok = len(pair) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair
        )
        if not ok:
            raise TypeError(
                f"each entry of heads must be a (layer, head) pair of ints, got {pair!r}"
            )
        layer, head = pair
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
    _check_model(model)
    heads = _check_heads(model, heads)
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
    previous = list(getattr(model, "_inspect_hooks", []))
    model._inspect_hooks = previous + new_hooks
    session = _Session(model, model._inspect_hooks, None, None)
    try:
        session.install()
        yield model
    finally:
        session.remove()
        if previous:
            model._inspect_hooks = previous
        else:
            vars(model).pop("_inspect_hooks", None)
