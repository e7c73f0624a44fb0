"""What a study will cost, before it runs: a short calibration of its jobs on this machine, projected.

    cal = Calibrations(out / "calibration.json").get(job_overrides, seeds)   # a step, the suite, a validation
    seconds = cal.scaled(members)                    # the job at its full budget, with members x the calibrated
    wall = schedule([seconds, ...], jobs=2)          # side by side on `jobs` workers (longest first)

A job's time has two parts that scale apart (as bench section `eval` projects them): training is its steps x
the seconds a step, evaluation is one validation pass an epoch (or cfg.validations in all) plus one test
suite that does not depend on how long the model trained. Both are measured on the job's own pack (the
round's seeds x its lrs, packed or not as `pack.mode=auto` decides); only the step count is the full
budget's. A study measures its cells `jobs=` at a time (`Calibrations.prefetch`: in worker processes, one
torch thread each, side by side as its jobs will train); `get` measures a missing one in this process:

- **each cell's training** (`measure_training`): STEPS steps and the validation pass after them, without
  the test suite. Every job whose overrides differ in more than cost-neutral keys (COST_NEUTRAL: its lr, its
  seeds) is a cell of its own: norms that differ up to 2x in a step's cost (BN's ghost batches, Batch
  Renorm, GN) are each measured.
- **the evaluation suite** (`measure`: the same steps, then the whole suite), once per (model, regime) and
  the passes the suite runs, which its norm (batch statistics or not, PreciseBN, saturation), the batch
  size, the data and statistics_suite decide (`suite_key`): cells that differ only in how they train (an
  optimizer, a schedule, a norm's eps or momentum, the steps) share it.
- **a process's start** (`measure_start`: the interpreter, torch, Hydra, the data, the results), once: a
  job pays it once, whatever its members (`Calibration.scaled`).

Calibrations are kept in the study's folder (`calibration.json`), so planning again, or resuming, does not
repeat them.
"""

from __future__ import annotations

import heapq
import json
import statistics
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

from normbench.errors import UserError
from normbench.train.budget import count_steps, validation_passes

STEPS = 20  # calibration steps (after one untimed warm-up step inside the runner's own clock)
# A `normbench train` process's own seconds (interpreter, torch, Hydra, data, results): measured once per
# study folder (`measure_start`); this where it cannot be measured
START_S = 8.0
START_RUNS = 3  # one-step runs measured for it (their median)
WHAT = {"suite": f"{STEPS} steps and the evaluation", "training": f"{STEPS} steps"}  # a calibration, as said
# Keys whose value does not change what a step or an evaluation costs (they do not key a calibration).
COST_NEUTRAL = ("lr", "pack.lrs", "norm.eps", "norm.momentum", "norm.r_max", "norm.d_max", "seed", "pack.seeds")
# Keys that change how a cell trains but not what its evaluation suite costs (they do not key a suite), and
# the runtime keys no calibration reads.
TRAINING_ONLY = ("epochs", "max_steps", "warmup_steps", "schedule", "optimizer", "aux_lr", "momentum",
                 "weight_decay", "lr_scaling", "lr_ref_batch", "validations", "norm.eps_grad", "norm.alpha_init",
                 "norm.shift_init", "norm.renorm_warmup_frac", "norm.renorm_r_ramp_frac", "norm.renorm_d_ramp_frac")
RUNTIME = ("threads", "progress", "tensorboard", "resume", "debug", "log_every", "claims", "data.root",
           "data.download", "norm.track_stats", "norm.track_every", "device")


@dataclass(frozen=True)
class Calibration:
    step_s: float  # seconds a training step of the whole pack
    suite_s: float  # the test-time suite, once
    validation_s: float  # one validation pass
    steps_per_epoch: int
    epochs: int
    max_steps: int | None
    validations: int | None = None  # cfg.validations: passes over the run (None: one an epoch)
    start_s: float = START_S  # the process's own seconds, outside its training and evaluation

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
        return self.scaled(1.0)

    def scaled(self, members: float) -> float:
        """The job's seconds with `members` times the calibrated members (a later round's seeds, a widened
        grid's one lr): its training and evaluation scale with them, the process's start does not."""
        return self.start_s + members * (self.steps * self.step_s + self.evaluation_s)


def signature(overrides: list[str]) -> tuple[str, ...]:
    """The job's overrides without the cost-neutral keys: its cell; jobs with one signature share a
    calibration of their training."""
    return tuple(sorted(o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in COST_NEUTRAL))


def suite_key(overrides: list[str]) -> str:
    """What decides the cost of the job's evaluation suite: its composed config without the keys that only
    change how it trains (TRAINING_ONLY), the cost-neutral and the runtime ones, and with its members' count
    (pack.lrs' values do not matter, their number does). Jobs with one key share a suite calibration."""
    from normbench.config import flatten, to_dict

    flat = flatten(to_dict(compose(overrides)))
    drop = set(COST_NEUTRAL) | set(TRAINING_ONLY) | set(RUNTIME)
    kept = {k: v for k, v in flat.items() if k not in drop and k.split(".")[0] not in drop}
    kept["members"] = len(flat.get("pack.lrs") or [None])
    return json.dumps(sorted(kept.items()), default=str)


def compose(overrides: list[str]):
    """The run config `normbench train <overrides>` composes (Hydra's compose API: the study command is
    the edge of the program, as the CLI is; inside a running Hydra app, a sweep's callback, its loader).
    Composed once per override list: callers derive their variants with dataclasses.replace. A job that
    does not compose (a study file's typo, an unknown norm) is one UserError naming the job, as `train`
    says it."""
    from normbench.cli_errors import explain

    try:
        return _compose(tuple(overrides))
    except Exception as e:
        if (err := explain(e, list(overrides))) is None:
            raise
        raise UserError(f"a job of the study does not compose: {err.what}",
                        (err.fix + "; " if err.fix else "") + "its overrides: " + " ".join(overrides)) from None


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
    from normbench.device import pick_device

    return len(data.load(cfg.data, pick_device("cpu"), seed=0).train_x)


def _short(overrides: list[str], seeds: list[int]):
    """The job's config at `seeds`, and the same cut to STEPS steps: what a calibration trains."""
    cfg = compose(overrides)
    cfg = replace(cfg, pack=replace(cfg.pack, seeds=list(seeds)), seed=0, tensorboard=False, progress=False)
    return cfg, replace(cfg, max_steps=min(STEPS, cfg.max_steps or STEPS))


def measure_training(overrides: list[str], seeds: list[int]) -> Calibration:
    """Train the job's pack at `seeds` for STEPS steps here, each computation the runner would make (one
    after another), with the validation pass that ends them and no test suite; its step and validation
    costs (suite_s 0: `measure` gives the suite)."""
    from normbench import regimes
    from normbench.pack import plan
    from normbench import runner
    from normbench.train import loop
    from normbench.train.tracking import NullTracker

    cfg, short = _short(overrides, seeds)
    regime = regimes.for_config(short)
    fits = []
    with tempfile.TemporaryDirectory() as tmp:
        decided = plan.decide(short, Path(tmp), "cpu")
        for group in decided.groups:  # each computation the runner would make, up to its test suite
            cfgs = [decided.members[k][1] for k in group.members]
            device, splits, trained, _, model = runner.assemble(group.cfg, regime, cfgs, group.packs)
            fits.append(loop.train(model, splits, trained, [NullTracker() for _ in cfgs], device,
                                   batch_fn=regime.train_batches(group.cfg))[0])
    steps = max(1, fits[0].steps or 1)
    validations = max(1, len(fits[0].history or []))
    return Calibration(sum(f.train_seconds for f in fits) / steps, 0.0,
                       sum(f.val_seconds for f in fits) / validations, max(1, _train_images(cfg) // cfg.batch_size),
                       cfg.epochs, cfg.max_steps, cfg.validations)


def measure_start(runs: int = START_RUNS) -> float:
    """The seconds a `normbench train` process spends outside its training and evaluation (the interpreter,
    torch, Hydra, reading the data, writing its results), here: a one-step run of the MLP in a process of
    its own, its wall time less the training and evaluation its results.json records. START_S where that
    run cannot be made (no data here, say): the jobs will say why. The median of `runs` such runs: the
    first pays for a cold disk cache, and one run on a busy machine read 4x a process's usual start."""
    import subprocess
    import sys

    seconds = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "normbench", "train", "model=mlp", "max_steps=1", "statistics_suite=false",
                   "threads=1", "progress=false", "tensorboard=false", f"hydra.run.dir={run}"]
            started = time.perf_counter()
            try:
                subprocess.run(cmd, check=True, capture_output=True, timeout=300)
                wall = time.perf_counter() - started
                res = json.loads((run / "results.json").read_text())
            except (OSError, subprocess.SubprocessError, ValueError, KeyError):
                return START_S
            seconds.append(max(0.0, wall - res["train_s"] - res["eval_s"]))
    return statistics.median(seconds)


def measure(overrides: list[str], seeds: list[int]) -> Calibration:
    """Train the job's pack at `seeds` for STEPS steps here, evaluate it with its whole suite, and read its
    costs."""
    from normbench.pack import plan
    from normbench import runner

    cfg, short = _short(overrides, seeds)
    per_epoch = max(1, _train_images(cfg) // cfg.batch_size)
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


def timed(kind: str, overrides: list[str], seeds: list[int]) -> dict:
    """One calibration, measured and timed: "suite" (`measure`: the training and the whole suite) or
    "training" (`measure_training`). Module-level, so a worker process of `Calibrations.prefetch` runs it."""
    how = measure if kind == "suite" else measure_training
    started = time.perf_counter()
    return asdict(how(overrides, seeds)) | {"measured_s": time.perf_counter() - started}


@contextmanager
def _interrupts_ignored():
    """SIGINT ignored while worker processes start: a child inherits the ignored signal through exec, so
    Ctrl-C reaches the study's process alone (which stops them), never a worker's traceback."""
    import signal

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


# Bumped when what a calibration measures changes, so a kept calibration.json is measured again: 2 since
# members with their own data train as one computation (a per-seed pack was one group a seed before).
FORMAT = 6  # 3: a variable-length design evaluates its own question's passes only; 4: cfg.validations kept;
# 5: each cell's training, the suite per suite_key, and the process's start; 6: the start a median of 3.
# Measuring side by side (prefetch) did not bump it: a kept file's cells measured alone are kept (estimates).


class Calibrations:
    """The study folder's calibrations (calibration.json), measured on demand and kept: each cell's training
    ("training", by `signature`), each suite ("suite", by `suite_key`) and a process's start ("start")."""

    def __init__(self, path: Path | None, say=print, start_runs: int = START_RUNS):
        self.path, self.say = (None if path is None else Path(path)), say  # None: kept in memory only
        self.start_runs = start_runs  # one-step runs its process start is the median of
        self.known = json.loads(self.path.read_text()) if self.path and self.path.is_file() else {}

    def get(self, overrides: list[str], seeds: list[int]) -> Calibration:
        """The job's calibration: its cell's training, with its suite's cost and a process's start. A suite
        not measured yet is measured on this job (its training comes with it)."""
        suite = self._key("suite", suite_key(overrides), seeds)
        training = self._key("training", signature(overrides), seeds)
        start = self._key("start", "", [])
        self._start(start)
        if (kind := self._missing(suite, training)) is not None:
            self.say(f"calibrating ({WHAT[kind]}): {self._shown(overrides, seeds)}")
            owns = training not in self.known  # a suite's cell measured before keeps its own training
            self._keep(kind, suite, training, timed(kind, overrides, seeds), owns)
        return self._calibration(training, suite, start)

    def prefetch(self, jobs: list[list[str]], seeds: list[int], workers: int) -> None:
        """Measure what `get` would for each of `jobs` (its overrides) at `seeds`, `workers` at a time in worker
        processes, each calibration with its job's threads (one, as the study's jobs train side by side): the
        same measurements `get` makes one after another, kept as it keeps them, each as it ends, so stopping
        keeps those finished. One worker: nothing here (`get` measures each as the plan needs it)."""
        todo, pending = [], set()
        for overrides in jobs:
            suite, training = (self._key("suite", suite_key(overrides), seeds),
                               self._key("training", signature(overrides), seeds))
            kind = self._missing(suite, training, pending)
            if kind is not None:  # owns: its measurement is the training's (as get() would keep it)
                todo.append((kind, overrides, suite, training, training not in self.known and training not in pending))
                pending |= {suite, training} if kind == "suite" else {training}
        if workers <= 1 or len(todo) <= 1:
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        self._start(self._key("start", "", []))
        workers = min(workers, len(todo))
        self.say(f"calibrating {len(todo)} cells, {workers} at a time ({STEPS} steps each, the evaluation suite "
                 "once per suite; kept in calibration.json as each ends)")
        started = time.perf_counter()
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            with _interrupts_ignored():  # the workers start with the first submissions
                futures = {pool.submit(timed, kind, overrides, seeds): i
                           for i, (kind, overrides, *_) in enumerate(todo)}
            for n, future in enumerate(as_completed(futures), 1):  # a worker that dies: BrokenProcessPool
                kind, overrides, suite, training, owns = todo[futures[future]]
                measured = future.result()
                self._keep(kind, suite, training, measured, owns)
                self.say(f"  [{n}/{len(todo)}] {WHAT[kind]} in {measured['measured_s']:.0f} s: "
                         f"{self._shown(overrides, seeds)}")
        except BaseException:  # Ctrl-C, or a job that does not compose: no other calibration, none finishing
            pool.shutdown(wait=False, cancel_futures=True)
            for child in multiprocessing.active_children():  # the pool's workers: nothing of theirs to keep
                child.terminate()
            raise
        finally:
            pool.shutdown()
        self.say(f"calibrated {len(todo)} cells in {hms(time.perf_counter() - started)}")

    def _start(self, start: str) -> None:
        if start not in self.known:
            self.say("calibrating (a process's start): normbench train model=mlp max_steps=1")
            self.known[start] = {"start_s": measure_start(self.start_runs)}
            self._save()

    def _missing(self, suite: str, training: str, pending: set = frozenset()) -> str | None:
        """What a job with these keys still needs measured: "suite" (its training comes with it), "training",
        or None (`pending`: keys an earlier job of a prefetch will measure)."""
        if suite not in self.known and suite not in pending:
            return "suite"
        if training not in self.known and training not in pending:
            return "training"
        return None

    def _keep(self, kind: str, suite: str, training: str, measured: dict, owns: bool = True) -> None:
        """Keep a measurement (`owns`: it is its training's, else a training measured before stays, as get()
        keeps it), and save them all."""
        if kind == "suite":
            self.known[suite] = {"suite_s": measured["suite_s"], "measured_s": measured["measured_s"]}
            measured = {**measured, "suite_s": 0.0}
        if owns or training not in self.known:
            self.known[training] = measured
        self._save()

    def _save(self) -> None:
        """calibration.json, written whole or not at all (Ctrl-C may come at any time)."""
        from normbench.results import atomic_write_text

        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.known, indent=1))

    @staticmethod
    def _key(kind: str, what, seeds: list[int]) -> str:
        return json.dumps([kind, what if isinstance(what, str) else list(what), list(seeds), FORMAT])

    @staticmethod
    def _shown(overrides: list[str], seeds: list[int]) -> str:
        shown = [o for o in overrides if not o.startswith(("max_steps=", "threads=", "progress=", "tensorboard="))]
        return f"{' '.join(shown)} pack.seeds=[{','.join(map(str, seeds))}]"

    def _calibration(self, training: str, suite: str, start: str) -> Calibration:
        fields = {k: v for k, v in self.known[training].items() if k in Calibration.__dataclass_fields__}
        return Calibration(**(fields | {"suite_s": self.known[suite]["suite_s"],
                                        "start_s": self.known[start]["start_s"]}))

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
