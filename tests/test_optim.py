"""Specifications of tfscratch.optim: PyTorch's update equations, in place, steered by ``lr``."""

import math

import numpy as np
import pytest

from tfscratch.module import Module, Parameter
from tfscratch.optim import (
    SGD,
    Adam,
    AdamW,
    WarmupCosineSchedule,
    clip_grad_norm,
    warmup_cosine,
)

TARGET = np.array([1.0, -2.0, 0.5, 3.0])


def quadratic_grad(p):
    """Gradient of a loss whose gradient depends on p, so decay and momentum paths matter."""
    return 2.0 * (p - TARGET) + 0.3 * p**3


def make_param(values, dtype=np.float64):
    return Parameter(np.array(values, dtype=dtype))


def reference_adam(p, n_steps, lr, beta1, beta2, eps, weight_decay, decoupled):
    """The algorithm as printed in PyTorch's Adam/AdamW docs, written the textbook way."""
    p = p.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t in range(1, n_steps + 1):
        g = quadratic_grad(p)
        if decoupled:
            p = p - lr * weight_decay * p
        else:
            g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


def run(optimizer, param, n_steps):
    for _ in range(n_steps):
        optimizer.zero_grad()
        param.grad += quadratic_grad(param.data)
        optimizer.step()
    return param.data


START = [0.3, 1.5, -0.7, 2.0]


# --- SGD -------------------------------------------------------------------------------------
def test_sgd_one_step_is_p_minus_lr_times_grad():
    p = make_param([1.0, 2.0])
    p.grad[:] = [0.5, -1.0]
    SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.data, [1.0 - 0.05, 2.0 + 0.1], rtol=0, atol=1e-15)


def test_sgd_momentum_three_steps_match_hand_rolled_reference():
    lr, momentum, weight_decay = 0.05, 0.9, 0.01
    p = make_param(START)
    run(SGD([p], lr=lr, momentum=momentum, weight_decay=weight_decay), p, 3)

    expected, buf = np.array(START), np.zeros(4)
    for _ in range(3):
        buf = momentum * buf + quadratic_grad(expected) + weight_decay * expected
        expected = expected - lr * buf
    np.testing.assert_allclose(p.data, expected, rtol=1e-13)


def test_sgd_weight_decay_leaves_grad_untouched():
    p = make_param([1.0, 2.0])
    p.grad[:] = [0.5, -1.0]
    SGD([p], lr=0.1, weight_decay=0.5).step()
    np.testing.assert_array_equal(p.grad, [0.5, -1.0])


# --- Adam and AdamW --------------------------------------------------------------------------
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adam_matches_reference_over_five_steps(weight_decay):
    hyper = {"lr": 0.01, "beta1": 0.8, "beta2": 0.95, "eps": 1e-8, "weight_decay": weight_decay}
    p = make_param(START)
    optimizer = Adam([p], lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=weight_decay)
    run(optimizer, p, 5)
    expected = reference_adam(np.array(START), 5, decoupled=False, **hyper)
    np.testing.assert_allclose(p.data, expected, rtol=1e-12, atol=1e-14)


def test_adamw_matches_reference_with_decoupled_decay():
    hyper = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.5}
    p = make_param(START)
    run(AdamW([p], lr=0.01, weight_decay=0.5), p, 5)
    expected = reference_adam(np.array(START), 5, decoupled=True, **hyper)
    np.testing.assert_allclose(p.data, expected, rtol=1e-12, atol=1e-14)


def test_adamw_decoupled_decay_differs_from_adam_l2():
    p_adam, p_adamw = make_param(START), make_param(START)
    run(Adam([p_adam], lr=0.01, weight_decay=0.5), p_adam, 5)
    run(AdamW([p_adamw], lr=0.01, weight_decay=0.5), p_adamw, 5)
    assert np.abs(p_adam.data - p_adamw.data).max() > 1e-4


def test_defaults_are_pytorchs():
    p = make_param(START)
    adam, adamw = Adam([p]), AdamW([p])
    assert (adam.lr, adam.betas, adam.eps, adam.weight_decay) == (1e-3, (0.9, 0.999), 1e-8, 0.0)
    assert (adamw.lr, adamw.betas, adamw.eps, adamw.weight_decay) == (
        1e-3,
        (0.9, 0.999),
        1e-8,
        0.01,
    )


def test_adam_minimises_a_quadratic():
    x = make_param(np.zeros(5))
    optimizer = Adam([x], lr=0.1)
    for _ in range(500):
        optimizer.zero_grad()
        x.grad += 2.0 * (x.data - 3.0)  # f(x) = ||x - 3||^2
        optimizer.step()
    np.testing.assert_allclose(x.data, 3.0, atol=1e-3)


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda params: SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1),
        lambda params: Adam(params, lr=0.1, weight_decay=0.1),
        lambda params: AdamW(params, lr=0.1),
    ],
    ids=["sgd", "adam", "adamw"],
)
def test_step_updates_in_place_and_keeps_float32(make_optimizer):
    p = make_param(START, dtype=np.float32)
    data = p.data
    optimizer = make_optimizer([p])
    p.grad[:] = 1.0
    optimizer.step()
    assert p.data is data
    assert p.data.dtype == np.float32
    assert not np.array_equal(p.data, np.array(START, dtype=np.float32))
    for buffer in optimizer.buffers.values():
        assert all(array.dtype == np.float32 for array in buffer.values())


def test_lr_is_writable_and_read_by_step():
    p = make_param(START)
    optimizer = Adam([p], lr=0.1)
    optimizer.lr = 0.0
    p.grad[:] = 1.0
    optimizer.step()
    np.testing.assert_array_equal(p.data, START)


def test_zero_grad_clears_every_grad():
    params = [make_param(START), make_param([[1.0, 2.0]])]
    for p in params:
        p.grad[...] = 7.0
    SGD(params, lr=0.1).zero_grad()
    assert all(not p.grad.any() for p in params)


def test_accepts_named_parameters_dict_and_skips_duplicates():
    shared = make_param(START)
    optimizer = SGD({"a": shared, "b": make_param([1.0])}, lr=0.1)
    assert list(optimizer.named_params) == ["a", "b"]
    assert len(SGD([shared, shared], lr=0.1).params) == 1  # a tied weight is updated once


def test_state_dict_round_trip_resumes_identically():
    p1, p2 = make_param(START), make_param(START)
    first = Adam({"w": p1}, lr=0.01)
    run(first, p1, 3)
    second = Adam({"w": p2}, lr=0.5)
    p2.data[...] = p1.data
    second.load_state_dict(first.state_dict())
    assert (second.lr, second.t) == (0.01, 3)
    run(first, p1, 2)
    run(second, p2, 2)
    np.testing.assert_array_equal(p1.data, p2.data)


def test_load_state_dict_lists_mismatches():
    optimizer = Adam({"w": make_param(START)})
    with pytest.raises(ValueError, match=r"missing.*v\.w.*mis-shaped.*m\.w"):
        optimizer.load_state_dict({"lr": 0.1, "t": 1, "m.w": np.zeros(3)})


# --- arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda p: SGD(p, lr=-0.1), "lr"),
        (lambda p: SGD(p, lr=0.1, momentum=-0.5), "momentum"),
        (lambda p: SGD(p, lr=0.1, weight_decay=-1.0), "weight_decay"),
        (lambda p: Adam(p, lr=float("nan")), "lr"),
        (lambda p: Adam(p, betas=(1.0, 0.999)), "betas"),
        (lambda p: Adam(p, betas=(0.9, -0.1)), "betas"),
        (lambda p: Adam(p, eps=0.0), "eps"),
        (lambda p: AdamW(p, weight_decay=-0.01), "weight_decay"),
    ],
    ids=["sgd-lr", "momentum", "sgd-wd", "adam-lr", "beta1", "beta2", "eps", "adamw-wd"],
)
def test_bad_hyper_parameter_raises_value_error_naming_it(make, name):
    with pytest.raises(ValueError, match=name):
        make([make_param(START)])


def test_setting_negative_lr_raises():
    optimizer = SGD([make_param(START)], lr=0.1)
    with pytest.raises(ValueError, match="lr=-1"):
        optimizer.lr = -1


def test_empty_params_raise_value_error():
    with pytest.raises(ValueError, match="params is empty"):
        Adam([])


@pytest.mark.parametrize(
    "params",
    [
        Module(),
        make_param(START),
        np.zeros(3),
        [np.zeros(3)],
        3.0,
    ],
    ids=["module", "single-parameter", "array", "list-of-arrays", "float"],
)
def test_params_of_wrong_type_raise_type_error(params):
    with pytest.raises(TypeError, match="params"):
        SGD(params, lr=0.1)


# --- clip_grad_norm -----------------------------------------------------------------------------
def test_clip_grad_norm_returns_pre_clip_norm_and_scales_to_max_norm():
    params = [make_param(np.zeros(2), np.float32), make_param(np.zeros((1, 2)), np.float32)]
    params[0].grad[:] = [3.0, 4.0]
    params[1].grad[:] = [[12.0, 0.0]]
    norm = clip_grad_norm(params, max_norm=1.0)
    assert norm == pytest.approx(13.0, rel=1e-7)
    clipped = math.sqrt(sum(float(np.sum(p.grad.astype(np.float64) ** 2)) for p in params))
    assert clipped == pytest.approx(1.0, rel=1e-5)
    assert params[0].grad.dtype == np.float32


def test_clip_grad_norm_leaves_small_gradients_alone():
    p = make_param(np.zeros(2))
    p.grad[:] = [0.3, 0.4]
    assert clip_grad_norm({"p": p}, max_norm=1.0) == pytest.approx(0.5)
    np.testing.assert_array_equal(p.grad, [0.3, 0.4])


def test_clip_grad_norm_reports_non_finite_norm_without_scaling():
    p = make_param(np.zeros(2))
    p.grad[:] = [np.inf, 1.0]
    assert clip_grad_norm([p], max_norm=1.0) == math.inf
    np.testing.assert_array_equal(p.grad, [np.inf, 1.0])


def test_clip_grad_norm_rejects_non_positive_max_norm():
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm([make_param(START)], max_norm=0.0)


# --- warm-up + cosine schedule ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (0, 0.1),  # base_lr / warmup_steps: warm-up never starts at zero
        (4, 0.5),  # linear: base_lr * (step + 1) / warmup_steps
        (9, 1.0),  # last warm-up step reaches base_lr
        (10, 1.0),  # the cosine starts at base_lr
        (60, 0.1 + 0.9 / 2),  # halfway through the cosine: midway between base_lr and min_lr
        (110, 0.1),  # total_steps: min_lr
        (500, 0.1),  # beyond: stays at min_lr
    ],
)
def test_warmup_cosine_values(step, expected):
    lr = warmup_cosine(step, base_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.1)
    assert lr == pytest.approx(expected, abs=1e-12)


def test_warmup_cosine_without_warmup_starts_at_base_lr():
    assert warmup_cosine(0, base_lr=0.5, warmup_steps=0, total_steps=10) == 0.5


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"step": -1}, "step"),
        ({"base_lr": -1.0}, "base_lr"),
        ({"warmup_steps": -2}, "warmup_steps"),
        ({"total_steps": 5}, "total_steps"),
        ({"min_lr": 2.0}, "min_lr"),
    ],
)
def test_warmup_cosine_bad_argument_raises_naming_it(kwargs, name):
    args = {
        "step": 0,
        "base_lr": 1.0,
        "warmup_steps": 10,
        "total_steps": 100,
        "min_lr": 0.0,
    } | kwargs
    with pytest.raises(ValueError, match=name):
        warmup_cosine(**args)


def test_schedule_sets_optimizer_lr_for_each_step():
    p = make_param(START)
    optimizer = AdamW([p], lr=2.0)
    schedule = WarmupCosineSchedule(optimizer, warmup_steps=4, total_steps=20, min_lr=0.2)
    seen = [optimizer.lr]
    for _ in range(24):
        optimizer.step()
        schedule.step()
        seen.append(optimizer.lr)
    expected = [warmup_cosine(s, 2.0, 4, 20, 0.2) for s in range(25)]
    np.testing.assert_allclose(seen, expected, rtol=0, atol=1e-15)
    assert schedule.lr == optimizer.lr == pytest.approx(0.2)


def test_schedule_validates_its_arguments_at_construction():
    optimizer = SGD([make_param(START)], lr=1.0)
    with pytest.raises(ValueError, match="total_steps"):
        WarmupCosineSchedule(optimizer, warmup_steps=10, total_steps=5)
