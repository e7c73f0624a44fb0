"""normbench.summary.stats against published values: a t-table quantile, R's paired t-test on Student's sleep
data, Holm's adjusted p-values worked by hand, and for the general case the t distribution written out from
the regularized incomplete beta function (scipy.stats computes the statistics, so it is no reference)."""

import math
import statistics

import pytest

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


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t, written out (Abramowitz & Stegun 26.7.1): 1/2 I_(df/(df+t^2))(df/2, 1/2)
    for t >= 0, I the regularized incomplete beta function."""
    from scipy.special import betainc

    tail = 0.5 * float(betainc(df / 2, 0.5, df / (df + t * t)))
    return tail if t >= 0 else 1.0 - tail


@pytest.mark.parametrize("values", [[1.0, 2.0], [0.81, 0.84, 0.8, 0.86, 0.83], list(range(30))])
def test_t_interval_bounds_are_where_the_one_sided_tests_reach_2_5_percent(values):
    """Reference: the t-interval by its definition: at each bound, the one-sided t-test of the mean against
    it has p = (1 - 0.95) / 2, the t distribution's tail written out (t_sf), not scipy.stats."""
    n, mean = len(values), statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(n)
    lo, hi = stats.t_interval(values)
    assert lo < mean < hi and mean - lo == pytest.approx(hi - mean, rel=1e-12)
    assert t_sf((mean - lo) / se, n - 1) == pytest.approx(0.025, rel=1e-9)
    assert t_sf((hi - mean) / se, n - 1) == pytest.approx(0.025, rel=1e-9)


def test_t_interval_of_equal_values_is_the_point():
    """Reference: s = 0, so mean ± t * s / sqrt(n) is the mean itself (not scipy's NaN for a scale of 0)."""
    assert stats.t_interval([0.25, 0.25, 0.25]) == (0.25, 0.25)


def test_t_interval_is_undefined_for_one_value():
    assert stats.t_interval([0.9]) is None and stats.t_interval([]) is None


def test_paired_matches_r_on_the_sleep_data():
    """Reference: R, t.test(extra ~ group, data = sleep, paired = TRUE): t = -4.0621, df = 9,
    p-value = 0.002833, 95% CI [-2.4598858, -0.7001142], mean difference -1.58."""
    d = stats.paired(SLEEP_1, SLEEP_2)
    assert d.n == 10 and d.mean == pytest.approx(-1.58, abs=1e-12)
    assert d.p == pytest.approx(0.002833, abs=5e-7)
    assert d.ci == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert d.p == pytest.approx(2 * t_sf(4.062127683382037, 9), rel=1e-9)  # t by hand: -1.58 / (1.2299 / sqrt(10))


def test_paired_edge_cases():
    """Reference: the exact sign-flip test by enumeration: a constant nonzero difference over 3 pairs is
    the most extreme of 2^3 sign patterns on either side, two-sided p = 2/8 (no t statistic, never p = 0);
    a zero one is no evidence (p = 1); one pair has no variance estimate (no p, no interval)."""
    assert stats.paired([1, 2, 3], [0, 1, 2]).p == pytest.approx(0.25)
    assert stats.paired([1, 2, 3], [0, 1, 2]).ci == (1.0, 1.0)
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


def test_holm_adjust_by_hand_family_by_family():
    """Reference: Holm (1979) worked by hand, one family per row: [0.01, 0.04, 0.03, 0.005] as above; ties
    [0.02, 0.02, 0.5, 1.0] sorted times 4, 3, 2, 1 -> 0.08, 0.06 (lifted to 0.08), 1.0, 1.0; [0.3, 0.6, 1.0, 0.2]
    sorted (0.2, 0.3, 0.6, 1.0) -> 0.8, 0.9, 1.2 (capped at 1), 1.0, back in the input order; None skipped."""
    import numpy as np

    got = stats.holm_adjust(np.array([[0.01, 0.04, 0.03, 0.005], [0.02, 0.02, 0.5, 1.0], [0.3, 0.6, 1.0, 0.2]]))
    assert got == pytest.approx(np.array([[0.03, 0.06, 0.06, 0.02], [0.08, 0.08, 1.0, 1.0], [0.9, 1.0, 1.0, 0.8]]),
                                abs=1e-15)
    assert stats.holm([0.02, None, 0.02, 0.5, 1.0]) == [pytest.approx(0.08), None, pytest.approx(0.08), 1.0, 1.0]


def _t_by_hand(row, margin: float) -> float:
    """(mean - margin) / (s / sqrt(n)): the one-sample t statistic written out."""
    return (statistics.fmean(row) - margin) / (statistics.stdev(row) / math.sqrt(len(row)))


def test_t_pvalues_rows_match_the_t_tail_and_constant_rows_get_the_exact_p():
    """Reference: per row, the t statistic written out and the t distribution's tail written out (t_sf):
    greater: P(T > t), less: P(T < t); TOST: the larger of the two one-sided p's at -margin and +margin. And
    the exact test's floor by enumeration: a row of three equal positive differences is the most extreme of
    2^3 sign patterns, p = 1/8, for 0.1 too, whose float mean (0.30000000000000004 / 3) would leave a t-test
    an sd of 1e-17 and p = 0."""
    import numpy as np

    rows = np.array([[0.2, 0.5, -0.1, 0.4], [1.0, 1.1, 0.9, 1.3], [-0.3, 0.1, -0.2, -0.4]])
    for expect, tail in (("greater", lambda t: t_sf(t, 3)), ("less", lambda t: t_sf(-t, 3))):
        got = stats.t_pvalues(rows, expect, 0.05)
        assert got.shape == (3,)
        for row, p in zip(rows.tolist(), got):
            assert p == pytest.approx(tail(_t_by_hand(row, 0.05)), rel=1e-9)
    for row in rows.tolist():
        tost = max(t_sf(_t_by_hand(row, -0.5), 3), t_sf(-_t_by_hand(row, 0.5), 3))
        assert stats.t_test(row, "equivalent", 0.5) == pytest.approx(tost, rel=1e-9)
    flat = stats.t_pvalues(np.array([[0.1, 0.1, 0.1], [0.2, 0.5, 0.3]]), "greater")
    assert flat[0] == 1 / 8 and flat[1] == pytest.approx(t_sf(_t_by_hand([0.2, 0.5, 0.3], 0.0), 2), rel=1e-9)
    assert stats.t_test([0.1, 0.1, 0.1], "greater") == 1 / 8 and stats.t_test([0.1, 0.1, 0.1], "less") == 1.0
    assert list(stats.sign_flip_many(np.array([[1, -2, 3], [1, 2, 3]]), "greater")) == [3 / 8, 1 / 8]


def test_bootstrap_interval_written_out():
    """Reference: the percentile bootstrap by hand: 10,000 resamples drawn as numpy's Generator(seed 0)
    draws them, their means, and their 2.5% and 97.5% quantiles (np.quantile, linear); scipy's quantile
    rounds differently in the last bit, hence a relative tolerance of 1e-14. Two values 0 and 1: the resample
    means are 0, 0.5 and 1 with chances 1/4, 1/2, 1/4, so the interval is [0, 1] exactly."""
    import numpy as np

    for d in (SLEEP_2, [0.84, 0.85, 0.83, 0.9], [1.0, 2.0]):
        x = np.asarray(d)
        means = x[np.random.default_rng(0).integers(0, len(x), size=(10_000, len(x)))].mean(axis=1)
        assert stats.bootstrap_interval(d) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), rel=1e-14)
    assert stats.bootstrap_interval([0.0, 1.0]) == (0.0, 1.0)
    assert stats.bootstrap_interval([0.2, 0.2, 0.2]) == (pytest.approx(0.2), pytest.approx(0.2))
    assert stats.bootstrap_interval([0.2]) is None


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
