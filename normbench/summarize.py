"""`normbench summarize PATH`: the results.json files of a sweep (or of all of outputs/) -> tables, CSV,
JSON, Markdown and plots, test accuracy as mean ± std over seeds with n.

    normbench summarize outputs/multirun/small_batch/2025-01-01_12-00-00
    normbench summarize outputs --out reports/     # every run under outputs/, grouped

Runs are grouped by (regime, data, model, norm label, regime axis); the norm label is the norm's name plus
every other setting that varies between runs of the same model (norm.masked, model.placement, lr, ...),
so only runs that differ by seed alone are pooled. The small-batch axis is the batch size; the
variable-length axis is the test length. Failed, diverged, incomplete and unreadable run directories are
listed apart, never fatal. Reads nothing but results.json (and which directories Hydra created).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from normbench import report
from normbench.config import Config
from normbench.errors import UserError
from normbench.results import RESULTS, atomic_write_text, read_results
from normbench.tracking import flatten

SMALL, VARLEN = "small_batch", "variable_length"
METRICS = {"test_acc": "test accuracy (running statistics)",
           "test_acc_train_mode": "test accuracy with batch statistics (norms in train mode)"}
# Settings that never make two runs different experiments; seed is what a group pools over.
IGNORED = {"seed", "data.root", "data.download", "device", "threads", "progress", "tensorboard", "resume",
           "debug", "log_every", "eval_batch_size", "norm.track_stats", "norm.track_every", "norm.name",
           "model.name", "data.name", "varlen.test_lengths"}
DEFAULTS = flatten(asdict(Config()))


@dataclass
class Run:
    path: Path  # the run directory
    status: str  # completed | diverged | failed | incomplete | unreadable
    config: dict[str, Any] = field(default_factory=dict)  # flattened: {"norm.name": "bn", ...}
    results: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # why it is not completed

    @property
    def regime(self) -> str:
        return VARLEN if self.config.get("varlen.enabled") else SMALL


def find_runs(root: Path) -> list[Run]:
    """Every run directory under `root`: those with a results.json, and those Hydra created (a .hydra/
    folder) that have none yet (still running, or killed)."""
    dirs = {p.parent for p in root.rglob(RESULTS)} | {p.parent for p in root.rglob(".hydra") if p.is_dir()}
    runs = []
    for d in sorted(dirs):
        if not (d / RESULTS).exists():
            runs.append(Run(d, "incomplete", note="no results.json (still running, or killed)"))
            continue
        try:
            res = read_results(d / RESULTS)
        except ValueError as e:
            runs.append(Run(d, "unreadable", note=str(e)))
            continue
        run = Run(d, res["status"], flatten(res["config"]) if isinstance(res["config"], dict) else {}, res)
        if run.status == "failed":
            run.note = res.get("error") or "failed"
        elif run.status == "diverged":
            run.note = f"non-finite loss at step {res.get('diverged_step')}"
        elif not isinstance(res.get("test_acc"), (int, float)):
            run.status, run.note = "incomplete", "completed without a test_acc"
        runs.append(run)
    return runs


def _fmt_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def label_runs(runs: list[Run]) -> dict[Path, str]:
    """A norm label per run: the norm name plus the settings that vary among the runs of that norm in its
    (regime, data, model), e.g. `bn masked=false` next to `bn`; options that merely differ from norm to
    norm (rms's eps) are not shown."""
    by_group: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        if r.config:
            key = (r.regime, r.config.get("data.name"), r.config.get("model.name"), r.config.get("norm.name"))
            by_group[key].append(r)
    labels = {}
    for (regime, *_), group in by_group.items():
        keys = sorted({k for r in group for k in r.config})
        axis = {"batch_size"} if regime == SMALL else set()
        varying = [k for k in keys if k not in IGNORED | axis
                   and len({json.dumps(r.config.get(k), sort_keys=True) for r in group}) > 1]
        for r in group:
            extras = [f"{k.split('.')[-1]}={_fmt_value(r.config.get(k))}" for k in varying
                      if r.config.get(k) is not None and r.config.get(k) != DEFAULTS.get(k)]
            labels[r.path] = " ".join([str(r.config.get("norm.name")), *extras])
    return labels


def measurements(run: Run) -> list[tuple[str, str, float]]:
    """(metric, axis value, accuracy) for every number a completed run reports in its regime."""
    res, c = run.results, run.config
    if run.regime == SMALL:
        out = [(m, str(c.get("batch_size")), res.get(m)) for m in METRICS]
    else:
        pad = f"pad×{c.get('varlen.heavy_pad', 2):g}"
        out = [("test_acc", length, acc) for length, acc in (res.get("test_acc_by_length") or {}).items()]
        out += [("test_acc", "mixed", res.get("test_acc_mixed")), ("test_acc", pad, res.get("test_acc_heavy_pad")),
                ("test_acc_train_mode", "original", res.get("test_acc_train_mode")),  # the unresized test set
                ("test_acc_train_mode", "mixed", res.get("test_acc_mixed_train_mode")),
                ("test_acc_train_mode", pad, res.get("test_acc_heavy_pad_train_mode"))]
    return [(m, a, float(v)) for m, a, v in out if isinstance(v, (int, float))]


@dataclass
class Cell:
    values: list[float] = field(default_factory=list)
    n_diverged: int = 0
    n_failed: int = 0

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:  # sample standard deviation (n - 1), undefined for one value
        return statistics.stdev(self.values) if len(self.values) > 1 else None


@dataclass
class Table:
    regime: str
    data: str
    model: str
    metric: str
    rows: list[str] = field(default_factory=list)  # norm labels
    cols: list[str] = field(default_factory=list)  # batch sizes or test lengths
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    values_per_channel: dict[str, int] = field(default_factory=dict)  # small batch: column -> BN's count
    train_range: tuple[int, int] | None = None  # variable length: the trained lengths

    @property
    def title(self) -> str:
        axis = "batch size" if self.regime == SMALL else "test length (rows)"
        return f"{self.regime} · {self.data} · {self.model} · {METRICS[self.metric]} by {axis}"

    def best(self, col: str) -> set[str]:
        """The rows with the highest mean in column `col` (all of them, on a tie)."""
        means = {r: self.cells[r, col].mean for r in self.rows if (r, col) in self.cells and self.cells[r, col].n}
        return {r for r, m in means.items() if m == max(means.values())}


def _col_key(col: str):
    """Numbers (batch sizes, lengths) in order, then the unresized, mixed-length and padded tests."""
    named = {"original": 0, "mixed": 1}
    return (0, int(col), "") if col.isdigit() else (1, named.get(col, 2), col)


def row_key(label: str):
    from normbench import norms

    name = label.split(" ")[0]
    order = norms.names()
    return (order.index(name) if name in order else len(order), label)


def build_tables(runs: list[Run]) -> list[Table]:
    labels = label_runs(runs)
    tables: dict[tuple, Table] = {}

    def table(run: Run, metric: str) -> Table:
        key = (run.regime, run.config.get("data.name"), run.config.get("model.name"), metric)
        return tables.setdefault(key, Table(*map(str, key)))

    for run in runs:
        if run.status == "completed":
            for metric, col, acc in measurements(run):
                t = table(run, metric)
                t.cells.setdefault((labels[run.path], col), Cell()).values.append(acc)
                vpc = run.results.get("norm_values_per_channel")
                if run.regime == SMALL and vpc:
                    t.values_per_channel.setdefault(col, vpc)
                if run.regime == VARLEN:
                    t.train_range = (run.config.get("varlen.min_len"), run.config.get("varlen.max_len"))
    for run in runs:  # after the completed ones, so a diverged varlen run marks every test length
        if run.status in ("diverged", "failed") and run.config:
            for metric in METRICS:
                t = table(run, metric)
                cols = [str(run.config.get("batch_size"))] if run.regime == SMALL else \
                    sorted({c for _, c in t.cells}) or ["mixed"]
                for col in cols:
                    cell = t.cells.setdefault((labels[run.path], col), Cell())
                    cell.n_diverged += run.status == "diverged"
                    cell.n_failed += run.status == "failed"
    for t in tables.values():
        t.rows = sorted({r for r, _ in t.cells}, key=row_key)
        t.cols = sorted({c for _, c in t.cells}, key=_col_key)
    model_order = ["mlp", "cnn", "rnn"]
    return sorted(tables.values(), key=lambda t: (t.regime, t.data, model_order.index(t.model)
                                                  if t.model in model_order else 9, t.model, list(METRICS).index(t.metric)))


def summarize(root: Path, out: Path | None = None, plots: bool = True, console=None) -> dict[str, Path]:
    """Summarize every run under `root` into `out` (default `root`); returns the files written."""
    root, out = Path(root), Path(out or root)
    if not root.is_dir():
        raise UserError(f"{root} is not a directory", "give a sweep directory, e.g. outputs/multirun/<date>/<time>")
    runs = find_runs(root)
    if not runs:
        raise UserError(f"no runs under {root} (no results.json, no Hydra run directory)",
                        "point it at a sweep directory or at outputs/")
    tables = build_tables(runs)
    problems = [r for r in runs if r.status != "completed"]
    report.print_tables(tables, problems, root, console)
    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": out / "summary.csv", "json": out / "summary.json", "md": out / "summary.md"}
    atomic_write_text(files["csv"], report.to_csv(tables))
    atomic_write_text(files["json"], report.to_json(tables, runs, problems, root))
    markdown = report.to_markdown(tables, problems, root)
    if plots:
        from normbench import plots as plotting

        figures = plotting.plot_all(tables, out)
        files.update({name: path for name, path in figures.items()})
        markdown += "\n" + "\n".join(f"![{name}]({path.name})" for name, path in figures.items()) + "\n"
        plotting.log_to_tensorboard(figures, markdown, out / "tensorboard")
    atomic_write_text(files["md"], markdown)
    return files


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="normbench summarize", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a sweep directory, or outputs/ as a whole")
    p.add_argument("--out", type=Path, default=None, help="where to write the files (default: PATH)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots and TensorBoard figures")
    args = p.parse_args(argv)
    files = summarize(args.path, args.out, plots=not args.no_plots)
    print("wrote " + ", ".join(str(f) for f in files.values()))
    return 0
