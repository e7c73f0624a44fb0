"""How `normbench summarize` shows its tables: in the terminal (rich), as Markdown, CSV and JSON.

    header, body, best = table_rows(table)       # the same cells for every format
    text = to_markdown(tables, problems, root)

Accuracies are shown in percent as mean ± std over seeds; n where it differs from the table's usual
n; †k / ✗k for k diverged / failed runs in that cell (never in the mean); the best mean of each column
in bold.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normbench.summarize import Cell, Run, Table


def format_cell(cell: Cell | None, uniform_n: int | None) -> str:
    """'84.2 ± 1.0' in percent; '(2)' when n differs from the table's; '†1' diverged, '✗1' failed."""
    if cell is None:
        return ""
    parts = []
    if cell.n:
        parts.append(f"{100 * cell.mean:.1f}" + (f" ± {100 * cell.std:.1f}" if cell.std is not None else ""))
        if cell.n != uniform_n:
            parts.append(f"({cell.n})")
    parts += [f"†{cell.n_diverged}"] * bool(cell.n_diverged) + [f"✗{cell.n_failed}"] * bool(cell.n_failed)
    return " ".join(parts)


def uniform_n(t: Table) -> int | None:
    counts = Counter(c.n for c in t.cells.values() if c.n)
    return counts.most_common(1)[0][0] if counts else None


def table_rows(t: Table) -> tuple[list[str], list[list[str]], list[list[bool]]]:
    """Header, body rows and which cells are the best of their column (the same for rich and Markdown)."""
    n = uniform_n(t)
    header = ["norm", *t.cols]
    body, best = [], []
    if t.values_per_channel:
        body.append(["values/channel (BN)", *[str(t.values_per_channel.get(c, "")) for c in t.cols]])
        best.append([False] * (len(t.cols) + 1))
    winners = {c: t.best(c) for c in t.cols}
    for r in t.rows:
        body.append([r, *[format_cell(t.cells.get((r, c)), n) for c in t.cols]])
        best.append([False, *[r in winners[c] for c in t.cols]])
    return header, body, best


def caption(t: Table) -> str:
    n = uniform_n(t)
    vpc = "; values/channel: the fewest values a norm layer's per-channel statistics see" \
        if t.values_per_channel else ""
    return (f"test accuracy in %, mean ± std over {n} seed{'s' * (n != 1)} unless (n) says otherwise; best per "
            f"column in bold (* in the terminal); †k: k runs diverged, ✗k: k failed (not in the mean){vpc}")


def to_markdown(tables: list[Table], problems: list[Run], root: Path) -> str:
    lines = [f"# normbench summary of `{root}`", ""]
    for t in tables:
        header, body, best = table_rows(t)
        lines += [f"## {t.title}", "", f"_{caption(t)}_", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        for row, marks in zip(body, best):
            lines.append("| " + " | ".join(f"**{v}**" if m and v else v for v, m in zip(row, marks)) + " |")
        lines.append("")
    if problems:
        lines += ["## Runs not in the tables", "", "| run | status | why |", "|---|---|---|"]
        lines += [f"| `{r.path.relative_to(root) if r.path != root else '.'}` | {r.status} | "
                  f"{r.note.replace('|', '/').splitlines()[0] if r.note else ''} |" for r in problems]
        lines.append("")
    return "\n".join(lines)


def to_csv(tables: list[Table]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["regime", "data", "model", "norm", "metric", "axis", "n", "mean", "std", "min", "max",
                "n_diverged", "n_failed", "values_per_channel"])
    for t in tables:
        for r in t.rows:
            for c in t.cols:
                cell = t.cells.get((r, c))
                if cell is not None:
                    w.writerow([t.regime, t.data, t.model, r, t.metric, c, cell.n, cell.mean, cell.std,
                                min(cell.values, default=None), max(cell.values, default=None), cell.n_diverged,
                                cell.n_failed, t.values_per_channel.get(c)])
    return buf.getvalue()


def to_json(tables: list[Table], runs: list[Run], problems: list[Run], root: Path) -> str:
    groups = [{"regime": t.regime, "data": t.data, "model": t.model, "norm": r, "metric": t.metric, "axis": c,
               "n": cell.n, "mean": cell.mean, "std": cell.std, "values": cell.values,
               "n_diverged": cell.n_diverged, "n_failed": cell.n_failed,
               "values_per_channel": t.values_per_channel.get(c)}
              for t in tables for r in t.rows for c in t.cols if (cell := t.cells.get((r, c))) is not None]
    return json.dumps({
        "root": str(root), "runs": dict(Counter(r.status for r in runs)), "groups": groups,
        "problems": [{"path": str(r.path), "status": r.status, "note": r.note} for r in problems],
    }, indent=2) + "\n"


def print_tables(tables: list[Table], problems: list[Run], root: Path, console=None) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = console or Console()
    if not console.is_terminal:  # a pipe or a file: do not squeeze the tables into 80 columns
        console.width = 200
    for t in tables:
        header, body, best = table_rows(t)
        console.print(f"\n[bold]{t.title}[/]")
        rt = RichTable()
        for i, h in enumerate(header):
            rt.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        for i, (row, marks) in enumerate(zip(body, best)):
            rt.add_row(*[f"[bold green]{v} *[/]" if m and v else v for v, m in zip(row, marks)],
                       end_section=t.values_per_channel and i == 0)
        console.print(rt)
        console.print(f"[dim]{caption(t)}[/]")
    if problems:
        console.print("\n[bold]runs not in the tables[/]")
        rt = RichTable()
        for col in ("run", "status", "why"):
            rt.add_column(col, overflow="fold")
        for r in problems:
            rt.add_row(str(r.path.relative_to(root)) if r.path != root else ".", r.status,
                       r.note.splitlines()[0] if r.note else "")
        console.print(rt)
