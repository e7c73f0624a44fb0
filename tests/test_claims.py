"""Declared claims (normbench/summary/claims.py) and the statistics they are tested with (normbench/summary/stats.py): each
statistic against a published or independently computed value, the family's Holm correction by hand, the
exact sign-flip test by enumeration, and `normbench summarize --claims` end to end."""

import csv
import itertools
import json
import re
import statistics
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, normbench_cli
from scipy import stats as scipy_stats
from test_summarize import _summarize, write_run

from normbench.errors import UserError
from normbench.summary import claims, metrics, stats, verdicts
from normbench.summary.discover import find_runs
from normbench.summary.summarize import compute

# Student's sleep data (Cushny & Peebles 1905), R's `sleep`: extra hours of sleep under two drugs, 10 patients.
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
SLEEP_D = [a - b for a, b in zip(SLEEP_1, SLEEP_2)]


def test_one_sided_t_matches_r():
    """Reference: R's t.test(extra ~ group, data = sleep, paired = TRUE): t = -4.0621, df = 9, two-sided
    p = 0.002833, 95% CI [-2.4598858, -0.7001142]; the one-sided p (alternative = "less") is half of it."""
    assert stats.t_test(SLEEP_D, "less") == pytest.approx(0.002833 / 2, rel=1e-3)
    assert stats.t_test(SLEEP_D, "greater") == pytest.approx(1 - 0.002833 / 2, rel=1e-5)
    lo, hi = stats.t_interval(SLEEP_D)
    assert (lo, hi) == pytest.approx((-2.4598858, -0.7001142), abs=1e-6)


@pytest.mark.parametrize("margin", [0.5, 1.0, 2.0, 3.0])
def test_margins_and_tost_match_scipy(margin):
    """Reference: scipy.stats.ttest_1samp with a one-sided alternative (an independent implementation):
    a margin shifts the null mean; TOST is the larger p of the two one-sided tests at -margin and +margin
    (Schuirmann 1987)."""
    d = SLEEP_D
    greater = scipy_stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    less = scipy_stats.ttest_1samp(d, margin, alternative="less").pvalue
    assert stats.t_test(d, "greater", -margin) == pytest.approx(greater, rel=1e-9)
    assert stats.t_test(d, "less", margin) == pytest.approx(less, rel=1e-9)
    assert stats.t_test(d, "equivalent", margin) == pytest.approx(max(greater, less), rel=1e-9)


def test_tost_by_hand():
    """Reference: the TOST statistics written out: mean -1.58, se = sd / sqrt(10) = 0.38896; at margin 3,
    t1 = (-1.58 + 3) / se = 3.6507 (p1 = P(T9 > t1)), t2 = (-1.58 - 3) / se = -11.775; p = max(p1, p2)."""
    se = statistics.stdev(SLEEP_D) / 10 ** 0.5
    assert se == pytest.approx(0.38896, abs=1e-5)
    t1 = (statistics.fmean(SLEEP_D) + 3) / se
    assert t1 == pytest.approx(3.6507, abs=1e-3)
    assert stats.t_test(SLEEP_D, "equivalent", 3.0) == pytest.approx(scipy_stats.t.sf(t1, 9), rel=1e-9)


def _enumerate(d, expect, margin=0.0):
    """The sign-flip p written the long way: every sign pattern, counted."""
    x = [v - margin for v in d]
    if expect == "less":
        x = [-v for v in x]
    observed = sum(x)
    patterns = list(itertools.product((1, -1), repeat=len(x)))
    return sum(sum(s * v for s, v in zip(signs, x)) >= observed - 1e-12 for signs in patterns) / len(patterns)


def test_sign_flip_exact_by_enumeration():
    """Reference: the sign patterns counted by hand and by itertools. [1, -2, 3]: sums of +-1 +-2 +-3 are
    6, 0, 2, -4, 4, -2, 0, -6; three are >= the observed 2, p = 3/8. Five positive values: only the observed
    pattern reaches the observed sum, p = 1/32, the smallest p n = 5 allows."""
    assert stats.sign_flip([1, -2, 3], "greater") == 3 / 8
    assert stats.sign_flip([0.1, 0.2, 0.3, 0.4, 0.5], "greater") == 1 / 32
    for d, expect, margin in ((SLEEP_D, "less", 0.0), (SLEEP_D, "greater", -2.0), (SLEEP_D[:7], "less", 0.5),
                              ([0.3, -0.1, 0.2, 0.25, 0.05, -0.02], "greater", 0.1)):
        assert stats.sign_flip(d, expect, margin) == pytest.approx(_enumerate(d, expect, margin), abs=1e-12)
    assert stats.sign_flip(SLEEP_D, "equivalent", 3.0) == max(_enumerate(SLEEP_D, "greater", -3.0),
                                                            _enumerate(SLEEP_D, "less", 3.0))


def claim_sweep(root: Path, study: str = "", first: int = 0) -> None:
    """bn, gn, ln at batch 2 over 5 seeds from `first` (a shipped study's: the protocol's seed_base): gn ~10
    points above bn in every seed, ln within noise of gn."""
    noise = [0.004, -0.006, 0.002, 0.007, -0.003]
    overrides = [f"experiment={study}"] if study else None
    for seed, e in enumerate(noise, first):
        write_run(root, f"bn_{seed}", norm="bn", bs=2, seed=seed, test_acc=0.70 + e, overrides=overrides)
        write_run(root, f"gn_{seed}", norm="gn", bs=2, seed=seed, test_acc=0.80 + e / 2, overrides=overrides)
        write_run(root, f"ln_{seed}", norm="ln", bs=2, seed=seed, test_acc=0.80 - e / 3 + 0.001, overrides=overrides)


CLAIMS = [
    {"name": "GN beats BN", "a": {"norm.name": "gn", "batch_size": 2}, "b": {"norm.name": "bn"}, "expect": "greater",
     "role": "primary"},
    {"name": "BN beats GN", "a": {"norm.name": "bn"}, "b": {"norm.name": "gn"}, "expect": "greater", "role": "primary"},
    {"name": "LN beats GN", "a": {"norm.name": "ln"}, "b": {"norm.name": "gn"}, "expect": "greater", "role": "primary"},
    {"name": "LN equals GN within 5", "a": {"norm.name": "ln"}, "b": {"norm.name": "gn"}, "expect": "equivalent",
     "margin": 5.0, "role": "primary"},
]


def _holm(ps: list[float]) -> list[float]:
    """Holm's adjusted p's written the long way: sorted ascending, the i-th (0-based) of k times k - i, each
    at least the one before it, at most 1; returned in the input's order."""
    k = len(ps)
    order = sorted(range(k), key=lambda i: ps[i])
    out, running = [0.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * ps[i]))
        out[i] = running
    return out


def test_summarize_claims_end_to_end(tmp_path):
    """Reference: the hand-made sweep (gn − bn = +10 points, the same sign in every seed; ln ≈ gn) and a
    --claims file of its four claims without a role: a family of their own (docs/protocol.md), so `held`
    for the true direction, `refuted` for the reverse, `inconclusive` for a difference within the noise,
    `held` for equivalence within 5 points, at the file's one look over the 5 seeds there (α 0.05: no
    protocol declared). p_holm is Holm by hand over the file's 8 hypotheses alone (each claim's hypothesis
    and its opposite; scipy's one-sided t-tests on the 5 pairs): the shipped family's 42 are not in it.
    The claims print before the tables, with the family line; summary.json and claims.csv hold every field."""
    claim_sweep(tmp_path / "sweep")
    plain = [{k: v for k, v in c.items() if k != "role"} for c in CLAIMS]  # a user's file: no roles
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(plain))
    r = normbench_cli("summarize", str(tmp_path / "sweep"), "--no-plots", "--claims", str(tmp_path / "claims.yaml"),
                      cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.index("claims") < r.stdout.index("tables") < r.stdout.index("1. fashion_mnist")
    assert "family: your claims, claims.yaml: one look at every seed, α 0.05, Holm over 8 hypotheses" in r.stdout
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    got = summary["claims"]
    assert [c["verdict"] for c in got] == ["held", "refuted", "inconclusive", "held"]
    assert [c["look"] for c in got] == [1, 1, 1, 1] and [c["looks"] for c in got] == [1, 1, 1, 1]
    assert {c["role"] for c in got} == {"primary"} and [c["look_seeds"] for c in got] == [[0, 1, 2, 3, 4]] * 4
    assert summary["protocol"]["name"] == "your claims" and summary["protocol"]["hypotheses"] == 8
    fields = {"name", "a", "b", "n", "estimate", "ci_low", "ci_high", "p", "p_holm", "p_exact", "verdict", "role",
              "rests_on", "budget", "budget_path", "runs", "train_a", "train_b", "p_improve", "p_improve_low",
              "p_improve_high", "look", "level", "p_exact_holm", "p_exact_refute_holm"}
    assert fields <= set(got[0])
    noise = [0.004, -0.006, 0.002, 0.007, -0.003]
    d = [0.80 + e / 2 - 0.70 - e for e in noise]  # gn - bn
    d_ln = [(0.80 - e / 3 + 0.001) - (0.80 + e / 2) for e in noise]  # ln - gn
    one = lambda x, m, alt: scipy_stats.ttest_1samp(x, m, alternative=alt).pvalue  # noqa: E731
    minus = [-v for v in d]
    # the family: each claim's hypothesis, then its opposite (scipy's one-sided tests; TOST's is the larger
    # of two, its opposite twice the smaller of the two outside tests); nothing else
    family = [one(d, 0, "greater"), one(minus, 0, "greater"), one(d_ln, 0, "greater"),
              max(one(d_ln, -0.05, "greater"), one(d_ln, 0.05, "less")),
              one(d, 0, "less"), one(minus, 0, "less"), one(d_ln, 0, "less"),
              min(1.0, 2 * min(one(d_ln, 0.05, "greater"), one(d_ln, -0.05, "less")))]
    expected = _holm(family)
    # the arithmetic: d's t-test p (6.5e-07) and its mirror's opposite are the two smallest: x 8 and x 7
    assert expected[0] == pytest.approx(8 * family[0], rel=1e-9) and expected[0] < 1e-5
    assert [c["p_holm"] for c in got] == pytest.approx(expected[:4], rel=1e-9)
    assert [c["p_refute_holm"] for c in got] == pytest.approx(expected[4:8], rel=1e-9)
    assert got[0]["level"] == 0.05
    assert got[0]["n"] == 5 and got[0]["estimate"] == pytest.approx(statistics.fmean(d), rel=1e-12)
    assert got[0]["p"] == pytest.approx(scipy_stats.ttest_1samp(d, 0, alternative="greater").pvalue, rel=1e-9)
    # the exact test: 1/32 for every one-sided hypothesis all five signs agree with, Holm over the 8
    assert got[0]["p_exact"] == 1 / 32 and got[0]["p_exact_holm"] > 0.05
    assert got[0]["rests_on"] == "t-test" and "rests on the t-test's normality" in got[0]["note"]
    assert got[2]["rests_on"] == "" and "held · t-test" in r.stdout
    rows = list(csv.DictReader((tmp_path / "sweep" / "claims.csv").open()))
    assert [row["verdict"] for row in rows] == ["held", "refuted", "inconclusive", "held"]


def test_exploratory_claims_get_an_estimate_not_a_verdict(tmp_path):
    """Reference: the same sweep, the claims without a role (a user file written before roles): each gets
    its estimate, interval and unadjusted one-sided p (scipy), no Holm p and the verdict `exploratory`."""
    claim_sweep(tmp_path)
    plain = [{k: v for k, v in c.items() if k != "role"} for c in CLAIMS]
    results = verdicts.test(claims.parse(plain, "test"), find_runs(tmp_path))
    assert [r.verdict for r in results] == ["exploratory"] * 4 and {r.role for r in results} == {"exploratory"}
    d = [0.80 + e / 2 - 0.70 - e for e in [0.004, -0.006, 0.002, 0.007, -0.003]]
    assert results[0].p == pytest.approx(scipy_stats.ttest_1samp(d, 0, alternative="greater").pvalue, rel=1e-9)
    assert results[0].p_holm is None and results[0].ci is not None and results[0].look is None


def test_same_runs_same_verdict_whatever_folder(tmp_path):
    """Reference: protocol.py's family rule: a shipped primary claim's verdict on the same runs does not
    depend on what else the folder holds. Summarized alone, it is Holm over the 2 m hypotheses of the m
    shipped claims with 2 m - 1 at p = 1; beside a stronger second primary claim of the family, its Holm p can
    only fall (the other claim's p takes Holm's first step), so a verdict alone is a verdict together."""
    from normbench.summary import protocol

    proto = protocol.load()
    # two primary claims of one study (the runs' experiment scopes the claims that read them)
    first, second = next((a, b) for a, b in zip(proto.family, proto.family[1:]) if a[0] == b[0])
    claim_sweep(tmp_path, first=proto.seed_base)  # the looks read the protocol's seeds
    runs = find_runs(tmp_path)
    for r in runs:  # the runs of the study that declared the claims
        r.overrides = [f"experiment={first[0]}"]
    member = claims.Claim(first[1], {"norm.name": "gn"}, {"norm.name": "bn"}, "greater", study=first[0])
    alone = verdicts.test([member], runs)[0]
    m = len(proto.family)
    d = [0.80 + e / 2 - 0.70 - e for e in [0.004, -0.006, 0.002, 0.007, -0.003]]
    p = scipy_stats.ttest_1samp(d, 0, alternative="greater").pvalue
    assert alone.role == "primary" and alone.look == 2  # a member by its key: no role needed in the runs
    assert alone.p_holm == pytest.approx(2 * m * p, rel=1e-9) and alone.verdict == "held"
    # a second member with a smaller p (the same pairs against a margin of -5 points) takes Holm's first step
    stronger = claims.Claim(second[1], member.a, member.b, "greater", margin=-5.0, study=second[0])
    together = verdicts.test([member, stronger], runs)
    assert together[1].p < p and together[0].p_holm == pytest.approx((2 * m - 1) * p, rel=1e-9)
    assert together[0].verdict == "held" and together[0].p_holm < alone.p_holm


def test_claims_csv_only_where_claims_were_tested(tmp_path):
    """A sweep that declares no claims gets no claims.csv (it would be a header alone), and summarizing it
    again without claims removes the one an earlier `--claims` wrote; with claims, one row each."""
    claim_sweep(tmp_path)
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(CLAIMS))
    files, _ = _summarize(tmp_path, plots=False, claims_file=tmp_path / "claims.yaml")
    assert len(list(csv.DictReader(files["claims_csv"].open()))) == len(CLAIMS)
    files, _ = _summarize(tmp_path, plots=False)
    assert "claims_csv" not in files and not (tmp_path / "claims.csv").exists()
    assert json.loads(files["json"].read_text())["claims"] == []


def test_declared_claims_are_scoped_to_their_study(tmp_path):
    """Reference: the runs' recorded `claims` (as an experiment records them): a claim declared by
    small_batch's runs selects only among small_batch's runs, though another study has the same norms."""
    from normbench.summary import protocol

    claim_sweep(tmp_path / "a", study="small_batch", first=protocol.load().seed_base)
    claim_sweep(tmp_path / "b", study="ghost_batch", first=protocol.load().seed_base)
    for results in (tmp_path / "a").rglob("results.json"):
        data = json.loads(results.read_text())
        data["config"]["claims"] = CLAIMS[:1]
        results.write_text(json.dumps(data))
    s = compute(tmp_path)
    assert [(r.claim.name, r.claim.study, r.n) for r in s.claims] == [("GN beats BN", "small_batch", 5)]
    assert s.claims[0].verdict == "held"


def test_ambiguous_selector_is_named_not_tested(tmp_path):
    """Reference: two runs at each seed match `norm.name: bn` (they differ in lr): the claim is not tested,
    and its note names the key that tells them apart and --select lr."""
    for seed in range(3):
        for lr in (0.01, 0.03):
            write_run(tmp_path, f"bn_{lr}_{seed}", norm="bn", seed=seed, config={"lr": lr}, test_acc=0.8, val_acc=0.8)
            write_run(tmp_path, f"gn_{lr}_{seed}", norm="gn", seed=seed, config={"lr": lr}, test_acc=0.8, val_acc=0.8)
    result = verdicts.test(claims.parse(CLAIMS[1:2], "test"), find_runs(tmp_path))[0]
    assert result.verdict == "inconclusive" and result.n == 0
    assert "differ in lr" in result.note and "--select lr" in result.note
    selected = compute(tmp_path, select="lr", claims_file=None)
    assert selected.claims == []  # nothing declared by these runs


@pytest.mark.parametrize("raw, message", [
    ([{"name": "x", "a": {"norm.nme": "gn"}, "b": {"norm.name": "bn"}, "expect": "greater"}], "unknown key(s) norm.nme"),
    ([{"name": "x", "a": {"norm.name": "gn"}, "b": {"norm.name": "bn"}, "expect": "bigger"}], "expect='bigger'"),
    ([{"name": "x", "a": {"norm.name": "gn"}, "b": {"norm.name": "bn"}, "expect": "equivalent"}], "not a number"),
    ([{"name": "x", "a": {"norm.name": "gn"}, "expect": "greater"}], "`b` must select runs"),
    ({"name": "x"}, "must be a list"),
])
def test_malformed_claims_are_one_line_errors(raw, message):
    """Reference: normbench's user errors: the claim and the field at fault, with how to fix it."""
    with pytest.raises(UserError) as e:
        claims.parse(raw, "claims.yaml")
    assert message in str(e.value)


def test_bad_claims_file_exits_2_with_one_line(tmp_path):
    claim_sweep(tmp_path / "sweep")
    (tmp_path / "claims.yaml").write_text("- name: x\n  a: {norm.name: gn}\n  b: {norm.name: bn}\n  expect: up\n")
    r = normbench_cli("summarize", str(tmp_path / "sweep"), "--no-plots", "--claims", str(tmp_path / "claims.yaml"),
                      cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "expect='up'" in r.stderr


def test_shipped_experiments_declare_valid_claims():
    """Reference: the config schema (claims.parse refuses unknown keys, expectations and missing margins):
    every shipped study declares claims, each one valid, and each side names the norm it selects."""
    from normbench.study import spec
    from normbench.study.rounds import declared_claims

    for name in ("small_batch", "ghost_batch", "variable_length"):
        parsed = declared_claims(spec.load(name))
        assert len(parsed) >= 5
        assert all("norm.name" in c.a and "norm.name" in c.b for c in parsed)


def test_metric_difference_is_each_runs_own():
    """Reference: the arithmetic: 'x - y' on one results.json is that run's x minus its y."""
    res = {"test_acc_by_length": {"28": 0.7, "42": 0.55}}
    assert metrics.read(res, "test_acc_by_length.42 - test_acc_by_length.28") == pytest.approx(-0.15)
    assert metrics.read(res, "test_acc_by_length.36") is None


def test_readme_claims_section_is_generated():
    """Reference: scripts/readme_claims.py's own output: the README's claims section and docs/results/README.md's
    claims and tables sections are exactly what it writes from the experiments' declared claims and the run
    checked into docs/results/ (--check's first half; tests/test_record.py runs all of it, the summaries
    recomputed from the runs files too)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims

    assert readme_claims.stale() == ""


def test_readme_answers_first_and_its_links_resolve():
    """Reference: issue 41's shape of the README: at most 250 lines, the generated answer (the primary claims)
    within its first screen, and every relative link or image it has names a file of the checkout."""
    readme = (REPO / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    assert next(i for i, line in enumerate(lines) if line.startswith("<!-- claims:begin -->")) < 40
    prose = re.sub(r"```.*?```", "", readme, flags=re.DOTALL)
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"[a-z]+:|#", t)]
    assert targets and [t for t in targets if not (REPO / t).exists()] == []


def test_readme_claims_copy_the_checked_in_verdicts(tmp_path):
    """Reference: a summary.json written by `summarize --claims` on the hand-made sweep: the README's section
    (the primary claims only) and docs/results/README.md's (every claim) quote its estimate, interval, Holm p
    and verdict for the claim of the same study and name, and mark the declared claims the run does not
    hold."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims

    name = readme_claims.primary()[0]
    claim_sweep(tmp_path / "sweep", study=name[0])
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump([{**name[1], "study": name[0], "a": {"norm.name": "gn"},
                                                            "b": {"norm.name": "bn"}, "expect": "greater"}]))
    s = compute(tmp_path / "sweep", claims_file=tmp_path / "claims.yaml")
    (tmp_path / "summary.json").write_text(json.dumps({"claims": [r.row() for r in s.claims]}))
    text = readme_claims.section(tmp_path)
    row = next(line for line in text.splitlines() if name[1]["name"] in line)
    assert f"| {s.claims[0].n} | +{100 * s.claims[0].estimate:.1f} [" in row and "**held**" in row
    assert text.count("not in the checked-in run") == len(readme_claims.primary()) - 1
    assert len(readme_claims.primary()) < len(readme_claims.declared())  # the exploratory ones are not in it
    every = readme_claims.all_claims_section(tmp_path)
    assert row.split(" | ")[-1] in every and f"| {s.claims[0].n} | +{100 * s.claims[0].estimate:.1f} [" in every
    assert every.count("not in the checked-in run") == len(readme_claims.declared()) - 1


def test_readme_table_says_model_tested_estimate_test_and_budget(tmp_path, monkeypatch):
    """Reference: summary.json's fields as verdicts.py writes them (issue 58, item 4): models, look_estimate and
    look_ci_* (the pairs the deciding look tested, here other than the estimate over every pair, as for the
    record's two ghost_batch claims), rests_on, the budget label (budget.py) and the note's count of cells at their
    grid's edge. The README's row shows each, the legend counts the held claims, and --check
    names the claim and the column a hand edit changed."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims

    (study, raw), (study2, raw2) = readme_claims.primary()[:2]
    base = {"n": 5, "look": 2, "looks": 3, "look_n": 5, "p_holm": 0.001, "p": 1e-5, "p_exact_holm": 1.0,
            "verdict": "held", "pairs_needed": None, "needed_to": ""}
    rows = [{**base, "study": study, "name": raw["name"], "models": ["mlp"], "estimate": 0.249, "ci_low": 0.21,
             "ci_high": 0.288, "look_estimate": 0.2526, "look_ci_low": 0.2212, "look_ci_high": 0.2841,
             "rests_on": "t-test", "budget": "moving toward a: +21.0 → +25.3",
             "note": "reads 2 cells whose lr was chosen at its grid's edge (grids to widen)"},
            {**base, "study": study2, "name": raw2["name"], "models": ["cnn", "mlp"], "estimate": 0.1, "ci_low": 0.05,
             "ci_high": 0.15, "look_estimate": 0.1, "look_ci_low": 0.05, "look_ci_high": 0.15, "rests_on": "exact",
             "budget": "not checkable: its metric is not one accuracy", "note": ""}]
    (tmp_path / "summary.json").write_text(json.dumps({"claims": rows}))
    text = readme_claims.section(tmp_path)
    first = next(line for line in text.splitlines() if f"| {raw['name']} |" in line)
    hypothesis = readme_claims._hypothesis(claims.parse([raw], study, study)[0])
    assert first.endswith(f"| MLP | {hypothesis} | 5 | "
                          "+25.3 [+22.1, +28.4] | 0.001 | **held** (look 2 of 3) | t-test | "
                          "moving toward a: +21.0 → +25.3; lr at grid edge (2 cells) |"), first
    second = next(line for line in text.splitlines() if f"| {raw2['name']} |" in line)
    assert "| CNN, MLP |" in second and second.endswith("| exact | not checkable |"), second
    assert "Of the 2 held: 1 rest on the t-test alone; 0 are stable, 1 moving and 1 not checkable" in text
    assert f"{raw['name']}, +24.9 [+21.0, +28.8]" in text  # the estimate over every pair, said beside
    every = readme_claims.all_claims_section(tmp_path)
    assert "| +25.3 [+22.1, +28.4] | 1e-05 | 0.001 | 1 | **held** (look 2 of 3) | t-test |" in every
    # a hand edit of the model and the estimate: --check's first half names the claim and the columns
    readme = tmp_path / "README.md"
    edited = text.replace(f"| MLP | {hypothesis} | 5 | +25.3", f"| CNN | {hypothesis} | 5 | +24.9")
    readme.write_text(f"{readme_claims.BEGIN}\n{edited}\n{readme_claims.END}\n")
    monkeypatch.setattr(readme_claims, "wanted", lambda: {readme: {(readme_claims.BEGIN, readme_claims.END): text}})
    monkeypatch.setattr(readme_claims, "REPO", tmp_path)
    said = readme_claims.stale()
    assert f"{raw['name']!r}: model 'CNN' here, 'MLP' from docs/results/" in said, said
    assert "a − b [95% CI] as tested '+24.9 [+22.1, +28.4]' here, '+25.3 [+22.1, +28.4]' from docs/results/" in said


def test_readme_tables_copy_each_studys_accuracy_tables(tmp_path):
    """Reference: a study's summary.md as summarize writes it (the hand-made small-batch sweep): the
    docs/results/README.md section copies its test-accuracy table with running statistics word for word,
    leaves out the other metrics and the paired comparisons, and links the study's figures."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims
    from test_summarize import small_batch_sweep

    from normbench.summary.summarize import summarize

    small_batch_sweep(tmp_path / "small_batch")
    summarize(tmp_path / "small_batch")
    md = (tmp_path / "small_batch" / "summary.md").read_text()
    text = readme_claims.tables_section(tmp_path)
    table = md.split("## fashion_mnist · mlp · test accuracy (running statistics) by batch size\n\n")[1].split("\n\n")[0]
    assert table.startswith("| norm |") and table in text
    assert "with batch statistics" not in text and "Δ vs bn" not in text
    assert "(small_batch/sweep_fashion_mnist.png)" in text and "paired_" not in text  # docs/results/README.md's links


def test_zero_variance_and_the_monte_carlo_branch_never_give_p_zero():
    """Reference: the exact test's floor: two identical differences have no t statistic, and of the four
    sign patterns of [+1, +1] only (+, +) reaches the observed sum, p = 1/4; beyond 20 values the sampled
    p counts the observed pattern, so it is at least 1/(draws + 1)."""
    assert stats.t_test([0.01, 0.01], "greater") == 0.25
    assert stats.sign_flip([0.01] * 25, "greater", draws=1000) == pytest.approx(1 / 1001)


def test_selectors_and_metrics_are_robust(tmp_path):
    """Reference: the selector rules: `1e-5` written in YAML (a string) matches a run's 1e-05; a NaN
    metric of a completed run counts as missing; a diverged run at a seed counts at chance (10%, the
    protocol's rule: dropping it would favour the less stable side) and the note names it; a failed one
    leaves its seed out, named; more than one " - " in a metric and sides in different units are refused."""
    for seed in range(3):
        for norm, acc in (("bn", 0.70), ("gn", 0.80)):
            write_run(tmp_path, f"{norm}_{seed}", norm=norm, seed=seed, config={"norm.eps": 1e-5},
                      test_acc=acc + 0.01 * seed, train_acc=float("nan"))
    write_run(tmp_path, "gn_3", "diverged", norm="gn", seed=3, config={"norm.eps": 1e-5}, test_acc=None)
    write_run(tmp_path, "bn_3", norm="bn", seed=3, config={"norm.eps": 1e-5}, test_acc=0.7)
    write_run(tmp_path, "gn_4", "failed", norm="gn", seed=4, config={"norm.eps": 1e-5}, error="OSError")
    write_run(tmp_path, "bn_4", norm="bn", seed=4, config={"norm.eps": 1e-5}, test_acc=0.7)
    runs = find_runs(tmp_path)
    claim = {"name": "x", "a": {"norm.name": "gn", "norm.eps": "1e-5"}, "b": {"norm.name": "bn"}, "expect": "greater"}
    result = verdicts.test(claims.parse([claim], "test"), runs)[0]
    assert result.n == 4 and result.seeds == [0, 1, 2, 3]
    assert result.diffs[3] == pytest.approx(0.1 - 0.7) and result.at_chance == [str(tmp_path / "gn_3")]
    assert "a: seed 3 diverged (gn_3), scored at chance (10%)" in result.note
    assert "seed 4 failed (gn_4), left out of the pairs" in result.note
    nan = verdicts.test(claims.parse([{**claim, "metric": "train_acc"}], "test"), runs)[0]
    assert nan.n == 0 and "no runs match" in nan.note
    grad = verdicts.test(claims.parse([{**claim, "metric": "first_layer_grad_ratio"}], "test"), runs)[0]
    assert "seed 3 diverged (gn_3), left out: first_layer_grad_ratio has no chance level" in grad.note
    with pytest.raises(UserError, match="one difference"):
        claims.parse([{**claim, "metric": "a - b - c"}], "test")
    with pytest.raises(UserError, match="different units"):
        claims.parse([{**claim, "a": {**claim["a"], "metric": "first_layer_grad_ratio"}}], "test")


def test_a_diverging_lr_counts_at_chance_in_the_choice_and_the_claim(tmp_path):
    """Reference: the lr grid worked by hand. gn at lr 0.1 reaches validation 0.90 on seeds 0 and 1 and
    diverges on seed 2; at 0.01 it reaches 0.85 on all three. Dropping the diverged run, 0.1 would win every
    leave-one-out mean; at chance (0.1) it loses for seeds 0 and 1 ((0.9 + 0.1) / 2 = 0.5 < 0.85) and wins
    only for seed 2 (0.9 > 0.85), whose own run at 0.1 diverged: that seed's pair reads it at chance and
    the claim's note names it, and says the choices it reads sit at their grids' edges."""
    val = {0.01: [0.85, 0.85, 0.85], 0.1: [0.90, 0.90, None]}
    for lr, vals in val.items():
        for seed, v in enumerate(vals):
            status = "completed" if v is not None else "diverged"
            write_run(tmp_path, f"gn_{lr}_{seed}", status, norm="gn", seed=seed, config={"lr": lr}, val_acc=v,
                      test_acc=None if v is None else v - 0.01)
            write_run(tmp_path, f"bn_{lr}_{seed}", norm="bn", seed=seed, config={"lr": lr}, val_acc=0.8,
                      test_acc=0.79)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump([{"name": "gn beats bn", "a": {"norm.name": "gn"},
                                                      "b": {"norm.name": "bn"}, "expect": "greater"}]))
    s = compute(tmp_path, select="lr", claims_file=tmp_path / "c.yaml")
    assert s.tables[0].chosen["gn", "8"] == "lr=0.01 (2) 0.1 (1) ⚑"
    (r,) = s.claims
    assert r.seeds == [0, 1, 2] and r.diffs == pytest.approx([0.84 - 0.79, 0.84 - 0.79, 0.1 - 0.79])
    assert "seed 2 diverged (gn_0.1_2), scored at chance (10%)" in r.note
    # both cells chose an edge of their two-value grid (bn ties, and a tie takes the smaller lr): the note says so
    assert "reads 2 cells whose lr was chosen at its grid's edge (grids to widen)" in r.note


def test_verdict_says_what_it_rests_on_and_its_budget(tmp_path):
    """Reference: the protocol's looks worked by hand on ten pairs d = a − b (points) = 1.3, 0.7, 1.2, 0.8,
    1.0, 1.25, 0.75, 1.1, 0.9, 1.0, the claim declared by the runs (as an experiment records it) and primary,
    so tested in the shipped family: at 3 and 5 pairs the one-sided t-test (scipy) stays above its look's
    level after Holm (x 2 (m + 1): the m shipped claims and this one), at 10 pairs it is far below, and so is the
    exact test (every sign positive: 1/1024 x 2 (m + 1) < 0.0444 while m <= 21): held at look 3, resting on the exact
    test. The gn runs' validation accuracy still rises over the last half of their budget while bn's stays
    flat, so the claim's own difference moves (budget.py): from -5.0 points at epoch 3 of 5 to +5.0 at the
    last; the summary's Markdown shows the role, the verdict, the budget and the family line."""
    from normbench.summary import protocol
    from normbench.summary.show import report

    d = [1.3, 0.7, 1.2, 0.8, 1.0, 1.25, 0.75, 1.1, 0.9, 1.0]
    rising = [{"epoch": e, "acc/val": 0.5 + 0.05 * e} for e in range(6)]
    flat = [{"epoch": e, "acc/val": 0.7} for e in range(6)]
    declared = {"claims": [{"name": "gn beats bn", "a": {"norm.name": "gn"}, "b": {"norm.name": "bn"},
                            "expect": "greater", "role": "primary"}]}
    for seed, x in enumerate(d, protocol.load().seed_base):  # the protocol's seeds, which its looks read
        write_run(tmp_path, f"gn_{seed}", norm="gn", seed=seed, test_acc=0.7 + x / 100, history=rising, config=declared)
        write_run(tmp_path, f"bn_{seed}", norm="bn", seed=seed, test_acc=0.7, history=flat, config=declared)
    levels = protocol.load().levels
    k = 2 * (len(protocol.load().family) + 1)
    for n, level in zip((3, 5), levels):
        assert k * scipy_stats.ttest_1samp(d[:n], 0, alternative="greater").pvalue > level
    assert k * scipy_stats.ttest_1samp(d, 0, alternative="greater").pvalue < levels[2] and k / 1024 < levels[2]
    s = compute(tmp_path)
    (r,) = s.claims
    assert (r.verdict, r.look, r.look_n, r.rests_on) == ("held", 3, 10, "exact")
    assert r.budget == "moving toward a: -5.0 → +5.0" and r.runs == 20
    assert [at for at, _ in r.budget_path] == [0.6, 0.8, 1.0]
    assert r.p_exact == 1 / 1024 and r.p_exact_holm == pytest.approx(k / 1024)
    md = report.to_markdown(s)
    assert "| gn beats bn | primary |" in md and "| 3/3 (0.044) | held · exact | 1.00 [1.00, 1.00] |" in md
    assert md.split("| gn beats bn |")[1].split("\n")[0].endswith("| moving toward a: -5.0 → +5.0 |")
    assert s.protocol["hypotheses"] == k and s.protocol["spending"] == "obrien_fleming"
    assert f"family: shipped, protocol.yaml: looks at 3/5/10 pairs, α 0.00035/0.0052/0.044 (O'Brien-Fleming), " \
           f"Holm over {k} hypotheses" in md


def _budget_runs(root, a_history, b_history, noise=(0.0, 0.004, -0.004, 0.002, -0.002)):
    """Five seeds of gn (a) and bn (b): each run's validation history from `*_history(epoch, seed)` over epochs
    1-8, its test accuracy the last, its training accuracy 0.9 (gn) and 0.8 (bn)."""
    claim = {"claims": [{"name": "gn beats bn", "a": {"norm.name": "gn"}, "b": {"norm.name": "bn"},
                         "expect": "greater"}]}
    for seed, e in enumerate(noise):
        for norm, history, train in (("gn", a_history, 0.9), ("bn", b_history, 0.8)):
            h = [{"epoch": ep, "acc/val": history(ep, e)} for ep in range(1, 9)]
            write_run(root, f"{norm}_{seed}", norm=norm, seed=seed, test_acc=h[-1]["acc/val"], train_acc=train,
                      history=h, config=claim)
    (r,) = compute(root).claims
    return r


def test_the_budget_check_reads_the_claims_own_difference_over_the_last_half(tmp_path):
    """Reference: budget.py's rule worked by hand. Eight epochs, a validation each: the last half is epochs 4-8
    (fractions 0.5 ... 1.0). Flat: gn leads bn by 5 points at every epoch (per-seed noise +-0.4 points, which
    sets the last interval's half-width): stable. Moving: gn gains a point an epoch on a flat bn, from +2 at
    epoch 4 to +6 at epoch 8: 4 points, more than that half-width, toward a. Closing: bn gains on gn: toward b.
    Beside the verdict: each side's training accuracy, and P(a > b) as scipy's Mann-Whitney U / (n m)."""
    flat = _budget_runs(tmp_path / "flat", lambda ep, e: 0.75 + e, lambda ep, e: 0.70)
    assert flat.budget == "stable" and flat.runs == 10
    assert [round(at, 3) for at, _ in flat.budget_path] == [0.5, 0.625, 0.75, 0.875, 1.0]
    assert all(d == pytest.approx(0.05) for _, d in flat.budget_path)
    assert (flat.train_a, flat.train_b) == (0.9, 0.8)
    moving = _budget_runs(tmp_path / "moving", lambda ep, e: 0.70 + 0.01 * (ep - 2) + e, lambda ep, e: 0.70)
    assert moving.budget == "moving toward a: +2.0 → +6.0"
    closing = _budget_runs(tmp_path / "closing", lambda ep, e: 0.80 + e, lambda ep, e: 0.70 + 0.01 * ep)
    assert closing.budget == "moving toward b: +6.0 → +2.0"
    constant = _budget_runs(tmp_path / "constant", lambda ep, e: 0.75, lambda ep, e: 0.70)  # no noise at all
    assert constant.budget == "stable"  # moved 0 against a half-width of 0
    a = [0.75 + e for e in (0.0, 0.004, -0.004, 0.002, -0.002)]
    assert flat.p_improve == scipy_stats.mannwhitneyu(a, [0.70] * 5).statistic / 25 == 1.0
    lo, hi = flat.p_improve_ci
    assert lo <= flat.p_improve <= hi


def test_the_budget_check_counts_distinct_runs_and_says_what_it_cannot_check(tmp_path):
    """Reference: the record's 'padding costs naive BN' claim, whose sides read the same runs through two
    metrics (its old label said '10 of 20 runs' for 10 runs), and budget.py's rule: runs of two epochs have
    one validation in their last half, not three. Each label counts the 5 runs once."""
    claim = {"claims": [{"name": "padding costs bn", "a": {"norm.name": "bn", "metric": "test_acc"},
                         "b": {"norm.name": "bn", "metric": "test_acc_train_mode"}, "expect": "greater"}]}
    short = {"claims": [{"name": "gn beats bn", "a": {"norm.name": "gn"}, "b": {"norm.name": "bn"},
                         "expect": "greater"}]}
    for seed in range(5):
        h = [{"epoch": ep, "acc/val": 0.7} for ep in (0, 1, 2)]  # epoch 0: a pass before training, read as none
        write_run(tmp_path / "same", f"bn_{seed}", seed=seed, test_acc=0.7 + seed / 100, test_acc_train_mode=0.6,
                  history=h, config=claim)
        for norm in ("gn", "bn"):
            write_run(tmp_path / "short", f"{norm}_{seed}", norm=norm, seed=seed, test_acc=0.7, history=h,
                      config=short)
    (same,) = compute(tmp_path / "same").claims
    assert same.n == 5 and same.runs == 5
    assert same.budget == "not checkable: its sides read different metrics (test_acc, test_acc_train_mode)"
    (r,) = compute(tmp_path / "short").claims
    assert r.runs == 10
    assert r.budget == "not checkable: 10 of its 10 runs have fewer than 3 validations in the last half of their budget"


def test_a_seed_chooses_only_among_the_lrs_it_ran(tmp_path):
    """Reference: the reviewer's widened grid (/tmp/rv/sel2.py) worked by hand. gn ran lr 0.01 (validation
    0.70) and 0.03 (0.80) at seeds 0-4, and 0.09 (0.85) at seeds 3-4 only (a grid widened for round 2).
    Seeds 0-2 never ran 0.09: each chooses between 0.01 and 0.03 on the other seeds (0.70 < 0.80: 0.03) and
    keeps its run; seed 3 sees 0.09 at seed 4 (0.85) and takes it, and seed 4 likewise. Seed 5 ran only
    0.27, which no other seed ran: it is left without a choice, and the table's note says so. Every seed
    0-4 is in the claim's pairs (choosing among every lr any seed ran would give seeds 0-2 lr 0.09, which
    they never ran, and drop them from the claim)."""
    from normbench.summary import select
    from normbench.summary.labels import label_runs

    val = {0.01: 0.70, 0.03: 0.80, 0.09: 0.85, 0.27: 0.90}
    seeds = {0.01: range(5), 0.03: range(5), 0.09: (3, 4), 0.27: (5,)}
    for lr, at in seeds.items():
        for seed in at:
            write_run(tmp_path, f"gn_{lr}_{seed}", norm="gn", bs=2, seed=seed, config={"lr": lr}, val_acc=val[lr],
                      test_acc=val[lr] - 0.01)
    for seed in range(6):
        write_run(tmp_path, f"bn_{seed}", norm="bn", bs=2, seed=seed, config={"lr": 0.01}, val_acc=0.7, test_acc=0.6)
    runs = find_runs(tmp_path)
    labels = label_runs(runs, pooled=frozenset({"lr"}))
    chosen = select.choose(runs, "lr", labels)
    (gn,) = [c for cell, c in chosen.items() if cell[4] == "gn"]
    assert gn.per_seed == {0: 0.03, 1: 0.03, 2: 0.03, 3: 0.09, 4: 0.09} and gn.unchosen == [5]
    kept = sorted(int(r.config["seed"]) for r in runs if r.config["norm.name"] == "gn"
                  and select.kept_by(chosen, r, labels, "lr"))
    assert kept == [0, 1, 2, 3, 4]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump([{"name": "gn beats bn", "a": {"norm.name": "gn"},
                                                      "b": {"norm.name": "bn"}, "expect": "greater"}]))
    s = compute(tmp_path, select="lr", claims_file=tmp_path / "c.yaml")
    assert s.claims[0].seeds == [0, 1, 2, 3, 4]
    assert any("seed 5 of gn at batch 2 is left without a run: no lr it ran (0.27) ran at another seed" in note
               for note in s.tables[0].notes), s.tables[0].notes


def test_readme_verdict_says_how_many_pairs_would_decide_an_undecided_claim():
    """Reference: summary.json's fields for a primary claim undecided after the last look (verdicts._needed,
    stats.pairs_needed): the README's verdict cell carries the pairs and the side, or the search's limit."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims

    t = {"verdict": "inconclusive", "look": 3, "looks": 3, "n": 10, "needed_to": "hold", "pairs_needed": 1234}
    assert readme_claims._verdict(t, "primary") == ("**inconclusive** (look 3 of 3): ~1,234 pairs would hold it "
                                                     "(80% power, were the measured mean and SD true)")
    assert readme_claims._verdict({**t, "pairs_needed": None, "needed_to": "refute"}, "primary") == (
        "**inconclusive** (look 3 of 3): more than 100,000 pairs would be needed to refute it")
    assert readme_claims._verdict({**t, "verdict": "held", "needed_to": ""}, "primary") == "**held** (look 3 of 3)"


def test_readme_claims_record_checks_the_run_in(tmp_path, monkeypatch):
    """Reference: the layout `normbench study` writes (out/study.json, out/summary/, out/<study>/summary/,
    out/<study>/r<round>/<job>/<member>/results.json): --record copies the joint summary, each study's
    summary.md and figures but not its paired plots, every member's results.json and its job's command line
    as one runs file, <study>/runs.jsonl.gz (read back as the members were), and study.json itself, and writes
    run.json from study.json (its command, each round's seeds under the protocol it pinned, its family's hash,
    seconds per round) and the runs (their git sha); a study that has not finished is refused."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims

    out, results = tmp_path / "out", tmp_path / "results"
    monkeypatch.setattr(readme_claims, "RESULTS", results)
    (out / "summary").mkdir(parents=True)
    (out / "summary" / "summary.json").write_text(json.dumps({"claims": []}))
    (out / "summary" / "summary.md").write_text("# all\n")
    study = out / "ghost_batch"
    (study / "summary").mkdir(parents=True)
    (study / "summary" / "summary.md").write_text("# ghost_batch\n")
    for name in ("ghost_batch_fashion_mnist.png", "paired_ghost_batch_test_acc.png"):
        (study / "summary" / name).write_bytes(b"\x89PNG")
    members = [study / "r1" / "bn-0" / "lr=0.1,seed=0", study / "r2" / "bn-0" / "lr=0.1,seed=3"]
    for m in members:
        m.mkdir(parents=True)
        (m / "results.json").write_text(json.dumps({"status": "completed", "config": {"seed": 0},
                                                    "git_sha": "83e39ea0123", "test_acc": 0.8}))
        (m / "checkpoint.pt").write_bytes(b"not copied")
        (m.parent / ".hydra").mkdir(exist_ok=True)  # the job's command line, as Hydra records it
        (m.parent / ".hydra" / "overrides.yaml").write_text("- experiment=ghost_batch\n")
    pinned = {"alpha": 0.05, "looks": [3, 5, 10], "spending": "obrien_fleming", "widen_limit": 2, "seed_base": 1000}
    state = {"studies": ["ghost_batch"], "scale": "laptop", "seconds": {"1": 100.4, "2": 50.2}, "finished": None,
             "protocol": pinned, "family": {"hash": "f" * 64},
             "job_seconds": {"ghost_batch/r1/bn-0": [60.0, 50.0], "ghost_batch/r1/bn-0-lr0.4": [30.2, 25.0],
                             "ghost_batch/r2/bn-0": [50.2, 40.0]}}
    (out / "study.json").write_text(json.dumps(state))
    with pytest.raises(SystemExit, match="has not finished"):
        readme_claims.record(out)

    sittings = [{"cpu": "AMD EPYC", "cores": 2, "device": "cpu"}, {"cpu": "Intel Xeon", "cores": 16,
                                                                    "device": "cuda (NVIDIA H200)"}]
    (out / "study.json").write_text(json.dumps({**state, "finished": "every primary claim decided", "sittings": sittings}))
    readme_claims.record(out)
    copied = sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file())
    assert copied == ["ghost_batch/ghost_batch_fashion_mnist.png", "ghost_batch/runs.jsonl.gz",
                      "ghost_batch/summary.md", "run.json", "study.json", "summary.json", "summary.md"]
    runs_file = results / "ghost_batch" / "runs.jsonl.gz"
    assert [(str(r.path.relative_to(runs_file)), r.status, r.study) for r in find_runs(runs_file)] == [
        ("r1/bn-0/lr=0.1,seed=0", "completed", "ghost_batch"), ("r2/bn-0/lr=0.1,seed=3", "completed", "ghost_batch")]
    run = json.loads((results / "run.json").read_text())
    assert run["command"] == "normbench study ghost_batch scale=laptop" and run["git_sha"] == "83e39ea"
    assert run["wall_s"] == 151 and run["stopped"] == "every primary claim decided"
    assert run["seeds"] == {"1": "1000-1002", "2": "1003-1004", "3": "1005-1009"} and run["family_hash"] == "f" * 64
    assert run["seconds_per_study"] == {"ghost_batch": {"seconds": 140.4, "planned": 115.0, "by_round": {
        "1": {"seconds": 90.2, "planned": 75.0}, "2": {"seconds": 50.2, "planned": 40.0}}}}
    made = readme_claims.run_section(results)  # docs/results/README.md's account of it, from run.json alone
    assert "`normbench study ghost_batch scale=laptop` (`scripts/reproduce.sh`), its runs at git 83e39ea" in made
    assert "| 2 |  | Intel Xeon | 16 | cuda (NVIDIA H200) |  |  |  |" in made, made
    assert ("Training wall time, jobs side by side (calibrations, looks and summaries not counted): 2 min 31 s in all "
            "(round 1: 1 min 40 s, round 2: 50 s).") in made
    assert "| ghost_batch | 2 min 20 s | 1 min 55 s | 1.22 |" in made, made
    widened = [{"study": "ghost_batch", "base": "bn-0", "lr": 0.4, "round": 1}]
    (results / "run.json").write_text(json.dumps({**run, "widened": widened}))
    assert "The lr values widening added (docs/protocol.md): ghost_batch/bn-0 lr 0.4 (round 1)." in \
        readme_claims.run_section(results)
    (results / "run.json").write_text(json.dumps({"command": "OUT=outputs/reproduce scripts/reproduce.sh"}))
    assert "No record made by `normbench study` is checked in" in readme_claims.run_section(results)  # none made by it
    assert run["machine"] == ("AMD EPYC (2 cores, trained on cpu) and Intel Xeon (16 cores, trained on cuda "
                              "(NVIDIA H200))")
    assert run["sittings"] == sittings and "s on AMD EPYC (2 cores, trained on cpu) and Intel" in readme_claims._source(run, "")
