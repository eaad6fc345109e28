"""The reliability probe's failing cases (``../shared/reviews/reliability.md``, its appendix),
each rebuilt as a test under the probe's id: a case the probe found silently wrong, crashing
or unclear either works now or raises a ValueError/TypeError naming the argument, the value
and what was expected. (Cases the probe found holding are covered by test_bad_input.py,
test_generate.py, test_checkpoint.py, test_learner_code.py and test_forward_records.py, and so
are its failing learner habits C12-C15, C18, C25-C29 and C32, each tested there: a second
forward or backward, reuse in one forward, a forward under no_grad before the backward, no_grad
on a generator and in another thread, generation restoring each module's mode.)
"""

import numpy as np
import pytest

import tfscratch
from tfscratch import DecoderLM, EncoderClassifier, nn, optim
from tfscratch import functional as F
from tfscratch.gradient_check import gradcheck
from tfscratch.train import train


def lm(**options):
    return DecoderLM(11, 16, 2, 2, max_len=8, seed=0, **options)


def tokens(seed=0, shape=(2, 6)):
    return np.random.default_rng(seed).integers(0, 11, size=shape)


def clear_error(kind, *facts):
    """The case raises ``kind`` (ValueError or TypeError) whose message holds every fact."""

    def check(case):
        with pytest.raises(kind) as raised:
            case()
        message = str(raised.value)
        missing = [fact for fact in facts if str(fact) not in message]
        assert not missing, f"the message {message!r} does not say {missing}"

    return check


# --- bad input: each raises a clear error -------------------------------------------------
def _grad_of_wrong_shape(layer, x, grad):
    layer(x)
    layer.backward(grad)


CLEAR_ERRORS = {
    "A14 ragged token ids": (
        lambda: lm()([[1, 2], [3]]),
        clear_error((ValueError, TypeError), "tokens"),
    ),
    "A77 Linear backward, grad of the wrong shape": (
        lambda: _grad_of_wrong_shape(
            nn.Linear(4, 3, seed=0), np.ones((2, 4), np.float32), np.ones((3, 3), np.float32)
        ),
        clear_error(ValueError, "(3, 3)", "(2, 3)"),
    ),
    "A78 LayerNorm backward, grad of the wrong shape": (
        lambda: _grad_of_wrong_shape(
            nn.LayerNorm(4), np.ones((2, 4), np.float32), np.ones((2, 5), np.float32)
        ),
        clear_error(ValueError, "(2, 5)", "(2, 4)"),
    ),
    "A79 MHA backward, grad of the wrong shape": (
        lambda: _grad_of_wrong_shape(
            nn.MultiHeadAttention(8, 2, seed=0),
            np.ones((1, 3, 8), np.float32),
            np.ones((1, 2, 8), np.float32),
        ),
        clear_error(ValueError, "(1, 2, 8)", "(1, 3, 8)"),
    ),
    "A80 layer_norm, gamma of the wrong shape": (
        lambda: F.layer_norm(np.ones((2, 4)), np.ones(3), np.zeros(4)),
        clear_error(ValueError, "gamma", "(3,)", "4"),
    ),
    "A81 attention, q and k of different d_head": (
        lambda: F.scaled_dot_product_attention(
            np.ones((1, 1, 2, 3)), np.ones((1, 1, 2, 4)), np.ones((1, 1, 2, 4))
        ),
        clear_error(ValueError, "3", "4"),
    ),
    "A84 CrossEntropyLoss(label_smoothing='0.1')": (
        lambda: nn.CrossEntropyLoss(label_smoothing="0.1"),
        clear_error(TypeError, "label_smoothing", "0.1"),
    ),
    "A85 CrossEntropyLoss(ignore_index='pad')": (
        lambda: nn.CrossEntropyLoss(ignore_index="pad")(np.zeros((1, 3)), np.array([0])),
        clear_error(TypeError, "ignore_index", "pad"),
    ),
    "A94 gradcheck of a float32 model": (
        lambda: gradcheck(lm(), tokens()),
        clear_error(TypeError, "float64", "float32"),
    ),
    "A95 a kv_cache made by a smaller model": (
        lambda: DecoderLM(11, 16, 2, 3, max_len=8, seed=0)(
            tokens(shape=(1, 2)), kv_cache=lm().new_kv_cache()
        ),
        clear_error(ValueError, "kv_cache", "2", "3"),
    ),
    "A107 WarmupCosineSchedule.load_state_dict without base_lr": (
        lambda: optim.WarmupCosineSchedule(
            optim.SGD(lm().parameters(), lr=0.1), 2, 10
        ).load_state_dict({"step": 3}),
        clear_error(ValueError, "base_lr"),
    ),
    "D01 number_pairs beyond num2words": (
        lambda: tfscratch.data.number_pairs([10**40]),
        clear_error(ValueError, "numbers", str(10**40)),
    ),
}


@pytest.mark.parametrize("case", list(CLEAR_ERRORS))
def test_bad_input_found_unclear_by_the_probe_now_raises_a_clear_error(case):
    call, check = CLEAR_ERRORS[case]
    check(call)


# --- silently wrong or crashing before: now right ------------------------------------------
def test_A27_softmax_of_an_empty_array_is_empty_as_in_pytorch():
    assert F.softmax(np.zeros((2, 0))).shape == (2, 0)


def test_A22_A23_a_nan_in_a_masked_position_propagates_as_in_pytorch():
    """A masked weight is exactly 0, and 0 * NaN is NaN in any matrix product (PyTorch's
    too): the probe's "silent NaN" is PyTorch's own behaviour, kept. Finite weights stay
    finite: the NaN comes only from the NaN row."""
    model = lm()
    model.tok_emb.weight.data[5] = np.nan
    assert not np.isfinite(model(np.array([[1, 2, 5]]))[0, :2]).all()
    other_logits = model(np.array([[1, 2, 3]]))  # column 5 is the tied head's NaN row
    assert np.isfinite(np.delete(other_logits, 5, axis=-1)).all()
    classifier = EncoderClassifier(5, 3, 8, 2, 1, max_len=8, seed=0)
    classifier.tok_emb.weight.data[0] = np.nan  # the pad id's row, masked
    assert not np.isfinite(
        classifier(np.array([[1, 2, 0]]), pad_mask=np.array([[False, False, True]]))
    ).all()


@pytest.mark.parametrize("temperature", [1e-45, 1e-300])
def test_A32_A33_a_tiny_temperature_samples_greedily(temperature):
    model = lm()
    assert tfscratch.generate(model, [1], 4, temperature=temperature, seed=0) == tfscratch.generate(
        model, [1], 4, temperature=0
    )


def test_A110_train_refuses_an_optimiser_of_another_model():
    old, new = lm(), lm()
    optimizer = optim.AdamW(old.parameters(), lr=1e-3)
    batches = [(tokens(0), tokens(1))] * 2
    with pytest.raises(ValueError, match="optimi"):
        train(new, optimizer, iter(batches), 2, progress=False)


def test_C35_replacing_a_layer_after_building_the_optimiser_is_refused_by_train():
    model = lm()
    optimizer = optim.AdamW(model.parameters(), lr=1e-3)
    model.ln_f = nn.LayerNorm(16)  # a new layer: the optimiser holds the old one's parameters
    with pytest.raises(ValueError, match="optimi"):
        train(model, optimizer, iter([(tokens(0), tokens(1))] * 2), 2, progress=False)
