"""Cross-entropy as a module, for training loops: ``forward`` then ``backward``."""

from __future__ import annotations

import numpy as np

from . import functional as F
from .checks import check_int, check_number
from .module import Module


class CrossEntropyLoss(Module):
    """Mean cross-entropy over the targets that are not ``ignore_index``.

    ``forward(logits (..., V), targets (...)) -> float``; ``backward() -> dlogits`` with the
    shape and dtype of ``logits``. See :func:`tfscratch.functional.cross_entropy`.

    Args:
        ignore_index: a target value that is not scored (padding), e.g.
            :data:`tfscratch.functional.IGNORE_INDEX` (-100); None: every target counts.
        label_smoothing: in ``[0, 1)``: the target distribution is
            ``(1 - label_smoothing) * onehot + label_smoothing / V``.
    """

    def __init__(self, ignore_index: int | None = None, label_smoothing: float = 0.0):
        if ignore_index is not None:
            ignore_index = check_int(ignore_index, "ignore_index")
        self.ignore_index = ignore_index
        self.label_smoothing = check_number(
            label_smoothing, "label_smoothing", low=0.0, high=1.0, expected="a number in [0, 1)"
        )

    def forward(self, logits: np.ndarray, targets: np.ndarray) -> float:
        """The mean loss.

        Args:
            logits: float ``(..., V)``.
            targets: int ``(...)``, class ids in ``[0, V)`` or ``ignore_index``.

        Returns:
            the mean over the scored targets, a Python float (0.0 if none is scored).
        """
        self.save_for_backward(logits=logits, targets=targets)
        return F.cross_entropy(logits, targets, self.ignore_index, self.label_smoothing)

    def backward(self, grad_output: float = 1.0) -> np.ndarray:
        """The gradient of the last forward's loss with respect to its logits.

        Args:
            grad_output: dL/d(loss), 1.0 when this loss is the one minimised.

        Returns:
            dL/dlogits, the shape and dtype of ``logits``: ``(softmax - target) / N``.
        """
        self.check_ready_for_backward()
        grad = F.cross_entropy_backward(
            self._logits, self._targets, self.ignore_index, self.label_smoothing
        )
        return grad if grad_output == 1.0 else grad * np.asarray(grad_output, grad.dtype)
