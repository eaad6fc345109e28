r"""Wall-clock timing and the log-log fit behind every "this costs O(T^2)" plot.

If a cost grows like :math:`t = c\,n^p`, then :math:`\log t = \log c + p \log n`: a straight
line on log-log axes whose slope is the exponent :math:`p`. :func:`fit_loglog` measures that
slope, :func:`time_call` times one callable, and :func:`measure_scaling` times a family of
them, one per size. Notebook 04 and ``benchmarks/`` share this module, so the course and the
benchmarks report the same number in the same way.

Only the standard library and NumPy are imported (no matplotlib): the plot lives in
:func:`tfscratch.viz.scaling_plot`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter

import numpy as np

__all__ = ["ScalingResult", "fit_loglog", "measure_scaling", "time_call"]

from .checks import check_int


def time_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of one call of ``fn()``.

    ``fn`` is called ``warmup + repeats`` times in total. The warm-up calls are not timed:
    the first call pays one-off costs (allocating buffers, filling caches) that a steady
    state does not. The median, not the mean, is returned because a single call interrupted
    by the operating system would drag a mean far up but leaves the median alone.

    Args:
        fn: a zero-argument callable; its return value is ignored.
        repeats: number of timed calls (>= 1).
        warmup: number of untimed calls made first (>= 0).

    Returns:
        float, seconds (``time.perf_counter`` resolution).
    """
    repeats = check_int(repeats, "repeats", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    if not callable(fn):
        raise TypeError(f"fn must be a zero-argument callable, got {type(fn).__name__}")
    for _ in range(warmup):
        fn()
    durations = []
    for _ in range(repeats):
        start = perf_counter()
        fn()
        durations.append(perf_counter() - start)
    return float(statistics.median(durations))


def fit_loglog(sizes, values, last: int | None = None) -> float:
    r"""Least-squares slope of :math:`\log(\text{values})` against :math:`\log(\text{sizes})`.

    For exact data :math:`v = c\,n^p` this returns ``p``. Small sizes are usually dominated by
    fixed overhead (Python calls, allocation), which flattens the curve, so ``last=k`` fits
    only the ``k`` largest sizes (the last ``k`` entries, sizes being given in increasing
    order) where the asymptotic cost shows.

    Args:
        sizes: ``(N,)`` positive numbers, e.g. sequence lengths.
        values: ``(N,)`` positive numbers, e.g. seconds.
        last: fit only the last ``last`` points (>= 2); ``None`` fits all ``N``.

    Returns:
        float, the fitted exponent.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if sizes.ndim != 1 or values.shape != sizes.shape:
        raise ValueError(
            f"sizes and values must be 1-D of the same length, got shapes {sizes.shape} "
            f"and {values.shape}"
        )
    if last is not None:
        last = check_int(last, "last", minimum=2)
        if last > sizes.size:
            raise ValueError(f"last={last} but only {sizes.size} points were given")
        sizes, values = sizes[-last:], values[-last:]
    if sizes.size < 2:
        raise ValueError(f"a slope needs at least 2 points, got {sizes.size}")
    if not (np.all(np.isfinite(sizes)) and np.all(np.isfinite(values))):
        raise ValueError("sizes and values must be finite (no NaN or inf)")
    if np.any(sizes <= 0) or np.any(values <= 0):
        raise ValueError(
            "sizes and values must all be > 0 to take logarithms; a time of 0 s means the "
            "call was too fast for the clock: time a bigger workload or more repeats"
        )
    if np.unique(sizes).size < 2:
        raise ValueError("sizes are all equal: a slope needs at least two different sizes")
    log_sizes, log_values = np.log(sizes), np.log(values)
    # The closed-form least-squares slope: cov(x, y) / var(x), on centred logs.
    centred_sizes = log_sizes - log_sizes.mean()
    slope = (centred_sizes @ (log_values - log_values.mean())) / (centred_sizes @ centred_sizes)
    return float(slope)


@dataclass(frozen=True)
class ScalingResult:
    """What :func:`measure_scaling` measured.

    Attributes:
        sizes: ``(N,)`` the sizes, as given.
        seconds: ``(N,)`` float64, median seconds of one call at each size.
        exponent: the log-log slope, ``fit_loglog(sizes, seconds, last=fit_last)``.
        fit_last: how many of the largest sizes the exponent was fitted on (``None`` = all).
    """

    sizes: np.ndarray
    seconds: np.ndarray
    exponent: float
    fit_last: int | None = None


def measure_scaling(
    fn_for_size: Callable[[int], Callable[[], object]],
    sizes: Sequence[int],
    repeats: int = 5,
    warmup: int = 1,
    fit_last: int | None = None,
) -> ScalingResult:
    """Time one workload at several sizes and fit how its cost grows.

    ``fn_for_size(n)`` does the set-up for size ``n`` (build inputs, a model, ...) and returns
    a zero-argument callable that does the work; only that callable is timed, so set-up cost
    does not leak into the exponent.

    Example::

        def attention_at(T):
            x = rng.normal(size=(1, T, 64))
            return lambda: attn(x)

        result = measure_scaling(attention_at, [64, 128, 256, 512], fit_last=3)
        result.exponent  # close to 2 for self-attention

    Args:
        fn_for_size: ``n -> (() -> anything)``.
        sizes: ``(N,)`` increasing positive sizes.
        repeats, warmup: passed to :func:`time_call` for every size.
        fit_last: fit the exponent on the ``fit_last`` largest sizes only; ``None`` = all.

    Returns:
        :class:`ScalingResult` with ``sizes``, ``seconds`` and ``exponent``.
    """
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or sizes.size < 2:
        raise ValueError(f"sizes must be a 1-D list of at least 2 sizes, got shape {sizes.shape}")
    if np.any(np.diff(sizes) <= 0):
        raise ValueError(f"sizes must be strictly increasing, got {sizes.tolist()}")
    seconds = np.array(
        [time_call(fn_for_size(size.item()), repeats=repeats, warmup=warmup) for size in sizes],
        dtype=np.float64,
    )
    exponent = fit_loglog(sizes, seconds, last=fit_last)
    return ScalingResult(sizes=sizes, seconds=seconds, exponent=exponent, fit_last=fit_last)
