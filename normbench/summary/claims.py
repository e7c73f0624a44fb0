"""Claims: hypotheses an experiment declares before it runs, tested when it is summarized (verdicts.py).

    claims:                                   # in an experiment's YAML, or a file for `summarize --claims`
      - name: GN beats BN at batch 2
        a: {norm.name: gn, batch_size: 2}     # the runs of each side, by any config keys
        b: {norm.name: bn, batch_size: 2}
        expect: greater                       # greater | less | equivalent
        margin: 0.0                           # points (x 100 for accuracies); equivalent: the bound, required
        metric: test_acc                      # any number in results.json; a dotted path reaches into
                                              # a dict (test_acc_by_length.42), "x - y" is a run's own
                                              # difference, "history[-3:].acc/val" the mean of a list's
                                              # last 3 entries' acc/val (the last 3 epochs' validation
                                              # accuracy); a side may set its own (a: {..., metric: ...});
                                              # lr_sensitivity: a seed's accuracy lost over its lr grid
                                              # (lr_sensitivity.py), from all the side's runs at that seed
        role: primary                         # primary | exploratory (the default in an experiment's
                                              # YAML; a --claims file's claims are primary by default)
        note: what it can and cannot conclude # optional: shown with the claim in the generated docs

    A side may be a difference of two cells at the same seed (a difference in differences):

      - name: BN loses more than GN from batch 32 to 2
        a: {norm.name: bn, batch_size: 2, minus: {norm.name: bn, batch_size: 32}}   # BN(2) - BN(32), per seed
        b: {norm.name: gn, batch_size: 2, minus: {norm.name: gn, batch_size: 32}}   # GN(2) - GN(32), per seed
        expect: less                          # the per-seed d = (BN(2) - BN(32)) - (GN(2) - GN(32)) < 0

    `minus` is a selector of its own (every key it needs, not only those that change; a metric of its own,
    or the side's); the side's value at a seed is its run's metric minus the minus run's, so a seed enters the
    pairs only where all four runs gave a number, and mean_a / mean_b are the two changes.

    A --claims file is a family of its own: a list of claims, or a mapping with `claims:` and, optionally,
    the protocol its family is tested under (protocol.yaml's keys; without it, one look at every seed run):

      protocol: {looks: [3, 5, 10], alpha: 0.05, spending: obrien_fleming}
      claims:
        - name: ...                           # primary unless it says role: exploratory

    found = parse(raw, "claims.yaml")          # or declared(runs): what the runs recorded
    own = load_file(path)                      # a --claims file: own.claims, own.protocol (its own family)
    results = verdicts.test(found, runs)       # summarize does this: a ClaimResult per claim

This module is the declaration: a Claim, its fields checked into one-line UserErrors, and the ClaimResult
its test fills in (summary.json's `claims` and claims.csv, `ClaimResult.row`). Primary claims are one
confirmatory family (protocol.py, docs/protocol.md): the shipped studies', or a --claims file's own; the
verdicts are held, refuted, inconclusive (primary) and exploratory (every other claim): verdicts.py says how
each is reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from normbench.config import Config, flatten, to_dict
from normbench.errors import UserError
from normbench.summary import lr_sensitivity, stats
from normbench.summary.types import Run

VERDICTS = ("held", "refuted", "inconclusive", "exploratory")
FIELDS = ("name", "a", "b", "expect", "margin", "metric", "role", "note")
MINUS = "minus"  # a side's key: the cell subtracted from it, seed by seed
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
    note: str = field(default="", compare=False)  # what it can and cannot conclude: words, not the claim

    def metric_of(self, side: dict[str, Any]) -> str:
        return str(side.get("metric", self.metric))

    @property
    def reads_lr_grid(self) -> bool:
        """Does a side read lr sensitivity (every lr's run at a seed)? Such a claim chooses no lr."""
        return any(self.metric_of(side) == lr_sensitivity.METRIC for side in (self.a, self.b))

    def minus_of(self, side: dict[str, Any]) -> dict[str, Any] | None:
        """The selector a side subtracts (its `minus`), with the side's metric where it names none."""
        minus = side.get(MINUS)
        return None if minus is None else {**minus, "metric": minus.get("metric", self.metric_of(side))}

    def readings(self) -> list[dict[str, Any]]:
        """Each cell the claim reads with the metric it reads there (`metric`): a side's own or the claim's,
        and each side's `minus`."""
        out = []
        for side in (self.a, self.b):
            out.append({**{k: v for k, v in side.items() if k != MINUS}, "metric": self.metric_of(side)})
            if (minus := self.minus_of(side)) is not None:
                out.append(minus)
        return out

    def selectors(self) -> list[dict[str, Any]]:
        """Every cell's selector the claim reads (a, a's minus, b, b's minus), without metric and minus:
        what a study trains for it and where its lr choices are read."""
        out = []
        for reading in self.readings():
            own = {k: v for k, v in reading.items() if k not in ("metric", MINUS)}
            if own not in out:
                out.append(own)
        return out

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
    look_n: int | None = None  # the pairs that look read
    look_seeds: list[int] = field(default_factory=list)  # their seeds: of that look's rounds (protocol.look_seeds)
    look_estimate: float | None = None  # mean of a - b over the pairs that look tested (its lrs chosen within them)
    look_ci: tuple[float, float] | None = None  # ... and its 95% t-interval: what the verdict read
    level: float | None = None  # that look's share of alpha
    rests_on: str = ""  # held/refuted: "exact" or "t-test"
    budget: str = ""  # did its difference still move over the budget's last half (budget.py): stable, moving ...
    budget_path: list = field(default_factory=list)  # ... [[budget fraction, mean a - b on validation], ...]
    runs: int = 0  # the distinct runs it reads (both sides may read one run, through two metrics)
    train_a: float | None = None  # mean training accuracy of each side's own runs
    train_b: float | None = None
    p_improve: float | None = None  # P(a > b) over seeds (stats.probability_of_improvement)
    p_improve_ci: tuple[float, float] | None = None  # ... its 95% bootstrap interval
    models: list[str] = field(default_factory=list)  # model.name of the runs it reads
    at_chance: list[str] = field(default_factory=list)  # the diverged runs scored at chance
    pairs_needed: int | None = None  # primary, undecided at the last look: pairs to decide it (stats.pairs_needed)
    needed_to: str = ""  # ... "hold" or "refute": the side its measured mean lies on
    verdict: str = "inconclusive"
    note: str = ""

    def row(self) -> dict[str, Any]:
        """The fields of summary.json's `claims` and claims.csv."""
        c = self.claim
        lo, hi = self.ci or (None, None)
        blo, bhi = self.bootstrap or (None, None)
        llo, lhi = self.look_ci or (None, None)
        plo, phi = self.p_improve_ci or (None, None)
        return {"name": c.name, "study": c.study, "role": self.role, "a": c.a, "b": c.b, "expect": c.expect,
                "margin": c.margin, "metric": c.metric_of(c.a), "n": self.n, "seeds": self.seeds,
                "mean_a": self.mean_a, "mean_b": self.mean_b, "metric_b": c.metric_of(c.b), "estimate": self.estimate,
                "ci_low": lo, "ci_high": hi, "bootstrap_low": blo, "bootstrap_high": bhi, "p": self.p,
                "p_holm": self.p_holm, "p_exact": self.p_exact, "p_exact_holm": self.p_exact_holm,
                "p_refute_holm": self.p_refute, "p_exact_refute_holm": self.p_exact_refute, "look": self.look,
                "looks": self.looks, "look_n": self.look_n, "look_seeds": self.look_seeds,
                "look_estimate": self.look_estimate, "look_ci_low": llo, "look_ci_high": lhi, "level": self.level,
                "verdict": self.verdict, "rests_on": self.rests_on, "budget": self.budget,
                "budget_path": self.budget_path, "runs": self.runs, "train_a": self.train_a, "train_b": self.train_b,
                "p_improve": self.p_improve, "p_improve_low": plo, "p_improve_high": phi, "models": self.models,
                "at_chance": self.at_chance, "pairs_needed": self.pairs_needed, "needed_to": self.needed_to,
                "note": self.note}


def _known_keys() -> set[str]:
    return set(flatten(to_dict(Config()))) | {"metric"}


def parse(raw: Any, source: str, study: str = "", default_role: str = "exploratory") -> list[Claim]:
    """Claims from a YAML list (an experiment's `claims:`, or a --claims file's, whose `default_role` is
    primary); a UserError naming the claim and the field for anything malformed."""
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
        metrics = []
        for side in ("a", "b"):
            sel = item.get(side)
            if not isinstance(sel, dict) or not sel:
                raise UserError(f"{where}: `{side}` must select runs by config keys",
                                f"e.g. {side}: {{norm.name: bn, batch_size: 2}}")
            _selector(where, side, sel, known)
            metrics.append(sel.get("metric", item.get("metric", "test_acc")))
            if MINUS in sel:
                minus = sel[MINUS]
                if not isinstance(minus, dict) or not minus or MINUS in minus or not set(minus) - {"metric"}:
                    raise UserError(f"{where}: `{side}.minus` must select one cell by config keys (and no minus "
                                    "of its own)", f"e.g. {side}: {{norm.name: bn, batch_size: 2, minus: "
                                    "{norm.name: bn, batch_size: 32}}")
                _selector(where, f"{side}.minus", minus, known)
                metrics.append(minus.get("metric", metrics[-1]))
        if not all(isinstance(m, str) and m for m in metrics):
            raise UserError(f"{where}: a metric must be the name of a number in results.json",
                            "e.g. metric: test_acc")
        if any(m.count(" - ") > 1 for m in metrics):
            raise UserError(f"{where}: a metric may be one difference \"x - y\" (got {metrics})",
                            "write each side's metric as a number of results.json or x - y")
        if len({"acc" in m or m == lr_sensitivity.METRIC for m in metrics}) > 1:
            raise UserError(f"{where}: its sides read metrics in different units ({', '.join(metrics)})",
                            "compare an accuracy with an accuracy (margins are points for them)")
        expect = item.get("expect")
        if expect not in stats.EXPECT:
            raise UserError(f"{where}: expect={expect!r}", f"use one of: {', '.join(stats.EXPECT)}")
        margin = item.get("margin", None if expect == "equivalent" else 0.0)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin):
            raise UserError(f"{where}: margin={margin!r} is not a number (a finite one)",
                            "give margin in points, e.g. margin: 1.0" + " (an equivalence claim needs one)"
                            * (expect == "equivalent"))
        if expect == "equivalent" and margin <= 0:
            raise UserError(f"{where}: an equivalence claim needs a margin > 0 (got {margin})",
                            "set margin: the largest difference, in points, that counts as equal")
        role = item.get("role", default_role)
        if role not in ROLES:
            raise UserError(f"{where}: role={role!r}", f"use one of: {', '.join(ROLES)} (default {default_role})")
        note = item.get("note", "")
        if not isinstance(note, str):
            raise UserError(f"{where}: note must be a sentence (got {type(note).__name__})",
                            "write note: what the claim can and cannot conclude")
        out.append(Claim(name, dict(item["a"]), dict(item["b"]), expect, float(margin),
                         str(item.get("metric", "test_acc")), str(item.get("study", study)), role, " ".join(note.split())))
    return out


def of_experiment(path: Path) -> list[Claim]:
    """Every claim the experiment file at `path` declares, scoped to its study (the file's name)."""
    import yaml

    path = Path(path)
    return parse(yaml.safe_load(path.read_text()).get("claims"), str(path), path.stem)


def _selector(where: str, side: str, sel: dict, known: set[str]) -> None:
    """A UserError naming the side for a selector key that is no config key (metric and minus aside)."""
    if bad := sorted(set(sel) - known - {MINUS}):
        raise UserError(f"{where}: `{side}` selects on unknown key(s) {', '.join(bad)}",
                        "use config keys as `normbench train --cfg job` prints them, dotted (norm.name)")


@dataclass(frozen=True)
class ClaimsFile:
    """A --claims file: its claims and the protocol of their own family (protocol.Protocol, name "your
    claims"): every claim not marked `role: exploratory`, Holm over their 2 m hypotheses alone."""
    claims: list[Claim]
    protocol: Any  # protocol.Protocol


FILE_KEYS = ("claims", "protocol")  # a --claims file that is a mapping
STUDY_KEYS = ("name", "experiment", "sweeps", "scales")  # ... or a study file (normbench.study.spec), read for its claims


def load_file(path) -> ClaimsFile:
    """A --claims file: a YAML list of claims, or a mapping with a `claims:` list and, optionally, the
    `protocol:` its family is tested under (protocol.of_claims_file). Its claims are primary unless they
    say `role: exploratory`. A study file (`sweeps:` among its keys) trains its seeds in rounds, so its
    looks default to protocol.yaml's."""
    from normbench.summary import protocol
    from normbench.userfiles import load_yaml

    path = Path(path)
    if not path.exists():
        raise UserError(f"--claims {path}: no such file", "give a YAML file with a list of claims")
    raw = load_yaml(path, "--claims")
    study = isinstance(raw, dict) and "sweeps" in raw
    if isinstance(raw, dict) and (unknown := sorted(set(raw) - set(FILE_KEYS) - set(STUDY_KEYS if study else ()))):
        raise UserError(f"--claims {path}: unknown key(s) {', '.join(unknown)}",
                        "give `claims:` (a list of claims) and, optionally, `protocol:` (alpha, looks, spending, "
                        "seed_base, min_pairs)")
    found = parse(raw.get("claims") if isinstance(raw, dict) else raw, str(path), default_role="primary")
    family = [c.key for c in found if c.role == "primary"]
    declared = raw.get("protocol") if isinstance(raw, dict) else None
    if study and isinstance(declared or {}, dict):  # a study trains its own seeds: the shipped rounds' by default
        shipped = protocol.shipped_rounds()  # its min_pairs goes with its looks: not with a file's own
        declared = {**{k: v for k, v in shipped.items() if k != "min_pairs" or "looks" not in (declared or {})},
                    **(declared or {})}
    own = protocol.of_claims_file(declared, path.name, family)
    return ClaimsFile(found, own)


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
