"""tfscratch.inspect: the cache is the model's own forward, hooks read and replace
activations, ablations remove heads, and the cached gradients are the model's own backward."""

import numpy as np
import pytest

import tfscratch
from tfscratch import inspect as ti

VOCAB, T = 13, 7


def make_model(attn_only=False, dtype=np.float32, pos="learned", seed=0):
    model = tfscratch.DecoderLM(
        VOCAB, 16, 4, 2, max_len=10, attn_only=attn_only, pos=pos, seed=seed, dtype=dtype
    )
    # give LayerNorms and biases values that are not 0/1, so every term of the maths counts
    rng = np.random.default_rng(1)
    for name, parameter in model.named_parameters().items():
        if name.endswith(("bias", "beta", "gamma")):
            parameter.data[...] += rng.normal(0, 0.1, parameter.shape)
    return model


def tokens(seed=0, batch=3):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, T))


@pytest.mark.parametrize("attn_only", [False, True])
@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope"])
def test_logits_equal_the_models_own_forward(attn_only, pos):
    model, x = make_model(attn_only, pos=pos), tokens()
    logits, cache = ti.run_with_cache(model, x)
    np.testing.assert_array_equal(logits, model(x))
    assert set(cache) == set(ti.hook_names(model))
    assert ("hook_pos_embed" in cache) == (pos != "rope")
    assert ("blocks.0.hook_mlp_out" in cache) == (not attn_only)


def test_cache_shapes():
    model, x = make_model(), tokens()
    _, cache = ti.run_with_cache(model, x)
    assert cache["hook_embed"].shape == (3, T, 16)
    assert cache["blocks.1.attn.hook_pattern"].shape == (3, 4, T, T)
    assert cache["blocks.1.attn.hook_z"].shape == (3, T, 4, 4)
    assert cache["ln_final.hook_normalized"].shape == (3, T, 16)


@pytest.mark.parametrize("attn_only", [False, True])
def test_residual_identities(attn_only):
    model, x = make_model(attn_only), tokens()
    _, c = ti.run_with_cache(model, x)
    np.testing.assert_allclose(c["hook_embed"] + c["hook_pos_embed"], c["blocks.0.hook_resid_pre"])
    for i in range(2):
        p = f"blocks.{i}."
        np.testing.assert_array_equal(
            c[p + "hook_resid_pre"] + c[p + "hook_attn_out"], c[p + "hook_resid_mid"]
        )
        mlp = 0.0 if attn_only else c[p + "hook_mlp_out"]
        np.testing.assert_array_equal(c[p + "hook_resid_mid"] + mlp, c[p + "hook_resid_post"])
    np.testing.assert_array_equal(c["blocks.0.hook_resid_post"], c["blocks.1.hook_resid_pre"])
    np.testing.assert_allclose(
        c["ln_final.hook_normalized"], model.ln_f(c["blocks.1.hook_resid_post"]), rtol=1e-6
    )


def test_heads_through_out_proj_plus_bias_give_attn_out():
    model, x = make_model(dtype=np.float64), tokens()
    _, c = ti.run_with_cache(model, x)
    for i, block in enumerate(model.blocks):
        z = c[f"blocks.{i}.attn.hook_z"]  # (B, T, H, d_head)
        W_O = block.attn.out_proj.weight.data.reshape(4, 4, 16)  # head h's rows of W_O
        per_head = np.einsum("bthd,hde->bthe", z, W_O)  # each head's write to the stream
        np.testing.assert_allclose(
            per_head.sum(axis=2) + block.attn.out_proj.bias.data,
            c[f"blocks.{i}.hook_attn_out"],
            atol=1e-12,
        )


def test_pattern_rows_are_causal_distributions():
    model, x = make_model(), tokens()
    _, c = ti.run_with_cache(model, x)
    pattern = c["blocks.0.attn.hook_pattern"]
    np.testing.assert_allclose(pattern.sum(-1), 1, rtol=1e-5)
    assert np.all(pattern[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)


def test_an_identity_hook_changes_nothing():
    model, x = make_model(), tokens()
    names = ti.hook_names(model)
    seen = []
    hooks = [(name, lambda a, n: seen.append(n) or a) for name in names]
    np.testing.assert_array_equal(ti.run_with_hooks(model, x, hooks), model(x))
    assert sorted(seen) == sorted(names)
    copy_hooks = [(n, lambda a, _: a.copy()) for n in names]
    np.testing.assert_array_equal(ti.run_with_hooks(model, x, copy_hooks), model(x))


@pytest.mark.parametrize(
    "name", ["hook_embed", "hook_pos_embed", "blocks.0.attn.hook_z", "blocks.0.hook_resid_mid",
             "blocks.1.hook_mlp_out", "blocks.1.hook_resid_pre"],
)  # fmt: skip
def test_a_patched_activation_changes_what_follows_and_nothing_before(name):
    model, x = make_model(), tokens()
    logits, _ = ti.run_with_cache(model, x)

    def patch(activation, _):
        out = activation.copy()
        # position 3 only; a random direction (LayerNorm would remove a constant shift)
        out[:, 3] += np.random.default_rng(2).normal(0, 1, out.shape[2:])
        return out

    patched = ti.run_with_hooks(model, x, [(name, patch)])
    np.testing.assert_array_equal(
        patched[:, :3], logits[:, :3]
    )  # causal: earlier positions unchanged
    assert np.abs(patched[:, 3:] - logits[:, 3:]).max() > 1e-3


def test_patching_with_another_runs_activation_gives_that_run():
    model = make_model()
    a, b = tokens(0), tokens(1)
    _, cache_b = ti.run_with_cache(model, b)
    # the whole residual stream entering block 0 carries all of b: the rest follows
    patched = ti.run_with_hooks(
        model, a, [("blocks.0.hook_resid_pre", lambda *_: cache_b["blocks.0.hook_resid_pre"])]
    )
    np.testing.assert_array_equal(patched, model(b))


def test_hooks_are_removed_afterwards_also_after_an_error():
    model, x = make_model(), tokens()
    before = model(x)

    def broken(activation, name):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        ti.run_with_hooks(model, x, [("blocks.1.hook_attn_out", broken)])
    for module in model.modules():
        assert "forward" not in vars(module) and "backward" not in vars(module)
    for point in ti.hook_points(model).values():
        assert point.forward_hooks == [] and point.backward_hooks == []
    np.testing.assert_array_equal(model(x), before)


def test_zero_ablation_zeroes_the_heads_output_before_out_proj():
    model, x = make_model(), tokens()
    with ti.ablate_heads(model, [(1, 2), (0, 0)]):
        inside = model(x)
        logits, c = ti.run_with_cache(model, x)
    np.testing.assert_array_equal(inside, logits)
    assert np.all(c["blocks.1.attn.hook_z"][:, :, 2] == 0) and np.all(
        c["blocks.0.attn.hook_z"][:, :, 0] == 0
    )
    assert np.abs(c["blocks.1.attn.hook_z"][:, :, 1]).max() > 0
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(inside, model(x))  # outside the block: the full model again
    expected = ti.run_with_hooks(
        model,
        x,
        [("blocks.0.attn.hook_z", _set_head(0, 0.0)), ("blocks.1.attn.hook_z", _set_head(2, 0.0))],
    )
    np.testing.assert_array_equal(inside, expected)


def _set_head(head, value):
    def hook(z, _):
        z = z.copy()
        z[:, :, head] = value
        return z

    return hook


def test_mean_ablation_uses_the_mean_over_batch_and_positions():
    model, x = make_model(), tokens()
    _, clean = ti.run_with_cache(model, x)
    with ti.ablate_heads(model, [(0, 3)], how="mean"):
        _, c = ti.run_with_cache(model, x)
    mean = clean["blocks.0.attn.hook_z"][:, :, 3].mean(axis=(0, 1))
    np.testing.assert_allclose(
        c["blocks.0.attn.hook_z"][:, :, 3], np.broadcast_to(mean, (3, T, 4)), rtol=1e-6
    )


def test_ablations_nest_and_unwind():
    model, x = make_model(), tokens()
    with ti.ablate_heads(model, [(0, 1)]):
        with ti.ablate_heads(model, [(1, 1)]):
            _, c = ti.run_with_cache(model, x)
            assert np.all(c["blocks.0.attn.hook_z"][:, :, 1] == 0)
            assert np.all(c["blocks.1.attn.hook_z"][:, :, 1] == 0)
        _, c = ti.run_with_cache(model, x)
        assert np.abs(c["blocks.1.attn.hook_z"][:, :, 1]).max() > 0
        assert np.all(c["blocks.0.attn.hook_z"][:, :, 1] == 0)
    np.testing.assert_array_equal(ti.run_with_cache(model, x)[0], model(x))
    assert not hasattr(model, "_inspect_hooks")


def _metric(target_position, target_token):
    """log-probability of one token at one position, summed over the batch, and its gradient."""

    def metric(logits):
        z = logits[:, target_position]
        log_probs = z - z.max(-1, keepdims=True)
        log_probs = log_probs - np.log(np.exp(log_probs).sum(-1, keepdims=True))
        value = log_probs[:, target_token].sum()
        grad = np.zeros_like(logits)
        grad[:, target_position] = -np.exp(log_probs)
        grad[:, target_position, target_token] += 1
        return value, grad

    return metric


@pytest.mark.parametrize("attn_only", [False, True])
def test_gradients_match_central_finite_differences(attn_only):
    model, x = make_model(attn_only, dtype=np.float64), tokens(batch=2)
    metric = _metric(5, 4)
    _, cache = ti.run_with_cache(model, x, metric=metric)
    rng = np.random.default_rng(0)
    eps = 1e-6
    for name in ti.hook_names(model):
        grad = cache[name + "_grad"]
        assert grad.shape == cache[name].shape, name
        for _ in range(3):
            index = tuple(rng.integers(0, s) for s in grad.shape)

            def shifted(delta, index=index, name=name):
                def hook(activation, _):
                    out = activation.copy()
                    out[index] += delta
                    return out

                return metric(ti.run_with_hooks(model, x, [(name, hook)]))[0]

            numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
            np.testing.assert_allclose(
                grad[index], numeric, rtol=1e-5, atol=1e-8, err_msg=f"{name}{index}"
            )


def test_pattern_gradient_is_dz_times_values():
    model, x = make_model(dtype=np.float64), tokens(batch=2)
    _, cache = ti.run_with_cache(model, x, metric=_metric(6, 1))
    # z = pattern @ v per head; v recovered from the cache: z for a one-hot pattern is v itself
    block = model.blocks[1]
    ln = model.blocks[1].ln1(cache["blocks.1.hook_resid_pre"])
    v = block.attn.v_proj(ln).reshape(2, T, 4, 4).transpose(0, 2, 1, 3)
    d_z = cache["blocks.1.attn.hook_z_grad"].transpose(0, 2, 1, 3)
    np.testing.assert_allclose(
        cache["blocks.1.attn.hook_pattern_grad"], d_z @ v.swapaxes(-1, -2), atol=1e-12
    )
    np.testing.assert_allclose(
        np.einsum("bhqk,bhkd->bhqd", cache["blocks.1.attn.hook_pattern"], v),
        cache["blocks.1.attn.hook_z"].transpose(0, 2, 1, 3),
        atol=1e-12,
    )


def test_run_with_cache_leaves_the_models_gradients_and_mode_alone():
    model, x = make_model(dtype=np.float64), tokens()
    model.train()
    for p in model.parameters():
        p.grad[...] = 0.5
    ti.run_with_cache(model, x, metric=_metric(2, 3))
    assert all(np.all(p.grad == 0.5) for p in model.parameters())
    assert model.training and model.blocks[0].attn.training


def test_bad_names_are_refused_with_the_valid_ones():
    model, attn_only, x = make_model(), make_model(attn_only=True), tokens()
    with pytest.raises(ValueError, match="Did you mean 'blocks.0.hook_resid_pre'"):
        ti.run_with_hooks(model, x, [("blocks.0.resid_pre", lambda a, n: a)])
    with pytest.raises(ValueError, match="attention-only"):
        ti.run_with_hooks(attn_only, x, [("blocks.0.hook_mlp_out", lambda a, n: a)])
    with pytest.raises(ValueError, match="metric"):
        ti.run_with_hooks(model, x, [("blocks.0.hook_z_grad", lambda a, n: a)])
    with pytest.raises(ValueError, match="blocks.5"):
        ti.run_with_hooks(model, x, [("blocks.5.hook_resid_pre", lambda a, n: a)])
    with pytest.raises(TypeError, match="callable"):
        ti.run_with_hooks(model, x, [("hook_embed", 3)])


def test_bad_replacements_and_arguments_are_refused():
    model, x = make_model(), tokens()
    with pytest.raises(ValueError, match="shape"):
        ti.run_with_hooks(model, x, [("blocks.0.hook_attn_out", lambda a, n: a[:, :2])])
    with pytest.raises(ValueError, match="shape"):
        ti.run_with_hooks(model, x, [("blocks.0.attn.hook_pattern", lambda a, n: a[:, :1])])
    with pytest.raises(ValueError, match="heads"), ti.ablate_heads(model, [(2, 0)]):
        pass
    with pytest.raises(ValueError, match="how"), ti.ablate_heads(model, [(0, 0)], how="max"):
        pass
    with pytest.raises(ValueError, match="dlogits"):
        ti.run_with_cache(model, x, metric=lambda logits: (0.0, logits[:, 0]))
    with pytest.raises(ValueError, match=r"tokens\[None\]"):
        ti.run_with_cache(model, x[0])
    with pytest.raises(TypeError, match="DecoderLM"):
        ti.run_with_cache(tfscratch.EncoderClassifier(VOCAB, 2, 16, 4, 1), x)
    post = tfscratch.DecoderLM(VOCAB, 16, 4, 1, max_len=10, norm="post", seed=0)
    with pytest.raises(ValueError, match="pre-LN"):
        ti.run_with_cache(post, x)
    for module in model.modules():
        assert "forward" not in vars(module)


def test_reachable_from_the_package():
    assert tfscratch.inspect.run_with_cache is ti.run_with_cache


def _uniform_causal_pattern(batch, heads):
    """Each query attends equally to itself and every earlier position."""
    pattern = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    return np.broadcast_to(pattern, (batch, heads, T, T)).copy()


def test_a_replaced_pattern_is_what_multiplies_the_values():
    model, x = make_model(dtype=np.float64), tokens()
    pattern = _uniform_causal_pattern(3, 4)
    seen = {}
    hooks = [
        ("blocks.1.hook_resid_pre", lambda a, n: seen.setdefault(n, a)),
        ("blocks.1.attn.hook_pattern", lambda a, n: pattern),
        ("blocks.1.attn.hook_z", lambda a, n: seen.setdefault(n, a)),
    ]
    patched = ti.run_with_hooks(model, x, hooks)
    attn = model.blocks[1].attn
    v = attn.v_proj(model.blocks[1].ln1(seen["blocks.1.hook_resid_pre"]))
    v = v.reshape(3, T, 4, 4).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(
        seen["blocks.1.attn.hook_z"], (pattern @ v).transpose(0, 2, 1, 3), atol=1e-12
    )
    np.testing.assert_array_equal(patched[:, 0], model(x)[:, 0])  # query 0 sees only itself
    assert np.abs(patched - model(x)).max() > 1e-7  # small weights: a small change


def test_the_backward_runs_through_a_replaced_pattern():
    """Pattern patching as in training: the model's own forward and backward with a pattern
    replaced, against central finite differences of every parameter."""
    model, x = make_model(dtype=np.float64), tokens(batch=2)
    metric = _metric(5, 4)
    pattern = _uniform_causal_pattern(2, 4)
    seen = {}
    with ti.hooks(
        model,
        fwd_hooks=[("blocks.0.attn.hook_pattern", lambda a, n: pattern)],
        bwd_hooks=[("blocks.0.attn.hook_pattern", lambda g, n: seen.setdefault(n, g))],
    ):
        model.zero_grad()
        with tfscratch.module.evaluating(model):
            model.backward(metric(model(x))[1])
        rng = np.random.default_rng(0)
        eps = 1e-6
        checks = [(name, p.data, p.grad) for name, p in model.named_parameters().items()]
        checks.append(("the pattern", pattern, seen["blocks.0.attn.hook_pattern"]))
        for name, values, grad in checks:
            for _ in range(2 if name != "the pattern" else 6):
                index = tuple(rng.integers(0, s) for s in values.shape)
                value, measured = values[index], []
                for delta in (eps, -eps):
                    values[index] = value + delta
                    measured.append(metric(model(x))[0])
                values[index] = value
                numeric = (measured[0] - measured[1]) / (2 * eps)
                np.testing.assert_allclose(
                    grad[index], numeric, rtol=1e-5, atol=1e-8, err_msg=f"{name}{index}"
                )
    # the replaced pattern does not depend on block 0's queries and keys
    assert np.all(model.blocks[0].attn.q_proj.weight.grad == 0)
    assert np.all(model.blocks[0].attn.k_proj.weight.grad == 0)
    assert all(not p.forward_hooks and not p.backward_hooks for p in ti.hook_points(model).values())


def test_run_with_cache_runs_the_models_own_forward():
    """A learner's patched forward is the one run (and cached)."""
    model, x = make_model(), tokens()
    original = model.forward
    model.forward = lambda tokens, **kw: original(tokens, **kw) * 2.0
    logits, cache = ti.run_with_cache(model, x)
    np.testing.assert_array_equal(logits, model(x))
    assert "ln_final.hook_normalized" in cache


def test_a_hook_may_edit_the_position_vectors_in_place():
    model, x = make_model(), tokens()

    def shift(position_vectors, _):
        # TransformerLens style: edit, then return it (a random direction: LayerNorm would
        # remove a constant shift)
        position_vectors[:, 3] += np.random.default_rng(2).normal(0, 1, position_vectors.shape[2])
        return position_vectors

    patched = ti.run_with_hooks(model, x, [("hook_pos_embed", shift)])
    np.testing.assert_array_equal(patched[:, :3], model(x)[:, :3])
    assert np.abs(patched[:, 3:] - model(x)[:, 3:]).max() > 1e-3
    np.testing.assert_array_equal(ti.run_with_cache(model, x)[0], model(x))  # table untouched
