"""`normbench bench`: how fast the runner is, measured side by side in one process.

    normbench bench                      # all sections (minutes) -> outputs/bench/
    normbench bench --quick              # a smoke test of every section (seconds)
    normbench bench --sections loop,norms --rounds 7 --out /tmp/bench

Sections: `loop` (loop.fit vs a minimal hand-written loop), `norms` (from-scratch norms vs their
native twins and vs native BN), `cells` (recurrent-placement RNN cells vs the plain RNN with the norm
on its output), `sweep` (a sweep serial vs through Hydra's joblib launcher), `packed` (S packed members
vs S separate runs, normbench.pack), `lrs` (a pack's members at their own lrs vs all at one), `eval`
(evaluation's share of each shipped study's run at its budget, bench/eval_share.py), `subnormal` (whether
this processor pays for subnormal floats, and what flushing them saves, bench/subnormal.py), and, asked for by
name, `headline` (the headline study's cells, a baseline commit's code against this checkout, bench/headline.py). Variants are timed
in rounds whose order rotates, so a slow phase of a shared machine slows every variant alike; a ratio is
the median over rounds of the paired ratios, with their range. Writes bench.json and bench.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch

SECTIONS = ("loop", "norms", "cells", "sweep", "fixed", "packed", "lrs", "eval", "subnormal", "headline")
DEFAULT = SECTIONS[:-1]  # `headline` runs a baseline commit's code from a git checkout: asked for by name


def clocks() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all its threads): on a shared machine the CPU clock
    is the steadier of the two; background threads (a progress bar's refresh) count in it."""
    return time.perf_counter(), time.process_time()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def interleave(variants: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list]:
    """Call each variant once per round, starting each round one variant later, and collect what each
    call returns (its own measured time)."""
    keys = list(variants)
    out: dict[str, list] = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            out[k].append(variants[k]())
    return out


def paired_ratio(num: list[float], den: list[float]) -> dict[str, float]:
    """Median and range over rounds of num[i] / den[i]."""
    ratios = [a / b for a, b in zip(num, den)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def fmt_ratio(r: dict[str, float] | None) -> str:
    if r is None:
        return "-"
    if r["min"] == r["max"]:
        return f"{r['median']:.2f}"
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="normbench bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smallest sizes, one round: a smoke test")
    p.add_argument("--sections", default=",".join(DEFAULT),
                   help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but headline)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per comparison (default 9, quick 1)")
    p.add_argument("--seconds", type=float, default=None,
                   help="target seconds per timed call (default 0.15, quick 0.01)")
    p.add_argument("--compile", action="store_true",
                   help="also time torch.compile'd scratch norms and cells (compiling takes minutes on a CPU)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--data-root", default=os.environ.get("NORMBENCH_DATA", "./data"),
                   help="where FashionMNIST lives (also searched: /usr/share/datasets/fashion-mnist)")
    p.add_argument("--out", default="outputs/bench", help="directory for bench.json and bench.md")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}")
    args.rounds = args.rounds or (1 if args.quick else 9)
    args.seconds = args.seconds or (0.01 if args.quick else 0.15)
    return args


def main(argv: list[str] | None = None) -> int:
    from normbench.bench import eval_share, kernels, loop, headline, packed, subnormal, sweep
    from normbench.results import git_sha, versions
    from normbench.device import pick_device

    args = parse_args(list(argv or []))
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # a run's default (flush_denormal): the sections time what runs compute
    device = pick_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "normbench bench " + " ".join(argv or [])
    report: dict[str, Any] = {
        "command": command.strip(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": str(device), "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "rounds": args.rounds, "seconds_per_call": args.seconds, "quick": args.quick,
        "versions": versions(), "git_sha": git_sha(), "load_average_start": os.getloadavg(),
    }
    md = [f"Measured with `{report['command']}` on {device} ({report['threads']} torch thread(s), "
          f"{report['cpus']} CPUs, load average {report['load_average_start'][0]:.1f} at start), "
          f"torch {torch.__version__}, {args.rounds} interleaved round(s). Ratios: median over rounds "
          "(range in brackets)."]
    sections = {"loop": loop.run, "norms": kernels.run_norms, "cells": kernels.run_cells, "sweep": sweep.run,
                "fixed": lambda args, device: sweep.fixed_cost(args), "packed": packed.run,
                "lrs": packed.run_member_lrs, "eval": eval_share.run, "subnormal": subnormal.run, "headline": headline.run}
    for name in args.sections:
        started = time.perf_counter()
        rows, text = sections[name](args, device)
        report[name] = rows
        report[f"{name}_seconds"] = time.perf_counter() - started
        md.append(text)
        print(text + "\n", flush=True)
    report["load_average_end"] = os.getloadavg()
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "bench.md").write_text("\n\n".join(md) + "\n")
    print(f"wrote {out / 'bench.md'} and {out / 'bench.json'}")
    return 0
