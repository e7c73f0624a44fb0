"""The line a `normbench train -m` sweep prints before its first run: its jobs, runs, computations and
estimated time, as `normbench study` plans a round (a Hydra callback, `hydra.callbacks.plan` in
configs/config.yaml; it runs once, in the process that launches the sweep).

    sweep: 24 jobs, 360 runs, 120 computations, ~1 h 05 min on this machine with 2 at once (calibrated)

The estimate calibrates one job per model and batch size (estimate.py: a few steps and the whole
evaluation suite, in this process) and projects each job from it. It is left out, and the line says why,
where it would cost more than it tells: a sweep of at most SMALL steps in all, one of more than
MAX_CALIBRATIONS model and batch size combinations (`normbench study NAME --plan` estimates a shipped
study, keeping its calibrations), or one whose runs go to a cluster (this machine's speed says nothing
there).
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback

from normbench.train.budget import count_steps

SMALL = 20_000  # steps in all, below which a calibration (a process start, then ~5-15 s per model and batch size)
# is not worth it
MAX_CALIBRATIONS = 4  # model and batch size combinations calibrated at most before a sweep starts


class SweepPlan(Callback):
    def on_multirun_start(self, config, **kwargs: Any) -> None:
        # Where the sweep cannot start (its launcher does not load, its folder cannot be written, a value it
        # sweeps is unknown) the sweep's own one-line error comes next: no plan line before it.
        if not _launcher_loads(config) or not _writable(config.hydra.sweep.dir):
            return
        try:
            launcher = str((config.hydra.get("launcher") or {}).get("_target_") or "")
            line = plan_line(list(config.hydra.overrides.task), _workers(config), local="slurm" not in launcher.lower())
        except Exception:  # noqa: BLE001  a plan that cannot be made never stops the sweep, nor speaks for it
            return
        print(f"normbench: {line}", file=sys.stderr, flush=True)


def _writable(folder: str) -> bool:
    """The sweep's folder exists or can be made (Hydra makes it next; making it first changes nothing)."""
    from pathlib import Path

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return True


def _launcher_loads(config) -> bool:
    import importlib

    target = str((config.hydra.get("launcher") or {}).get("_target_") or "")
    try:
        module = importlib.import_module(target.rsplit(".", 1)[0])
    except Exception:  # noqa: BLE001  ImportError, or a plugin that fails as it loads
        return False
    return getattr(module, "MISSING_EXTRA", None) is None  # normbench's SLURM launcher without its extra


def _workers(config) -> int:
    launcher = config.hydra.get("launcher") or {}
    return int(launcher.get("n_jobs") or launcher.get("array_parallelism") or 1)


TRAIN_IMAGES = {"fashion_mnist": 60000, "cifar10": 50000}


def _steps(cfg) -> int:
    """The job's steps, from its config alone (no data read): is the sweep worth calibrating?"""
    images = cfg.data.subset or TRAIN_IMAGES.get(cfg.data.name, 60000) - cfg.data.val_size
    return count_steps(cfg.epochs, cfg.max_steps or None, max(1, images // cfg.batch_size))[1]


def plan_line(overrides: list[str], workers: int, local: bool = True) -> str:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from normbench.pack import plan
    from normbench.study import spec
    from normbench.study.estimate import Calibrations, compose, hms, schedule

    jobs = spec.jobs([o for o in overrides if not o.startswith(("hydra.", "resume="))])
    configs = [compose(j) for j in jobs]
    runs = computations = steps = 0
    with TemporaryDirectory() as tmp:
        for cfg in configs:
            decided = plan.decide(cfg, Path(tmp), "cpu") if plan.is_pack(cfg) else None
            runs += len(decided.members) if decided else 1
            computations += len(decided.groups) if decided else 1
            steps += _steps(cfg)
    head = f"sweep: {len(jobs)} jobs, {runs} runs, {computations} computations"
    if steps <= SMALL:
        return f"{head}, {steps:,} steps in all at most: too short to be worth calibrating"
    combos = {(cfg.model.name, cfg.batch_size) for cfg in configs}
    if not local or len(combos) > MAX_CALIBRATIONS:
        why = "its runs go to a cluster" if not local else f"{len(combos)} model and batch size combinations"
        return (f"{head}, {steps:,} steps in all; not calibrated here ({why}): `normbench study NAME --plan` "
                "estimates a shipped study")
    cal = Calibrations(None, say=lambda s: None, start_runs=1)  # a sweep's rough plan: one start is enough
    first: dict[tuple, list[str]] = {}
    seconds = []
    for job, cfg in zip(jobs, configs):
        rep = first.setdefault((cfg.model.name, cfg.batch_size, cfg.data.subset), job)  # its steps per epoch too
        seeds = list(cfg.pack.seeds or [cfg.seed])
        seconds.append(cal.seconds(rep, seeds))
    return f"{head}, ~{hms(schedule(seconds, workers))} on this machine with {workers} at once (calibrated)"
