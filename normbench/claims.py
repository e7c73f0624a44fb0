"""Claims: hypotheses an experiment declares before it runs, tested as one family when it is summarized.

    claims:                                   # in an experiment's YAML, or a file for `summarize --claims`
      - name: GN beats BN at batch 2
        a: {norm.name: gn, batch_size: 2}     # the runs of each side, by any config keys
        b: {norm.name: bn, batch_size: 2}
        expect: greater                       # greater | less | equivalent
        margin: 0.0                           # points (x 100 for accuracies); equivalent: the bound, required
        metric: test_acc                      # any number in results.json; a dotted path reaches into
                                              # a dict (test_acc_by_length.42), "x - y" is a run's own
                                              # difference; a side may set its own (a: {..., metric: ...});
                                              # lr_sensitivity: a seed's accuracy lost over its lr grid
                                              # (lr_sensitivity.py), from all the side's runs at that seed

    results = test(parse(raw, "claims.yaml"), runs)   # summarize does this

Each side's runs are paired by seed (a claim holding more than one run at a seed is not tested, with the
keys that tell them apart). For each claim, the per-seed differences a - b give: the mean, its 95%
t-interval and percentile-bootstrap interval, the one-sided paired t-test (greater/less than the margin)
or TOST (equivalent within it), the exact sign-flip p of the same hypothesis, and Holm's correction over
the summary's declared claims (stats.py). A run of a side that diverged or failed leaves its seed out of
the pairs, and the note says so. The verdict:

- held: the expected alternative is significant after Holm (p_holm < 0.05);
- refuted: the opposite one (less/greater than the margin; outside +-margin for `equivalent`) is
  significant after Holm; the family is every declared claim's two hypotheses (2 m p-values), so no
  verdict of either kind is wrong with probability above 0.05, whatever ran;
- inconclusive: neither, or fewer than two pairs. A note says when n is too small for the exact test to
  reach 0.05 after Holm (2^-n x the family's size), so that a `held` rests on the t-test's normality.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from normbench import lr_sensitivity, stats
from normbench.config import Config, flatten, to_dict
from normbench.errors import UserError
from normbench.tables import Run, fmt_value

ALPHA = round(1 - stats.LEVEL, 12)  # 0.05, not 0.050000000000000044
VERDICTS = ("held", "refuted", "inconclusive")
FIELDS = ("name", "a", "b", "expect", "margin", "metric")


@dataclass(frozen=True)
class Claim:
    name: str
    a: dict[str, Any]  # config key -> value (and optionally metric)
    b: dict[str, Any]
    expect: str  # greater | less | equivalent
    margin: float = 0.0  # in points for accuracies (the metric's own unit otherwise)
    metric: str = "test_acc"
    study: str = ""  # declared by this experiment: it selects among its runs only ('' : every run)

    def metric_of(self, side: dict[str, Any]) -> str:
        return str(side.get("metric", self.metric))

    @property
    def scale(self) -> float:
        """Accuracies are fractions shown in percent: a margin in points is margin / 100 of the metric."""
        metric = self.metric_of(self.a)
        return 100.0 if "acc" in metric or metric == lr_sensitivity.METRIC else 1.0


@dataclass
class ClaimResult:
    claim: Claim
    n: int = 0
    seeds: list[int] = field(default_factory=list)
    mean_a: float | None = None
    mean_b: float | None = None
    estimate: float | None = None  # mean of a - b, in the metric's unit
    ci: tuple[float, float] | None = None  # 95% t-interval of the estimate
    bootstrap: tuple[float, float] | None = None  # 95% percentile bootstrap interval
    p: float | None = None  # one-sided t-test or TOST of the expected alternative
    p_holm: float | None = None  # Holm over the family (every claim's hypothesis and its opposite)
    p_exact: float | None = None  # sign-flip test of the same alternative
    p_exact_holm: float | None = None  # ... Holm over the claims' exact p's
    p_refute: float | None = None  # the opposite alternative, Holm-adjusted in the same family
    verdict: str = "inconclusive"
    note: str = ""

    def row(self) -> dict[str, Any]:
        """The fields of summary.json's `claims` and claims.csv."""
        c = self.claim
        lo, hi = self.ci or (None, None)
        blo, bhi = self.bootstrap or (None, None)
        return {"name": c.name, "study": c.study, "a": c.a, "b": c.b, "expect": c.expect, "margin": c.margin,
                "metric": c.metric_of(c.a), "n": self.n, "seeds": self.seeds, "mean_a": self.mean_a, "mean_b": self.mean_b,
                "metric_b": c.metric_of(c.b), "estimate": self.estimate, "ci_low": lo, "ci_high": hi,
                "bootstrap_low": blo, "bootstrap_high": bhi, "p": self.p, "p_holm": self.p_holm, "p_exact": self.p_exact,
                "p_exact_holm": self.p_exact_holm, "p_refute_holm": self.p_refute, "verdict": self.verdict,
                "note": self.note}


def _known_keys() -> set[str]:
    return set(flatten(to_dict(Config()))) | {"metric"}


def parse(raw: Any, source: str, study: str = "") -> list[Claim]:
    """Claims from a YAML list (an experiment's `claims:`, or a --claims file); a UserError naming the
    claim and the field for anything malformed."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UserError(f"{source}: claims must be a list of claims (got {type(raw).__name__})",
                        "write `claims:` followed by `- name: ...` items")
    known, out, names = _known_keys(), [], set()
    for i, item in enumerate(raw):
        where = f"{source}: claim {i + 1}"
        if not isinstance(item, dict):
            raise UserError(f"{where} is not a mapping", "give each claim name, a, b and expect")
        if unknown := set(item) - set(FIELDS) - {"study"}:
            raise UserError(f"{where} has unknown field(s) {', '.join(sorted(unknown))}",
                            f"use {', '.join(FIELDS)}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise UserError(f"{where} has no name", "give it `name: <what it says>`")
        if name in names:
            raise UserError(f"{source}: two claims are named {name!r}", "give each claim its own name")
        names.add(name)
        where = f"{source}: claim {name!r}"
        for side in ("a", "b"):
            sel = item.get(side)
            if not isinstance(sel, dict) or not sel:
                raise UserError(f"{where}: `{side}` must select runs by config keys",
                                f"e.g. {side}: {{norm.name: bn, batch_size: 2}}")
            if bad := sorted(set(sel) - known):
                raise UserError(f"{where}: `{side}` selects on unknown key(s) {', '.join(bad)}",
                                "use config keys as `normbench train --cfg job` prints them, dotted (norm.name)")
        metrics = [str(sel.get("metric", item.get("metric", "test_acc"))) for sel in (item["a"], item["b"])]
        if any(m.count(" - ") > 1 for m in metrics):
            raise UserError(f"{where}: a metric may be one difference \"x - y\" (got {metrics})",
                            "write each side's metric as a number of results.json or x - y")
        if len({"acc" in m or m == lr_sensitivity.METRIC for m in metrics}) > 1:
            raise UserError(f"{where}: a and b read metrics in different units ({metrics[0]}, {metrics[1]})",
                            "compare an accuracy with an accuracy (margins are points for them)")
        expect = item.get("expect")
        if expect not in stats.EXPECT:
            raise UserError(f"{where}: expect={expect!r}", f"use one of: {', '.join(stats.EXPECT)}")
        margin = item.get("margin", None if expect == "equivalent" else 0.0)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise UserError(f"{where}: margin={margin!r} is not a number",
                            "give margin in points, e.g. margin: 1.0" + " (an equivalence claim needs one)"
                            * (expect == "equivalent"))
        if expect == "equivalent" and margin <= 0:
            raise UserError(f"{where}: an equivalence claim needs a margin > 0 (got {margin})",
                            "set margin: the largest difference, in points, that counts as equal")
        out.append(Claim(name, dict(item["a"]), dict(item["b"]), expect, float(margin),
                         str(item.get("metric", "test_acc")), str(item.get("study", study))))
    return out


def load_file(path) -> list[Claim]:
    """A --claims file: a YAML list of claims, or a mapping with a `claims:` list."""
    import yaml
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--claims {path}: no such file", "give a YAML file with a list of claims")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UserError(f"--claims {path}: not valid YAML ({str(e).splitlines()[0]})", "fix the file") from None
    return parse(raw.get("claims") if isinstance(raw, dict) else raw, str(path))


def declared(runs: list[Run]) -> list[Claim]:
    """The claims the runs' experiments declared (config `claims`), each scoped to its study; the same
    claim recorded by many runs counts once. Two different claims under one name are a UserError."""
    seen: dict[tuple[str, str], Claim] = {}
    for r in runs:
        raw = r.config.get("claims")
        if not raw:
            continue
        for c in parse(raw, f"the claims recorded in {r.path / 'results.json'}", r.study):
            key = (c.study, c.name)
            if key in seen and seen[key] != c:
                raise UserError(f"runs of {c.study or 'this sweep'} declare two different claims named {c.name!r} "
                                f"(they ran with different versions of the experiment's claims)",
                                "summarize the runs of one version, or give the claims with --claims FILE")
            seen.setdefault(key, c)
    return list(seen.values())


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _matches(value: Any, want: Any) -> bool:
    """Does a run's config value equal a selector's? Numbers numerically (YAML reads 1e-5 as a string)."""
    if value == want:
        return True
    a, b = _number(value), _number(want)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return fmt_value(value) == fmt_value(want) or str(value) == str(want)


def _metric(results: dict[str, Any], path: str) -> float | None:
    """A number of results.json by its dotted path (test_acc_by_length.42), or the difference of two
    ('test_acc_by_length.42 - test_acc_by_length.28': a run's own drop); None where one is missing."""
    if " - " in path:
        x, y = (_metric(results, part.strip()) for part in path.split(" - ", 1))
        return None if x is None or y is None else x - y
    node: Any = results
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    value = _number(node) if isinstance(node, (int, float)) else None
    return value if value is not None and math.isfinite(value) else None  # NaN: missing, not a number to test


def _side(claim: Claim, side: dict[str, Any], runs: list[Run], grid: list[Run]) -> tuple[dict[int, float], str]:
    """seed -> the metric of the one matching run at that seed; and a note when a seed holds several runs.
    lr_sensitivity reads `grid` instead: every lr's run, not only the ones --select lr kept."""
    keys = {k: v for k, v in side.items() if k != "metric"}
    metric = claim.metric_of(side)
    by_seed: dict[int, list[Run]] = {}
    lost: dict[int, str] = {}  # seed -> the status of a matching run that gave no number
    metric_runs = grid if metric == lr_sensitivity.METRIC else runs
    matching = [r for r in metric_runs if r.config and not (claim.study and r.study != claim.study)
                and all(_matches(r.config.get(k), v) for k, v in keys.items())]
    if metric == lr_sensitivity.METRIC:  # one number per seed from all its lrs' runs
        values, failed = lr_sensitivity.per_seed(matching)
        return values, (f"seed(s) {', '.join(map(str, failed))} had a failed run, left out of the pairs"
                        if failed else "")
    for r in matching:
        if r.status == "completed":
            by_seed.setdefault(int(r.config.get("seed", 0)), []).append(r)
        else:
            lost[int(r.config.get("seed", 0))] = r.status
    values, note = {}, ""
    if lost:  # a diverged or failed seed leaves the pairs: say so, it may favour the less stable side
        note = ", ".join(f"seed {s} {status}" for s, status in sorted(lost.items())) + ", left out of the pairs"
    for seed, group in sorted(by_seed.items()):
        if seed in lost:
            continue
        if len(group) > 1:
            differ = sorted(k for k in group[0].config if k not in ("claims",) and
                            len({fmt_value(g.config.get(k)) for g in group}) > 1)
            note = (f"{len(group)} runs match at seed {seed} (they differ in {', '.join(differ) or 'nothing'}): "
                    f"add those keys to the selector" + (", or summarize with --select lr" if "lr" in differ else ""))
            return {}, note
        v = _metric(group[0].results, metric)
        if v is not None:
            values[seed] = v
    return values, note


AMBIGUOUS = "runs match at seed"  # in a side's note when its selector cannot pick one run per seed


def _one(claim: Claim, runs: list[Run], grid: list[Run]) -> ClaimResult:
    res = ClaimResult(claim)
    xa, note_a = _side(claim, claim.a, runs, grid)
    xb, note_b = _side(claim, claim.b, runs, grid)
    res.note = "; ".join(f"{s}: {n}" for s, n in (("a", note_a), ("b", note_b)) if n)
    if AMBIGUOUS in note_a or AMBIGUOUS in note_b:
        return res
    res.seeds = sorted(set(xa) & set(xb))
    res.n = len(res.seeds)
    if not res.n:
        missing = ("no runs match " + " and ".join(s for s, x in (("a", xa), ("b", xb)) if not x)) \
            if not (xa and xb) else "a and b share no seed"
        res.note = "; ".join(filter(None, [res.note, missing]))
        return res
    a, b = [xa[s] for s in res.seeds], [xb[s] for s in res.seeds]
    d = [x - y for x, y in zip(a, b)]
    margin = claim.margin / claim.scale
    res.mean_a, res.mean_b, res.estimate = statistics.fmean(a), statistics.fmean(b), statistics.fmean(d)
    res.ci, res.bootstrap = stats.t_interval(d), stats.bootstrap_interval(d)
    res.p = stats.t_test(d, claim.expect, margin)
    res.p_exact = stats.sign_flip(d, claim.expect, margin)
    against = [p for e, m in stats.opposite(claim.expect, margin) if (p := stats.t_test(d, e, m)) is not None]
    if against:  # for `equivalent` either side refutes: Bonferroni over the two
        res.p_refute = min(1.0, len(against) * min(against))
    if res.n < 2:
        res.note = "; ".join(filter(None, [res.note, "one pair: no test"]))
    return res


def test(claims: list[Claim], runs: list[Run], grid: list[Run] | None = None) -> list[ClaimResult]:
    """Every claim tested on `runs` (lr_sensitivity on `grid`: all of a sweep's runs, when `runs` are
    those --select lr kept), with its verdict. One family, fixed by what was declared: Holm over
    every hypothesis a verdict can rest on, each claim's expected one and its opposite (2 m p-values; a
    claim that could not be tested counts with p = 1, so what ran cannot make the others easier to pass).
    The exact p's are Holm-adjusted over the m claims on their own."""
    results = [_one(c, runs, runs if grid is None else grid) for c in claims]
    m = len(results)
    adjusted = stats.holm([1.0 if r.p is None else r.p for r in results]
                          + [1.0 if r.p_refute is None else r.p_refute for r in results])
    exact = stats.holm([1.0 if r.p_exact is None else r.p_exact for r in results])
    for k, r in enumerate(results):
        tested = r.p is not None
        r.p_holm = adjusted[k] if tested else None
        r.p_refute = adjusted[m + k] if tested else None
        r.p_exact_holm = exact[k] if r.p_exact is not None else None
        if tested and r.p_holm < ALPHA:
            r.verdict = "held"
        elif tested and r.p_refute < ALPHA:
            r.verdict = "refuted"
        if r.n >= 2 and 2.0 ** -r.n * m >= ALPHA:
            smallest = f"{2.0 ** -r.n:.3g}" + (f" x {m} claims (Holm's first step)" if m > 1 else "")
            r.note = "; ".join(filter(None, [r.note, f"the exact test cannot reach {ALPHA:g} at n = {r.n} (its "
                                                      f"smallest p is {smallest}): a verdict rests on the t-test's "
                                                      f"normality"]))
    return results
