"""Positional encodings: how a Transformer knows *where* each token is.

Attention itself is blind to order (permute the tokens and the outputs permute with them),
so position must be put in. Two ways:

* **Added** to the token embeddings (notebook 04): :class:`SinusoidalPositionalEncoding`
  (a fixed table) and :class:`LearnedPositionalEmbedding` (a trained one), listed in
  ``POSITIONAL_ENCODINGS``.
* **Rotated** into the queries and keys inside self-attention (notebook 12):
  :class:`RotaryPositionalEmbedding`, so that attention scores depend on the distance
  between two tokens, not on where they are.

Every class takes ``offset``: during cached generation the new token at step ``t`` must get
position ``t``, not position 0.
"""

from __future__ import annotations

import numpy as np

from .checks import (
    allocating,
    check_float_array,
    check_int,
    check_length,
    check_number,
    check_positive_int,
)
from .hooks import HookPoint
from .module import Module, Parameter, check_dtype, make_rng


def sinusoidal_table(max_len: int, d_model: int, dtype=np.float32) -> np.ndarray:
    r"""The fixed ``(max_len, d_model)`` table of "Attention Is All You Need":

    :math:`PE_{pos, 2i} = \sin(pos / 10000^{2i/d})`, :math:`PE_{pos, 2i+1} = \cos(\cdot)`.
    Each pair of columns is a clock of its own frequency; nearby positions look alike.

    Args:
        max_len: rows (positions).
        d_model: columns (features).
        dtype: the table's float dtype.

    Returns:
        ``(max_len, d_model)``, values in ``[-1, 1]``.
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

    Args:
        max_len: the most positions (the table's rows).
        d_model: the feature size D.
        dtype: the table's float dtype.
    """

    def __init__(self, max_len: int, d_model: int, *, dtype=np.float32):
        self.max_len = check_positive_int(max_len, "max_len")
        self.d_model = check_positive_int(d_model, "d_model")
        table = f"a position table of max_len={max_len} rows by d_model={d_model}"
        with allocating(table, 24 * max_len * d_model):  # float64 angles, table and a copy
            self._table = sinusoidal_table(max_len, d_model, check_dtype(dtype))
        self.hook_pos_embed = HookPoint()  # the position vectors added (B, T, D)

    @property
    def table(self) -> np.ndarray:
        """The ``(max_len, d_model)`` encoding table (read-only view)."""
        view = self._table.view()
        view.flags.writeable = False
        return view

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        """Add the positions' vectors.

        Args:
            x: float ``(B, T, D)`` token embeddings.
            offset: the position of ``x[:, 0]`` (the KV cache's length when generating).

        Returns:
            ``x + PE[offset : offset + T]``, ``(B, T, D)``.
        """
        check_float_array(x, "x", ndim=3, last_dim=self.d_model)
        offset = check_int(offset, "offset", minimum=0)
        T = x.shape[1]
        check_length(T, self.max_len, offset=offset)
        return x + self.hook_pos_embed(np.broadcast_to(self._table[offset : offset + T], x.shape))

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy ``(B, T, D)``. Returns: dL/dx, the same (``y = x + PE``)."""
        self.hook_pos_embed.backward(grad_output)
        return grad_output


class LearnedPositionalEmbedding(Module):
    """``forward(x, offset=0)``: ``x + weight[offset : offset + T]``; ``weight`` ``(max_len, D)``
    is learned like any other parameter (GPT-2's choice).

    Args:
        max_len: the most positions (the table's rows).
        d_model: the feature size D.
        seed, rng: where the initial table comes from (a model passes its own generator).
        dtype: the table's float dtype.
    """

    def __init__(self, max_len: int, d_model: int, *, seed=None, rng=None, dtype=np.float32):
        self.max_len = check_positive_int(max_len, "max_len")
        self.d_model = check_positive_int(d_model, "d_model")
        rng = make_rng(seed, rng)
        table = f"a position table of max_len={max_len} rows by d_model={d_model}"
        with allocating(table, 12 * max_len * d_model):  # float64 draws and the table
            self.weight = Parameter(
                rng.standard_normal((max_len, d_model)).astype(check_dtype(dtype))
            )
        self.hook_pos_embed = HookPoint()  # the position vectors added (B, T, D)

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        """Add the positions' learned vectors.

        Args:
            x: float ``(B, T, D)`` token embeddings.
            offset: the position of ``x[:, 0]``.

        Returns:
            ``x + weight[offset : offset + T]``, ``(B, T, D)``.
        """
        check_float_array(x, "x", ndim=3, last_dim=self.d_model)
        offset = check_int(offset, "offset", minimum=0)
        T = x.shape[1]
        check_length(T, self.max_len, offset=offset)
        self.save_for_backward(span=(offset, offset + T))
        rows = self.weight.data[offset : offset + T]
        return x + self.hook_pos_embed(np.broadcast_to(rows, x.shape))

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Each used position's row gets the gradient summed over the batch.

        Args:
            grad_output: dL/dy ``(B, T, D)``.

        Returns:
            dL/dx, the same array (``y = x + P``).
        """
        self.check_ready_for_backward()
        start, stop = self._span
        self.weight.grad[start:stop] += self.hook_pos_embed.backward(grad_output).sum(axis=0)
        return grad_output


# The encodings a model adds to its token embeddings (its ``pos=`` choices besides "rope").
POSITIONAL_ENCODINGS = {
    "learned": LearnedPositionalEmbedding,
    "sinusoidal": SinusoidalPositionalEncoding,
}


# --- rotary positions (RoPE, notebook 12) ------------------------------------------------
def rope_frequencies(d_head: int, base: float = 10000.0) -> np.ndarray:
    r"""The ``d_head / 2`` angular speeds :math:`\theta_i = \mathrm{base}^{-2i/d_{head}}`,
    ``i = 0 .. d_head/2 - 1``: the frequencies of :func:`sinusoidal_table` (with ``d_head``
    in place of ``d_model``), from one radian per position down to nearly zero.

    Args:
        d_head: the features of one head (even).
        base: the longest wavelength's scale (10000 in the paper).

    Returns:
        float64 ``(d_head / 2,)``.
    """
    return np.exp(-np.log(base) * np.arange(0, d_head, 2) / d_head)


def rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    r"""Turn each pair of features ``(x[..., 2i], x[..., 2i+1])`` by its own angle.

    Args:
        x: ``(..., T, d)`` with ``d`` even (queries or keys of every head at once).
        cos, sin: ``(T, d/2)``, the cosine and sine of each position's angle per pair.

    Returns:
        ``(..., T, d)``: per pair, :math:`(x_{2i}\cos - x_{2i+1}\sin,\;
        x_{2i}\sin + x_{2i+1}\cos)`, the 2-D rotation of the pair.
    """
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each: the two halves of every pair
    rotated = np.empty_like(x)
    rotated[..., 0::2] = even * cos - odd * sin
    rotated[..., 1::2] = even * sin + odd * cos
    return rotated


class RotaryPositionalEmbedding(Module):
    r"""Rotary position embeddings (RoPE, Su et al. 2021): position by rotation, not addition.

    Nothing is added to the token embeddings. Instead, inside self-attention, the query and
    the key of the token at position :math:`m` have each pair of features ``(2i, 2i+1)``
    turned by the angle :math:`m\,\theta_i`, with :math:`\theta_i` from
    :func:`rope_frequencies`. Writing a pair as a complex number :math:`q_i`, the rotated
    query is :math:`q_i e^{\mathrm{i} m \theta_i}`, and the score of query :math:`m` with
    key :math:`n` is

    .. math:: \mathrm{Re} \sum_i q_i e^{\mathrm{i} m\theta_i}\,
        \overline{k_i e^{\mathrm{i} n\theta_i}}
        = \mathrm{Re} \sum_i q_i \bar k_i\, e^{\mathrm{i}(m - n)\theta_i},

    a function of the contents and of the distance :math:`m - n` only: shifting both
    positions by the same amount changes no score.

    ``forward(x, offset=0)``: ``x`` ``(..., T, d_head)`` (e.g. ``(B, H, T, d_head)``) holds
    positions ``offset ... offset + T - 1`` (``offset`` is the KV cache's length during
    generation). ``backward(grad_output)``: the gradient with respect to ``x``.

    **The backward pass.** Per pair and position, the forward is :math:`y = R x` with the
    rotation :math:`R = \begin{pmatrix}\cos & -\sin \\ \sin & \cos\end{pmatrix}` (a 2x2
    matrix, the same for the whole batch). The chain rule for a linear map gives
    :math:`\partial L / \partial x = R^\top\, \partial L / \partial y`, and a rotation's
    transpose is its inverse, the rotation by the opposite angle:
    :math:`R(\varphi)^\top = R(-\varphi)`, i.e. the same formula with ``sin`` negated. So the
    backward *un-rotates* the gradient: :func:`rotate_pairs` with ``-sin``. (Rotations
    preserve lengths, so gradients are never scaled up or down by RoPE.)

    No parameters; the ``(max_len, d_head/2)`` cosine and sine tables are computed once.

    Args:
        max_len: the most positions.
        d_head: the features of one head (even).
        base: see :func:`rope_frequencies`.
        dtype: the tables' float dtype.
    """

    def __init__(self, max_len: int, d_head: int, base: float = 10000.0, *, dtype=np.float32):
        self.max_len = check_positive_int(max_len, "max_len")
        self.d_head = check_positive_int(d_head, "d_head")
        if d_head % 2:
            raise ValueError(
                f"d_head={d_head} is odd; rotary positions turn pairs of features, so d_head "
                "must be even"
            )
        self.base = check_number(
            base, "base", low=1.0, low_inclusive=False, expected="a number > 1 (10000 in the paper)"
        )
        dtype = check_dtype(dtype)
        tables = f"rotary tables of max_len={max_len} rows by d_head/2={d_head // 2}"
        with allocating(tables, 16 * max_len * d_head):  # float64 angles, cos, sin
            angles = np.arange(max_len)[:, None] * rope_frequencies(d_head, self.base)  # (L, d/2)
            self._cos, self._sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)

    def tables(self, offset: int, T: int) -> tuple[np.ndarray, np.ndarray]:
        """The rotation angles' cosines and sines of some positions.

        Args:
            offset: the first position.
            T: how many positions.

        Returns:
            ``(cos, sin)`` of positions ``offset ... offset + T - 1``, each ``(T, d_head/2)``.
        """
        return self._cos[offset : offset + T], self._sin[offset : offset + T]

    def rotate(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        """Rotate ``x`` ``(..., T, d_head)`` as positions ``offset ... offset + T - 1``.

        The lean form attention calls (the caller has checked the lengths): no state kept.

        Args:
            x: ``(..., T, d_head)``.
            offset: the position of ``x[..., 0, :]``.

        Returns:
            the rotated ``(..., T, d_head)``.
        """
        return rotate_pairs(x, *self.tables(offset, x.shape[-2]))

    def rotate_backward(self, grad_output: np.ndarray, offset: int = 0) -> np.ndarray:
        """The gradient with respect to the input of :meth:`rotate`: the inverse rotation.

        Args:
            grad_output: dL/dy ``(..., T, d_head)``.
            offset: the offset the forward used.

        Returns:
            dL/dx ``(..., T, d_head)``.
        """
        cos, sin = self.tables(offset, grad_output.shape[-2])
        return rotate_pairs(grad_output, cos, -sin)

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        """Args: x: float ``(..., T, d_head)``; offset: the first position. Returns: the
        rotated ``x``, same shape (see :meth:`rotate`)."""
        check_float_array(x, "x", ndim=(2, 3, 4), last_dim=self.d_head)
        offset = check_int(offset, "offset", minimum=0)
        check_length(x.shape[-2], self.max_len, offset=offset)
        self.save_for_backward(offset=offset)
        return self.rotate(x, offset)

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy. Returns: dL/dx, the inverse rotation of it."""
        self.check_ready_for_backward()
        return self.rotate_backward(grad_output, self._offset)
