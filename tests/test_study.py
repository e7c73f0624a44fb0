"""`normbench study` (normbench/study/): the shipped studies as data, the plan and its estimate, and a real
study at a toy budget run through the protocol (docs/protocol.md) end to end: the large effect decided at
the first look, the null trained to the last round, and nothing but the null's cells trained after look 1."""

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from conftest import normbench_cli, requires_real_data

from normbench.errors import UserError
from normbench.results import git_sha
from normbench.regimes.default import STATISTICS
from normbench.study import command, estimate, jobs, spec
from normbench.study.rounds import declared_claims, open_after, primary_claims
from normbench.summary import metrics
from normbench.summary.verdicts import selects
from normbench.summary import protocol as protocols
from normbench.device import pick_device


@pytest.mark.slow  # ~30 s: Hydra composes every job of every study at two scales
def test_every_shipped_study_composes_and_its_jobs_hold_every_declared_claims_cells():
    """Each study file, at its quick and laptop scales: every job composes (Hydra, as `normbench train`
    would), and each cell a claim reads (both sides and their `minus`) selects at least one job: every
    primary claim's at both scales, so the protocol can test every member of the family the study owns,
    and every exploratory claim's at laptop scale, where it gets its estimate. Every study but
    catalog_2026 (estimates only) owns primaries."""
    experiments = {p.stem for p in spec.EXPERIMENTS.glob("*.yaml")}
    assert set(spec.names()) == experiments  # every shipped experiment is a study
    for study in spec.resolve(["all"]):
        claims = declared_claims(study)
        assert claims, study.name
        assert bool(primary_claims(study)) == (study.name != "catalog_2026"), study.name
        for scale in ("quick", "laptop"):
            universe = jobs.study_jobs(study, scale)
            for c in claims if scale == "laptop" else primary_claims(study):  # quick: a smoke run of the family
                for cell in c.selectors():
                    assert any(j.reads([type(c)(c.name, cell, cell, c.expect, study=c.study)]) for j in universe), \
                        f"{study.name} at scale={scale}: no job selects {cell} of {c.name!r}"
            starved = [(j.name, c.name) for c in declared_claims(study) for sel in c.readings() for j in universe
                       if keys(sel["metric"]) & set(STATISTICS) and selects(sel, j.config)
                       and not j.config["statistics_suite"]]
            assert starved == [], f"{study.name} at scale={scale}: statistics_suite=false where a claim reads it"


def keys(metric: str) -> set[str]:
    """The top-level results.json keys a metric names (metrics.read's forms: 'x.key - y', 'history[-3:].acc/val')."""
    return {term.split(".")[0].split("[")[0] for term in metrics.terms(metric)}


def test_study_settings_fail_in_one_line():
    with pytest.raises(UserError, match="no study named 'ghost'"):
        spec.resolve(["ghost"])
    with pytest.raises(UserError, match="has no scale 'huge'"):
        spec.load("ghost_batch").sweeps_at("huge")
    with pytest.raises(UserError, match="budget=soon"):
        command.parse_budget("soon")
    assert command.parse_budget("2h") == 7200 and command.parse_budget("90m") == 5400
    assert command.parse_budget("1.5h") == 5400 and command.parse_budget(None) is None


def test_ctrl_c_while_calibrating_is_one_line_that_says_what_is_kept(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the plan (a KeyboardInterrupt out of plan, as the terminal's SIGINT raises it in the
    study's process): exit 130, one line on stderr naming calibration.json and how to go on, no traceback.
    The real signal, with calibration workers running: the test after the toy study's."""
    def interrupted(study, say=print):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "plan", interrupted)
    assert command.main(["ghost_batch", "scale=quick", f"out={tmp_path / 'o'}"]) == 130
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "Traceback" not in said, said
    assert said.startswith("normbench: interrupted while planning: the calibrations finished so far are kept "
                           f"({tmp_path / 'o'}/calibration.json); run the same command again to continue"), said


def test_a_folder_trained_under_another_plan_is_refused_in_one_line(tmp_path):
    """A study folder whose study.json lists a job the plan no longer has (ghost_batch's bn-9, from the
    plan before BRN got a sweep of its own) is refused: resumed, the new plan would train the same cell
    again (statistics_suite is a runtime key, which cells ignore), two runs per seed that a claim drops as
    ambiguous. A job the plan has, trained with the same overrides, is fine, and so is a widened one."""
    from normbench.study.rounds import Rounds

    out = tmp_path / "o"
    out.mkdir()
    study = spec.load("ghost_batch")
    first = jobs.study_jobs(study, "laptop")[0]
    widened = {"study": "ghost_batch", "base": first.name, "lr": 0.003, "round": 1}
    [wide] = [j for j in jobs.study_jobs(study, "laptop", [widened]) if j.name == f"{first.name}-lr0.003"]
    state = {"studies": ["ghost_batch"], "scale": "laptop", "widened": [widened],
             "jobs": {f"ghost_batch/{j.name}": list(j.overrides) for j in (first, wide)}}
    (out / "study.json").write_text(json.dumps(state))
    assert Rounds([study], "laptop", out, 1, None).universe()
    state["jobs"]["ghost_batch/bn-9"] = ["experiment=ghost_batch", "norm=brn", "norm.ghost_batch=64"]
    (out / "study.json").write_text(json.dumps(state))
    with pytest.raises(UserError, match="job ghost_batch/bn-9 .1 in all. trained under a plan that no longer has it"):
        Rounds([study], "laptop", out, 1, None).universe()


def test_unknown_study_is_one_line_and_exit_2(tmp_path):
    r = normbench_cli("study", "ghost", "--plan", f"out={tmp_path / 'o'}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "no study named 'ghost'" in r.stderr, r.stderr


def test_jobs_expand_as_hydra_sweeps_do():
    """A sweep's jobs: the cartesian product of its comma lists (brackets kept whole), the experiment's own
    sweeper params overridden key by key by the sweep's."""
    out = spec.jobs(["experiment=ghost_batch", "norm=bn,brn", "norm.ghost_batch=2,64", "pack.lrs=[0.1,0.2]"])
    assert len(out) == 4
    assert ["norm=bn", "norm.ghost_batch=2", "experiment=ghost_batch", "pack.lrs=[0.1,0.2]"] in out


def test_schedule_takes_the_longest_first():
    assert estimate.schedule([], 2) == 0
    assert estimate.schedule([5, 5, 10], 2) == 10  # 10 on one worker, 5 + 5 on the other
    assert estimate.schedule([3, 3, 3], 1) == 9


def test_a_calibration_counts_max_steps_alone_below_one_epoch():
    """As train/budget.plan_steps: epochs 0 with max_steps trains max_steps (norm_free_regime's old form)."""
    def cal(epochs, max_steps):
        return estimate.Calibration(step_s=0.01, suite_s=1.0, validation_s=0.5, steps_per_epoch=15,
                                    epochs=epochs, max_steps=max_steps)
    assert cal(0, 800).steps == 800
    assert cal(0, 800).seconds == pytest.approx(estimate.START_S + 8.0 + 1.0 + 54 * 0.5)  # ceil(800 / 15)
    assert cal(2, 800).steps == 30 and cal(2, None).steps == 30
    fewer = replace(cal(0, 800), validations=10)  # train/budget.validates: min(epochs, validations) passes
    assert fewer.evaluation_s == pytest.approx(1.0 + 10 * 0.5)
    assert replace(cal(2, None), validations=10).evaluation_s == pytest.approx(1.0 + 2 * 0.5)


@pytest.mark.slow  # ~30 s: three 20-step calibrations of the MLP, two processes at a time
@requires_real_data
def test_calibrations_are_measured_side_by_side_and_are_the_ones_get_would_measure(tmp_path):
    """Reference: get()'s rule by hand (estimate.suite_key, estimate.signature): job a measures its suite with
    its training; b differs from a only in how it trains (optimizer: a training of its own, a's suite); c's
    norm is a suite of its own; d differs from a only in its lr (cost-neutral: nothing). So a process's start,
    2 suites and 3 trainings, measured in 3 calibrations 2 at a time and kept as each ends; after them get()
    measures nothing for any of the four."""
    a = ["model=mlp", "norm=ln", "data.subset=1000", "data.val_size=500", "statistics_suite=false", "epochs=1",
         "threads=1", "progress=false", "tensorboard=false"]
    jobs = [a, [*a, "optimizer=sgd"], [*a[:1], "norm=rms", *a[2:]], [*a, "lr=0.5"]]
    said = []
    cals = estimate.Calibrations(tmp_path / "calibration.json", say=said.append, start_runs=1)
    cals.prefetch(jobs, [0], workers=2)
    kept = json.loads((tmp_path / "calibration.json").read_text())
    kinds = sorted(json.loads(k)[0] for k in kept)
    assert kinds == ["start", "suite", "suite", "training", "training", "training"], kinds
    assert "calibrating 3 cells, 2 at a time" in said[1], said
    assert sorted(line.split("]")[0] for line in said if line.startswith("  [")) == ["  [1/3", "  [2/3", "  [3/3"]
    after = []
    cals.say = after.append
    assert all(cals.get(j, [0]).step_s > 0 for j in jobs) and after == [], after
    again = estimate.Calibrations(tmp_path / "calibration.json", say=after.append)
    again.prefetch(jobs, [0], workers=2)  # kept: nothing to measure
    assert after == []


def test_a_claim_that_reads_lr_sensitivity_on_one_side_only_is_not_widened():
    """lr_sensitivity.yaml sets the metric per side: the study's widening must see it there too."""
    from normbench.summary.claims import parse
    per_side, plain = parse([
        {"name": "s", "a": {"norm.name": "ln", "metric": "lr_sensitivity"},
         "b": {"norm.name": "none", "metric": "lr_sensitivity"}, "expect": "less"},
        {"name": "p", "a": {"norm.name": "ln"}, "b": {"norm.name": "none"}, "expect": "greater"}], "t")
    assert per_side.reads_lr_grid and not plain.reads_lr_grid


def test_the_closing_line_says_each_studys_measured_time_over_the_plans():
    """Reference: sums by hand of the jobs' [seconds, planned] (study.json's job_seconds), as the record's
    table divides them (measured / planned): a study 900 s over a plan of 600 s says 1.50, one faster than
    planned below 1; a study whose jobs are all unfinished is not named, and none finished says nothing."""
    from normbench.study.rounds import State

    state = State(["a", "b"], "quick", job_seconds={"a/r1/x-0": [500.0, 400.0], "a/r2/x-0": [400.0, 200.0],
                                                    "b/r1/y-0": [90.0, 120.0]})
    assert command.by_study(state) == ("process time by study, against the plan's estimate (jobs ran side by "
                                       "side): a 15 min 00 s (plan ~10 min 00 s: measured / planned 1.50); "
                                       "b 1 min 30 s (plan ~2 min 00 s: measured / planned 0.75)")
    assert command.by_study(State(["a"], "quick")) is None


def test_open_after_counts_a_claim_decided_later_as_open_before():
    class R:
        def __init__(self, key, verdict, look, role="primary"):
            self.claim = type("C", (), {"key": key})()
            self.verdict, self.look, self.role = verdict, look, role

    rows = [R(("s", "a"), "held", 1), R(("s", "b"), "held", 3), R(("s", "c"), "inconclusive", 3),
            R(("s", "d"), "exploratory", None, "exploratory")]
    assert open_after(rows, 0) == {("s", "a"), ("s", "b"), ("s", "c")}  # before look 1 counts
    assert open_after(rows, 1) == {("s", "b"), ("s", "c")}
    assert open_after(rows, 3) == {("s", "c")}


def write_toy_study(root: Path, experiment: str, bn: list[str], ignored: list[str]) -> Path:
    """The toy experiment as configs/experiment/toy.yaml under `root` and its study, studies/toy.yaml, whose
    two sweeps are BN at ghost batch 2 and 64 and GN at lr_ref_batch 32 and 64 (with `bn` and `ignored`'s
    overrides): the studies folder."""
    configs = root / "configs" / "experiment"
    configs.mkdir(parents=True)
    (configs / "toy.yaml").write_text(experiment)
    studies = root / "studies"
    studies.mkdir()
    search = f"hydra.searchpath=[file://{root / 'configs'}]"
    (studies / "toy.yaml").write_text(yaml.safe_dump({
        "experiment": "toy", "scales": {"quick": {}},
        "sweeps": {"bn": ["norm=bn", "norm.ghost_batch=2,64", *bn, search],
                   "ignored": ["norm=gn", "lr_ref_batch=32,64", *ignored, search]}}))
    return studies


TOY = """\
# @package _global_
defaults:
  - override /model: mlp
data: {split: per_seed, subset: 1000, val_size: 500}
optimizer: sgd
epochs: 1
max_steps: 30
claims:
  - name: BN at ghost batch 2 loses to ghost batch 64 (toy)
    role: primary
    a: {norm.name: bn, norm.ghost_batch: 2}
    b: {norm.name: bn, norm.ghost_batch: 64}
    expect: less
  - name: a key the model ignores changes nothing (toy)
    role: primary
    a: {norm.name: gn, lr_ref_batch: 32}
    b: {norm.name: gn, lr_ref_batch: 64}
    expect: greater
"""


def _seconds(hms: str) -> float:
    """The seconds of estimate.hms's "47 s", "1 min 05 s" or "1 h 02 min" (the last cut to the minute)."""
    units = {"h": 3600, "min": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", hms)))


@pytest.mark.slow
@requires_real_data
def test_a_toy_study_decides_the_large_effect_first_and_trains_only_the_null_after(tmp_path, monkeypatch, capsys):
    """A real study at a toy budget (30 steps of the MLP on 1,000 FashionMNIST images) with two
    primary claims: BN at ghost batch 2 vs 64 (a ~30-point effect) and two configurations that differ only
    in lr_ref_batch, which lr_scaling=none ignores (identical runs: a null). Under a protocol of two looks,
    at 6 and 10 seeds (Bonferroni), the large effect is held at look 1; the null is never decided, so the
    study runs to the last look, and round 2 trains the null's two jobs and nothing else. The plan's
    estimate of round 1 is within 2x of its measured time."""
    studies = write_toy_study(tmp_path, TOY, ["pack.lrs=[0.02,0.05]"], ["lr=0.05"])
    configs = tmp_path / "configs" / "experiment"
    proto = tmp_path / "protocol.yaml"
    proto.write_text("alpha: 0.05\nlooks: [6, 10]\nspending: bonferroni\nwiden_limit: 2\n")
    monkeypatch.setattr(spec, "STUDIES", studies)
    monkeypatch.setattr(spec, "EXPERIMENTS", configs)
    out = tmp_path / "out"

    assert command.main(["toy", "scale=quick", f"out={out}", f"protocol={proto}"]) == 0
    said = capsys.readouterr().out
    shown = re.search(r"round 1, seeds 0-5: 4 jobs, 36 runs, \d+ computations, ~((?:\d+ min )?\d+ s)", said).group(1)
    planned = _seconds(shown)  # "47 s", or "1 min 05 s" on a loaded machine
    assert "look 1 (seeds 0-5, level 0.025): 1 decided here, 1 of 2 primary claims still open" in said, said
    assert "held: toy · BN at ghost batch 2 loses to ghost batch 64 (toy)" in said
    assert "stopped: the last look (10 seeds) has been taken" in said
    summary = json.loads((out / "summary" / "summary.json").read_text())
    by_name = {c["name"]: c for c in summary["claims"]}
    big, null = by_name["BN at ghost batch 2 loses to ghost batch 64 (toy)"], by_name["a key the model ignores changes nothing (toy)"]
    assert (big["verdict"], big["look"]) == ("held", 1)
    assert (null["verdict"], null["look"], null["n"]) == ("inconclusive", 2, 10)
    # identical runs: every difference 0, on the claim's bound, so no number of pairs would decide it
    assert null["pairs_needed"] is None and "no number of pairs would decide it" in null["note"], null["note"]
    trained = sorted(p.name for p in (out / "toy" / "r2").iterdir() if p.is_dir())
    assert trained == ["ignored-0", "ignored-1"], trained  # round 2: the null's cells only
    assert sorted(p.name for p in (out / "toy" / "r2" / "ignored-0").glob("seed=*")) == [f"seed={s}" for s in range(6, 10)]
    state = json.loads((out / "study.json").read_text())
    (sitting,) = state["sittings"]  # where this invocation trained: this machine's processor, on the CPU here
    assert sitting["device"].split(" ")[0] == pick_device("auto").type and sitting["cores"] == os.cpu_count()
    assert sitting["jobs_done_before"] == 0 and sitting["git_sha"] == git_sha()
    assert sitting["cpu"] and sitting["torch"] == torch.__version__
    measured = state["seconds"]["1"]  # round 1's jobs; the values widening added count apart
    assert sorted(state["job_seconds"]) == sorted(state["done"])  # each job's seconds beside the plan's
    assert all(s > 0 and plan > 0 for s, plan in state["job_seconds"].values()), state["job_seconds"]
    # Widening: the BN cells (read by the claims open before look 1) chose an lr at their grid's edge at 30
    # steps, so the next values were trained at round 1's seeds before look 1 counted; the BN claim was
    # then decided, so round 2 trained none of them (the assertion on r2 above).
    assert state["widened"] and {(w["base"], w["round"]) for w in state["widened"]} <= {("bn-0", 1), ("bn-1", 1)}
    for w in state["widened"]:
        folder = out / "toy" / "r1" / f"{w['base']}-lr{w['lr']:g}"
        assert sorted(p.name.split(",")[-1] for p in folder.glob("*seed=*")) == [f"seed={s}" for s in range(6)]
    print(f"round 1: planned ~{planned:.0f} s, measured {measured:.0f} s")
    assert 0.5 <= measured / planned <= 2.0, (planned, measured)
    # each batch of jobs says its time by the same calibrations: round 1's as the plan did, widening's too
    started = dict(re.findall(r"^(round 1(?:, widening \d+ lr grids? before look 1 counts)?): .* at once, "
                              r"~((?:\d+ min )?\d+ s)$", said, re.M))
    assert started.get("round 1") == shown and len(started) == 2, said
    # each finished job says what is left of its batch by the same estimates; the batch's last, nothing
    assert re.search(r"^  \[1/4\] toy/\S+: done in \d+ s; the rest at most ~(\d+ min )?\d+ s by the plan$", said, re.M)
    assert re.search(r"^  \[4/4\] toy/\S+: done in \d+ s$", said, re.M), said

    # Run again: nothing is trained, the same verdicts come back (the study resumes from its folder).
    assert command.main(["toy", "scale=quick", f"out={out}", f"protocol={proto}"]) == 0
    again = capsys.readouterr().out
    assert "jobs at seeds" not in again and "held: toy · BN at ghost batch 2" in again
    assert len(json.loads((out / "study.json").read_text())["sittings"]) == 1  # a resume that trains nothing is none


@pytest.mark.slow
@requires_real_data
def test_a_run_that_really_diverges_is_scored_at_chance_and_named(tmp_path):
    """A real pack whose lr 1e4 makes the MLP's loss non-finite: its runs are `diverged`; a claim reading
    that cell pairs them at chance (10%) against the other side, and its note names each one."""
    sweep = tmp_path / "sweep"
    r = normbench_cli("train", "norm=none", "optimizer=sgd", "pack.lrs=[1e4]", "pack.seeds=[0,1,2]",
                      "data.subset=500", "data.val_size=200", "max_steps=20", "progress=false",
                      "tensorboard=false", f"hydra.run.dir={sweep / 'none'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = normbench_cli("train", "norm=ln", "optimizer=sgd", "pack.lrs=[0.05]", "pack.seeds=[0,1,2]",
                      "data.subset=500", "data.val_size=200", "max_steps=20", "progress=false",
                      "tensorboard=false", f"hydra.run.dir={sweep / 'ln'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    statuses = [json.loads(p.read_text())["status"] for p in (sweep / "none").rglob("results.json")]
    assert statuses == ["diverged"] * 3
    claims_file = tmp_path / "claims.yaml"
    claims_file.write_text(yaml.safe_dump([{"name": "LN beats no norm at lr 1e4", "a": {"norm.name": "ln"},
                                            "b": {"norm.name": "none"}, "expect": "greater"}]))
    from normbench.summary.summarize import compute

    (claim,) = compute(sweep, claims_file=claims_file).claims
    assert claim.n == 3 and len(claim.at_chance) == 3
    lns = [json.loads(next((sweep / "ln").glob(f"*seed={s}/results.json")).read_text())["test_acc"] for s in range(3)]
    assert claim.diffs == pytest.approx([a - 0.1 for a in lns])
    assert "b: seeds 0, 1, 2 diverged (lr=10000,seed=0, lr=10000,seed=1, lr=10000,seed=2), scored at chance (10%)" \
        in claim.note, claim.note


@pytest.mark.slow
@requires_real_data
@pytest.mark.timeout(1800)
def test_the_reproduce_at_its_quick_size_runs_every_study_through_the_protocol(tmp_path):
    """`normbench study all scale=quick` (what scripts/reproduce.sh runs, at the smoke size; ~12 minutes in
    all here, the plan's calibration included): the plan is printed before anything trains, every shipped
    study trains and is summarized, every primary claim of the family is tested at look 1, and the study
    stops before a round the budget cannot pay. The budget is this machine's own plan for round 1 (`--plan`
    first; its calibrations are kept and the run reads them): it pays round 1, and round 2 only if round 1
    ran faster than planned by all of round 2's plan. A fixed budget=7m let a faster CI machine train
    round 2 as well."""
    out = tmp_path / "reproduce"
    p = normbench_cli("study", "all", "scale=quick", f"out={out}", "--plan", cwd=tmp_path, timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    round1 = _seconds(re.search(r"in all: ~(.+?) for round 1", p.stdout).group(1))
    budget = f"{round1 + (62 if round1 >= 3600 else 2):.0f}s"  # the plan's figure: to the second, past 1 h the minute
    r = normbench_cli("study", "all", "scale=quick", f"budget={budget}", f"out={out}", cwd=tmp_path, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    first = protocols.round_seeds(protocols.load(), 0)  # the declared protocol's fresh seeds
    assert r.stdout.index(f"round 1, seeds {first[0]}-{first[-1]}:") < r.stdout.index("round 1: ")  # plan, then training
    assert "calibrating" not in r.stdout  # the --plan's calibrations were kept and read
    assert "stopped: the budget is spent: round 2 would need" in r.stdout, r.stdout[-3000:]
    for name in spec.names():
        assert (out / name / "summary" / "summary.json").exists(), name
    summary = json.loads((out / "summary" / "summary.json").read_text())
    family = set(protocols.load().family)
    primary = [c for c in summary["claims"] if (c["study"], c["name"]) in family]
    assert {(c["study"], c["name"]) for c in primary} == family
    for c in primary:
        assert c["look"] == 1 and c["n"] == 3, c
    print(r.stdout[-2000:])


@pytest.mark.slow
@requires_real_data
@pytest.mark.timeout(300)
def test_ctrl_c_while_calibrating_side_by_side_stops_the_workers_in_one_line(tmp_path):
    """Ctrl-C on `normbench study` while its calibrations run 2 at a time (SIGINT to its process group, as a
    terminal sends it): the workers ignore it and the study stops them; it exits 130 with one line on stderr
    (no worker's traceback), no process of its group is left, and calibration.json is whole (the process's
    start, measured before the workers began, is kept)."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import CHILD_ENV

    out = tmp_path / "study"
    proc = subprocess.Popen([sys.executable, "-m", "normbench", "study", "ghost_batch", "scale=laptop", "--plan",
                             "jobs=2", f"out={out}"], cwd=tmp_path, env={**CHILD_ENV, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's
    try:
        said = []
        for line in proc.stdout:
            said.append(line)
            if line.startswith("calibrating ") and "at a time" in line:
                break
        assert said and "2 at a time" in said[-1], "".join(said)
        time.sleep(3)  # the workers have started and are importing or training
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)  # a process of its group (a worker) is still there
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("a process of the study's group outlived it")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 130, "".join(said) + rest + err
    assert err.count("\n") == 1 and err.startswith("normbench: interrupted while planning: the calibrations "
                                                   "finished so far are kept"), err
    kept = json.loads((out / "calibration.json").read_text())
    assert any(json.loads(k)[0] == "start" for k in kept), kept


@pytest.mark.slow
@requires_real_data
@pytest.mark.timeout(600)
def test_ctrl_c_stops_the_study_and_its_job_in_flight_and_starts_no_other(tmp_path):
    """Ctrl-C on `normbench study` (SIGINT to its process group, as a terminal sends it): the job in flight
    stops and says how it resumes, no queued job starts, and the study exits 130 saying to run the same
    command again. (Before, the study's pool trained every queued job of the round first.) ghost_batch at
    its quick size, one job at a time."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import CHILD_ENV

    out = tmp_path / "study"
    proc = subprocess.Popen([sys.executable, "-m", "normbench", "study", "ghost_batch", "scale=quick", "jobs=1",
                             f"out={out}"], cwd=tmp_path, env={**CHILD_ENV, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's
    try:
        said = []
        for line in proc.stdout:  # the plan (its calibrations train first), then round 1 starts
            said.append(line)
            if line.startswith("round 1: "):
                break
        logs = out / "ghost_batch" / "r1"
        deadline = time.monotonic() + 120
        while not any(logs.glob("*/.hydra")) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first job has started: Hydra composed its config (its signal handlers are in)
        assert any(logs.glob("*/.hydra")), "".join(said)
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, "".join(said) + rest + err
    assert "interrupted: run the same command again to continue" in err, err
    assert "stopping: no other job starts" in rest, rest
    started = sorted(p.name for p in logs.glob("*.log"))
    assert len(started) == 1, started  # no queued job started after Ctrl-C
    assert "interrupted (SIGINT)" in (logs / started[0]).read_text()
    state = json.loads((out / "study.json").read_text())
    assert state["done"] == [] and state["finished"] is None
