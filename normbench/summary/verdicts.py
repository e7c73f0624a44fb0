"""Verdicts: the declared claims (claims.py) tested on a sweep's runs.

    results = test(claims, runs)                          # exploratory: estimate, intervals, unadjusted p
    results = test(claims, kept, runs, proto, pick)       # summarize --select lr: `pick` chooses a look's lrs

Each side's runs are paired by seed (a claim holding more than one run at a seed is not tested, with the
keys that tell them apart). A run that diverged counts at chance (accuracy 1/10 for these datasets; a
metric with no chance level, such as a gradient ratio, leaves its seed out) and the note names it; a run
that failed (not the model's doing) leaves its seed out, with a note. For each claim, the per-seed
differences a - b give the mean, its 95% t-interval and percentile-bootstrap interval, the one-sided
paired t-test (greater/less than the margin) or TOST (equivalent within it) and the exact sign-flip test
of the same hypothesis, each with its opposite (`pvalues`).

Primary claims are one confirmatory family (protocol.py, docs/protocol.md): every primary claim of the
shipped studies, whatever ran, plus any primary claim of this summary beyond them; or, for a --claims
file, its own claims alone (every one not marked exploratory), under the protocol the file declares or one
look at every seed the runs have. Look r reads the seeds of rounds 1..r as declared (protocol.look_seeds:
1000-1002, 1000-1004, 1000-1009 from the shipped seed_base) and nothing else: a failed seed among them is
a missing pair, never replaced by a later seed, and under --select lr each of those seeds' lr is chosen on
the other seeds of the same look (`pick`), so a later round's runs cannot change what an earlier look read.
A claim reaches a look once each side has a run (of any status) at every seed of it (the one look at every
seed: at once, with the pairs it has). Each look tests the undecided claims that reached it at its share of
α, Holm over the family's 2 m hypotheses, and a decided claim stays decided. The verdict:

- held: the claim's alternative is significant after Holm, at a look's level;
- refuted: the opposite one (less/greater than the margin; outside +-margin for `equivalent`) is;
- inconclusive: neither at any look reached (or no look reached yet);
- exploratory: a claim outside the family: its estimate, interval and unadjusted p over every pair, no verdict.

A verdict rests on the exact test when the exact test rejects the same hypothesis at the same level (no
normality needed), on the t-test otherwise. Beside it: whether the claim's own difference still moved over
the last half of the budget (budget.py), each side's training accuracy, and P(a > b) over seeds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from normbench.summary import budget, lr_sensitivity, stats
from normbench.summary.claims import MINUS, Claim, ClaimResult
from normbench.summary import metrics
from normbench.summary.metrics import matches
from normbench.summary.types import Run, fmt_value


def _seed(run: Run) -> int:
    return int(run.config.get("seed", 0))


def _picks(sel: dict[str, Any], config: dict[str, Any]) -> bool:
    """Does one selector (its own keys: not metric, not minus) pick this flattened config?"""
    return all(matches(config.get(k), v) for k, v in sel.items() if k not in ("metric", MINUS))


def selects(side: dict[str, Any], config: dict[str, Any]) -> bool:
    """Does a claim side pick a run (or a job) of this flattened config: its own selector, or the cell it
    subtracts (`minus`), which a study must train as well?"""
    return _picks(side, config) or (isinstance(side.get(MINUS), dict) and _picks(side[MINUS], config))


def _matching(claim: Claim, side: dict[str, Any], runs: list[Run]) -> list[Run]:
    """The runs one selector picks (its study's runs only, for a claim an experiment declared): a side's own
    runs, not its minus's (give the minus selector for those)."""
    return [r for r in runs if r.config and not (claim.study and r.study != claim.study) and _picks(side, r.config)]


@dataclass
class _Side:
    values: dict[int, float] = field(default_factory=dict)  # seed -> the metric of its one run
    note: str = ""
    read: list[Run] = field(default_factory=list)  # the runs whose numbers entered `values`
    at_chance: list[Run] = field(default_factory=list)
    terms: dict[int, list[tuple[float, Run]]] = field(default_factory=dict)  # seed -> its run (+1), minus's (-1)


def _side(claim: Claim, side: dict[str, Any], runs: list[Run], grid: list[Run]) -> _Side:
    """seed -> the side's value at that seed: its one run's metric, less the `minus` run's at the same seed
    where the side subtracts a cell (a seed where either gave no number leaves the side; the notes of both,
    the minus's labelled so)."""
    own = _cell(claim, side, runs, grid)
    minus = claim.minus_of(side)
    if minus is None:
        return own
    less = _cell(claim, minus, runs, grid)
    notes = [own.note, less.note and f"minus: {less.note}"]
    if AMBIGUOUS in own.note or AMBIGUOUS in less.note:
        return _Side(note="; ".join(filter(None, notes)))
    if not less.values:
        notes.append("no runs match its minus")
    elif own.values and (unmatched := sorted(set(own.values) ^ set(less.values))):
        notes.append(f"seed{'s' * (len(unmatched) > 1)} {', '.join(map(str, unmatched))} without a run of both "
                     f"the side and its minus, left out")
    seeds = set(own.values) & set(less.values)
    return _Side({s: own.values[s] - less.values[s] for s in sorted(seeds)}, "; ".join(filter(None, notes)),
                 [r for r in own.read + less.read if _seed(r) in seeds],
                 [r for r in own.at_chance + less.at_chance if _seed(r) in seeds],
                 {s: own.terms[s] + [(-w, r) for w, r in less.terms[s]] for s in seeds
                  if s in own.terms and s in less.terms})


def _cell(claim: Claim, side: dict[str, Any], runs: list[Run], grid: list[Run]) -> _Side:
    """seed -> the metric of the one matching run at that seed, with a note for the seeds left out, the
    runs scored at chance and the seeds holding several runs. lr_sensitivity reads `grid` instead: every
    lr's run, not only the ones --select lr kept."""
    metric = claim.metric_of(side)
    matching = _matching(claim, side, grid if metric == lr_sensitivity.METRIC else runs)
    out = _Side()
    if metric == lr_sensitivity.METRIC:  # one number per seed from all its lrs' runs (a diverged one at chance)
        out.values, failed = lr_sensitivity.per_seed(matching)
        out.read = [r for r in matching if _seed(r) in out.values]
        out.at_chance = [r for r in out.read if r.status == "diverged"]
        out.note = "; ".join(filter(None, [_chance_note(out.at_chance), failed and
                                           f"seed(s) {', '.join(map(str, failed))} had a failed run, left out of "
                                           f"the pairs"]))
        return out
    by_seed: dict[int, list[Run]] = {}
    lost: dict[int, Run] = {}  # seed -> a matching run that gave no number (failed, incomplete)
    for r in matching:
        seed = _seed(r)
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
                        f"add those keys to the selector"
                        + (", or summarize with --select lr" if "lr" in differ else ""))
            out.values = {}
            return out
        run = group[0]
        v = metrics.value(run, metric)
        if run.status == "diverged":
            if v is None:
                notes.append(f"seed {seed} diverged ({run.path.name}), left out: {metric} has no chance level")
                continue
            out.at_chance.append(run)
        if v is not None:
            out.values[seed] = v
            out.read.append(run)
            out.terms[seed] = [(1.0, run)]
    notes.insert(0, _chance_note(out.at_chance))  # counted, not dropped: dropping favours the less stable side
    if lost:  # a failed seed leaves the pairs: not the model's doing
        notes.append(", ".join(f"seed {s} {r.status} ({r.path.name})" for s, r in sorted(lost.items()))
                     + ", left out of the pairs")
    if grid is not runs and (unkept := sorted({_seed(r) for r in _matching(claim, side, grid)} - set(by_seed)
                                               - set(lost))):  # select.choose left these seeds no value
        notes.append(f"seed{'s' * (len(unkept) > 1)} {', '.join(map(str, unkept))} left without a run by the lr "
                     f"choice (its table says why)")
    out.note = "; ".join(filter(None, notes))
    return out


def _chance_note(runs: list[Run]) -> str:
    """'seed 3 diverged (gn_3), scored at chance (10%)': the runs a side scored at chance, by name."""
    if not runs:
        return ""
    seeds = sorted({_seed(r) for r in runs})
    return (f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))} diverged "
            f"({', '.join(r.path.name for r in runs)}), scored at chance ({100 * lr_sensitivity.chance(runs[0]):g}%)")


def cells_read(claim: Claim, runs: list[Run], labels: dict) -> set[tuple]:
    """The cells (select.py's cell keys) whose runs a claim's sides select: what a study trains for it, and
    where its lr choices are read (protocol.widen)."""
    from normbench.summary.select import cell_key

    return {cell_key(r, labels[r.path]) for sel in claim.selectors() for r in _matching(claim, sel, runs)
            if r.path in labels}


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


def _train_acc(side: _Side, seeds: set[int]) -> float | None:
    """The mean training accuracy of a side's own runs at `seeds` (not its minus cell's): beside a verdict, it
    shows at once whether a side underfits."""
    values = [float(r.results["train_acc"]) for s in seeds for w, r in side.terms.get(s, [])
              if w > 0 and isinstance(r.results.get("train_acc"), (int, float))]
    return statistics.fmean(values) if values else None


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
    res.at_chance = [str(r.path) for x in (a, b) for r in x.at_chance if _seed(r) in paired]
    read = [r for x in (a, b) for r in x.read if _seed(r) in paired and r.status == "completed"]
    res.runs = len({r.path for x in (a, b) for r in x.read if _seed(r) in paired})  # both sides may read one run
    res.budget, res.budget_path = budget.check(claim, a.terms, b.terms, res.seeds)
    res.train_a, res.train_b = _train_acc(a, paired), _train_acc(b, paired)
    res.models = sorted({str(r.config["model.name"]) for r in read if r.config.get("model.name")})
    xa, xb = [a.values[s] for s in res.seeds], [b.values[s] for s in res.seeds]
    res.diffs = [x - y for x, y in zip(xa, xb)]
    res.mean_a, res.mean_b, res.estimate = statistics.fmean(xa), statistics.fmean(xb), statistics.fmean(res.diffs)
    res.ci, res.bootstrap = stats.t_interval(res.diffs), stats.bootstrap_interval(res.diffs)
    res.p_improve, res.p_improve_ci = stats.probability_of_improvement(xa, xb)
    if res.n >= 2:
        tests = pvalues(res.diffs, claim.expect, claim.margin / claim.scale)
        res.p, res.p_against, res.p_exact, res.p_exact_against = (float(t) for t in tests)
    else:
        res.note = "; ".join(filter(None, [res.note, "one pair: no test"]))
    return res


def _seeds_text(seeds) -> str:
    """'0-4' for a run of seeds, '0, 2' otherwise."""
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _not_run(claim: Claim, runs: list[Run], seeds) -> list[int]:
    """The seeds of `seeds` at which a side of the claim has no run at all (of any status) among `runs`: a
    look that reads them is not reached yet."""
    return sorted({s for sel in claim.selectors() for s in set(seeds) - {_seed(r) for r in
                                                                       _matching(claim, sel, runs)}})


@dataclass
class _Tested:
    """What one look read for a claim."""
    index: int
    pvalues: Any  # protocol.Pvalues
    seeds: list[int]
    diffs: list[float]
    adjusted: dict[str, float] = field(default_factory=dict)


def test(claims: list[Claim], runs: list[Run], grid: list[Run] | None = None, protocol=None,
         pick: Callable[[list[Run]], list[Run]] | None = None) -> list[ClaimResult]:
    """Every claim tested on `runs` (lr_sensitivity on `grid`: all of a sweep's runs, when `runs` are
    those --select lr kept): its estimate, intervals and unadjusted p's over every pair. Primary claims
    (role primary, or members of the protocol's family) are then tested as the protocol's family, look by
    look (protocol.look): look r reads the runs of its rounds' seeds alone (protocol.look_seeds), `pick`
    keeping those a selection chooses among them (summarize --select lr: the lr of each seed chosen on the
    other seeds of the look; default: `runs` at those seeds), at the look's level, Holm over every member's
    two hypotheses, a member not tested at a look counting with p = 1, a decided claim staying decided."""
    from normbench.summary import protocol as protocols

    proto = protocols.load() if protocol is None else protocol
    grid = runs if grid is None else grid
    results = [_one(c, runs, grid) for c in claims]
    family = set(proto.family)
    primary = [r for r in results if r.claim.role == "primary" or r.claim.key in family]
    proto = proto.with_members(r.claim.key for r in primary)
    state: dict = {}
    last: dict[tuple, _Tested] = {}  # key -> the last look that tested it
    waiting: dict[tuple, tuple[int, list[int]]] = {}  # key -> the first look it has not reached, its seeds not run
    for index in range(proto.planned):
        declared = protocols.look_seeds(proto, index)  # None: the one look at every seed the runs have
        seeds = {_seed(x) for x in grid if x.config} if declared is None else set(declared)
        open_ = [r for r in primary if r.claim.key not in state and r.claim.key not in waiting]
        if not open_:
            break
        look_grid = [x for x in grid if x.config and _seed(x) in seeds]
        look_runs = pick(look_grid) if pick else [x for x in runs if x.config and _seed(x) in seeds]
        tested, read = {}, {}
        for r in open_:
            c = r.claim
            if declared is not None and (missing := _not_run(c, look_grid, seeds)):
                waiting[c.key] = (index, missing)
                continue
            pairs = _one(c, look_runs, look_grid)
            if pairs.n < 2:  # reached, but too few pairs (failed runs): counts with p = 1
                continue
            p, pa, pe, pea = (float(t) for t in pvalues(pairs.diffs, c.expect, c.margin / c.scale))
            tested[c.key] = protocols.Pvalues(p, pa, pe, pea, pairs.n)
            read[c.key] = pairs
        if not tested:
            continue
        step = protocols.look(tested, index, state, proto)
        state = step.decisions
        for key, t in tested.items():
            last[key] = _Tested(index, t, read[key].seeds, read[key].diffs, step.adjusted[key])
    primary_ids = {id(r) for r in primary}
    for r in results:
        _conclude(r, id(r) in primary_ids, proto, state, last, waiting.get(r.claim.key))
    return results


def _needed(r: ClaimResult, diffs: list[float], proto) -> str:
    """After the last look: the pairs that would decide the claim with power 0.8 at the last look's level over
    the family's every hypothesis (Holm's strictest step), were its measured mean and SD the true ones."""
    from normbench.summary.stats import PAIRS_LIMIT, POWER, pairs_needed

    hypotheses = 2 * len(proto.family)
    level = proto.levels[-1] / hypotheses
    c = r.claim
    r.needed_to, r.pairs_needed = pairs_needed(diffs, c.expect, c.margin / c.scale, level)
    said, which = ("undecided after the last look", "the last look's") if proto.looks else \
        ("undecided at its one look", "the look's")
    if not r.needed_to:
        return f"{said}; its measured mean sits on its bound: no number of pairs would decide it"
    if r.pairs_needed is None:
        return (f"{said}; more than {PAIRS_LIMIT:,} pairs would be needed to {r.needed_to} it at "
                f"power {POWER:.0%}, were its measured mean and SD true")
    return (f"{said}; about {r.pairs_needed} pairs would {r.needed_to} it (power {POWER:.0%} at "
            f"level {level:.2g}, {which} over the family's {hypotheses} hypotheses, were its measured mean "
            "and SD true)")


def _conclude(r: ClaimResult, primary: bool, proto, state: dict, last: dict, waiting) -> None:
    """The claim's verdict and the numbers shown with it: the look that decided it (or the last that
    tested it) for a primary claim; its own over every pair for an exploratory one."""
    from normbench.summary.protocol import look_seeds

    r.looks = proto.planned
    notes = [r.note]
    if not primary:
        r.role, r.verdict = "exploratory", "exploratory"
        r.note = "; ".join(filter(None, notes))
        return
    r.role, key = "primary", r.claim.key
    r.verdict = "inconclusive"
    if waiting is not None and r.n and key not in state:
        index, missing = waiting
        notes.append(f"{'no look yet: ' * (key not in last)}look {index + 1} reads seeds "
                     f"{_seeds_text(look_seeds(proto, index))}: seed{'s' * (len(missing) > 1)} "
                     f"{_seeds_text(missing)} {'have' if len(missing) > 1 else 'has'} no finished run yet")
    if key not in last:
        if r.n and waiting is None:
            notes.append("no look could test it: too few pairs at every look it reached")
        r.p_refute = None
        r.note = "; ".join(filter(None, notes))
        return
    t = last[key]
    index, pv, adj = t.index, t.pvalues, t.adjusted
    r.look, r.look_n, r.look_seeds, r.level = index + 1, pv.n, t.seeds, proto.levels[index]
    r.look_estimate, r.look_ci = statistics.fmean(t.diffs), stats.t_interval(t.diffs)
    r.p, r.p_against, r.p_exact, r.p_exact_against = pv.p, pv.p_against, pv.p_exact, pv.p_exact_against
    r.p_holm, r.p_refute = adj["p_holm"], adj["p_refute_holm"]
    r.p_exact_holm, r.p_exact_refute = adj["p_exact_holm"], adj["p_exact_refute_holm"]
    if key in state:
        d = state[key]
        r.verdict, r.rests_on = d.verdict, d.rests_on
        if d.rests_on == "t-test":
            notes.append(f"rests on the t-test's normality: the exact test does not reach the look's level "
                         f"(its smallest p at n = {pv.n} is {2.0 ** -pv.n:.3g} before Holm)")
    elif waiting is None and index + 1 < proto.planned:
        notes.append(f"undecided at look {index + 1} of {proto.planned}; the next look reads seeds "
                     f"{_seeds_text(look_seeds(proto, index + 1))}")
    elif index + 1 == proto.planned:  # the protocol is spent: what would decide it
        notes.append(_needed(r, t.diffs, proto))
    if r.seeds != t.seeds or r.diffs != t.diffs:  # more seeds, or the lrs chosen over more seeds than the look's
        notes.append(f"the tests read look {index + 1}'s {pv.n} pairs (seeds {_seeds_text(t.seeds)}"
                     f"{', each chosen within them' * (r.seeds == t.seeds)}); the estimate reads all {r.n}")
    r.note = "; ".join(filter(None, notes))
