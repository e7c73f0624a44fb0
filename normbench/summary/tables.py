"""Runs -> tables: each metric's entries (mean and 95% interval over seeds), the budget each table's runs
trained for, and the tests (every row against the reference, paired by seed; the best of each column),
each family Holm-corrected over its table.

    tables = build_tables(runs, labels, ref="bn")
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from normbench.summary import stats
from normbench.summary.discover import measurements
from normbench.summary.types import (
    CORE_METRICS,
    METRICS,
    MODEL_ORDER,
    VARLEN,
    Comparison,
    Entry,
    Run,
    Table,
    col_key,
    row_key,
)


def build_tables(runs: list[Run], labels: dict[Path, str], ref: str = "bn") -> list[Table]:
    tables: dict[tuple, Table] = {}

    def table(run: Run, metric: str) -> Table:
        kind = VARLEN if run.varlen else "batch"
        key = (kind, run.table_study, str(run.config.get("data.name")), str(run.config.get("model.name")), metric)
        return tables.setdefault(key, Table(*key))

    # table key -> column -> the (steps, batch size) of its runs, for the budget note
    steps: dict[tuple, dict[str, set[tuple[int, int]]]] = defaultdict(lambda: defaultdict(set))
    measured: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))  # varlen: label -> results
    for run in runs:
        if run.status == "completed":
            for metric, col, acc in measurements(run):
                t = table(run, metric)
                if isinstance(run.results.get("steps"), int):
                    steps[t.kind, t.study, t.data, t.model, t.metric][col].add(
                        (run.results["steps"], run.config.get("batch_size") or 0))
                t.cells.setdefault((labels[run.path], col), Entry()).add(run.config.get("seed", 0), acc, run.path)
                vpc = run.results.get("norm_values_per_channel")
                if not run.varlen and isinstance(vpc, int):
                    t.values_per_channel.setdefault((labels[run.path], col), set()).add(vpc)
                if run.results.get("batch_dependent"):
                    t.batch_dependent.add(labels[run.path])
                if run.varlen:
                    t.train_range = (run.config.get("varlen.min_len"), run.config.get("varlen.max_len"))
            if run.varlen:
                measured[VARLEN, run.table_study, str(run.config.get("data.name")), str(run.config.get("model.name"))
                         ][labels[run.path]].append(run.results)
    for run in runs:  # after the completed ones, so a diverged varlen run marks every test length
        if run.status in ("diverged", "failed") and run.config:
            for metric in CORE_METRICS:
                t = table(run, metric)
                cols = sorted({c for _, c in t.cells}) or ["mixed"] if run.varlen else [str(run.config.get("batch_size"))]
                for col in cols:
                    cell = t.cells.setdefault((labels[run.path], col), Entry())
                    cell.n_diverged += run.status == "diverged"
                    cell.n_failed += run.status == "failed"
    for key, t in tables.items():
        t.rows = sorted({r for r, _ in t.cells}, key=lambda r: row_key(r, ref))
        t.cols = sorted({c for _, c in t.cells}, key=col_key)
        if steps.get(key):
            t.notes.append(budget_note(t, steps[key]))
        if t.kind == VARLEN and t.metric == "test_acc":
            t.notes += varlen_notes(measured[key[:4]])
        if t.metric == "test_acc":
            t.notes += saturation_notes(runs, labels, t)
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


def _mean(values: list) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def varlen_notes(by_label: dict[str, list[dict]]) -> list[str]:
    """What the variable-length runs' statistics saw, per norm label (the mean over its runs): the real
    samples per training batch at each trained step of per-step BN (fewest, median, at the last step), and
    how far padding moved a sequence BN's statistics (mean shift in SD units, SD ratio; at the training
    padding and the heavy test padding, with the share of padded positions)."""
    notes = []
    for label, results in sorted(by_label.items()):
        counts = [r["step_samples"]["summary"] for r in results if r.get("step_samples")]
        if counts:
            notes.append(f"{label}: samples per training batch at each trained step: fewest "
                         f"{min(c['min'] for c in counts)}, median {_mean([c['median'] for c in counts]):.1f}, "
                         f"at the last step {_mean([c['last'] for c in counts]):.1f}")
        shifts = [r["padding_shift"] for r in results if r.get("padding_shift")]
        if shifts:
            parts = [f"{where} padding ({100 * _mean([s[where]['padding_share'] for s in shifts]):.0f}% padded): "
                     f"mean shift {_mean([s[where]['mean_shift_sd'] for s in shifts]):.2f} SD, SD ratio "
                     f"{_mean([s[where]['sd_ratio'] for s in shifts]):.2f}" for where in ("train", "test")]
            notes.append(f"{label}: padding moves its first BN's statistics from the real tokens': " + "; ".join(parts))
    return notes


def saturation_notes(runs: list[Run], labels: dict[Path, str], t: Table) -> list[str]:
    """DyT's and Derf's saturated share (results.json `saturation`, normbench/regimes/saturation.py), per row
    and column of the test-accuracy table `t` that holds such runs: the mean over its runs of the share of
    all their DyT/Derf values, the least and most saturated layer's share (means over runs), and the mean
    learned alpha over layers."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in runs:
        sat = run.results.get("saturation") if run.status == "completed" else None
        if not isinstance(sat, dict) or not isinstance(sat.get("all"), (int, float)):
            continue
        if ((VARLEN if run.varlen else "batch"), run.table_study, str(run.config.get("data.name")),
                str(run.config.get("model.name"))) != (t.kind, t.study, t.data, t.model):
            continue
        col = "" if run.varlen else f" at {run.config.get('batch_size')}"
        cells[labels[run.path], col].append(sat)
    if not cells:
        return []
    level = _mean([s.get("threshold") for sats in cells.values() for s in sats])
    parts = []
    for (label, col), sats in sorted(cells.items(), key=lambda kv: (row_key(kv[0][0], t.ref or ""), kv[0][1])):
        names = sorted({n for s in sats for n in (s.get("layers") or {})})
        layer = [_mean([(s.get("layers") or {}).get(n) for s in sats]) for n in names]
        layer = [v for v in layer if v is not None]
        alpha = _mean([_mean(list((s.get("alpha") or {}).values())) for s in sats])
        parts.append(f"{label}{col} {100 * _mean([s['all'] for s in sats]):.1f}%"
                     + (f" (layers {100 * min(layer):.1f}-{100 * max(layer):.1f}%)" if layer else "")
                     + (f", alpha {alpha:.2f}" if alpha is not None else "") + f" (n={len(sats)})")
    past = f"|f| > {level:.3f}" if level is not None else "their recorded level"
    return [f"saturation: DyT/Derf values on the test set past {past} (|alpha x| > 2 for DyT at 0.964), "
            f"share of all their values, mean over runs: " + "; ".join(parts)]


def _paired(a: Entry, b: Entry) -> stats.Paired:
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
