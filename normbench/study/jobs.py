"""A study's jobs: one pack each (a cell's lrs x the round's seeds), its directory, and what it selects.

    universe = study_jobs(study, scale, widened)      # round 1's jobs (every sweep's), and the widened ones
    wanted = [j for j in universe if j.reads(open_claims)]   # what a later round trains
    command(job, seeds, out)                          # the `normbench train` it runs as

Round r of a study trains job j into <out>/<study>/r<r>/<j.name>/ (a pack: one folder per member); a grid
value added by widening is a job of its own (<sweep>-<k>-lr<value>), trained at the round that added it and
at every later round its cell is still read.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from normbench.errors import UserError
from normbench.study import spec
from normbench.summary import frozen

RUNTIME = ("pack.seeds", "pack.lrs", "resume", "hydra.run.dir", "hydra.sweep.dir")


@dataclass(frozen=True)
class Job:
    study: str
    sweep: str
    name: str  # unique within its study: <sweep>-<k>, or <sweep>-<k>-lr<value> for a widened grid value
    overrides: tuple[str, ...]  # without the seeds (each round sets pack.seeds)
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # flattened, composed
    since: int = 1  # the first round that trains it (a widened grid value: the round that added it)

    def reads(self, claims) -> bool:
        """Does a side of one of these claims select this job's runs?"""
        from normbench.summary.verdicts import selects

        return any(c.study in ("", self.study_experiment) and (selects(c.a, self.config) or selects(c.b, self.config))
                   for c in claims)

    @property
    def study_experiment(self) -> str:
        return next((o.split("=", 1)[1] for o in self.overrides if o.startswith("experiment=")), "")

    @property
    def members_per_seed(self) -> int:
        lrs = self.config.get("pack.lrs")
        return len(lrs) if isinstance(lrs, list) and lrs else 1


@cache
def _flat(overrides: tuple[str, ...]) -> dict[str, Any]:
    from normbench.config import flatten, to_dict
    from normbench.study.estimate import compose

    return flatten(to_dict(compose(list(overrides))))


def with_lr(overrides, value: float) -> tuple[str, ...]:
    return (*[o for o in overrides if o.split("=", 1)[0] not in RUNTIME + ("lr",)], f"pack.lrs=[{value:g}]")


def study_jobs(study: spec.Study, scale: str, widened: list[dict] = ()) -> list[Job]:
    """Every job of `study` at `scale`: each sweep's (Hydra's order), then the grid values widening added
    (the study's state lists them: {"study", "base", "lr"})."""
    out = []
    for sweep, overrides in study.sweeps_at(scale).items():
        for k, job in enumerate(spec.jobs(overrides)):
            out.append(Job(study.name, sweep, f"{sweep}-{k}", tuple(job), _flat(tuple(job))))
    by_name = {j.name: j for j in out}
    for w in widened:
        if w["study"] == study.name and w["base"] in by_name:
            base = by_name[w["base"]]
            overrides = with_lr(base.overrides, w["lr"])
            out.append(Job(study.name, base.sweep, f"{base.name}-lr{w['lr']:g}", overrides, _flat(overrides),
                           int(w["round"])))
    return out


def check(jobs: list[Job], claims) -> None:
    """A UserError, before anything trains, where two of a study's jobs train the same runs (two sweeps
    that overlap: each seed's run twice, which no claim can read) or a claim reads a cell that no job
    trains (it could never be decided)."""
    from normbench.summary.verdicts import _picks

    seen: dict[tuple, Job] = {}
    for j in jobs:
        same = json.dumps({k: v for k, v in j.config.items() if k not in RUNTIME + ("lr",)}, sort_keys=True,
                          default=str)
        for lr in j.config.get("pack.lrs") or [j.config.get("lr")]:  # a pack: a run per lr
            first = seen.setdefault((j.study, same, lr), j)
            if first is not j:
                raise UserError(f"study {j.study}: jobs {first.name} and {j.name} train the same runs (lr={lr} of "
                                f"{' '.join(j.overrides)})", "make each sweep train runs of its own: drop the "
                                "overlapping values from one of them")
    for c in claims:
        mine = [j for j in jobs if c.study in ("", j.study_experiment)]
        runs = [{**j.config, "lr": lr} for j in mine for lr in j.config.get("pack.lrs") or [j.config.get("lr")]]
        for sel in c.selectors():
            if not any(_picks(sel, config) for config in runs):
                shown = ", ".join(f"{k}: {v}" for k, v in sel.items())
                raise UserError(f"claim {c.name!r} reads a cell no sweep trains ({{{shown}}})",
                                "add a sweep that trains it, or fix the claim's selector (config keys as "
                                "`normbench train --cfg job` prints them)")


def directory(job: Job, round_index: int, out: Path) -> Path:
    return Path(out) / job.study / f"r{round_index + 1}" / job.name


def command(job: Job, seeds, out: Path, round_index: int, python: str = sys.executable) -> list[str]:
    """The `normbench train` that trains `job` at `seeds` into its round's folder (resume=true where the
    folder exists: a finished run is kept, an interrupted one continues from its checkpoint), with the hash of
    the family the study froze (its study.json) as `family_hash`, which each run records."""
    where = directory(job, round_index, out)
    again = ["resume=true"] if where.exists() else []
    family = frozen.family_hash(out)
    return [python, "-m", "normbench", "train", *job.overrides, f"pack.seeds=[{','.join(map(str, seeds))}]",
            *again, *([f"family_hash={family}"] if family else []), f"hydra.run.dir={where}"]


def base_of(run_path: Path, out: Path) -> tuple[str, str] | None:
    """(study, job name) of the job that trained the run at `run_path` (a pack's member folder)."""
    try:
        parts = Path(run_path).resolve().relative_to(Path(out).resolve()).parts
    except ValueError:
        return None
    return (parts[0], parts[2]) if len(parts) >= 3 and parts[1].startswith("r") else None
