"""`normbench study`: shipped studies run through the declared protocol, their plan and cost printed first.

    normbench study ghost_batch                          # the laptop size, into outputs/study/
    normbench study ghost_batch scale=quick --plan       # the plan and its estimate only (calibrates)
    normbench study all scale=laptop budget=12h jobs=2   # every shipped study: the reproduce
    normbench study all out=outputs/reproduce            # ... run again: it resumes where it stopped
    normbench study ghost_batch launcher=slurm slurm.partition=debug   # each round one SLURM job array
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tempfile
from pathlib import Path

from normbench.errors import UserError
from normbench.study import jobs as joblist
from normbench.study import spec
from normbench.study.estimate import hms, schedule
from normbench.study.launch import hold, release
from normbench.study.slurm import describe
from normbench.study.rounds import Rounds, selection
from normbench.summary import protocol as protocols

SETTINGS = ("scale", "budget", "out", "jobs", "protocol", "launcher")


def parse_budget(text: str | None) -> float | None:
    """'2h', '90m', '1.5h', '3600s', '3600': seconds; None: no budget."""
    if text in (None, "", "none", "null"):
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([hms]?)\s*", str(text))
    if not m:
        raise UserError(f"budget={text}", "give a duration, e.g. budget=2h, budget=90m or budget=3600s")
    return float(m.group(1)) * {"h": 3600, "m": 60, "s": 1, "": 1}[m.group(2)]


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="normbench study", description="Run shipped studies through the declared protocol (docs/protocol.md): "
        "rounds of seeds, a look at the family after each, lr grids widened at their edges, later rounds only "
        "for the claims still undecided. Prints the plan and its estimated time first; run it again to resume.",
        epilog="settings can also be given as key=value: scale=quick budget=2h out=DIR jobs=2 launcher=slurm; "
        "with launcher=slurm, slurm.KEY=VALUE sets a key of the slurm preset (slurm.partition=debug, "
        "slurm.gpus_per_node=1; docs/cluster.md)")
    p.add_argument("studies", nargs="*", help=f"shipped studies ({', '.join(spec.names())}), all (default), or "
                   "the path of a study file of your own (docs/examples/my_study.yaml)")
    p.add_argument("--scale", default="laptop", help="quick (minutes) | laptop (the record) | full (as shipped); "
                   "normbench/study/plans/<name>.yaml sizes each (default: laptop)")
    p.add_argument("--budget", default=None, help="stop before a round that would not fit, e.g. 2h (default: none)")
    p.add_argument("--out", type=Path, default=Path("outputs/study"), help="the study's folder (default: outputs/study)")
    p.add_argument("--jobs", type=int, default=2, help="trainings side by side, one torch thread each (default: 2)")
    p.add_argument("--protocol", type=Path, default=None, help="a protocol.yaml of your own, declared before the "
                   "first run (default: normbench/configs/protocol.yaml)")
    p.add_argument("--launcher", choices=("local", "slurm"), default="local", help="local: jobs= trainings here "
                   "(default); slurm: each round's jobs as one SLURM job array, with the slurm preset's keys "
                   "(normbench/configs/hydra/launcher/slurm.yaml) set as slurm.KEY=VALUE")
    p.add_argument("--plan", action="store_true", help="print the plan and its estimate; only the calibrations train (20 steps each, kept)")
    slurm = [a for a in argv if a.startswith("slurm.")]  # the SLURM preset's keys, as train -m's hydra.launcher.
    # key=value, as the train command takes its settings
    argv = [f"--{a}" if a.split("=", 1)[0] in SETTINGS and "=" in a else a for a in argv if a not in slurm]
    args = p.parse_args(argv)
    if args.jobs < 1:
        raise UserError(f"jobs={args.jobs}", "run at least one job at a time, e.g. jobs=2")
    if slurm and args.launcher != "slurm":
        raise UserError(f"{slurm[0]} is a SLURM setting, and the study trains here", "add launcher=slurm")
    args.slurm = None
    if args.launcher == "slurm":
        from normbench.study.slurm import settings

        args.slurm = settings(slurm)
    return args


def _computations(job: joblist.Job, seeds) -> int:
    """How many computations `normbench train` makes of the job's pack (pack.plan.decide, on the CPU)."""
    from dataclasses import replace

    from normbench.pack import plan
    from normbench.study.estimate import compose

    cfg = compose(list(job.overrides))
    cfg = replace(cfg, pack=replace(cfg.pack, seeds=list(seeds)))
    with tempfile.TemporaryDirectory() as tmp:
        return len(plan.decide(cfg, Path(tmp), "cpu").groups)


def plan(study: Rounds, say=print) -> list[float]:
    """Print the plan: each round's jobs, runs, computations and estimated time (round 1's jobs; later
    rounds at most every primary claim's cells, as if none were decided; neither counts the lr values
    widening may add). Returns the estimates."""
    proto, slurm = study.proto, study.slurm
    say(f"normbench study {' '.join(s.name for s in study.studies)} scale={study.scale} out={study.out} "
        + ("launcher=slurm" if slurm else f"jobs={study.workers}")
        + (f" budget={hms(study.budget)}" if study.budget else ""))
    if slurm:
        say(f"on SLURM: each round's jobs (and each widening's) one job array, {describe(slurm)}; the estimates "
            "are this machine's, and leave out the queue's waits")
    say(f"protocol: alpha {proto.alpha} over looks at {', '.join(map(str, proto.looks))} seeds ({proto.spending}); "
        f"lr grids widened by up to {proto.widen_limit} values a side (docs/protocol.md)")
    study.calibrate()
    estimates, tasks, arrays = [], [], 0
    for index in range(len(proto.looks)):
        seeds = list(protocols.round_seeds(proto, index))
        jobs = study.round_jobs(index, None)
        seconds = [study.estimate(j, seeds) for j in jobs]
        runs = sum(j.members_per_seed * len(seeds) for j in jobs)
        comps = sum(_computations(j, seeds) for j in jobs)
        estimates.append(schedule(seconds, study.executor.parallel))
        tasks += seconds
        bound = "" if index == 0 else "at most "
        say(f"round {index + 1}, seeds {seeds[0]}-{seeds[-1]}: {bound}{len(jobs)} jobs, {runs} runs, {comps} "
            f"computations, {bound}~{hms(estimates[-1])}"
            + (" (before any lr value widening adds)" if index == 0 else
               " (the cells of the primary claims still undecided, before widening)"))
        if index == 0:
            for s in study.studies:  # the evaluation share every study is held to (<= 25%)
                mine = [j for j in jobs if j.study == s.name]
                total = sum(study.estimate(j, seeds) for j in mine)
                share = sum(study.evaluation(j, seeds) for j in mine) / total if total else 0.0
                say(f"  {s.name}: {len(mine)} jobs, ~{hms(total)} of process time, {share:.0%} of it evaluation")
                for sweep, overrides in s.sweeps_at(study.scale).items():
                    n = sum(1 for j in jobs if j.study == s.name and j.sweep == sweep)
                    say(f"  {s.name}/{sweep}: {n} job{'s' * (n > 1)}: normbench train -m {' '.join(overrides)} "
                        f"pack.seeds=[{','.join(map(str, seeds))}]")
        if slurm and jobs:
            _say_array(study, jobs, seconds, estimates[-1], say)
            arrays += 1
    total = sum(estimates)
    say(f"in all: ~{hms(estimates[0])} for round 1, at most ~{hms(total)} if every round runs"
        + (f"; budget {hms(study.budget)}" if study.budget else ""))
    if slurm:
        say(f"on SLURM in all: at most {arrays} arrays (one a round; a widening adds one), {len(tasks)} "
            f"tasks, ~{hms(sum(tasks))} of task time, at most ~{hms(total)} of wall time at "
            f"{slurm['array_parallelism']} at once, queue waits aside")
    return estimates


def _say_array(study: Rounds, jobs, seconds: list[float], wall: float, say) -> None:
    """A round's SLURM array as the plan says it: its tasks, each one's estimate (by study, the longest
    first), its wall time at the array's parallelism, and the tasks its time limit would interrupt."""
    slurm = study.slurm
    say(f"  SLURM array: {len(jobs)} tasks, ~{hms(wall)} of wall time at {slurm['array_parallelism']} at once; each "
        "task's estimate:")
    for s in study.studies:
        mine = sorted(((t, j) for t, j in zip(seconds, jobs) if j.study == s.name), key=lambda p: -p[0])
        if mine:
            say(f"    {s.name}: " + ", ".join(f"{j.name} ~{hms(t)}" for t, j in mine))
    limit = 60 * slurm["timeout_min"] - slurm["signal_delay_s"]  # USR2 comes signal_delay_s before the limit
    long = [t for t in seconds if t > limit]
    if long:
        say(f"    {len(long)} task{'s' * (len(long) > 1)} longer than slurm.timeout_min={slurm['timeout_min']}: "
            f"each resumes from its checkpoint over up to {max(int(t // max(limit, 1)) + 1 for t in long)} "
            f"allocations (slurm.max_requeues={slurm['max_requeues']})")


def sitting() -> dict:
    """This invocation's machine and code, for study.json: the processor (its model name), its cores, the
    device `device=auto` trains on, the commit, and when it started (UTC)."""
    import os
    import time

    import torch

    from normbench.results import cpu_model, git_sha
    from normbench.device import pick_device

    device = pick_device("auto").type  # what each job's device=auto picks
    if device == "cuda":
        device = f"cuda ({torch.cuda.get_device_name()})"
    return {"started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cpu": cpu_model(), "cores": os.cpu_count(),
            "device": device, "torch": torch.__version__, "git_sha": git_sha()}


def _on_slurm(params: dict) -> dict:
    """A sitting's launcher and device where its jobs train on SLURM (not this machine's device)."""
    where = "each task's GPU (device=auto)" if params.get("gpus_per_node") else "each task's CPU (device=auto)"
    return {"launcher": "slurm", "device": where}


def by_study(state) -> str | None:
    """The closing line: each study's process time against the plan's estimate, as the record's table has it
    (measured / planned); None before any job has finished."""
    rows = [f"{name} {hms(row['seconds'])} " + (f"(plan ~{hms(row['planned'])}: measured / planned "
                                                  f"{row['seconds'] / row['planned']:.2f})" if row["planned"] else
                                                  "(not in the plan)")
            for name, row in state.per_study().items() if row["seconds"] > 0]
    return ("process time by study, against the plan's estimate (jobs ran side by side): " + "; ".join(rows)
            if rows else None)


def main(argv: list[str]) -> int:
    args = _args(argv)
    studies = spec.resolve(args.studies)
    for s in studies:
        s.sweeps_at(args.scale)  # an unknown scale fails before anything runs
    hold(args.out, shlex.join(["normbench", "study", *argv]))  # until this call and the jobs it started end
    try:
        return _study(args, studies, argv)
    finally:
        release()


def _study(args: argparse.Namespace, studies: list[spec.Study], argv: list[str]) -> int:
    from normbench.summary.summarize import summarize

    for s in studies:
        if s.source is not None:  # a norm module beside the study file is found by the plan and every job
            _beside(s.source.parent)
    study = Rounds(studies, args.scale, args.out, args.jobs, parse_budget(args.budget), protocol=args.protocol,
                   slurm=args.slurm)
    try:
        estimates = plan(study)
    except KeyboardInterrupt:
        print(f"normbench: interrupted while planning: the calibrations finished so far are kept "
              f"({args.out}/calibration.json); run the same command again to continue", file=sys.stderr)
        return 130
    spent = study.state.spent
    if study.budget is not None and spent == 0 and estimates[0] > study.budget:
        raise UserError(f"round 1 needs ~{hms(estimates[0])}, more than budget={args.budget}",
                        "shrink it: scale=quick, fewer studies, more jobs=, or a larger budget=")
    if args.plan:
        return 0
    if spent:
        print(f"resuming {args.out}: {hms(spent)} trained so far")
    try:
        why = study.run(sitting() | (_on_slurm(args.slurm) if args.slurm else {}))
    except KeyboardInterrupt:
        print(f"normbench: interrupted: run the same command again to continue ({args.out}/study.json)",
              file=sys.stderr)
        return 130
    print(f"stopped: {why}; trained {hms(study.state.spent)} in all ("
          + ", ".join(f"round {k}: {hms(v)}" for k, v in study.state.seconds.items()) + ")")
    if line := by_study(study.state):
        print(line)
    own = {"claims_file": study.claims_file} if study.claims_file is not None else {"protocol": study.proto}
    for s in studies:
        if (args.out / s.name).is_dir():
            summarize(args.out / s.name, args.out / s.name / "summary", console=_quiet(),
                      select=selection(args.out / s.name), **own)
    files = summarize(args.out, args.out / "summary", select=selection(args.out), **own)
    print("wrote " + ", ".join(str(f) for f in files.values()))
    if study.failed:
        print(f"normbench: error: {len(study.failed)} job(s) failed: {'; '.join(study.failed)}; the look waits "
              f"for them: run the same command again to retry them: {shlex.join(['normbench', 'study', *argv])}",
              file=sys.stderr)
        return 1
    return 0


def _beside(folder: Path) -> None:
    """Put `folder` first on this process's import path and on its jobs' (PYTHONPATH)."""
    import os

    sys.path.insert(0, str(folder))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def _quiet():
    from rich.console import Console

    return Console(file=open("/dev/null", "w"))
