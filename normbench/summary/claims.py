"""Claims: hypotheses an experiment declares before it runs, tested when it is summarized.

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
        role: primary                         # primary | exploratory (the default)

    results = test(parse(raw, "claims.yaml"), runs)   # summarize does this

Each side's runs are paired by seed (a claim holding more than one run at a seed is not tested, with the
keys that tell them apart). A run that diverged counts at chance (accuracy 1/10 for these datasets; a
metric with no chance level, such as a gradient ratio, leaves its seed out) and the note names it; a run
that failed (not the model's doing) leaves its seed out, with a note. For each claim, the per-seed
differences a - b give the mean, its 95% t-interval and percentile-bootstrap interval, the one-sided
paired t-test (greater/less than the margin) or TOST (equivalent within it) and the exact sign-flip test
of the same hypothesis, each with its opposite (`pvalues`).

Primary claims are one confirmatory family (protocol.py, docs/protocol.md): every primary claim of the
shipped studies, whatever ran, plus any primary claim of this summary beyond them; each look of the
declared plan (the first 3, 5, 10 pairs) tests the undecided ones at its share of α, Holm over the
family's 2 m hypotheses, and a decided claim stays decided. The verdict:

- held: the claim's alternative is significant after Holm, at a look's level;
- refuted: the opposite one (less/greater than the margin; outside +-margin for `equivalent`) is;
- inconclusive: neither at any look reached (or no look reached: fewer pairs than the first look needs);
- exploratory: a claim outside the family: its estimate, interval and unadjusted p, no verdict.

A verdict rests on the exact test when the exact test rejects the same hypothesis at the same level (no
normality needed), on the t-test otherwise; it is budget-limited when a run it reads failed the plateau
check (tables.plateaued: its validation accuracy still moving over the last epochs).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from normbench.config import Config, flatten, to_dict
from normbench.errors import UserError
from normbench.summary import lr_sensitivity, stats
from normbench.summary.types import Run, fmt_value

ALPHA = round(1 - stats.LEVEL, 12)  # 0.05, not 0.050000000000000044
VERDICTS = ("held", "refuted", "inconclusive", "exploratory")
FIELDS = ("name", "a", "b", "expect", "margin", "metric", "role")
ROLES = ("primary", "exploratory")


@dataclass(frozen=True)
class Claim:
    name: str
    a: dict[str, Any]  # config key -> value (and optionally metric)
    b: dict[str, Any]
    expect: str  # greater | less | equivalent
    margin: float = 0.0  # in points for accuracies (the metric's own unit otherwise)
    metric: str = "test_acc"
    study: str = ""  # declared by this experiment: it selects among its runs only ('' : every run)
    role: str = "exploratory"  # primary: a member of the confirmatory family (protocol.py)

    def metric_of(self, side: dict[str, Any]) -> str:
        return str(side.get("metric", self.metric))

    @property
    def key(self) -> tuple[str, str]:
        return self.study, self.name

    @property
    def scale(self) -> float:
        """Accuracies are fractions shown in percent: a margin in points is margin / 100 of the metric."""
        metric = self.metric_of(self.a)
        return 100.0 if "acc" in metric or metric == lr_sensitivity.METRIC else 1.0


@dataclass
class ClaimResult:
    claim: Claim
    role: str = "exploratory"  # as tested: primary when the claim is a member of the protocol's family
    n: int = 0
    seeds: list[int] = field(default_factory=list)
    diffs: list[float] = field(default_factory=list)  # a - b per seed, in the order of `seeds`
    mean_a: float | None = None
    mean_b: float | None = None
    estimate: float | None = None  # mean of a - b, in the metric's unit
    ci: tuple[float, float] | None = None  # 95% t-interval of the estimate
    bootstrap: tuple[float, float] | None = None  # 95% percentile bootstrap interval
    p: float | None = None  # one-sided t-test or TOST of the expected alternative (primary: at its look)
    p_against: float | None = None  # ... of the opposite alternative
    p_holm: float | None = None  # primary: Holm over the family at its look
    p_exact: float | None = None  # sign-flip test of the same alternative
    p_exact_against: float | None = None
    p_exact_holm: float | None = None  # primary: Holm over the family's exact p's at its look
    p_exact_refute: float | None = None  # ... of the opposite alternative
    p_refute: float | None = None  # primary: the opposite alternative, Holm-adjusted in the same family
    look: int | None = None  # primary: the look (1-based) that decided it, or the last one that tested it
    looks: int = 0  # the looks the protocol plans
    look_n: int | None = None  # the pairs that look read (its first look_n seeds)
    level: float | None = None  # that look's share of alpha
    rests_on: str = ""  # held/refuted: "exact" or "t-test"
    budget_limited: bool | None = None  # a run it reads failed the plateau check (None: none checkable)
    at_chance: list[str] = field(default_factory=list)  # the diverged runs scored at chance
    verdict: str = "inconclusive"
    note: str = ""

    def row(self) -> dict[str, Any]:
        """The fields of summary.json's `claims` and claims.csv."""
        c = self.claim
        lo, hi = self.ci or (None, None)
        blo, bhi = self.bootstrap or (None, None)
        return {"name": c.name, "study": c.study, "role": self.role, "a": c.a, "b": c.b, "expect": c.expect,
                "margin": c.margin, "metric": c.metric_of(c.a), "n": self.n, "seeds": self.seeds,
                "mean_a": self.mean_a, "mean_b": self.mean_b, "metric_b": c.metric_of(c.b), "estimate": self.estimate,
                "ci_low": lo, "ci_high": hi, "bootstrap_low": blo, "bootstrap_high": bhi, "p": self.p,
                "p_holm": self.p_holm, "p_exact": self.p_exact, "p_exact_holm": self.p_exact_holm,
                "p_refute_holm": self.p_refute, "p_exact_refute_holm": self.p_exact_refute, "look": self.look,
                "looks": self.looks, "look_n": self.look_n, "level": self.level, "verdict": self.verdict,
                "rests_on": self.rests_on, "budget_limited": self.budget_limited, "at_chance": self.at_chance,
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
        role = item.get("role", "exploratory")
        if role not in ROLES:
            raise UserError(f"{where}: role={role!r}", f"use one of: {', '.join(ROLES)} (default exploratory)")
        out.append(Claim(name, dict(item["a"]), dict(item["b"]), expect, float(margin),
                         str(item.get("metric", "test_acc")), str(item.get("study", study)), role))
    return out


def load_file(path) -> list[Claim]:
    """A --claims file: a YAML list of claims, or a mapping with a `claims:` list."""
    from pathlib import Path

    import yaml

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
    claim recorded by many runs counts once (primary if any run records it so: runs from before roles
    existed record none). Two different claims under one name are a UserError."""
    seen: dict[tuple[str, str], Claim] = {}
    for r in runs:
        raw = r.config.get("claims")
        if not raw:
            continue
        for c in parse(raw, f"the claims recorded in {r.path / 'results.json'}", r.study):
            key = (c.study, c.name)
            if key in seen and replace(seen[key], role=c.role) != c:
                raise UserError(f"runs of {c.study or 'this sweep'} declare two different claims named {c.name!r} "
                                f"(they ran with different versions of the experiment's claims)",
                                "summarize the runs of one version, or give the claims with --claims FILE")
            if key not in seen or c.role == "primary":  # runs recorded before roles existed say nothing
                seen[key] = c
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


def _accuracy(metric: str) -> bool:
    """Is every term of the metric an accuracy (which has a chance level)?"""
    return all("acc" in term for term in metric.split(" - "))


def _value(run: Run, metric: str) -> float | None:
    """The run's metric; a diverged run's at chance (x - y of two accuracies: chance - chance = 0)."""
    if run.status == "diverged":
        if not _accuracy(metric):
            return None
        return 0.0 if " - " in metric else lr_sensitivity.chance(run)
    return _metric(run.results, metric)


@dataclass
class _Side:
    values: dict[int, float] = field(default_factory=dict)  # seed -> the metric of its one run
    note: str = ""
    read: list[Run] = field(default_factory=list)  # the runs whose numbers entered `values`
    at_chance: list[Run] = field(default_factory=list)


def _side(claim: Claim, side: dict[str, Any], runs: list[Run], grid: list[Run]) -> _Side:
    """seed -> the metric of the one matching run at that seed, with a note for the seeds left out, the
    runs scored at chance and the seeds holding several runs. lr_sensitivity reads `grid` instead: every
    lr's run, not only the ones --select lr kept."""
    keys = {k: v for k, v in side.items() if k != "metric"}
    metric = claim.metric_of(side)
    metric_runs = grid if metric == lr_sensitivity.METRIC else runs
    matching = [r for r in metric_runs if r.config and not (claim.study and r.study != claim.study)
                and all(_matches(r.config.get(k), v) for k, v in keys.items())]
    out = _Side()
    if metric == lr_sensitivity.METRIC:  # one number per seed from all its lrs' runs (a diverged one at chance)
        out.values, failed = lr_sensitivity.per_seed(matching)
        out.read = [r for r in matching if int(r.config.get("seed", 0)) in out.values]
        out.at_chance = [r for r in out.read if r.status == "diverged"]
        out.note = "; ".join(filter(None, [_chance_note(out.at_chance), failed and
                                           f"seed(s) {', '.join(map(str, failed))} had a failed run, left out of "
                                           f"the pairs"]))
        return out
    by_seed: dict[int, list[Run]] = {}
    lost: dict[int, Run] = {}  # seed -> a matching run that gave no number (failed, incomplete)
    for r in matching:
        seed = int(r.config.get("seed", 0))
        if r.status in ("completed", "diverged"):
            by_seed.setdefault(seed, []).append(r)
        else:
            lost[seed] = r
    notes = []
    for seed, group in sorted(by_seed.items()):
        if seed in lost:
            continue
        if len(group) > 1:
            differ = sorted(k for k in group[0].config if k not in ("claims",) and
                            len({fmt_value(g.config.get(k)) for g in group}) > 1)
            out.note = (f"{len(group)} runs match at seed {seed} (they differ in {', '.join(differ) or 'nothing'}): "
                        f"add those keys to the selector" + (", or summarize with --select lr" if "lr" in differ else ""))
            out.values = {}
            return out
        run = group[0]
        v = _value(run, metric)
        if run.status == "diverged":
            if v is None:
                notes.append(f"seed {seed} diverged ({run.path.name}), left out: {metric} has no chance level")
                continue
            out.at_chance.append(run)
        if v is not None:
            out.values[seed] = v
            out.read.append(run)
    notes.insert(0, _chance_note(out.at_chance))  # counted, not dropped: dropping favours the less stable side
    if lost:  # a failed seed leaves the pairs: not the model's doing
        notes.append(", ".join(f"seed {s} {r.status} ({r.path.name})" for s, r in sorted(lost.items()))
                     + ", left out of the pairs")
    out.note = "; ".join(filter(None, notes))
    return out


def _chance_note(runs: list[Run]) -> str:
    """'seed 3 diverged (gn_3), scored at chance (10%)': the runs a side scored at chance, by name."""
    if not runs:
        return ""
    seeds = sorted({int(r.config.get("seed", 0)) for r in runs})
    return (f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))} diverged "
            f"({', '.join(r.path.name for r in runs)}), scored at chance ({100 * lr_sensitivity.chance(runs[0]):g}%)")


AMBIGUOUS = "runs match at seed"  # in a side's note when its selector cannot pick one run per seed


def pvalues(d, expect: str, margin: float = 0.0, exact: bool = True):
    """A claim's tests on its per-seed differences `d` (an array (..., n), n >= 2; many claims at once):
    the t-test (TOST for equivalent) of its hypothesis and of the opposite (for equivalent, either side
    refutes: Bonferroni over the two), and the exact sign-flip test of both. Returns four arrays (...):
    p, p_against, p_exact, p_exact_against (the exact ones None without `exact`)."""
    import numpy as np

    def against(test):
        ps = [test(d, e, m) for e, m in stats.opposite(expect, margin)]
        return ps[0] if len(ps) == 1 else np.minimum(1.0, len(ps) * np.minimum(*ps))

    p, p_against = stats.t_pvalues(d, expect, margin), against(stats.t_pvalues)
    if not exact:
        return p, p_against, None, None
    return p, p_against, stats.sign_flip_many(d, expect, margin), against(stats.sign_flip_many)


def _plateau(runs: list[Run]) -> tuple[bool | None, str]:
    """budget-limited: a run the claim reads has not plateaued (tables.plateaued); None when none is checkable."""
    from normbench.summary.tables import PLATEAU_EPOCHS, plateaued

    flags = [plateaued(r.results.get("history")) for r in runs]
    checked = [f for f in flags if f is not None]
    if not checked:
        return None, ""
    moving = checked.count(False)
    if not moving:
        return False, ""
    return True, (f"budget-limited: {moving} of {len(checked)} runs it reads had not plateaued (validation accuracy "
                  f"still moving over their last epochs)" +
                  (f", {len(flags) - len(checked)} too short to check (< {PLATEAU_EPOCHS} epochs)"
                   if len(checked) < len(flags) else ""))


def _one(claim: Claim, runs: list[Run], grid: list[Run]) -> ClaimResult:
    """The claim's pairs and what they say on their own: estimate, intervals, unadjusted p's over every pair."""
    res = ClaimResult(claim, role=claim.role)
    a, b = _side(claim, claim.a, runs, grid), _side(claim, claim.b, runs, grid)
    res.note = "; ".join(f"{s}: {x.note}" for s, x in (("a", a), ("b", b)) if x.note)
    if AMBIGUOUS in a.note or AMBIGUOUS in b.note:
        return res
    res.seeds = sorted(set(a.values) & set(b.values))
    res.n = len(res.seeds)
    if not res.n:
        missing = ("no runs match " + " and ".join(s for s, x in (("a", a), ("b", b)) if not x.values)) \
            if not (a.values and b.values) else "a and b share no seed"
        res.note = "; ".join(filter(None, [res.note, missing]))
        return res
    paired = set(res.seeds)
    res.at_chance = [str(r.path) for x in (a, b) for r in x.at_chance if int(r.config.get("seed", 0)) in paired]
    read = [r for x in (a, b) for r in x.read if int(r.config.get("seed", 0)) in paired and r.status == "completed"]
    res.budget_limited, budget = _plateau(read)
    xa, xb = [a.values[s] for s in res.seeds], [b.values[s] for s in res.seeds]
    res.diffs = [x - y for x, y in zip(xa, xb)]
    res.mean_a, res.mean_b, res.estimate = statistics.fmean(xa), statistics.fmean(xb), statistics.fmean(res.diffs)
    res.ci, res.bootstrap = stats.t_interval(res.diffs), stats.bootstrap_interval(res.diffs)
    if res.n >= 2:
        tests = pvalues(res.diffs, claim.expect, claim.margin / claim.scale)
        res.p, res.p_against, res.p_exact, res.p_exact_against = (float(t) for t in tests)
    else:
        res.note = "; ".join(filter(None, [res.note, "one pair: no test"]))
    res.note = "; ".join(filter(None, [res.note, budget]))
    return res


def test(claims: list[Claim], runs: list[Run], grid: list[Run] | None = None, protocol=None) -> list[ClaimResult]:
    """Every claim tested on `runs` (lr_sensitivity on `grid`: all of a sweep's runs, when `runs` are
    those --select lr kept). Primary claims (role primary, or members of the protocol's family) are tested
    as the protocol's family, look by look (protocol.look: the first looks[r] pairs, at the look's level,
    Holm over every member's two hypotheses, a member not tested at a look counting with p = 1, a decided
    claim staying decided); exploratory ones get their estimate, intervals and unadjusted p's."""
    from normbench.summary import protocol as protocols

    proto = protocols.load() if protocol is None else protocol
    results = [_one(c, runs, runs if grid is None else grid) for c in claims]
    family = set(proto.family)
    primary = [r for r in results if r.claim.role == "primary" or r.claim.key in family]
    proto = proto.with_members(r.claim.key for r in primary)
    state: dict = {}
    last: dict = {}  # key -> (look index, its Pvalues, its adjusted p's)
    for index, need in enumerate(proto.looks):
        tested = {}
        for r in primary:
            if r.claim.key in state or r.n < need:
                continue
            c = r.claim
            p, pa, pe, pea = (float(t) for t in pvalues(r.diffs[:need], c.expect, c.margin / c.scale))
            tested[c.key] = protocols.Pvalues(p, pa, pe, pea, need)
        if not tested:
            continue
        step = protocols.look(tested, index, state, proto)
        state = step.decisions
        for key, t in tested.items():
            last[key] = (index, t, step.adjusted[key])
    primary_ids = {id(r) for r in primary}
    for r in results:
        _conclude(r, id(r) in primary_ids, proto, state, last)
    return results


def _conclude(r: ClaimResult, primary: bool, proto, state: dict, last: dict) -> None:
    """The claim's verdict and the numbers shown with it: the look that decided it (or the last that
    tested it) for a primary claim; its own over every pair for an exploratory one."""
    r.looks = len(proto.looks)
    notes = [r.note]
    if not primary:
        r.role, r.verdict = "exploratory", "exploratory"
        r.note = "; ".join(filter(None, notes))
        return
    r.role, key = "primary", r.claim.key
    if key not in last:
        r.verdict = "inconclusive"
        if r.n:
            notes.append(f"no look yet: {r.n} pair{'s' * (r.n != 1)}, the first look reads {proto.looks[0]}")
        r.p_refute = None
        r.note = "; ".join(filter(None, notes))
        return
    index, t, adj = last[key]
    r.look, r.look_n, r.level = index + 1, t.n, proto.levels[index]
    r.p, r.p_against, r.p_exact, r.p_exact_against = t.p, t.p_against, t.p_exact, t.p_exact_against
    r.p_holm, r.p_refute = adj["p_holm"], adj["p_refute_holm"]
    r.p_exact_holm, r.p_exact_refute = adj["p_exact_holm"], adj["p_exact_refute_holm"]
    if key in state:
        d = state[key]
        r.verdict, r.rests_on = d.verdict, d.rests_on
        if d.rests_on == "t-test":
            notes.append(f"rests on the t-test's normality: the exact test does not reach the look's level "
                         f"(its smallest p at n = {t.n} is {2.0 ** -t.n:.3g} before Holm)")
    else:
        r.verdict = "inconclusive"
        later = [n for n in proto.looks if n > t.n]
        if later:
            notes.append(f"undecided at look {index + 1} of {len(proto.looks)}; the next look reads {later[0]} pairs")
    if r.n > t.n:
        notes.append(f"the tests read the first {t.n} of its {r.n} pairs (look {index + 1}); the estimate reads all")
    r.note = "; ".join(filter(None, notes))
