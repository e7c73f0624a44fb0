"""How `normbench summarize` shows the claims' verdicts (verdicts.py): their rows, caption and notes, the
same in the terminal, Markdown and HTML, and claims.csv; report.py puts them first in every format.

    rows = claims_rows(summary); caption = claims_caption(summary); notes = claim_notes(summary)
    print_claims(summary, console); lines = markdown_lines(summary); text = to_claims_csv(summary)

A claim's numbers in points for accuracies (its metric's unit otherwise); its verdict with what it rests
on (`held · exact`, `held · t-test`, `budget-limited`) and the look that decided it or last tested it.
"""

from __future__ import annotations

import csv
import io
import json

from normbench.summary import stats
from normbench.summary.claims import MINUS, Claim, ClaimResult
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
                 "exact p (Holm)", "look (α)", "verdict"]
CLAIMS_COMPACT = [0, 6, 9, 12]  # the columns the HTML's first screen shows


def verdict_text(r: ClaimResult) -> str:
    """'held · t-test', 'refuted · exact, budget-limited', 'inconclusive', 'exploratory': the verdict and
    what it rests on."""
    rests = [r.rests_on] if r.verdict in ("held", "refuted") and r.rests_on else []
    rests += ["budget-limited"] * bool(r.budget_limited and r.verdict != "exploratory")
    return r.verdict + (f" · {', '.join(rests)}" if rests else "")


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
                     _p(r.p_exact_holm), _look(r), verdict_text(r)])
    return rows


def claims_caption(s: Summary) -> str:
    scoped = sorted({r.claim.study for r in s.claims if r.claim.study})
    source = f"declared by experiment{'s' * (len(scoped) > 1)} {', '.join(scoped)}" if scoped else "given by --claims"
    m, primary = len(s.claims), sum(r.role == "primary" for r in s.claims)
    proto = s.protocol or {}
    family = len(proto.get("family", []))
    looks = ", ".join(f"{n} pairs at α {a:.2g}" for n, a in zip(proto.get("looks", []), proto.get("levels", [])))
    return (f"{m} claims {source}: per-seed differences a − b (points for accuracies), their mean, {LEVEL_TEXT} "
            f"t-interval and percentile bootstrap (few distinct resamples at n ≤ 5: read the t-interval); p: "
            f"one-sided paired t-test against the margin (TOST for |a − b| < margin). {primary} primary claim"
            f"{'s' * (primary != 1)} belong{'s' * (primary == 1)} to the confirmatory family of {family} claims "
            f"(docs/protocol.md; untested members count with p = 1), tested at planned looks ({looks}; "
            f"{proto.get('spending', '').replace('_', '-')} spending of α = {proto.get('alpha', 0.05):g}): p (Holm) "
            f"over the family's {2 * family} hypotheses (each claim's and its opposite) at the look that decided "
            f"it or last tested it; exact p (Holm): the sign-flip test over the same hypotheses. held / refuted: "
            f"the claim's hypothesis / its opposite below the look's α after Holm, decided for good; · exact: the "
            f"exact test rejects too (no normality needed), · t-test: it rests on the t-test's normality; "
            f"budget-limited: a run it reads had not plateaued; inconclusive: neither yet. exploratory: not in the "
            f"family, an estimate and an unadjusted p, no verdict")


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
    """The claims section of summary.md: heading, caption, table, notes."""
    lines = ["## Claims", "", f"_{claims_caption(s)}_", "", "| " + " | ".join(CLAIMS_HEADER) + " |",
             "|" + "---|" * len(CLAIMS_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in claims_rows(s)]
    return lines + ["", *[f"- {note}" for note in claim_notes(s)], ""]


def print_claims(s: Summary, console) -> None:
    """The claims in the terminal (rich): the table, its verdicts coloured, the caption and notes dimmed."""
    from rich.table import Table as RichTable

    ct = RichTable(title="claims", title_justify="left")
    for i, h in enumerate(CLAIMS_HEADER):
        ct.add_column(h, justify="left" if i in (0, 1, 2, len(CLAIMS_HEADER) - 1) else "right", no_wrap=i != 0)
    for r, row in zip(s.claims, claims_rows(s)):
        ct.add_row(*row[:-1], f"[{VERDICT_STYLE[r.verdict]}]{row[-1]}[/]")
    console.print(ct)
    console.print(f"[dim]{claims_caption(s)}[/]")
    for note in claim_notes(s):
        console.print(f"[dim]- {note}[/]")
