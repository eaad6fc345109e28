"""Building blocks: Linear, Embedding, LayerNorm, RMSNorm, Dropout, ReLU, GELU, SiLU,
FeedForward (GELU/ReLU, or SwiGLU as in Llama).

Each class keeps its forward and backward side by side, with the variable names of the
maths. Inputs may have any number of leading axes: ``(..., D)``.
"""

from __future__ import annotations

import numpy as np

from . import functional as F
from .checks import (
    check_choice,
    check_float_array,
    check_number,
    check_positive_int,
    check_probability,
    check_token_ids,
)
from .module import Module, Parameter, check_dtype, make_rng

ANY_RANK = (1, 2, 3, 4, 5)  # inputs (..., D) with up to four leading axes


def _flatten_leading(x: np.ndarray) -> np.ndarray:
    """``(..., D)`` -> ``(N, D)``: one 2-D matmul is faster than a batched one."""
    return x.reshape(-1, x.shape[-1])


class Linear(Module):
    """``y = x @ weight + bias``, with ``weight`` stored ``(d_in, d_out)`` like the paper's
    :math:`XW` (PyTorch stores the transpose).

    Initialised as PyTorch does: uniform in :math:`\\pm 1/\\sqrt{d_{in}}`.

    Args:
        d_in: input features.
        d_out: output features.
        bias: add a learned ``bias (d_out,)``.
        seed, rng: where the initial weights come from: a seed, or a ``np.random.Generator``
            to draw from (a model passes its own); neither: fresh randomness.
        dtype: the parameters' float dtype (``np.float32``; ``np.float64`` for gradient checks).
    """

    def __init__(
        self, d_in: int, d_out: int, bias: bool = True, *, seed=None, rng=None, dtype=np.float32
    ):
        self.d_in = check_positive_int(d_in, "d_in")
        self.d_out = check_positive_int(d_out, "d_out")
        rng = make_rng(seed, rng)
        dtype = check_dtype(dtype)
        bound = 1.0 / np.sqrt(d_in)
        self.weight = Parameter(rng.uniform(-bound, bound, (d_in, d_out)).astype(dtype))
        self.bias = Parameter(rng.uniform(-bound, bound, (d_out,)).astype(dtype)) if bias else None

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Apply the map.

        Args:
            x: float ``(..., d_in)``.

        Returns:
            ``(..., d_out)``.
        """
        check_float_array(x, "x", ndim=ANY_RANK, last_dim=self.d_in)
        self.save_for_backward(x=x)
        # (B, T, d_in) @ W as one 2-D matmul over all B*T rows: one BLAS call, where a 3-D
        # operand would make NumPy loop over the batch.
        y = _flatten_leading(x) @ self.weight.data
        if self.bias is not None:
            y += self.bias.data
        return y.reshape(x.shape[:-1] + (self.d_out,))

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """``dW = x^T dy`` (summed over every leading axis), ``db = sum dy``, ``dx = dy W^T``.

        Args:
            grad_output: dL/dy ``(..., d_out)``.

        Returns:
            dL/dx ``(..., d_in)``; ``dW`` and ``db`` are added to ``weight.grad``, ``bias.grad``.
        """
        self.check_ready_for_backward()
        self.check_grad_shape(grad_output, (*self._x.shape[:-1], self.weight.shape[1]))
        x_rows, dy_rows = _flatten_leading(self._x), _flatten_leading(grad_output)
        self.weight.grad += x_rows.T @ dy_rows
        if self.bias is not None:
            self.bias.grad += np.add.reduce(dy_rows, axis=0)
        return (dy_rows @ self.weight.data.T).reshape(self._x.shape)


class Embedding(Module):
    """A lookup table: token id ``i`` -> row ``weight[i]``. Initialised N(0, 1), as PyTorch.

    Args:
        num: the number of ids (rows).
        dim: the vector size (columns).
        seed, rng: where the initial weights come from: a seed, or a ``np.random.Generator``
            to draw from (a model passes its own); neither: fresh randomness.
        dtype: the parameters' float dtype (``np.float32``; ``np.float64`` for gradient checks).
    """

    def __init__(self, num: int, dim: int, *, seed=None, rng=None, dtype=np.float32):
        self.num = check_positive_int(num, "num")
        self.dim = check_positive_int(dim, "dim")
        rng = make_rng(seed, rng)
        self.weight = Parameter(rng.standard_normal((num, dim)).astype(check_dtype(dtype)))

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """Look the ids up.

        Args:
            ids: integer ``(...)``, each in ``[0, num)``.

        Returns:
            ``(..., dim)``.
        """
        ids = check_token_ids(ids, "ids", self.num)
        self.save_for_backward(ids=ids)
        return self.weight.data[ids]

    def backward(self, grad_output: np.ndarray) -> None:
        """Scatter-add each position's gradient into its token's row.

        ``np.add.at`` (not ``grad[ids] += g``) so a token used twice gets both gradients.

        Args:
            grad_output: dL/dy ``(..., dim)``.

        Returns:
            None: token ids have no gradient.
        """
        self.check_ready_for_backward()
        np.add.at(self.weight.grad, self._ids.reshape(-1), _flatten_leading(grad_output))


class LayerNorm(Module):
    """Normalise each position's features; see :func:`tfscratch.functional.layer_norm`.

    Args:
        dim: the feature size D; ``gamma`` (ones) and ``beta`` (zeros) are ``(D,)``.
        eps: added to the variance.
        dtype: the parameters' float dtype.
    """

    def __init__(self, dim: int, eps: float = 1e-5, *, dtype=np.float32):
        self.dim = check_positive_int(dim, "dim")
        self.eps = float(eps)
        dtype = check_dtype(dtype)
        self.gamma = Parameter(np.ones(dim, dtype=dtype))
        self.beta = Parameter(np.zeros(dim, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Normalise.

        Args:
            x: float ``(..., dim)``.

        Returns:
            ``(..., dim)``.
        """
        check_float_array(x, "x", ndim=ANY_RANK, last_dim=self.dim)
        y, x_hat, inv_std = F.layer_norm_forward(x, self.gamma.data, self.beta.data, self.eps)
        self.save_for_backward(x_hat=x_hat, inv_std=inv_std)
        return y

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy ``(..., dim)``. Returns: dL/dx ``(..., dim)``; the
        gradients of ``gamma`` and ``beta`` are added to their ``.grad``."""
        self.check_ready_for_backward()
        self.check_grad_shape(grad_output, self._x_hat.shape)
        dx, dgamma, dbeta = F.layer_norm_backward(
            grad_output, self._x_hat, self._inv_std, self.gamma.data
        )
        self.gamma.grad += dgamma
        self.beta.grad += dbeta
        return dx


class RMSNorm(Module):
    r"""Root-mean-square normalisation (Zhang & Sennrich 2019; Llama): scale each position's
    features by one over their root mean square, then by a learned gain. No mean is
    subtracted and there is no shift:

    .. math:: y = \frac{x}{\sqrt{\overline{x^2} + \epsilon}} \odot w
        = \hat x \odot w, \qquad r = 1 / \sqrt{\overline{x^2} + \epsilon}

    (the bar is the mean over the ``D`` features of one position).

    **The backward pass** (notebook 14). With :math:`g = \partial L/\partial \hat x =
    w \odot \partial L/\partial y` and :math:`\partial r / \partial x_j = -r^3 x_j / D`:

    .. math:: \frac{\partial L}{\partial x} = r\,\big(g - \hat x\,\overline{g \hat x}\big),
        \qquad \frac{\partial L}{\partial w} = \sum_{\text{positions}} \frac{\partial L}
        {\partial y} \odot \hat x,

    LayerNorm's formula without its ``- mean(g)`` term (there is no mean to subtract).

    Args:
        dim: the feature size D; ``weight`` (ones) is ``(D,)``.
        eps: added to the mean square, ``> 0`` (1e-6, as Llama).
        dtype: the parameters' float dtype.
    """

    def __init__(self, dim: int, eps: float = 1e-6, *, dtype=np.float32):
        self.dim = check_positive_int(dim, "dim")
        self.eps = check_number(
            eps, "eps", low=0.0, low_inclusive=False, expected="eps > 0 (1e-6 as Llama)"
        )
        self.weight = Parameter(np.ones(dim, dtype=check_dtype(dtype)))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Normalise.

        Args:
            x: float ``(..., dim)``.

        Returns:
            ``(..., dim)``; keeps ``x_hat`` ``(..., dim)`` and ``inv_rms`` ``(..., 1)``.
        """
        check_float_array(x, "x", ndim=ANY_RANK, last_dim=self.dim)
        mean_square = F.row_dot(x, x) / self.dim  # (..., 1)
        inv_rms = 1.0 / np.sqrt(mean_square + self.eps)
        x_hat = x * inv_rms
        self.save_for_backward(x_hat=x_hat, inv_rms=inv_rms)
        return x_hat * self.weight.data

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy ``(..., dim)``. Returns: dL/dx ``(..., dim)``; the
        gradient of ``weight`` (summed over every position) is added to ``weight.grad``."""
        self.check_ready_for_backward()
        self.check_grad_shape(grad_output, self._x_hat.shape)
        D = self.dim
        self.weight.grad += np.einsum(
            "nd,nd->d", _flatten_leading(grad_output), _flatten_leading(self._x_hat)
        )
        g = grad_output * self.weight.data  # dL/dx_hat
        return (g - self._x_hat * (F.row_dot(g, self._x_hat) / D)) * self._inv_rms


class Dropout(Module):
    """Inverted dropout: in training, zero each unit with probability ``p`` and scale the rest
    by ``1/(1-p)``; in evaluation, the identity.

    The random stream is the module's own (seeded), so a run is repeatable.

    Args:
        p: the drop probability, in ``[0, 1)``.
        seed, rng: where the masks come from: a seed, or a ``np.random.Generator`` to draw
            from (a model passes its own).
    """

    def __init__(self, p: float = 0.0, *, seed=None, rng=None):
        self.p = check_probability(p, "p")
        self._rng = make_rng(seed, rng)

    def new_mask(self, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray | None:
        """A fresh multiplier (:func:`tfscratch.functional.dropout_mask`) for an array of
        ``shape``, or None when dropout is off (evaluation mode or ``p == 0``).

        Attention asks for one to drop attention weights inside
        :func:`~tfscratch.functional.scaled_dot_product_attention`.

        Args:
            shape: the shape of the array to drop from.
            dtype: the mask's float dtype.

        Returns:
            ``shape`` array of 0 and ``1/(1-p)``, or None.
        """
        if not self.training or self.p == 0.0:
            return None
        return F.dropout_mask(shape, self.p, self._rng, dtype=dtype)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Args: x: any shape. Returns: ``x`` times a fresh mask (training), or ``x`` itself."""
        mask = self.new_mask(x.shape, x.dtype)
        self.save_for_backward(mask=mask)
        return x if mask is None else x * mask

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy. Returns: dL/dx, through the forward's mask."""
        self.check_ready_for_backward()
        return grad_output if self._mask is None else grad_output * self._mask


class ReLU(Module):
    """``max(x, 0)``; see :func:`tfscratch.functional.relu`. No arguments, no parameters."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Args: x: any shape. Returns: ``max(x, 0)``, the same shape."""
        self.save_for_backward(x=x)
        return F.relu(x)

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy. Returns: dL/dx (zero where ``x <= 0``)."""
        self.check_ready_for_backward()
        return F.relu_backward(grad_output, self._x)


class GELU(Module):
    """GELU; see :func:`tfscratch.functional.gelu`.

    Args:
        approximate: ``"tanh"`` (default, as GPT-2) or ``"none"`` (exact, with erf).
    """

    def __init__(self, approximate: str = "tanh"):
        self.approximate = check_choice(approximate, "approximate", F.GELU_APPROXIMATIONS)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Args: x: any shape. Returns: ``GELU(x)``, the same shape."""
        y, gate = F.gelu_forward(x, self.approximate)
        self.save_for_backward(x=x, gate=gate)
        return y

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy. Returns: dL/dx, the same shape."""
        self.check_ready_for_backward()
        return F.gelu_backward(grad_output, self._x, self.approximate, gate=self._gate)


class SiLU(Module):
    r"""SiLU (also called swish): :math:`\mathrm{silu}(a) = a\,\sigma(a)`, the gate of
    SwiGLU (:class:`FeedForward` with ``activation="swiglu"``). No arguments, no parameters.

    The sigmoid is computed as :math:`(1 + \tanh(a/2))/2`, the same number, which never
    overflows. Backward: :math:`\mathrm{silu}'(a) = \sigma(a)\,(1 + a\,(1 - \sigma(a)))`.
    """

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Args: x: float, any shape. Returns: ``x * sigmoid(x)``, the same shape."""
        sigmoid = 0.5 * (1.0 + np.tanh(0.5 * x))
        self.save_for_backward(x=x, sigmoid=sigmoid)
        return x * sigmoid

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy. Returns: dL/dx, the same shape."""
        self.check_ready_for_backward()
        return grad_output * self._sigmoid * (1.0 + self._x * (1.0 - self._sigmoid))


ACTIVATIONS = {"gelu": GELU, "relu": ReLU}  # the one-activation networks (and the models' choices)
FEED_FORWARD_ACTIVATIONS = (*ACTIVATIONS, "swiglu")


class FeedForward(Module):
    r"""Position-wise MLP, ``d_model -> d_ff -> d_model``.

    * ``activation="gelu"`` or ``"relu"`` (GPT-2, the paper): ``fc2(dropout(act(fc1(x))))``.
      Parameters ``fc1`` ``(d_model, d_ff)`` and ``fc2`` ``(d_ff, d_model)``.
    * ``activation="swiglu"`` (Llama; notebook 14): a gated network,

      .. math:: \mathrm{FFN}(x) = \big(\mathrm{silu}(x W_{gate}) \odot x W_{up}\big)\,
          W_{down}

      with three Linears: ``gate`` :math:`W_{gate}` ``(d_model, d_ff)``, ``fc1`` the up
      projection :math:`W_{up}` ``(d_model, d_ff)``, ``fc2`` the down projection
      :math:`W_{down}` ``(d_ff, d_model)``; dropout acts on the product. Three matrices
      instead of two, so Llama takes ``d_ff`` about ``8/3 d_model`` (instead of
      ``4 d_model``) for the same parameter count. ``act`` is the :class:`SiLU` of the gate.
      Backward: with ``h = s * u`` (``s = silu(x W_gate)``, ``u = x W_up``, each
      ``(..., d_ff)``), ``du = dh * s`` and ``ds = dh * u``, and ``dx`` is the sum of the
      two branches' input gradients.

    Args:
        d_model: input and output features.
        d_ff: hidden features (4 d_model in the paper and GPT-2; about 8/3 d_model for SwiGLU).
        activation: ``"gelu"``, ``"relu"`` or ``"swiglu"``.
        dropout: drop probability after the activation (after the gated product with
            SwiGLU; training only).
        bias: the Linears have biases (Llama has none: ``bias=False``).
        seed, rng: where the initial weights come from: a seed, or a ``np.random.Generator``
            to draw from (a model passes its own); neither: fresh randomness. ``fc1`` draws
            first, then ``gate`` (SwiGLU only), then ``fc2``.
        dtype: the parameters' float dtype (``np.float32``; ``np.float64`` for gradient checks).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
        *,
        seed=None,
        rng=None,
        dtype=np.float32,
    ):
        check_choice(activation, "activation", FEED_FORWARD_ACTIVATIONS)
        self.activation = activation
        rng = make_rng(seed, rng)
        self.fc1 = Linear(d_model, d_ff, bias, rng=rng, dtype=dtype)
        if activation == "swiglu":
            self.gate = Linear(d_model, d_ff, bias, rng=rng, dtype=dtype)
            self.act = SiLU()
        else:
            self.act = ACTIVATIONS[activation]()
        # named after this constructor's argument, not Dropout's own `p`
        self.dropout = Dropout(check_probability(dropout, "dropout"), rng=rng)
        self.fc2 = Linear(d_ff, d_model, bias, rng=rng, dtype=dtype)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Args: x: float ``(..., d_model)``. Returns: ``(..., d_model)``."""
        if self.activation != "swiglu":
            return self.fc2(self.dropout(self.act(self.fc1(x))))
        gate = self.act(self.gate(x))  # silu(x W_gate) (..., d_ff)
        up = self.fc1(x)  # x W_up (..., d_ff)
        self.save_for_backward(gate=gate, up=up)
        return self.fc2(self.dropout(gate * up))

    def backward(self, grad_output: np.ndarray) -> np.ndarray:
        """Args: grad_output: dL/dy ``(..., d_model)``. Returns: dL/dx ``(..., d_model)``."""
        grad = self.dropout.backward(self.fc2.backward(grad_output))
        if self.activation != "swiglu":
            return self.fc1.backward(self.act.backward(grad))
        self.check_ready_for_backward()
        # h = gate * up: each factor's gradient is grad times the other factor
        d_up, d_gate = grad * self._gate, grad * self._up
        return self.fc1.backward(d_up) + self.gate.backward(self.act.backward(d_gate))
