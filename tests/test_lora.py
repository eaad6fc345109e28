"""Frozen parameters and LoRA (notebook 17): gradients, merging, optimisers, bad input."""

import numpy as np
import pytest

import tfscratch
from tfscratch import DecoderLM, gradcheck
from tfscratch.loss import CrossEntropyLoss
from tfscratch.nn import Linear, LoRALinear, Module, Parameter, add_lora, merge_lora
from tfscratch.optim import SGD, Adam, AdamW, clip_grad_norm


def small_lm(seed=0):
    return DecoderLM(11, 16, 2, 2, max_len=8, seed=seed, dtype=np.float64)


def tokens(seed=1, shape=(3, 7)):
    return np.random.default_rng(seed).integers(0, 11, shape)


def lora_layer(bias=True, rank=3, alpha=None, seed=0):
    base = Linear(5, 4, bias=bias, seed=seed, dtype=np.float64)
    layer = LoRALinear(base, rank, alpha=alpha, seed=seed + 1)
    # B starts at zero, which would hide a wrong dA (its gradient is zero then): make it nonzero
    layer.lora_B.data = np.random.default_rng(seed + 2).standard_normal(layer.lora_B.shape)
    return layer


# --- frozen parameters ----------------------------------------------------------------------
def test_parameter_defaults_to_trainable_and_freezing_zeroes_and_discards_its_grad():
    p = Parameter(np.ones(3))
    assert p.requires_grad
    p.grad += 2.0
    p.requires_grad = False
    assert np.array_equal(p.grad, np.zeros(3))
    p.grad += 5.0  # a backward adding into a frozen parameter: discarded
    p.grad = np.full(3, 7.0)
    assert np.array_equal(p.grad, np.zeros(3)) and p.grad.dtype == p.data.dtype
    with pytest.raises(ValueError, match="shape"):
        p.grad = np.ones(4)
    p.requires_grad = True
    assert np.array_equal(p.grad, np.zeros(3))
    p.grad += 1.0
    assert np.array_equal(p.grad, np.ones(3))
    with pytest.raises(TypeError, match="requires_grad"):
        p.requires_grad = "no"
    assert "requires_grad=False" in repr(Parameter(np.ones(2), requires_grad=False))


def test_freeze_unfreeze_round_trip_and_counts():
    model = small_lm()
    total = model.num_parameters()
    assert model.freeze() is model
    assert not any(p.requires_grad for p in model.parameters())
    assert model.num_parameters(trainable_only=True) == 0 and model.trainable_parameters() == {}
    assert model.num_parameters() == total
    model.blocks[0].unfreeze()
    assert set(model.trainable_parameters()) == {
        n for n in model.named_parameters() if n.startswith("blocks.0.")
    }
    model.unfreeze()
    assert model.num_parameters(trainable_only=True) == total


def test_frozen_model_backward_leaves_grads_zero_and_input_gradient_flows():
    model = small_lm()
    model.freeze()
    model.blocks[1].ffn.unfreeze()
    loss_fn = CrossEntropyLoss()
    x = tokens()
    loss_fn(model(x), tokens(2))
    model.backward(loss_fn.backward())
    for name, p in model.named_parameters().items():
        nonzero = np.any(p.grad != 0)
        assert nonzero == name.startswith("blocks.1.ffn."), name
    model.zero_grad()  # copes with frozen parameters
    clip_grad_norm(model.parameters(), 1.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: SGD(ps, lr=0.1),
        lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
        lambda ps: Adam(ps, lr=0.1),
        lambda ps: Adam(ps, lr=0.1, weight_decay=0.1),
        lambda ps: AdamW(ps, lr=0.1, weight_decay=0.1),
    ],
)
def test_every_optimiser_leaves_frozen_parameters_unchanged(make):
    model = small_lm()
    add_lora(model, rank=2)
    before = model.state_dict()
    optimizer = make(model.named_parameters())  # all of them, frozen included
    loss_fn = CrossEntropyLoss()
    for _ in range(3):
        optimizer.zero_grad()
        loss_fn(model(tokens()), tokens(2))
        model.backward(loss_fn.backward())
        optimizer.step()
    after = model.state_dict()
    for name, p in model.named_parameters().items():
        changed = not np.array_equal(before[name], after[name])
        assert changed == p.requires_grad, name
        assert changed == ("lora_" in name), name
    for kind, arrays in optimizer.buffers.items():
        for name, array in arrays.items():
            if not model.named_parameters()[name].requires_grad:
                assert not np.any(array), (kind, name)


def test_gradcheck_skips_frozen_parameters_and_refuses_them_by_name():
    layer = lora_layer()
    worst, errors = gradcheck(layer, np.random.default_rng(0).standard_normal((2, 3, 5)),
                              return_errors=True)  # fmt: skip
    assert set(errors) == {"input0", "lora_A", "lora_B"} and worst < 1e-7
    with pytest.raises(ValueError, match="frozen.*base.weight"):
        gradcheck(layer, np.ones((2, 5)), params=layer.base.named_parameters("base."))


# --- LoRALinear -----------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("alpha", [None, 8.0])
def test_lora_linear_gradients_match_finite_differences(bias, alpha):
    layer = lora_layer(bias=bias, alpha=alpha)
    x = np.random.default_rng(3).standard_normal((2, 3, 5))
    worst, errors = gradcheck(layer, x, max_coords=None, return_errors=True)
    assert worst < 1e-8, errors
    assert np.all(layer.base.weight.grad == 0)


def test_lora_linear_starts_equal_to_base_and_freezes_it():
    base = Linear(6, 4, seed=0, dtype=np.float64)
    layer = LoRALinear(base, 2)
    x = np.random.default_rng(0).standard_normal((3, 6))
    assert np.array_equal(layer(x), base(x))
    assert not base.weight.requires_grad and not base.bias.requires_grad
    assert layer.scale == 1.0 and LoRALinear(Linear(6, 4), 2, alpha=8).scale == 4.0
    assert set(layer.trainable_parameters()) == {"lora_A", "lora_B"}
    assert layer.lora_A.shape == (6, 2) and layer.lora_B.shape == (2, 4)


def test_merged_gives_the_same_outputs_as_a_plain_linear():
    layer = lora_layer(alpha=6.0)
    x = np.random.default_rng(4).standard_normal((2, 3, 5))
    merged = layer.merged()
    assert type(merged) is Linear and merged.weight.requires_grad
    np.testing.assert_allclose(merged(x), layer(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        merged.weight.data - layer.base.weight.data,
        layer.scale * layer.lora_A.data @ layer.lora_B.data,
    )


def test_a_lora_layer_used_twice_in_one_forward_gets_both_gradients():
    class Twice(Module):
        """``layer(tanh(layer(x)))``: one LoRA layer, two records of its forward."""

        def __init__(self, layer):
            self.layer = layer

        def forward(self, x):
            h = self.layer(x)
            self._dtanh = 1 - np.tanh(h) ** 2
            return self.layer(np.tanh(h))

        def backward(self, grad):
            grad = self.layer.backward(grad)  # the second call's backward first
            return self.layer.backward(grad * self._dtanh)

    layer = LoRALinear(Linear(4, 4, seed=0, dtype=np.float64), 2, seed=1)
    layer.lora_B.data = np.random.default_rng(2).standard_normal((2, 4))
    x = np.random.default_rng(3).standard_normal((3, 4))
    worst, errors = gradcheck(Twice(layer), x, max_coords=None, return_errors=True)
    assert set(errors) == {"input0", "layer.lora_A", "layer.lora_B"}
    assert worst < 1e-8, errors


# --- a model adapted with add_lora ------------------------------------------------------------
@pytest.mark.parametrize(
    "targets",
    [("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")],
)
def test_adapted_model_starts_equal_to_base_and_merging_keeps_its_logits(targets):
    model = small_lm()
    x = tokens()
    base_logits = model(x)
    adapted = add_lora(model, 2, targets=targets, alpha=4.0, seed=0)
    assert len(adapted) == 2 * len(targets)
    assert all(isinstance(layer, LoRALinear) for layer in adapted.values())
    assert np.array_equal(model(x), base_logits)
    rng = np.random.default_rng(5)
    for layer in adapted.values():
        layer.lora_B.data = 0.1 * rng.standard_normal(layer.lora_B.shape)
    adapted_logits = model(x)
    assert not np.allclose(adapted_logits, base_logits)
    merged = merge_lora(model)
    assert set(merged) == set(adapted)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    np.testing.assert_allclose(model(x), adapted_logits, rtol=1e-10, atol=1e-12)


def test_adapted_model_gradients_match_finite_differences():
    model = small_lm()
    adapted = add_lora(model, 2, targets=("q_proj", "v_proj", "fc2"))
    rng = np.random.default_rng(6)
    for layer in adapted.values():
        layer.lora_B.data = 0.3 * rng.standard_normal(layer.lora_B.shape)
    worst, errors = gradcheck(model, tokens(), max_coords=8, return_errors=True)
    assert set(errors) == set(model.trainable_parameters())
    assert worst < 1e-6, errors


def test_state_dict_round_trip_includes_frozen_parameters():
    model = small_lm()
    add_lora(model, 2)
    state = model.state_dict()
    assert "tok_emb.weight" in state and "blocks.0.attn.q_proj.base.weight" in state
    assert "blocks.0.attn.q_proj.lora_A" in state
    other = small_lm(seed=9)
    add_lora(other, 2, seed=3)
    other.load_state_dict(state)
    assert not other.tok_emb.weight.requires_grad  # loading keeps what is frozen frozen
    x = tokens()
    assert np.array_equal(other(x), model(x))
    for name, array in other.state_dict().items():
        assert np.array_equal(array, state[name]), name


def test_checkpoint_of_a_merged_model_loads_without_pickle(tmp_path):
    model = DecoderLM(11, 16, 2, 2, max_len=8, seed=0)
    add_lora(model, 2)
    for layer in model.modules():
        if isinstance(layer, LoRALinear):
            layer.lora_B.data = np.full(layer.lora_B.shape, 0.1)
    x = tokens()
    logits = model(x)
    merge_lora(model)
    tfscratch.save(model, tmp_path / "merged.npz")
    loaded = tfscratch.load(tmp_path / "merged.npz")
    np.testing.assert_allclose(loaded(x), logits, rtol=1e-5, atol=1e-5)


# --- bad input ------------------------------------------------------------------------------
def test_bad_arguments_are_refused_with_the_argument_named():
    base = Linear(6, 4, seed=0)
    with pytest.raises(ValueError, match=r"rank=0 .*1 <= rank <= min\(d_in, d_out\) = 4"):
        LoRALinear(base, 0)
    with pytest.raises(ValueError, match="rank=5"):
        LoRALinear(Linear(6, 4), 5)
    with pytest.raises(TypeError, match="rank must be an int"):
        LoRALinear(Linear(6, 4), 2.0)
    with pytest.raises(TypeError, match="base must be a tfscratch.nn.Linear"):
        LoRALinear(np.ones((6, 4)), 2)
    with pytest.raises(ValueError, match="alpha=-1"):
        LoRALinear(Linear(6, 4), 2, alpha=-1)
    model = small_lm()
    with pytest.raises(ValueError, match=r"\['query'\] name no Linear.*q_proj"):
        add_lora(model, 2, targets=("q_proj", "query"))
    with pytest.raises(ValueError, match="rank=17"):
        add_lora(model, 17)
    with pytest.raises(ValueError, match="rank=-1"):
        add_lora(model, -1)
    assert all(p.requires_grad for p in model.parameters())  # nothing changed
    with pytest.raises(TypeError, match="model must be a tfscratch Module"):
        add_lora(base.weight, 2)
    with pytest.raises(TypeError, match="targets"):
        add_lora(model, 2, targets=(1,))
    add_lora(model, 2, targets="q_proj")
    with pytest.raises(ValueError, match="already carry LoRA"):
        add_lora(model, 2, targets="q_proj")
