"""Learning-rate sensitivity: how much accuracy a configuration gives up across a grid of learning rates
(Wortsman et al. 2023, arXiv 2309.14322, section 3.1, on accuracy instead of loss).

For one configuration and seed, over the lrs of the grid:

    sensitivity = mean over lr of (best accuracy over the grid - accuracy at lr)

0 when every lr trains as well as the best; larger when fewer lrs train. A run that diverged counts at
chance accuracy (1/10: both datasets have 10 classes), as Wortsman et al. cap a diverged run's loss at
its initial loss; a run that failed (not the model's doing) leaves its seed out. Test accuracy is used: the
measure describes the whole curve and selects nothing.

    curves = lr_curves(runs, labels)   # summarize: every (study, data, model, norm label, batch) with >= 2 lrs
    value = per_seed(runs_of_one_config)   # claims: seed -> sensitivity (metric: lr_sensitivity)
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from normbench.summary.types import Entry, Run

METRIC = "lr_sensitivity"
CHANCE = 0.1  # FashionMNIST and CIFAR-10: 10 classes


def chance(run: Run) -> float:
    """A diverged run's accuracy: chance, 1 / the classes (results.json `num_classes` where a run records
    it; 10 for both datasets normbench ships)."""
    classes = run.results.get("num_classes")
    return 1.0 / classes if isinstance(classes, int) and classes > 1 else CHANCE


def accuracy(run: Run) -> float | None:
    """The run's test accuracy; chance for a diverged run; None for a failed or incomplete one."""
    if run.status == "diverged":
        return chance(run)
    if run.status != "completed":
        return None
    value = run.results.get("test_acc")
    return float(value) if isinstance(value, (int, float)) else None


def sensitivity(by_lr: dict[float, float]) -> float:
    best = max(by_lr.values())
    return statistics.fmean(best - a for a in by_lr.values())


def per_seed(runs: list[Run]) -> tuple[dict[int, float], list[int]]:
    """seed -> sensitivity over the lrs its runs trained (seeds with fewer than two lrs give none), and
    the seeds left out because a run failed."""
    by_seed: dict[int, dict[float, float]] = defaultdict(dict)
    lost: set[int] = set()
    for r in runs:
        seed, acc = int(r.config.get("seed", 0)), accuracy(r)
        if acc is None:
            lost.add(seed)
        else:
            by_seed[seed][float(r.config["lr"])] = acc
    values = {s: sensitivity(accs) for s, accs in sorted(by_seed.items()) if s not in lost and len(accs) > 1}
    return values, sorted(lost)


@dataclass
class LrCurve:
    """Accuracy against lr for one configuration (a norm label at one batch size), over seeds."""
    study: str
    data: str
    model: str
    label: str
    batch_size: int
    lrs: list[float] = field(default_factory=list)
    cells: dict[float, Entry] = field(default_factory=dict)  # lr -> test accuracy over seeds (diverged: chance)
    sensitivity: Entry = field(default_factory=Entry)  # over seeds
    diverged: dict[float, int] = field(default_factory=dict)  # lr -> runs that diverged there
    lost_seeds: list[int] = field(default_factory=list)

    @property
    def title(self) -> str:
        parts = [p for p in (self.study, self.data, self.model) if p]
        return " · ".join(parts) + f" · batch {self.batch_size}"


def lr_curves(runs: list[Run], labels: dict[Path, str]) -> list[LrCurve]:
    """One curve per (study, data, model, norm label without lr, batch size) that tried two lrs or more."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        if r.config and r.config.get("lr") is not None and r.path in labels and not r.varlen:
            groups[r.table_study, r.config.get("data.name"), r.config.get("model.name"), labels[r.path],
                   r.config.get("batch_size")].append(r)
    out = []
    for (study, data, model, label, batch), group in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        lrs = sorted({float(r.config["lr"]) for r in group})
        if len(lrs) < 2:
            continue
        curve = LrCurve(study, data, model, label, batch, lrs)
        values, curve.lost_seeds = per_seed(group)
        for r in sorted(group, key=lambda r: int(r.config.get("seed", 0))):
            lr, acc = float(r.config["lr"]), accuracy(r)
            if acc is not None and int(r.config.get("seed", 0)) not in curve.lost_seeds:
                curve.cells.setdefault(lr, Entry()).add(int(r.config.get("seed", 0)), acc, r.path)
            if r.status == "diverged":
                curve.diverged[lr] = curve.diverged.get(lr, 0) + 1
        for seed, v in values.items():
            curve.sensitivity.add(seed, v)
        out.append(curve)
    return out
