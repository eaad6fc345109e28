"""A doctor for a language model: the checks of a careful practitioner, as one table.

``tfscratch.diagnose(model, inputs, targets)`` (this module's :func:`diagnose`) runs eight
checks, each with the number it measured and a verdict (notebook 16). Three of them (loss at
init, causality, overfit one batch) come from Karpathy's blog post "A Recipe for Training
Neural Networks" (2019; the recipe checks causality with gradients, here a token is changed);
the other five are the standard correctness checks of from-scratch Transformer code (a
gradient check in the spirit of ``torch.autograd.gradcheck``: float64 central differences,
here on sampled coordinates; the KV cache against a full forward, and so on):

1. **loss at init**: a freshly initialised model predicts nearly uniformly, so its loss is
   close to ``ln V``;
2. **causality**: changing a token leaves the logits of every earlier position unchanged
   (``detail`` also says how many earlier positions the last token moves: one per layer for
   a mask that sees one step ahead, all of them for a mix over every position);
3. **cached = uncached**: feeding the tokens one at a time through the KV cache gives the
   logits of one full forward;
4. **gradient check**: sampled coordinates of every parameter's gradient agree with float64
   central differences (:func:`tfscratch.gradcheck`);
5. **padding invariance**: padding tokens appended after the sequence (their targets
   ignored) leave the logits of the real positions unchanged;
6. **eval deterministic**: two forwards in evaluation mode give the same logits (dropout is
   off);
7. **every parameter learns**: after one backward every parameter has a non-zero gradient,
   and one optimiser step moves every parameter;
8. **overfit one batch**: a few hundred Adam steps on the one batch drive its loss near 0.

It works on a :class:`~tfscratch.models.DecoderLM` and on any ``Module`` whose
``forward(inputs)`` returns logits ``(B, T, V)`` and whose ``backward(grad_logits)`` follows
the Module protocol; a check that needs more than that (a KV cache, a length limit) says
``"n/a"`` and why. Every check runs on a deep copy of the model, so the model examined keeps
its parameters, gradients, training mode and the streams of its own random generators; no
global random number is drawn.
"""

from __future__ import annotations

import copy
import inspect
import math

import numpy as np

from . import functional as F
from .gradient_check import gradcheck
from .module import Module, no_grad
from .optim import Adam

IGNORE_INDEX = F.IGNORE_INDEX
CHECKS = (
    "loss at init",
    "causality",
    "cached = uncached",
    "gradient check",
    "padding invariance",
    "eval deterministic",
    "every parameter learns",
    "overfit one batch",
)
# Tolerances of the verdicts (relative changes of logits are max |difference| / max |logit|).
INIT_LOSS_TOLERANCE = 0.1  # |loss - ln V| <= 10% of ln V
SAME_LOGITS = 1e-4  # float32 forwards that should be equal agree to ~1e-6 of the logit scale
GRADCHECK_TOLERANCE = 1e-5  # a right float64 backward agrees to ~1e-8, a wrong one to ~1
OVERFIT_LOSS = 0.1  # nats: "near zero"
OVERFIT_STEPS = 300
OVERFIT_LR = 1e-2
PADDING = 3  # tokens appended by the padding check


def _relative_change(reference: np.ndarray, other: np.ndarray) -> float:
    """``max |reference - other| / max |reference|``: 0 when equal, ~1e-7 for float32
    round-off, order 1 when different."""
    scale = float(np.max(np.abs(reference))) or 1.0
    return float(np.max(np.abs(np.asarray(reference, np.float64) - other))) / scale


def _check_batch(model, inputs, targets) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(model, Module):
        raise TypeError(
            f"diagnose examines a tfscratch Module (forward/backward/named_parameters), got "
            f"{type(model).__name__}"
        )
    arrays = []
    for name, value in (("inputs", inputs), ("targets", targets)):
        array = np.asarray(value)
        if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(
                f"{name} must be an int array of token ids (B, T), got "
                f"{array.dtype} of shape {array.shape}"
            )
        if array.size == 0:
            raise ValueError(f"{name} is empty (shape {array.shape}); expected (B>=1, T>=1)")
        arrays.append(array.astype(np.int64))
    inputs, targets = arrays
    if inputs.shape != targets.shape:
        raise ValueError(
            f"targets must have the shape of inputs, one next token per position: inputs "
            f"{inputs.shape}, targets {targets.shape}"
        )
    if (inputs < 0).any():
        raise ValueError("inputs holds negative token ids; padding goes into targets as -100")
    if (targets == IGNORE_INDEX).all():
        raise ValueError(f"every target is IGNORE_INDEX ({IGNORE_INDEX}): there is no loss")
    return inputs, targets


def _logits(model: Module, inputs: np.ndarray, **options) -> np.ndarray:
    with no_grad():
        logits = model(inputs, **options)
    if not isinstance(logits, np.ndarray) or logits.ndim != 3:
        raise ValueError(
            f"diagnose needs forward(inputs) to return logits (B, T, V); got "
            f"{getattr(logits, 'shape', type(logits).__name__)}"
        )
    if logits.shape[:2] != inputs.shape:
        raise ValueError(
            f"forward returned logits of shape {logits.shape} for inputs {inputs.shape}; "
            "expected (B, T, V), one row of scores per input position"
        )
    return logits


def _loss_and_grad(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    grad = F.cross_entropy_backward(logits, targets, ignore_index=IGNORE_INDEX)
    return float(loss), grad.astype(logits.dtype, copy=False)


def _row(check: str, measured, expected: str, verdict: str, detail: str = "") -> dict:
    return dict(check=check, measured=measured, expected=expected, verdict=verdict, detail=detail)


def _verdict(ok: bool) -> str:
    return "ok" if ok else "fails"


def _loss_at_init(model, inputs, targets, logits) -> dict:
    V = logits.shape[-1]
    bad = (targets != IGNORE_INDEX) & ((targets < 0) | (targets >= V))
    if bad.any():
        raise ValueError(
            f"targets holds ids outside [0, {V}) (the model scores {V} tokens) that are not "
            f"IGNORE_INDEX ({IGNORE_INDEX}): {np.unique(targets[bad])[:5].tolist()}"
        )
    loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    uniform = math.log(V)
    return _row(
        "loss at init",
        round(float(loss), 4),
        f"ln V = {uniform:.4f} (within {INIT_LOSS_TOLERANCE:.0%})",
        _verdict(abs(loss - uniform) <= INIT_LOSS_TOLERANCE * uniform),
        "a fresh model predicts nearly uniformly over its V tokens",
    )


def _causality(model, inputs, logits, vocab_size: int) -> dict:
    T = inputs.shape[1]
    if T < 2:
        return _row("causality", np.nan, "n/a: needs at least 2 positions", "n/a")
    worst, where, reach = 0.0, 0, 0
    for t in sorted({1, T // 2, T - 1}):
        changed = inputs.copy()
        changed[:, t] = (changed[:, t] + 1) % vocab_size
        earlier = _logits(model, changed)[:, :t]
        change = _relative_change(logits[:, :t], earlier)
        if change >= worst:
            worst, where = change, t
        if t == T - 1:  # how far back a leak reaches: the earlier positions the last token moves
            reach = _positions_moved(logits[:, :t], earlier)
    return _row(
        "causality",
        float(f"{worst:.3g}"),
        f"0 (relative change < {SAME_LOGITS:g})",
        _verdict(worst < SAME_LOGITS),
        f"largest change of earlier logits when the token at position {where} changes; "
        f"the last token moves {reach} of the {T - 1} positions before it",
    )


def _positions_moved(reference: np.ndarray, other: np.ndarray) -> int:
    """How many positions (axis 1) change by at least ``SAME_LOGITS`` of the largest logit: a
    mask that sees one step ahead moves one position per layer, a mix over all positions
    moves them all."""
    scale = float(np.max(np.abs(reference))) or 1.0
    change = np.max(np.abs(np.asarray(reference, np.float64) - other), axis=(0, 2)) / scale
    return int((change >= SAME_LOGITS).sum())


def _takes_kv_cache(model) -> str | None:
    """None when the model can be run with a KV cache, else the reason it cannot."""
    if not callable(getattr(model, "new_kv_cache", None)):
        return "n/a: the model has no new_kv_cache()"
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "n/a: forward's signature cannot be read"
    if "kv_cache" not in parameters:
        return "n/a: forward takes no kv_cache"
    return None


def _cached(model, inputs, logits) -> dict:
    reason = _takes_kv_cache(model)
    if reason is not None:
        return _row("cached = uncached", np.nan, reason, "n/a")
    cache = model.new_kv_cache()
    steps = [_logits(model, inputs[:, t : t + 1], kv_cache=cache) for t in range(inputs.shape[1])]
    per_position = [_relative_change(logits[:, t : t + 1], step) for t, step in enumerate(steps)]
    worst = max(per_position)
    first_bad = next((t for t, c in enumerate(per_position) if c >= SAME_LOGITS), None)
    return _row(
        "cached = uncached",
        float(f"{worst:.3g}"),
        f"0 (relative change < {SAME_LOGITS:g})",
        _verdict(worst < SAME_LOGITS),
        "the tokens fed one at a time through the KV cache against one full forward"
        + ("" if first_bad is None else f"; first differing position {first_bad}"),
    )


def _in_float64(model: Module) -> Module:
    """A deep copy of ``model`` whose parameters are float64 (for the gradient check)."""
    model64 = copy.deepcopy(model)
    for parameter in model64.parameters():
        parameter._data = parameter._data.astype(np.float64)
        parameter._grad = np.zeros_like(parameter._data)
    return model64


def _gradient(model, inputs, seed: int) -> dict:
    try:
        worst, errors = gradcheck(
            _in_float64(model), inputs, max_coords=4, seed=seed, return_errors=True
        )
    except (TypeError, ValueError, RuntimeError) as error:
        return _row("gradient check", np.nan, f"n/a: {error}", "n/a")
    name = max(errors, key=errors.get)
    return _row(
        "gradient check",
        float(f"{worst:.3g}"),
        f"< {GRADCHECK_TOLERANCE:g} (float64)",
        _verdict(worst < GRADCHECK_TOLERANCE),
        f"worst relative error of {len(errors)} tensors, at {name!r}",
    )


def _padding(model, inputs, logits) -> dict:
    B, T = inputs.shape
    extra = PADDING
    max_len = getattr(model, "max_len", None)
    if isinstance(max_len, (int, np.integer)):
        extra = min(extra, int(max_len) - T)
    if extra <= 0:
        return _row("padding invariance", np.nan, "n/a: the batch already fills max_len", "n/a")
    padded = np.concatenate([inputs, np.zeros((B, extra), dtype=inputs.dtype)], axis=1)
    try:
        longer = _logits(model, padded)
    except (ValueError, IndexError) as error:
        return _row("padding invariance", np.nan, f"n/a: a longer input failed: {error}", "n/a")
    change = _relative_change(logits, longer[:, :T])
    return _row(
        "padding invariance",
        float(f"{change:.3g}"),
        f"0 (relative change < {SAME_LOGITS:g})",
        _verdict(change < SAME_LOGITS),
        f"{extra} padding tokens (targets ignored) appended: change of the real positions' logits",
    )


def _eval_deterministic(model, inputs, logits) -> dict:
    change = _relative_change(logits, _logits(model, inputs))
    return _row(
        "eval deterministic",
        float(f"{change:.3g}"),
        "0",
        _verdict(change == 0.0),
        "two forwards in evaluation mode",
    )


def _every_parameter_learns(model, inputs, targets) -> dict:
    named = model.named_parameters()
    before = {name: p.data.copy() for name, p in named.items()}
    model.zero_grad()
    logits = model(inputs)
    _, grad = _loss_and_grad(logits, targets)
    model.backward(grad)
    no_grad_names = [name for name, p in named.items() if not np.any(p.grad)]
    Adam(named, lr=1e-3).step()
    still = [name for name, p in named.items() if np.array_equal(p.data, before[name])]
    missing = sorted(set(no_grad_names) | set(still), key=list(named).index)
    model.load_state_dict(before)
    model.zero_grad()
    return _row(
        "every parameter learns",
        len(missing),
        f"0 of {len(named)} without a gradient or a step",
        _verdict(not missing),
        ("stuck: " + ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else ""))
        if missing
        else "",
    )


def _overfit(model, inputs, targets) -> dict:
    named = model.named_parameters()
    optimizer = Adam(named, lr=OVERFIT_LR)
    steps = 0  # the loss reported is measured after `steps` updates
    while True:
        model.zero_grad()
        loss, grad = _loss_and_grad(model(inputs), targets)
        if loss < OVERFIT_LOSS or not np.isfinite(loss) or steps == OVERFIT_STEPS:
            break
        model.backward(grad)
        optimizer.step()
        steps += 1
    return _row(
        "overfit one batch",
        round(float(loss), 4),
        f"< {OVERFIT_LOSS} within {OVERFIT_STEPS} steps",
        _verdict(loss < OVERFIT_LOSS),
        f"Adam, lr {OVERFIT_LR}, dropout off: loss after {steps} steps",
    )


def diagnose(model: Module, inputs, targets, *, seed: int = 0):
    """Run the eight checks on ``model`` and one batch; a table of what each measured.

    Args:
        model: a :class:`~tfscratch.models.DecoderLM` or any ``Module`` whose
            ``forward(inputs)`` returns logits ``(B, T, V)`` and whose ``backward`` takes
            ``dL/dlogits``. It is not changed: the checks run on a deep copy, in evaluation
            mode (dropout off).
        inputs: int ``(B, T)`` token ids.
        targets: int ``(B, T)``, the next token of each position, ``IGNORE_INDEX`` (-100)
            where there is none (padding).
        seed: seed of the gradient check's sampled coordinates (no global random numbers are
            drawn).

    Returns:
        ``pandas.DataFrame`` with one row per check (``CHECKS``, in that order) and the
        columns ``check``, ``measured`` (the number behind the verdict), ``expected``,
        ``verdict`` (``"ok"``, ``"fails"``, or ``"n/a"`` with the reason in ``expected``)
        and ``detail`` (what was measured, and where it went wrong).
    """
    import pandas as pd

    inputs, targets = _check_batch(model, inputs, targets)
    work = copy.deepcopy(model)
    work.eval()
    logits = _logits(work, inputs)
    vocab_size = logits.shape[-1]
    rows = [
        _loss_at_init(work, inputs, targets, logits),
        _causality(work, inputs, logits, vocab_size),
        _cached(work, inputs, logits),
        _gradient(work, inputs, seed),
        _padding(work, inputs, logits),
        _eval_deterministic(work, inputs, logits),
        _every_parameter_learns(work, inputs, targets),
        _overfit(work, inputs, targets),  # last: it trains the copy
    ]
    return pd.DataFrame(rows, columns=["check", "measured", "expected", "verdict", "detail"])
