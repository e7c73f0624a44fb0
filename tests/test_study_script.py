"""scripts/study.sh, the sweep step scripts/reproduce.sh and scripts/headline_seeds.sh share, against its
documented contract (its header): a study runs once and is timed; under RESUME=1 a timed study is skipped
and one cut short (its folder there, its time not) continues with resume=true, unless its overrides
changed (then it starts over, moved aside); ONLY limits the studies.
Run by bash with a stand-in interpreter that records the command it is given, not by training."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sweep(tmp_path: Path, calls: str, env: str = "") -> list[str]:
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {tmp_path / "calls"}\n')
    fake.chmod(0o755)
    script = f"set -euo pipefail; PY={fake} OUT={tmp_path / 'out'}; mkdir -p $OUT; . scripts/study.sh; {env} {calls}"
    subprocess.run(["bash", "-c", script], cwd=REPO, check=True, capture_output=True, text=True)
    got = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    (tmp_path / "calls").unlink(missing_ok=True)
    return got


def test_a_study_runs_once_then_resume_skips_it_and_continues_one_cut_short(tmp_path):
    out = tmp_path / "out"
    assert sweep(tmp_path, "sweep a x=1") == [f"-m normbench train -m x=1 hydra.sweep.dir={out}/a"]
    assert (out / "timing.txt").read_text().startswith("a: ")
    assert sweep(tmp_path, "RESUME=1 sweep a x=1") == []  # timed: done
    (out / "b").mkdir()
    (out / "b" / ".overrides").write_text("y=2\n")  # cut short: its folder and overrides, no time
    assert sweep(tmp_path, "RESUME=1 sweep b y=2") == [f"-m normbench train -m y=2 resume=true hydra.sweep.dir={out}/b"]
    assert "b: " in (out / "timing.txt").read_text() and "(continued" in (out / "timing.txt").read_text()
    (out / "c").mkdir()
    (out / "c" / ".overrides").write_text("seeds=[0,1]\n")  # cut short under other overrides: starts over
    (out / "c" / "run").mkdir()
    assert sweep(tmp_path, "RESUME=1 sweep c seeds=[0,1,2]") == [f"-m normbench train -m seeds=[0,1,2] hydra.sweep.dir={out}/c"]
    assert not (out / "c" / "run").exists() and [p.name[:2] for p in (tmp_path / "out.interrupted").iterdir()] == ["c."]
    assert sweep(tmp_path, "ONLY='c d' sweep e z=3") == []
    assert sweep(tmp_path, "ONLY='c d' sweep d z=3") == [f"-m normbench train -m z=3 hydra.sweep.dir={out}/d"]
