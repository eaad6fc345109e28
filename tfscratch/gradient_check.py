"""Checking a backward pass against central finite differences.

For a scalar :math:`L = \\sum (f(x) \\odot R)` with a fixed random ``R``, the analytic gradient
comes from ``backward(R)``; the numerical one from central differences of ``L`` along
sampled coordinates ``i`` (the textbook :math:`(L(x + h e_i) - L(x - h e_i)) / 2h`, in its
fourth-order form). In float64 the two agree to about 1e-9 when the backward is right; a
wrong backward is off by order 1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .module import Module, no_grad

ZERO_GRADIENT = 1e-7
# The fourth-order central difference f'(x) ~ [f(x-2h) - 8f(x-h) + 8f(x+h) - f(x+2h)] / 12h.
# Its truncation error is O(h^4) instead of O(h^2), so h can be 1e-4 rather than 1e-6 and
# the round-off of evaluating the loss (about 1e-16 |L| / h) shrinks a hundredfold. That
# matters for attention's query/key weights deep in a stack, whose gradients are small.
STENCIL_STEPS = (-2.0, -1.0, 1.0, 2.0)
STENCIL_WEIGHTS = np.array([1.0, -8.0, 8.0, -1.0]) / 12.0


def _relative_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """``|a - n| / (|a| + |n|)`` over the whole tensor.

    A per-tensor norm rather than per element: an exact zero gradient (a blocked attention
    entry) would otherwise turn round-off into a huge *relative* error. When *both* norms are
    below ``ZERO_GRADIENT`` the gradient is zero (finite differences only see round-off of
    about 1e-10) and the error is 0. Such gradients exist: the key bias of attention adds the
    same ``q . b`` to every score of a row, and softmax ignores a shift, so its gradient is 0.
    A wrong backward that gives a non-zero there is still caught.
    """
    norm_analytic, norm_numeric = np.linalg.norm(analytic), np.linalg.norm(numeric)
    if max(norm_analytic, norm_numeric) < ZERO_GRADIENT:
        return 0.0
    return float(np.linalg.norm(analytic - numeric) / (norm_analytic + norm_numeric))


def gradcheck(
    fn: Module | Callable,
    *inputs: np.ndarray,
    backward: Callable | None = None,
    params: dict | None = None,
    kwargs: dict | None = None,
    max_coords: int | None = 40,
    eps: float = 1e-4,
    seed: int = 0,
    return_errors: bool = False,
):
    """Worst relative error between ``backward`` and central finite differences.

    Args:
        fn: a Module (its ``forward``/``backward``/parameters are used) or a function of
            ``inputs``; a function needs ``backward(grad_output)`` returning the input
            gradient(s).
        inputs: arrays passed positionally to ``fn``. Float arrays are checked; integer
            ones (token ids) are passed through.
        params: ``{name: Parameter}`` to check (default: the module's ``named_parameters()``
            that are not frozen; a frozen one passed here is refused with a ``ValueError``).
        kwargs: keyword options for the forward (masks, ...).
        max_coords: coordinates sampled per tensor (None: every coordinate).
        return_errors: also return ``{tensor name: error}``.

    Inputs and parameters must be float64 (float32 is refused with a ``TypeError``): float32
    round-off swamps the differences, and a correct backward would look wrong.
    """
    kwargs = kwargs or {}
    if isinstance(fn, Module):
        forward, backward = fn, backward or fn.backward  # fn(x): calls forward, records it
        if params is None:  # frozen parameters receive no gradient: nothing to check
            params = {n: p for n, p in fn.named_parameters().items() if p.requires_grad}
    else:
        forward, params = fn, params or {}
        if backward is None:
            raise TypeError("gradcheck of a plain function needs backward=...")
    frozen = [name for name, parameter in params.items() if not parameter.requires_grad]
    if frozen:
        raise ValueError(
            f"params holds frozen parameters {frozen} (requires_grad=False): they receive no "
            "gradient, so there is nothing to check; unfreeze them or leave them out"
        )
    rng = np.random.default_rng(seed)
    inputs = list(inputs)
    for index, array in enumerate(inputs):
        if isinstance(array, np.ndarray) and array.dtype == np.float32:
            raise TypeError(f"inputs[{index}] is float32; gradcheck needs float64")
    single = [name for name, parameter in params.items() if parameter.data.dtype != np.float64]
    if single:
        raise TypeError(
            f"gradcheck needs float64 parameters; {len(single)} of {len(params)} are "
            f"{params[single[0]].data.dtype} (e.g. {single[0]!r}): in float32 the round-off of "
            "the loss swamps the finite differences and a correct backward looks wrong. Build "
            "the model with dtype=np.float64 for the check"
        )

    with no_grad():  # forwards with no backward of their own keep nothing for one
        output = forward(*inputs, **kwargs)
    output = output[0] if isinstance(output, tuple) else output
    projection = rng.standard_normal(np.shape(output))

    @no_grad()
    def loss() -> float:
        out = forward(*inputs, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        return float(np.sum(out * projection))

    # analytic gradients
    for parameter in params.values():
        parameter.zero_grad()
    forward(*inputs, **kwargs)
    input_grads = backward(projection)
    if not isinstance(input_grads, tuple):
        input_grads = (input_grads,)

    tensors = {}  # name -> (array to perturb, analytic gradient)
    float_inputs = [
        i
        for i, a in enumerate(inputs)
        if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)
    ]
    for position, index in enumerate(float_inputs):
        if position < len(input_grads) and input_grads[position] is not None:
            tensors[f"input{index}"] = (inputs[index], np.asarray(input_grads[position]))
    for name, parameter in params.items():
        tensors[name] = (parameter.data, parameter.grad.copy())

    errors = {}
    for name, (array, analytic) in tensors.items():
        count = array.size if max_coords is None else min(max_coords, array.size)
        coords = rng.choice(array.size, size=count, replace=False)
        numeric = np.empty(count)
        for slot, coord in enumerate(coords):
            # a multi-index writes into the array itself, also when it is a view (Linear.columns)
            index = np.unravel_index(coord, array.shape)
            original = array[index]
            values = []
            for step in STENCIL_STEPS:
                array[index] = original + step * eps
                values.append(loss())
            array[index] = original
            numeric[slot] = np.dot(STENCIL_WEIGHTS, values) / eps
        errors[name] = _relative_error(analytic.reshape(-1)[coords], numeric)
    worst = max(errors.values()) if errors else 0.0
    return (worst, errors) if return_errors else worst
