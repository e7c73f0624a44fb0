"""Bench sections `sweep`, one small sweep run serially and through Hydra's joblib launcher, and `fixed`,
what a sweep's runs cost besides training and evaluating (`fixed_cost`).

Each variant is the real command in a subprocess, timed from start to exit (Python start-up, Hydra,
data loading per job and the launcher's worker processes included):

    normbench train -m norm=bn,ln,gn,none ... threads=2                                   # serial
    normbench train -m norm=bn,ln,gn,none ... threads=1                                   # serial
    normbench train -m norm=bn,ln,gn,none ... hydra/launcher=joblib hydra.launcher.n_jobs=2 threads=1

The fixed cost: a sweep of 12 runs of 150 steps, serially on one thread; per run, the process's wall
time minus the runs' training and evaluation seconds (results.json's train_s, eval_s), and each run's
own share from when Hydra started it to when the next run started (`fixed_cost`).
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
    # A few seconds of training per job: each job also loads the data and joblib's workers start Python
    # and torch, fixed costs of the same order that a long study amortizes and a bench must not hide.
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
            "train_s": sum(r["steps"] * r["config"]["batch_size"] / r["train_samples_per_s"] for r in results),
            "fit_s": sum(r["train_s"] for r in results), "eval_s": sum(r["eval_s"] for r in results)}


def fixed_cost(args) -> tuple[dict, str]:
    """Per-run cost outside training and evaluation in a serial sweep of 12 runs (module docstring): the
    sweep's own figure, (process wall - training - evaluation) / runs, and each run's, from when Hydra
    started it (its `.hydra/config.yaml`) to when the next one started, less its training and evaluation.
    The first run's carries what a process pays once, the last's the process's exit; the median of the
    others is what one more run costs."""
    steps, n_seeds = (20, 2) if args.quick else (150, 3)
    with tempfile.TemporaryDirectory() as tmp:
        sweep_dir = Path(tmp) / "fixed"
        cmd = [*sweep_command(args, sweep_dir, ["threads=1", f"seed={','.join(map(str, range(n_seeds)))}"])]
        cmd = [c if not c.startswith("max_steps=") else f"max_steps={steps}" for c in cmd]
        started = time.time()
        r = timed(cmd, sweep_dir)
        ended = started + r["wall_s"]
        runs = sorted(((json.loads((d / "results.json").read_text()), (d / ".hydra" / "config.yaml").stat().st_mtime)
                       for d in sweep_dir.iterdir() if (d / "results.json").exists()), key=lambda rt: rt[1])
    starts = [t for _, t in runs] + [ended]
    per_run = [starts[k + 1] - starts[k] - res["train_s"] - res["eval_s"] for k, (res, _) in enumerate(runs)]
    later = sorted(per_run[1:-1])  # the last run's share ends at the process's exit
    marginal = later[len(later) // 2] if later else float("nan")
    sweep_fixed = (r["wall_s"] - r["fit_s"] - r["eval_s"]) / r["jobs"]
    out = {"runs": r["jobs"], "wall_s": r["wall_s"], "train_s": r["fit_s"], "eval_s": r["eval_s"],
           "fixed_per_run_s": sweep_fixed, "each_run_fixed_s": per_run, "marginal_s": marginal,
           "before_first_run_s": starts[0] - started, "exit_s": per_run[-1]}
    text = (f"### A sweep's fixed cost per run\n\n`normbench train -m norm={NORMS if not args.quick else 'bn,none'} "
            f"seed=0..{n_seeds - 1} max_steps={steps} threads=1` (model=mlp, {r['jobs']} runs), serial. Per run: "
            f"(wall - training - evaluation) / runs = **{sweep_fixed:.3f} s** ({r['wall_s']:.1f} s wall, "
            f"{r['fit_s']:.1f} s training, {r['eval_s']:.1f} s evaluation). Of that, {starts[0] - started:.1f} s "
            f"pass before the first run starts (Python, Hydra, composing every job) and the first run carries "
            f"{per_run[0]:.2f} s (torch's import, torch._dynamo's at the first optimizer, the dataset's decode), "
            f"the last {per_run[-1]:.2f} s (it ends when the process exits); each run between costs a median "
            f"**{marginal:.3f} s** besides its training and evaluation (range {later[0]:.3f}-{later[-1]:.3f} s, "
            "from its start to the next run's).\n\n")
    print(f"sweep fixed cost: {sweep_fixed:.3f} s per run; {marginal:.3f} s per later run", flush=True)
    return out, text


def run(args, device):
    variants = {"serial, threads=1": ["threads=1"], "joblib n_jobs=2, threads=1": [*PARALLEL, "threads=1"],
                "serial, threads=2": ["threads=2"]}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # A whole sweep is long: one round, in this order. Two threads per job can run many times slower
        # than one where the cores are busy (threads waiting at every op for a core; docs/performance.md):
        # it is stopped at 3x.
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
