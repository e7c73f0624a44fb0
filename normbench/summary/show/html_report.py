"""summary.html: one self-contained page a reviewer can open from a file or an e-mail attachment.

    html = to_html(summary, {"sweep_fashion_mnist": "<svg ...>"})

Answers first: the claims' verdicts beside the main figure (the first screen of a 1400 x 900 window), the
claims in full with their forest plot, one line per table saying what it shows; then the tables with their
intervals, the paired comparisons, the figures as inline SVG, the runs that are not in the tables, what
varied in the sweep, the versions and the command lines. Inline CSS only, no
JavaScript, nothing fetched from the network.
"""

from __future__ import annotations

from collections import Counter
from html import escape

from normbench.config import flatten
from normbench.summary.show import report
from normbench.summary.show.claims_table import CLAIMS_COMPACT, CLAIMS_HEADER, claim_notes, claims_caption, claims_rows
from normbench.summary.types import Summary, relative

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1320px;
       padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6rem 0; font-variant-numeric: tabular-nums; }
th, td { padding: .25rem .6rem; border-bottom: 1px solid #e4e4e4; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f3f3f5; }
td.best { font-weight: 700; background: #eaf6ea; }
tr.vpc td { color: #666; font-style: italic; }
tr.higher td { background: #eaf6ea; } tr.lower td { background: #fbeaea; }
.caption { color: #555; font-size: .85rem; max-width: 70rem; }
figure { margin: 1rem 0; } figure svg { max-width: 100%; height: auto; }
code, pre { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; background: #f6f6f8; }
pre { padding: .6rem; overflow-x: auto; white-space: pre-wrap; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dl.kv dt { font-weight: 600; }
div.first { display: grid; grid-template-columns: minmax(0, 1.25fr) minmax(0, 1fr); gap: 1.5rem; align-items: start; }
div.first table { font-size: 11.5px; line-height: 1.25; }
div.first th, div.first td { padding: .1rem .35rem; white-space: nowrap; }
div.first td:first-child { white-space: normal; }
div.first h2 { margin-top: .4rem; } div.first figure { margin: 0; }
td.v-held { color: #1b5e20; font-weight: 700; } td.v-refuted { color: #b71c1c; font-weight: 700; }
td.v-inconclusive { color: #8d6e00; } td.v-exploratory { color: #616161; }
"""


def _table(header: list[str], body: list[list[str]], classes: list[list[str]] | None = None,
           row_classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    rows = []
    for i, row in enumerate(body):
        cls = classes[i] if classes else [""] * len(row)
        tr = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        rows.append(f"<tr{tr}>" + "".join(f'<td class="{c}">{escape(v)}</td>' if c else f"<td>{escape(v)}</td>"
                                          for v, c in zip(row, cls)) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _results_table(t) -> str:
    header, body, best = report.table_rows(t)
    classes = [["best" if m and v else "" for v, m in zip(row, marks)] for row, marks in zip(body, best)]
    row_classes = ["vpc" if t.values_per_channel and i == 0 else "" for i in range(len(body))]
    return _table(header, body, classes, row_classes)


def _paired_table(t) -> str:
    rows = report.paired_rows(t)
    kinds = [("higher" if c.result.mean > 0 else "lower") if c.significant else "" for c in t.comparisons]
    return _table(report.paired_header(t), rows, row_classes=kinds)


def _commands(s: Summary) -> list[str]:
    """The sweeps' command lines (multirun.yaml), else each distinct run's (.hydra/overrides.yaml)."""
    import yaml

    sweeps = []
    for path in sorted(s.root.rglob("multirun.yaml")):
        try:
            overrides = yaml.safe_load(path.read_text())["hydra"]["overrides"]
        except (yaml.YAMLError, KeyError, TypeError):
            continue
        hydra = [str(o) for o in overrides.get("hydra") or [] if not str(o).startswith("hydra.mode=")]
        sweeps.append("normbench train -m " + " ".join([*hydra, *(str(o) for o in overrides.get("task") or [])]))
    if sweeps:
        return sweeps
    return list(dict.fromkeys("normbench train " + " ".join(r.overrides) for r in s.runs if r.overrides))


def _versions(s: Summary) -> list[tuple[str, str]]:
    counts: Counter = Counter()
    for r in s.runs:
        for k, v in flatten(r.results.get("versions") or {}).items():
            counts[k, str(v)] += 1
        if r.results.get("git_sha"):
            counts["git commit", r.results["git_sha"]] += 1
    by_key: dict[str, list[str]] = {}
    for (k, v), n in sorted(counts.items()):
        by_key.setdefault(k, []).append(f"{v} ({n} run{'s' * (n != 1)})")
    return [(k, ", ".join(v)) for k, v in by_key.items()]


def _claims(s: Summary, svgs: dict[str, str]) -> list[str]:
    """The first screen: the claims' verdicts (compact) beside the main figure; then the claims in full and
    their forest plot."""
    main = next((name for name in svgs if name != "claims"), None)
    compact = [[row[i] for i in CLAIMS_COMPACT] for row in claims_rows(s)]
    verdicts = [r.verdict for r in s.claims]
    tally = ", ".join(f"{verdicts.count(v)} {v}" for v in ("held", "refuted", "inconclusive", "exploratory")
                      if v != "exploratory" or v in verdicts)
    left = (f"<h2>Claims: {escape(tally)}</h2>" + _table([CLAIMS_HEADER[i] for i in CLAIMS_COMPACT],
                                                         compact, [["", "", "", f"v-{v}"] for v in verdicts])
            + "<p class=\"caption\">a − b in points; primary claims held / refuted / inconclusive after Holm over the "
              "declared family at a planned look (docs/protocol.md), exploratory ones estimated only; the "
              "full table, the tests and the forest plot follow</p>")
    right = f"<figure id=\"{escape(main)}\">{svgs[main]}</figure>" if main else ""
    parts = [f"<div class=\"first\"><div>{left}</div><div>{right}</div></div>",
             "<h2>Claims in full</h2>" + _table(CLAIMS_HEADER, claims_rows(s),
                                                 [[""] * (len(CLAIMS_HEADER) - 1) + [f"v-{r.verdict}"]
                                                  for r in s.claims]),
             f"<p class=\"caption\">{escape(claims_caption(s))}</p>",
             "<ul class=\"caption\">" + "".join(f"<li>{escape(n)}</li>" for n in claim_notes(s)) + "</ul>"]
    if "claims" in svgs:
        parts.append(f"<figure id=\"claims\">{svgs['claims']}</figure>")
    return parts


def to_html(s: Summary, svgs: dict[str, str]) -> str:
    status = ", ".join(f"{n} {k}" for k, n in Counter(r.status for r in s.runs).most_common())
    parts = [f"<h1>normbench summary of <code>{escape(str(s.root))}</code></h1>",
             f"<p>{len(s.runs)} runs: {escape(status)}. Reference norm for paired comparisons: <b>{escape(s.ref)}</b>.</p>"]
    shown = dict(svgs)
    if s.claims:
        parts += _claims(s, svgs)
        shown.pop("claims", None)
        shown.pop(next((n for n in svgs if n != "claims"), None), None)  # already on the first screen
    if s.tables:
        parts.append("<h2>What the tables show</h2><ol>" + "".join(
            f"<li><a href=\"#{escape(t.slug)}\">{escape(report.table_line(t))}</a></li>" for t in s.tables) + "</ol>"
            f"<p class=\"caption\">{escape(report.caption(s.tables))}</p>"
            + (f"<p class=\"caption\">{escape(report.paired_caption())}</p>" if any(t.comparisons for t in s.tables)
               else ""))
    parts.append("<h2>What varied</h2><dl class=\"kv\">" + "".join(
        f"<dt>{escape(k)}</dt><dd>{escape(', '.join(v))}</dd>" for k, v in s.varied.items()) + "</dl>")
    if s.constant:
        parts.append("<p class=\"caption\">fixed in every run, not at the default: " + escape(
            " ".join(f"{k}={v}" for k, v in s.constant.items())) + "</p>")
    for t in s.tables:
        parts.append(f"<h2 id=\"{escape(t.slug)}\">{escape(t.title)}</h2>{_results_table(t)}")
        for note in t.notes:
            if not note.startswith(report.INDEX_NOTES):
                parts.append(f"<p class=\"caption\">{escape(note)}</p>")
        if t.comparisons:
            parts.append(f"<h3>paired vs {escape(str(t.ref))}</h3>{_paired_table(t)}")
        elif t.ref is None:
            parts.append(f"<p class=\"caption\">no paired comparisons: the reference {escape(s.ref)} is not in "
                         "this table (choose another with --ref)</p>")
    if shown:
        parts.append("<h2>Figures</h2>" + "".join(f"<figure id=\"{escape(name)}\">{svg}<figcaption class=\"caption\">"
                                                  f"{escape(name)}</figcaption></figure>" for name, svg in shown.items()))
    if s.extensions:
        parts.append("<h2>Grids to widen</h2><p class=\"caption\">a cell chose the edge of its grid; this trains "
                     "the next value there</p>" + "".join(f"<pre>{escape(c)}</pre>" for c in s.extensions))
    if s.problems:
        parts.append("<h2>Runs not in the tables (failed, diverged, incomplete)</h2>" + _table(
            ["run", "status", "why"],
            [[relative(r.path, s.root), r.status, r.note.splitlines()[0] if r.note else ""] for r in s.problems]))
    commands = _commands(s)
    parts.append("<h2>Command lines</h2>" + "".join(f"<pre>{escape(c)}</pre>" for c in commands[:20]))
    if len(commands) > 20:
        parts.append(f"<p class=\"caption\">and {len(commands) - 20} more</p>")
    parts.append("<h2>Versions</h2><dl class=\"kv\">" + "".join(
        f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in _versions(s)) + "</dl>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>normbench summary · {escape(s.root.name)}</title><style>{CSS}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")
