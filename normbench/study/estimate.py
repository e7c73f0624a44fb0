"""What a study will cost, before it runs: a short calibration of its jobs on this machine, projected.

    cal = calibrate(job_overrides, seeds, cache)    # seconds a step, the test suite, one validation pass
    seconds = projected(cal, job_overrides)          # the job at its full budget
    wall = schedule([seconds, ...], jobs=2)          # side by side on `jobs` workers (longest first)

A job's time has two parts that scale apart (as bench section `eval` projects them): training is its steps x
the seconds a step, evaluation is one validation pass an epoch (or cfg.validations in all) plus one test
suite that does not depend on how long the model trained. A calibration trains the job's own pack (the
round's seeds x its lrs, packed or not as `pack.mode=auto` decides) for a few steps in this process, then
evaluates it with its whole suite; every figure is measured there, only the step count is the full budget's.
A sweep's first job with each model and batch size is calibrated, and stands for the sweep's other jobs with
that model and batch size (scaled by their members: the norm, ghost batch or placement they differ in is not
measured apart; the estimate's error is that). Calibrations are kept in the study's folder
(`calibration.json`), so planning again, or resuming, does not repeat them.
"""

from __future__ import annotations

import heapq
import json
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

from normbench.train.budget import count_steps, validation_passes

STEPS = 20  # calibration steps (after one untimed warm-up step inside the runner's own clock)
START_S = 8.0  # a `normbench train` process: interpreter, torch, Hydra, data (measured: 7-9 s on 2 cores)
# Keys whose value does not change what a step or an evaluation costs (they do not key a calibration).
COST_NEUTRAL = ("lr", "pack.lrs", "norm.eps", "norm.momentum", "norm.r_max", "norm.d_max", "seed", "pack.seeds")


@dataclass(frozen=True)
class Calibration:
    step_s: float  # seconds a training step of the whole pack
    suite_s: float  # the test-time suite, once
    validation_s: float  # one validation pass
    steps_per_epoch: int
    epochs: int
    max_steps: int | None
    validations: int | None = None  # cfg.validations: passes over the run (None: one an epoch)

    @property
    def steps(self) -> int:
        """As train/budget.plan_steps counts them: max_steps caps the epochs, and alone decides below 1 epoch."""
        return count_steps(self.epochs, self.max_steps, self.steps_per_epoch)[1]

    @property
    def evaluation_s(self) -> float:
        """The test suite and the validation passes (train/loop's: one an epoch, or cfg.validations), at the
        full budget."""
        passes = validation_passes(self.steps, self.steps_per_epoch, self.validations)
        return self.suite_s + passes * self.validation_s

    @property
    def seconds(self) -> float:
        return START_S + self.steps * self.step_s + self.evaluation_s


def signature(overrides: list[str]) -> tuple[str, ...]:
    """The job's overrides without the cost-neutral keys: jobs with one signature share a calibration."""
    return tuple(sorted(o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in COST_NEUTRAL))


def compose(overrides: list[str]):
    """The run config `normbench train <overrides>` composes (Hydra's compose API: the study command is
    the edge of the program, as the CLI is; inside a running Hydra app, a sweep's callback, its loader).
    Composed once per override list: callers derive their variants with dataclasses.replace."""
    return _compose(tuple(overrides))


@lru_cache(maxsize=None)
def _compose(overrides: tuple[str, ...]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    from normbench.config import schema
    from normbench.configs import store_configs

    store_configs()
    if GlobalHydra.instance().is_initialized():
        dict_cfg = GlobalHydra.instance().config_loader().load_configuration("config", list(overrides), RunMode.RUN)
        with open_dict(dict_cfg):
            del dict_cfg["hydra"]
    else:
        with initialize_config_module("normbench.configs", version_base="1.3"):
            dict_cfg = hydra_compose("config", overrides=list(overrides))
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema()), dict_cfg))


def _train_images(cfg) -> int:
    from normbench import data
    from normbench.train.device import pick_device

    return len(data.load(cfg.data, pick_device("cpu"), seed=0).train_x)


def measure(overrides: list[str], seeds: list[int]) -> Calibration:
    """Train the job's pack at `seeds` for STEPS steps here, evaluate it, and read its costs."""
    from normbench.pack import plan
    from normbench.train import runner

    cfg = compose(overrides)
    cfg = replace(cfg, pack=replace(cfg.pack, seeds=list(seeds)), seed=0, tensorboard=False, progress=False)
    per_epoch = max(1, _train_images(cfg) // cfg.batch_size)
    short = replace(cfg, max_steps=min(STEPS, cfg.max_steps or STEPS))
    with tempfile.TemporaryDirectory() as tmp:
        runner.run(short, Path(tmp))
        decided = plan.decide(short, Path(tmp), "cpu")
        # each group trains and evaluates once for its members (one after another): its first member's
        # seconds are the group's; a sequential pack is one group a member
        share = [json.loads((Path(tmp) / decided.members[g.members[0]][0] / "results.json").read_text())
                 for g in decided.groups]
    first = share[0]
    steps = max(1, first.get("steps") or 1)
    validations = max(1, len(first.get("history") or []))
    validation = sum(m["eval_passes"].get("validation", 0.0) for m in share) / validations
    suite = sum(m["eval_s"] - m["eval_passes"].get("validation", 0.0) for m in share)
    return Calibration(sum(m["train_s"] for m in share) / steps, suite, validation, per_epoch, cfg.epochs,
                       cfg.max_steps, cfg.validations)


# Bumped when what a calibration measures changes, so a kept calibration.json is measured again: 2 since
# members with their own data train as one computation (a per-seed pack was one group a seed before).
FORMAT = 4  # 3: a variable-length design evaluates its own question's passes only; 4: cfg.validations kept


class Calibrations:
    """The study folder's calibrations (calibration.json), measured on demand and kept."""

    def __init__(self, path: Path | None, say=print):
        self.path, self.say = (None if path is None else Path(path)), say  # None: kept in memory only
        self.known = json.loads(self.path.read_text()) if self.path and self.path.is_file() else {}

    def get(self, overrides: list[str], seeds: list[int]) -> Calibration:
        key = json.dumps([list(signature(overrides)), list(seeds), FORMAT])
        if key not in self.known:
            shown = [o for o in overrides if not o.startswith(("max_steps=", "threads=", "progress=", "tensorboard="))]
            self.say(f"calibrating ({STEPS} steps and the evaluation): {' '.join(shown)} "
                     f"pack.seeds=[{','.join(map(str, seeds))}]")
            started = time.perf_counter()
            self.known[key] = asdict(measure(overrides, seeds)) | {"measured_s": time.perf_counter() - started}
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(json.dumps(self.known, indent=1))
        fields = {k: v for k, v in self.known[key].items() if k in Calibration.__dataclass_fields__}
        return Calibration(**fields)

    def seconds(self, overrides: list[str], seeds: list[int]) -> float:
        return self.get(overrides, seeds).seconds


def schedule(seconds: list[float], workers: int) -> float:
    """The wall time of jobs of these lengths on `workers` side by side, longest first (as a pool takes
    them: each free worker the next job)."""
    if not seconds:
        return 0.0
    ends = [0.0] * max(1, workers)
    for s in sorted(seconds, reverse=True):
        heapq.heappush(ends, heapq.heappop(ends) + s)
    return max(ends)


def hms(seconds: float) -> str:
    """A duration as the study says it: "47 s", "12 min 05 s", "1 h 02 min" (past an hour, to the minute)."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
