"""The statistics of a summary: Student-t intervals, paired t-tests and Holm's correction, and the tests
of a declared claim (one-sided t, TOST, the exact sign-flip test, a bootstrap interval).

    lo, hi = t_interval([0.84, 0.85, 0.83])              # 95% CI of the mean
    d = paired([0.84, 0.85, 0.83], [0.80, 0.83, 0.79])    # mean difference a - b, its CI, p
    adjusted = holm([0.01, 0.04, 0.03])                   # family-wise error control
    p = t_test(diffs, "greater", margin=0.0)              # H1: mean > margin (paired: diffs = a - b)
    p = t_test(diffs, "equivalent", margin=0.01)          # TOST, H1: |mean| < margin
    p = sign_flip(diffs, "greater")                       # the same hypothesis, exact, no normality

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
    """Paired comparison of equally long, aligned `a` and `b`: the two-sided paired t-test. A zero-variance
    difference has no t statistic: the exact two-sided sign-flip p answers (2 x 2^-n when every seed agrees
    on a nonzero difference, 1 when it is zero), as the claims' t_test does, never p = 0."""
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = statistics.fmean(d) if d else math.nan
    p = None
    if n >= 2:
        sd = statistics.stdev(d)
        if sd == 0:
            p = 1.0 if mean == 0 else min(1.0, 2 * sign_flip(d, "greater" if mean > 0 else "less"))
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


EXPECT = ("greater", "less", "equivalent")


def _t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


def t_test(d: list[float], expect: str, margin: float = 0.0) -> float | None:
    """The one-sample t-test of the differences `d` (a - b, paired) for the alternative `expect`:
    greater: mean > margin; less: mean < margin; equivalent: -margin < mean < margin, by two one-sided tests
    (TOST, Schuirmann 1987: the larger of the two p-values). None below two values. With zero variance
    (every pair the same difference) t is not defined, and the exact sign-flip p answers instead."""
    n = len(d)
    if n < 2:
        return None
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    if sd == 0:  # t is infinite or undefined: the exact test of the same hypothesis (p >= 2^-n), not p = 0
        return sign_flip(d, expect, margin)

    def above(m: float) -> float:  # p of H0: mean <= m against H1: mean > m
        return _t_sf((mean - m) / (sd / math.sqrt(n)), n - 1)

    def below(m: float) -> float:  # p of H0: mean >= m against H1: mean < m
        return _t_sf(-(mean - m) / (sd / math.sqrt(n)), n - 1)

    if expect == "greater":
        return above(margin)
    if expect == "less":
        return below(margin)
    if expect == "equivalent":
        return max(above(-margin), below(margin))
    raise ValueError(f"expect must be one of {EXPECT}, not {expect!r}")


def opposite(expect: str, margin: float) -> list[tuple[str, float]]:
    """The alternatives that would refute `expect`: greater than the margin -> less than it (and the other
    way); equivalent within +-margin -> greater than +margin, or less than -margin."""
    if expect == "equivalent":
        return [("greater", margin), ("less", -margin)]
    return [("less" if expect == "greater" else "greater", margin)]


EXACT_LIMIT = 20  # up to 2^20 sign patterns are enumerated; beyond, a seeded sample of them


def sign_flip(d: list[float], expect: str, margin: float = 0.0, draws: int = 200_000) -> float | None:
    """The sign-flip (randomization) test of the same hypothesis as `t_test`, exact for up to EXACT_LIMIT
    values: under H0 the differences from the margin are symmetric about 0, so each of the 2^n sign
    patterns is equally likely; p is the share of patterns whose mean is at least as extreme as the
    observed one (the observed pattern counts, so p >= 2^-n). For `equivalent`, the larger of the two
    one-sided p-values, as in TOST. None for no values."""
    import numpy as np

    n = len(d)
    if n == 0:
        return None
    if expect == "equivalent":
        return max(sign_flip(d, "greater", -margin, draws), sign_flip(d, "less", margin, draws))
    if expect not in ("greater", "less"):
        raise ValueError(f"expect must be one of {EXPECT}, not {expect!r}")
    x = np.asarray(d, dtype=np.float64) - margin
    if expect == "less":
        x = -x
    observed = x.sum()
    tol = 1e-12 * max(1.0, abs(observed))
    if n <= EXACT_LIMIT:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # every pattern, once
        return float(np.mean(signs @ x >= observed - tol))
    signs = np.random.default_rng(0).choice([-1, 1], size=(draws, n))  # the observed pattern counts once
    return float((np.sum(signs @ x >= observed - tol) + 1) / (draws + 1))


def bootstrap_interval(d: list[float], level: float = LEVEL, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of `d` (Efron 1979): the (1 - level)/2 and
    (1 + level)/2 quantiles of the means of `resamples` resamples with replacement, from a fixed seed so
    a summary is reproducible. None below two values."""
    import numpy as np

    if len(d) < 2:
        return None
    x = np.asarray(d, dtype=np.float64)
    means = x[np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
