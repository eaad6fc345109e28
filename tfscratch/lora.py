"""LoRA: adapt a trained ``Linear`` by training a low-rank update next to it (notebook 17).

Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models" (2021), section 4.1: keep the
trained weight ``W (d_in, d_out)`` frozen and learn ``ΔW = (alpha / rank) A B`` with
``A (d_in, rank)`` and ``B (rank, d_out)``, ``rank`` much smaller than ``d_in`` and
``d_out``. ``B`` starts at zero, so the adapted model starts exactly equal to the trained one.
(The paper writes ``h = W0 x + B A x`` with column vectors; with this package's row vectors,
``y = x W``, the same map is ``x A B``.)

Forward, for ``x (..., d_in)``::

    y = x W + b + s (x A) B,        s = alpha / rank

Backward, with ``dy = dL/dy (..., d_out)`` and ``u = x A (..., rank)`` kept from the forward::

    dB = s u^T dy                   (rank, d_out), summed over the leading axes
    du = s dy B^T                   (..., rank)
    dA = x^T du                     (d_in, rank)
    dx = dy W^T + du A^T            (..., d_in): through the frozen path and the low-rank one

``W`` and ``b`` are frozen: they receive no gradient, and the backward does not compute one.
"""

from __future__ import annotations

import numpy as np

from .checks import check_float_array
from .layers import ANY_RANK, Linear
from .module import Module, Parameter, make_rng

__all__ = ["LoRALinear", "add_lora", "merge_lora"]


def _check_rank(rank, d_in: int, d_out: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
        raise TypeError(f"rank must be an int, got {rank!r}")
    if not 1 <= rank <= min(d_in, d_out):
        raise ValueError(
            f"rank={rank} is out of range: expected 1 <= rank <= min(d_in, d_out) = "
            f"{min(d_in, d_out)} for a Linear of shape ({d_in}, {d_out})"
        )
    return int(rank)


class LoRALinear(Module):
    """A frozen ``Linear`` plus a trainable low-rank update: ``base(x) + s (x A) B``.

    Args:
        base: the trained :class:`~tfscratch.nn.Linear` to adapt. Its parameters are frozen
            (``requires_grad = False``) and kept as ``base.weight``, ``base.bias``.
        rank: ``1 <= rank <= min(d_in, d_out)``, the rank of the update.
        alpha: the update is scaled by ``s = alpha / rank``; None means ``alpha = rank``
            (``s = 1``). A positive number.
        seed, rng: where ``A``'s initial values come from (a seed, or a generator to share).

    Attributes:
        lora_A: ``(d_in, rank)``, drawn uniform in ``±1/sqrt(d_in)`` (as a Linear's weight;
            the paper draws it Gaussian).
        lora_B: ``(rank, d_out)``, zeros: at first the layer computes exactly what ``base``
            computes.
        scale: ``alpha / rank``.
    """

    def __init__(self, base: Linear, rank: int, alpha: float | None = None, seed=None, rng=None):
        if not isinstance(base, Linear):
            raise TypeError(f"base must be a tfscratch.nn.Linear, got {type(base).__name__}")
        self.d_in, self.d_out = base.d_in, base.d_out
        self.rank = _check_rank(rank, self.d_in, self.d_out)
        if alpha is None:
            alpha = float(rank)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number)):
            raise TypeError(f"alpha must be a positive number or None, got {alpha!r}")
        if not (np.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha={alpha!r} is out of range: expected a finite number > 0")
        self.alpha = float(alpha)
        self.scale = self.alpha / self.rank
        self.base = base.freeze()
        rng = make_rng(seed, rng)
        dtype = base.weight.data.dtype
        bound = 1.0 / np.sqrt(self.d_in)
        self.lora_A = Parameter(rng.uniform(-bound, bound, (self.d_in, self.rank)).astype(dtype))
        self.lora_B = Parameter(np.zeros((self.rank, self.d_out), dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """``base(x) + scale * (x @ lora_A) @ lora_B``.

        Args:
            x: float ``(..., d_in)``.

        Returns:
            ``(..., d_out)``.
        """
        check_float_array(x, "x", ndim=ANY_RANK, last_dim=self.d_in)
        x_rows = x.reshape(-1, self.d_in)  # (N, d_in): the leading axes as rows
        u = x_rows @ self.lora_A.data  # (N, rank): the input seen through A
        y = x_rows @ self.base.weight.data
        if self.base.bias is not None:
            y += self.base.bias.data
        y += self.scale * (u @ self.lora_B.data)
        self.save_for_backward(x=x, u=u)
        return y.reshape(x.shape[:-1] + (self.d_out,))

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """``dB = s u^T dy``, ``dA = x^T (s dy B^T)``, ``dx = dy W^T + s dy B^T A^T``.

        Args:
            grad_output: dL/dy ``(..., d_out)``.

        Returns:
            dL/dx ``(..., d_in)``; ``dA`` and ``dB`` are added to ``lora_A.grad`` and
            ``lora_B.grad`` (the frozen base gets none).
        """
        self.check_ready_for_backward()
        self.check_grad_shape(grad_output, (*self._x.shape[:-1], self.d_out))
        x_rows, dy = self._x.reshape(-1, self.d_in), grad_output.reshape(-1, self.d_out)  # rows
        self.lora_B.grad += self.scale * (self._u.T @ dy)  # (rank, N) @ (N, d_out)
        du = self.scale * (dy @ self.lora_B.data.T)  # (N, rank)
        self.lora_A.grad += x_rows.T @ du  # (d_in, N) @ (N, rank)
        dx = dy @ self.base.weight.data.T + du @ self.lora_A.data.T
        return dx.reshape(self._x.shape)

    def delta_weight(self) -> np.ndarray:
        """The update ``scale * lora_A @ lora_B`` ``(d_in, d_out)``, of rank <= ``rank``."""
        return self.scale * (self.lora_A.data @ self.lora_B.data)

    def merged(self) -> Linear:
        """A plain ``Linear`` computing the same map: weight ``W + scale * A B``, the base's
        bias. A new layer (trainable, as any new ``Linear``); this one is unchanged."""
        base = self.base
        linear = Linear(self.d_in, self.d_out, bias=base.bias is not None, seed=0,
                        dtype=base.weight.data.dtype)  # fmt: skip
        linear.weight.data = base.weight.data + self.delta_weight()
        if base.bias is not None:
            linear.bias.data = base.bias.data
        return linear

    def __repr__(self) -> str:
        return (
            f"LoRALinear(d_in={self.d_in}, d_out={self.d_out}, rank={self.rank}, "
            f"alpha={self.alpha:g})"
        )


def _find_linears(model: Module) -> dict[str, tuple[Module, str]]:
    """Every ``Linear`` under ``model`` by dotted name -> (its parent, its attribute path)."""
    found = {}
    for parent_name, parent in _named_modules(model):
        for child_name, child in parent.named_children():
            if isinstance(child, Linear):
                found[f"{parent_name}{child_name}"] = (parent, child_name)
    return found


def _named_modules(model: Module, prefix: str = ""):
    yield prefix, model
    for name, child in model.named_children():
        yield from _named_modules(child, f"{prefix}{name}.")


def _replace_child(parent: Module, child_name: str, new: Module) -> None:
    """Put ``new`` where ``parent``'s child ``child_name`` (``attr`` or ``attr.key``) is."""
    attr, _, key = child_name.partition(".")
    if not key:
        setattr(parent, attr, new)
        return
    container = getattr(parent, attr)
    if isinstance(container, dict):
        container[key] = new
    elif isinstance(container, list):
        container[int(key)] = new
    else:  # a tuple: rebuild it
        items = list(container)
        items[int(key)] = new
        setattr(parent, attr, type(container)(items))


def add_lora(
    model: Module,
    rank: int,
    targets=("q_proj", "v_proj"),
    alpha: float | None = None,
    seed: int = 0,
) -> dict[str, LoRALinear]:
    """Freeze ``model`` and wrap each chosen ``Linear`` in a :class:`LoRALinear`, in place.

    Every parameter of ``model`` is frozen; only the new ``lora_A`` and ``lora_B`` train.
    The model's output is unchanged until they do (``B`` starts at zero).

    Args:
        model: any :class:`Module` (e.g. a ``DecoderLM``).
        rank: the rank of every update, ``1 <= rank <= min(d_in, d_out)`` of each target.
        targets: which ``Linear`` layers to adapt, by the last part of their dotted name
            (``"q_proj"`` adapts ``blocks.0.attn.q_proj``, ``blocks.1.attn.q_proj``, ...) or
            by the full dotted name. The default, the query and value projections, is the
            paper's choice (section 7.1). Each target must name at least one ``Linear``.
        alpha: as in :class:`LoRALinear` (None: ``alpha = rank``).
        seed: seeds one generator that draws every ``lora_A`` in turn.

    Returns:
        ``{dotted name: LoRALinear}`` of the layers wrapped, in the model's order.
    """
    if not isinstance(model, Module):
        raise TypeError(f"model must be a tfscratch Module, got {type(model).__name__}")
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    if not targets or not all(isinstance(t, str) for t in targets):
        raise TypeError(f"targets must be a non-empty tuple of layer names, got {targets!r}")
    linears = _find_linears(model)
    chosen = {
        name: where
        for name, where in linears.items()
        if name in targets or name.rsplit(".", 1)[-1] in targets
    }
    names_found = set(chosen) | {name.rsplit(".", 1)[-1] for name in chosen}
    unknown = [t for t in targets if t not in names_found]
    if unknown:
        wrapped = sorted(
            name
            for name, module in _named_modules(model)
            if isinstance(module, LoRALinear) and name.rstrip(".").rsplit(".", 1)[-1] in unknown
        )
        hint = f" ({wrapped} already carry LoRA)" if wrapped else ""
        kinds = sorted({name.rsplit(".", 1)[-1] for name in linears})
        raise ValueError(
            f"targets={targets!r}: {unknown} name no Linear of this "
            f"{type(model).__name__}{hint}; expected names among {kinds} or full dotted names"
        )
    for name, (_, child_name) in chosen.items():
        _check_rank(rank, *_getattr_path(model, name).weight.shape)
    model.freeze()
    rng = make_rng(seed)
    adapted = {}
    for name, (parent, child_name) in chosen.items():
        layer = LoRALinear(_getattr_path(model, name), rank, alpha, rng=rng)
        _replace_child(parent, child_name, layer)
        adapted[name] = layer
    model.forget_forwards()
    return adapted


def merge_lora(model: Module) -> dict[str, Linear]:
    """Replace every :class:`LoRALinear` under ``model`` by its :meth:`~LoRALinear.merged`
    ``Linear``, in place (the model computes the same outputs, with no extra matmul).

    Args:
        model: a :class:`Module` adapted with :func:`add_lora`.

    Returns:
        ``{dotted name: the new Linear}``. The merged layers are trainable; the other
        parameters keep their ``requires_grad``.
    """
    merged = {}
    for parent_name, parent in list(_named_modules(model)):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                linear = child.merged()
                _replace_child(parent, child_name, linear)
                merged[f"{parent_name}{child_name}"] = linear
    model.forget_forwards()
    return merged


def _getattr_path(model: Module, name: str) -> Module:
    """The submodule at a dotted name (``blocks.0.attn.q_proj``), lists and dicts included."""
    node = model
    for part in name.split("."):
        if isinstance(node, (list, tuple)):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            node = getattr(node, part)
    return node
