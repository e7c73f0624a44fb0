"""Bench section `headline`: the ten-seed headline study's cells, the code at a baseline commit against this
one, side by side: how much faster this checkout runs the headline end to end than the code the
headline's speed target is set against (`BASELINE`; the target and its measurements: docs/performance.md).

The headline (the small-batch regime's claims at ten seeds, run in the ghost_batch study) trains the MLP at
SGD batch 64 in these cells, every one a pack of seeds x lrs with each seed on its own split
(`data.split=per_seed`). Here each cell is one real `normbench train` process, at a smaller size (5 seeds,
2 lrs, 1 epoch of a 10k subset; `--quick`: 2 seeds, 300 images), run once from a copy of the baseline
commit (`git archive`, on PYTHONPATH) and once from this checkout, the two alternated and their order
flipped every round. Per side it reports the processes' wall time and, from the runs' results.json
(summarize's cost rule: a pack counts once), the seconds of training and of evaluation; the ratio is
baseline / this. The per-member test accuracies of the two sides are compared (the same seeds, data and
lrs; packing members that the baseline ran one seed at a time reorders float32 sums, so they may differ
in the last bits, and a test prediction near a tie can flip).

    normbench bench --sections headline --rounds 2            # minutes a round
    normbench bench --sections headline --quick               # a smoke test
    NORMBENCH_BENCH_BASELINE=<sha> normbench bench --sections headline   # another baseline

It needs a git checkout of normbench that holds the baseline commit (an installed package has none: the
section then says so and times nothing).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from normbench.bench import markdown_table

# The code the headline's end-to-end speed target (2x) is measured against
BASELINE = os.environ.get("NORMBENCH_BENCH_BASELINE", "f6bd784")
# scripts/headline_seeds.sh's cells at f6bd784 (its widening jobs are more of the same cells at other lrs)
CELLS = {
    "bn K=2": ["norm=bn", "norm.ghost_batch=2"],
    "brn K=2": ["norm=brn", "norm.ghost_batch=2"],
    "bn K=64": ["norm=bn", "norm.ghost_batch=64"],
    "brn ablation K=2": ["norm=brn", "norm.r_max=1", "norm.d_max=0", "norm.ghost_batch=2"],
    "gn": ["norm=gn", "norm.ghost_batch=null"],
    "brn window K=2": ["norm=brn", "norm.ghost_batch=2", "norm.momentum=0.01"],
    "bn eps 0.1 K=2": ["norm=bn", "norm.ghost_batch=2", "norm.eps=0.1"],
}
QUICK_CELLS = ("bn K=2", "gn")


def checkout(rev: str) -> Path | None:
    """The git checkout this normbench runs from, if it holds commit `rev`; else None (an installed
    package, or a shallow clone)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    found = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True)
    return root if found.returncode == 0 else None


def baseline_tree(root: Path, rev: str, into: Path) -> Path:
    """The baseline commit's files (`git archive`), without a git worktree to clean up."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def command(cell: list[str], args, out: Path) -> list[str]:
    size = (["data.subset=300", "data.val_size=100", "pack.seeds=[0,1]", "max_steps=5"] if args.quick else
            ["data.subset=10000", "data.val_size=2000", "pack.seeds=[0,1,2,3,4]"])
    return [sys.executable, "-m", "normbench", "train", "experiment=ghost_batch", *cell, "epochs=1",
            "pack.lrs=[0.025,0.05]", "data.split=per_seed", *size, "threads=1", "progress=false",
            "tensorboard=false", f"data.root={Path(args.data_root).resolve()}", "data.download=false", "device=cpu",
            f"hydra.run.dir={out}"]


def timed(tree: Path, cell: list[str], args, out: Path) -> dict:
    """One cell from `tree`'s code: the process's wall time, its runs' training and evaluation seconds, and
    each member's test accuracy by (seed, lr)."""
    from normbench.summary import discover

    env = {**os.environ, "PYTHONPATH": str(tree), "HYDRA_FULL_ERROR": "1"}
    started = time.perf_counter()
    proc = subprocess.run(command(cell, args, out), env=env, cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the cell {' '.join(cell)} failed from {tree}:\n{proc.stderr[-2000:]}")
    runs = discover.find_runs(out)
    costs = discover.costs(runs)
    if not costs:
        raise RuntimeError(f"the cell {' '.join(cell)} completed no run from {tree} (see {out})")
    cost = next(iter(costs.values()))
    acc = {(r.config.get("seed"), r.config.get("lr")): r.results.get("test_acc") for r in runs}
    return {"wall_s": wall, "train_s": cost["train_s"], "eval_s": cost["eval_s"],
            "computations": cost["computations"], "acc": acc}


def run(args, device) -> tuple[dict, str]:
    root = checkout(BASELINE)
    if root is None:
        why = f"needs a git checkout of normbench that holds commit {BASELINE}"
        return {"skipped": why}, f"### study\n\nSkipped: {why}."
    cells = {k: v for k, v in CELLS.items() if not args.quick or k in QUICK_CELLS}
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"baseline": baseline_tree(root, BASELINE, Path(tmp) / "baseline"), "this": root}
        totals = {side: [] for side in trees}  # per round: wall, train, eval summed over the cells
        comps, acc = {side: 0 for side in trees}, {side: {} for side in trees}
        for r in range(rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            sums = {side: [0.0, 0.0, 0.0] for side in trees}
            for index, (name, cell) in enumerate(cells.items()):
                for side in order:
                    got = timed(trees[side], cell, args, Path(tmp) / f"r{r}-{side}-{index}")
                    sums[side] = [a + b for a, b in zip(sums[side], (got["wall_s"], got["train_s"], got["eval_s"]))]
                    comps[side] += got["computations"] if r == 0 else 0
                    acc[side].update({(name, *k): v for k, v in got["acc"].items()})
                    print(f"  study: round {r + 1}/{rounds} {name} {side}: {got['wall_s']:.1f} s", flush=True)
            for side in trees:
                totals[side].append(sums[side])
    keys = sorted((k for k in set(acc["baseline"]) & set(acc["this"])
                   if None not in (acc["baseline"][k], acc["this"][k])), key=str)
    diffs = [abs(acc["baseline"][k] - acc["this"][k]) for k in keys]
    rows = {"baseline": BASELINE, "cells": list(cells), "rounds": rounds, "totals": totals,
            "members_compared": len(keys), "members_equal": sum(d == 0 for d in diffs),
            "max_test_acc_diff": max(diffs, default=None)}
    table = []
    for part, i in (("wall (processes)", 0), ("training", 1), ("evaluation", 2)):
        old = statistics.median(t[i] for t in totals["baseline"])
        new = statistics.median(t[i] for t in totals["this"])
        ratios = [o[i] / n[i] for o, n in zip(totals["baseline"], totals["this"]) if n[i]]
        rows[part] = {"baseline_s": old, "this_s": new, "ratios": ratios}
        spread = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
        table.append([part, f"{old:.1f}", f"{new:.1f}",
                      f"{statistics.median(ratios):.2f}x{spread}" if ratios else "-"])
    text = (f"### study: the headline's cells, git {BASELINE} vs this checkout\n\n"
            f"{len(cells)} cells ({', '.join(cells)}), each one `normbench train` of "
            f"{'2 seeds x 2 lrs, 5 steps' if args.quick else '5 seeds x 2 lrs, 1 epoch of a 10k subset'}; "
            f"median seconds over {rounds} round(s), the sides alternated. Computations: baseline "
            f"{comps['baseline']}, this {comps['this']}.\n\n"
            + markdown_table(["part", f"{BASELINE} s", "this s", "ratio (baseline / this)"], table)
            + f"\n\nTest accuracy of the {len(keys)} members both sides ran: {rows['members_equal']} equal, "
            f"largest difference {100 * (rows['max_test_acc_diff'] or 0):.2f} points.")
    return rows, text
