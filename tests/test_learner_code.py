"""Code a learner writes against the package behaves as it would in PyTorch or plain NumPy.

Each test is one habit from a from-scratch course: a hand-written optimiser step that
rebinds ``p.data`` or ``p.grad``, a finite-difference loop that writes through
``p.data.reshape(-1)``, a wrapped ``forward`` to watch a layer, saving after a hand-written
update, ``no_grad()`` for inference. Either the habit works, or it fails loudly.
"""

from pathlib import Path

import numpy as np
import pytest

import tfscratch
from tfscratch import nn
from tfscratch.optim import SGD

from .conftest import randomize

DATA = Path(__file__).parent / "data"


def _lm(seed=0, dtype=np.float64, **options):
    return randomize(tfscratch.DecoderLM(11, 8, 2, 2, max_len=8, seed=seed, dtype=dtype, **options))


def _loss_and_backward(model, tokens):
    """A mean-of-logits 'loss' with gradient: enough to drive every parameter."""
    logits = model(tokens)
    model.backward(np.full_like(logits, 1.0 / logits.size))
    return logits.mean()


def _all_models():
    return {
        "decoder tied": _lm(),
        "decoder untied": _lm(tie_weights=False),
        "seq2seq": tfscratch.Seq2SeqTransformer(9, 10, 8, 2, 1, 1, max_len=8, seed=0),
        "classifier cls": tfscratch.EncoderClassifier(9, 3, 8, 2, 1, pooling="cls", seed=0),
    }


# --- what a parameter is ---------------------------------------------------------------------
def test_attention_holds_four_linears_and_no_other_weight_array():
    mha = nn.MultiHeadAttention(8, 2, seed=0)
    assert [name for name, _ in mha.named_children()] == [
        "q_proj", "k_proj", "v_proj", "out_proj", "attn_dropout", "hook_z", "hook_pattern",
    ]  # fmt: skip
    assert all(isinstance(getattr(mha, p), nn.Linear) for p in ("q_proj", "k_proj", "v_proj"))
    hidden = [
        name for name, value in vars(mha).items() if isinstance(value, (np.ndarray, nn.Linear))
    ]
    assert hidden == ["q_proj", "k_proj", "v_proj", "out_proj"]


@pytest.mark.parametrize("kind", list(_all_models()))
def test_every_parameter_owns_a_contiguous_array_that_nothing_else_shares(kind):
    model = _all_models()[kind]
    arrays = []
    for name, p in model.named_parameters().items():
        for role, array in (("data", p.data), ("grad", p.grad)):
            assert array.flags.c_contiguous and array.flags.owndata, f"{name}.{role}"
            arrays.append((f"{name}.{role}", array))
    for module in model.modules():  # buffers: positional tables, rotary tables
        arrays += [(k, v) for k, v in vars(module).items() if isinstance(v, np.ndarray)]
    for i, (name_a, a) in enumerate(arrays):
        for name_b, b in arrays[i + 1 :]:
            assert not np.shares_memory(a, b), f"{name_a} shares memory with {name_b}"


# --- a hand-written optimiser ----------------------------------------------------------------
def test_hand_written_sgd_that_rebinds_data_trains_every_parameter_as_the_package_sgd():
    tokens = np.random.default_rng(0).integers(0, 11, (2, 6))
    mine, reference = _lm(), _lm()
    for model in (mine, reference):
        _loss_and_backward(model, tokens)
    for p in mine.parameters():
        p.data = p.data - 0.5 * p.grad  # the PyTorch-tutorial way: a new array each step
    SGD(reference.parameters(), lr=0.5).step()
    for name, p in mine.named_parameters().items():
        np.testing.assert_array_equal(p.data, reference.named_parameters()[name].data, name)
    np.testing.assert_array_equal(mine(tokens), reference(tokens))
    assert not np.allclose(mine(tokens), _lm()(tokens))  # the step changed the model


def test_rebinding_grad_to_zeros_lets_the_next_backward_fill_it():
    tokens = np.random.default_rng(1).integers(0, 11, (2, 6))
    model, fresh = _lm(), _lm()
    _loss_and_backward(model, tokens)
    for p in model.parameters():
        p.grad = np.zeros_like(p.data)  # instead of zero_grad()
    _loss_and_backward(model, tokens)
    _loss_and_backward(fresh, tokens)
    for name, p in model.named_parameters().items():
        np.testing.assert_array_equal(p.grad, fresh.named_parameters()[name].grad, name)
    assert np.abs(model.blocks[0].attn.k_proj.weight.grad).sum() > 0


def test_grad_set_to_none_means_zero():
    model = _lm()
    p = model.blocks[0].attn.q_proj.weight
    p.grad = None
    assert p.grad.shape == p.data.shape and not p.grad.any()


def test_assigning_data_keeps_a_float32_model_float32():
    model = _lm(dtype=np.float32)
    _loss_and_backward(model, np.zeros((1, 3), dtype=int))
    for p in model.parameters():
        p.data = p.data - np.float64(0.01) * p.grad  # NumPy 2 makes this float64
    assert {p.data.dtype for p in model.parameters()} == {np.dtype(np.float32)}
    assert model(np.zeros((1, 3), dtype=int)).dtype == np.float32


def test_assigning_data_or_grad_of_another_shape_raises():
    p = nn.Linear(4, 3, seed=0).weight
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(3, 4\)"):
        p.data = np.zeros((3, 4))
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(12,\)"):
        p.grad = np.zeros(12)
    with pytest.raises(TypeError, match="numeric"):
        p.data = np.full((4, 3), "a")


# --- a hand-written gradient check -----------------------------------------------------------
def test_finite_differences_written_through_reshape_match_the_backward():
    model = _lm()
    tokens = np.random.default_rng(2).integers(0, 11, (2, 5))
    model.zero_grad()
    _loss_and_backward(model, tokens)
    for name in ("blocks.0.attn.q_proj.weight", "blocks.1.attn.v_proj.bias", "tok_emb.weight"):
        p = model.named_parameters()[name]
        flat = p.data.reshape(-1)  # a view of the parameter's own array
        for i in (0, 3, flat.size - 1):
            old = flat[i]
            flat[i] = old + 1e-5
            up = model(tokens).mean()
            flat[i] = old - 1e-5
            down = model(tokens).mean()
            flat[i] = old
            numeric = (up - down) / 2e-5
            assert numeric == pytest.approx(p.grad.reshape(-1)[i], rel=1e-6, abs=1e-10), name
            assert numeric != 0.0 or p.grad.reshape(-1)[i] == 0.0


# --- watching a layer ------------------------------------------------------------------------
def test_a_wrapped_forward_is_what_calling_the_layer_runs():
    model = _lm()
    seen = []
    attn = model.blocks[1].attn
    original = attn.forward

    def watch(x, *args, **kwargs):
        seen.append(x.shape)
        return original(x, *args, **kwargs)

    attn.forward = watch
    logits = model(np.zeros((2, 5), dtype=int))
    assert seen == [(2, 5, 8)]
    assert logits.shape == (2, 5, 11)

    layer = nn.Linear(3, 2, seed=0)
    layer.forward = lambda x: np.zeros((len(x), 7))
    assert layer(np.ones((4, 3))).shape == (4, 7)


# --- saving after a hand-written update ------------------------------------------------------
def test_save_after_a_hand_written_update_stores_the_weights_the_model_uses(tmp_path):
    model = _lm()
    tokens = np.random.default_rng(3).integers(0, 11, (2, 6))
    _loss_and_backward(model, tokens)
    for p in model.parameters():
        p.data = p.data - 0.3 * p.grad
    tfscratch.save(model, tmp_path / "m.npz")
    np.testing.assert_array_equal(tfscratch.load(tmp_path / "m.npz")(tokens), model(tokens))


def test_a_checkpoint_saved_before_the_projections_were_separated_loads_unchanged():
    """``decoder_lm_v0.1.npz`` and its logits were written by the code of version 0.1, where
    q/k/v were views of one fused weight."""
    expected = np.load(DATA / "logits_v0.1.npz")
    model = tfscratch.load(DATA / "decoder_lm_v0.1.npz")
    # Version 0.1 summed the rows of small arrays with np.add.reduce and of large ones with
    # einsum (a switch by size); every row sum is einsum now (functional.row_sum): the same
    # numbers up to float32 rounding (~1e-7 here). A real change of the maths moves logits by
    # far more than 1e-5.
    np.testing.assert_allclose(
        model(expected["decoder_tokens"]), expected["decoder_logits"], rtol=0, atol=1e-5
    )


def test_the_names_model_of_v0_1_gives_the_logits_it_gave_before():
    expected = np.load(DATA / "logits_v0.1.npz")
    # The model the package shipped then (issue 22 has since shipped a longer-trained one).
    model = tfscratch.load(DATA / "names_lm_v0.1.npz")
    model.eval()
    # float32 sums in a new order (one fused matmul then, the same one now) may move the
    # last bit; a real change of the maths moves logits by far more than 1e-5.
    np.testing.assert_allclose(
        model(expected["names_tokens"]), expected["names_logits"], rtol=0, atol=1e-5
    )


# --- clear errors instead of AttributeError or a NumPy traceback -----------------------------
@pytest.mark.parametrize(
    "make, grad",
    [
        (lambda: nn.Linear(3, 2), np.ones((1, 2))),
        (lambda: nn.LayerNorm(3), np.ones((1, 3))),
        (lambda: nn.GELU(), np.ones(3)),
        (lambda: nn.MultiHeadAttention(4, 2), np.ones((1, 2, 4))),
        (lambda: nn.Embedding(5, 3), np.ones((1, 3))),
        (lambda: nn.CrossEntropyLoss(), 1.0),
        (lambda: tfscratch.DecoderLM(5, 4, 2, 1), np.ones((1, 2, 5))),
        (lambda: tfscratch.EncoderClassifier(5, 2, 4, 2, 1), np.ones((1, 2))),
    ],
)
def test_backward_before_any_forward_says_so(make, grad):
    with pytest.raises(RuntimeError, match="before any forward"):
        make().backward(grad)


@pytest.mark.parametrize(
    "call",
    [
        lambda: tfscratch.DecoderLM(5, 4, 2, 1)(np.zeros((0, 3), dtype=int)),
        lambda: tfscratch.EncoderClassifier(5, 2, 4, 2, 1)(np.zeros((0, 3), dtype=int)),
        lambda: tfscratch.Seq2SeqTransformer(5, 5, 4, 2, 1, 1)(
            np.zeros((0, 3), dtype=int), np.zeros((0, 2), dtype=int)
        ),
        lambda: nn.MultiHeadAttention(4, 2)(np.zeros((0, 3, 4))),
        lambda: nn.Linear(4, 2)(np.zeros((0, 4))),
    ],
)
def test_an_empty_batch_is_refused_with_a_clear_error(call):
    with pytest.raises(ValueError, match="empty|no rows|batch"):
        call()


# --- no_grad -----------------------------------------------------------------------------------
def _cache_arrays(model):
    """Every private array a module holds, by (module path, attribute)."""
    found = {}
    for index, module in enumerate(model.modules()):
        for name, value in vars(module).items():
            if name.startswith("_") and isinstance(value, np.ndarray):
                found[(index, name)] = id(value)
    return found


@pytest.mark.parametrize("kind", list(_all_models()))
def test_a_forward_inside_no_grad_keeps_nothing_for_backward(kind):
    model = _all_models()[kind]
    buffers = _cache_arrays(model)  # tables made by the constructors
    inputs = {
        "seq2seq": (np.ones((2, 4), dtype=int), np.ones((2, 3), dtype=int)),
    }.get(kind, (np.ones((2, 4), dtype=int),))
    trained_output = model(*inputs)
    assert len(_cache_arrays(model)) > len(buffers)  # a training forward keeps caches
    with tfscratch.no_grad():
        model(*inputs)
    assert _cache_arrays(model) == buffers  # and no_grad dropped them all from the layers
    with pytest.raises(RuntimeError, match="no_grad"):  # nor the earlier forward's records
        model.backward(np.ones_like(trained_output))
    # With no training forward at all, there is nothing to go back through either:
    fresh = _all_models()[kind]
    with tfscratch.no_grad():
        logits = fresh(*inputs)
    with pytest.raises(RuntimeError, match="no_grad"):
        fresh.backward(np.ones_like(logits))


def test_no_grad_still_sets_the_attention_weights():
    model = _lm()
    with tfscratch.no_grad():
        model(np.zeros((1, 4), dtype=int))
    weights = model.blocks[0].attn.attn_weights
    assert weights.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(weights.sum(-1), 1.0)


def test_no_grad_gives_the_same_output_as_a_training_forward():
    model, tokens = _lm(), np.random.default_rng(4).integers(0, 11, (2, 6))
    with tfscratch.no_grad():
        inference = model(tokens)
    np.testing.assert_array_equal(inference, model(tokens))


def test_no_grad_nests_restores_after_an_exception_and_decorates():
    assert tfscratch.is_grad_enabled()
    with tfscratch.no_grad():
        with tfscratch.no_grad():
            assert not tfscratch.is_grad_enabled()
        assert not tfscratch.is_grad_enabled()
    assert tfscratch.is_grad_enabled()

    with pytest.raises(KeyError), tfscratch.no_grad():
        raise KeyError("boom")
    assert tfscratch.is_grad_enabled()

    @tfscratch.no_grad()
    def predict(depth):
        assert not tfscratch.is_grad_enabled()
        return predict(depth - 1) if depth else "done"

    assert predict(3) == "done"
    assert tfscratch.is_grad_enabled()


def test_training_works_again_after_no_grad():
    model, tokens = _lm(), np.random.default_rng(5).integers(0, 11, (2, 6))
    with tfscratch.no_grad():
        model(tokens)
    _loss_and_backward(model, tokens)
    assert np.abs(model.blocks[0].attn.q_proj.weight.grad).sum() > 0


def test_generation_evaluation_and_translation_leave_no_caches_behind():
    lm = _lm()
    buffers = _cache_arrays(lm)
    tfscratch.generate(lm, [1, 2], 4, temperature=0)
    assert _cache_arrays(lm) == buffers

    from tfscratch.train import evaluate

    tokens = np.ones((2, 5), dtype=int)
    evaluate(lm, [(tokens, tokens)])
    assert _cache_arrays(lm) == buffers

    translator = tfscratch.Seq2SeqTransformer(9, 10, 8, 2, 1, 1, max_len=8, seed=0)
    buffers = _cache_arrays(translator)
    tfscratch.translate(translator, [1, 2, 3], 5, bos=1, eos=2, beam_size=2)
    tfscratch.translate(translator, [1, 2, 3], 5, bos=1, eos=2)
    assert _cache_arrays(translator) == buffers


def test_a_projection_called_on_its_own_holds_no_stale_input_after_attention_runs():
    """A learner calls attn.q_proj(x) by hand (notebook 08 does), then the attention layer:
    the projection's cache is the attention's input, and inside no_grad it is gone."""
    attn = nn.MultiHeadAttention(4, 2, seed=0, dtype=np.float64)
    attn.q_proj(np.ones((1, 1, 4)))
    x = np.random.default_rng(6).standard_normal((2, 3, 4))
    attn(x)
    assert attn.q_proj._x is x and attn.v_proj._x is x
    with tfscratch.no_grad():
        attn(x)
    assert not [
        (type(m).__name__, k) for m in attn.modules() for k, v in vars(m).items()
        if k.startswith("_") and isinstance(v, np.ndarray)
    ]  # fmt: skip


def test_evaluation_restores_each_modules_own_mode():
    model = _lm()
    model.train()
    model.blocks[0].eval()  # a learner's deliberate mixture
    tfscratch.generate(model, [1], 3, seed=0)
    assert model.training and not model.blocks[0].training
    assert all(module.training for module in model.blocks[1].modules())


def test_no_grad_decorates_a_generator_function_step_by_step():
    @tfscratch.no_grad()
    def modes():
        yield tfscratch.is_grad_enabled()
        yield tfscratch.is_grad_enabled()
        return "done"

    steps = modes()
    assert next(steps) is False
    assert tfscratch.is_grad_enabled()  # the caller's code between steps keeps its mode
    assert next(steps) is False
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == "done"


def test_grad_mode_is_per_thread():
    import threading

    seen = []
    inside, release = threading.Event(), threading.Event()

    def hold_no_grad():
        with tfscratch.no_grad():
            inside.set()
            release.wait(5)

    other = threading.Thread(target=hold_no_grad)
    other.start()
    inside.wait(5)
    seen.append(tfscratch.is_grad_enabled())
    release.set()
    other.join()
    assert seen == [True]


# --- a learner's own layer: the five traps of issue 36 ----------------------------------------
class TwoLinears(nn.Module):
    """Written the PyTorch way: submodules in a list, a dict, and a bare Parameter list."""

    def __init__(self, seed=0):
        self.layers = [nn.Linear(4, 4, seed=seed, dtype=np.float64), None]
        self.heads = {"left": nn.Linear(4, 2, seed=seed + 1, dtype=np.float64)}
        self.scales = [nn.Parameter(np.ones(4)), nn.Parameter(np.full(4, 2.0))]

    def forward(self, x):
        self._x = x  # the cs231n habit: a cache stored by hand
        h = self.layers[0](x) * self.scales[0].data * self.scales[1].data
        return self.heads["left"](h)

    def backward(self, grad_output):
        self.check_ready_for_backward()
        dh = self.heads["left"].backward(grad_output)
        h_in = self.layers[0]._x @ self.layers[0].weight.data + self.layers[0].bias.data
        self.scales[0].grad += (dh * h_in * self.scales[1].data).sum(axis=0)
        self.scales[1].grad += (dh * h_in * self.scales[0].data).sum(axis=0)
        return self.layers[0].backward(dh * self.scales[0].data * self.scales[1].data)


def test_a_layer_written_the_pytorch_way_finds_every_parameter_and_passes_gradcheck():
    layer = TwoLinears()
    assert list(layer.named_parameters()) == [  # its own parameters first, then submodules'
        "scales.0", "scales.1",
        "layers.0.weight", "layers.0.bias", "heads.left.weight", "heads.left.bias",
    ]  # fmt: skip
    x = np.random.default_rng(0).standard_normal((3, 4))
    assert tfscratch.gradcheck(layer, x, max_coords=None) < 1e-6


def test_a_list_with_none_still_shows_its_modules():
    layer = TwoLinears()
    assert [name for name, _ in layer.named_children()] == ["layers.0", "heads.left"]


@pytest.mark.parametrize("value", [nn.Linear(2, 2, seed=0), nn.Parameter(np.zeros(2))])
def test_a_module_or_parameter_under_an_underscore_name_is_refused(value):
    layer = nn.Module()
    with pytest.raises(AttributeError, match="would not train"):
        layer._hidden = value
    with pytest.raises(AttributeError, match="self.hidden ="):
        layer._hidden = [value]


def test_a_hand_kept_cache_is_ready_for_backward_after_calling_the_layer():
    layer = TwoLinears()
    with pytest.raises(RuntimeError, match="before any forward"):
        layer.check_ready_for_backward()
    layer(np.zeros((1, 4)))
    layer.check_ready_for_backward()  # no error: calling the layer recorded the forward
    with tfscratch.no_grad():
        layer(np.zeros((1, 4)))
    with pytest.raises(RuntimeError, match="no_grad"):
        layer.check_ready_for_backward()


def test_an_optimiser_trains_every_parameter_of_a_learners_layer():
    layer = TwoLinears()
    before = {name: p.data.copy() for name, p in layer.named_parameters().items()}
    x = np.random.default_rng(1).standard_normal((3, 4))
    out = layer(x)
    layer.backward(np.ones_like(out))
    SGD(layer.parameters(), lr=0.1).step()
    moved = [
        name for name, p in layer.named_parameters().items() if not (p.data == before[name]).all()
    ]
    assert moved == list(before)
