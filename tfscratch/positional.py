"""Positional encodings: how a Transformer knows *where* each token is.

Attention itself is blind to order (permute the tokens and the outputs permute with them),
so position is added to the token embeddings. Both classes take ``offset``: during cached
generation the new token at step ``t`` must get position ``t``, not position 0.
"""

from __future__ import annotations

import numpy as np

from .checks import check_float_array, check_int, check_length, check_positive_int
from .module import Module, Parameter, check_dtype, make_rng


def sinusoidal_table(max_len: int, d_model: int, dtype=np.float32) -> np.ndarray:
    r"""The fixed ``(max_len, d_model)`` table of "Attention Is All You Need":

    :math:`PE_{pos, 2i} = \sin(pos / 10000^{2i/d})`, :math:`PE_{pos, 2i+1} = \cos(\cdot)`.
    Each pair of columns is a clock of its own frequency; nearby positions look alike.
    """
    positions = np.arange(max_len)[:, None]
    frequencies = np.exp(-np.log(10000.0) * np.arange(0, d_model, 2) / d_model)
    angles = positions * frequencies  # (max_len, ceil(d_model / 2))
    table = np.zeros((max_len, d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return table.astype(dtype)


class SinusoidalPositionalEncoding(Module):
    """``forward(x, offset=0)``: ``x + PE[offset : offset + T]`` for ``x`` of shape ``(B, T, D)``.

    No parameters; the table is computed once.
    """

    def __init__(self, max_len: int, d_model: int, *, dtype=np.float32):
        self.max_len = check_positive_int(max_len, "max_len")
        self.d_model = check_positive_int(d_model, "d_model")
        self._table = sinusoidal_table(max_len, d_model, check_dtype(dtype))

    @property
    def table(self) -> np.ndarray:
        """The ``(max_len, d_model)`` encoding table (read-only view)."""
        view = self._table.view()
        view.flags.writeable = False
        return view

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        check_float_array(x, "x", ndim=3, last_dim=self.d_model)
        offset = check_int(offset, "offset", minimum=0)
        T = x.shape[1]
        check_length(T, self.max_len, offset=offset)
        return x + self._table[offset : offset + T]

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        return grad_output


class LearnedPositionalEmbedding(Module):
    """``forward(x, offset=0)``: ``x + weight[offset : offset + T]``; ``weight`` ``(max_len, D)``
    is learned like any other parameter (GPT-2's choice)."""

    def __init__(self, max_len: int, d_model: int, *, seed=None, rng=None, dtype=np.float32):
        self.max_len = check_positive_int(max_len, "max_len")
        self.d_model = check_positive_int(d_model, "d_model")
        rng = make_rng(seed, rng)
        self.weight = Parameter(rng.standard_normal((max_len, d_model)).astype(check_dtype(dtype)))

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        check_float_array(x, "x", ndim=3, last_dim=self.d_model)
        offset = check_int(offset, "offset", minimum=0)
        T = x.shape[1]
        check_length(T, self.max_len, offset=offset)
        self._span = (offset, offset + T)
        return x + self.weight.data[offset : offset + T]

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Each used position's row gets the gradient summed over the batch."""
        start, stop = self._span
        self.weight.grad[start:stop] += grad_output.sum(axis=0)
        return grad_output


POSITIONAL_ENCODINGS = {
    "learned": LearnedPositionalEmbedding,
    "sinusoidal": SinusoidalPositionalEncoding,
}
