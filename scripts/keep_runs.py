"""Keep what `normbench summarize` reads from a study's finished runs, so it can be summarized again (tables,
claims, figures) after outputs/ is gone, or joined with runs of a later sitting:

    python scripts/keep_runs.py outputs/multirun/2026-12-05/10-00-00_123 runs/converged_b2

For each run under SRC that summarize counts as completed (a results.json with status "completed" and a
test_acc): that results.json, the command lines Hydra recorded (.hydra/overrides.yaml of its job,
multirun.yaml of its sweep) and, for a pack's member, the pack's pack.json (its members and how they
trained: packed or one after another), copied to the same relative paths under DEST. Checkpoints,
TensorBoard events and unfinished runs stay behind (an unfinished run is trained again, or resumed, where
its checkpoint still is).

A `normbench study` folder (one with a study.json) is kept whole enough to resume on another machine, so a
record can be trained across sittings on machines that do not outlive them:

    python scripts/keep_runs.py outputs/reproduce outputs/record-in-progress   # at the end of a sitting
    cp -r outputs/record-in-progress/. outputs/reproduce/                      # at the start of the next

study.json, calibration.json, and every file of the jobs study.json lists as done (a diverged member's
results.json too: the look counts it), without checkpoints, TensorBoard events or logs. A job still training
is left out whole, so the next sitting trains it again from its start (not in study.json's done list)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from normbench.results import PACK, RESULTS
from normbench.study.rounds import STATE
from normbench.summary.discover import find_runs
from normbench.train.guards import CHECKPOINT


def kept(src: Path) -> list[Path]:
    """The files to keep, relative to `src`: those of the runs summarize counts as completed (normbench.summary.discover,
    the discovery summarize itself uses, so the two cannot disagree on which runs are finished)."""
    out: set[Path] = set()
    for run in find_runs(src):
        if run.status != "completed":
            continue
        out.add((run.path / RESULTS).relative_to(src))
        for d in (run.path / RESULTS).parents:  # the job's recorded command, its pack's members, its sweep's
            if d == src.parent:
                break
            for extra in (d / ".hydra" / "overrides.yaml", d / PACK, d / "multirun.yaml"):
                if extra.is_file():
                    out.add(extra.relative_to(src))
    return sorted(out)


SKIPPED = (CHECKPOINT, "events.out.tfevents")  # and *.log


def kept_study(src: Path) -> list[Path]:
    """The files a `normbench study` folder needs to resume elsewhere, relative to `src`."""
    state = json.loads((src / STATE).read_text())
    out = [Path(name) for name in (STATE, "calibration.json") if (src / name).is_file()]
    for job in state["done"]:
        out += [f.relative_to(src) for f in sorted((src / job).rglob("*")) if f.is_file()
                and not f.name.startswith(SKIPPED) and f.suffix != ".log"]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    src, dest = map(Path, argv)
    if not src.is_dir():
        print(f"keep_runs: {src} is not a directory", file=sys.stderr)
        return 2
    study = (src / STATE).is_file()
    files = kept_study(src) if study else kept(src)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)
    runs = sum(f.name == "results.json" for f in files)
    print(f"kept {runs} runs of the study {src} (its finished jobs, study.json, calibrations) in {dest}" if study
          else f"kept {runs} finished runs of {src} in {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
