"""A --claims file is a family of its own (normbench/summary/claims.py's load_file, protocol.py's
of_claims_file, docs/protocol.md): Holm over its own hypotheses at one look over the seeds run, or at the
looks the file declares; and the terminal's claims table (show/claims_table.py), which fits 120 columns.
The runs are results.json files written here (test_summarize.write_run), not trained."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from scipy import stats as scipy_stats
from conftest import normbench_cli
from test_summarize import write_run

from normbench.errors import UserError
from normbench.summary import claims, protocol
from normbench.summary.show import claims_table, report
from normbench.summary.summarize import compute

REPO = Path(__file__).resolve().parents[1]

# Per-seed test accuracies, in points: gn beats bn by about 3 at every seed, ln sits within noise of gn.
BN = [70.0, 71.0, 69.5, 70.5, 70.0]
GN = [73.0, 74.5, 72.0, 73.2, 73.4]
LN = [73.3, 74.0, 72.6, 73.0, 73.9]


def sweep(root: Path, seeds=range(5)) -> None:
    for seed in seeds:
        for norm, acc in (("bn", BN), ("gn", GN), ("ln", LN)):
            write_run(root, f"{norm}_{seed}", norm=norm, seed=seed, test_acc=acc[seed] / 100,
                      history=[{"epoch": e, "acc/val": acc[seed] / 100} for e in range(1, 7)])  # flat


def claims_file(root: Path, items: list[dict], protocol_: dict | None = None) -> Path:
    path = root / "mine.yaml"
    path.write_text(yaml.safe_dump(items if protocol_ is None else {"protocol": protocol_, "claims": items}))
    return path


GN_BN = {"name": "GN beats BN", "a": {"norm.name": "gn"}, "b": {"norm.name": "bn"}, "expect": "greater"}
LN_GN = {"name": "LN beats GN", "a": {"norm.name": "ln"}, "b": {"norm.name": "gn"}, "expect": "greater"}


def one_sided(d: list[float], alternative: str) -> float:
    return scipy_stats.ttest_1samp(d, 0.0, alternative=alternative).pvalue


def test_a_claims_file_without_roles_is_its_own_family_holm_by_hand(tmp_path):
    """Reference: Holm (1979) worked by hand over the file's 2 claims x 2 hypotheses, at one look over the
    5 seeds run and α 0.05 (the file declares no protocol). d(GN − BN) = 3.0, 3.5, 2.5, 2.7, 3.4 points:
    mean 3.02, sd 0.432, t = 3.02 / (0.432 / √5) = 15.6 on 4 df, p1 = 4.9e-5 (scipy); its opposite p2 ≈ 1.
    d(LN − GN) = 0.3, -0.5, 0.6, -0.2, 0.5: mean 0.14, sd 0.472, t = 0.66, p3 = 0.27, its opposite p4 = 0.73.
    Sorted p1 < p3 < p4 < p2, Holm multiplies them by 4, 3, 2, 1 (each at least the one before):
    4 p1 = 2.0e-4 < 0.05, held; 3 p3 = 0.82 and 2 p4 = 1.46 -> 1 (capped), both above 0.05: LN beats GN
    inconclusive. The shipped
    family's hypotheses are not in it: with them, GN − BN's p would be multiplied by 2 (m + 2), not 4."""
    sweep(tmp_path / "runs")
    s = compute(tmp_path / "runs", claims_file=claims_file(tmp_path, [GN_BN, LN_GN]))
    gn_bn, ln_gn = s.claims
    d1 = [g - b for g, b in zip(GN, BN)]
    d2 = [x - g for x, g in zip(LN, GN)]
    p1, p2, p3, p4 = one_sided(d1, "greater"), one_sided(d1, "less"), one_sided(d2, "greater"), one_sided(d2, "less")
    assert p1 < p3 < p4 < p2 and p1 == pytest.approx(4.9e-5, rel=0.02) and p3 == pytest.approx(0.27, abs=0.005)
    assert gn_bn.p_holm == pytest.approx(4 * p1, rel=1e-9)
    assert ln_gn.p_holm == pytest.approx(max(4 * p1, 3 * p3), rel=1e-9)
    assert ln_gn.p_refute == pytest.approx(min(1.0, max(3 * p3, 2 * p4)), rel=1e-9)
    assert gn_bn.p_refute == pytest.approx(1.0)
    assert (gn_bn.verdict, ln_gn.verdict) == ("held", "inconclusive")
    assert "undecided at its one look; about" in ln_gn.note  # and how many pairs would decide it
    assert {r.role for r in s.claims} == {"primary"}  # confirmatory by default in a --claims file
    assert (gn_bn.look, gn_bn.looks, gn_bn.level, gn_bn.look_seeds) == (1, 1, 0.05, [0, 1, 2, 3, 4])
    assert s.protocol["name"] == "your claims" and s.protocol["source"] == "mine.yaml"
    assert s.protocol["family"] == [["", "GN beats BN"], ["", "LN beats GN"]] and s.protocol["hypotheses"] == 4
    assert claims_table.family_line(s) == ("family: your claims, mine.yaml: one look at every seed, α 0.05, "
                                           "Holm over 4 hypotheses")


def test_a_refuted_claim_and_an_exploratory_one(tmp_path):
    """Reference: the same pairs. "BN beats GN" is refuted: its opposite (GN − BN > 0 read from the other
    side) has p = p1 above, Holm x 2 over the family of this claim alone (LN's claim says
    `role: exploratory`, so it leaves the family): 2 p1 < 0.05. The exploratory claim keeps its own
    unadjusted p and no verdict."""
    sweep(tmp_path / "runs")
    bn_gn = {**GN_BN, "name": "BN beats GN", "a": GN_BN["b"], "b": GN_BN["a"]}
    s = compute(tmp_path / "runs", claims_file=claims_file(tmp_path, [bn_gn, {**LN_GN, "role": "exploratory"}]))
    refuted, exploratory = s.claims
    p1 = one_sided([g - b for g, b in zip(GN, BN)], "greater")
    assert refuted.verdict == "refuted" and refuted.p_refute == pytest.approx(2 * p1, rel=1e-9)
    assert exploratory.verdict == "exploratory" and exploratory.p_holm is None
    assert exploratory.p == pytest.approx(one_sided([x - g for x, g in zip(LN, GN)], "greater"), rel=1e-9)
    assert s.protocol["hypotheses"] == 2


def test_a_declared_protocol_is_used_with_its_looks(tmp_path):
    """Reference: the file's `protocol: {looks: [3, 5], spending: bonferroni}`: levels α/2 = 0.025 each
    (protocol.levels). Look 1 reads seeds 0-2: d = 3.0, 3.5, 2.5, t = 10.4 on 2 df, p1 = 0.0046 (scipy),
    Holm x 2 (this claim alone) = 0.0091 < 0.025: held at look 1 of 2, on 3 pairs, whatever seeds 3-4
    say. With seeds 0-3 only, look 2 (seeds 0-4) has not been reached; with seeds 0-1 only, no look has,
    and the note says which seeds it waits for."""
    sweep(tmp_path / "runs")
    declared = {"looks": [3, 5], "spending": "bonferroni"}
    (r,) = compute(tmp_path / "runs", claims_file=claims_file(tmp_path, [GN_BN], declared)).claims
    p1 = one_sided([g - b for g, b in zip(GN[:3], BN[:3])], "greater")
    assert 2 * p1 < 0.025
    assert (r.verdict, r.look, r.looks, r.look_n, r.look_seeds, r.level) == ("held", 1, 2, 3, [0, 1, 2], 0.025)
    assert r.p_holm == pytest.approx(2 * p1, rel=1e-9)
    sweep(tmp_path / "two", seeds=range(2))
    (early,) = compute(tmp_path / "two", claims_file=claims_file(tmp_path, [GN_BN], declared)).claims
    assert early.verdict == "inconclusive" and early.look is None
    assert "no look yet: look 1 reads seeds 0-2: seed 2 has no finished run yet" in early.note
    s = compute(tmp_path / "runs", claims_file=claims_file(tmp_path, [GN_BN], declared))
    assert claims_table.family_line(s) == ("family: your claims, mine.yaml: looks at 3/5 pairs, α 0.025/0.025 "
                                           "(Bonferroni), Holm over 2 hypotheses")


@pytest.mark.parametrize("raw, message", [
    ({"protocol": {"looks": [5, 3]}, "claims": [GN_BN]}, "looks=[5, 3] must increase"),
    ({"protocol": {"looks": "3, 5"}, "claims": [GN_BN]}, "looks='3, 5' is not a list"),
    ({"protocol": {"looks": []}, "claims": [GN_BN]}, "looks=[] is not a list of pair counts"),
    ({"protocol": {"widen_limit": 2}, "claims": [GN_BN]}, "normbench study protocol=FILE"),
    ({"protocol": {"alpha": 1.5}, "claims": [GN_BN]}, "alpha=1.5 is not in (0, 1)"),
    ({"protocol": {"spending": "pocock"}, "claims": [GN_BN]}, "spending='pocock'"),
    ({"protocl": {"looks": [3]}, "claims": [GN_BN]}, "unknown key(s) protocl"),
])
def test_a_malformed_protocol_is_one_line_naming_the_file(tmp_path, raw, message):
    """Reference: normbench's user errors: one line, naming the file and the key at fault, with a fix."""
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError) as e:
        claims.load_file(tmp_path / "mine.yaml")
    assert message in str(e.value) and "mine.yaml" in str(e.value) and "\n" not in str(e.value)


def test_the_shipped_family_is_untouched_by_a_claims_file():
    """Reference: protocol.yaml and the experiments: loading a user's file leaves the shipped protocol as it
    was (its family every shipped primary claim, its looks 3, 5, 10), named so in summary.json."""
    shipped = protocol.load()
    assert shipped.name == "shipped" and shipped.source == "protocol.yaml" and shipped.looks == (3, 5, 10)
    assert shipped.describe()["hypotheses"] == 2 * len(protocol.shipped_family())


def test_the_example_claims_file_is_its_own_family():
    """Reference: docs/examples/claims.yaml as shipped: every claim confirmatory (no role), one look at every
    seed of its sweep, α 0.05."""
    own = claims.load_file(REPO / "docs" / "examples" / "claims.yaml")
    assert own.claims and {c.role for c in own.claims} == {"primary"}
    assert (own.protocol.looks, own.protocol.levels, own.protocol.name) == ((), (0.05,), "your claims")
    assert len(own.protocol.family) == len(own.claims)


# --- the terminal ---------------------------------------------------------------------------------------

LONG = ("CNN BN at 8 values per channel (1 position per image, batch 8) loses to every position, under the "
        "statistics it trained with")


def many_claims(tmp_path: Path) -> Path:
    """Nine claims with long names, a difference in differences, an equivalence margin, and a claim whose
    difference still moves at the end of its budget: the widest the table's cells get."""
    sweep(tmp_path / "runs")
    for seed in range(5):  # a history whose validation accuracy still rises against GN's flat one: moving
        write_run(tmp_path / "runs", f"rms_{seed}", norm="rms", seed=seed, test_acc=0.7,
                  history=[{"epoch": e, "acc/val": 0.5 + 0.05 * e} for e in range(1, 7)])
    items = [{**GN_BN, "name": f"{LONG} ({i})"} for i in range(5)]
    items += [{"name": "DiD", "a": {"norm.name": "gn", "minus": {"norm.name": "ln"}},
               "b": {"norm.name": "bn", "minus": {"norm.name": "ln"}}, "expect": "greater", "margin": -10.0},
              {**LN_GN, "name": "LN within 1 point of GN", "expect": "equivalent", "margin": 1.0},
              {"name": "RMS loses to GN", "a": {"norm.name": "rms"}, "b": {"norm.name": "gn"}, "expect": "less"},
              {**LN_GN, "role": "exploratory"}]
    return claims_file(tmp_path, items)


def claims_lines(text: str) -> list[str]:
    """The claims table's lines in a summary's terminal output: from its title to the legend's first line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("claims"))
    end = next(i for i, line in enumerate(lines) if line.startswith("family: "))
    return lines[start:end]


@pytest.mark.parametrize("columns", [120, 80])
def test_the_terminal_claims_table_fits_the_terminal(tmp_path, monkeypatch, columns):
    """Reference: a terminal of COLUMNS=120 and 80 (rich reads COLUMNS): no line of the claims table is wider,
    no claim's name is cut (it wraps), the verdicts are all there; at 80 the interval gives way first. The
    legend follows the table in a few lines, each shorter than 120 characters."""
    s = compute(tmp_path / "runs", claims_file=many_claims(tmp_path))
    monkeypatch.setenv("COLUMNS", str(columns))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system=None)
    assert console.width == columns
    report.print_summary(s, console)
    text = out.getvalue()
    table = claims_lines(text)
    assert max(map(len, table)) <= columns, "\n".join(table)
    assert "…" not in "\n".join(table)
    body = "\n".join(table)  # a name wraps at its words: each word whole, each claim's number there
    assert body.count("statistics") == 5 and all(f"({i})" in body for i in range(5))
    assert len(re.findall(r"held · t-test", body)) >= 7 and "moving" in body and "ΔΔ > -10" in body
    assert ("95% CI" in table[1]) == (columns == 120)
    lines = text.splitlines()
    legend = lines[lines.index(next(x for x in lines if x.startswith("family: "))):]
    legend = legend[:next(i for i, x in enumerate(legend) if x.startswith("- "))]
    assert 4 <= len(legend) <= 16 and (columns == 80 or max(map(len, legend)) < 120), legend
    assert text.index("family: your claims") > text.index("claims")


def test_a_pipe_gets_the_same_120_column_table_and_wide_gets_every_statistic(tmp_path):
    """Reference: print_summary's console off a terminal is 200 columns wide: the claims table stays within
    120 all the same. `--wide` prints summary.md's every column (bootstrap, exact p, look's α, the
    hypothesis written out) at its natural width, and each claim's cells."""
    s = compute(tmp_path / "runs", claims_file=many_claims(tmp_path))
    out = io.StringIO()
    report.print_summary(s, Console(file=out, width=80, color_system=None))  # not a terminal
    assert max(map(len, claims_lines(out.getvalue()))) <= 120
    wide = io.StringIO()
    report.print_summary(s, Console(file=wide, width=120, force_terminal=True, color_system=None), wide=True)
    text = wide.getvalue()
    assert "bootstrap" in text and "exact p (Holm)" in text and "1/1 (0.05)" in text
    assert "(a − a′) − (b − b′) > -10" in text and "a = norm.name=gn (test_acc)" in text
    assert max(map(len, claims_lines(text))) > 120  # wide: the lines run on rather than squeeze the columns


def test_summarize_wide_on_the_command_line(tmp_path):
    """`normbench summarize SWEEP --claims FILE --wide`: the full table (bootstrap, exact p), the family line."""
    sweep(tmp_path / "runs")
    r = normbench_cli("summarize", str(tmp_path / "runs"), "--no-plots", "--wide", "--claims",
                      str(claims_file(tmp_path, [GN_BN, LN_GN])), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "bootstrap" in r.stdout and "exact p (Holm)" in r.stdout
    assert "family: your claims, mine.yaml: one look at every seed, α 0.05, Holm over 4 hypotheses" in r.stdout
