"""Each backward runs on the cache of the forward it belongs to (the reliability probe's S4).

A layer keeps what its forward needs on ``self``; ``module(x)`` also keeps a record per call,
so these habits of a learner give the right gradient or a clear error, never a wrong gradient:
a layer used twice in one forward, a block used twice in a stack, a subclass whose backward
calls ``super().backward``; and a second backward, a second forward before the backward, a
forward under ``no_grad()`` before the backward, a layer called on its own between its
model's forward and backward, each raise.
"""

import numpy as np
import pytest

import tfscratch
from tfscratch import nn
from tfscratch.gradient_check import gradcheck
from tfscratch.module import Module
from tfscratch.optim import AdamW
from tfscratch.train import train

from .conftest import randomize

X = np.random.default_rng(0).standard_normal((3, 5, 4))


class LinearTwice(Module):
    """y = W gelu(W x + b) + b: one Linear applied twice (weight sharing by reuse)."""

    def __init__(self):
        self.linear = nn.Linear(4, 4, seed=0, dtype=np.float64)
        self.act = nn.GELU()

    def forward(self, x):
        return self.linear(self.act(self.linear(x)))

    def backward(self, grad):
        grad = self.act.backward(self.linear.backward(grad))
        return self.linear.backward(grad)


class Square(Module):
    """A learner's own layer in the cs231n habit: the cache as ``self._x = x``."""

    def __init__(self):
        self.scale = nn.Parameter(np.array([1.5]))

    def forward(self, x):
        self._x = x
        return self.scale.data * x * x

    def backward(self, grad):
        self.scale.grad += np.sum(grad * self._x * self._x, keepdims=True).reshape(1)
        return grad * 2 * self.scale.data * self._x


class SquareTwice(Module):
    def __init__(self):
        self.square = Square()

    def forward(self, x):
        return self.square(self.square(x))

    def backward(self, grad):
        return self.square.backward(self.square.backward(grad))


def _lm(**options):
    return randomize(
        tfscratch.DecoderLM(11, 8, 2, 2, max_len=8, seed=0, dtype=np.float64, **options)
    )


def _tokens(seed=0):
    return np.random.default_rng(seed).integers(0, 11, size=(2, 6))


def test_a_layer_used_twice_in_one_forward_gets_both_gradients():
    assert gradcheck(LinearTwice(), X.copy()) < 1e-7


def test_a_learners_own_layer_used_twice_gets_both_gradients():
    assert gradcheck(SquareTwice(), X.copy() * 0.5) < 1e-7


def test_the_same_block_twice_in_a_stack_gets_both_gradients():
    model = _lm()
    model.blocks[1] = model.blocks[0]  # a two-layer stack with one block's weights
    assert gradcheck(model, _tokens()) < 1e-6


def test_a_subclass_backward_calling_super_runs_on_its_own_forward():
    class Logged(nn.Linear):
        def backward(self, grad):
            self.seen = grad.shape
            return super().backward(grad)

    layer, plain = (nn.Linear(4, 3, seed=1, dtype=np.float64) for _ in range(2))
    layer.__class__ = Logged
    for module in (layer, plain):
        module(X)
        module.backward(np.ones((3, 5, 3)))
    assert layer.seen == (3, 5, 3)
    np.testing.assert_array_equal(layer.weight.grad, plain.weight.grad)
    assert gradcheck(layer, X.copy()) < 1e-7


@pytest.mark.parametrize("kind", ["model", "learners layer"])
def test_a_backward_after_a_no_grad_forward_raises_then_a_fresh_forward_works(kind):
    """The reviewer's case: a forward, the same (or another) forward inside no_grad(), then
    backward. The backward cannot be for the no_grad forward (it kept nothing), and going
    back through the older one would give the learner another forward's gradient: it raises,
    touching no gradient, and keeps raising until a forward outside no_grad() runs."""
    make, inputs = {"model": (_lm, _tokens(0)), "learners layer": (SquareTwice, X.copy())}[kind]
    model, reference = make(), make()
    output = model(inputs)
    with tfscratch.no_grad():
        model(inputs)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="inside no_grad"):
            model.backward(np.ones_like(output))
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    model(inputs)
    grad_input = model.backward(np.ones_like(output))
    expected = reference.backward(np.ones_like(reference(inputs)))
    if grad_input is not None:
        np.testing.assert_array_equal(grad_input, expected)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_array_equal(p.grad, q.grad)


def test_a_layer_looked_at_inside_no_grad_stops_its_models_backward():
    model = _lm()
    logits = model(_tokens(0))
    with tfscratch.no_grad():
        model.blocks[1].attn(np.zeros((2, 6, 8)))  # a look inside, kept for no backward
    with pytest.raises(RuntimeError, match="inside no_grad"):
        model.backward(np.ones_like(logits))


def test_a_no_grad_forward_drops_what_earlier_forwards_kept():
    model = _lm()
    model(_tokens(0))
    with tfscratch.no_grad():
        model(_tokens(1))
    assert all(not m._records.kept for m in model.modules())


def test_a_second_backward_raises():
    model = _lm()
    logits = model(_tokens())
    model.backward(np.ones_like(logits))
    grads = [p.grad.copy() for p in model.parameters()]
    with pytest.raises(RuntimeError, match="called twice for one forward.*Run the forward again"):
        model.backward(np.ones_like(logits))
    for before, p in zip(grads, model.parameters(), strict=True):
        np.testing.assert_array_equal(p.grad, before)  # nothing added twice


def test_a_second_backward_of_a_layer_called_through_forward_raises():
    layer = nn.LayerNorm(4, dtype=np.float64)
    layer.forward(X)  # called directly, as a learner's own parent module might
    layer.backward(np.ones_like(X))
    with pytest.raises(RuntimeError, match="called twice"):
        layer.backward(np.ones_like(X))


def test_a_second_forward_before_backward_raises_then_a_fresh_one_works():
    model, reference = _lm(), _lm()
    tokens = _tokens()
    logits = model(tokens)
    model(_tokens(1))  # printing another batch's logits, outside no_grad()
    with pytest.raises(RuntimeError, match="ran another forward, on other values.*no_grad"):
        model.backward(np.ones_like(logits))
    model.zero_grad()  # the error dropped both records: a fresh forward and backward work
    model.backward(np.ones_like(model(tokens)))
    reference.backward(np.ones_like(reference(tokens)))
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_array_equal(p.grad, q.grad)


def test_a_layer_called_on_its_own_between_forward_and_backward_raises():
    model = _lm()
    logits = model(_tokens())
    model.blocks[0].attn(np.zeros((1, 3, 8)))  # a look inside, outside no_grad()
    with pytest.raises(
        RuntimeError,
        match="MultiHeadAttention.backward: this module ran another forward",
    ):
        model.backward(np.ones_like(logits))


def test_train_after_a_look_at_the_model_trains_as_without_it():
    def history(look: bool):
        model = tfscratch.DecoderLM(11, 8, 2, 2, max_len=8, seed=0)
        if look:
            model(_tokens())  # a cell that shows the untrained model's logits
        optimizer = AdamW(model.parameters(), lr=1e-2)
        batches = ((t[:, :-1], t[:, 1:]) for t in (_tokens(s) for s in range(5)))
        return train(model, optimizer, batches, steps=5, progress=False)

    np.testing.assert_array_equal(history(True)["train_loss"], history(False)["train_loss"])


def test_forwards_with_no_backward_keep_no_record_for_long():
    model = _lm()
    for seed in range(20):  # a hand-written sampling loop outside no_grad()
        model(_tokens(seed))
    assert all(len(m._records.kept) <= 1 for m in model.modules() if "_records" in vars(m))


def test_pieces_run_by_hand_after_a_model_forward_backpropagate():
    model = _lm()
    tokens = _tokens()
    model(tokens)  # a forward whose backward never comes (a gradient check's, say)
    stream = model.tok_emb(tokens) + model.pos_emb.weight.data[:6]
    for block in model.blocks:  # the model's pieces, run by hand (notebook 06's Exercise 3)
        stream = block(stream)
    model.ln_f.backward(np.ones_like(model.ln_f(stream)))
    grad = model.blocks[1].backward(np.ones_like(stream))
    assert model.blocks[0].backward(grad).shape == (2, 6, 8)


def test_the_same_forward_twice_then_backward_is_right():
    layer, reference = (nn.LayerNorm(4, dtype=np.float64) for _ in range(2))
    layer(X)  # a cell that shows the output
    layer(X.copy())  # then one that runs forward and backward: the same caches
    grad = np.random.default_rng(2).standard_normal(X.shape)
    reference(X)
    np.testing.assert_array_equal(layer.backward(grad), reference.backward(grad))


def test_the_same_input_twice_with_dropout_active_raises():
    model = _lm(dropout=0.5)
    tokens = _tokens()
    logits = model(tokens)
    model(tokens)  # other dropout masks: which forward the gradient belongs to is unknown
    with pytest.raises(RuntimeError, match="ran another forward"):
        model.backward(np.ones_like(logits))
    model.eval()
    logits = model(tokens)
    model(tokens)  # no dropout: the same caches
    model.backward(np.ones_like(logits))


def test_a_look_at_a_batch_of_another_shape_then_forward_and_backward_is_right():
    model, reference = _lm(), _lm()
    model(_tokens()[:1, :4])  # a look at a short batch: its logits (1, 4, V) fit no other
    tokens = _tokens()
    model.backward(np.ones_like(model(tokens)))
    reference.backward(np.ones_like(reference(tokens)))
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_array_equal(p.grad, q.grad)
