"""tfscratch.timing: time a call, fit a log-log slope, measure how a cost scales."""

import numpy as np
import pytest

from tfscratch import timing
from tfscratch.timing import ScalingResult, fit_loglog, measure_scaling, time_call

pytestmark = pytest.mark.filterwarnings("error")


class FakeClock:
    """A perf_counter stand-in whose time only moves when the workload says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def fake_clock(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing, "perf_counter", clock)
    return clock


def test_fit_loglog_recovers_exponent_two_from_quadratic_data():
    sizes = np.array([8, 16, 32, 64, 128])
    assert fit_loglog(sizes, 3e-7 * sizes**2.0) == pytest.approx(2.0, abs=1e-12)


def test_fit_loglog_recovers_exponent_one_from_linear_data():
    sizes = np.array([10, 20, 40, 80])
    assert fit_loglog(sizes, 5e-4 * sizes) == pytest.approx(1.0, abs=1e-12)


def test_fit_loglog_last_ignores_overhead_dominated_small_sizes():
    sizes = np.array([1, 2, 4, 64, 128, 256])
    seconds = np.maximum(1000.0, sizes**2.0)  # a fixed 1000-unit overhead, then quadratic
    assert fit_loglog(sizes, seconds) < 1.5
    assert fit_loglog(sizes, seconds, last=3) == pytest.approx(2.0, abs=1e-12)


@pytest.mark.parametrize(
    "sizes, values, last",
    [
        ([1, 2, 3], [1.0, 2.0], None),  # length mismatch
        ([4], [1.0], None),  # one point has no slope
        ([1, 2, 4], [1.0, 0.0, 3.0], None),  # log(0)
        ([5, 5, 5], [1.0, 2.0, 3.0], None),  # no spread in size
        ([1, 2, 4], [1.0, 2.0, 4.0], 5),  # last > N
        ([1, 2, 4], [1.0, 2.0, 4.0], 1),  # last < 2
    ],
)
def test_fit_loglog_rejects_data_without_a_slope(sizes, values, last):
    with pytest.raises(ValueError):
        fit_loglog(sizes, values, last=last)


def test_time_call_calls_fn_warmup_plus_repeats_times():
    calls = []
    time_call(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6


def test_time_call_returns_positive_float_seconds():
    seconds = time_call(lambda: sum(range(1000)), repeats=3, warmup=0)
    assert isinstance(seconds, float)
    assert seconds > 0.0


def test_time_call_returns_the_median_and_does_not_time_warmup(fake_clock):
    durations = iter([100.0, 3.0, 1.0, 2.0])  # a slow first (warm-up) call, then 3, 1, 2
    assert time_call(lambda: fake_clock.advance(next(durations)), repeats=3, warmup=1) == 2.0


@pytest.mark.parametrize(
    "repeats, warmup, error", [(0, 1, ValueError), (2, -1, ValueError), (1.5, 0, TypeError)]
)
def test_time_call_rejects_bad_counts(repeats, warmup, error):
    with pytest.raises(error):
        time_call(lambda: None, repeats=repeats, warmup=warmup)


def test_measure_scaling_times_only_the_returned_callable(fake_clock):
    def quadratic_workload(n):
        fake_clock.advance(1000.0)  # expensive set-up, which must not be timed
        return lambda: fake_clock.advance(1e-6 * n**2)

    result = measure_scaling(quadratic_workload, [16, 32, 64, 128], repeats=2, warmup=1)
    assert isinstance(result, ScalingResult)
    np.testing.assert_array_equal(result.sizes, [16, 32, 64, 128])
    np.testing.assert_allclose(result.seconds, 1e-6 * np.array([16, 32, 64, 128]) ** 2.0)
    assert result.exponent == pytest.approx(2.0, abs=1e-9)


def test_measure_scaling_fit_last_fits_only_the_largest_sizes(fake_clock):
    def overhead_then_linear(n):
        return lambda: fake_clock.advance(max(1.0, float(n)))  # 1 s overhead floor

    sizes = [1, 2, 4, 100, 200, 400]
    result = measure_scaling(overhead_then_linear, sizes, repeats=1, warmup=0, fit_last=3)
    assert result.fit_last == 3
    assert result.exponent == pytest.approx(1.0, abs=1e-9)
    assert result.exponent == fit_loglog(result.sizes, result.seconds, last=3)


def test_measure_scaling_requires_increasing_sizes():
    with pytest.raises(ValueError, match="increasing"):
        measure_scaling(lambda n: lambda: None, [64, 32, 128])
