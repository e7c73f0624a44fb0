"""Bench section `sweep`: one small sweep run serially and through Hydra's joblib launcher.

Each variant is the real command in a subprocess, timed from start to exit (Python start-up, Hydra,
data loading per job and the launcher's worker processes included):

    normbench train -m norm=bn,ln,gn,none ... threads=2                                   # serial
    normbench train -m norm=bn,ln,gn,none ... threads=1                                   # serial
    normbench train -m norm=bn,ln,gn,none ... hydra/launcher=joblib hydra.launcher.n_jobs=2 threads=1
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from normbench.bench import interleave, markdown_table

NORMS = "bn,ln,gn,none"
PARALLEL = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def sweep_command(args, sweep_dir: Path, extra: list[str]) -> list[str]:
    size = ["max_steps=20", "data.subset=2000", "data.val_size=500"] if args.quick else ["max_steps=600"]
    norms = "bn,none" if args.quick else NORMS
    return [sys.executable, "-m", "normbench", "train", "-m", f"norm={norms}", "model=mlp", "batch_size=64",
            *size, f"data.root={args.data_root}", "data.download=false", "progress=false", "device=cpu",
            f"hydra.sweep.dir={sweep_dir}", *extra]


def timed(cmd: list[str], sweep_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    results = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/results.json"))]
    return {"wall_s": wall, "jobs": len(results),
            "train_s": sum(r["steps"] * r["config"]["batch_size"] / r["train_samples_per_s"] for r in results)}


def run(args, device):
    variants = {"serial, threads=2": ["threads=2"], "serial, threads=1": ["threads=1"],
                "joblib n_jobs=2, threads=1": [*PARALLEL, "threads=1"]}
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10_000))

        def call(extra):
            sweep_dir = Path(tmp) / f"sweep{next(counter)}"
            return timed(sweep_command(args, sweep_dir, extra), sweep_dir)

        # Whole sweeps are long, so fewer rounds than elsewhere.
        runs = interleave({k: (lambda e=e: call(e)) for k, e in variants.items()}, 1 if args.quick else 2)
    best_serial = min((k for k in variants if k.startswith("serial")), key=lambda k: min(r["wall_s"] for r in runs[k]))
    parallel = "joblib n_jobs=2, threads=1"
    walls = {k: [r["wall_s"] for r in v] for k, v in runs.items()}
    speedup = min(walls[best_serial]) / min(walls[parallel])
    out = {"command": " ".join(sweep_command(args, Path("<dir>"), ["<variant>"])[1:]), "variants": variants,
           "wall_s": walls, "train_s": {k: [r["train_s"] for r in v] for k, v in runs.items()},
           "jobs": runs[parallel][0]["jobs"], "best_serial": best_serial, "speedup": speedup}
    table = [[k, runs[k][0]["jobs"], " / ".join(f"{w:.1f}" for w in walls[k]),
              f"{min(walls[best_serial]) / min(walls[k]):.2f}"] for k in variants]
    text = ("### Sweep: serial vs Hydra's joblib launcher\n\n"
            f"`normbench train -m norm={NORMS if not args.quick else 'bn,none'} model=mlp ...` "
            "(see bench.json for the full command), wall seconds per round from start to exit; speed-up "
            f"against the best serial variant ({best_serial}), best round each.\n\n")
    text += markdown_table(["variant", "jobs", "wall s (per round)", "speed-up"], table)
    print(f"sweep speed-up (joblib 2 jobs vs {best_serial}): {speedup:.2f}x", flush=True)
    return out, text
