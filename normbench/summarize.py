"""`normbench summarize PATH`: the results.json files of a sweep (or of all of outputs/) -> tables with
95% intervals and paired comparisons, as CSV, JSON, Markdown, one HTML page, plots and TensorBoard runs.

    normbench summarize outputs/multirun/2025-01-01/12-00-00
    normbench summarize outputs --out reports/ --ref gn   # every run under outputs/, compared with gn
    normbench summarize SWEEP --select lr                  # the best lr per cell, chosen on validation

Runs are grouped by (study, data, model, norm label, column); the norm label is the norm's name plus
every other setting that varies between runs of the same model (norm.masked, model.placement, lr, ...),
so only runs that differ by seed alone are pooled. Columns are batch sizes, or test lengths for the
variable-length study. Each cell: n, mean, its 95% t-interval; each norm against the reference by
per-seed (paired) differences, Holm-corrected within a table. Failed, diverged, incomplete and
unreadable run directories are listed apart, never fatal. This module only computes (a `Summary`);
report.py, plots.py, html_report.py and tb_aggregate.py show it.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from normbench import stats
from normbench.config import Config, ModelConfig, flatten, runtime_keys, to_dict
from normbench.errors import UserError
from normbench.results import PACK, RESULTS, atomic_write_text, read_results
from normbench.tables import (
    CORE_METRICS,
    METRICS,
    VARLEN,
    Cell,
    Comparison,
    Run,
    Summary,
    Table,
    col_key,
    fmt_value,
    row_key,
)

# Settings that never make two runs different experiments: seed is what a cell pools over; the names
# are the table and the row themselves; the test lengths are the columns.
IGNORED = runtime_keys() | {"seed", "norm.name", "model.name", "data.name", "varlen.test_lengths"}
MODEL_ORDER = ["mlp", "cnn", "rnn"]


def model_defaults(model: str | None) -> dict[str, Any]:
    """The flattened default config of `model` (each model has its own defaults, e.g. the CNN's dropout)."""
    return flatten(to_dict(Config(model=ModelConfig(name=model or "mlp"))))


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
    folder) that have none yet (still running, or killed)."""
    dirs = {p.parent for p in root.rglob(RESULTS)} | {p.parent for p in root.rglob(".hydra") if p.is_dir()}
    runs = []
    for d in sorted(dirs):
        if (d / PACK).exists() and not (d / RESULTS).exists():  # a pack: its members are the runs
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
        pack_dir = d.parent if (d.parent / PACK).exists() else None  # a pack's member: the pack's command line
        run = Run(d, res["status"], config, res, overrides=_overrides(pack_dir or d))
        if run.status == "failed":
            run.note = res.get("error") or "failed"
        elif run.status == "diverged":
            run.note = f"non-finite loss at step {res.get('diverged_step')}"
        elif not isinstance(res.get("test_acc"), (int, float)):
            run.status, run.note = "incomplete", "completed without a test_acc"
        runs.append(run)
    return runs


def _same(values) -> bool:
    return len({json.dumps(v, sort_keys=True) for v in values}) <= 1


def label_runs(runs: list[Run], pooled: frozenset[str] = frozenset()) -> dict[Path, str]:
    """A norm label per run: the norm name plus the settings that vary among the runs of that norm in its
    (study, data, model), e.g. `bn masked=false` next to `bn`; options that merely differ from norm to
    norm (rms's eps) are not shown. `pooled` keys (lr under --select lr) are never in a label."""
    by_group: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        if r.config:
            by_group[r.study, r.config.get("data.name"), r.config.get("model.name"), r.config.get("norm.name")
                     ].append(r)
    labels = {}
    for (_, _, model, _), group in by_group.items():
        defaults = model_defaults(model)
        axis = set() if group[0].varlen else {"batch_size"}
        keys = sorted({k for r in group for k in r.config} - IGNORED - axis - pooled)
        varying = [k for k in keys if not _same(r.config.get(k) for r in group)]
        for r in group:
            extras = [f"{k.split('.')[-1]}={fmt_value(r.config.get(k))}" for k in varying
                      if r.config.get(k) is not None and r.config.get(k) != defaults.get(k)]
            labels[r.path] = " ".join([str(r.config.get("norm.name")), *extras])
    return labels


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
    return [(m, a, float(v)) for m, a, v in out if isinstance(v, (int, float))]


def build_tables(runs: list[Run], labels: dict[Path, str], ref: str = "bn") -> list[Table]:
    tables: dict[tuple, Table] = {}

    def table(run: Run, metric: str) -> Table:
        kind = VARLEN if run.varlen else "batch"
        key = (kind, run.study, str(run.config.get("data.name")), str(run.config.get("model.name")), metric)
        return tables.setdefault(key, Table(*key))

    # table key -> column -> the (steps, batch size) of its runs, for the budget note
    steps: dict[tuple, dict[str, set[tuple[int, int]]]] = defaultdict(lambda: defaultdict(set))
    for run in runs:
        if run.status == "completed":
            for metric, col, acc in measurements(run):
                t = table(run, metric)
                if isinstance(run.results.get("steps"), int):
                    steps[t.kind, t.study, t.data, t.model, t.metric][col].add(
                        (run.results["steps"], run.config.get("batch_size") or 0))
                t.cells.setdefault((labels[run.path], col), Cell()).add(run.config.get("seed", 0), acc, run.path)
                vpc = run.results.get("norm_values_per_channel")
                if not run.varlen and isinstance(vpc, int):
                    t.values_per_channel.setdefault(col, set()).add(vpc)
                if run.varlen:
                    t.train_range = (run.config.get("varlen.min_len"), run.config.get("varlen.max_len"))
    for run in runs:  # after the completed ones, so a diverged varlen run marks every test length
        if run.status in ("diverged", "failed") and run.config:
            for metric in CORE_METRICS:
                t = table(run, metric)
                cols = sorted({c for _, c in t.cells}) or ["mixed"] if run.varlen else [str(run.config.get("batch_size"))]
                for col in cols:
                    cell = t.cells.setdefault((labels[run.path], col), Cell())
                    cell.n_diverged += run.status == "diverged"
                    cell.n_failed += run.status == "failed"
    for key, t in tables.items():
        t.rows = sorted({r for r, _ in t.cells}, key=lambda r: row_key(r, ref))
        t.cols = sorted({c for _, c in t.cells}, key=col_key)
        if steps.get(key):
            t.notes.append(budget_note(t, steps[key]))
        compare(t, ref)
    return sorted(tables.values(), key=lambda t: (t.kind, t.study, t.data, MODEL_ORDER.index(t.model)
                                                  if t.model in MODEL_ORDER else 9, t.model, list(METRICS).index(t.metric)))


def budget_note(t: Table, steps: dict[str, set[tuple[int, int]]]) -> str:
    """What each run of the table trained for: training samples seen (steps x batch size) and steps, per
    column where the columns are batch sizes (a range where runs of a column differ)."""
    def span(values) -> str:
        lo, hi = min(values), max(values)
        return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"

    every = {pair for pairs in steps.values() for pair in pairs}
    seen = f"budget: {span([n * b for n, b in every])} training samples seen per run"
    if t.kind == VARLEN:
        return f"{seen}, {span([n for n, _ in every])} steps"
    per_col = ", ".join(f"{span([n for n, _ in steps[c]])} at {c}" for c in t.cols if c in steps)
    return f"{seen}; steps: {per_col}"


def _paired(a: Cell, b: Cell) -> stats.Paired:
    """a - b over the seeds both cells hold once."""
    xa, xb = a.by_seed(), b.by_seed()
    seeds = sorted(set(xa) & set(xb))
    return stats.paired([xa[s] for s in seeds], [xb[s] for s in seeds], seeds)


def compare(t: Table, ref: str) -> None:
    """Fill `t.comparisons` (every row against `ref`, per column) and `t.best` (per column: the top mean
    and every row not significantly below it), each family Holm-corrected over the whole table."""
    t.ref = ref if ref in t.rows else None
    if t.ref:
        for col in t.cols:
            base = t.cells.get((ref, col))
            for row in t.rows:
                cell = t.cells.get((row, col))
                if row != ref and base is not None and base.n and cell is not None and cell.n:
                    t.comparisons.append(Comparison(row, col, _paired(cell, base)))
        for c, p in zip(t.comparisons, stats.holm([c.result.p for c in t.comparisons])):
            c.p_holm = p
    against_top = []
    for col in t.cols:
        filled = {r: t.cells[r, col] for r in t.rows if (r, col) in t.cells and t.cells[r, col].n}
        if not filled:
            continue
        top = max(filled, key=lambda r: filled[r].mean)
        t.best[col] = {top}
        against_top += [Comparison(r, col, _paired(filled[top], cell)) for r, cell in filled.items() if r != top]
    for c, p in zip(against_top, stats.holm([c.result.p for c in against_top])):
        if p is not None and p >= 1 - stats.LEVEL:  # not significantly below the top
            t.best[c.col].add(c.row)


def sweep_axes(runs: list[Run]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """What varied across the runs (key -> its values) and what every run set to one value other than
    its model's default (key -> value); runtime keys are neither. A norm's own options (bn's momentum
    next to ln's none) vary only if they vary among the runs of one norm."""
    configs = [r for r in runs if r.config]
    keys = sorted({k for r in configs for k in r.config} - runtime_keys())
    by_norm: dict[Any, list[Run]] = defaultdict(list)
    for r in configs:
        by_norm[r.config.get("norm.name")].append(r)
    varied, constant = {}, {}
    for k in keys:
        values = [r.config.get(k) for r in configs]
        option = k.startswith("norm.") and k != "norm.name"
        if option and all(_same(r.config.get(k) for r in group) for group in by_norm.values()):
            continue
        if not _same(values):
            distinct = {json.dumps(v, sort_keys=True): v for v in values}.values()
            varied[k] = sorted((fmt_value(v) for v in distinct), key=col_key)
        elif values and any(values[0] != model_defaults(r.config.get("model.name")).get(k) for r in configs) \
                and k not in ("model.name", "norm.name", "data.name"):
            constant[k] = values[0]
    return varied, constant


def compute(root: Path, ref: str = "bn", select: str | None = None) -> Summary:
    """Read every run under `root` and compute the tables; raises UserError for a path without runs."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{root} is not a directory", "give a sweep directory, e.g. outputs/multirun/<date>/<time>")
    runs = find_runs(root)
    if not runs:
        raise UserError(f"no runs under {root} (no results.json, no Hydra run directory)",
                        "point it at a sweep directory or at outputs/")
    varied, constant = sweep_axes(runs)
    if select is None:
        tables = build_tables(runs, label_runs(runs), ref)
    else:  # one value of `select` per cell, chosen on validation accuracy
        from normbench import select as selection

        if select not in varied:
            raise UserError(f"--select {select}: the runs do not vary {select}",
                            f"sweep it, e.g. {select}=1e-3,3e-3,1e-2")
        labels = label_runs(runs, pooled=frozenset({select}))
        chosen = selection.choose(runs, select, labels)
        tables = build_tables([r for r in runs if selection.kept_by(chosen, r, labels, select)], labels, ref)
        selection.annotate(tables, chosen, select, varied[select])
    return Summary(root, runs, tables, varied, constant, ref)


def write_files(s: Summary, out: Path, plots: bool = True) -> dict[str, Path]:
    """summary.csv, summary_paired.csv, summary.json, summary.md, summary.html; with `plots`, the PNG
    figures (also inline in the HTML page) and TensorBoard's summary runs under out/summary/."""
    from normbench import html_report, report

    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": out / "summary.csv", "paired_csv": out / "summary_paired.csv", "json": out / "summary.json",
             "md": out / "summary.md", "html": out / "summary.html"}
    atomic_write_text(files["csv"], report.to_csv(s.tables))
    atomic_write_text(files["paired_csv"], report.to_paired_csv(s.tables))
    atomic_write_text(files["json"], report.to_json(s))
    figures, svgs = {}, {}
    if plots:
        from normbench import plots as plotting

        rendered = plotting.render_all(s, out)
        figures = {name: png for name, (png, _) in rendered.items()}
        svgs = {name: svg for name, (_, svg) in rendered.items()}
    markdown = report.to_markdown(s, figures)
    atomic_write_text(files["md"], markdown)
    atomic_write_text(files["html"], html_report.to_html(s, svgs))
    if plots:
        from normbench import tb_aggregate

        tb_aggregate.write(s, out / tb_aggregate.SUBDIR, figures, markdown)
        files.update(figures)
    return files


def summarize(root: Path, out: Path | None = None, plots: bool = True, console=None, ref: str = "bn",
              select: str | None = None) -> dict[str, Path]:
    """Summarize every run under `root` into `out` (default `root`): print the tables, write the files;
    returns the files written."""
    from normbench import report

    summary = compute(root, ref, select)
    report.print_summary(summary, console)
    return write_files(summary, Path(out or root), plots=plots)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="normbench summarize", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a sweep directory, or outputs/ as a whole")
    p.add_argument("--out", type=Path, default=None, help="where to write the files (default: PATH)")
    p.add_argument("--ref", default="bn", help="the norm every other is compared with, seed by seed (default: bn)")
    p.add_argument("--select", choices=["lr"], default=None,
                   help="pick, per cell, the value with the best mean validation accuracy (test accuracy reported)")
    p.add_argument("--no-plots", action="store_true", help="skip the plots, the HTML figures and TensorBoard")
    args = p.parse_args(argv)
    files = summarize(args.path, args.out, plots=not args.no_plots, ref=args.ref, select=args.select)
    print("wrote " + ", ".join(str(f) for f in files.values()))
    return 0
