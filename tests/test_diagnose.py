"""``tfscratch.diagnose`` and the zoo of planted bugs (notebook 16).

Every planted bug is caught by the check named for it, the correct model passes every
check, ``diagnose`` leaves the model it examines exactly as it was, and it works on a
learner's own ``Module``.
"""

import numpy as np
import pytest

import tfscratch
from tfscratch import bugs, nn
from tfscratch.doctor import CHECKS

# The check that must catch each bug (others may catch it too).
CAUGHT_BY = {
    "causal_off_by_one": "causality",
    "softmax_wrong_axis": "causality",
    "kv_cache_offset": "cached = uncached",
    "layernorm_wrong_axis": "padding invariance",
    "dropout_in_eval": "eval deterministic",
    "tied_head_grad_lost": "gradient check",
    "residual_backward_lost": "gradient check",
    "init_too_large": "loss at init",
    "positions_from_end": "padding invariance",
    "positions_never_learn": "every parameter learns",
}
# A backward bug leaves the forward right: the forward checks pass.
FORWARD_CHECKS_PASS = ("tied_head_grad_lost", "residual_backward_lost", "positions_never_learn")


@pytest.fixture(scope="module")
def batch():
    return bugs.make_batch()


@pytest.fixture(scope="module")
def reports(batch):
    return {bug: tfscratch.diagnose(bugs.make_model(bug), *batch) for bug in [None, *bugs.BUGS]}


def verdicts(report) -> dict:
    return dict(zip(report["check"], report["verdict"], strict=True))


def test_the_zoo_is_listed_and_every_bug_has_a_check():
    zoo = bugs.list_bugs()
    assert list(zoo.columns) == ["bug", "description"]
    assert len(zoo) >= 8
    assert set(zoo["bug"]) == set(CAUGHT_BY)
    assert zoo["description"].str.len().min() > 20


def test_the_correct_model_passes_every_check(reports):
    report = reports[None]
    assert list(report["check"]) == list(CHECKS)
    assert list(report.columns[:4]) == ["check", "measured", "expected", "verdict"]
    assert set(report["verdict"]) == {"ok"}, report.to_string()


@pytest.mark.parametrize("bug", sorted(CAUGHT_BY))
def test_each_bug_is_caught_by_its_check(reports, bug):
    found = verdicts(reports[bug])
    assert found[CAUGHT_BY[bug]] == "fails", reports[bug].to_string()
    if bug in FORWARD_CHECKS_PASS:
        for check in ("causality", "cached = uncached", "padding invariance"):
            assert found[check] == "ok", (bug, check)


def test_bugs_in_the_forward_with_a_matching_backward_pass_the_gradient_check(reports):
    for bug in ("layernorm_wrong_axis", "positions_from_end", "causal_off_by_one"):
        assert verdicts(reports[bug])["gradient check"] == "ok", bug


def test_a_planted_bug_does_not_touch_the_correct_classes(batch):
    bugs.make_model("causal_off_by_one")
    bugs.make_model("dropout_in_eval")
    assert set(verdicts(tfscratch.diagnose(bugs.make_model(None, seed=1), *batch)).values()) == {
        "ok"
    }
    # the variants keep their parent's name, so printing a model does not name its bug
    model = bugs.make_model("softmax_wrong_axis")
    assert type(model.blocks[0].attn).__name__ == "MultiHeadAttention"
    assert "softmax" not in repr(model).lower()


def test_mystery_models_carry_distinct_bugs_of_the_zoo():
    models = [bugs.mystery_model(label) for label in "ABC"]
    assert all(isinstance(model, tfscratch.DecoderLM) for model in models)
    with pytest.raises(ValueError, match="label"):
        bugs.mystery_model("Z")


def _state(model):
    return (
        {name: (p.data.copy(), p.grad.copy()) for name, p in model.named_parameters().items()},
        [module.training for module in model.modules()],
        [m._rng.bit_generator.state for m in model.modules() if isinstance(m, nn.Dropout)],
    )


def test_diagnose_restores_the_model_and_draws_no_global_random_numbers(batch):
    model = bugs.make_model("dropout_in_eval")  # its dropout draws even in evaluation
    model.zero_grad()
    logits = model(batch[0])
    model.backward(np.ones_like(logits) / logits.size)  # some gradient to keep
    model.blocks[1].eval()  # a mixed mode
    before = _state(model)
    global_state = np.random.get_state()[1].copy()
    tfscratch.diagnose(model, *batch)
    # the model still works: a forward and a backward run
    after = _state(model)
    for name, (data, grad) in before[0].items():
        np.testing.assert_array_equal(after[0][name][0], data, err_msg=name)
        np.testing.assert_array_equal(after[0][name][1], grad, err_msg=name)
    assert after[1] == before[1]
    assert after[2] == before[2]
    np.testing.assert_array_equal(np.random.get_state()[1], global_state)
    model.zero_grad()
    logits = model(batch[0])
    model.backward(np.ones_like(logits) / logits.size)


class Bigram(nn.Module):
    """A learner's own language model: each token's embedding, then a linear head."""

    def __init__(self, vocab_size=16, dim=8, seed=0):
        rng = np.random.default_rng(seed)
        self.emb = nn.Embedding(vocab_size, dim, rng=rng)
        self.head = nn.Linear(dim, vocab_size, rng=rng)
        self.head.weight.data *= 0.1

    def forward(self, tokens):
        return self.head(self.emb(tokens))

    def backward(self, grad_logits):
        self.emb.backward(self.head.backward(grad_logits))


def test_diagnose_works_on_a_learners_own_module(batch):
    model = Bigram()
    report = tfscratch.diagnose(model, *batch)
    found = verdicts(report)
    assert found["cached = uncached"] == "n/a"
    assert "kv_cache" in report.set_index("check").loc["cached = uncached", "expected"]
    for check in ("loss at init", "causality", "gradient check", "padding invariance"):
        assert found[check] == "ok", (check, report.to_string())
    assert found["eval deterministic"] == "ok"
    assert found["every parameter learns"] == "ok"
    # a bigram cannot memorise random sequences (a token is followed by different tokens)
    assert found["overfit one batch"] == "fails"


def test_a_learners_backward_bug_is_caught(batch):
    class ForgetsTheHead(Bigram):
        def backward(self, grad_logits):
            self.emb.backward(grad_logits @ self.head.weight.data.T)  # head.grad never set

    found = verdicts(tfscratch.diagnose(ForgetsTheHead(), *batch))
    assert found["every parameter learns"] == "fails"
    assert found["gradient check"] == "fails"


def test_bad_input_raises_clear_errors(batch):
    inputs, targets = batch
    model = bugs.make_model()
    with pytest.raises(TypeError, match="Module"):
        tfscratch.diagnose(lambda x: x, inputs, targets)
    with pytest.raises(ValueError, match="int array"):
        tfscratch.diagnose(model, inputs.astype(float), targets)
    with pytest.raises(ValueError, match="shape of inputs"):
        tfscratch.diagnose(model, inputs, targets[:, :-1])
    with pytest.raises(ValueError, match="IGNORE_INDEX"):
        tfscratch.diagnose(model, inputs, np.full_like(targets, -100))
    with pytest.raises(ValueError, match="outside"):
        tfscratch.diagnose(model, inputs, targets + 100)
    with pytest.raises(ValueError, match="empty"):
        tfscratch.diagnose(model, inputs[:0], targets[:0])
    with pytest.raises(ValueError, match="unknown bug"):
        bugs.make_model("off_by_two")

    class NotLogits(nn.Module):
        def forward(self, tokens):
            return tokens.sum()

    with pytest.raises(ValueError, match="logits"):
        tfscratch.diagnose(NotLogits(), inputs, targets)


def test_the_causality_detail_tells_a_one_step_leak_from_a_mix_over_all_positions(reports):
    """``causal_off_by_one`` and ``layernorm_wrong_axis`` give the same eight verdicts; how far
    back the last token reaches tells them apart (one position per layer, against all)."""
    off_by_one, over_time = reports["causal_off_by_one"], reports["layernorm_wrong_axis"]
    assert verdicts(off_by_one) == verdicts(over_time)
    T = 12
    detail = {
        bug: reports[bug].set_index("check").loc["causality", "detail"]
        for bug in (None, "causal_off_by_one", "layernorm_wrong_axis")
    }
    assert detail[None].endswith(f"moves 0 of the {T - 1} positions before it")
    assert detail["causal_off_by_one"].endswith(f"moves 2 of the {T - 1} positions before it")
    assert detail["layernorm_wrong_axis"].endswith(
        f"moves {T - 1} of the {T - 1} positions before it"
    )
