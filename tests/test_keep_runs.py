"""scripts/keep_runs.py against its contract (its docstring): a finished run's results.json and the command
lines Hydra recorded for it are kept at their relative paths; checkpoints, events and runs that summarize
does not count as completed (normbench.summary.discover decides, for both) are not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from normbench.summary.discover import find_runs

REPO = Path(__file__).resolve().parents[1]


def test_keeps_finished_runs_and_their_commands_only(tmp_path):
    src, dest = tmp_path / "sweep", tmp_path / "kept"
    job = src / "bn,bs=2,job0"
    for name, res in [("lr=0.1,seed=0", {"status": "completed", "test_acc": 0.9}),
                      ("lr=0.1,seed=1", {"status": "failed"}),
                      ("lr=0.1,seed=2", {"status": "completed"})]:  # no test_acc: summarize counts it incomplete
        (job / name).mkdir(parents=True)
        (job / name / "results.json").write_text(json.dumps({**res, "config": {"norm": {"name": "bn"}}}))
        (job / name / "checkpoint.pt").write_bytes(b"x")
        (job / name / "events.out.tfevents.1").write_bytes(b"x")
    (job / ".hydra").mkdir()
    (job / ".hydra" / "overrides.yaml").write_text("- norm=bn\n")
    (job / ".hydra" / "hydra.yaml").write_text("{}\n")
    (job / "pack.json").write_text("{}\n")  # the three are one pack's members
    (src / "multirun.yaml").write_text("{}\n")
    (tmp_path / "multirun.yaml").write_text("{}\n")  # above SRC: not the sweep's
    out = subprocess.run([sys.executable, "scripts/keep_runs.py", str(src), str(dest)], cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == ["bn,bs=2,job0/.hydra/overrides.yaml", "bn,bs=2,job0/lr=0.1,seed=0/results.json",
                   "bn,bs=2,job0/pack.json", "multirun.yaml"]
    # what summarize finds there: the finished member, with its pack's command line, and no unfinished "run"
    # where the pack's folder is
    [run] = find_runs(dest)
    assert (run.path.name, run.status, run.overrides) == ("lr=0.1,seed=0", "completed", ["norm=bn"])
    assert "kept 1 finished runs" in out
    bad = subprocess.run([sys.executable, "scripts/keep_runs.py", str(tmp_path / "nope"), str(dest)], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "is not a directory" in bad.stderr


def test_a_study_folder_keeps_its_state_and_its_finished_jobs_whole(tmp_path):
    """Reference: the layout `normbench study` writes (study.json's done list names job folders,
    <study>/r<round>/<job>): the kept folder holds study.json, calibration.json and every file of each done
    job, a diverged member's results.json included (a look counts it), without checkpoints, events or logs;
    a job still training (not done) is left out whole, so a resumed study trains it from its start."""
    src, dest = tmp_path / "reproduce", tmp_path / "kept"
    (src / "ghost_batch" / "r1").mkdir(parents=True)
    (src / "study.json").write_text(json.dumps({"studies": ["ghost_batch"], "done": ["ghost_batch/r1/bn-0"]}))
    (src / "calibration.json").write_text("{}")
    for job in ("bn-0", "bn-1"):  # bn-1 was training when the sitting ended
        for member, status in (("lr=0.1,seed=0", "completed"), ("lr=0.1,seed=1", "diverged")):
            (src / "ghost_batch" / "r1" / job / member).mkdir(parents=True)
            (src / "ghost_batch" / "r1" / job / member / "results.json").write_text(json.dumps({"status": status}))
        (src / "ghost_batch" / "r1" / job / "checkpoint.pt").write_bytes(b"x")
        (src / "ghost_batch" / "r1" / job / "train.log").write_text("log")
        (src / "ghost_batch" / "r1" / job / "pack.json").write_text("{}")
        (src / "ghost_batch" / "r1" / f"{job}.log").write_text("$ normbench train ...")
    out = subprocess.run([sys.executable, "scripts/keep_runs.py", str(src), str(dest)], cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == ["calibration.json", "ghost_batch/r1/bn-0/lr=0.1,seed=0/results.json",
                   "ghost_batch/r1/bn-0/lr=0.1,seed=1/results.json", "ghost_batch/r1/bn-0/pack.json", "study.json"]
    assert f"kept 2 runs of the study {src} (its finished jobs" in out
