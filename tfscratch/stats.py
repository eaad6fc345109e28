"""Comparing trained models: the few numbers a learner reports about runs over seeds.

A trained model's loss or accuracy depends on its seed. One seed shows what *can* happen;
to say that one recipe is better than another, train each over several seeds and report

- the mean with its standard error, ``sd / sqrt(n)`` (:func:`summarize`);
- an interval for the mean (:func:`summarize` gives Student's t interval;
  :func:`bootstrap_interval` resamples the seeds instead);
- where the same seeds drive both recipes, the difference seed by seed
  (:func:`paired_difference`): the seed's own luck (its initialisation, its batches) cancels,
  so a paired interval is often far narrower than the two separate ones.

"Reliably better" means the interval of the difference excludes 0; "cannot be told apart"
is said with the interval shown, because a wide interval around 0 is no evidence of "equal".

NumPy only and seeded: the same values give the same intervals, run after run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .checks import check_choice, check_int, check_number, check_seed

__all__ = ["Summary", "bootstrap_interval", "paired_difference", "summarize", "t_quantile"]


@dataclass(frozen=True)
class Summary:
    """Mean, spread and an interval of a few values (one per seed).

    Attributes:
        mean: the sample mean.
        sd: the sample standard deviation (``n - 1`` in the denominator, as ``np.std(ddof=1)``).
        n: how many values.
        interval: ``(low, high)``, an interval for the mean at level ``confidence``.
        confidence: the interval's level, e.g. 0.95.
    """

    mean: float
    sd: float
    n: int
    interval: tuple[float, float]
    confidence: float

    @property
    def standard_error(self) -> float:
        """``sd / sqrt(n)``: how far the mean of ``n`` seeds typically lies from the mean of
        infinitely many."""
        return self.sd / math.sqrt(self.n)

    def __str__(self) -> str:
        digits = _decimals(self.standard_error)
        low, high = self.interval
        return (
            f"{self.mean:.{digits}f} ± {self.standard_error:.{digits}f} (SE, n={self.n}); "
            f"{self.confidence:.0%} interval [{low:.{digits}f}, {high:.{digits}f}]"
        )


def summarize(values, confidence: float = 0.95, method: str = "t", seed: int = 0) -> Summary:
    """Mean ± standard error of ``values``, with an interval for the mean.

    ``method="t"`` (the default) gives Student's t interval ``mean ± t(n-1) · SE``: exact when
    the values are normal, and honest for the handful of seeds a notebook can afford (with 3
    seeds, t = 4.30 at 95%, not 1.96). ``method="bootstrap"`` gives :func:`bootstrap_interval`.

    Args:
        values: at least two finite numbers (one per seed), any 1-D array-like.
        confidence: the interval's level, in (0, 1).
        method: ``"t"`` or ``"bootstrap"``.
        seed: the bootstrap's seed (used only with ``method="bootstrap"``).

    Returns:
        A :class:`Summary`; ``str(summary)`` reads ``0.9889 ± 0.0016 (SE, n=20); 95% ...``.
    """
    x = _values(values, "values")
    confidence = _confidence(confidence)
    check_choice(method, "method", ("t", "bootstrap"))
    n = x.size
    mean = float(x.mean())
    sd = float(x.std(ddof=1))
    if method == "bootstrap":
        interval = bootstrap_interval(x, confidence, seed=seed)
    else:
        half_width = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
        interval = (mean - half_width, mean + half_width)
    return Summary(mean, sd, n, interval, confidence)


def bootstrap_interval(
    values, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of ``values``.

    Draw ``n`` of the values with replacement, take the mean, repeat ``n_resamples`` times;
    the middle ``confidence`` of those means is the interval. It assumes nothing about the
    values' shape, but with few values it is too narrow (with 3 values only 10 different
    resamples exist): prefer :func:`summarize`'s t interval below about 10 seeds.

    Args:
        values: at least two finite numbers.
        confidence: the interval's level, in (0, 1).
        n_resamples: how many resamples (>= 100).
        seed: seed of the resampling (the interval is the same for the same seed).

    Returns:
        ``(low, high)``.
    """
    x = _values(values, "values")
    confidence = _confidence(confidence)
    n_resamples = check_int(n_resamples, "n_resamples", minimum=100)
    rng = np.random.default_rng(check_seed(seed))
    picks = rng.integers(0, x.size, size=(n_resamples, x.size))  # (n_resamples, n)
    means = x[picks].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def paired_difference(a, b, confidence: float = 0.95, seed: int = 0, method: str = "t") -> Summary:
    """The difference ``a - b`` seed by seed, summarised (mean ± SE and an interval).

    ``a[i]`` and ``b[i]`` must come from the same seed (same initialisation, same batches),
    so the seed's luck cancels in ``a[i] - b[i]``. The interval excludes 0 when the
    difference is reliable at that level.

    Args:
        a, b: the two recipes' results, same length (>= 2), in the same seed order.
        confidence: the interval's level, in (0, 1).
        seed: the bootstrap's seed (used only with ``method="bootstrap"``).
        method: ``"t"`` (Student's t interval, the default) or ``"bootstrap"``.

    Returns:
        A :class:`Summary` of the differences, with ``.interval``.
    """
    x = _values(a, "a")
    y = _values(b, "b")
    if x.shape != y.shape:
        raise ValueError(
            f"a has {x.size} values and b has {y.size}: a paired difference needs one value of "
            "each per seed, in the same seed order"
        )
    return summarize(x - y, confidence, method=method, seed=seed)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom.

    Computed from the density by numerical integration and bisection (NumPy only; accurate
    to about 1e-6, far finer than any interval a notebook prints).

    Args:
        p: a probability in (0, 1).
        df: degrees of freedom, >= 1.

    Returns:
        ``t`` with ``P(T <= t) = p``.
    """
    p = check_number(p, "p", low=0.0, low_inclusive=False, high=1.0, expected="0 < p < 1")
    df = check_int(df, "df", minimum=1)
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):  # bisection: 60 halvings pin t far below print precision
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0: 1/2 plus the density integrated from 0 to t (Simpson's rule)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    x = np.linspace(0.0, t, 4001)
    density = np.exp(log_norm - (df + 1) / 2 * np.log1p(x**2 / df))
    h = x[1] - x[0]
    integral = (
        h / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())
    )
    return 0.5 + float(integral)


def _values(values, name: str) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a list or 1-D array of numbers, got {values!r:.80}"
        ) from None
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one number per seed), got shape {x.shape}")
    if x.size < 2:
        raise ValueError(
            f"{name} has {x.size} value(s): a spread needs at least two (one per seed)"
        )
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} holds NaN or infinity: {x.tolist()!r:.80}")
    return x


def _confidence(confidence) -> float:
    return check_number(
        confidence,
        "confidence",
        low=0.0,
        low_inclusive=False,
        high=1.0,
        expected="0 < confidence < 1",
    )


def _decimals(standard_error: float) -> int:
    """Decimals that show the standard error to two significant figures (4 when it is 0)."""
    if standard_error <= 0 or not math.isfinite(standard_error):
        return 4
    return max(0, 1 - math.floor(math.log10(standard_error)))
