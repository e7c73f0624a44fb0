"""normbench.summary.stats against published values: a t-table quantile, R's paired t-test on Student's sleep
data, Holm's adjusted p-values worked by hand, and scipy.stats for the general case."""

import math
import statistics

import pytest
from scipy import stats as scipy_stats

from normbench.summary import stats

SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_t_interval_matches_the_t_table():
    """Reference: t(0.975, df=2) = 4.303 (any t table); interval = mean ± t * s / sqrt(n)."""
    values = [0.50, 0.61, 0.72]
    assert stats.t_quantile(0.975, 2) == pytest.approx(4.303, abs=5e-4)
    lo, hi = stats.t_interval(values)
    half = 4.302652729749462 * 0.11 / math.sqrt(3)
    assert lo == pytest.approx(0.61 - half, abs=1e-12) and hi == pytest.approx(0.61 + half, abs=1e-12)


@pytest.mark.parametrize("values", [[1.0, 2.0], [0.81, 0.84, 0.8, 0.86, 0.83], list(range(30))])
def test_t_interval_matches_scipy(values):
    """Reference: scipy.stats.t.interval(0.95, n - 1, mean, sem)."""
    expected = scipy_stats.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values),
                                      scale=scipy_stats.sem(values))
    assert stats.t_interval(values) == pytest.approx(expected, rel=1e-12)


def test_t_interval_is_undefined_for_one_value():
    assert stats.t_interval([0.9]) is None and stats.t_interval([]) is None


def test_paired_matches_r_on_the_sleep_data():
    """Reference: R, t.test(extra ~ group, data = sleep, paired = TRUE): t = -4.0621, df = 9,
    p-value = 0.002833, 95% CI [-2.4598858, -0.7001142], mean difference -1.58."""
    d = stats.paired(SLEEP_1, SLEEP_2)
    assert d.n == 10 and d.mean == pytest.approx(-1.58, abs=1e-12)
    assert d.p == pytest.approx(0.002833, abs=5e-7)
    assert d.ci == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert d.p == pytest.approx(scipy_stats.ttest_rel(SLEEP_1, SLEEP_2).pvalue, rel=1e-10)


def test_paired_edge_cases():
    """Reference: the exact sign-flip test by enumeration: a constant nonzero difference over 3 pairs is
    the most extreme of 2^3 sign patterns on either side, two-sided p = 2/8 (no t statistic, never p = 0);
    a zero one is no evidence (p = 1); one pair has no variance estimate (no p, no interval)."""
    assert stats.paired([1, 2, 3], [0, 1, 2]).p == pytest.approx(0.25)
    assert stats.paired([1, 2, 3], [1, 2, 3]).p == 1.0
    one = stats.paired([0.9], [0.8])
    assert one.p is None and one.ci is None and one.mean == pytest.approx(0.1)
    with pytest.raises(ValueError):
        stats.paired([1, 2], [1])


def test_holm_by_hand():
    """Reference: Holm (1979) worked by hand: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 is 0.02,
    0.03, 0.06, 0.04, made monotone (0.04 -> 0.06), in the input order; capped at 1; None skipped."""
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0]
    assert stats.holm([None, 0.02, None, 0.04]) == [None, pytest.approx(0.04), None, pytest.approx(0.04)]
    assert stats.holm([]) == []


def test_t_pvalues_rows_match_scipy_and_constant_rows_get_the_exact_p():
    """Reference: scipy.stats.ttest_1samp (one-sided) per row; and the exact test's floor by enumeration: a
    row of three equal positive differences is the most extreme of 2^3 sign patterns, p = 1/8, for 0.1 too,
    whose float mean (0.30000000000000004 / 3) would leave a t-test an sd of 1e-17 and p = 0."""
    import numpy as np

    rows = np.array([[0.2, 0.5, -0.1, 0.4], [1.0, 1.1, 0.9, 1.3], [-0.3, 0.1, -0.2, -0.4]])
    for expect in ("greater", "less"):
        got = stats.t_pvalues(rows, expect, 0.05)
        for row, p in zip(rows, got):
            assert p == pytest.approx(scipy_stats.ttest_1samp(row, 0.05, alternative=expect).pvalue, rel=1e-10)
    flat = stats.t_pvalues(np.array([[0.1, 0.1, 0.1], [0.2, 0.5, 0.3]]), "greater")
    assert flat[0] == 1 / 8 and flat[1] == pytest.approx(scipy_stats.ttest_1samp([0.2, 0.5, 0.3], 0,
                                                                                 alternative="greater").pvalue)
    assert stats.t_test([0.1, 0.1, 0.1], "greater") == 1 / 8 and stats.t_test([0.1, 0.1, 0.1], "less") == 1.0
    assert list(stats.sign_flip_many(np.array([[1, -2, 3], [1, 2, 3]]), "greater")) == [3 / 8, 1 / 8]


def test_power_and_pairs_needed_match_g_power():
    """Reference: G*Power 3.1, t tests, "Means: difference from constant (one sample case)", a priori, power
    0.8: effect size d = 0.5, one tail, alpha 0.05 -> total sample size 27, actual power 0.8118; two tails
    (one tail at 0.025) -> 34, actual power 0.8078."""
    assert stats.power(27, 0.5, 0.05) == pytest.approx(0.8118, abs=1e-4)
    assert stats.power(34, 0.5, 0.025) == pytest.approx(0.8078, abs=1e-4)
    d = [0.5 + x for x in (-1.0, 1.0)]  # mean 0.5, SD sqrt(2): d = 0.354
    sd = statistics.stdev(d)
    d = [0.5 + (x - 0.5) / sd for x in d]  # mean 0.5, SD 1: d = 0.5
    assert stats.pairs_needed(d, "greater", 0.0, alpha=0.05) == ("hold", 27)
    assert stats.pairs_needed(d, "less", 0.0, alpha=0.025) == ("refute", 34)  # the mean lies beyond: refute it
    assert stats.pairs_needed(d, "greater", 1.0, alpha=0.05) == ("refute", 27)  # 0.5 SD short of the margin
    assert stats.pairs_needed(d, "equivalent", 1.0, alpha=0.05) == ("hold", 27)  # TOST: 0.5 SD to the nearer bound,
    # 1.5 to the farther (whose power is then ~1, so the nearer decides)
    assert stats.pairs_needed(d, "greater", 0.5, alpha=0.05) == ("", None)  # on the bound: nothing decides it
    assert stats.pairs_needed([0.01, 0.01, 0.01], "greater", 0.0, alpha=0.001) == ("hold", 10)  # exact: 2^-10 < 0.001


@pytest.mark.parametrize("mean, expect, margin, alpha", [
    (0.3, "greater", 0.0, 0.01),  # the claim's one-sided test
    (0.0, "equivalent", 0.5, 0.05),  # TOST, both bounds binding (the mean at 0)
    (1.5, "equivalent", 1.0, 0.05),  # outside the margin: refuted by either side, Bonferroni over the two
])
def test_pairs_needed_reaches_its_power_in_simulation(mean, expect, margin, alpha):
    """Reference: Monte Carlo through the verdict's own tests (verdicts.pvalues: t-test, TOST, and the
    opposite alternatives), not the noncentral t: of 20,000 simulated studies of n normal pairs (SD 1) at
    the n pairs_needed gives, at least 80% reach alpha (less 3 standard errors, 0.009), on the side it names;
    and by the noncentral t, n - 1 pairs fall short of 0.8 (the search stops at the first n that reaches it)."""
    import numpy as np

    from normbench.summary.verdicts import pvalues

    way, n = stats.pairs_needed([mean - math.sqrt(0.5), mean + math.sqrt(0.5)], expect, margin, alpha)  # SD 1
    assert n is not None and way == ("refute" if expect == "equivalent" and abs(mean) > margin else "hold")
    x = np.random.default_rng(0).normal(mean, 1.0, size=(20_000, n))
    p, p_against, _, _ = pvalues(x, expect, margin, exact=False)
    share = float(np.mean((p if way == "hold" else p_against) < alpha))
    assert share >= 0.8 - 0.009, (n, share)
    if expect != "equivalent":  # TOST's power is bounded below, not computed: the bound's n may be 1 more than needed
        assert stats.power(n - 1, mean / 1.0, alpha) < 0.8 <= stats.power(n, mean / 1.0, alpha)
