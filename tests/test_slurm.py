"""The cluster path on a real SLURM: scripts/slurm_local.sh starts a one-node cluster with accounting
(slurmdbd + MariaDB) on this machine, and the shipped `hydra/launcher=slurm` preset runs a sweep on it,
loses a task to SIGKILL, and resumes it (docs/cluster.md).

    python -m pytest -m slurm        # as root (the daemons switch users); about a minute

Needs root and Debian's slurm-wlm, slurmdbd, munge and mariadb-server (the script installs them when
missing); skipped only where the cluster cannot be started at all (not root, or no apt-get to install).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, normbench_cli, write_tiny_fashion_mnist

SCRIPT = REPO / "scripts" / "slurm_local.sh"
STATE = Path(os.environ.get("NORMBENCH_SLURM_DIR", "/tmp/normbench-slurm"))
ENV = {"SLURM_CONF": str(STATE / "etc" / "slurm.conf")}
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]
TIMINGS: dict[str, float] = {}  # printed at the end of the module (pytest -s shows them)


def _installed() -> bool:
    return all(shutil.which(b) or Path("/usr/sbin", b).exists() for b in ("slurmctld", "slurmd", "slurmdbd",
                                                                          "munged", "mariadbd"))


def slurm(*args: str) -> str:
    """Run a SLURM client command against the test cluster; its stdout."""
    return subprocess.run(args, env={**os.environ, **ENV}, capture_output=True, text=True, check=True,
                          timeout=30).stdout


def wait_queue_empty(limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while slurm("squeue", "-h").strip():
        assert time.monotonic() < deadline, f"jobs still queued after {limit_s} s:\n{slurm('squeue')}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster():
    """The one-node cluster, started by the script (and stopped after, unless it was already up)."""
    if os.geteuid() != 0:
        pytest.skip("starting SLURM's daemons needs root (run as root, or see docs/cluster.md)")
    if not _installed() and not shutil.which("apt-get"):
        pytest.skip("slurm-wlm/slurmdbd/munge/mariadb-server are not installed and there is no apt-get")
    was_up = subprocess.run([str(SCRIPT), "status"], capture_output=True, check=False).returncode == 0
    t0 = time.monotonic()
    r = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=600, check=False)
    TIMINGS["cluster start"] = time.monotonic() - t0
    assert r.returncode == 0, f"scripts/slurm_local.sh start failed:\n{r.stdout}\n{r.stderr}"
    yield
    if not was_up:
        t0 = time.monotonic()
        r = subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True, timeout=300, check=False)
        TIMINGS["cluster stop"] = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
    print("\nslurm timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in TIMINGS.items()), file=sys.stderr)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    # 1100 training images: 1000 after the 100 held out for validation (an epoch of the CNN below is
    # long enough to kill a run between its checkpoints).
    return write_tiny_fashion_mnist(tmp_path_factory.mktemp("slurm-data"), n_train=1100)


def sweep_args(data_root: Path, sweep: Path) -> list[str]:
    """2 norms x 2 seeds on the shipped preset, one CPU and 1 GB each, so the 2-CPU node runs two at once."""
    return ["hydra/launcher=slurm", "norm=bn,ln", "seed=0,1", f"data.root={data_root}", "data.val_size=100",
            "data.download=false", "progress=false", "tensorboard=false", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=1", f"hydra.sweep.dir={sweep}"]


def results(sweep: Path) -> dict[str, dict]:
    """Each run directory's name -> its results.json."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))}


def array_tasks(sweep: Path, expected: int = 4) -> dict[str, tuple[str, int, int]]:
    """SLURM's record of the sweep's array tasks (sacct): job id -> (state, start, end) in epoch seconds.
    The array's id is the name of the folder submitit writes its sbatch script in. Waits (up to 30 s) until
    slurmdbd holds a finished row for every one of the `expected` tasks: a task it has not recorded yet has
    no row at all, and one whose end has not reached it reads Unknown."""
    (array_id,) = {p.parent.name for p in (sweep / ".submitit").glob("*/*_submission.sh")}
    deadline = time.monotonic() + 30
    while True:  # a task's end reaches slurmdbd shortly after it leaves the queue
        rows = [row for row in slurm("sacct", "-X", "-n", "-P", "-j", array_id, "-o",
                                     "JobID,State,Start,End").splitlines() if row.strip()]  # "CANCELLED by 0"
        if (len(rows) >= expected and all("Unknown" not in row for row in rows)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    out = {}
    for row in rows:
        job, state, start, end = row.split("|")
        out[job] = (state.split()[0], _epoch_s(start), _epoch_s(end))
    return out


def _epoch_s(sacct_time: str) -> int:
    return int(time.mktime(time.strptime(sacct_time, "%Y-%m-%dT%H:%M:%S")))


def test_sweep_runs_on_slurm_and_summarizes(cluster, data_root, tmp_path):
    """Reference: SLURM's accounting (sacct) and each run's results.json. Four runs become the four tasks
    of one job array and all complete; with cpus_per_task=1 on a 2-CPU node two run at once; each run's
    torch uses the one thread the preset's OMP_NUM_THREADS line gives it (no threads= here); and
    `normbench summarize` reads the sweep like a local one."""
    sweep = tmp_path / "sweep"
    t0 = time.monotonic()
    r = normbench_cli("train", "-m", *sweep_args(data_root, sweep), "max_steps=10", "model.hidden=16",
                      cwd=tmp_path, env=ENV, timeout=240)
    TIMINGS["sweep of 4 (10 steps each)"] = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    wait_queue_empty()  # the sweep returns once it has every result; SLURM may still be ending the steps
    runs = results(sweep)
    assert len(runs) == 4
    assert {(res["config"]["norm"]["name"], res["config"]["seed"]) for res in runs.values()} == {
        ("bn", 0), ("bn", 1), ("ln", 0), ("ln", 1)}
    for name, res in runs.items():
        assert res["status"] == "completed", (name, res.get("error"))
        assert 0.0 <= res["test_acc"] <= 1.0 and res["steps"] == 10
        assert res["torch_threads"] == 1
    tasks = array_tasks(sweep)
    assert sorted(s for s, _, _ in tasks.values()) == ["COMPLETED"] * 4, tasks
    most_at_once = max(sum(s <= t < e for _, s, e in tasks.values()) for _, t, _ in tasks.values())
    assert most_at_once == 2, tasks

    s = normbench_cli("summarize", str(sweep), "--no-plots", cwd=tmp_path)
    assert s.returncode == 0, s.stderr
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["runs"] == {"completed": 4} and summary["problems"] == []


def _kill_task(array_task: str) -> int:
    """SIGKILL the training process of one array task (as the kernel's OOM killer would): the step-0
    process that `scontrol listpids` names for the task's own job id. Returns its pid."""
    raw = {i: a for i, a in (line.split() for line in slurm("squeue", "-h", "-o", "%i %A").splitlines())}
    pids = [int(row.split()[0]) for row in slurm("scontrol", "listpids", raw[array_task]).splitlines()[1:]
            if row.split()[2] == "0"]
    assert pids, f"no step-0 process for {array_task}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids[0]


@pytest.fixture(scope="module")
def killed_sweep(cluster, data_root, tmp_path_factory):
    """A sweep whose run 0 is SIGKILLed after its first checkpoint: (sweep dir, args, the sweep command's
    result, seconds it took, the killed run's checkpoint as it was at the kill)."""
    cwd = tmp_path_factory.mktemp("killed")
    sweep = cwd / "sweep"
    # A small CNN for 8 epochs: a checkpoint after each, and epochs long enough to kill run 0 between two.
    args = [*sweep_args(data_root, sweep), "threads=1", "model=cnn", "model.channels=[8,16]", "model.hidden=32",
            "epochs=8"]
    env = {**os.environ, "PYTHONPATH": str(REPO), **ENV}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "normbench", "train", "-m", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not list(sweep.glob("*,job0/checkpoint.pt")):
            assert proc.poll() is None and time.monotonic() - t0 < 180, "run 0 never wrote a checkpoint"
            time.sleep(0.05)
        (array_id,) = {p.parent.name for p in (sweep / ".submitit").glob("*/*_submission.sh")}
        _kill_task(f"{array_id}_0")
        killed_at = time.monotonic() - t0
        (run0,) = sweep.glob("*,job0")
        at_kill = torch.load(run0 / "checkpoint.pt", map_location="cpu", weights_only=True)
        out, err = proc.communicate(timeout=240)
        TIMINGS["returned at (epoch s)"] = returned = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - t0
    TIMINGS["SIGKILL sent, after"] = killed_at
    TIMINGS["sweep with a killed task returns, after"] = took
    t1 = time.monotonic()
    wait_queue_empty()
    TIMINGS["remaining tasks done, after"] = took + time.monotonic() - t1
    return sweep, args, subprocess.CompletedProcess(proc.args, proc.returncode, out, err), took, at_kill, returned


def test_killed_task_ends_the_sweep_as_failed(killed_sweep, tmp_path):
    """Reference: SLURM's accounting (sacct says FAILED for the killed task) and the runner's contract
    (normbench/runner.py writes results.json as failed/unfinished before training, so a process killed
    with SIGKILL leaves that). The sweep command returns within a bounded time, in one line that says
    how to continue, the three other runs complete, and summarize lists the killed run as a problem."""
    sweep, _, r, took, at_kill, returned = killed_sweep
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("normbench: error:")]
    assert "task 0 (SLURM job" in line and "state: FAILED" in line and "resume=true" in line
    assert f"hydra.sweep.dir={sweep}" in line
    assert took < 240
    # the sweep waited for every task (hydra-submitit alone returned at the first dead one, issue 24)
    assert max(end for _, _, end in array_tasks(sweep).values()) <= returned + 1
    assert 1 <= at_kill["loop"]["epochs_done"] < 8  # killed mid-run, after a checkpoint

    runs = results(sweep)
    (killed,) = [name for name in runs if name.endswith(",job0")]
    assert runs[killed]["status"] == "failed" and runs[killed]["error"].startswith("unfinished")
    assert sorted(res["status"] for name, res in runs.items() if name != killed) == ["completed"] * 3
    states = {job.rsplit("_", 1)[1]: state for job, (state, _, _) in array_tasks(sweep).items()}
    assert states == {"0": "FAILED", "1": "COMPLETED", "2": "COMPLETED", "3": "COMPLETED"}

    s = normbench_cli("summarize", str(sweep), "--no-plots", cwd=tmp_path)
    assert s.returncode == 0, s.stderr
    assert killed in s.stdout + s.stderr or killed in (sweep / "summary.md").read_text()
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["runs"] == {"completed": 3, "failed": 1}
    (problem,) = summary["problems"]
    assert Path(problem["path"]).name == killed and problem["status"] == "failed"
    assert "unfinished" in problem["note"]


def test_resume_skips_finished_runs_and_continues_the_killed_one(killed_sweep, tmp_path):
    """Reference: docs/reliability.md's resume contract. Relaunched with resume=true on the same
    hydra.sweep.dir, the three finished runs are left as they were (results.json byte for byte; the
    runner says "already finished" in their SLURM logs) and the killed run continues from checkpoint.pt:
    its first epochs are the checkpoint's, timings included (a run started over would have measured new
    ones), and it completes all 8."""
    sweep, args, _, _, at_kill, _ = killed_sweep
    before = {p.parent.name: p.read_bytes() for p in sweep.glob("*/results.json")}
    t0 = time.monotonic()
    r = normbench_cli("train", "-m", *args, "resume=true", cwd=tmp_path, env=ENV, timeout=240)
    TIMINGS["resumed sweep"] = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    wait_queue_empty()

    runs = results(sweep)
    (killed,) = [name for name in runs if name.endswith(",job0")]
    for name, blob in before.items():
        if name != killed:
            assert (sweep / name / "results.json").read_bytes() == blob, name
    logs = [p.read_text() for p in sweep.glob(".submitit/*/*_log.err")]
    assert sum("already finished (completed); nothing to resume" in log for log in logs) == 3
    res = runs[killed]
    assert res["status"] == "completed" and res["epochs_done"] == 8 and len(res["history"]) == 8
    k = at_kill["loop"]["epochs_done"]
    assert res["history"][:k] == at_kill["members"][0]["history"]
