"""The runs of a sweep, as summarize reads them: every run directory under a path, with its status, and
the numbers each completed run reports.

    runs = find_runs(Path("outputs/multirun/2025-01-01/12-00-00"))
    for metric, column, value in measurements(runs[0]): ...

Failed, diverged, incomplete and unreadable run directories are runs too (with a note), never fatal.
"""

from __future__ import annotations

from pathlib import Path

from normbench.config import Split, flatten
from normbench.results import PACK, RESULTS, read_results
from normbench.summary.types import METRICS, Run


def _overrides(run_dir: Path) -> list[str]:
    """The command line Hydra recorded for the run (.hydra/overrides.yaml), [] when there is none."""
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    import yaml

    try:
        return [str(o) for o in yaml.safe_load(path.read_text()) or []]
    except yaml.YAMLError:
        return []


def find_runs(root: Path) -> list[Run]:
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
            runs.append(Run(d, "incomplete", note="no results.json (still running, or killed)",
                            overrides=_overrides(d)))
            continue
        try:
            res = read_results(d / RESULTS)
        except ValueError as e:
            runs.append(Run(d, "unreadable", note=str(e)))
            continue
        config = flatten(res["config"]) if isinstance(res["config"], dict) else {}
        pack_dir = d.parent if d.parent in packs else None  # a pack's member: the pack's command line
        run = Run(d, res["status"], config, res, overrides=_overrides(pack_dir or d))
        if run.status == "failed":
            run.note = res.get("error") or "failed"
        elif run.status == "diverged":
            run.note = f"non-finite loss at step {res.get('diverged_step')}"
        elif not isinstance(res.get("test_acc"), (int, float)):
            run.status, run.note = "incomplete", "completed without a test_acc"
        runs.append(run)
    return runs


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
    return [(m, a, float(v)) for m, a, v in out if isinstance(v, (int, float))]


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
            key = (str(packed["dir"]), r.config.get("seed") if per_seed else None)
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
