"""The statistics of a summary: Student-t intervals, paired t-tests and Holm's correction, and the tests
of a declared claim (one-sided t, TOST, the exact sign-flip test, a bootstrap interval).

    lo, hi = t_interval([0.84, 0.85, 0.83])              # 95% CI of the mean
    d = paired([0.84, 0.85, 0.83], [0.80, 0.83, 0.79])    # mean difference a - b, its CI, p
    adjusted = holm([0.01, 0.04, 0.03])                   # family-wise error control
    p = t_test(diffs, "greater", margin=0.0)              # H1: mean > margin (paired: diffs = a - b)
    p = t_test(diffs, "equivalent", margin=0.01)          # TOST, H1: |mean| < margin
    p = sign_flip(diffs, "greater")                       # the same hypothesis, exact, no normality
    way, n = pairs_needed(diffs, "greater", 0.0, alpha=0.001)  # pairs to decide it, were d's mean and SD true

scipy.stats computes the distributions, the t-tests and the bootstrap (t, ttest_1samp, ttest_rel, bootstrap,
nct). Written here: what it has no function for (TOST as the larger of two one-sided tests, Holm's
adjustment, the exact answer where the differences have no variance) and the sign-flip test, which
enumerates the 2^n sign patterns once for the thousands of claims of the protocol's simulation.
scipy.stats is imported inside the functions that use it: it takes most of a second to import, and every
`normbench summarize`, its --help included, imports this module (summary.types does).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

LEVEL = 0.95  # confidence level of every interval, and 1 - alpha of every test


def _scipy_stats():
    """scipy.stats, imported on first use (see the module's docstring)."""
    import scipy.stats

    return scipy.stats


def t_quantile(q: float, df: int) -> float:
    """The `q` quantile of Student's t with `df` degrees of freedom."""
    return float(_scipy_stats().t.ppf(q, df))


def t_interval(values: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """The `level` confidence interval of the mean of `values` (Student t, n - 1 degrees of freedom);
    None for fewer than two values, where it is undefined."""
    n = len(values)
    if n < 2:
        return None
    mean, se = statistics.fmean(values), statistics.stdev(values) / math.sqrt(n)
    if se == 0:  # equal values: the interval is the point (scipy's t takes no scale 0, it answers NaN)
        return mean, mean
    lo, hi = _scipy_stats().t.interval(level, n - 1, loc=mean, scale=se)
    return float(lo), float(hi)


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
    if n >= 2 and any(x != d[0] for x in d):  # on equal differences ttest_rel would say p = 0
        p = float(_scipy_stats().ttest_rel(a, b).pvalue)
    elif n >= 2:
        p = 1.0 if mean == 0 else min(1.0, 2 * sign_flip(d, "greater" if mean > 0 else "less"))
    return Paired(n, mean, t_interval(d, level), p, list(seeds or range(n)))


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (Holm 1979) of one family, in the input order; None entries are
    kept as None and do not count in the family. `holm_adjust` on the p-values given."""
    tested = [i for i, p in enumerate(pvalues) if p is not None]
    out: list[float | None] = [None] * len(pvalues)
    if tested:
        for i, q in zip(tested, holm_adjust([pvalues[i] for i in tested])):
            out[i] = float(q)
    return out


def holm_adjust(p):
    """Holm's adjusted p-values over the last axis of an array (..., k), many families at once (every entry
    counts; give an untested hypothesis p = 1): the i-th smallest of k times k - i + 1, capped at 1, and
    never below a smaller p's. scipy has no Holm (statsmodels' multipletests is not a dependency)."""
    import numpy as np

    p = np.asarray(p, dtype=np.float64)
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    adjusted = np.maximum.accumulate(np.minimum(1.0, (k - np.arange(k)) * ranked), axis=-1)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


EXPECT = ("greater", "less", "equivalent")


def t_test(d: list[float], expect: str, margin: float = 0.0) -> float | None:
    """The one-sample t-test of the differences `d` (a - b, paired) for the alternative `expect`:
    greater: mean > margin; less: mean < margin; equivalent: -margin < mean < margin, by two one-sided tests
    (TOST, Schuirmann 1987: the larger of the two p-values). None below two values. With zero variance
    (every pair the same difference) t is not defined, and the exact sign-flip p answers instead."""
    if len(d) < 2:
        return None
    return float(t_pvalues(d, expect, margin))


def t_pvalues(d, expect: str, margin: float = 0.0):
    """`t_test` over the last axis of an array (..., n), n >= 2: one p per row, computed at once (the
    protocol's simulation feeds it thousands of synthetic claims; `t_test` is this on one row). A row with
    zero variance gets the exact sign-flip p of the same hypothesis, never p = 0."""
    import numpy as np

    x = np.asarray(d, dtype=np.float64)
    n = x.shape[-1]
    if n < 2:
        raise ValueError("a t-test needs two values or more")
    if expect == "equivalent":
        return np.maximum(t_pvalues(x, "greater", -margin), t_pvalues(x, "less", margin))
    if expect not in ("greater", "less"):
        raise ValueError(f"expect must be one of {EXPECT}, not {expect!r}")
    rows = x.reshape(-1, n)
    flat = np.all(rows == rows[:, :1], axis=-1)  # exactly: a float mean of equal values can leave sd at 1e-17
    p = np.empty(len(rows))
    # t is infinite or undefined on a flat row (scipy would say p = 0, and warn of precision loss): the exact
    # test of the same hypothesis answers there (p >= 2^-n)
    if flat.any():
        p[flat] = sign_flip_many(rows[flat], expect, margin)
    if not flat.all():
        p[~flat] = _scipy_stats().ttest_1samp(rows[~flat], margin, axis=-1, alternative=expect).pvalue
    return p.reshape(x.shape[:-1])[()]  # one row: a scalar, as scipy gives


POWER = 0.8  # the power pairs_needed asks for
PAIRS_LIMIT = 100_000  # ... and the most pairs it searches


def power(n: int, effect: float, alpha: float) -> float:
    """The power of the one-sided one-sample t-test at level `alpha` with `n` values, at a true mean `effect`
    standard deviations beyond the hypothesis' bound: P(T' > t_(1-alpha, n-1)), T' noncentral t with n - 1
    degrees of freedom and noncentrality effect * sqrt(n) (G*Power's "difference from constant")."""
    missed = float(_scipy_stats().nct.cdf(t_quantile(1.0 - alpha, n - 1), n - 1, effect * math.sqrt(n)))
    return 1.0 if math.isnan(missed) and effect > 0 else 1.0 - missed  # the nct's CDF is NaN far in the tail


def pairs_needed(d: list[float], expect: str, margin: float, alpha: float, target: float = POWER,
                 limit: int = PAIRS_LIMIT) -> tuple[str, int | None]:
    """How many pairs would decide a claim at level `alpha` with power `target`, were the mean and SD of
    its differences `d` the true ones: ("hold" or "refute", n); ("", None) where the measured mean sits on
    the claim's bound (nothing decides it), (way, None) where more than `limit` would be needed. The side
    the measured mean lies on says which test: beyond the margin in the expected direction, the claim's
    one-sided t-test; else the opposite one. For an equivalence (verdicts.pvalues' tests): inside the margin,
    TOST, whose power is at least P(near side) + P(far side) - 1 (the bound used here); outside it, the
    one-sided test beyond the nearer bound at alpha / 2 (either side refutes: Bonferroni over the two).
    With no spread in `d`, the exact sign-flip p answers (t_pvalues), at least 2^-n. A planning figure from
    the observed effect, not a test: the true effect may be smaller."""
    if len(d) < 2 or expect not in EXPECT:
        raise ValueError("pairs_needed takes two differences or more and an expect of " + ", ".join(EXPECT))
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    if expect == "equivalent":
        beyond, far = margin - abs(mean), margin + abs(mean)  # beyond > 0 inside the margin: TOST can hold it
    else:
        beyond, far = (mean - margin) * (1 if expect == "greater" else -1), math.inf
    if beyond == 0:
        return "", None
    way = "hold" if beyond > 0 else "refute"
    level = alpha / 2 if expect == "equivalent" and way == "refute" else alpha
    if sd == 0:
        return way, max(2, math.ceil(math.log2(1.0 / level)))
    near, far = abs(beyond) / sd, far / sd

    def reaches(n: int) -> bool:
        if expect == "equivalent" and way == "hold":
            return power(n, near, level) + power(n, far, level) - 1.0 >= target
        return power(n, near, level) >= target

    if not reaches(limit):
        return way, None
    lo, hi = 1, 2  # not reaches(lo), reaches(hi): the power grows with n
    while not reaches(hi):
        lo, hi = hi, min(2 * hi, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not reaches(mid) else (lo, mid)
    return way, hi


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
    if len(d) == 0:
        return None
    return float(sign_flip_many(d, expect, margin, draws))


def sign_flip_many(d, expect: str, margin: float = 0.0, draws: int = 200_000, chunk: int = 1 << 22):
    """`sign_flip` over the last axis of an array (..., n): one p per row. Up to EXACT_LIMIT values every
    sign pattern is enumerated; beyond, `draws` patterns from a fixed seed (the observed one counts once)."""
    import numpy as np

    x = np.asarray(d, dtype=np.float64)
    n = x.shape[-1]
    if expect == "equivalent":
        return np.maximum(sign_flip_many(x, "greater", -margin, draws), sign_flip_many(x, "less", margin, draws))
    if expect not in ("greater", "less"):
        raise ValueError(f"expect must be one of {EXPECT}, not {expect!r}")
    x = x - margin
    if expect == "less":
        x = -x
    observed = x.sum(axis=-1)
    tol = 1e-12 * np.maximum(1.0, np.abs(observed))
    if n <= EXACT_LIMIT:  # every pattern, once
        signs = (1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)).astype(np.float64)
    else:
        signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(draws, n))
    rows = x.reshape(-1, n)
    count = np.empty(len(rows))
    step = max(1, chunk // len(signs))  # rows per block, so a block holds about `chunk` sums
    limit = (observed - tol).reshape(-1)
    for i in range(0, len(rows), step):
        count[i:i + step] = np.sum(rows[i:i + step] @ signs.T >= limit[i:i + step, None], axis=-1)
    p = count / len(signs) if n <= EXACT_LIMIT else (count + 1) / (draws + 1)
    return p.reshape(observed.shape)


def bootstrap_interval(d: list[float], level: float = LEVEL, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of `d` (Efron 1979): the (1 - level)/2 and
    (1 + level)/2 quantiles of the means of `resamples` resamples with replacement, from a fixed seed so
    a summary is reproducible. None below two values."""
    import numpy as np

    if len(d) < 2:
        return None
    # random_state, not rng (scipy >= 1.15 only): a Generator draws the same resamples through either
    ci = _scipy_stats().bootstrap((np.asarray(d, dtype=np.float64),), np.mean, n_resamples=resamples,
                                  confidence_level=level, method="percentile",
                                  random_state=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


def probability_of_improvement(a: list[float], b: list[float], level: float = LEVEL, resamples: int = 10_000,
                               seed: int = 0) -> tuple[float | None, tuple[float, float] | None]:
    """P(a > b): the chance that a run of a beats a run of b, over every pair of their seeds' values (ties
    count half), Mann-Whitney's U / (n m) as rliable's probability of improvement (Agarwal et al. 2021); and
    its percentile bootstrap interval, each side resampled on its own (rliable's stratified bootstrap), from
    a fixed seed. (None, None) without values; no interval below two values a side."""
    import numpy as np

    if not a or not b:
        return None, None

    def prob(x, y, axis=-1):  # U from the pooled ranks (ties averaged): memory n + m a resample, not n x m
        x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
        n, m = x.shape[-1], y.shape[-1]
        ranks = _scipy_stats().rankdata(np.concatenate([x, y], axis=-1), axis=-1)
        return (ranks[..., :n].sum(axis=-1) - n * (n + 1) / 2) / (n * m)

    point = float(prob(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))
    if len(a) < 2 or len(b) < 2:
        return point, None
    ci = _scipy_stats().bootstrap((np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)), prob,
                                  n_resamples=resamples, confidence_level=level, method="percentile",
                                  vectorized=True, paired=False, batch=max(1, 1_000_000 // (len(a) + len(b))),
                                  random_state=np.random.default_rng(seed)).confidence_interval
    return point, (float(ci.low), float(ci.high))
