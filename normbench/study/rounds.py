"""A study run through the declared protocol, round by round (docs/protocol.md):

    round 1 trains every job of the studies at the protocol's first seeds (1000-1002: protocol.round_seeds);
    before look 1 counts, each cell an undecided primary claim reads that chose its lr at its grid's edge gets
    the next grid value (at the round's seeds, up to protocol.widen_limit per side); look 1 decides what it
    can; round 2 trains, at the next seeds (1003-1004), only the jobs the still-undecided claims read; and so
    on, until every primary claim is decided, the last look is taken, or the budget is spent.

Each look is taken by replaying the runs in the output folder (summary.summarize's `compute`, which tests
the family look by look), so running the same command again resumes where it stopped; its decisions are
stored in study.json the first time it is taken, as made, and a summary says where a replay disagrees.
`study.json` keeps what is not in the runs: the settings, the family frozen at the start (its members as
declared, the protocol's numbers, the commit and their hash, which every job's run records as
`family_hash`; resuming under another family is refused), each look's decisions, the grid values widening
added, the jobs finished, the seconds each round took, each job's seconds beside the plan's estimate of
it, and each sitting's machine (a record resumed elsewhere says so).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from normbench.errors import UserError
from normbench.study import jobs as joblist
from normbench.study import spec
from normbench.study.estimate import Calibrations, hms, schedule, signature
from normbench.summary import frozen
from normbench.summary import protocol as protocols
from normbench.summary.frozen import STATE


@dataclass
class State:
    """What the output folder's study.json keeps between invocations."""
    studies: list[str]
    scale: str
    protocol: dict = field(default_factory=dict)  # Protocol.numbers() (its seeds among them): fixed at the first run
    widened: list[dict] = field(default_factory=list)  # {"study", "base", "lr", "round"}
    done: list[str] = field(default_factory=list)  # job folders (relative to the study's) whose train exited 0
    jobs: dict[str, list[str]] = field(default_factory=dict)  # "<study>/<job>" -> the overrides it trained with
    seconds: dict[str, float] = field(default_factory=dict)  # "1", "1 widening", "2", ...: seconds trained
    # a job's key -> [seconds, planned]: the seconds of every invocation in which it ended (a failed attempt's
    # too; a sitting stopped mid-job loses that job's partial seconds), and the plan's estimate of the job
    job_seconds: dict[str, list[float]] = field(default_factory=dict)
    sittings: list[dict] = field(default_factory=list)  # each invocation that trained: when, where, its code
    # each SLURM array a batch went out as (study/slurm.py): {"id", "round", "label", "tasks": the jobs' keys,
    # "jobs": each task's SLURM job id, "collected": the indices of the tasks whose end was recorded}
    arrays: list[dict] = field(default_factory=list)
    finished: str | None = None
    # the family frozen at the first run (frozen.freeze): its members as declared, the protocol's numbers, the
    # commit, their hash; resuming under another family is refused
    family: dict = field(default_factory=dict)
    decisions: list[dict] = field(default_factory=list)  # each look's, as first made (frozen.look_entries)

    @classmethod
    def open(cls, out: Path, studies: list[str], scale: str, protocol: dict, family: dict) -> State:
        path = out / STATE
        if not path.is_file():
            return cls(studies, scale, protocol, family=family)
        try:
            raw = json.loads(path.read_text())
            raw["studies"], raw["scale"]  # noqa: B018 - what every study.json holds
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            raise UserError(f"{path} is not a study's state ({type(e).__name__}: {' '.join(str(e).split())[:120]})",
                            "restore it (it is written atomically: another program changed it), or choose another "
                            "out=") from None
        if raw["studies"] != studies or raw["scale"] != scale:
            raise UserError(f"{out} holds a study of {', '.join(raw['studies'])} at scale={raw['scale']}",
                            "rerun it with those settings to continue it, or choose another out=")
        pinned = protocols.numbers_of(raw.get("protocol", protocol))
        if pinned != protocol:
            differ = ", ".join(f"{k} {pinned.get(k)!r} -> {v!r}" for k, v in protocol.items() if pinned.get(k) != v)
            raise UserError(f"{out} was started under another protocol ({differ})",
                            "a protocol is declared before the first run: resume it under that one, or choose "
                            "another out=")
        if raw.get("family") and (differ := frozen.changed(raw["family"], family)):
            raise UserError(f"{out} froze another family at its start: {differ}",
                            "restore the claims it started with (study.json's family), or choose another out= "
                            "for the new family")
        state = cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})
        state.family = state.family or family  # a folder from before families were frozen takes this one
        return state

    def per_study(self) -> dict[str, dict]:
        """Each study's process time against the plan's (job_seconds: every finished job's seconds and the
        plan's estimate of it), in all and by round ("1", "2", ...; widening's jobs count in their round).
        Process time: jobs ran side by side, so a study's is more than the wall time it added."""
        out: dict = {}
        for key, (seconds, planned) in sorted(self.job_seconds.items()):
            study, folder = key.split("/")[:2]  # <study>/r<round>/<job>
            row = out.setdefault(study, {"seconds": 0.0, "planned": 0.0, "by_round": {}})
            by = row["by_round"].setdefault(folder.removeprefix("r"), {"seconds": 0.0, "planned": 0.0})
            for d in (row, by):
                d["seconds"] = round(d["seconds"] + seconds, 1)
                d["planned"] = round(d["planned"] + planned, 1)
        return out

    def save(self, out: Path) -> None:
        from normbench.results import atomic_write_text

        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / STATE, json.dumps(self.__dict__, indent=1))

    @property
    def spent(self) -> float:
        return sum(self.seconds.values())


def declared_claims(study: spec.Study):
    """Every claim `study`'s experiment declares, primary and exploratory (claims.parse, as summarize reads
    them); a study file's, as a --claims file's (claims.load_file)."""
    from normbench.summary.claims import load_file, of_experiment

    if study.source is not None:
        return load_file(study.source).claims
    return of_experiment(spec.EXPERIMENTS / f"{study.experiment}.yaml")


def primary_claims(study: spec.Study):
    """The primary claims `study`'s experiment declares: the protocol's family."""
    return [c for c in declared_claims(study) if c.role == "primary"]


def family_members(proto, own) -> list:
    """Every member of the family the looks test, as declared: the protocol's family (the shipped
    experiments' primary claims, read from protocol.EXPERIMENTS as protocol.load reads them, or a study
    file's own), then the studies' own primary claims (`own`) beyond it, as summarize adds them."""
    from normbench.summary.claims import of_experiment

    declared = {c.key: c for c in own}
    if missing := set(proto.family) - set(declared):
        for path in sorted(protocols.EXPERIMENTS.glob("*.yaml")):
            declared.update({c.key: c for c in of_experiment(path) if c.key in missing})
    return [declared[k] for k in proto.with_members(c.key for c in own).family]


def open_after(results, look_index: int) -> set[tuple[str, str]]:
    """The primary claims not decided by looks 0..look_index-1 (0-based): what round `look_index` trains
    and widens for."""
    return {r.claim.key for r in results if r.role == "primary"
            and (r.verdict == "inconclusive" or (r.look or 0) > look_index)}


class Rounds:
    """Runs `studies` at `scale` into `out`, `workers` jobs side by side (or, with `slurm`, the SLURM
    parameters of study/slurm.py's `settings`, each batch as one job array), within `budget` seconds."""

    def __init__(self, studies: list[spec.Study], scale: str, out: Path, workers: int, budget: float | None,
                 say=print, protocol: Path | None = None, slurm: dict | None = None):
        self.studies, self.scale, self.out = studies, scale, Path(out)
        self.workers, self.budget, self.say = max(1, workers), budget, say
        # a study file's claims are a family of their own, under the protocol it declares
        self.claims_file = studies[0].source if len(studies) == 1 else None
        if self.claims_file is not None and protocol is not None:
            raise UserError(f"{self.claims_file} declares its own protocol", "drop protocol=, or edit the file's protocol:")
        self.proto = (_own_protocol(self.claims_file) if self.claims_file is not None else
                      protocols.load() if protocol is None else protocols.load(Path(protocol)))
        from normbench.results import git_sha

        self.claims = {s.name: primary_claims(s) for s in studies}
        family = frozen.freeze(family_members(self.proto, [c for s in studies for c in self.claims[s.name]]),
                               self.proto, git_sha())
        self.state = State.open(self.out, [s.name for s in studies], scale, self.proto.numbers(), family)
        self.calibrations = Calibrations(self.out / "calibration.json", say)
        self.failed: list[str] = []
        self.slurm = slurm
        self.executor = self._executor(slurm)
        self._universe: tuple[int | None, list[joblist.Job]] = (None, [])  # (widened values, the jobs)
        self._sitting: dict | None = None  # run()'s, until its first job starts

    def _executor(self, slurm: dict | None):
        """Where the jobs train: here, `workers` at once, or on SLURM with these parameters."""
        from normbench.study.launch import Local

        if slurm is None:
            held = [a for a in self.state.arrays if len(a["collected"]) < len(a["tasks"])]
            if held:  # its tasks may still train: training them here too would train a job twice
                raise UserError(f"{self.out}: SLURM array {held[0]['id']} holds jobs of this study that it has not "
                                "collected", "run the same command with launcher=slurm: it waits for the array "
                                f"and collects it (scancel {held[0]['id']} first to stop its tasks)")
            return Local(self.workers, self.out, self.say)
        from normbench.study.slurm import Slurm

        return Slurm(slurm, self.out, self.state, self.say)

    # --- what each round trains --------------------------------------------------------------------------

    def universe(self) -> list[joblist.Job]:
        """Every job of the studies: their sweeps', and the grid values widening has added so far."""
        key = len(self.state.widened)
        if self._universe[0] != key:
            jobs = [j for s in self.studies for j in joblist.study_jobs(s, self.scale, self.state.widened)]
            for j in jobs:  # a job's name is its position in its sweep: the sweep must not have changed
                trained = self.state.jobs.get(f"{j.study}/{j.name}")
                if trained is not None and trained != list(j.overrides):
                    raise UserError(f"{self.out}: job {j.study}/{j.name} trained as {' '.join(trained)}; the study's "
                                    f"plan now makes it {' '.join(j.overrides)}",
                                    "resume it with the plan it started with, or choose another out=")
            joblist.check(jobs, [c for s in self.studies for c in self.claims[s.name]])
            stray = sorted(set(self.state.jobs) - {f"{j.study}/{j.name}" for j in jobs})  # State.open: same studies
            if stray:  # trained under another plan: a cell trained twice per seed (runtime keys aside), whose
                # seeds a claim would drop as ambiguous
                raise UserError(f"{self.out}: job {stray[0]} ({len(stray)} in all) trained under a plan that no longer "
                                "has it", "resume it at the commit it started from (study.json's sittings), or choose "
                                "another out=")
            self._universe = (key, jobs)
        return self._universe[1]

    def round_jobs(self, index: int, open_keys: set | None) -> list[joblist.Job]:
        """Round `index`'s jobs: all of them in round 1; later, those an open primary claim reads (every
        primary claim when `open_keys` is None: the plan's upper bound)."""
        jobs = [j for j in self.universe() if j.since <= index + 1]
        if index == 0:
            return jobs
        claims = [c for s in self.studies for c in self.claims[s.name] if open_keys is None or c.key in open_keys]
        return [j for j in jobs if j.reads(claims)]

    def calibrate(self) -> None:
        """Measure every cell's calibration the plan reads (each signature's first job, at round 1's seeds),
        jobs= at a time; on SLURM one at a time, on the machine the study command runs on."""
        cells: dict[str, list[str]] = {}
        for j in self.universe():
            cells.setdefault(signature(list(j.overrides)), list(j.overrides))
        self.calibrations.prefetch(list(cells.values()), list(protocols.round_seeds(self.proto, 0)),
                                   1 if self.slurm else self.workers)

    def estimate(self, job: joblist.Job, seeds) -> float:
        """Seconds for `job` at `seeds`: its cell's calibration (its training, and its suite's cost; at round
        1's seeds), scaled by the members (seeds x lrs)."""
        cal, members = self._calibration(job, seeds)
        return cal.scaled(members)

    def evaluation(self, job: joblist.Job, seeds) -> float:
        """The seconds of `estimate` that go to evaluation (the suite and the validation passes)."""
        cal, scale = self._calibration(job, seeds)
        return cal.evaluation_s * scale

    def _calibration(self, job: joblist.Job, seeds):
        """The calibration that stands for `job`, and the factor its members scale it by: the first job of
        the studies with its cell (`estimate.signature`: the same overrides but for cost-neutral ones), so a
        grid value widening added is its base job's cell, one lr of it."""
        first = protocols.round_seeds(self.proto, 0)
        cell = signature(list(job.overrides))
        rep = next((j for j in self.universe() if signature(list(j.overrides)) == cell), job)
        cal = self.calibrations.get(list(rep.overrides), list(first))
        return cal, len(seeds) / len(first) * job.members_per_seed / rep.members_per_seed

    # --- training ------------------------------------------------------------------------------------------

    def train(self, jobs: list[joblist.Job], index: int, label: str, key: str | None = None) -> None:
        """`jobs` at round `index`'s seeds, each its own `normbench train` (logged beside its folder) where the
        executor runs it; those finished before are skipped. Their seconds count under `key` (default: the
        round's number; widening's under "<round> widening")."""
        seeds = list(protocols.round_seeds(self.proto, index))
        todo = [j for j in jobs if self._done_key(j, index) not in self.state.done]
        if not todo:
            return
        planned = {(j.study, j.name): self.estimate(j, seeds) for j in todo}  # the plan's calibrations
        eta = schedule(list(planned.values()), self.executor.parallel)
        self.say(f"{label}: {len(todo)} job{'s' * (len(todo) > 1)} at seeds {seeds[0]}-{seeds[-1]}, "
                 f"{self.executor.describe()}, ~{hms(eta)}")
        started = time.perf_counter()
        key = key or str(index + 1)
        before = self.state.seconds.get(key, 0.0)  # an interrupted invocation's seconds stay counted
        for j in todo:
            self.state.jobs[f"{j.study}/{j.name}"] = list(j.overrides)
        if self._sitting is not None:  # this invocation trains: where, and from how many jobs done
            self.state.sittings.append({**self._sitting, "jobs_done_before": len(self.state.done)})
            self._sitting = None
        self.state.save(self.out)
        order = sorted(todo, key=lambda j: -planned[(j.study, j.name)])  # longest first, as `schedule` assumes
        for n, ended in enumerate(self.executor.train(order, seeds, index, label), 1):
            job, code, seconds, log = ended.job, ended.code, ended.seconds, ended.log
            plan = planned.pop((job.study, job.name))  # finished: what is left is the jobs still to end
            done_key = self._done_key(job, index)
            before_s = self.state.job_seconds.get(done_key, [0.0])[0]  # an earlier attempt's, failed
            self.state.job_seconds[done_key] = [round(before_s + seconds, 1), round(plan, 1)]
            if code == 0:
                self.state.done.append(done_key)
            else:
                self.failed.append(f"{job.study}/{job.name} ({ended.note or f'exit {code}'}; log: {log})")
            rest = schedule(list(planned.values()), self.executor.parallel)  # jobs in flight counted whole
            left = f"; the rest at most ~{hms(rest)} by the plan" if planned else ""
            status = "done" if code == 0 else f"FAILED ({ended.note or f'exit {code}'}), see {log}"
            self.say(f"  [{n}/{len(todo)}] {job.study}/{job.name}: {status} in {seconds:.0f} s{left}")
            self.state.seconds[key] = before + time.perf_counter() - started
            self.state.save(self.out)

    def _done_key(self, job: joblist.Job, index: int) -> str:
        return str(joblist.directory(job, index, self.out).relative_to(self.out))

    # --- looks -----------------------------------------------------------------------------------------------

    def results(self):
        """Every claim of the runs so far, tested look by look (the summary `normbench summarize OUT
        --select lr` prints)."""
        from normbench.summary.summarize import compute

        if self.claims_file is not None:
            return compute(self.out, select=selection(self.out), claims_file=self.claims_file)
        return compute(self.out, select=selection(self.out), protocol=self.proto)

    def widen(self, index: int) -> None:
        """Before look `index` counts: the next grid value of every cell an open primary claim reads whose lr
        was chosen at its grid's edge at this look's seeds, trained at the round's seeds, until none is at an
        edge or each is at the limit."""
        from normbench.summary import select
        from normbench.summary.discover import find_runs
        from normbench.summary.labels import label_runs
        from normbench.summary.verdicts import cells_read

        while True:
            summary = self.results()
            open_keys = open_after(summary.claims, index)
            seeds = set(protocols.look_seeds(self.proto, index))
            runs = [r for r in find_runs(self.out) if r.config and int(r.config.get("seed", 0)) in seeds]
            if not runs or not open_keys:
                return
            labels = label_runs(runs, pooled=frozenset({"lr"}))
            chosen = select.choose(runs, "lr", labels)
            cells = set()
            for r in summary.claims:  # a claim on lr sensitivity reads the whole grid: it chooses no lr
                if r.claim.key in open_keys and not r.claim.reads_lr_grid:
                    cells |= cells_read(r.claim, runs, labels)
            declared = {}  # each cell's grid as round 1 trained it
            for run in runs:
                if run.path in labels and (base := joblist.base_of(run.path, self.out)) and "-lr" not in base[1]:
                    declared.setdefault(select.cell_key(run, labels[run.path]), set()).add(run.config.get("lr"))
            added = []
            for w in protocols.widen(chosen, cells, {c: sorted(v) for c, v in declared.items()},
                                     self.proto.widen_limit):
                if w.at_limit:
                    self.say(f"  {w.cell[1]} {w.cell[4]}: its lr sits at the {w.side} edge with "
                             f"{w.added} values added: the limit; the look counts as it is")
                    continue
                base = next((joblist.base_of(r.path, self.out) for r in runs if r.path in labels
                             and select.cell_key(r, labels[r.path]) == w.cell), None)
                if base is None:
                    continue
                entry = {"study": base[0], "base": base[1].split("-lr")[0], "lr": w.value, "round": index + 1}
                if not any(e["study"] == entry["study"] and e["base"] == entry["base"] and e["lr"] == w.value
                           for e in self.state.widened):
                    self.state.widened.append(entry)
                    added.append(entry)
            if not added:
                return
            self.state.save(self.out)
            names = {(e["study"], f"{e['base']}-lr{e['lr']:g}") for e in added}
            new = [j for j in self.universe() if (j.study, j.name) in names]
            self.train(new, index, f"round {index + 1}, widening {len(new)} lr grid"
                                   f"{'s' * (len(new) > 1)} before look {index + 1} counts", f"{index + 1} widening")

    # --- the whole study -------------------------------------------------------------------------------------

    def run(self, sitting: dict | None = None) -> str:
        """Round after round until the study may stop; returns why it stopped. `sitting` (this invocation's
        machine and code, `command.sitting()`) is kept in study.json once this invocation trains a job."""
        open_keys, why = None, ""
        self.state.finished = None
        self._sitting = sitting
        self.state.save(self.out)
        for index in range(len(self.proto.looks)):
            jobs = self.round_jobs(index, open_keys)
            seeds = protocols.round_seeds(self.proto, index)
            if self.budget is not None:
                need = schedule([self.estimate(j, seeds) for j in jobs
                                 if self._done_key(j, index) not in self.state.done], self.executor.parallel)
                if need > 0 and self.state.spent + need > self.budget:
                    why = (f"the budget is spent: round {index + 1} would need ~{hms(need)} and "
                           f"{hms(max(0.0, self.budget - self.state.spent))} is left")
                    break
            self.train(jobs, index, f"round {index + 1}")
            if not self.failed:
                self.widen(index)
            if self.failed:  # look r counts once every run of round r is in: retry them first
                why = (f"{len(self.failed)} job(s) of round {index + 1} failed; look {index + 1} waits for them: "
                       "run the same command again to retry them")
                break
            summary = self.results()
            self._say_look(summary, index)
            if not any(d["look"] == index + 1 for d in self.state.decisions):  # stored once, as first made
                self.state.decisions += frozen.look_entries(summary.claims, index, self._members())
                self.state.save(self.out)
            open_keys = open_after(summary.claims, index + 1) & self._members()
            if not self._members():
                why = "these studies declare no primary claim: round 1's exploratory estimates are all they train"
                break
            if not open_keys:
                why = "every primary claim of these studies is decided"
                break
            if index == len(self.proto.looks) - 1:
                why = f"the last look ({self.proto.looks[-1]} seeds) has been taken"
                break
        self.state.finished = None if self.failed else why  # a record is only taken from a finished study
        self.state.save(self.out)
        return why

    def _members(self) -> set:
        return {c.key for s in self.studies for c in self.claims[s.name]}

    def _say_look(self, summary, index: int) -> None:
        mine = self._members()
        rows = [r for r in summary.claims if r.claim.key in mine]
        decided = [r for r in rows if r.verdict in ("held", "refuted") and r.look == index + 1]
        still = open_after(rows, index + 1)
        seeds = protocols.look_seeds(self.proto, index)
        self.say(f"look {index + 1} (seeds {seeds[0]}-{seeds[-1]}, level {self.proto.levels[index]:.3g}): "
                 f"{len(decided)} decided here, {len(still)} of {len(rows)} primary claims still open")
        for r in decided:  # what the look tested: its own pairs (a resumed folder may hold later seeds too)
            s = r.claim.scale
            est = r.look_estimate if r.look_estimate is not None else r.estimate
            lo, hi = r.look_ci or r.ci or (math.nan, math.nan)
            self.say(f"  {r.verdict}: {r.claim.study} · {r.claim.name}: {s * est:+.1f} "
                     f"[{s * lo:+.1f}, {s * hi:+.1f}] over {r.look_n or r.n} pairs")


def _own_protocol(path: Path):
    """A study file's protocol (claims.load_file), with protocol.yaml's widening limit."""
    from dataclasses import replace

    from normbench.summary.claims import load_file

    return replace(load_file(path).protocol, widen_limit=protocols.load().widen_limit)


def selection(root: Path) -> str | None:
    """`--select lr` where the runs under `root` vary the lr (each cell's lr chosen on validation), else none."""
    from normbench.summary.discover import find_runs
    from normbench.summary.labels import sweep_axes

    varied, _ = sweep_axes(find_runs(root))
    return "lr" if "lr" in varied else None
