"""The statistics of a summary: Student-t intervals, paired t-tests and Holm's correction.

    lo, hi = t_interval([0.84, 0.85, 0.83])              # 95% CI of the mean
    d = paired([0.84, 0.85, 0.83], [0.80, 0.83, 0.79])    # mean difference a - b, its CI, p
    adjusted = holm([0.01, 0.04, 0.03])                   # family-wise error control

The t distribution comes from scipy.special (stdtr/stdtrit: the CDF and its inverse), not scipy.stats,
which takes a second to import; the tests compare every number with scipy.stats and textbook values.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

LEVEL = 0.95  # confidence level of every interval, and 1 - alpha of every test


def t_quantile(q: float, df: int) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def t_interval(values: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """The `level` confidence interval of the mean of `values` (Student t, n - 1 degrees of freedom);
    None for fewer than two values, where it is undefined."""
    n = len(values)
    if n < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


@dataclass
class Paired:
    """The per-seed differences a - b of two cells."""
    n: int  # pairs (seeds present in both)
    mean: float  # mean difference
    ci: tuple[float, float] | None  # its t-interval
    p: float | None  # two-sided paired t-test (None below two pairs)
    seeds: list[int]


def paired(a: list[float], b: list[float], seeds: list[int] | None = None, level: float = LEVEL) -> Paired:
    """Paired comparison of equally long, aligned `a` and `b`. A zero-variance difference gives p = 0
    when its mean is not zero (every seed agrees), p = 1 when it is."""
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = statistics.fmean(d) if d else math.nan
    p = None
    if n >= 2:
        sd = statistics.stdev(d)
        if sd == 0:
            p = 1.0 if mean == 0 else 0.0
        else:
            from scipy.special import stdtr

            t = mean / (sd / math.sqrt(n))
            p = float(2 * stdtr(n - 1, -abs(t)))
    return Paired(n, mean, t_interval(d, level), p, list(seeds or range(n)))


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order; None entries are kept as
    None and do not count in the family."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))  # monotone: never below a smaller p's
        out[i] = running
    return out
