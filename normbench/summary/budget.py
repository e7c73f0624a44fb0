"""Was the budget long enough for a claim? Its own paired difference, on validation accuracy, over the last
half of the runs' budget.

    label, path = budget.check(claim, terms_a, terms_b, seeds)

At each validation the runs share in the last half of their budget (each run's epoch over its last
validated epoch, at least 50%: 50%, 75%, 100% of a four-epoch run), the claim's per-seed difference a - b
(a side less its `minus` cell where it has one) is read on validation accuracy, and averaged over the
seeds. The label says whether that difference still moved:

- stable: it moved less, from the first of those validations to the last, than the half-width of the 95%
  t-interval of the last one: more budget would not move it past the noise of its own seeds;
- moving toward a / toward b: it moved more, in a's favour (the difference grew) or b's, with where it went
  ("moving toward b: +6.1 → +4.1", in points for accuracies);
- not checkable: the runs share fewer than three validations in that half (short runs, or `validations`
  spread thinly), or the claim's metric is not one accuracy (a gradient ratio, lr_sensitivity, x - y), or
  its sides read different ones (one cell at two paddings: validation is the same run's on both sides).

A run that diverged counts at chance at every validation, as the claim counts it. Why not a per-run
plateau: a run's validation accuracy on 2,000 images has a standard error near 0.8 points, so asking one run
to stay within half a point is a check below its noise, and a cosine schedule annealed to near zero reads
as a plateau whatever the claim's difference does.
"""

from __future__ import annotations

import statistics

from normbench.summary import lr_sensitivity, metrics, stats
from normbench.summary.types import Run

MIN_POINTS = 3  # validations in the budget's last half a label needs
HALF = 0.5  # the last half of the budget


def _passes(run: Run) -> dict[float, float]:
    """Budget fraction (rounded) -> validation accuracy, for each pass in the run's last half."""
    history = [h for h in run.results.get("history") or [] if isinstance(h, dict)
               and isinstance(h.get("acc/val"), (int, float)) and isinstance(h.get("epoch"), (int, float))
               and not isinstance(h["epoch"], bool) and h["epoch"] > 0]
    if not history:
        return {}
    last = history[-1]["epoch"]
    return {round(h["epoch"] / last, 6): float(h["acc/val"]) for h in history if h["epoch"] >= HALF * last}


def check(claim, terms_a: dict[int, list], terms_b: dict[int, list], seeds: list[int]) -> tuple[str, list]:
    """The claim's budget label and its path [[fraction, mean a - b], ...] (in the metric's unit; [] when not
    checkable). `terms_*`: seed -> [(weight, run)], a side's run (+1) and its minus cell's (-1)."""
    read = {reading["metric"] for reading in claim.readings()}
    if len(read) > 1:  # e.g. one cell's test accuracy at two paddings: validation cannot tell them apart
        return f"not checkable: its sides read different metrics ({', '.join(sorted(read))})", []
    (metric,) = read
    if metric == lr_sensitivity.METRIC or " - " in metric or not metrics.is_accuracy(metric):
        return "not checkable: its metric is not one accuracy", []
    runs = {id(r): r for s in seeds for terms in (terms_a, terms_b) for _, r in terms.get(s, [])}
    if len(seeds) < 2 or not runs:
        return "not checkable: fewer than two pairs", []
    passes = {key: _passes(r) for key, r in runs.items() if r.status != "diverged"}
    shared = sorted(set.intersection(*(set(p) for p in passes.values()))) if passes else []
    if len(shared) < MIN_POINTS:
        short = sum(len(p) < MIN_POINTS for p in passes.values())
        why = (f"{short} of its {len(runs)} runs have" if short else f"its {len(runs)} runs share") + \
            f" fewer than {MIN_POINTS} validations in the last half of their budget"
        return f"not checkable: {why}", []

    def value(run: Run, at: float) -> float:
        return lr_sensitivity.chance(run) if run.status == "diverged" else passes[id(run)][at]

    def diffs(at: float) -> list[float]:
        return [sum(w * value(r, at) for w, r in terms_a[s]) - sum(w * value(r, at) for w, r in terms_b[s])
                for s in seeds]

    path = [[at, statistics.fmean(diffs(at))] for at in shared]
    low, high = stats.t_interval(diffs(shared[-1]))
    start, end = path[0][1], path[-1][1]
    if abs(end - start) <= (high - low) / 2:
        return "stable", path
    scale = claim.scale
    return f"moving toward {'a' if end > start else 'b'}: {scale * start:+.1f} → {scale * end:+.1f}", path
