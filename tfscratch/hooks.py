"""``HookPoint``: an identity module at a seam of a model, where functions can be hung
(TransformerLens's design, notebook 15).

A block calls its hook points on the way through, as TransformerLens's does::

    resid_pre = self.hook_resid_pre(x)

With nothing hung on it a hook point returns its input and, in the backward, the gradient it
is given. :mod:`tfscratch.inspect` hangs functions on the hook points to read an activation,
replace it, or read its gradient; the model keeps no other hook machinery.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .module import Module


class HookPoint(Module):
    """The identity, with two lists of functions.

    * ``forward_hooks``: each ``fn(activation)`` returns a replacement of the same shape, or
      None to keep the activation; they run in list order, each on the previous one's result.
    * ``backward_hooks``: each ``fn(grad)`` is shown the gradient arriving at this point.

    A replaced activation came from outside the model's maths, so the backward sends no
    gradient on through the entries a hook changed; entries it left as they were pass their
    gradient on, as the identity does (zeroing one head passes the others' gradients).
    """

    def __init__(self):
        self.forward_hooks: list[Callable] = []
        self.backward_hooks: list[Callable] = []

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The identity, unless a forward hook replaces the activation.

        Args:
            x: the activation, any shape.

        Returns:
            ``x``, or the hooks' replacement (same shape, cast to ``x``'s dtype).
        """
        if self.forward_hooks and not x.flags.writeable:
            x = x.copy()  # a read-only view (the position table): the hooks get their own
        original = x
        for hook in self.forward_hooks:
            replacement = hook(x)
            if replacement is None or replacement is x:
                continue
            replacement = np.asarray(replacement)
            if replacement.shape != x.shape:
                raise ValueError(
                    f"a hook returned shape {replacement.shape}; the activation has shape "
                    f"{x.shape} and its replacement must too"
                )
            x = replacement.astype(x.dtype, copy=False)
        # where the model's own value still flows (None: everywhere)
        self.save_for_backward(kept=None if x is original else x == original)
        return x

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """The identity, shown to the backward hooks (zero where a hook replaced the value).

        Args:
            grad_output: dL/d(activation), the activation's shape.

        Returns:
            dL/d(the model's own value).
        """
        for hook in self.backward_hooks:
            hook(grad_output)
        kept = getattr(self, "_kept", None)
        return grad_output if kept is None else grad_output * kept
