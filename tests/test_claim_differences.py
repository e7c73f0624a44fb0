"""A claim side that subtracts a cell (`minus`, normbench/summary/claims.py): the difference in differences
(BN(2) − BN(32)) − (GN(2) − GN(32)) paired by seed, checked against the same numbers worked by hand and
against the t-test and sign-flip test written out independently; what a study trains and reads for it; and
the late-epoch readout `history[-k:].<key>` (the mean of a list's last k entries)."""

import itertools
import statistics

import pytest
from scipy import stats as scipy_stats
from test_summarize import write_run

from normbench.errors import UserError
from normbench.summary import claims, metrics, verdicts
from normbench.summary.discover import find_runs
from normbench.summary.show import claims_table

# Test accuracies per seed, chosen so that BN's change and GN's change differ by seed (numbers a reader can
# check): BN 2 / BN 32 / GN 2 / GN 32.
ACC = {
    0: (0.600, 0.830, 0.820, 0.810),
    1: (0.640, 0.835, 0.818, 0.812),
    2: (0.580, 0.829, 0.826, 0.815),
    3: (0.610, 0.840, 0.821, 0.809),
}
# By hand, seed 0: (0.600 − 0.830) − (0.820 − 0.810) = −0.230 − 0.010 = −0.240; seed 1: −0.195 − 0.006 = −0.201;
# seed 2: −0.249 − 0.011 = −0.260; seed 3: −0.230 − 0.012 = −0.242.
HAND = [-0.240, -0.201, -0.260, -0.242]
DID = {"name": "BN loses more than GN from batch 32 to 2", "expect": "less",
       "a": {"norm.name": "bn", "batch_size": 2, "minus": {"norm.name": "bn", "batch_size": 32}},
       "b": {"norm.name": "gn", "batch_size": 2, "minus": {"norm.name": "gn", "batch_size": 32}}}


def _sweep(root, seeds=ACC):
    for seed, accs in seeds.items():
        for (norm, bs), acc in zip((("bn", 2), ("bn", 32), ("gn", 2), ("gn", 32)), accs):
            write_run(root, f"{norm}_{bs}_{seed}", norm=norm, bs=bs, seed=seed, test_acc=acc)


def _enumerate(d, expect, margin=0.0):
    """The sign-flip p written the long way: every sign pattern, counted (as tests/test_claims.py)."""
    x = [v - margin for v in d]
    if expect == "less":
        x = [-v for v in x]
    patterns = list(itertools.product((1, -1), repeat=len(x)))
    return sum(sum(s * v for s, v in zip(signs, x)) >= sum(x) - 1e-12 for signs in patterns) / len(patterns)


def test_difference_in_differences_matches_the_hand_computation(tmp_path):
    """Reference: HAND above, each seed's four numbers subtracted by hand; the p-values from scipy's
    one-sample t-test on HAND and the 2^4 sign patterns counted, independently of stats.py."""
    _sweep(tmp_path)
    (r,) = verdicts.test(claims.parse([DID], "test"), find_runs(tmp_path))
    assert r.seeds == [0, 1, 2, 3] and r.diffs == pytest.approx(HAND, abs=1e-12)
    assert r.mean_a == pytest.approx(statistics.fmean(a - b for a, b, _, _ in ACC.values()))  # BN's change
    assert r.mean_b == pytest.approx(statistics.fmean(c - d for _, _, c, d in ACC.values()))  # GN's change
    assert r.estimate == pytest.approx(statistics.fmean(HAND)) == pytest.approx(-0.23575)
    assert r.p == pytest.approx(scipy_stats.ttest_1samp(HAND, 0.0, alternative="less").pvalue, rel=1e-9)
    assert r.p_against == pytest.approx(scipy_stats.ttest_1samp(HAND, 0.0, alternative="greater").pvalue, rel=1e-9)
    assert r.p_exact == _enumerate(HAND, "less") == 1 / 16  # every difference negative: only the observed pattern
    lo, hi = scipy_stats.t.interval(0.95, 3, loc=statistics.fmean(HAND), scale=scipy_stats.sem(HAND))
    assert r.ci == pytest.approx((lo, hi), rel=1e-9)
    # a margin counts in the difference in differences' points, as for any claim
    (m,) = verdicts.test(claims.parse([{**DID, "margin": -20.0}], "test"), find_runs(tmp_path))
    assert m.p == pytest.approx(scipy_stats.ttest_1samp(HAND, -0.20, alternative="less").pvalue, rel=1e-9)
    assert m.p_exact == _enumerate(HAND, "less", -0.20)


def test_a_seed_without_all_four_runs_leaves_the_pairs(tmp_path):
    """Reference: the pairing rule: a seed enters only where the side and its minus both gave a number; a
    failed minus run leaves its seed out (named), a diverged one counts at chance (10%), as for any cell."""
    _sweep(tmp_path)
    write_run(tmp_path, "gn_32_4", "failed", norm="gn", bs=32, seed=4, error="OSError")
    for name, norm, bs in (("bn_2_4", "bn", 2), ("bn_32_4", "bn", 32), ("gn_2_4", "gn", 2)):
        write_run(tmp_path, name, norm=norm, bs=bs, seed=4, test_acc=0.7)
    write_run(tmp_path, "bn_32_5", "diverged", norm="bn", bs=32, seed=5, test_acc=None)
    for name, norm, bs, acc in (("bn_2_5", "bn", 2, 0.6), ("gn_2_5", "gn", 2, 0.82), ("gn_32_5", "gn", 32, 0.81)):
        write_run(tmp_path, name, norm=norm, bs=bs, seed=5, test_acc=acc)
    (r,) = verdicts.test(claims.parse([DID], "test"), find_runs(tmp_path))
    assert r.seeds == [0, 1, 2, 3, 5]
    assert r.diffs[-1] == pytest.approx((0.6 - 0.1) - (0.82 - 0.81))  # BN at 32 diverged: scored at chance
    assert "b: minus: seed 4 failed (gn_32_4), left out of the pairs" in r.note
    assert "seed 4 without a run of both the side and its minus, left out" in r.note
    assert "a: minus: seed 5 diverged (bn_32_5), scored at chance (10%)" in r.note
    assert r.at_chance == [str(tmp_path / "bn_32_5")]
    (none,) = verdicts.test(claims.parse([{**DID, "b": {**DID["b"], "minus": {"norm.name": "rms"}}}], "test"),
                            find_runs(tmp_path))
    assert none.n == 0 and "no runs match its minus" in none.note


def test_a_study_trains_and_reads_the_subtracted_cells(tmp_path):
    """Reference: the four cells by name: the claim selects all four (not only a and b), a job of the minus
    cell is one the claim reads (study/jobs.py asks `selects`), and the cells
    whose lr choices the claim reads (protocol.widen) are all four."""
    from normbench.summary.labels import label_runs

    (c,) = claims.parse([DID], "test")
    assert c.selectors() == [{"norm.name": "bn", "batch_size": 2}, {"norm.name": "bn", "batch_size": 32},
                             {"norm.name": "gn", "batch_size": 2}, {"norm.name": "gn", "batch_size": 32}]
    assert verdicts.selects(c.a, {"norm.name": "bn", "batch_size": 32})
    assert not verdicts.selects(c.a, {"norm.name": "gn", "batch_size": 32})
    _sweep(tmp_path)
    runs = find_runs(tmp_path)
    labels = label_runs(runs, pooled=frozenset({"lr"}))
    assert {(cell[4], cell[5]) for cell in verdicts.cells_read(c, runs, labels)} == \
        {("bn", 2), ("bn", 32), ("gn", 2), ("gn", 32)}
    # a look waits for the minus cells' runs too
    assert verdicts._not_run(c, [r for r in runs if r.config["batch_size"] == 2], [0, 1]) == [0, 1]


def test_what_a_claim_reads_cell_by_cell():
    """Reference: the declaration written out by hand: each side and each `minus` is a cell read with its
    own metric (a side's or the claim's), and the results.json keys a metric reads are its terms' first
    names, the forms metrics.read documents (a dotted path, a difference, a late-epochs mean)."""
    (c,) = claims.parse([{**DID, "metric": "test_acc_train_mode",
                          "b": {**DID["b"], "metric": "history[-3:].acc/val"}}], "test")
    assert c.readings() == [
        {"norm.name": "bn", "batch_size": 2, "metric": "test_acc_train_mode"},
        {"norm.name": "bn", "batch_size": 32, "metric": "test_acc_train_mode"},
        {"norm.name": "gn", "batch_size": 2, "metric": "history[-3:].acc/val"},
        {"norm.name": "gn", "batch_size": 32, "metric": "history[-3:].acc/val"}]
    assert metrics.terms("test_acc_by_length.42 - test_acc_by_length_precise_bn.28") == \
        ["test_acc_by_length.42", "test_acc_by_length_precise_bn.28"]
    assert metrics.terms("history[-3:].acc/val") == ["history[-3:].acc/val"]


def test_how_the_claim_is_shown():
    """Reference: the wording summarize and the generated docs use: (a − a′) − (b − b′) for the hypothesis,
    each side as its cell minus the cell it subtracts."""
    (c,) = claims.parse([DID], "test")
    assert claims_table.hypothesis(c) == "(a − a′) − (b − b′) < 0"
    assert claims_table._side(c, c.a) == "(norm.name=bn batch_size=2 (test_acc)) − (norm.name=bn batch_size=32 (test_acc))"
    plain = claims.Claim("x", {"norm.name": "gn"}, {"norm.name": "bn"}, "equivalent", 1.0)
    assert claims_table.hypothesis(plain) == "|a − b| < 1"


@pytest.mark.parametrize("minus, message", [
    ("bn", "`a.minus` must select one cell"),
    ({}, "`a.minus` must select one cell"),
    ({"metric": "test_acc"}, "`a.minus` must select one cell"),
    ({"norm.name": "bn", "minus": {"norm.name": "gn"}}, "no minus of its own"),
    ({"norm.nme": "bn"}, "`a.minus` selects on unknown key(s) norm.nme"),
    ({"norm.name": "bn", "metric": "first_layer_grad_ratio"}, "different units"),
])
def test_malformed_minus_is_a_one_line_error(minus, message):
    with pytest.raises(UserError) as e:
        claims.parse([{**DID, "a": {**DID["a"], "minus": minus}}], "claims.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_note_is_words_not_part_of_the_claim():
    """Reference: the declared() rule: two recordings of a claim that differ only in its note are one claim."""
    a, b = (claims.parse([{**DID, "note": n}], "x")[0] for n in ("one  wording\n", "another"))
    assert a == b and a.note == "one wording"
    with pytest.raises(UserError, match="note must be a sentence"):
        claims.parse([{**DID, "note": 3}], "x")


def test_late_epochs_readout_is_the_mean_of_the_last_entries():
    """Reference: the arithmetic: history's last 3 epochs' acc/val are 0.60, 0.66, 0.57: their mean 0.61;
    fewer epochs than asked, or one without the key, gives no number (the run leaves the pairs)."""
    res = {"history": [{"acc/val": 0.50}, {"acc/val": 0.60}, {"acc/val": 0.66}, {"acc/val": 0.57}]}
    assert metrics.read(res, "history[-3:].acc/val") == pytest.approx(0.61)
    assert metrics.read(res, "history[-1:].acc/val") == pytest.approx(0.57)
    assert metrics.read(res, "history[-5:].acc/val") is None
    assert metrics.read({"history": [{"acc/val": 0.5}, {"loss/val": 0.3}]}, "history[-2:].acc/val") is None
    assert metrics.read(res, "history[-2:].acc/val - history[-4:].acc/val") == pytest.approx(0.615 - 0.5825)
    assert metrics.is_accuracy("history[-3:].acc/val")  # an accuracy: a diverged run counts at chance
    (c,) = claims.parse([{**DID, "metric": "history[-3:].acc/val"}], "x")
    assert c.scale == 100.0


OWNED = ("ghost_batch", "small_batch", "converged", "variable_length")  # the studies issue 42 reviewed


@pytest.mark.slow  # ~1-3 min: Hydra composes every job of four studies at two scales
def test_every_cell_a_claim_reads_is_in_its_studys_plan():
    """Reference: the study files: at laptop scale every cell of every claim (primary and exploratory, the
    cells a side subtracts included) is selected by a job of the study's sweeps, so `normbench study` trains
    what the claim reads; at quick scale, every primary claim's cells."""
    from normbench.study import jobs, spec
    from normbench.study.rounds import declared_claims

    for study in spec.resolve(list(OWNED)):
        declared = declared_claims(study)
        for scale in ("quick", "laptop"):
            configs = [j.config for j in jobs.study_jobs(study, scale)]
            for c in declared:
                if scale == "quick" and c.role != "primary":
                    continue
                for sel in c.selectors():
                    assert any(verdicts._picks(sel, cfg) for cfg in configs), \
                        f"{study.name} at scale={scale}: no job selects {sel} of {c.name!r}"
