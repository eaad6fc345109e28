"""tfscratch.stats against hand computations: the numbers a learner reports about seeds."""

import math

import numpy as np
import pytest

from tests.conftest import expect
from tfscratch import stats

# Student's t quantiles from printed tables (two-sided 95% and 99%).
T_TABLE = [
    (0.975, 1, 12.706),
    (0.975, 2, 4.303),
    (0.975, 4, 2.776),
    (0.975, 19, 2.093),
    (0.995, 9, 3.250),
    (0.95, 30, 1.697),
]


@pytest.mark.parametrize("p, df, expected", T_TABLE)
def test_t_quantile_matches_the_printed_table(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=6e-4)


def test_t_quantile_is_symmetric_and_tends_to_the_normal():
    assert stats.t_quantile(0.025, 5) == pytest.approx(-stats.t_quantile(0.975, 5))
    assert stats.t_quantile(0.975, 100_000) == pytest.approx(1.95996, abs=1e-3)


def test_summarize_by_hand():
    values = [1.0, 2.0, 4.0]
    summary = stats.summarize(values)
    sd = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    assert summary.mean == pytest.approx(7 / 3)
    assert summary.sd == pytest.approx(sd)
    assert summary.n == 3
    assert summary.standard_error == pytest.approx(sd / math.sqrt(3))
    half = 4.302653 * sd / math.sqrt(3)
    assert summary.interval == pytest.approx((7 / 3 - half, 7 / 3 + half), abs=1e-5)
    assert summary.confidence == 0.95


def test_summary_reads_mean_plus_minus_se():
    values = 0.9889 + 0.0016 * math.sqrt(20) * np.array([1.0, -1.0] * 10) * math.sqrt(19 / 20)
    text = str(stats.summarize(values))
    assert text.startswith("0.9889 ± 0.0016 (SE, n=20)")
    assert "95% interval [" in text


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    rng = np.random.default_rng(0)
    values = rng.normal(3.0, 1.0, size=30)
    low, high = stats.bootstrap_interval(values, seed=1)
    assert (low, high) == stats.bootstrap_interval(values, seed=1)
    assert low < values.mean() < high
    # For 30 normal values the bootstrap and t intervals nearly agree.
    t_low, t_high = stats.summarize(values).interval
    assert abs(low - t_low) < 0.1 and abs(high - t_high) < 0.1


def test_bootstrap_interval_by_hand_for_two_values():
    # Two values: each resample's mean is 0 (both picks 0), 0.5 or 1: the 2.5% and 97.5%
    # quantiles of those means are 0 and 1.
    assert stats.bootstrap_interval([0.0, 1.0], seed=0) == (0.0, 1.0)


def test_paired_difference_cancels_the_seed_luck():
    seed_luck = np.array([0.5, -0.3, 0.9, -0.8, 0.1])
    a = 2.0 + seed_luck
    b = 2.1 + seed_luck + np.array([0.01, -0.01, 0.0, 0.02, -0.02])
    paired = stats.paired_difference(a, b)
    assert paired.mean == pytest.approx(-0.1)
    assert paired.interval[1] < 0  # reliably lower, though the separate intervals overlap
    low_a, high_a = stats.summarize(a).interval
    low_b, high_b = stats.summarize(b).interval
    assert low_b < high_a and low_a < high_b


def test_summarize_with_the_bootstrap():
    values = [1.0, 2.0, 3.0, 4.0]
    summary = stats.summarize(values, method="bootstrap", seed=3)
    assert summary.interval == stats.bootstrap_interval(values, seed=3)


@pytest.mark.parametrize(
    "call, error, facts",
    [
        (lambda: stats.summarize([1.0]), ValueError, ["values", "at least two"]),
        (lambda: stats.summarize([1.0, np.nan]), ValueError, ["values", "NaN"]),
        (lambda: stats.summarize([[1.0, 2.0]]), ValueError, ["values", "1-D", "(1, 2)"]),
        (lambda: stats.summarize(["a", "b"]), TypeError, ["values", "numbers"]),
        (lambda: stats.summarize([1.0, 2.0], confidence=1.5), ValueError, ["confidence", "1.5"]),
        (lambda: stats.summarize([1.0, 2.0], method="z"), ValueError, ["method", "'z'"]),
        (
            lambda: stats.paired_difference([1.0, 2.0], [1.0, 2.0, 3.0]),
            ValueError,
            ["a has 2", "b has 3", "same seed order"],
        ),
        (
            lambda: stats.bootstrap_interval([1.0, 2.0], n_resamples=5),
            ValueError,
            ["n_resamples=5", "100"],
        ),
    ],
)
def test_bad_input_is_refused_with_a_sentence(call, error, facts):
    with pytest.raises(error, match=expect(*facts)):
        call()
