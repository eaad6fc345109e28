"""The maths of a Transformer as plain functions, each with its derivative beside it.

Layer 1 of the package: NumPy only. Every ``*_backward`` here is checked against central
finite differences in ``tests/test_functional.py``.

Each function is the formula its notebook writes (02: softmax and the loss; 03: LayerNorm and
GELU; 04: attention), in one form, one array expression per line of the maths. Two choices of
arithmetic are the course's, not the textbook's, because the stored notebooks were trained
with them and a training run follows its float32 rounding step by step: sums over the last
axis go through :func:`row_sum` / :func:`row_dot` (``np.einsum``), and the tanh-GELU gate is
computed as the logistic sigmoid of ``2u`` (notebook 03). Both give the textbook numbers up to
float32 rounding; ``tests/test_one_maths.py`` checks it.

Shapes use ``B`` (batch), ``H`` (heads), ``T`` (positions), ``D`` (features), ``V`` (vocabulary).
"""

from __future__ import annotations

import math

import numpy as np

from .checks import check_int

# Python floats, not NumPy scalars: a float64 NumPy scalar would promote float32 arrays.
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715
GELU_APPROXIMATIONS = ("tanh", "none")


def _as_float(x) -> np.ndarray:
    """An array of floats: integers become float64 (``exp`` of an int array would too)."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def row_sum(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=-1, keepdims=True)``: each row's sum, as a ``(..., 1)`` column.

    Computed by ``np.einsum("...i->...", x)``, which adds a row's values in another order
    than ``np.sum``: the same sum up to float32 rounding, in the order the course's stored
    models were trained with (with ``np.sum`` their training runs end elsewhere).

    Args:
        x: ``(..., n)``.

    Returns:
        ``(..., 1)``.
    """
    return np.einsum("...i->...", x)[..., None]


def row_dot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(x * y).sum(axis=-1, keepdims=True)``: each row's dot product, as :func:`row_sum`.

    Args:
        x, y: ``(..., n)``, the same shape.

    Returns:
        ``(..., 1)``.
    """
    return np.einsum("...i,...i->...", x, y)[..., None]


# --- softmax ----------------------------------------------------------------------------
def softmax(x: np.ndarray, axis: int = -1, out: np.ndarray | None = None) -> np.ndarray:
    r"""Numerically stable softmax, :math:`e^{x_i - \max x} / \sum_j e^{x_j - \max x}`.

    Subtracting the maximum changes nothing mathematically but keeps ``exp`` from
    overflowing. Entries equal to ``-inf`` get probability 0; a slice that is *all*
    ``-inf`` (a query that may attend to nothing) gets all zeros instead of NaN.

    Args:
        x: scores, any shape; integers are taken as float64.
        axis: the axis that sums to 1.
        out: where to write the result, as in NumPy's ufuncs; ``softmax(scores,
            out=scores)`` turns the scores into probabilities without a second array of
            their size (attention's ``(B, H, T_q, T_k)`` scores: notebook 13 measures it).

    Returns:
        probabilities of ``x``'s shape (and float dtype).
    """
    x = _as_float(x)
    if x.size == 0:  # nothing to normalise (as torch.softmax of an empty tensor)
        return np.empty_like(x) if out is None else out
    x_max = np.max(x, axis=axis, keepdims=True)
    # An all -inf slice has max -inf; shifting by 0 instead keeps exp(-inf) = 0, not NaN.
    x_max[x_max == -np.inf] = 0.0
    exps = np.exp(np.subtract(x, x_max, out=out), out=out)
    total = row_sum(exps) if axis in (-1, x.ndim - 1) else exps.sum(axis=axis, keepdims=True)
    total[total == 0.0] = 1.0  # the all -inf slice again: 0 / 1 = 0
    return np.divide(exps, total, out=out)


def softmax_backward(grad_output: np.ndarray, probs: np.ndarray, axis: int = -1) -> np.ndarray:
    r"""Gradient through softmax given its output ``probs``.

    The Jacobian is :math:`\partial p_i / \partial x_j = p_i(\delta_{ij} - p_j)`, so the
    vector-Jacobian product is :math:`p \odot (g - \langle g, p \rangle)`: no ``T x T``
    Jacobian is ever built.

    Args:
        grad_output: dL/dp, the shape of ``probs``.
        probs: the output of :func:`softmax`.
        axis: the axis the softmax normalised.

    Returns:
        dL/dx, the shape of ``probs``.
    """
    if axis in (-1, probs.ndim - 1):
        inner = row_dot(grad_output, probs)  # <g, p> per row
    else:
        inner = (grad_output * probs).sum(axis=axis, keepdims=True)
    return probs * (grad_output - inner)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    r""":math:`x_i - \log\sum_j e^{x_j}`, computed without forming the probabilities.

    Args:
        x: scores, any shape.
        axis: the axis to normalise over.

    Returns:
        log-probabilities of ``x``'s shape.
    """
    x = _as_float(x)
    if x.size == 0:
        return np.empty_like(x)
    x_max = np.max(x, axis=axis, keepdims=True)
    shifted = x - x_max
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def log_softmax_backward(
    grad_output: np.ndarray, log_probs: np.ndarray, axis: int = -1
) -> np.ndarray:
    r""":math:`g - e^{\ell} \sum_j g_j` for output ``log_probs`` :math:`\ell`.

    Args:
        grad_output: dL/d(log_probs).
        log_probs: the output of :func:`log_softmax`.
        axis: the axis it normalised.

    Returns:
        dL/dx, the shape of ``log_probs``.
    """
    return grad_output - np.exp(log_probs) * np.sum(grad_output, axis=axis, keepdims=True)


# --- activations ------------------------------------------------------------------------
def _check_approximate(approximate: str) -> None:
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate={approximate!r} is not one of {GELU_APPROXIMATIONS}")


def _standard_normal_cdf(x: np.ndarray) -> np.ndarray:
    # scipy's erf is imported here, not at module level, so that importing tfscratch stays
    # NumPy-only; only the exact GELU needs it.
    from scipy.special import erf

    return 0.5 * (1.0 + erf(x / math.sqrt(2.0)))


def tanh_gelu_gate(x: np.ndarray) -> np.ndarray:
    r"""The gate of tanh-GELU, :math:`s = \tfrac12(1 + \tanh u)` with
    :math:`u = \sqrt{2/\pi}(x + 0.044715x^3)`, so that :math:`\mathrm{GELU}(x) = x\,s`.

    Computed as the logistic sigmoid :math:`s = 1 / (1 + e^{-2u})`, the same number (notebook
    03 derives it and checks the two equal), in the arithmetic the course's models were
    trained with.

    Args:
        x: any shape; integers are taken as float64.

    Returns:
        the gate, the shape and float dtype of ``x``, each value in ``[0, 1]``.
    """
    x = _as_float(x)
    # -2u = -2 sqrt(2/pi) x (1 + c x^2); x * x, not x**2 or x**3: NumPy's general power is
    # ~40x slower on float32.
    minus_two_u = (x * x * GELU_CUBIC + 1.0) * x * (-2.0 * SQRT_2_OVER_PI)
    with np.errstate(over="ignore"):  # u << 0: e^{-2u} = inf and the gate 1 / inf = 0, its limit
        return 1.0 / (1.0 + np.exp(minus_two_u))


def gelu_forward(x: np.ndarray, approximate: str = "tanh") -> tuple[np.ndarray, np.ndarray]:
    r""":func:`gelu` that also returns what :func:`gelu_backward` needs.

    Args:
        x: any shape; integers are taken as float64.
        approximate: ``"tanh"`` or ``"none"``, as in :func:`gelu`.

    Returns:
        ``(y, gate)``, both of ``x``'s shape: ``y = x * gate``, the gate being
        :func:`tanh_gelu_gate` or the normal CDF :math:`\Phi(x)` for the exact form.
    """
    _check_approximate(approximate)
    x = _as_float(x)
    if approximate == "none":
        gate = _standard_normal_cdf(x).astype(x.dtype, copy=False)
    else:
        gate = tanh_gelu_gate(x)
    return x * gate, gate


def gelu(x: np.ndarray, approximate: str = "tanh") -> np.ndarray:
    r"""Gaussian Error Linear Unit, :math:`x\,\Phi(x)`.

    ``approximate="tanh"`` (GPT-2's form, the default here):
    :math:`\tfrac12 x\,(1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715 x^3)))`, through
    :func:`tanh_gelu_gate`. ``approximate="none"``: the exact :math:`x\,\Phi(x)` with the
    normal CDF via ``erf``.

    Args:
        x: any shape.
        approximate: ``"tanh"`` or ``"none"``.

    Returns:
        ``GELU(x)``, the shape of ``x``.
    """
    return gelu_forward(x, approximate)[0]


def gelu_backward(
    grad_output: np.ndarray,
    x: np.ndarray,
    approximate: str = "tanh",
    gate: np.ndarray | None = None,
) -> np.ndarray:
    r"""Gradient of :func:`gelu` with respect to its input ``x``.

    Exact: :math:`\Phi(x) + x\,\varphi(x)`. Tanh form, with :math:`t = \tanh(u)`,
    :math:`u = \sqrt{2/\pi}(x + 0.044715x^3)`:
    :math:`\tfrac12(1+t) + \tfrac12 x (1-t^2)\sqrt{2/\pi}(1 + 3\cdot0.044715x^2)`.

    Args:
        grad_output: dL/dy, the shape of ``x``.
        x: the input of the forward pass.
        approximate: ``"tanh"`` or ``"none"``, as in the forward.
        gate: the second output of :func:`gelu_forward`; given, it is not recomputed.

    Returns:
        dL/dx, the shape of ``x``.
    """
    _check_approximate(approximate)
    if approximate == "none":
        cdf = _standard_normal_cdf(x).astype(x.dtype, copy=False) if gate is None else gate
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return grad_output * (cdf + x * pdf)
    # With the gate s = (1 + t) / 2, the formula above is s + 2 s (1 - s) x u'
    # (1 - t^2 = 4 s (1 - s)), u' = sqrt(2/pi) (1 + 3 c x^2): the gate is reused.
    s = tanh_gelu_gate(x) if gate is None else gate
    x_du_dx = (x * x * (3.0 * GELU_CUBIC) + 1.0) * x * SQRT_2_OVER_PI
    return grad_output * ((1.0 - s) * s * x_du_dx * 2.0 + s)


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)``, element-wise.

    Args:
        x: any shape.

    Returns:
        the shape and dtype of ``x``.
    """
    return np.maximum(x, 0)


def relu_backward(grad_output: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The gradient passes where ``x > 0`` (the kink at 0 takes gradient 0, as PyTorch).

    Args:
        grad_output: dL/dy, the shape of ``x``.
        x: the input of the forward pass.

    Returns:
        dL/dx, the shape of ``x``.
    """
    return grad_output * (x > 0)


# --- layer norm -------------------------------------------------------------------------
def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    r"""Normalise the last axis to zero mean and unit variance, then scale and shift.

    :math:`y = \gamma \odot (x - \mu) / \sqrt{\sigma^2 + \epsilon} + \beta`, with the
    biased variance (divide by ``D``), as PyTorch.

    Args:
        x: ``(..., D)``.
        gamma, beta: ``(D,)``, the scale and shift.
        eps: added to the variance, so a constant row does not divide by zero.

    Returns:
        ``(..., D)``.
    """
    D = np.shape(x)[-1] if np.ndim(x) else None
    for name, value in (("gamma", gamma), ("beta", beta)):
        if np.shape(value) != (D,):
            raise ValueError(
                f"{name} has shape {np.shape(value)}; expected ({D},), one value per feature of "
                f"x's last axis (x has shape {np.shape(x)})"
            )
    return layer_norm_forward(x, gamma, beta, eps)[0]


def layer_norm_forward(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r""":func:`layer_norm` that also returns what the backward needs.

    Args:
        x, gamma, beta, eps: as in :func:`layer_norm`.

    Returns:
        ``(y, x_hat, inv_std)``: the output ``(..., D)``, the normalised input
        :math:`\hat x = (x - \mu) / \sigma` ``(..., D)``, and :math:`1/\sigma` ``(..., 1)``.
    """
    D = x.shape[-1]
    mean = row_sum(x) / D
    centred = x - mean
    variance = row_dot(centred, centred) / D  # biased: divide by D
    inv_std = 1.0 / np.sqrt(variance + eps)
    x_hat = centred * inv_std
    return x_hat * gamma + beta, x_hat, inv_std


def layer_norm_backward(
    grad_output: np.ndarray, x_hat: np.ndarray, inv_std: np.ndarray, gamma: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Gradients of LayerNorm.

    With :math:`g = \partial L/\partial \hat x = \gamma \odot \partial L/\partial y`, the
    mean and variance both depend on every feature, which gives
    :math:`\partial L/\partial x = \frac{1}{\sigma}\,(g - \bar g - \hat x\,\overline{g \hat x})`
    (bars are means over the feature axis).

    Args:
        grad_output: dL/dy, ``(..., D)``.
        x_hat, inv_std: the second and third outputs of :func:`layer_norm_forward`.
        gamma: ``(D,)``, the scale of the forward.

    Returns:
        ``(dx, dgamma, dbeta)``: ``(..., D)``, ``(D,)``, ``(D,)``.
    """
    # gamma and beta act on every position alike: sum their gradients over all N positions
    D = grad_output.shape[-1]
    grad_rows, x_hat_rows = grad_output.reshape(-1, D), x_hat.reshape(-1, D)  # (N, D)
    dgamma = np.einsum("nd,nd->d", grad_rows, x_hat_rows)  # sum over n of grad * x_hat
    dbeta = grad_rows.sum(axis=0)
    g = grad_output * gamma
    g_mean = row_sum(g) / D
    g_x_hat_mean = row_dot(g, x_hat) / D
    dx = (g - g_mean - x_hat * g_x_hat_mean) * inv_std
    return dx, dgamma, dbeta


# --- dropout ----------------------------------------------------------------------------
def dropout_mask(shape, p: float, rng: np.random.Generator, dtype=np.float32) -> np.ndarray:
    """Inverted-dropout multiplier: ``0`` with probability ``p``, else ``1 / (1 - p)``.

    Scaling the kept units at training time keeps every activation's expectation unchanged,
    so evaluation needs no rescaling at all.

    Args:
        shape: the shape of the array to drop from.
        p: the drop probability, in ``[0, 1)``.
        rng: the generator to draw from (a module's own, so runs repeat).
        dtype: the float dtype of the mask.

    Returns:
        the multiplier, ``shape`` and ``dtype``.
    """
    keep = rng.random(shape) >= p
    return keep.astype(dtype) * np.asarray(1.0 / (1.0 - p), dtype=dtype)


# --- attention --------------------------------------------------------------------------
def causal_mask(T: int, offset: int = 0) -> np.ndarray:
    """Boolean ``(T, offset + T)`` mask, True where a query may **not** look (the future).

    Query ``i`` sits at absolute position ``offset + i`` and may see keys ``0 ... offset + i``.

    Args:
        T: the number of queries (new positions).
        offset: the number of positions already in a KV cache (0: the usual ``(T, T)`` mask,
            True strictly above the diagonal).

    Returns:
        bool ``(T, offset + T)``.
    """
    T, offset = check_int(T, "T", minimum=1), check_int(offset, "offset", minimum=0)
    query_positions = offset + np.arange(T)[:, None]
    key_positions = np.arange(offset + T)[None, :]
    return key_positions > query_positions


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    dropout_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`\mathrm{softmax}(Q K^\top / \sqrt{d} + \text{mask})\,V`.

    Args:
        q: ``(B, H, T_q, d_head)``; k, v: ``(B, H, T_k, d_head)`` (any leading axes work).
        mask: boolean, True = blocked, broadcastable to ``(B, H, T_q, T_k)``.
        dropout_mask: dropout on the attention weights (training only): an inverted-dropout
            multiplier of the weights' shape (:func:`dropout_mask`), applied before ``@ V``.

    Returns:
        ``(out, weights)``: ``(B, H, T_q, d_head)`` and ``(B, H, T_q, T_k)`` (the weights
        before dropout). A query whose keys are all blocked gets zero weights and a zero
        output, never NaN.
    """
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"q {q.shape}, k {k.shape}, v {v.shape}: q and k need the same d_head (last axis) "
            "and k and v the same number of keys T_k (second to last axis)"
        )
    if mask is not None and np.asarray(mask).dtype != bool:
        raise TypeError(
            f"mask must be a boolean array (True = blocked), got dtype {np.asarray(mask).dtype}; "
            "an additive 0/-inf mask or a 0/1 int mask converts with mask.astype(bool) for 0/1, "
            "or mask == -np.inf for an additive one"
        )
    weights = attention_weights(q, k, mask)
    return attend(weights, v, dropout_mask), weights


def attention_weights(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    r"""The first half of :func:`scaled_dot_product_attention`, the attention weights
    :math:`\mathrm{softmax}(Q K^\top / \sqrt{d} + \text{mask})`.

    Args:
        q: ``(B, H, T_q, d_head)``; k: ``(B, H, T_k, d_head)``.
        mask: boolean, True = blocked, broadcastable to ``(B, H, T_q, T_k)``, or None.

    Returns:
        ``(B, H, T_q, T_k)``, each row summing to 1 (0 for a fully blocked row).
    """
    scale = 1.0 / math.sqrt(q.shape[-1])  # a Python float: the scores keep q's dtype
    # One (B, H, T_q, T_k) array from scores to weights: scaled, masked and normalised where
    # it is (the memory attention needs is this matrix; notebook 13 measures it).
    scores = q @ np.swapaxes(k, -1, -2)
    scores *= scale
    if mask is not None:
        np.copyto(scores, -np.inf, where=mask)  # blocked: e^-inf = 0 after the softmax
    return softmax(scores, axis=-1, out=scores)


def attend(weights: np.ndarray, v: np.ndarray, dropout_mask: np.ndarray | None = None):
    """The second half of :func:`scaled_dot_product_attention`: weights times values.

    Args:
        weights: ``(B, H, T_q, T_k)``; v: ``(B, H, T_k, d_head)``.
        dropout_mask: the inverted-dropout multiplier of the weights, or None.

    Returns:
        ``(B, H, T_q, d_head)``.
    """
    attended = weights if dropout_mask is None else weights * dropout_mask
    return attended @ v


def scaled_dot_product_attention_backward(
    grad_output: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    weights: np.ndarray,
    dropout_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`scaled_dot_product_attention`, one line per forward line, in
    reverse: ``out = A V`` with ``A`` the (dropped-out) weights, then the softmax, then the
    scale, then ``Q K^T``.

    Blocked entries have weight 0, so the softmax backward gives them gradient 0: the mask
    needs no special treatment here.

    Args:
        grad_output: dL/d(out), ``(B, H, T_q, d_head)``.
        q, k, v: the inputs of the forward pass.
        weights: its second output, ``(B, H, T_q, T_k)``.
        dropout_mask: the multiplier the forward applied to the weights, or None.

    Returns:
        ``(dq, dk, dv)``, the shapes of ``q``, ``k`` and ``v``.
    """
    d_weights, dv = attend_backward(grad_output, weights, v, dropout_mask)
    dq, dk = attention_weights_backward(d_weights, q, k, weights)
    return dq, dk, dv


def attend_backward(grad_output, weights, v, dropout_mask=None):
    """Backward of :func:`attend`.

    Args:
        grad_output: dL/d(out) ``(B, H, T_q, d_head)``.
        weights, v, dropout_mask: the inputs of the forward.

    Returns:
        ``(d_weights, dv)``.
    """
    attended = weights if dropout_mask is None else weights * dropout_mask
    dv = np.swapaxes(attended, -1, -2) @ grad_output
    d_attended = grad_output @ np.swapaxes(v, -1, -2)
    d_weights = d_attended if dropout_mask is None else d_attended * dropout_mask
    return d_weights, dv


def attention_weights_backward(d_weights, q, k, weights):
    """Backward of :func:`attention_weights`: the softmax, the scale, then ``Q K^T``.

    Args:
        d_weights: dL/d(weights) ``(B, H, T_q, T_k)``.
        q, k: the inputs of the forward; weights: its output.

    Returns:
        ``(dq, dk)``.
    """
    d_scores = softmax_backward(d_weights, weights) * (1.0 / math.sqrt(q.shape[-1]))
    return d_scores @ k, np.swapaxes(d_scores, -1, -2) @ q


# --- cross-entropy ----------------------------------------------------------------------
IGNORE_INDEX = -100
"""The target value that marks "nothing to predict here" (padding), as PyTorch's default
``ignore_index``: pass ``ignore_index=IGNORE_INDEX`` and :func:`cross_entropy` skips it."""


def _check_targets(logits: np.ndarray, targets: np.ndarray, ignore_index: int | None) -> None:
    if not isinstance(logits, np.ndarray) or not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(
            f"logits must be a float array of shape (..., V), got {type(logits).__name__}"
            + (f" of dtype {logits.dtype}" if isinstance(logits, np.ndarray) else "")
        )
    if logits.ndim == 0:
        raise ValueError("logits has shape (); expected shape (..., V) with a class axis last")
    if not isinstance(targets, np.ndarray) or not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(
            "targets must be an integer array of class ids, got "
            + (
                f"dtype {targets.dtype}"
                if isinstance(targets, np.ndarray)
                else type(targets).__name__
            )
        )
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets shape {targets.shape} does not match logits shape {logits.shape}: "
            f"expected targets of shape {logits.shape[:-1]}"
        )
    n_classes = logits.shape[-1]
    valid = targets != ignore_index if ignore_index is not None else np.ones(targets.shape, bool)
    bad = valid & ((targets < 0) | (targets >= n_classes))
    if bad.any():
        value = targets[bad].flat[0]
        hint = ""
        if ignore_index is None and value == IGNORE_INDEX:
            hint = (
                f"; {IGNORE_INDEX} marks padding: pass ignore_index=tfscratch.functional."
                f"IGNORE_INDEX ({IGNORE_INDEX}, PyTorch's default) so it is not scored"
            )
        raise ValueError(
            f"targets contain {value}, outside [0, {n_classes}) for logits with {n_classes} "
            f"classes"
            + (f" (ignore_index={ignore_index})" if ignore_index is not None else "")
            + hint
        )


def _cross_entropy_parts(logits, targets, ignore_index, label_smoothing):
    """Shared by forward and backward: log-probs, the kept targets and the count."""
    _check_targets(logits, targets, ignore_index)
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} must be in [0, 1)")
    n_classes = logits.shape[-1]
    flat_logits = logits.reshape(-1, n_classes)
    flat_targets = targets.reshape(-1)
    keep = (
        flat_targets != ignore_index
        if ignore_index is not None
        else np.ones(flat_targets.shape, dtype=bool)
    )
    return flat_logits, flat_targets, keep, int(keep.sum())


def cross_entropy(
    logits: np.ndarray,
    targets: np.ndarray,
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
) -> float:
    r"""Mean negative log-likelihood of ``targets`` under ``softmax(logits)``.

    With label smoothing :math:`\varepsilon` the target distribution is
    :math:`(1-\varepsilon)\,\text{onehot} + \varepsilon / V` (as PyTorch). Targets equal to
    ``ignore_index`` do not count; if every target is ignored the loss is 0.0.

    Args:
        logits: float ``(..., V)`` scores.
        targets: integer ``(...)`` class ids in ``[0, V)``, or ``ignore_index``.
        ignore_index: the target value not scored (e.g. :data:`IGNORE_INDEX`), or None.
        label_smoothing: in ``[0, 1)``.

    Returns:
        the mean over the scored targets, a Python float (computed in float64).
    """
    flat_logits, flat_targets, keep, count = _cross_entropy_parts(
        logits, targets, ignore_index, label_smoothing
    )
    if count == 0:
        return 0.0
    log_probs = log_softmax(flat_logits[keep].astype(np.float64, copy=False))
    kept_targets = flat_targets[keep]
    nll = -log_probs[np.arange(count), kept_targets]
    if label_smoothing:
        nll = (1.0 - label_smoothing) * nll - label_smoothing * log_probs.mean(axis=-1)
    return float(nll.mean())


def cross_entropy_backward(
    logits: np.ndarray,
    targets: np.ndarray,
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
) -> np.ndarray:
    r"""Gradient of :func:`cross_entropy` with respect to ``logits`` (same shape and dtype).

    The famous result: :math:`(\mathrm{softmax}(z) - y) / N`, where :math:`y` is the
    (smoothed) target distribution and :math:`N` the number of targets that count.
    Ignored positions get a zero gradient.

    Args:
        logits: float ``(..., V)`` scores.
        targets: integer ``(...)`` class ids in ``[0, V)``, or ``ignore_index``.
        ignore_index: the target value not scored (e.g. :data:`IGNORE_INDEX`), or None.
        label_smoothing: in ``[0, 1)``.

    Returns:
        dL/dlogits, the shape and dtype of ``logits``.
    """
    flat_logits, flat_targets, keep, count = _cross_entropy_parts(
        logits, targets, ignore_index, label_smoothing
    )
    grad = np.zeros_like(flat_logits)
    if count == 0:
        return grad.reshape(logits.shape)
    n_classes = logits.shape[-1]
    probs = softmax(flat_logits[keep])
    probs[np.arange(count), flat_targets[keep]] -= 1.0 - label_smoothing
    if label_smoothing:
        probs -= label_smoothing / n_classes
    grad[keep] = probs / count
    return grad.reshape(logits.shape)
