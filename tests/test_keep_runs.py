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
