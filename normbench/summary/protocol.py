"""The confirmatory protocol: one family of primary claims, tested at planned looks with α spent across them
(docs/protocol.md states it for a reviewer; normbench/configs/protocol.yaml declares its numbers).

    proto = load()                       # α, looks, spending rule, widening limit, seed base, min_pairs, the family
    own = of_claims_file({"looks": [3, 5]}, "my.yaml", keys)   # a --claims file's own family and looks
    proto.levels                                     # α_r of each look (their sum is α)
    step = look(pvalues_by_claim, index, state, proto)   # one look: decisions, what stays undecided
    step.undecided                                   # what the next round trains (study/rounds.py)
    round_seeds(proto, index + 1)                    # its seeds
    look_seeds(proto, index)                         # the seeds a look reads: its rounds', as declared
    widen(chosen, read_cells, declared_grids, proto.widen_limit)   # lr grids to extend before a look counts

The shipped family is every shipped experiment's claim marked `role: primary`
(normbench/configs/experiment/*.yaml), each with two hypotheses: the claim's alternative and its opposite. A
`--claims FILE` is a family of its own (`of_claims_file`): its confirmatory claims, under the protocol the
file declares (`protocol:` beside `claims:`, protocol.yaml's alpha, looks and spending) or, where it declares
none, one look at every seed the runs have (`looks = ()`), at α = 0.05. Look r reads the seeds of rounds 1..r
(`look_seeds`: seeds seed_base to seed_base + looks[r] - 1, a failed one a missing pair; verdicts.test
chooses their lrs among them alone), so a later round's runs never change an earlier look. The shipped
protocol's seeds start at 1000, apart from the seeds 0-9 that pilots and every record before fresh seeds
trained (a protocol that declares no seed_base starts at 0, as those did). Each claim that has run those
seeds and is still undecided gives its two p-values; every other member of the family counts with p = 1
(untested, not yet run, or decided earlier). Holm's step-down (Holm 1979) over the whole family of 2 m
hypotheses at the look's level α_r decides: held (the claim's hypothesis rejected), refuted (its opposite),
else undecided; on fewer than `min_pairs` pairs only where the exact test rejects too. Decided stays decided.

Why the family-wise error over all looks is at most α: at one look, Holm over 2 m valid p-values rejects a
true null with probability at most α_r whatever the other hypotheses are; replacing some p-values by 1 only
removes rejections (Holm is monotone), so leaving decided or untested claims at p = 1 keeps that bound.
Over the looks, a false verdict anywhere is the union of the looks' events: at most the sum of the α_r,
which is α (a union bound: it ignores the looks' correlation, so it is conservative).

The levels: `bonferroni` splits α evenly over the K looks; `obrien_fleming` is Lan & DeMets' (1983)
spending function of O'Brien-Fleming type, α(t) = 2 − 2Φ(z_{α/2} / √t), with t_r = looks[r] / looks[-1]
the information fraction; look r is tested at the increment α(t_r) − α(t_{r−1}), used as a level on its
own (valid by the union bound above, so more conservative than the usual group-sequential boundary, which
also credits the looks' correlation).

The t-test decides; the exact sign-flip test runs over the same 2 m hypotheses at the same level, and a
verdict `rests on` it when it too rejects (no normality needed). `decide`, the vectorized core of `look`, is
what tests/test_protocol.py's simulation runs on 10,000 synthetic families at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from normbench.errors import UserError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PATH = CONFIGS / "protocol.yaml"
EXPERIMENTS = CONFIGS / "experiment"
SPENDING = ("obrien_fleming", "bonferroni")
MAX_LOOKS, MAX_PAIRS = 20, 1000  # a protocol's bounds: a study trains every pair of every look
ROLES = ("primary", "exploratory")

Key = tuple[str, str]  # (study, claim name): a member of the family


@dataclass(frozen=True)
class Protocol:
    """A family of claims and the numbers it is tested with: α, the looks, how α is spent across them."""
    alpha: float = 0.05
    looks: tuple[int, ...] = (3, 5, 10)  # pairs (seeds) at each planned look; () : one look at every seed run
    spending: str = "obrien_fleming"
    widen_limit: int = 2  # lr grid values a study may add beyond the declared grid, per cell and side
    family: tuple[Key, ...] = ()  # every primary claim, in declaration order
    name: str = "shipped"  # whose family: "shipped", or "your claims" (a --claims file's)
    source: str = "protocol.yaml"  # the file that declared the numbers
    # the first confirmatory seed: round 1 trains seed_base .. seed_base + looks[0] - 1 (0: the seeds of every
    # record before fresh seeds were declared, and of a protocol that declares none)
    seed_base: int = 0
    min_pairs: int = 2  # fewer pairs decide only with the exact test's agreement (2: no such rule, as records before)

    def __post_init__(self) -> None:
        where = f"{self.source}: protocol" if self.name != "shipped" else "protocol"
        if self.spending not in SPENDING:
            raise UserError(f"{where}: spending={self.spending!r}", f"use one of: {', '.join(SPENDING)}")
        if list(self.looks) != sorted(set(self.looks)) or (self.looks and self.looks[0] < 2):
            raise UserError(f"{where}: looks={list(self.looks)} must increase, from 2 pairs or more",
                            "e.g. looks: [3, 5, 10]")
        if len(self.looks) > MAX_LOOKS or (self.looks and self.looks[-1] > MAX_PAIRS):
            raise UserError(f"{where}: looks={list(self.looks)[:MAX_LOOKS + 1]} asks for more than {MAX_LOOKS} looks "
                            f"or {MAX_PAIRS} pairs", "e.g. looks: [3, 5, 10]")
        if not 0 < self.alpha < 1:
            raise UserError(f"{where}: alpha={self.alpha} is not in (0, 1)", "e.g. alpha: 0.05")
        if type(self.seed_base) is not int or not 0 <= self.seed_base < 2**31:
            raise UserError(f"{where}: seed_base={self.seed_base!r} is not a seed", "e.g. seed_base: 1000")
        if type(self.min_pairs) is not int or not 2 <= self.min_pairs <= MAX_PAIRS:
            raise UserError(f"{where}: min_pairs={self.min_pairs!r} is not a count of pairs", "e.g. min_pairs: 5")

    @property
    def planned(self) -> int:
        """How many looks: len(looks), or 1 for the one look at every seed run."""
        return len(self.looks) or 1

    levels = property(lambda self: levels(self.alpha, self.looks, self.spending) if self.looks else (self.alpha,))

    def with_members(self, keys) -> Protocol:
        """The protocol whose family also holds `keys` (a summary's own primary claims beyond the shipped
        ones: more hypotheses, a more conservative family, never a smaller one)."""
        extra = tuple(k for k in dict.fromkeys(keys) if k not in set(self.family))
        return replace(self, family=self.family + extra) if extra else self

    def numbers(self) -> dict[str, Any]:
        """The numbers a study pins in its study.json at its first run (and hashes with its family); min_pairs
        only where it is a rule (not 2), so the studies pinned before it keep their hashes."""
        rule = {"min_pairs": self.min_pairs} if self.min_pairs != 2 else {}
        return {"alpha": self.alpha, "looks": list(self.looks), "spending": self.spending,
                "widen_limit": self.widen_limit, "seed_base": self.seed_base, **rule}

    def with_numbers(self, pinned: dict[str, Any], source: str | None = None) -> Protocol:
        """This protocol's family under the numbers a study pinned (study.json's `protocol`, `pinned`): what a
        summary of the study's folder tests with, whatever protocol.yaml says now."""
        pinned = numbers_of(pinned)
        return replace(self, alpha=float(pinned["alpha"]), looks=tuple(int(n) for n in pinned["looks"]),
                       spending=str(pinned["spending"]), widen_limit=int(pinned["widen_limit"]),
                       seed_base=int(pinned["seed_base"]), min_pairs=int(pinned.get("min_pairs", 2)),
                       source=source or self.source)

    def describe(self) -> dict[str, Any]:
        """summary.json's `protocol`: the numbers, the family, and whose family it is (name, source)."""
        return {"alpha": self.alpha, "looks": list(self.looks), "spending": self.spending,
                "levels": [float(f"{a:.6g}") for a in self.levels], "widen_limit": self.widen_limit,
                "family": [list(k) for k in self.family], "hypotheses": 2 * len(self.family),
                "name": self.name, "source": self.source, "seed_base": self.seed_base, "min_pairs": self.min_pairs}


def numbers_of(pinned: dict[str, Any]) -> dict[str, Any]:
    """A study.json's pinned `protocol` as Protocol.numbers() gives it: a study started before the seed base
    was declared pinned none, and trained from seed 0."""
    return {"seed_base": 0, **pinned}


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _z(q: float) -> float:
    """The standard normal's q-quantile."""
    from scipy.special import ndtri

    return float(ndtri(q))


def obrien_fleming(alpha: float, t: float) -> float:
    """Lan & DeMets' O'Brien-Fleming-type spending function: the α spent by information fraction t,
    α(t) = 2 − 2Φ(z_{1−α/2} / √t); α(0) = 0, α(1) = α."""
    if t <= 0:
        return 0.0
    return 2.0 - 2.0 * _phi(_z(1 - alpha / 2) / math.sqrt(t))


def levels(alpha: float, looks, spending: str) -> tuple[float, ...]:
    """The level of each look: α/K each (bonferroni), or the spending function's increments; they sum to α."""
    looks = list(looks)
    if spending == "bonferroni":
        return tuple(alpha / len(looks) for _ in looks)
    spent = [obrien_fleming(alpha, n / looks[-1]) for n in looks]
    spent[-1] = alpha  # exactly, not 2 − 2Φ(z) rounded
    return tuple(b - a for a, b in zip([0.0, *spent[:-1]], spent))


def shipped_family(experiments: Path = EXPERIMENTS) -> tuple[Key, ...]:
    """(study, name) of every claim the shipped experiments mark `role: primary`, in file order."""
    import yaml

    out = []
    for path in sorted(experiments.glob("*.yaml")):
        for item in yaml.safe_load(path.read_text()).get("claims") or []:
            if isinstance(item, dict) and item.get("role") == "primary":
                out.append((path.stem, str(item["name"])))
    return tuple(out)


@lru_cache(maxsize=4)
def load(path: Path = PATH, experiments: Path = EXPERIMENTS) -> Protocol:
    """The declared protocol: its numbers from protocol.yaml, its family from the experiments' primary claims."""
    from normbench.userfiles import load_yaml

    raw = load_yaml(Path(path), "protocol") or {}
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a protocol is a mapping (alpha, looks, spending, widen_limit, seed_base)",
                        "see normbench/configs/protocol.yaml")
    if unknown := set(raw) - {"alpha", "looks", "spending", "widen_limit", "seed_base", "min_pairs"}:
        raise UserError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}",
                        "use alpha, looks, spending, widen_limit, seed_base, min_pairs")
    if not raw.get("looks", (3, 5, 10)):  # a study trains its seeds in rounds: it needs them declared
        raise UserError(f"{path}: looks is empty", "declare the pairs at each look, e.g. looks: [3, 5, 10]")
    try:
        alpha, looks = float(raw.get("alpha", 0.05)), tuple(int(n) for n in raw.get("looks", (3, 5, 10)))
        widen = int(raw.get("widen_limit", 2))
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: {e}", "alpha is a number, looks a list of pair counts, widen_limit a count") from None
    if not 0 <= widen <= 10:
        raise UserError(f"{path}: widen_limit={widen} is not from 0 to 10", "e.g. widen_limit: 2")
    return Protocol(alpha, looks, str(raw.get("spending", "obrien_fleming")), widen,
                    shipped_family(Path(experiments)), source=Path(path).name, seed_base=raw.get("seed_base", 0),
                    min_pairs=raw.get("min_pairs", 2))


OWN_KEYS = ("alpha", "looks", "spending", "seed_base", "min_pairs")  # what a --claims file's `protocol:` may declare


def shipped_rounds(path: Path = PATH) -> dict[str, Any]:
    """The rounds protocol.yaml declares, no experiment read: its looks, seed_base (0 where none) and the
    min_pairs its looks go with (2 where none)."""
    raw = _shipped(path)
    return {"looks": list(raw.get("looks", (3, 5, 10))), "seed_base": int(raw.get("seed_base", 0)),
            "min_pairs": raw.get("min_pairs", 2)}


def _shipped(path: Path) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text()) or {}


def of_claims_file(raw: Any, source: str, family) -> Protocol:
    """The protocol of a --claims file's own family (`family`: its confirmatory claims' keys): the file's
    `protocol:` mapping (protocol.yaml's alpha, looks, spending, seed_base, min_pairs; any it leaves out at the
    defaults, except looks: without them one look at every seed the runs have; seed_base: 0, the seeds of a
    sweep of one's own), or, with none, that one look at α = 0.05. A UserError naming the file for a
    malformed mapping."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UserError(f"{source}: protocol must be a mapping (got {type(raw).__name__})",
                        "e.g. protocol: {looks: [3, 5, 10], alpha: 0.05, spending: obrien_fleming}")
    if unknown := sorted(set(raw) - set(OWN_KEYS)):
        fix = "a study's grids are widened by `normbench study protocol=FILE`; " if "widen_limit" in unknown else ""
        raise UserError(f"{source}: protocol has unknown key(s) {', '.join(unknown)}",
                        f"{fix}use {', '.join(OWN_KEYS)}")
    looks = raw.get("looks", [])
    if not isinstance(looks, list) or (not looks and "looks" in raw) or \
            not all(isinstance(n, int) and not isinstance(n, bool) for n in looks):
        raise UserError(f"{source}: protocol: looks={looks!r} is not a list of pair counts",
                        "e.g. looks: [3, 5, 10], or leave looks out for one look at every seed the runs have")
    alpha = raw.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise UserError(f"{source}: protocol: alpha={alpha!r} is not a number", "e.g. alpha: 0.05")
    return Protocol(float(alpha), tuple(looks), str(raw.get("spending", "obrien_fleming")), family=tuple(family),
                    name="your claims", source=source, seed_base=raw.get("seed_base", 0),
                    min_pairs=raw.get("min_pairs", 2))


# --- one look -------------------------------------------------------------------------------------------

def decide(p_for, p_against, level: float, decided=None, exact_for=None, exact_against=None, few=None) -> dict:
    """One look at many families at once. `p_for`, `p_against`: arrays (..., m), each member's t-test p
    of its hypothesis and of the opposite one (1 where untested); `decided`: bool (..., m), members decided
    at an earlier look (they count with p = 1 and are not decided again). Holm over the 2 m hypotheses at
    `level`. Returns arrays (..., m): held, refuted (new decisions only), p_holm, p_refute_holm (Holm-adjusted)
    and, given the exact p's, p_exact_holm, p_exact_refute_holm, and exact (the exact test also rejects
    the decided direction at `level`). `few`: bool (..., m), members read on fewer pairs than the protocol's
    min_pairs: decided only where the exact test agrees (dropping a rejection keeps the error below α)."""
    import numpy as np

    from normbench.summary import stats

    p_for, p_against = np.asarray(p_for, dtype=np.float64), np.asarray(p_against, dtype=np.float64)
    m = p_for.shape[-1]
    open_ = np.ones(p_for.shape, dtype=bool) if decided is None else ~np.asarray(decided, dtype=bool)

    def adjusted(a, b):
        both = np.concatenate([np.where(open_, a, 1.0), np.where(open_, b, 1.0)], axis=-1)
        both = np.where(np.isnan(both), 1.0, both)
        adj = stats.holm_adjust(both)
        return adj[..., :m], adj[..., m:]

    adj_for, adj_against = adjusted(p_for, p_against)
    held = open_ & (adj_for < level)
    refuted = open_ & ~held & (adj_against < level)
    out = {"held": held, "refuted": refuted, "p_holm": adj_for, "p_refute_holm": adj_against}
    if exact_for is not None:
        e_for, e_against = adjusted(np.asarray(exact_for, dtype=np.float64),
                                    np.asarray(exact_against, dtype=np.float64))
        out.update(p_exact_holm=e_for, p_exact_refute_holm=e_against,
                   exact=(held & (e_for < level)) | (refuted & (e_against < level)))
    if few is not None:
        agree = out.get("exact", np.zeros_like(held))
        keep = ~np.asarray(few, dtype=bool) | agree
        out.update(held=held & keep, refuted=refuted & keep)
    return out


@dataclass(frozen=True)
class Pvalues:
    """A claim's tests at one look: the t-test and the exact test, of its hypothesis and of the opposite."""
    p: float
    p_against: float
    p_exact: float | None = None
    p_exact_against: float | None = None
    n: int = 0  # pairs the look read


@dataclass(frozen=True)
class Decision:
    verdict: str  # held | refuted
    look: int  # the look (0-based) that decided it
    rests_on: str  # "exact" (the exact test rejects too) | "t-test" (the verdict needs the t-test's normality)
    p_holm: float  # the decided hypothesis's Holm-adjusted t-test p at that look
    level: float  # that look's α_r


@dataclass
class Look:
    index: int
    level: float
    decisions: dict[Key, Decision]  # every decision so far (the state the next look takes)
    new: list[Key]  # decided at this look
    undecided: list[Key]  # members still undecided after it (tested here or not)
    adjusted: dict[Key, dict[str, float]] = field(default_factory=dict)  # tested here: Holm-adjusted p's


def look(tested: dict[Key, Pvalues], index: int, state: dict[Key, Decision], proto: Protocol) -> Look:
    """Look `index` of the protocol: `tested` holds the p-values of the members tested at this look (the
    pairs of its seeds, look_seeds); the family's other members count with p = 1; `state` is the decisions of the
    earlier looks, which stay. A pure function: the same inputs give the same decisions."""
    import numpy as np

    if not 0 <= index < proto.planned:
        raise ValueError(f"look {index}: the protocol plans {proto.planned} looks")
    family = list(proto.family)
    if stray := [k for k in tested if k not in set(family)]:
        raise ValueError(f"not members of the family: {stray}")
    level = proto.levels[index]
    m = len(family)
    p_for, p_against, e_for, e_against = (np.ones(m) for _ in range(4))
    for i, key in enumerate(family):
        if key in tested:
            t = tested[key]
            p_for[i], p_against[i] = t.p, t.p_against
            e_for[i] = 1.0 if t.p_exact is None else t.p_exact
            e_against[i] = 1.0 if t.p_exact_against is None else t.p_exact_against
    decided = np.array([k in state for k in family], dtype=bool)
    few = np.array([k in tested and tested[k].n < proto.min_pairs for k in family], dtype=bool)
    out = decide(p_for, p_against, level, decided, e_for, e_against, few)
    decisions = dict(state)
    new = []
    for i, key in enumerate(family):
        if out["held"][i] or out["refuted"][i]:
            held = bool(out["held"][i])
            decisions[key] = Decision("held" if held else "refuted", index, "exact" if out["exact"][i] else "t-test",
                                      float(out["p_holm" if held else "p_refute_holm"][i]), level)
            new.append(key)
    adjusted = {k: {name: float(out[name][i]) for name in
                    ("p_holm", "p_refute_holm", "p_exact_holm", "p_exact_refute_holm")}
                for i, k in enumerate(family) if k in tested}
    return Look(index, level, decisions, new, [k for k in family if k not in decisions], adjusted)


def round_seeds(proto: Protocol, index: int) -> range:
    """The seeds round `index` trains: those its look reads beyond the previous look's (from seed_base: 1000-1002,
    then 1003-1004, ... for the shipped protocol)."""
    base = proto.seed_base
    return range(base + (proto.looks[index - 1] if index else 0), base + proto.looks[index])


def look_seeds(proto: Protocol, index: int) -> range | None:
    """The seeds look `index` reads: those of rounds 0..index as declared (1000-1002, then 1000-1004, then
    1000-1009 for the shipped protocol), and no other: a failed one is a missing pair, not replaced by a later
    round's seed. None for a protocol of one look at every seed the runs have (a --claims file that declares
    no looks)."""
    return range(proto.seed_base, proto.seed_base + proto.looks[index]) if proto.looks else None


# --- lr grids widened before a look counts ----------------------------------------------------------------

@dataclass(frozen=True)
class Widening:
    cell: tuple  # select.py's cell key
    side: str  # "low" | "high"
    value: float  # the next grid value on that side
    added: int  # values already added beyond the declared grid on that side
    at_limit: bool  # the limit is reached: nothing more is trained there, the look counts as it is


def widen(chosen: dict, cells, declared: dict | list | None, limit: int) -> list[Widening]:
    """For each cell in `cells` (those the undecided primary claims read) whose lr choice (select.choose)
    sits at an edge of its grid: the next grid value on that side (select.py's spacing), unless `limit`
    values were already added beyond the declared grid there (`declared`: cell -> its declared grid, or one
    grid for all; None: the cell's grid is the declared one). Cells at the limit are listed with at_limit."""
    from normbench.summary.select import _next

    out = []
    for cell in sorted((c for c in chosen if c in set(cells)), key=str):
        c = chosen[cell]
        if len(c.grid) < 2 or not all(isinstance(v, (int, float)) for v in c.grid):
            continue
        base = declared.get(cell, c.grid) if isinstance(declared, dict) else (declared or c.grid)
        for side, at in (("low", c.low_edge), ("high", c.high_edge)):
            if not at:
                continue
            added = sum(v < min(base) for v in c.grid) if side == "low" else sum(v > max(base) for v in c.grid)
            out.append(Widening(cell, side, float(_next(list(c.grid), side == "high")), added, added >= limit))
    return out
