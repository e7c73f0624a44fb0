"""The runs of a sweep, as summarize reads them: every run directory under a path, or in a runs file, with
its status, and the numbers each completed run reports.

    runs = find_runs(Path("outputs/multirun/2025-01-01/12-00-00"))
    for metric, column, value in measurements(runs[0]): ...
    save_runs(runs, root, Path("sweep.jsonl.gz"))   # the same runs as one file: find_runs reads it back

A runs file (`*.jsonl.gz`, gzip'd JSON Lines) holds a sweep's runs, one a line: {"path": the run's folder
relative to the sweep, "overrides": the command line Hydra recorded for it, "results": its results.json}
("unreadable": why, in place of "results", for a results.json that could not be read; neither for a run
without one). Its runs are at `<file>/<path>`: the file stands for the sweep folder it was written from, so
a summary of it is the summary of that folder. A folder's runs files are read with its run directories (the
record keeps each study's runs this way, docs/results/<study>/runs.jsonl.gz).

Failed, diverged, incomplete and unreadable run directories are runs too (with a note), never fatal.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path, PurePosixPath

from normbench.config import Split, flatten
from normbench.errors import UserError
from normbench.results import PACK, RESULTS, atomic_write_bytes, problem, read_results
from normbench.summary.types import METRICS, Run

RUNS_FILE = ".jsonl.gz"  # how a runs file's name ends: how a folder's are found
INCOMPLETE = "no results.json (still running, or killed)"
NOT_RUNS = "give a file `normbench summarize SWEEP --save-runs FILE.jsonl.gz` wrote, or the sweep's folder"


def _overrides(run_dir: Path) -> list[str]:
    """The command line Hydra recorded for the run (.hydra/overrides.yaml), [] when there is none."""
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    from normbench.userfiles import load_yaml

    try:
        found = load_yaml(path, "overrides") or []
    except UserError:
        return []
    return found if isinstance(found, list) and all(isinstance(o, str) for o in found) else []


def find_runs(root: Path) -> list[Run]:
    """Every run under `root`, in the order of their paths: a runs file's runs (`root` itself being one, or
    each under the folder `root`), and the run directories under the folder (_run_dirs)."""
    root = Path(root)
    if root.is_file():
        return read_runs_file(root)
    runs = _run_dirs(root) + [r for f in sorted(root.rglob(f"*{RUNS_FILE}")) for r in read_runs_file(f)]
    return sorted(runs, key=lambda r: r.path)


def _run_dirs(root: Path) -> list[Run]:
    """Every run directory under `root`: those with a results.json, and those Hydra created (a .hydra/
    folder) that have none yet (still running, or killed). A pack's folder is not a run (its members are):
    one with a pack.json, or a Hydra folder with runs inside it (a pack kept without its pack.json)."""
    finished = {p.parent for p in root.rglob(RESULTS)}
    hydra = {p.parent for p in root.rglob(".hydra") if p.is_dir()}
    packs = {d for d in hydra | finished if (d / PACK).exists()} | {r.parent for r in finished if r.parent in hydra}
    runs = []
    for d in sorted(finished | hydra):
        if d in packs and d not in finished:
            continue
        if not (d / RESULTS).exists():
            runs.append(Run(d, "incomplete", note=INCOMPLETE, overrides=_overrides(d)))
            continue
        try:
            res = read_results(d / RESULTS)
        except ValueError as e:
            runs.append(Run(d, "unreadable", note=str(e)))
            continue
        pack_dir = d.parent if d.parent in packs else None  # a pack's member: the pack's command line
        runs.append(_run(d, res, _overrides(pack_dir or d)))
    return runs


def _run(path: Path, res: dict, overrides: list[str]) -> Run:
    """The run whose results.json (read, with status and config) is `res`: its status and why."""
    config = flatten(res["config"]) if isinstance(res["config"], dict) else {}
    if not config:  # nothing that tells the run apart: no table or claim could place it
        return Run(path, "unreadable", note=f"{path / RESULTS}: its config holds no setting")
    run = Run(path, res["status"], config, res, overrides=overrides)
    if run.status == "failed":
        run.note = res.get("error") or "failed"
    elif run.status == "diverged":
        run.note = f"non-finite loss at step {res.get('diverged_step')}"
    elif not isinstance(res.get("test_acc"), (int, float)) or math.isnan(res["test_acc"]):
        run.status, run.note = "incomplete", "completed without a test_acc"
    return run


def distinct(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """(the runs each counted once, the duplicates dropped): a run is its study and its resolved config (seed
    and budget included), wherever it lies, so a runs file with every line twice, or a sweep copied beside
    itself, pools nothing twice. The first in path order is kept; each duplicate is marked with the run it
    repeats (status "duplicate")."""
    def key(r: Run) -> tuple[str, str]:
        return r.study, json.dumps(r.results["config"], sort_keys=True, default=str)

    rank = {"completed": 0, "diverged": 1, "failed": 2}  # a completed retry stands for its failed attempt
    best: dict[tuple[str, str], Run] = {}
    for r in runs:
        if r.results and r.status in rank and rank[r.status] < rank[best.setdefault(key(r), r).status]:
            best[key(r)] = r
    kept, dropped = [], []
    for r in runs:
        if not r.results or r.status not in rank or best[key(r)] is r:  # incomplete, unreadable: nothing to pool
            kept.append(r)
        else:
            r.status, r.note = "duplicate", f"the same run (config and seed) as {best[key(r)].path}: counted once"
            dropped.append(r)
    return kept, dropped


def folder(root: Path) -> Path:
    """Where a summary of `root` is written and its grids' next values are trained: `root` itself, or the
    folder a runs file is in."""
    return Path(root) if not Path(root).is_file() else Path(root).parent


def read_runs_file(path: Path) -> list[Run]:
    """The runs a runs file holds, each at `path / its folder`; raises UserError for a file that is not one
    (not gzip'd JSON Lines, or a line that is not a run)."""
    runs = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    runs.append(_line_run(path, n, json.loads(line)))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a runs file ({' '.join(str(e).split())[:200]})", NOT_RUNS) from None
    except RecursionError:
        raise UserError(f"{path} is not a runs file (JSON nested too deeply)", NOT_RUNS) from None
    return runs


def _line_run(path: Path, n: int, entry) -> Run:
    """The run of line `n` of the runs file `path` (save_runs' format, the module's docstring)."""
    rel = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(rel, str) or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
        raise UserError(f"{path}, line {n}: not a run (a JSON object with its folder as a relative \"path\")",
                        NOT_RUNS)
    where, overrides = path / rel, entry.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        return Run(where, "unreadable", note=f"{where}: overrides is not a list of key=value strings")
    if "unreadable" in entry:
        return Run(where, "unreadable", note=str(entry["unreadable"])[:400])
    res = entry.get("results")
    if res is None:
        return Run(where, "incomplete", note=INCOMPLETE, overrides=overrides)
    if why := problem(res):  # read_results' check of a results.json
        return Run(where, "unreadable", note=f"{where / RESULTS}: {why}")
    return _run(where, res, overrides)


def check_runs_file(root: Path, path: Path) -> None:
    """Raise UserError where `path` cannot hold the runs of `root`: a name a folder's runs files do not have,
    or a file inside the folder `root` (its next summary would read each run twice: from its folder and from
    the file)."""
    root, path = Path(root), Path(path)
    if not path.name.endswith(RUNS_FILE):
        raise UserError(f"--save-runs {path}: a runs file's name ends in {RUNS_FILE}",
                        f"name it e.g. {path.name.split('.')[0] or 'sweep'}{RUNS_FILE}")
    if root.is_dir() and path.resolve().is_relative_to(root.resolve()):
        raise UserError(f"--save-runs {path}: inside {root}, whose next summary would read each run twice",
                        f"write it outside the sweep, e.g. --save-runs {root.resolve().name}{RUNS_FILE}")


def save_runs(runs: list[Run], root: Path, path: Path) -> Path:
    """Write `runs` (found under `root`) as the runs file `path`, in their order (the module's docstring
    has its format); find_runs(path) reads them back as they were."""
    check_runs_file(root, path)
    lines = []
    for r in (r for r in runs if r.status != "duplicate"):  # each run once
        entry: dict = {"path": r.path.relative_to(root).as_posix(), "overrides": r.overrides}
        if r.status == "unreadable":
            entry["unreadable"] = r.note
        elif r.results:
            entry["results"] = r.results
        lines.append(json.dumps(entry, separators=(",", ":")) + "\n")
    data = gzip.compress("".join(lines).encode(), compresslevel=9, mtime=0)  # mtime 0: the same runs, the same bytes
    atomic_write_bytes(path, lambda f: f.write(data))
    return path


def measurements(run: Run) -> list[tuple[str, str, float]]:
    """(metric, column, accuracy) for every number a completed run reports."""
    res, c = run.results, run.config
    if not run.varlen:
        out = [(m, str(c.get("batch_size")), res.get(m)) for m in METRICS]
    else:
        pad = f"pad×{c.get('varlen.heavy_pad', 2):g}"
        out = [("test_acc", length, acc) for length, acc in (res.get("test_acc_by_length") or {}).items()]
        out += [("test_acc", "mixed", res.get("test_acc_mixed")), ("test_acc", pad, res.get("test_acc_heavy_pad")),
                ("test_acc_train_mode", "original", res.get("test_acc_train_mode")),  # the unresized test set
                ("test_acc_train_mode", "mixed", res.get("test_acc_mixed_train_mode")),
                ("test_acc_train_mode", pad, res.get("test_acc_heavy_pad_train_mode"))]
        out += [("test_acc_precise_bn", length, acc)  # re-estimated on training images stretched to each length
                for length, acc in (res.get("test_acc_by_length_precise_bn") or {}).items()]
        out += [("test_acc_precise_bn_past", length, acc)  # ... only the steps past the trained ones
                for length, acc in (res.get("test_acc_by_length_precise_bn_past") or {}).items()]
        out += [("test_acc_background", length, acc)  # background rows after the unchanged image
                for length, acc in (res.get("test_acc_by_length_background") or {}).items()]
    return [(m, a, float(v)) for m, a, v in out if isinstance(v, (int, float)) and not math.isnan(v)]


def costs(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Where each study's time went: per study, its runs and computations (a pack trains its members as
    one, and each member records the pack's shared seconds, so a pack counts once; a pack recorded before
    members with their own data packed together, without `computations` in its record, trained each seed's
    members as a computation of their own under data.split=per_seed), and the wall, training and
    evaluation seconds summed over computations; `other` is the rest (setup, data, writing)."""
    by_study: dict[str, dict[tuple, dict[str, float]]] = {}
    for r in runs:
        if r.status != "completed" or not isinstance(r.results.get("wall_s"), (int, float)):
            continue
        packed = r.results.get("packed")
        if isinstance(packed, dict) and packed.get("mode") == "packed":
            per_seed = ("computations" not in packed  # an older record: one computation per seed
                        and r.config.get("data.split") == Split.per_seed.value)  # config.split_seed's rule
            key = (str(packed.get("dir")), r.config.get("seed") if per_seed else None)
        else:
            key = (str(r.path), None)
        group = by_study.setdefault(r.table_study or "sweep", {}).setdefault(key, {"runs": 0})
        group["runs"] += 1
        for name in ("wall_s", "train_s", "eval_s"):
            value = r.results.get(name)
            if isinstance(value, (int, float)):
                group[name] = max(group.get(name, 0.0), float(value))
    for group in (g for groups in by_study.values() for g in groups.values()):
        # a run resumed before wall_s counted its earlier processes (state.FitResult.earlier_wall_s) records
        # only its last one's: its wall is at least the training and evaluation it records
        group["wall_s"] = max(group.get("wall_s", 0.0), group.get("train_s", 0.0) + group.get("eval_s", 0.0))
    out = {}
    for study, groups in sorted(by_study.items()):
        total = {name: sum(g.get(name, 0.0) for g in groups.values()) for name in ("wall_s", "train_s", "eval_s")}
        out[study] = {"runs": sum(g["runs"] for g in groups.values()), "computations": len(groups), **total,
                      "other_s": total["wall_s"] - total["train_s"] - total["eval_s"]}
    return out
