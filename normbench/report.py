"""How `normbench summarize` shows a `Summary` as text: in the terminal (rich), as Markdown, CSV and JSON.

    header, body, best = table_rows(table)         # the same cells for every text format
    print_summary(summary); text = to_markdown(summary, figures)

Accuracies in percent: mean [95% t-interval] over seeds; (n) where n < 3 or differs from the table's
usual n; †k / ✗k for k diverged / failed runs in that cell (never in the mean). Bold: the top mean of a
column and every norm not significantly below it. Paired comparisons in percentage points.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path

from normbench import stats
from normbench.tables import MIN_N, Comparison, Entry, Summary, Table, relative

LEVEL_TEXT = f"{stats.LEVEL:.0%}"


def pct(v: float | None, signed: bool = False) -> str:
    return "" if v is None else f"{100 * v:+.1f}" if signed else f"{100 * v:.1f}"


def format_cell(cell: Entry | None, uniform_n: int | None) -> str:
    """'84.2 [83.0, 85.4]' in percent; '(2)' when n < 3 or differs from the table's; '†1' diverged, '✗1' failed."""
    if cell is None:
        return ""
    parts = []
    if cell.n:
        ci = cell.ci
        parts.append(pct(cell.mean) + (f" [{pct(ci[0])}, {pct(ci[1])}]" if ci else ""))
        if cell.n != uniform_n or cell.n < MIN_N:
            parts.append(f"({cell.n})")
    parts += [f"†{cell.n_diverged}"] * bool(cell.n_diverged) + [f"✗{cell.n_failed}"] * bool(cell.n_failed)
    return " ".join(parts)


def uniform_n(t: Table) -> int | None:
    counts = Counter(c.n for c in t.cells.values() if c.n)
    return counts.most_common(1)[0][0] if counts else None


def values_per_channel(t: Table, col: str) -> str:
    seen = sorted(t.values_per_channel.get(col, ()))
    return "" if not seen else str(seen[0]) if len(seen) == 1 else f"{seen[0]}–{seen[-1]}"


def table_rows(t: Table) -> tuple[list[str], list[list[str]], list[list[bool]]]:
    """Header, body rows and which cells are among the best of their column (the same for every format)."""
    n = uniform_n(t)
    header = ["norm", *t.cols]
    body, best = [], []
    if t.values_per_channel:
        body.append(["values/channel", *[values_per_channel(t, c) for c in t.cols]])
        best.append([False] * (len(t.cols) + 1))
    for r in t.rows:
        body.append([r, *[" ".join(filter(None, (format_cell(t.cells.get((r, c)), n), t.chosen.get((r, c)))))
                          for c in t.cols]])
        best.append([False, *[r in t.best.get(c, ()) for c in t.cols]])
    return header, body, best


def caption(t: Table) -> str:
    n = uniform_n(t)
    vpc = "; values/channel: the fewest values a norm layer's per-channel statistics see" \
        if t.values_per_channel else ""
    return (f"test accuracy in %, mean [{LEVEL_TEXT} t-interval] over {n} seed{'s' * (n != 1)} unless (n) says "
            f"otherwise (marked when n < {MIN_N}); bold (* in the terminal): the best mean of its column and every "
            f"norm not significantly below it (paired t-test, Holm, α = 0.05); †k: k runs diverged, ✗k: k failed "
            f"(not in the mean){vpc}")


def verdict(c: Comparison) -> str:
    if c.result.p is None:
        return "untested (< 2 shared seeds)"
    if not c.significant:
        return "no significant difference"
    return "higher" if c.result.mean > 0 else "lower"


def paired_header(t: Table) -> list[str]:
    return ["norm", t.axis.split(" (")[0], "pairs", f"Δ vs {t.ref} (pp)", f"{LEVEL_TEXT} CI", "p", "p (Holm)", "verdict"]


def paired_rows(t: Table) -> list[list[str]]:
    rows = []
    for c in t.comparisons:
        r = c.result
        ci = f"[{pct(r.ci[0], True)}, {pct(r.ci[1], True)}]" if r.ci else ""
        rows.append([c.row, c.col, str(r.n), pct(r.mean, True) if r.n else "", ci,
                     "" if r.p is None else f"{r.p:.3g}", "" if c.p_holm is None else f"{c.p_holm:.3g}", verdict(c)])
    return rows


def paired_caption(t: Table) -> str:
    return (f"paired by seed (same data split and batch order): per-seed difference norm − {t.ref} in percentage "
            f"points, its mean and {LEVEL_TEXT} t-interval, a two-sided paired t-test, Holm-corrected over this table")


def sweep_lines(s: Summary) -> list[str]:
    varied = [f"{k} ∈ {{{', '.join(v)}}}" for k, v in s.varied.items()]
    constant = [f"{k}={v}" for k, v in s.constant.items()]
    return [f"varied: {'; '.join(varied) or 'nothing'}", f"fixed (not defaults): {' '.join(constant) or 'nothing'}"]


def to_markdown(s: Summary, figures: dict[str, Path] | None = None) -> str:
    lines = [f"# normbench summary of `{s.root}`", "", *[f"- {line}" for line in sweep_lines(s)], ""]
    for t in s.tables:
        header, body, best = table_rows(t)
        lines += [f"## {t.title}", "", f"_{caption(t)}_", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        for row, marks in zip(body, best):
            lines.append("| " + " | ".join(f"**{v}**" if m and v else v for v, m in zip(row, marks)) + " |")
        lines += [f"_{note}_" for note in t.notes] + [""] * bool(t.notes)
        lines.append("")
        if t.comparisons:
            head = paired_header(t)
            lines += [f"_{paired_caption(t)}_", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(row) + " |" for row in paired_rows(t)]
            lines.append("")
    if s.problems:
        lines += ["## Runs not in the tables", "", "| run | status | why |", "|---|---|---|"]
        lines += [f"| `{relative(r.path, s.root)}` | {r.status} | "
                  f"{r.note.replace('|', '/').splitlines()[0] if r.note else ''} |" for r in s.problems]
        lines.append("")
    lines += [f"![{name}]({path.name})" for name, path in (figures or {}).items()]
    return "\n".join(lines) + "\n"


def to_csv(tables: list[Table]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["study", "data", "model", "norm", "metric", "axis", "n", "mean", "std", "ci_low", "ci_high",
                "min", "max", "best", "n_diverged", "n_failed", "values_per_channel"])
    for t in tables:
        for r in t.rows:
            for c in t.cols:
                cell = t.cells.get((r, c))
                if cell is not None:
                    lo, hi = cell.ci or (None, None)
                    w.writerow([t.study, t.data, t.model, r, t.metric, c, cell.n, cell.mean, cell.std, lo, hi,
                                min(cell.values, default=None), max(cell.values, default=None),
                                r in t.best.get(c, ()), cell.n_diverged, cell.n_failed, values_per_channel(t, c)])
    return buf.getvalue()


def to_paired_csv(tables: list[Table]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["study", "data", "model", "metric", "norm", "ref", "axis", "pairs", "mean_diff", "ci_low",
                "ci_high", "p", "p_holm", "significant"])
    for t in tables:
        for c in t.comparisons:
            lo, hi = c.result.ci or (None, None)
            w.writerow([t.study, t.data, t.model, t.metric, c.row, t.ref, c.col, c.result.n, c.result.mean, lo, hi,
                        c.result.p, c.p_holm, c.significant])
    return buf.getvalue()


def to_json(s: Summary) -> str:
    groups = [{"study": t.study, "data": t.data, "model": t.model, "norm": r, "metric": t.metric, "axis": c,
               "n": cell.n, "mean": cell.mean, "std": cell.std, "ci_low": (cell.ci or (None,))[0],
               "ci_high": (cell.ci or (None, None))[1], "values": cell.values, "seeds": cell.seeds,
               "best": r in t.best.get(c, ()), "n_diverged": cell.n_diverged, "n_failed": cell.n_failed,
               "values_per_channel": sorted(t.values_per_channel.get(c, ())) or None}
              for t in s.tables for r in t.rows for c in t.cols if (cell := t.cells.get((r, c))) is not None]
    comparisons = [{"study": t.study, "data": t.data, "model": t.model, "metric": t.metric, "norm": c.row,
                    "ref": t.ref, "axis": c.col, "pairs": c.result.n, "seeds": c.result.seeds,
                    "mean_diff": c.result.mean, "ci_low": (c.result.ci or (None,))[0],
                    "ci_high": (c.result.ci or (None, None))[1], "p": c.result.p, "p_holm": c.p_holm,
                    "significant": c.significant} for t in s.tables for c in t.comparisons]
    return json.dumps({
        "root": str(s.root), "runs": dict(Counter(r.status for r in s.runs)), "ref": s.ref,
        "level": stats.LEVEL, "varied": s.varied, "constant": s.constant, "groups": groups, "comparisons": comparisons,
        "selected": [{"study": t.study, "data": t.data, "model": t.model, "metric": t.metric, "norm": r,
                      "axis": c, "chosen": v} for t in s.tables for (r, c), v in t.chosen.items()],
        "problems": [{"path": str(r.path), "status": r.status, "note": r.note} for r in s.problems],
    }, indent=2, default=str) + "\n"


def print_summary(s: Summary, console=None) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = console or Console()
    if not console.is_terminal:  # a pipe or a file: do not squeeze the tables into 80 columns
        console.width = 200
    for line in sweep_lines(s):
        console.print(f"[dim]{line}[/]")
    for t in s.tables:
        header, body, best = table_rows(t)
        console.print(f"\n[bold]{t.title}[/]")
        rt = RichTable()
        for i, h in enumerate(header):
            rt.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        for i, (row, marks) in enumerate(zip(body, best)):
            rt.add_row(*[f"[bold green]{v} *[/]" if m and v else v for v, m in zip(row, marks)],
                       end_section=bool(t.values_per_channel) and i == 0)
        console.print(rt)
        console.print(f"[dim]{caption(t)}[/]")
        for note in t.notes:
            console.print(f"[dim]{note}[/]")
        if t.comparisons:
            pt = RichTable(title=f"paired vs {t.ref}", title_justify="left")
            for i, h in enumerate(paired_header(t)):
                pt.add_column(h, justify="left" if i in (0, 7) else "right", no_wrap=True)
            for row, c in zip(paired_rows(t), t.comparisons):
                style = "green" if c.significant and c.result.mean > 0 else "red" if c.significant else None
                pt.add_row(*row, style=style)
            console.print(pt)
            console.print(f"[dim]{paired_caption(t)}[/]")
    if s.problems:
        console.print("\n[bold]runs not in the tables[/]")
        rt = RichTable()
        for col in ("run", "status", "why"):
            rt.add_column(col, overflow="fold")
        for r in s.problems:
            rt.add_row(relative(r.path, s.root), r.status, r.note.splitlines()[0] if r.note else "")
        console.print(rt)
