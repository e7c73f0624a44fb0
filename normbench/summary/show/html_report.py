"""summary.html: one self-contained page a reviewer can open from a file or an e-mail attachment.

    html = to_html(summary, {"sweep_fashion_mnist": "<svg ...>"})

Answers first: the claims' verdicts beside the main figure (the first screen of a 1400 x 900 window), the
claims in full with their forest plot, one line per table saying what it shows; then the tables with their
intervals, the paired comparisons, the figures as inline SVG, the runs that are not in the tables, what
varied in the sweep, the versions and the command lines. Inline CSS only, no
JavaScript, nothing fetched from the network.

The page's markup is templates/report.html.j2 (Jinja2, autoescaped: every text from a run is escaped where
it is written); this module gathers what the page shows, as plain strings, and marks the figures' SVG as
markup.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from normbench.config import flatten
from normbench.summary.show import report
from normbench.summary.show.claims_table import CLAIMS_COMPACT, CLAIMS_HEADER, claim_notes, claims_caption, claims_rows
from normbench.summary.types import Summary, relative

COMMANDS_SHOWN = 20  # command lines written out; the rest are counted


@dataclass
class HtmlTable:
    """A table as the template writes it: its header, and each row's class with its (text, class) cells."""
    header: list[str]
    rows: list[tuple[str, list[tuple[str, str]]]]


def _table(header: list[str], body: list[list[str]], classes: list[list[str]] | None = None,
           row_classes: list[str] | None = None) -> HtmlTable:
    """An HtmlTable of text rows, with a class per cell (`classes`) and per row (`row_classes`), "" for none."""
    rows = []
    for i, row in enumerate(body):
        cls = classes[i] if classes else [""] * len(row)
        rows.append((row_classes[i] if row_classes else "", list(zip(row, cls))))
    return HtmlTable(header, rows)


def _results_table(t) -> HtmlTable:
    header, body, best = report.table_rows(t)
    classes = [["best" if m and v else "" for v, m in zip(row, marks)] for row, marks in zip(body, best)]
    row_classes = ["vpc" if t.values_per_channel and i == 0 else "" for i in range(len(body))]
    return _table(header, body, classes, row_classes)


def _paired_table(t) -> HtmlTable:
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


def _claims(s: Summary, svgs: dict[str, str]) -> dict:
    """The first screen: the claims' verdicts (compact) beside the main figure; then the claims in full and
    their forest plot."""
    main = next((name for name in svgs if name != "claims"), None)
    compact = [[row[i] for i in CLAIMS_COMPACT] for row in claims_rows(s)]
    verdicts = [r.verdict for r in s.claims]
    tally = ", ".join(f"{verdicts.count(v)} {v}" for v in ("held", "refuted", "inconclusive", "exploratory")
                      if v != "exploratory" or v in verdicts)
    return {"tally": tally,
            "compact": _table([CLAIMS_HEADER[i] for i in CLAIMS_COMPACT], compact,
                              [["", "", "", f"v-{v}"] for v in verdicts]),
            "main": {"name": main, "svg": Markup(svgs[main])} if main else None,
            "full": _table(CLAIMS_HEADER, claims_rows(s),
                           [[f"v-{r.verdict}" if h == "verdict" else "" for h in CLAIMS_HEADER] for r in s.claims]),
            "caption": claims_caption(s), "notes": claim_notes(s),
            "forest": Markup(svgs["claims"]) if "claims" in svgs else None}


def _index(s: Summary) -> dict | None:
    """What the tables show: a line per table, linked to it, and what their cells mean."""
    if not s.tables:
        return None
    return {"lines": [(t.slug, report.table_line(t)) for t in s.tables], "caption": report.caption(s.tables),
            "paired_caption": report.paired_caption() if any(t.comparisons for t in s.tables) else ""}


def _tables(s: Summary) -> list[dict]:
    """Each table with the notes said under it and its paired comparisons."""
    return [{"slug": t.slug, "title": t.title, "results": _results_table(t), "ref": t.ref,
             "notes": [note for note in t.notes if not note.startswith(report.INDEX_NOTES)],
             "paired": _paired_table(t) if t.comparisons else None} for t in s.tables]


def _figures(s: Summary, svgs: dict[str, str]) -> list[tuple[str, Markup]]:
    """The figures the first screen does not already show."""
    shown = dict(svgs)
    if s.claims:
        shown.pop("claims", None)
        shown.pop(next((n for n in svgs if n != "claims"), None), None)
    return [(name, Markup(svg)) for name, svg in shown.items()]


def _problems(s: Summary) -> HtmlTable | None:
    """The runs not in the tables: failed, diverged, incomplete, with the first line of why."""
    if not s.problems:
        return None
    return _table(["run", "status", "why"], [[relative(r.path, s.root), r.status,
                                              r.note.splitlines()[0] if r.note else ""] for r in s.problems])


def page(s: Summary, svgs: dict[str, str]) -> dict:
    """What the template writes, by name: strings, (text, class) tables and the figures as markup."""
    commands = _commands(s)
    return {"title": s.root.name, "root": str(s.root), "n_runs": len(s.runs), "ref": s.ref,
            "status": ", ".join(f"{n} {k}" for k, n in Counter(r.status for r in s.runs).most_common()),
            "claims": _claims(s, svgs) if s.claims else None, "index": _index(s),
            "varied": [(k, ", ".join(v)) for k, v in s.varied.items()],
            "constant": " ".join(f"{k}={v}" for k, v in s.constant.items()),
            "tables": _tables(s), "figures": _figures(s, svgs), "extensions": s.extensions,
            "problems": _problems(s), "commands": commands[:COMMANDS_SHOWN],
            "more_commands": max(0, len(commands) - COMMANDS_SHOWN), "versions": _versions(s)}


@cache
def _template():
    """templates/report.html.j2, loaded once; autoescaped whatever its file's name (.j2) says: it is HTML."""
    env = Environment(loader=PackageLoader("normbench.summary.show", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined)
    return env.get_template("report.html.j2")


def to_html(s: Summary, svgs: dict[str, str]) -> str:
    """summary.html of `s`, with `svgs` (name -> an <svg> element) as its figures."""
    return _template().render(page(s, svgs))
