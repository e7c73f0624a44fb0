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

from normbench.bench import markdown_table

NORMS = "bn,ln,gn,none"
PARALLEL = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def sweep_command(args, sweep_dir: Path, extra: list[str]) -> list[str]:
    # ~4 s of training per job here: each job also loads the data (~1 s) and joblib's workers start
    # Python and torch (~4 s), costs a long study amortizes and a bench must not hide.
    size = ["max_steps=20", "data.subset=2000", "data.val_size=500"] if args.quick else ["max_steps=3000"]
    norms = "bn,none" if args.quick else NORMS
    return [sys.executable, "-m", "normbench", "train", "-m", f"norm={norms}", "model=mlp", "batch_size=64",
            *size, f"data.root={args.data_root}", "data.download=false", "progress=false", "device=cpu",
            f"hydra.sweep.dir={sweep_dir}", *extra]


def timed(cmd: list[str], sweep_dir: Path, timeout: float | None = None) -> dict:
    """Run one sweep; its wall time, and the jobs' own training seconds (from their results.json)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:  # the serial launcher runs its jobs in this one child: it is gone
        return {"wall_s": None, "stopped_after_s": timeout, "jobs": 0, "train_s": None}
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    results = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/results.json"))]
    return {"wall_s": wall, "jobs": len(results),
            "train_s": sum(r["steps"] * r["config"]["batch_size"] / r["train_samples_per_s"] for r in results)}


def run(args, device):
    variants = {"serial, threads=1": ["threads=1"], "joblib n_jobs=2, threads=1": [*PARALLEL, "threads=1"],
                "serial, threads=2": ["threads=2"]}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # A whole sweep is long: one round, in this order. Two threads per job on a loaded 2-core machine
        # ran 10x slower than one here (threads waiting at every op for a core); it is stopped at 3x.
        for i, (name, extra) in enumerate(variants.items()):
            limit = None if name != "serial, threads=2" else 3 * runs["serial, threads=1"]["wall_s"] + 10
            runs[name] = timed(sweep_command(args, Path(tmp) / f"sweep{i}", extra), Path(tmp) / f"sweep{i}", limit)
    walls = {k: r["wall_s"] for k, r in runs.items()}
    best_serial = min((k for k in variants if k.startswith("serial") and walls[k]), key=walls.get)
    parallel = "joblib n_jobs=2, threads=1"
    speedup = walls[best_serial] / walls[parallel]
    out = {"command": " ".join(sweep_command(args, Path("<dir>"), ["<variant>"])[1:]), "variants": variants,
           "runs": runs, "wall_s": walls, "train_s": {k: r["train_s"] for k, r in runs.items()},
           "jobs": runs[parallel]["jobs"], "best_serial": best_serial, "speedup": speedup,
           "load_average": os.getloadavg()}
    table = []
    for k, r in runs.items():
        if r["wall_s"] is None:
            stopped = r["stopped_after_s"]
            table.append([k, "-", f"stopped at {stopped:.0f}", "-", f"< {walls[best_serial] / stopped:.2f}"])
        else:
            speedup_k = walls[best_serial] / r["wall_s"]
            table.append([k, r["jobs"], f"{r['wall_s']:.1f}", f"{r['train_s']:.1f}", f"{speedup_k:.2f}"])
    text = ("### Sweep: serial vs Hydra's joblib launcher\n\n"
            f"`normbench train -m norm={NORMS if not args.quick else 'bn,none'} model=mlp ...` "
            "(the full command is in bench.json), timed from start to exit. Training s: the jobs' own "
            "training time, summed (it grows when jobs compete for cores). Speed-up against the best "
            f"serial variant ({best_serial}); load average after: {out['load_average'][0]:.1f}.\n\n")
    text += markdown_table(["variant", "jobs", "wall s", "training s (sum)", "speed-up"], table)
    print(f"sweep speed-up (joblib 2 jobs vs {best_serial}): {speedup:.2f}x", flush=True)
    return out, text
