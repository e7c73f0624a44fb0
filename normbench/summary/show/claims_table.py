"""How `normbench summarize` shows the claims' verdicts (verdicts.py): their rows, caption and notes in
Markdown and HTML (every statistic), claims.csv, and the terminal's table, which fits 120 columns (a
`--wide` one has every statistic); report.py puts them first in every format.

    rows = claims_rows(summary); caption = claims_caption(summary); notes = claim_notes(summary)
    family_line(summary)                       # which family and protocol decided the verdicts, one line
    print_claims(summary, console)             # the terminal: compact table, then a short legend and notes
    print_claims(summary, console, wide=True)  # every column of summary.md, and each claim's cells
    lines = markdown_lines(summary); text = to_claims_csv(summary)

A claim's numbers in points for accuracies (its metric's unit otherwise); its verdict with what it rests
on (`held · exact`, `held · t-test`) and the look that decided it or last tested it; beside it P(a > b), each
side's training accuracy and the budget check (budget.py: `stable`, `moving toward a: ...`, `not checkable`).
Why the terminal's table is compact: at 13 columns it was 260-330 characters wide, so a terminal squeezed
the claims' names to nothing; it keeps the estimate, the p that decides, the look and the verdict, drops
its interval and then the look where a terminal is narrower still, and numbers the claims so that the notes
under it name them by number.
"""

from __future__ import annotations

import csv
import io
import json

from normbench.summary import stats
from normbench.summary.claims import MINUS, Claim, ClaimResult
from normbench.summary.protocol import SPENDING
from normbench.summary.types import Summary, fmt_value

LEVEL_TEXT = f"{stats.LEVEL:.0%}"
VERDICT_STYLE = {"held": "bold green", "refuted": "bold red", "inconclusive": "yellow", "exploratory": "dim"}


def _side(c: Claim, sel: dict) -> str:
    """'norm.name=gn batch_size=2 (test_acc)': a side's selector and the metric it reads; a side that
    subtracts a cell: '(norm.name=bn batch_size=2 (test_acc)) − (norm.name=bn batch_size=32 (test_acc))'."""
    own = " ".join(f"{k}={fmt_value(v)}" for k, v in sel.items() if k not in ("metric", MINUS)) + \
        f" ({c.metric_of(sel)})"
    minus = c.minus_of(sel)
    return own if minus is None else f"({own}) − ({_side(c, minus)})"


def hypothesis(c: Claim) -> str:
    """The claim's alternative, as 'a − b > 0', '|a − b| < 1' (in points for accuracies); a side that
    subtracts a cell is written (a − a′): '(a − a′) − (b − b′) < 0', a difference in differences."""
    m = f"{c.margin:g}"
    diff = " − ".join(f"({x} − {x}′)" if MINUS in side else x for x, side in (("a", c.a), ("b", c.b)))
    return f"|{diff}| < {m}" if c.expect == "equivalent" else f"{diff} {'>' if c.expect == 'greater' else '<'} {m}"


def _num(r: ClaimResult, v: float | None, signed: bool = True) -> str:
    if v is None:
        return ""
    v *= r.claim.scale
    return f"{v:+.1f}" if signed else f"{v:.1f}"


def _p(p: float | None) -> str:
    return "" if p is None else f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


CLAIMS_HEADER = ["claim", "role", "hypothesis", "n", "a", "b", f"a − b [{LEVEL_TEXT} t]", "bootstrap", "p", "p (Holm)",
                 "exact p (Holm)", "look (α)", "verdict", "P(a > b)", "train a / b", "budget"]
CLAIMS_COMPACT = [0, 6, 9, 12]  # the columns the HTML's first screen shows (the budget and the rest: below)


def verdict_text(r: ClaimResult) -> str:
    """'held · t-test', 'refuted · exact', 'inconclusive', 'exploratory': the verdict and what it rests on."""
    return r.verdict + (f" · {r.rests_on}" if r.verdict in ("held", "refuted") and r.rests_on else "")


def _improve(r: ClaimResult) -> str:
    """'0.82 [0.52, 1.00]': P(a > b) and its bootstrap interval."""
    if r.p_improve is None:
        return ""
    return f"{r.p_improve:.2f}" + (f" [{r.p_improve_ci[0]:.2f}, {r.p_improve_ci[1]:.2f}]" if r.p_improve_ci else "")


def _train(r: ClaimResult) -> str:
    """'79.1 / 84.0': each side's mean training accuracy, in percent."""
    if r.train_a is None and r.train_b is None:
        return ""
    return " / ".join("–" if v is None else f"{100 * v:.1f}" for v in (r.train_a, r.train_b))


def _look(r: ClaimResult) -> str:
    """'2/3 (0.0052)': the look that decided the claim (or last tested it), of the planned ones, and its α."""
    return "" if r.look is None else f"{r.look}/{r.looks} ({r.level:.2g})"


def claims_rows(s: Summary) -> list[list[str]]:
    rows = []
    for r in s.claims:
        ci = f" [{_num(r, r.ci[0])}, {_num(r, r.ci[1])}]" if r.ci else ""
        boot = f"[{_num(r, r.bootstrap[0])}, {_num(r, r.bootstrap[1])}]" if r.bootstrap else ""
        rows.append([r.claim.name, r.role, hypothesis(r.claim), str(r.n), _num(r, r.mean_a, False),
                     _num(r, r.mean_b, False), _num(r, r.estimate) + ci, boot, _p(r.p), _p(r.p_holm),
                     _p(r.p_exact_holm), _look(r), verdict_text(r), _improve(r), _train(r), r.budget])
    return rows


SPENDING_TEXT = dict(zip(SPENDING, ("O'Brien-Fleming", "Bonferroni")))
DECIDING_P = {"held": "p", "refuted": "p_refute"}  # a stored decision's Holm p that decided it
STORED_CAPTION = ("each look's decisions as the study took them, kept in its study.json; the table above replays the "
                  "looks from the runs with this code")


def family_line(s: Summary) -> str:
    """'family: shipped, protocol.yaml: looks at 3/5/10 pairs, α 0.00035/0.0052/0.044 (O'Brien-Fleming), Holm
    over 42 hypotheses', or a --claims file's 'family: your claims, mine.yaml: one look at every seed, α 0.05,
    Holm over 4 hypotheses': which family and protocol decided the verdicts, in one line."""
    proto = s.protocol or {}
    members = len(proto.get("family", []))
    if not members:
        return "family: none (every claim exploratory: estimates and unadjusted p's, no verdict)"
    where = f"{proto.get('name', 'shipped')}, {proto.get('source', 'protocol.yaml')}"
    levels, alpha, looks = proto.get("levels", []), proto.get("alpha", 0.05), proto.get("looks", [])
    if not looks:
        plan = f"one look at every seed, α {alpha:g}"
    elif len(looks) == 1:
        plan = f"one look at {looks[0]} pairs, α {alpha:g}"
    else:
        spent = SPENDING_TEXT.get(proto.get("spending", ""), proto.get("spending", ""))
        plan = f"looks at {'/'.join(map(str, looks))} pairs, α {'/'.join(f'{a:.2g}' for a in levels)} ({spent})"
    return f"family: {where}: {plan}, Holm over {2 * members} hypotheses"


def claims_caption(s: Summary) -> str:
    """What the full table's columns and verdicts mean (summary.md, summary.html, `--wide`)."""
    scoped = sorted({r.claim.study for r in s.claims if r.claim.study})
    own = (s.protocol or {}).get("name", "shipped") != "shipped"
    source = (f"given by --claims {s.protocol.get('source', '')}" if own else
              f"declared by experiment{'s' * (len(scoped) > 1)} {', '.join(scoped)}" if scoped else
              "declared by the runs' experiments")
    m, primary = len(s.claims), sum(r.role == "primary" for r in s.claims)
    family = ("the shipped studies' primary claims and any other primary claim here (docs/protocol.md; "
              "untested members count with p = 1)" if not own else "this file's own claims, those not marked "
              "exploratory (docs/protocol.md)")
    return (f"{family_line(s)}. {m} claims {source}: per-seed differences a − b (points for accuracies), their "
            f"mean, {LEVEL_TEXT} t-interval and percentile bootstrap (few distinct resamples at n ≤ 5: read the "
            f"t-interval); p: one-sided paired t-test against the margin (TOST for |a − b| < margin). "
            f"{primary} confirmatory claim{'s' * (primary != 1)} (role primary) in the family of {family}: p "
            f"(Holm) over the family's hypotheses (each claim's and its opposite) at the look that decided it or "
            f"last tested it; exact p (Holm): the sign-flip test over the same hypotheses. held / refuted: the "
            f"claim's hypothesis / its opposite below the look's α after Holm, decided for good; · exact: the "
            f"exact test rejects too (no normality needed), · t-test: it rests on the t-test's normality; "
            f"inconclusive: neither yet. exploratory: not in the family, an estimate and an unadjusted p, no "
            f"verdict. P(a > b): the chance a seed's a beats a seed's b (ties half) with its {LEVEL_TEXT} bootstrap "
            f"interval; train a / b: each side's training accuracy (an underfit side shows here); budget: the "
            f"claim's difference on validation accuracy over the last half of the budget, stable when it moved "
            f"less than its last interval's half-width, moving toward the side it moved to otherwise, not "
            f"checkable with fewer than three validations there")


def claim_notes(s: Summary) -> list[str]:
    """Each note once, with the claims it concerns (one note may hold for all), then each claim's cells."""
    by_note: dict[str, list[str]] = {}
    for r in s.claims:
        for note in filter(None, r.note.split("; ")):
            by_note.setdefault(note, []).append(r.claim.name)
    notes = [f"{'every claim' if len(names) == len(s.claims) > 1 else ', '.join(names)}: {note}"
             for note, names in by_note.items()]
    return notes + [f"{r.claim.name}: a = {_side(r.claim, r.claim.a)}; b = {_side(r.claim, r.claim.b)}"
                    for r in s.claims]


def decision_lines(s: Summary) -> list[str]:
    """A study folder's decisions as its looks made them (study.json; [] where none are stored): one line a
    look, its claims decided there with the Holm p that decided each and how many it left open, then one
    line on the replay with this code: it agrees, or where it disagrees."""
    by_look: dict[int, list[dict]] = {}
    for e in (s.decisions or {}).get("stored", []):
        by_look.setdefault(e["look"], []).append(e)
    lines = []
    for look, entries in sorted(by_look.items()):
        said = [f"{e['verdict']}: {e['study']} · {e['name']} (p (Holm) {_p(e[DECIDING_P[e['verdict']]])})"
                for e in entries if e["verdict"] in DECIDING_P]
        if still := sum(e["verdict"] == "inconclusive" for e in entries):
            said.append(f"{still} still open")
        lines.append(f"look {look} (α {entries[0]['level']:.2g}): {'; '.join(said)}")
    differ = (s.decisions or {}).get("disagreements")
    if (s.decisions or {}).get("other_family"):
        lines.append("this summary tests another family than the study's (a claims file of its own?): its "
                     "verdicts are not compared with these")
    elif differ:
        lines.append(f"the replay with this code disagrees with {len(differ)} stored "
                     f"decision{'s' * (len(differ) > 1)}: {'; '.join(differ)}")
    elif lines:
        lines.append("the replay with this code agrees with every stored decision")
    return lines


def to_claims_csv(s: Summary) -> str:
    buf = io.StringIO()
    rows = [r.row() for r in s.claims]
    fields = list(ClaimResult(Claim("", {}, {}, "greater")).row())
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for row in rows:
        w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()})
    return buf.getvalue()


def markdown_lines(s: Summary) -> list[str]:
    """The claims section of summary.md: heading, caption (which family decided first), table, notes."""
    lines = ["## Claims", "", f"_{claims_caption(s)}_", "",
             "| " + " | ".join(CLAIMS_HEADER) + " |", "|" + "---|" * len(CLAIMS_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in claims_rows(s)]
    lines += ["", *[f"- {note}" for note in claim_notes(s)], ""]
    if stored := decision_lines(s):
        lines += ["## Decisions as stored", "", f"_{STORED_CAPTION}_", "", *[f"- {line}" for line in stored], ""]
    return lines


# --- the terminal ------------------------------------------------------------------------------------------

TERMINAL_WIDTH = 120  # the compact table's widest line, whatever the console: a claim's name wraps within it
NAME_WIDTH = (24, 50)  # a claim's name wraps within at most 50 columns; below 24 a column gives way
GAP = 2  # columns between two of the table's columns (collapsed padding and a blank divider)
DROPPED_FIRST = ("95% CI", "look", "n")  # what a narrower terminal loses first, then next


def expects(c: Claim) -> str:
    """The claim's hypothesis on a − b in a few characters: '> 0', '< -1', '|·| < 2'; 'ΔΔ < 0' where a side
    subtracts a cell (a difference in differences)."""
    did = "ΔΔ " if any(MINUS in side for side in (c.a, c.b)) else ""
    m = f"{c.margin:g}"
    return f"{did}|·| < {m}" if c.expect == "equivalent" else f"{did}{'>' if c.expect == 'greater' else '<'} {m}"


def short_verdict(r: ClaimResult) -> str:
    """'held · t-test', 'refuted · exact · moving', 'inconclusive', 'exploratory'."""
    parts = [r.verdict] + ([r.rests_on] if r.verdict in ("held", "refuted") and r.rests_on else [])
    return " · ".join(parts + ["moving"] * (r.budget.startswith("moving") and r.verdict != "exploratory"))


def terminal_columns(s: Summary) -> dict[str, list[str]]:
    """The compact table's columns, header -> one cell per claim: its number, name, pairs, hypothesis,
    estimate, interval, the p that decides (Holm's at its look; an exploratory claim's unadjusted), its look
    (where the protocol plans more than one) and verdict."""
    out: dict[str, list[str]] = {h: [] for h in ("#", "claim", "n", "H1", "a − b", "95% CI", "p", "look", "verdict")}
    for i, r in enumerate(s.claims, 1):
        cells = [str(i), r.claim.name, str(r.n), expects(r.claim), _num(r, r.estimate),
                 f"[{_num(r, r.ci[0])}, {_num(r, r.ci[1])}]" if r.ci else "",
                 _p(r.p if r.role == "exploratory" else r.p_holm), "" if r.look is None else f"{r.look}/{r.looks}",
                 short_verdict(r)]
        for h, v in zip(out, cells):
            out[h].append(v)
    if len((s.protocol or {}).get("looks") or [None]) == 1:  # one look: every claim's would read 1/1
        out.pop("look")
    return out


def fitted(columns: dict[str, list[str]], width: int) -> tuple[dict[str, list[str]], int]:
    """The columns that fit `width` (at most TERMINAL_WIDTH) with a claim's name given its least width
    (DROPPED_FIRST's go first, in order), and the most a name may then take."""
    width = min(width, TERMINAL_WIDTH)
    kept = dict(columns)

    def left() -> int:
        others = sum(max(len(h), *map(len, v)) if v else len(h) for h, v in kept.items() if h != "claim")
        return width - others - GAP * (len(kept) - 1)

    for h in DROPPED_FIRST:
        if left() >= NAME_WIDTH[0]:
            break
        kept.pop(h)
    return kept, max(NAME_WIDTH[0], min(NAME_WIDTH[1], left()))


def _rich_table(header: list[str], rows: list[list[str]], verdicts: list[str], wrap: str, name_width=None):
    """A rich table without vertical rules (each column's gap is spaces), the verdicts coloured; the column
    `wrap` wraps (within `name_width` = (least, most)), every other keeps its line."""
    from rich import box
    from normbench.userfiles import terminal as escape
    from rich.table import Table as RichTable

    t = RichTable(title="claims", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    for h in header:
        least, most = name_width if h == wrap and name_width else (None, None)
        t.add_column(h, justify="left" if h in (wrap, "H1", "verdict", "role", "hypothesis", "budget") else "right",
                     no_wrap=h != wrap, min_width=least, max_width=most, overflow="fold")
    at = header.index("verdict")
    for row, verdict in zip(rows, verdicts):  # a name or an interval is text, never markup
        t.add_row(*(f"[{VERDICT_STYLE[verdict]}]{escape(v)}[/]" if i == at else escape(v) for i, v in enumerate(row)))
    return t


def legend_lines(s: Summary, shown: list[str]) -> list[str]:
    """The compact table's legend, a few short lines: the family, then what the columns shown and the
    verdicts say, then where the rest is."""
    interval = f" [{LEVEL_TEXT} t-interval]" * ("95% CI" in shown)
    lines = [family_line(s), f"a − b: per-seed differences, mean{interval}, in points for accuracies; H1: the "
             "claim's hypothesis on it"]
    if any(MINUS in side for r in s.claims for side in (r.claim.a, r.claim.b)):
        lines.append("ΔΔ: a difference in differences, (a − a′) − (b − b′): each side less a cell of its own")
    lines.append("p: one-sided t-test (TOST for |·| <), Holm-adjusted over the family; exploratory: unadjusted")
    if "look" in shown:
        lines.append("look r/K: the look of K planned that decided the claim, or last tested it")
    lines.append("held / refuted: H1 / its opposite below the look's α after Holm; inconclusive: neither yet; "
                 "exploratory: no verdict")
    lines.append("· exact: the sign-flip test rejects too; · t-test: it rests on normality")
    if any(r.budget.startswith("moving") and r.verdict != "exploratory" for r in s.claims):
        lines.append("· moving: its difference on validation still moved over the budget's last half")
    lines.append("--wide and summary.md: every statistic (exact p, P(a > b), training accuracy, budget) and each "
                 "claim's cells")
    return lines


def numbered_notes(s: Summary, cells: bool = False) -> list[str]:
    """claim_notes with the claims named by their number in the terminal's table ('3, 5: ...'); with `cells`,
    each claim's cells too."""
    number = {id(r): i for i, r in enumerate(s.claims, 1)}
    by_note: dict[str, list[int]] = {}
    for r in s.claims:
        for note in filter(None, r.note.split("; ")):
            by_note.setdefault(note, []).append(number[id(r)])
    notes = [f"{'every claim' if len(ns) == len(s.claims) > 1 else ', '.join(map(str, ns))}: {note}"
             for note, ns in by_note.items()]
    return notes + [f"{number[id(r)]}: a = {_side(r.claim, r.claim.a)}; b = {_side(r.claim, r.claim.b)}"
                    for r in s.claims] * cells


def print_claims(s: Summary, console, wide: bool = False) -> None:
    """The claims in the terminal (rich): the compact table (numbered; its widest line TERMINAL_WIDTH or the
    console's width), its verdicts coloured, then the legend and the notes dimmed. `wide`: summary.md's
    every column at its natural width (wider than a terminal: the lines run on), its caption, and each
    claim's cells."""
    from normbench.userfiles import terminal as escape

    verdicts = [r.verdict for r in s.claims]
    if wide:
        header = ["#", *CLAIMS_HEADER]
        rows = [[str(i), *row] for i, row in enumerate(claims_rows(s), 1)]
        _print_unsqueezed(console, _rich_table(header, rows, verdicts, "claim", NAME_WIDTH))
        console.print(f"[dim]{escape(claims_caption(s))}[/]")
    else:
        columns, name_width = fitted(terminal_columns(s), console.width)
        rows = [list(row) for row in zip(*columns.values())]
        console.print(_rich_table(list(columns), rows, verdicts, "claim", (NAME_WIDTH[0], name_width)))
        for line in legend_lines(s, list(columns)):
            console.print(f"[dim]{escape(line)}[/]")
    for note in numbered_notes(s, cells=wide):
        console.print(f"[dim]- {escape(note)}[/]")
    if stored := decision_lines(s):
        console.print(f"\n[bold]decisions as stored[/] [dim]({STORED_CAPTION})[/]")
        for line in stored[:-1]:
            console.print(f"[dim]{escape(line)}[/]")
        console.print(escape(stored[-1]), style="bold red" if s.decisions["disagreements"] else "dim")


def _print_unsqueezed(console, table) -> None:
    """Print `table` at its natural width, however narrow the console: a wide view's lines run on rather
    than squeezing its columns to nothing."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    width = console.width
    console.width = max(width, natural)
    try:
        console.print(table, crop=False)
    finally:
        console.width = width
