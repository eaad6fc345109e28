"""Optimisers, gradient clipping and a learning-rate schedule, in NumPy.

The training loop is always the same five lines::

    optimizer = AdamW(model.parameters(), lr=3e-4)
    schedule = WarmupCosineSchedule(optimizer, warmup_steps=100, total_steps=2000)
    for step in range(2000):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y); model.backward(loss_fn.backward())
        clip_grad_norm(model.parameters(), max_norm=1.0)
        optimizer.step()
        schedule.step()

Every optimiser follows PyTorch's equations (``torch.optim.SGD``, ``Adam``, ``AdamW``), so
numbers and hyper-parameters carry over. ``step()`` reads the writable ``lr`` attribute each
time, which is how a schedule steers it. Updates happen in place: ``parameter.data`` stays the
same array object (and dtype: float32 stays float32), so views of it, such as tied weights,
see every update.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from .checks import check_int, check_number
from .module import Module, Parameter, check_state_fits

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "Optimizer",
    "WarmupCosineSchedule",
    "clip_grad_norm",
    "warmup_cosine",
]


# --- checking arguments ---------------------------------------------------------------------
def _named_parameters(params, *, allow_empty: bool = False) -> dict[str, Parameter]:
    """``params`` (an iterable of Parameters or a name -> Parameter dict) as a dict.

    Unnamed parameters are called ``"0"``, ``"1"``, ... in the order given. A parameter listed
    twice is kept once: updating a tied weight twice per step would double its learning rate.
    """
    if isinstance(params, Module):
        raise TypeError(
            f"params is a {type(params).__name__} module; pass model.parameters() or "
            "model.named_parameters() (an iterable of Parameter or a dict name -> Parameter)"
        )
    if isinstance(params, (Parameter, np.ndarray)):
        raise TypeError(
            f"params must be an iterable of Parameter or a dict name -> Parameter, got a single "
            f"{type(params).__name__}; wrap it in a list: [param]"
        )
    if isinstance(params, Mapping):
        items = list(params.items())
    elif isinstance(params, Iterable) and not isinstance(params, (str, bytes)):
        items = [(str(index), value) for index, value in enumerate(params)]
    else:
        raise TypeError(
            f"params must be an iterable of Parameter or a dict name -> Parameter, "
            f"got {type(params).__name__}"
        )
    named: dict[str, Parameter] = {}
    seen: set[int] = set()
    for name, value in items:
        if not isinstance(value, Parameter):
            raise TypeError(
                f"params[{name!r}] is a {type(value).__name__}, expected a Parameter "
                "(with .data and .grad)"
            )
        if id(value) not in seen:
            seen.add(id(value))
            named[str(name)] = value
    if not named and not allow_empty:
        raise ValueError("params is empty: the optimiser was given no parameters to update")
    return named


# --- the base class -------------------------------------------------------------------------
class Optimizer:
    """What every optimiser shares: its parameters, ``lr``, ``zero_grad`` and its state.

    Args:
        params: an iterable of :class:`Parameter` (``model.parameters()``) or a dict
            name -> Parameter (``model.named_parameters()``; the names then label the state).
        lr: learning rate, ``>= 0``. A plain attribute afterwards: ``step()`` reads it every
            time, so a schedule (or you) may change it between steps.

    A frozen parameter (``requires_grad`` False, see ``Module.freeze``) is skipped by every
    ``step()``: its values and its state (momentum, ``m``, ``v``) stay as they are, also under
    weight decay. Pass ``model.trainable_parameters()`` rather than all parameters so the
    optimiser holds no state for the frozen ones.

    Attributes:
        t: number of ``step()`` calls so far (the ``t`` of Adam's bias correction).
        buffers: per-parameter state, ``{"m": {name: array}, ...}``; empty for plain SGD.
    """

    # Scratch arrays per parameter that a subclass's ``step`` needs (see ``_make_scratch``).
    n_scratch: int = 1

    def __init__(self, params, lr: float):
        self.named_params = _named_parameters(params)
        self.params = list(self.named_params.values())
        self.lr = lr
        self.t = 0
        self.buffers: dict[str, dict[str, np.ndarray]] = {}
        self._scratch = self._make_scratch()

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = check_number(value, "lr", low=0.0, expected="a finite learning rate >= 0")

    def _new_buffer(self) -> dict[str, np.ndarray]:
        """One zero array per parameter, shaped and typed like it."""
        return {name: np.zeros_like(p.data) for name, p in self.named_params.items()}

    def _make_scratch(self) -> dict[str, list[np.ndarray]]:
        """Views into one shared workspace, ``n_scratch`` per parameter.

        The update runs every training step; writing ``p -= lr * g`` would allocate a fresh
        ``lr * g`` each time. Instead each step writes into these views with ``out=``. The
        parameters are updated one after another, so they can all share a workspace as large
        as the largest parameter (one per dtype) instead of each owning a copy of itself.
        """
        sizes: dict[np.dtype, int] = {}
        for p in self.params:
            sizes[p.data.dtype] = max(sizes.get(p.data.dtype, 0), p.data.size)
        workspace = {
            dtype: np.empty((self.n_scratch, size), dtype) for dtype, size in sizes.items()
        }
        return {
            name: [
                workspace[p.data.dtype][slot, : p.data.size].reshape(p.data.shape)
                for slot in range(self.n_scratch)
            ]
            for name, p in self.named_params.items()
        }

    def zero_grad(self) -> None:
        """Set every parameter's ``.grad`` to zero (``backward`` accumulates into it)."""
        for p in self.params:
            p.zero_grad()

    def step(self) -> None:  # pragma: no cover - abstract
        """Update every parameter in place from its ``.grad`` (each optimiser defines it)."""
        raise NotImplementedError

    # --- saving and resuming ------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray | float | int]:
        """A copy of what resuming needs: ``lr``, ``t`` and every buffer as ``"m.<name>"``.

        Flat and made of arrays and numbers, so ``np.savez(path, **opt.state_dict())`` works.
        The other hyper-parameters come from the constructor, as in the original run.
        """
        state: dict[str, np.ndarray | float | int] = {"lr": self.lr, "t": self.t}
        for kind, arrays in self.buffers.items():
            for name, array in arrays.items():
                state[f"{kind}.{name}"] = array.copy()
        return state

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a :meth:`state_dict`. Strict: every mismatch is reported, nothing changes.

        Args:
            state: a dict as :meth:`state_dict` made it (e.g. read back with ``np.load``).
        """
        if not isinstance(state, Mapping):
            raise TypeError(
                f"state must be a dict as made by state_dict(), got {type(state).__name__}"
            )
        own = {
            f"{kind}.{name}": array
            for kind, arrays in self.buffers.items()
            for name, array in arrays.items()
        }
        expected = {key: array.shape for key, array in own.items()} | {"lr": (), "t": ()}
        check_state_fits(state, expected, f"this {type(self).__name__}", ("optimiser", "state"))
        self.lr = float(np.asarray(state["lr"]))
        self.t = int(np.asarray(state["t"]))
        for key, array in own.items():
            array[...] = np.asarray(state[key], dtype=array.dtype)

    def _hyper_repr(self) -> str:
        return f"lr={self.lr}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._hyper_repr()}, {len(self.params)} parameters)"


# --- SGD --------------------------------------------------------------------------------------
class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum and L2 weight decay (PyTorch's).

    For each parameter ``p`` with gradient ``g``::

        g <- g + weight_decay * p              (L2 penalty (wd/2)||p||^2, folded into g)
        b <- momentum * b + g                  (b starts at 0, so b_1 = g_1)
        p <- p - lr * b                        (with momentum = 0: p <- p - lr * g)

    Args:
        params: ``model.parameters()`` or ``model.named_parameters()``.
        lr: learning rate, ``>= 0``.
        momentum: ``>= 0``; the buffer ``b`` is a running sum that remembers past steps.
        weight_decay: ``>= 0``.
    """

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum = check_number(momentum, "momentum", low=0.0, expected="momentum >= 0")
        self.weight_decay = check_number(
            weight_decay, "weight_decay", low=0.0, expected="weight_decay >= 0"
        )
        if self.momentum > 0:
            self.buffers["momentum_buffer"] = self._new_buffer()

    def step(self) -> None:
        """Update every parameter in place with the current ``lr``."""
        self.t += 1
        lr, momentum, weight_decay = self.lr, self.momentum, self.weight_decay
        for name, p in self.named_params.items():
            if not p.requires_grad:  # frozen: left as it is
                continue
            (scratch,) = self._scratch[name]
            g = p.grad
            if weight_decay:
                # Into scratch, not p.grad: the gradient the model computed stays untouched.
                g = np.multiply(p.data, weight_decay, out=scratch)
                g += p.grad
            if momentum:
                b = self.buffers["momentum_buffer"][name]
                b *= momentum
                b += g
                g = b
            p.data -= np.multiply(g, lr, out=scratch)

    def _hyper_repr(self) -> str:
        return f"lr={self.lr}, momentum={self.momentum}, weight_decay={self.weight_decay}"


# --- Adam and AdamW -----------------------------------------------------------------------------
class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015) with PyTorch's L2 weight decay and bias correction.

    At step ``t = 1, 2, ...``, for each parameter ``p`` with gradient ``g``::

        g <- g + weight_decay * p                       (L2, folded into the gradient)
        m <- beta1 * m + (1 - beta1) * g                (running mean of g)
        v <- beta2 * v + (1 - beta2) * g^2              (running mean of g^2)
        m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)
        p <- p - lr * m_hat / (sqrt(v_hat) + eps)

    ``m`` and ``v`` start at 0, so early averages are too small; dividing by
    ``1 - beta^t`` undoes that (bias correction). Each coordinate's step is about ``lr`` in
    size whatever the scale of its gradient: ``m_hat / sqrt(v_hat)`` is near +-1 when the
    gradient is consistent and near 0 when it is noise.

    Args:
        params: ``model.parameters()`` or ``model.named_parameters()``.
        lr: learning rate, ``>= 0``.
        betas: ``(beta1, beta2)``, each in ``[0, 1)``.
        eps: ``> 0``, keeps the division finite where ``v`` is 0.
        weight_decay: ``>= 0``. Note that with Adam an L2 term is rescaled by ``sqrt(v_hat)``
            like the rest of the gradient, so it barely decays weights with large gradients;
            :class:`AdamW` decouples it.

    Attributes:
        buffers: ``{"m": {name: array}, "v": {name: array}}``, same shapes and dtypes as the
            parameters.
    """

    # AdamW sets this: decay the weights directly instead of adding to the gradient.
    decoupled_weight_decay: bool = False
    n_scratch = 2

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(params, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas={betas!r} must be a pair (beta1, beta2), e.g. (0.9, 0.999)")
        self.beta1 = check_number(
            betas[0], "betas[0]", low=0.0, high=1.0, expected="beta1 in [0, 1)"
        )
        self.beta2 = check_number(
            betas[1], "betas[1]", low=0.0, high=1.0, expected="beta2 in [0, 1)"
        )
        self.eps = check_number(eps, "eps", low=0.0, low_inclusive=False, expected="eps > 0")
        self.weight_decay = check_number(
            weight_decay, "weight_decay", low=0.0, expected="weight_decay >= 0"
        )
        self.buffers["m"] = self._new_buffer()
        self.buffers["v"] = self._new_buffer()

    @property
    def betas(self) -> tuple[float, float]:
        return (self.beta1, self.beta2)

    def step(self) -> None:
        """Update every parameter in place with the current ``lr``."""
        self.t += 1
        lr, beta1, beta2, eps = self.lr, self.beta1, self.beta2, self.eps
        weight_decay = self.weight_decay
        # PyTorch's arrangement of the same formula: fold 1/(1 - beta1^t) into the step size
        # and divide sqrt(v) by sqrt(1 - beta2^t), so m_hat and v_hat are never materialised.
        step_size = lr / (1.0 - beta1**self.t)
        bias_correction2_sqrt = math.sqrt(1.0 - beta2**self.t)
        for name, p in self.named_params.items():
            if not p.requires_grad:  # frozen: left as it is
                continue
            scratch = self._scratch[name]
            work = scratch[-1]  # AdamW has a single view: it never needs scratch[0] for g
            m, v = self.buffers["m"][name], self.buffers["v"][name]
            g = p.grad
            if weight_decay and self.decoupled_weight_decay:
                p.data *= 1.0 - lr * weight_decay
            elif weight_decay:
                g = np.multiply(p.data, weight_decay, out=scratch[0])
                g += p.grad
            # m <- beta1 m + (1 - beta1) g
            m *= beta1
            m += np.multiply(g, 1.0 - beta1, out=work)
            # v <- beta2 v + (1 - beta2) g^2
            v *= beta2
            np.multiply(g, g, out=work)
            work *= 1.0 - beta2
            v += work
            # p <- p - step_size * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
            np.sqrt(v, out=work)
            work /= bias_correction2_sqrt
            work += eps
            np.divide(m, work, out=work)
            work *= step_size
            p.data -= work

    def _hyper_repr(self) -> str:
        return f"lr={self.lr}, betas={self.betas}, eps={self.eps}, weight_decay={self.weight_decay}"


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019), as ``torch.optim.AdamW``.

    At step ``t``, before the Adam update of :class:`Adam` (which then uses the raw ``g``)::

        p <- p - lr * weight_decay * p

    The decay shrinks every weight by the same factor, whatever its gradient history, instead
    of being divided by ``sqrt(v_hat)`` like an L2 term would be. Defaults as PyTorch:
    ``lr=1e-3``, ``betas=(0.9, 0.999)``, ``eps=1e-8``, ``weight_decay=0.01``.

    Args:
        params: the parameters to update (``model.parameters()``, or a dict of name ->
            parameter).
        lr: the learning rate (a schedule may change ``optimizer.lr`` between steps).
        betas: the decay rates of the first and second moment estimates.
        eps: added to ``sqrt(v_hat)`` so a tiny second moment does not divide by zero.
        weight_decay: the decoupled decay per unit of ``lr``.
    """

    decoupled_weight_decay = True
    n_scratch = 1  # no scratch for g + weight_decay * p: the raw gradient is used as is

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        super().__init__(params, lr, betas, eps, weight_decay)


# --- gradient clipping --------------------------------------------------------------------------
def clip_grad_norm(params, max_norm: float) -> float:
    """Rescale all gradients together so their global L2 norm is at most ``max_norm``.

    ``norm = sqrt(sum over every parameter of sum(grad^2))``; when ``norm > max_norm`` every
    ``grad`` is multiplied in place by ``max_norm / (norm + 1e-6)`` (PyTorch's
    ``clip_grad_norm_``), so the direction of the update is kept and only its length shrinks.

    Args:
        params: an iterable of :class:`Parameter` or a dict name -> Parameter.
        max_norm: ``> 0``; ``float("inf")`` measures the norm without clipping.

    Returns:
        The norm *before* clipping, as a Python float; 0.0 for no parameters. A non-finite
        norm (an overflow or NaN somewhere) is returned as is and nothing is scaled: clipping
        cannot repair it, and the training loop should report it.
    """
    max_norm = check_number(
        max_norm,
        "max_norm",
        low=0.0,
        low_inclusive=False,
        high=math.inf,
        high_inclusive=True,
        expected="max_norm > 0",
    )
    grads = [p.grad for p in _named_parameters(params, allow_empty=True).values()]
    # vdot(g, g) = sum(g^2) without allocating g^2; the sum over parameters is in float64.
    norm = math.sqrt(sum(float(np.vdot(g, g)) for g in grads))
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads:
            g *= scale
    return norm


# --- learning-rate schedule ---------------------------------------------------------------------
def warmup_cosine(
    step: int, base_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0
) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up, then a cosine decay to ``min_lr``.

    ::

        lr(step) = base_lr * (step + 1) / warmup_steps                      step < warmup_steps
        lr(step) = min_lr + (base_lr - min_lr) * (1 + cos(pi * s)) / 2      warmup_steps <= step < total_steps,
                   with s = (step - warmup_steps) / (total_steps - warmup_steps)
        lr(step) = min_lr                                                   step >= total_steps

    Warm-up starts at ``base_lr / warmup_steps`` (never 0, so step 0 is not wasted) and reaches
    ``base_lr`` at ``step = warmup_steps - 1``; the cosine starts at ``base_lr`` at
    ``step = warmup_steps``, is halfway between ``base_lr`` and ``min_lr`` midway, and reaches
    ``min_lr`` at ``total_steps``. One account of why Transformers are trained with a warm-up
    (Liu et al. 2020, the RAdam paper): Adam's first updates rest on poor estimates of ``v``, and
    small steps let them settle. Notebook 06 gives two other accounts; notebook 07 tests none.

    Args:
        step: ``>= 0``, the number of optimiser steps taken so far.
        base_lr: peak learning rate, ``>= 0``.
        warmup_steps: ``>= 0`` (0: start the cosine at once).
        total_steps: ``>= max(warmup_steps, 1)``.
        min_lr: final learning rate, ``0 <= min_lr <= base_lr``.
    """
    step = check_int(step, "step", minimum=0)
    base_lr = check_number(base_lr, "base_lr", low=0.0, expected="a finite learning rate >= 0")
    warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
    total_steps = check_int(total_steps, "total_steps", minimum=1)
    if total_steps < warmup_steps:
        raise ValueError(
            f"total_steps={total_steps} is out of range: expected total_steps >= "
            f"warmup_steps={warmup_steps} (the warm-up is part of the schedule)"
        )
    min_lr = check_number(
        min_lr,
        "min_lr",
        low=0.0,
        high=base_lr,
        high_inclusive=True,
        expected=f"0 <= min_lr <= base_lr={base_lr}",
    )
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosineSchedule:
    """Drives ``optimizer.lr`` along :func:`warmup_cosine`, one call per optimiser step.

    ``base_lr`` is the optimiser's ``lr`` at construction; the constructor already sets
    ``optimizer.lr`` to the step-0 value, so the loop is ``optimizer.step(); schedule.step()``.

    Args:
        optimizer: anything with a writable ``lr`` (every :class:`Optimizer`).
        warmup_steps, total_steps, min_lr: as in :func:`warmup_cosine`.

    Attributes:
        base_lr: the peak learning rate.
        step_count: optimiser steps taken so far; ``lr`` is the rate for the next one.
    """

    def __init__(self, optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0):
        if not hasattr(optimizer, "lr"):
            raise TypeError(
                f"optimizer must have a writable lr attribute (an Optimizer such as AdamW), "
                f"got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.base_lr = float(optimizer.lr)
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_lr = min_lr
        self.step_count = 0
        # Validates every argument once, here, rather than at the first step() of a long run.
        self.optimizer.lr = self._lr_at(0)

    def _lr_at(self, step: int) -> float:
        return warmup_cosine(step, self.base_lr, self.warmup_steps, self.total_steps, self.min_lr)

    @property
    def lr(self) -> float:
        """The learning rate the next ``optimizer.step()`` will use."""
        return self._lr_at(self.step_count)

    def step(self) -> float:
        """Advance one step and set ``optimizer.lr`` for the next one; returns that rate."""
        self.step_count += 1
        self.optimizer.lr = self._lr_at(self.step_count)
        return self.optimizer.lr

    def state_dict(self) -> dict[str, float | int]:
        """What resuming needs: ``base_lr`` and ``step_count``."""
        return {"base_lr": self.base_lr, "step_count": self.step_count}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a :meth:`state_dict` and set the optimiser's ``lr`` to match.

        Args:
            state: a dict as :meth:`state_dict` made it.
        """
        missing = sorted({"base_lr", "step_count"} - set(state))
        if missing:
            raise ValueError(
                f"the schedule state lacks {missing}; expected the dict state_dict() returns, "
                f"with 'base_lr' and 'step_count', got keys {sorted(state)}"
            )
        self.base_lr = float(state["base_lr"])
        self.step_count = int(state["step_count"])
        self.optimizer.lr = self._lr_at(self.step_count)

    def __repr__(self) -> str:
        return (
            f"WarmupCosineSchedule(base_lr={self.base_lr}, warmup_steps={self.warmup_steps}, "
            f"total_steps={self.total_steps}, min_lr={self.min_lr}, "
            f"step_count={self.step_count})"
        )
