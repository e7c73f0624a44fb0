"""`normbench study ... launcher=slurm` (normbench/study/slurm.py): each batch of a study's jobs one SLURM job
array, and the study's own faults on the one-node cluster of tests/test_slurm.py (scripts/slurm_local.sh):

- a toy study (a study file: a CNN on a tiny FashionMNIST, two jobs a round, two looks) whose process is
  killed while its round-1 array runs, one of whose tasks is preempted (USR2 to its processes) and the
  other SIGKILLed: run
  again, it attaches to the array, the preempted task resumes from its checkpoint, the killed one stops the
  study before its look in one line, whose command retries it; killed again while round 2's array runs and
  run once that array has ended, it collects it. Every run ends with the numbers of the same study run here;
- a one-job study under a one-minute time limit: its task requeues itself at each warning and ends with
  the numbers of the same study run here;
- `normbench study ghost_batch scale=quick launcher=slurm` against the same run here: the same verdicts and
  test accuracies, run for run, and one array a round in SLURM's accounting.

    python -m pytest -q -p no:xdist tests/test_study_slurm.py -m slurm   # as root; about ten minutes

The tests without the slurm marker (the settings, the plan, the submitted parameters, the per-cell
calibration) need no cluster.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_slurm
import yaml
from conftest import CHILD_ENV, normbench_cli, requires_real_data, write_tiny_fashion_mnist
from test_slurm import ENV, TIMINGS, Releaser, _signal_task, slurm, wait_queue_empty

from normbench.errors import UserError
from normbench.study import estimate, spec

cluster = test_slurm.cluster  # the one-node cluster fixture, shared with the sweep's SLURM tests

SLURM_ARGS = ["launcher=slurm", "slurm.mem_gb=1", "slurm.cpus_per_task=1"]


def _submitit():
    return pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


# --- no cluster needed --------------------------------------------------------------------------------------

def test_the_settings_are_the_slurm_presets_and_overrides_are_typed():
    """Reference: normbench/configs/hydra/launcher/slurm.yaml, the one source of the defaults `train -m
    hydra/launcher=slurm` submits with. A slurm.KEY=VALUE replaces one key, typed by the preset's schema;
    a key the schema lacks, or a value of the wrong type, is one line."""
    _submitit()
    from normbench.study.slurm import PRESET, settings

    preset = yaml.safe_load(PRESET.read_text())
    params = settings([])
    for key in ("timeout_min", "cpus_per_task", "mem_gb", "array_parallelism", "max_requeues", "name",
                "partition", "account", "qos", "gpus_per_node"):
        assert params[key] == preset[key], key
    assert params["setup"] == [f"export OMP_NUM_THREADS={preset['cpus_per_task']}"]
    assert params["signal_delay_s"] == 120  # the schema's, as train -m's
    over = settings(["slurm.partition=debug", "slurm.gpus_per_node=1", "slurm.cpus_per_task=4",
                     "slurm.additional_parameters.constraint=v100"])
    assert (over["partition"], over["gpus_per_node"], over["cpus_per_task"]) == ("debug", 1, 4)
    assert over["setup"] == ["export OMP_NUM_THREADS=4"] and over["additional_parameters"] == {"constraint": "v100"}
    with pytest.raises(UserError, match="slurm.partitio: no such SLURM setting"):
        settings(["slurm.partitio=debug"])
    with pytest.raises(UserError, match="slurm.mem_gb=lots"):
        settings(["slurm.mem_gb=lots"])


def test_slurm_settings_without_launcher_slurm_are_one_line(tmp_path):
    r = normbench_cli("study", "ghost_batch", "--plan", "slurm.partition=debug", f"out={tmp_path / 'o'}", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "slurm.partition=debug is a SLURM setting" in r.stderr and "add launcher=slurm" in r.stderr


def _fixed_calibrations(monkeypatch, step_s=0.01):
    """Every calibration the same, measured by nothing: the plan's arithmetic alone."""
    cal = estimate.Calibration(step_s=step_s, suite_s=2.0, validation_s=0.5, steps_per_epoch=15, epochs=1,
                               max_steps=40)
    monkeypatch.setattr(estimate.Calibrations, "get", lambda self, overrides, seeds: cal)
    return cal


def test_the_plan_prints_each_rounds_array_and_the_whole_study(tmp_path, monkeypatch):
    """Reference: the calibration's arithmetic (estimate.Calibration.scaled: the start once, training and
    evaluation by members) and estimate.schedule at the array's parallelism. Each round's array: its
    tasks, each one's estimate, its wall time; then the whole study's arrays, tasks and times."""
    _submitit()
    from normbench.study import command
    from normbench.study.rounds import Rounds
    from normbench.study.slurm import settings

    cal = _fixed_calibrations(monkeypatch)
    study = Rounds([spec.load("ghost_batch")], "quick", tmp_path / "o", 2, None,
                   slurm=settings(["slurm.array_parallelism=2", "slurm.timeout_min=1", "slurm.signal_delay_s=50"]))
    said = []
    command.plan(study, say=said.append)
    text = "\n".join(said)
    one = cal.scaled(1.0)  # round 1: 5 tasks at 3 seeds, each the calibration itself
    assert f"SLURM array: 5 tasks, ~{estimate.hms(estimate.schedule([one] * 5, 2))} of wall time at 2 at once" in text
    assert f"    ghost_batch: bn-0 ~{estimate.hms(one)}, bn-1 ~{estimate.hms(one)}" in text
    cells = len(study.round_jobs(1, None))  # rounds 2, 3: at most the primary claims' cells (BRN's two)
    later = [cal.scaled(2 / 3)] * cells + [cal.scaled(5 / 3)] * cells
    assert cells == 2
    assert f"on SLURM in all: at most 3 arrays (one a round; a widening adds one), {5 + 2 * cells} tasks, " \
           f"~{estimate.hms(5 * one + sum(later))} of task time" in text
    assert "1 CPU, 4 GB, a 1 min limit per task, at most 2 at once, trained on the CPU" in text
    # a 1-minute limit, USR2 50 s before it: every task (~13 s or more) outlasts its 10 s, and says so
    assert "5 tasks longer than slurm.timeout_min=1: each resumes from its checkpoint over up to 2 allocations" in text


def test_a_gpu_per_task_is_asked_for_and_said(tmp_path, monkeypatch):
    """Reference: submitit's SLURM parameter names (`gpus_per_node` becomes sbatch's --gpus-per-node).
    With slurm.gpus_per_node=1 the array asks one GPU per task, each task trains where device=auto puts it
    (the jobs set no device: CUDA on a GPU node), and the plan says so. No GPU here: the parameters
    submitit is given, and the plan's text."""
    _submitit()
    import submitit

    from hydra_plugins.normbench_slurm import make_executor
    from normbench.study import command
    from normbench.study.rounds import Rounds
    from normbench.study.slurm import settings

    params = settings(["slurm.gpus_per_node=1"])
    given = {}

    class Recorder:
        def __init__(self, **kwargs):
            given["init"] = kwargs

        def update_parameters(self, **kwargs):
            given.update(kwargs)

    monkeypatch.setattr(submitit, "AutoExecutor", Recorder)
    make_executor({k: v for k, v in params.items() if k != "max_requeues"} | {"submitit_folder": str(tmp_path)})
    assert given["gpus_per_node"] == 1 and given["cpus_per_task"] == 1 and given["mem_gb"] == 4
    assert given["slurm_setup"] == ["export OMP_NUM_THREADS=1"] and given["init"]["cluster"] == "slurm"
    study = spec.load("ghost_batch")
    assert not any(o.startswith("device=") for overrides in study.sweeps_at("quick").values() for o in overrides)

    _fixed_calibrations(monkeypatch)
    said = []
    command.plan(Rounds([study], "quick", tmp_path / "o", 2, None, slurm=params), say=said.append)
    assert "trained on 1 GPU each (device=auto trains on it: CUDA)" in "\n".join(said)
    assert command._on_slurm(params) == {"launcher": "slurm", "device": "each task's GPU (device=auto)"}


def test_each_cell_is_calibrated_and_a_suite_once_per_model_and_regime(tmp_path, monkeypatch):
    """Reference: estimate's module docstring. Two cells that differ in their norm are each calibrated;
    two that differ only in how they train (here the optimizer's momentum and the schedule) share one
    suite, and each has its own training; an lr (cost-neutral) shares both; a process's start is measured
    once. The calibrations are kept: asked again, nothing is measured."""
    measured = []

    def full(overrides, seeds):
        measured.append(("full", tuple(overrides)))
        return estimate.Calibration(0.01, 3.0, 0.5, 15, 1, 40)

    def training(overrides, seeds):
        measured.append(("training", tuple(overrides)))
        return estimate.Calibration(0.02, 0.0, 0.5, 15, 1, 40)

    monkeypatch.setattr(estimate, "measure", full)
    monkeypatch.setattr(estimate, "measure_training", training)
    monkeypatch.setattr(estimate, "measure_start", lambda runs=3: measured.append(("start", ())) or 2.5)
    cals = estimate.Calibrations(tmp_path / "calibration.json", say=lambda s: None)
    base = ["experiment=ghost_batch", "epochs=1", "max_steps=40"]
    bn, gn = [*base, "norm=bn"], [*base, "norm=gn", "norm.ghost_batch=null"]
    other_training = [*bn, "momentum=0.5", "schedule=constant"]
    assert (cals.get(bn, [0, 1, 2]).suite_s, cals.get(bn, [0, 1, 2]).start_s) == (3.0, 2.5)
    assert cals.get(gn, [0, 1, 2]).step_s == 0.01  # a norm of its own: its own suite, and training with it
    shared = cals.get(other_training, [0, 1, 2])
    assert (shared.step_s, shared.suite_s) == (0.02, 3.0)  # its own training, BN's suite
    cals.get([*bn, "lr=0.3"], [0, 1, 2])
    assert [kind for kind, _ in measured] == ["start", "full", "full", "training"]  # a process's start: once
    again = estimate.Calibrations(tmp_path / "calibration.json", say=lambda s: None)
    assert again.get(other_training, [0, 1, 2]) == shared and len(measured) == 4


def test_the_start_of_a_process_does_not_scale_with_its_members():
    """A later round's job has other members than round 1's calibrated pack: its training and evaluation
    scale with them, the process's start is paid once whatever the members."""
    cal = estimate.Calibration(step_s=0.1, suite_s=2.0, validation_s=0.5, steps_per_epoch=10, epochs=2,
                               max_steps=None, start_s=3.0)
    work = 20 * 0.1 + 2.0 + 2 * 0.5
    assert cal.seconds == pytest.approx(3.0 + work)
    assert cal.scaled(5 / 3) == pytest.approx(3.0 + 5 / 3 * work)


@requires_real_data
def test_a_process_start_is_measured_as_a_real_process_less_its_work():
    """Reference: a `normbench train` process's wall time here, which its start is part of: the start
    measured is positive and below the whole process's wall time (a one-step MLP run, timed outside), and is
    not the fallback a failed run gives (START_S)."""
    import time as clock

    started = clock.perf_counter()
    start = estimate.measure_start(runs=1)
    assert 0 < start < clock.perf_counter() - started and start != estimate.START_S


# --- on the one-node cluster ------------------------------------------------------------------------------

TOY = {
    "name": "toy",
    "experiment": ["model=cnn", "model.channels=[8,16]", "model.hidden=32", "data.val_size=100", "data.download=false",
                   "data.split=per_seed", "optimizer=sgd", "lr=0.05", "threads=1"],
    # two configurations that differ only in a key the model ignores (lr_scaling is none): a null, never
    # decided, so the study trains both rounds
    "sweeps": {"null": ["norm=bn", "lr_ref_batch=32,64"]},
    "claims": [{"name": "a key the model ignores changes nothing (toy)", "a": {"lr_ref_batch": 32},
                "b": {"lr_ref_batch": 64}, "expect": "greater"}],
    "protocol": {"looks": [2, 3], "alpha": 0.05, "spending": "bonferroni"},
}


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return write_tiny_fashion_mnist(tmp_path_factory.mktemp("study-slurm-data"), n_train=1100)


def toy_file(folder: Path, data: Path, epochs: int, name: str = "toy") -> Path:
    raw = {**TOY, "name": name, "scales": {"quick": {"overrides": [f"epochs={epochs}", f"data.root={data}"]}}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def study(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return normbench_cli("study", *args, cwd=cwd, env=ENV, timeout=timeout)


def start_study(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "normbench", "study", *args], cwd=cwd,
                            env={**CHILD_ENV, **ENV, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def arrays(out: Path) -> list[dict]:
    path = out / "study.json"
    return json.loads(path.read_text()).get("arrays", []) if path.is_file() else []


def wait_until(what: str, ok, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not (found := ok()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)
    return found


def checkpointed(out: Path, task_key: str) -> bool:
    return any((out / task_key).rglob("checkpoint.pt"))


def runs(out: Path) -> dict[str, dict]:
    """Each run of a study folder (its path below the folder) -> its results.json."""
    return {str(p.parent.relative_to(out)): json.loads(p.read_text())
            for p in sorted(out.glob("*/r*/*/*/results.json"))}


def metrics(res: dict) -> dict:
    """What a run interrupted, requeued or retried must share with its unbroken twin (not the timings)."""
    history = [{k: v for k, v in e.items() if k != "train_samples_per_s"} for e in res["history"]]
    return {k: res[k] for k in ("status", "steps", "epochs_done", "val_acc", "test_loss", "test_acc")} | \
        {"history": history}


def submissions(out: Path) -> int:
    """How many sbatch submissions the study made (submitit writes one script each)."""
    return len(list((out / ".submitit").glob("*/*_submission.sh")))


def kill(proc: subprocess.Popen) -> str:
    """SIGKILL the study process (nothing it could catch), and what it had said."""
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    return out


@pytest.fixture(scope="module")
def faults(cluster, toy_data, tmp_path_factory):  # noqa: F811  (test_slurm's cluster fixture)
    """The toy study on SLURM through its faults (the module docstring), and the same study run here.
    Returns what the tests read."""
    cwd = tmp_path_factory.mktemp("study-faults")
    path = toy_file(cwd, toy_data, epochs=12)
    out, twin = cwd / "slurm", cwd / "local"
    args = [str(path), "scale=quick", f"out={out}", *SLURM_ARGS]
    found: dict = {"out": out, "twin": twin, "args": args}
    releaser = Releaser()  # requeued tasks start within seconds, not after SLURM's two-minute hold
    releaser.start()
    t0 = time.monotonic()
    try:
        first = start_study(args, cwd)
        (r1,) = wait_until("round 1's array in study.json", lambda: arrays(out))
        wait_until("both tasks' first checkpoints", lambda: all(checkpointed(out, key) for key in r1["tasks"]))
        preempted, failed = 0, 1
        found["first said"] = kill(first)  # the study stops; its array goes on
        _signal_task(r1["jobs"][preempted], signal.SIGUSR2)  # a preemption warning, as SLURM sends it
        _signal_task(r1["jobs"][failed], signal.SIGKILL)  # dead: out of memory, a node lost
        TIMINGS["study: faults sent, after"] = time.monotonic() - t0
        found.update(r1=r1, preempted=preempted, failed=failed)
        found["second"] = study(*args, cwd=cwd)  # attaches; stops before look 1, naming the dead task
        TIMINGS["study: the run that attaches returns, after"] = time.monotonic() - t0
        (line,) = [x for x in found["second"].stderr.splitlines() if x.startswith("normbench: error:")]
        retry = shlex.split(line.split("run the same command again to retry them: ", 1)[1])
        assert retry[:2] == ["normbench", "study"], line
        found["retry"] = retry
        third = start_study(retry[2:], cwd)  # retries the dead task, looks, then round 2's array goes out
        wait_until("round 2's array in study.json", lambda: any(a["round"] == 2 for a in arrays(out)))
        found["third said"] = kill(third)
        wait_queue_empty()  # round 2's array ends while no study waits for it
        found["fourth"] = study(*args, cwd=cwd)  # collects it
        TIMINGS["study: faults, all four runs, after"] = time.monotonic() - t0
    finally:
        releaser.stop.set()
    found["released"] = releaser.released
    t1 = time.monotonic()
    found["local"] = study(str(path), "scale=quick", f"out={twin}", cwd=cwd)
    TIMINGS["study: the same study run here"] = time.monotonic() - t1
    return found


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_a_study_stopped_while_its_array_runs_attaches_to_it_and_trains_nothing_twice(faults):
    """Reference: SLURM's accounting of the study's submissions (submitit's scripts) and each job's log (a
    line per `normbench train` it ran). Killed while round 1's array ran, the study run again attaches to
    that array rather than submitting one; killed while round 2's ran and run once it had ended, it
    collects it. Four sittings, three submissions: round 1, the retry of the task that died, round 2;
    every job not interrupted ran once."""
    out, r1 = faults["out"], faults["r1"]
    second, fourth = faults["second"], faults["fourth"]
    assert f"attached to SLURM array {r1['id']} (round 1): 2 of its 2 tasks not collected yet" in second.stdout
    (r2,) = [a for a in arrays(out) if a["round"] == 2]
    assert f"attached to SLURM array {r2['id']} (round 2): 2 of its 2 tasks not collected yet" in fourth.stdout
    assert "submitted SLURM array" not in fourth.stdout
    assert fourth.returncode == 0, fourth.stdout[-3000:] + fourth.stderr[-3000:]
    assert "stopped: the last look (3 seeds) has been taken" in fourth.stdout
    assert submissions(out) == 3 and [a["round"] for a in arrays(out)] == [1, 1, 2]
    state = json.loads((out / "study.json").read_text())
    assert sorted(state["done"]) == sorted(r1["tasks"] + r2["tasks"])
    for key in r2["tasks"] + [r1["tasks"][faults["preempted"]]]:
        log = (out / key).parent / f"{Path(key).name}.log"
        commands = [x for x in log.read_text().splitlines() if x.startswith("$ ")]
        expected = 2 if key == r1["tasks"][faults["preempted"]] else 1  # the preempted one: its requeue too
        assert len(commands) == expected, (key, commands)


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_a_preempted_task_requeues_and_ends_with_the_numbers_of_an_unbroken_run(faults):
    """Reference: the same study run here, never interrupted. Sent USR2 after its first checkpoint
    (to the task's processes, as SLURM sends it), the task stopped its run at the next step with a checkpoint there and
    requeued itself; the requeued task ran the job again with resume=true and every run of it ends with the
    local twin's numbers."""
    out, twin, r1 = faults["out"], faults["twin"], faults["r1"]
    assert faults["local"].returncode == 0, faults["local"].stderr[-3000:]
    key = r1["tasks"][faults["preempted"]]
    log = ((out / key).parent / f"{Path(key).name}.log").read_text()
    assert "preempted or near its time limit: SLURM requeues this task" in log
    assert r1["jobs"][faults["preempted"]] in faults["released"]
    commands = [x for x in log.splitlines() if x.startswith("$ ")]
    assert "resume=true" not in commands[0] and "resume=true" in commands[1]
    mine = {k: v for k, v in runs(out).items() if k.startswith(key + "/")}
    # the run in training when USR2 came resumed at its step (a sequential pack's later members start afresh)
    assert mine and any(res["resumed_at_step"] for res in mine.values())
    local = runs(twin)
    for name, res in mine.items():
        assert metrics(res) == metrics(local[name]), name


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_a_failed_task_stops_the_study_before_its_look_in_one_line_that_retries_it(faults):
    """Reference: the same study run here. A task killed (SIGKILL: out of memory, a node lost) ends its
    array's wait; the study takes no look and ends with exit 1 and one line naming the task, its log and
    the command that retries it. That command trains the job again from its checkpoint (resume=true), and
    its runs end with the local twin's numbers."""
    out, r1, second = faults["out"], faults["r1"], faults["second"]
    assert second.returncode == 1, second.stdout[-3000:] + second.stderr[-3000:]
    assert "look 1 (seeds" not in second.stdout and "Traceback" not in second.stderr  # no look taken
    (line,) = [x for x in second.stderr.splitlines() if x.startswith("normbench: error:")]
    key = r1["tasks"][faults["failed"]]
    assert f"SLURM task {r1['jobs'][faults['failed']]}" in line and f"log: {out / key}.log" in line
    assert faults["retry"][2:] == faults["args"]
    logs = ((out / key).parent / f"{Path(key).name}.log").read_text()
    assert [x for x in logs.splitlines() if x.startswith("$ ")][-1].count("resume=true") == 1
    local = runs(faults["twin"])
    mine = {k: v for k, v in runs(out).items() if k.startswith(key + "/")}
    assert mine
    for name, res in mine.items():
        assert metrics(res) == metrics(local[name]), name
    summary = json.loads((out / "summary" / "summary.json").read_text())
    twin = json.loads((faults["twin"] / "summary" / "summary.json").read_text())
    assert [(c["name"], c["verdict"], c["n"]) for c in summary["claims"]] == \
        [(c["name"], c["verdict"], c["n"]) for c in twin["claims"]]


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_a_task_at_its_time_limit_requeues_and_ends_with_the_numbers_of_an_unbroken_run(cluster, toy_data,  # noqa: F811
                                                                                         tmp_path):
    """Reference: the same study run here, and SLURM's accounting. The toy study's two jobs, each longer
    than its one-minute limit: SLURM's USR2, 20 to 50 s before the limit (10 to 40 s into an allocation),
    stops each run at a step with a checkpoint; each task requeues itself, as often as the limit comes
    again, and ends with the numbers of the local run; the study's look follows."""
    path = toy_file(tmp_path, toy_data, epochs=200, name="limited")  # ~30 s a seed: past a warning or two
    raw = yaml.safe_load(path.read_text())
    raw["protocol"]["looks"] = [2]  # one round: its two tasks side by side on the node's two CPUs
    path.write_text(yaml.safe_dump(raw))
    out, twin = tmp_path / "slurm", tmp_path / "local"
    releaser = Releaser()
    releaser.start()
    t0 = time.monotonic()
    try:
        # requeues not capped: under load an allocation trains less (its start-up takes longer)
        r = study(str(path), "scale=quick", f"out={out}", *SLURM_ARGS, "slurm.timeout_min=1",
                  "slurm.signal_delay_s=20", "slurm.max_requeues=30", cwd=tmp_path, timeout=1500)
    finally:
        releaser.stop.set()
    TIMINGS["study: a task at its time limit, done after"] = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (array,) = arrays(out)
    for k, job in enumerate(array["jobs"]):
        log = (out / "limited" / "r1" / f"null-{k}.log").read_text()
        assert log.count("SLURM requeues this task") >= 1 and job in releaser.released, log[-2000:]
    rows = slurm("sacct", "-X", "-n", "-P", "-j", array["id"], "-o", "JobID,State").split()
    assert sorted(rows) == sorted(f"{job}|COMPLETED" for job in array["jobs"]), rows
    local = study(str(path), "scale=quick", f"out={twin}", cwd=tmp_path, timeout=800)
    assert local.returncode == 0, local.stderr[-3000:]
    mine, theirs = runs(out), runs(twin)
    assert mine.keys() == theirs.keys() and mine
    for job in ("null-0", "null-1"):  # each task's run in training at a warning resumed at its step
        assert any(res["resumed_at_step"] for name, res in mine.items() if f"/{job}/" in name), job
    for name, res in mine.items():
        assert metrics(res) == metrics(theirs[name]), name


@pytest.mark.slurm
@requires_real_data
@pytest.mark.timeout(1800)
def test_ghost_batch_on_slurm_reaches_the_verdicts_and_accuracies_of_the_local_run(cluster, tmp_path):  # noqa: F811
    """Reference: `normbench study ghost_batch scale=quick` run here, and SLURM's accounting. On SLURM the
    study trains the same jobs at the same seeds and takes the same looks: the same verdicts at the same
    looks, each run's test accuracy equal, and sacct shows one array a round, each of that round's jobs."""
    local, on_slurm = tmp_path / "local", tmp_path / "slurm"
    t0 = time.monotonic()
    r = study("ghost_batch", "scale=quick", f"out={local}", cwd=tmp_path)
    TIMINGS["study: ghost_batch here"] = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    t0 = time.monotonic()
    s = study("ghost_batch", "scale=quick", f"out={on_slurm}", *SLURM_ARGS, "slurm.array_parallelism=2",
              cwd=tmp_path)
    TIMINGS["study: ghost_batch on SLURM"] = time.monotonic() - t0
    assert s.returncode == 0, s.stdout[-3000:] + s.stderr[-3000:]

    def verdicts(out):
        claims = json.loads((out / "summary" / "summary.json").read_text())["claims"]
        return [(c["study"], c["name"], c["verdict"], c.get("look"), c["n"]) for c in claims]

    assert verdicts(on_slurm) == verdicts(local)
    here, there = runs(local), runs(on_slurm)
    assert here.keys() == there.keys() and len(here) >= 15
    assert {k: v["test_acc"] for k, v in there.items()} == {k: v["test_acc"] for k, v in here.items()}
    rounds = sorted(p.name for p in (on_slurm / "ghost_batch").glob("r*"))
    made = arrays(on_slurm)
    assert [f"r{a['round']}" for a in made] == rounds and submissions(on_slurm) == len(rounds)
    for a in made:
        rows = [row.split("|") for row in slurm("sacct", "-X", "-n", "-P", "-j", a["id"], "-o",
                                                "JobID,State").splitlines() if row.strip()]
        assert sorted(job for job, _ in rows) == sorted(a["jobs"]), (a, rows)
        assert {state for _, state in rows} == {"COMPLETED"}, rows
        assert sorted(a["tasks"]) == sorted(str(p.relative_to(on_slurm)) for p in
                                            (on_slurm / "ghost_batch" / f"r{a['round']}").iterdir() if p.is_dir())
