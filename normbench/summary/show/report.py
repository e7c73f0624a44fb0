"""How `normbench summarize` shows a `Summary` as text: in the terminal (rich), as Markdown, CSV and JSON.

    header, body, best = table_rows(table)         # the same cells for every text format
    print_summary(summary); text = to_markdown(summary, figures)

The claims, which open every format, are claims_table.py's; this module shows the rest.

Accuracies in percent: mean [95% t-interval] over seeds; (n) where n < 3 or differs from the table's
usual n; †k / ✗k for k diverged / failed runs in that cell (never in the mean). Bold: the top mean of a
column and every norm not significantly below it. Paired comparisons in percentage points.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from pathlib import Path

from normbench.summary import stats
from normbench.summary.show import claims_table
from normbench.summary.types import MIN_N, Comparison, Entry, Summary, Table, fmt_value, relative

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


def usual_n(cells) -> int | None:
    """The most common seed count among `cells` (Entry or None): what format_cell leaves unmarked."""
    counts = Counter(c.n for c in cells if c is not None and c.n)
    return counts.most_common(1)[0][0] if counts else None


def uniform_n(t: Table) -> int | None:
    return usual_n(t.cells.values())


def values_per_channel(t: Table, col: str) -> str:
    seen = t.column_values_per_channel(col)
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


def caption(tables: list[Table]) -> str:
    """What every table's cells mean, said once for all of them."""
    vpc = "; values/channel: the fewest values a norm layer's per-channel statistics see" \
        if any(t.values_per_channel for t in tables) else ""
    return (f"accuracy in %, mean [{LEVEL_TEXT} t-interval] over the seeds the index gives, (n) where a cell has "
            f"another count (marked when n < {MIN_N}); bold (* in the terminal): the best mean of its column and every "
            f"norm not significantly below it (paired t-test, Holm over the table, α = 0.05); †k: k runs diverged, "
            f"✗k: k failed (not in the mean){vpc}")


INDEX_NOTES = ("budget: ",)  # said in the table's index line, not under the table


def table_line(t: Table) -> str:
    """One line saying what a table shows: its cells, seeds and budget."""
    n = uniform_n(t)
    index = "; ".join(note.removeprefix("budget: ") for note in t.notes if note.startswith(INDEX_NOTES))
    what = f"{len(t.rows)} norm setting{'s' * (len(t.rows) != 1)} × {len(t.cols)} {t.axis.split(' (')[0]}" \
           f"{'s' * (len(t.cols) != 1)}, {n or 0} seed{'s' * (n != 1)}"
    tests = f", {len(t.comparisons)} paired tests vs {t.ref}" if t.comparisons else ""
    return f"{t.title}: {what}{tests}" + (f"; {index}" if index else "")


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


def paired_caption() -> str:
    return (f"paired tables: per-seed difference norm − reference (same data split and batch order) in percentage "
            f"points, its mean and {LEVEL_TEXT} t-interval, a two-sided paired t-test, Holm-corrected over its table")


def sweep_lines(s: Summary) -> list[str]:
    varied = [f"{k} ∈ {{{', '.join(v)}}}" for k, v in s.varied.items()]
    constant = [f"{k}={v}" for k, v in s.constant.items()]
    return [f"varied: {'; '.join(varied) or 'nothing'}", f"fixed (not defaults): {' '.join(constant) or 'nothing'}",
            *cost_lines(s)]


def cost_lines(s: Summary) -> list[str]:
    """Where each study's time went (runs.costs): one line per study."""
    lines = []
    for study, c in s.costs.items():
        wall = c["wall_s"] or 1.0
        lines.append(f"time, {study}: {c['runs']} runs in {c['computations']} computations, {c['wall_s']:,.0f} s = "
                     f"training {c['train_s']:,.0f} s ({c['train_s'] / wall:.0%}) + evaluation {c['eval_s']:,.0f} s "
                     f"({c['eval_s'] / wall:.0%}) + other {c['other_s']:,.0f} s ({c['other_s'] / wall:.0%})")
    return lines


LR_CAPTION = ("test accuracy % by lr, mean [95% t-interval] over seeds (a diverged run counts at chance, 10%); "
              "sensitivity: the mean over the grid of the best accuracy minus the accuracy at each lr, per seed, "
              "in points, mean [95% t-interval] (Wortsman et al. 2023, on accuracy): 0 = every lr trains as well; "
              "(n): a cell over another number of seeds than the table's, or fewer than 3")


def lr_rows(s: Summary) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) per group of lr curves (study, data, model, batch): a row per norm label."""
    groups: dict[str, list] = {}
    for c in s.lr_curves:
        groups.setdefault(c.title, []).append(c)
    out = []
    for title, curves in groups.items():
        lrs = sorted({lr for c in curves for lr in c.lrs})
        usual = usual_n(cell for c in curves for cell in c.cells.values())  # "(n)" only where another count
        header = ["norm", *[f"lr={fmt_value(lr)}" for lr in lrs], "sensitivity (points)"]
        rows = []
        for c in sorted(curves, key=lambda c: c.sensitivity.mean if c.sensitivity.mean is not None else 1e9):
            cells = [format_cell(c.cells.get(lr), usual) + (f" ({c.diverged[lr]} diverged)" if c.diverged.get(lr)
                                                          else "") for lr in lrs]
            sens = c.sensitivity
            lo, hi = sens.ci or (None, None)
            text = "" if sens.mean is None else f"{100 * sens.mean:.1f}" + (
                f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None else "") + f" n={sens.n}"
            rows.append([c.label, *cells, text])
        out.append((title, header, rows))
    return out


RAW_HTML = re.compile(r"<(?=[A-Za-z/!?])")  # where CommonMark starts raw HTML (a tag, a comment)


def to_markdown(s: Summary, figures: dict[str, Path] | None = None) -> str:
    lines = [f"# normbench summary of `{s.root}`", "", *[f"- {line}" for line in sweep_lines(s)], ""]
    figures = dict(figures or {})
    if s.claims:
        lines += claims_table.markdown_lines(s)
        if "claims" in figures:
            lines += [f"![claims]({figures.pop('claims').name})", ""]
    if s.tables:
        lines += ["## What the tables show", "", *[f"{i}. {table_line(t)}" for i, t in enumerate(s.tables, 1)], "",
                  f"_{caption(s.tables)}_", ""]
        if any(t.comparisons for t in s.tables):
            lines += [f"_{paired_caption()}_", ""]
    for t in s.tables:
        header, body, best = table_rows(t)
        lines += [f"## {t.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row, marks in zip(body, best):
            lines.append("| " + " | ".join(f"**{v}**" if m and v else v for v, m in zip(row, marks)) + " |")
        lines += [f"_{note}_" for note in t.notes if not note.startswith(INDEX_NOTES)] + [""]
        if t.comparisons:
            head = paired_header(t)
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(row) + " |" for row in paired_rows(t)]
            lines.append("")
    if s.lr_curves:
        lines += ["## Learning-rate sensitivity", "", f"_{LR_CAPTION}_", ""]
        for title, header, rows in lr_rows(s):
            lines += [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows] + [""]
    if s.extensions:
        lines += ["## Grids to widen", "", "A cell chose the edge of its grid; this trains the next value there:", "",
                  "```", *s.extensions, "```", ""]
    if s.duplicates:
        lines += [s.duplicates_line, ""]
    if s.problems:
        lines += ["## Runs not in the tables", "", "| run | status | why |", "|---|---|---|"]
        lines += [f"| `{relative(r.path, s.root)}` | {r.status} | "
                  f"{r.note.replace('|', '/').splitlines()[0] if r.note else ''} |" for r in s.problems]
        lines.append("")
    lines += [f"![{name}]({path.name})" for name, path in figures.items()]
    # no raw HTML from a run's fields: a tag's '<' becomes text ('a − b < 0' stays as it is)
    return RAW_HTML.sub("&lt;", "\n".join(lines)) + "\n"


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
               "values_per_channel": t.column_values_per_channel(c) or None}
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
        "duplicates": [{"path": str(r.path), "note": r.note} for r in s.duplicates],
        "claims": [r.row() for r in s.claims], "protocol": s.protocol, "decisions": s.decisions,
        "extensions": s.extensions, "costs": s.costs,
        "lr_sensitivity": [{"study": c.study, "data": c.data, "model": c.model, "norm": c.label,
                            "batch_size": c.batch_size, "lrs": c.lrs,
                            "acc": {str(lr): {"mean": e.mean, "ci": e.ci, "values": e.values, "seeds": e.seeds}
                                    for lr, e in c.cells.items()},
                            "diverged": {str(lr): n for lr, n in c.diverged.items()},
                            "sensitivity": {"mean": c.sensitivity.mean, "ci": c.sensitivity.ci,
                                            "values": c.sensitivity.values, "seeds": c.sensitivity.seeds}}
                           for c in s.lr_curves],
    }, indent=2, default=str) + "\n"


def print_summary(s: Summary, console=None, wide: bool = False) -> None:
    """The summary in the terminal: the sweep, the claims (claims_table.print_claims: a table that fits 120
    columns, or with `wide` every statistic), the tables, lr sensitivity, grids to widen, the runs apart."""
    from rich.console import Console
    from normbench.userfiles import terminal as escape
    from rich.table import Table as RichTable

    console = console or Console()  # every text below from the runs is escaped: a run's "[/]" is text
    if not console.is_terminal:  # a pipe or a file: do not squeeze the tables into 80 columns
        console.width = 200
    for line in sweep_lines(s):
        console.print(f"[dim]{escape(line)}[/]")
    if s.claims:  # the answers first
        claims_table.print_claims(s, console, wide=wide)
    if s.tables:
        console.print("\n[bold]tables[/]")
        for i, t in enumerate(s.tables, 1):
            console.print(f"{i}. {escape(table_line(t))}")
        console.print(f"[dim]{caption(s.tables)}[/]")
        if any(t.comparisons for t in s.tables):
            console.print(f"[dim]{paired_caption()}[/]")
    for i, t in enumerate(s.tables, 1):
        header, body, best = table_rows(t)
        console.print(f"\n[bold]{i}. {escape(t.title)}[/]")
        rt = RichTable()
        for j, h in enumerate(header):
            rt.add_column(escape(h), justify="left" if j == 0 else "right", no_wrap=True)
        for j, (row, marks) in enumerate(zip(body, best)):
            rt.add_row(*[f"[bold green]{escape(v)} *[/]" if m and v else escape(v) for v, m in zip(row, marks)],
                       end_section=bool(t.values_per_channel) and j == 0)
        console.print(rt)
        for note in t.notes:
            if not note.startswith(INDEX_NOTES):
                console.print(f"[dim]{escape(note)}[/]")
        if t.comparisons:
            pt = RichTable(title=f"paired vs {t.ref}", title_justify="left")
            for j, h in enumerate(paired_header(t)):
                pt.add_column(h, justify="left" if j in (0, 7) else "right", no_wrap=True)
            for row, c in zip(paired_rows(t), t.comparisons):
                style = "green" if c.significant and c.result.mean > 0 else "red" if c.significant else None
                pt.add_row(*map(escape, row), style=style)
            console.print(pt)
    if s.lr_curves:
        console.print("\n[bold]learning-rate sensitivity[/]")
        console.print(f"[dim]{LR_CAPTION}[/]")
        for title, header, rows in lr_rows(s):
            lt = RichTable(title=escape(title), title_justify="left")
            for j, h in enumerate(header):
                lt.add_column(escape(h), justify="left" if j == 0 else "right", no_wrap=True)
            for row in rows:
                lt.add_row(*map(escape, row))
            console.print(lt)
    if s.extensions:
        console.print("\n[bold]grids to widen[/] (a cell chose the edge of its grid; this trains the next value):")
        for command in s.extensions:
            console.print(command, soft_wrap=True, markup=False, highlight=False)
    if s.duplicates:
        console.print("\n" + s.duplicates_line, markup=False, highlight=False)
    if s.problems:
        console.print("\n[bold]runs not in the tables[/]")
        rt = RichTable()
        for col in ("run", "status", "why"):
            rt.add_column(col, overflow="fold")
        for r in s.problems:
            rt.add_row(escape(relative(r.path, s.root)), r.status, escape(r.note.splitlines()[0]) if r.note else "")
        console.print(rt)
