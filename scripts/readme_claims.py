"""The README's answer and docs/results/README.md, generated: the shipped experiments' declared claims with
the verdicts of the run checked into docs/results/ (its summary.json, with the git sha, command and wall
time in run.json), and each study's test-accuracy tables from its docs/results/<study>/summary.md.

    python scripts/readme_claims.py --record outputs/reproduce   # after `normbench study all`: check the run in
    python scripts/readme_claims.py                              # rewrite the generated sections from it
    python scripts/readme_claims.py --check                      # exit 1 if a section or a summary disagrees

README.md's `<!-- claims:begin -->` ... `<!-- claims:end -->` section is the primary claims (`role: primary` in
normbench/configs/experiment/*.yaml: the confirmatory family of docs/protocol.md) with their verdicts, each
with the model of the runs it reads (summary.json's models), the estimate its deciding look tested
(look_estimate, look_ci_*), the test that carried the verdict (rests_on) and its budget label (summary.json's
budget: stable, moving ..., not checkable), and docs/results/claims.png, their forest plot.
docs/results/README.md has the same markers around every claim (primary, then exploratory) and
`<!-- tables:begin -->` ... `<!-- tables:end -->` around each study's tables and figures, and
`<!-- run:begin -->` ... `<!-- run:end -->` around how the record was made (run.json: its sittings, each
round's and each study's seconds against the plan's). A claim the checked-in run does not hold (a study not
yet run at its current design) says so instead of a verdict. Numbers are copied from summary.json and the
summaries, never computed here: summarize tested them.

--check compares every generated section with what docs/results/ gives (and names the claim and column
that differ), and also summarizes the runs files again (docs/results/<study>/runs.jsonl.gz, each as `normbench
summarize <study>/runs.jsonl.gz --select lr` reads it, and docs/results/ as a whole as the joint summary) and
compares every claim with the checked-in summaries: summary.json's claims and protocol (every field, floats
to the last bits a numerical library may move), and each summary.md's claims table and notes (about 25 s
on one core; tests/test_record.py runs it, a slow test).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
from normbench.results import cpu_model
from normbench.study.estimate import hms  # the study's own durations, as its console says them
from normbench.summary import claims, discover, frozen
from normbench.summary import protocol as protocols
from normbench.summary.show import claims_table
from normbench.summary.stats import PAIRS_LIMIT, POWER
from normbench.summary.budget import MIN_POINTS

EXPERIMENTS = REPO / "normbench" / "configs" / "experiment"
RESULTS = REPO / "docs" / "results"
README = REPO / "README.md"
RESULTS_README = RESULTS / "README.md"
FIGURE = "claims.png"  # in docs/results/: the primary claims' forest plot, the README's figure
RUNS = "runs.jsonl.gz"  # in docs/results/<study>/: the study's runs, one file (normbench/summary/discover.py)
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
TABLES_BEGIN, TABLES_END = "<!-- tables:begin -->", "<!-- tables:end -->"
RUN_BEGIN, RUN_END = "<!-- run:begin -->", "<!-- run:end -->"
# The studies' own summaries (docs/results/<study>/summary.md, from `summarize <study> --select lr`), in
# docs/results/README.md's order; a study not listed comes after them.
ORDER = ["ghost_batch", "small_batch", "converged", "variable_length", "small_batch_transformer",
         "variable_length_transformer", "lr_sensitivity", "norm_free_regime"]
KEPT = "test accuracy (running statistics)"  # the tables docs/results/README.md shows; summary.md has the others
SELECT = "lr"  # how the record's summaries chose each cell's lr (`summarize ... --select lr`, docs/results/README.md)
# Summarized again, a claim's floats may move in their last bits with the numerical library (scipy.stats'
# t-distribution and bootstrap against the hand-written ones: at most 2.4e-15 relative on the record); a change
# that moves a number as shown, or a verdict, is many orders larger.
CLOSE = {"rel_tol": 1e-9, "abs_tol": 1e-15}
SHOWN = 40  # differences --check prints; a record summarized without its command lines differs in hundreds


def declared() -> list[tuple[str, dict]]:
    """(study, claim) for every claim the shipped experiments declare, in file order."""
    out = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        for claim in yaml.safe_load(path.read_text()).get("claims") or []:
            out.append((path.stem, claim))
    return out


def primary() -> list[tuple[str, dict]]:
    """The declared claims with role: primary, the protocol's confirmatory family."""
    return [(study, raw) for study, raw in declared() if raw.get("role") == "primary"]


def _pts(v: float | None, scale: float) -> str:
    return "" if v is None else f"{scale * v:+.1f}"


def _p(v: float | None) -> str:
    return "" if v is None else f"{v:.2g}"


def _hypothesis(claim: claims.Claim) -> str:
    """summarize's wording of the hypothesis, its bars escaped for a Markdown table."""
    return claims_table.hypothesis(claim).replace("|", "\\|")


def _notes(found: list[tuple[str, dict]]) -> list[str]:
    """What the claims that carry a `note` can and cannot conclude, under their table, as the experiment
    files word it (a − b as in the table; (a − a′) for a side that subtracts a cell)."""
    notes = [f"- *{study}, {c.name}*: {c.note}" for study, raw in found
             for c in claims.parse([raw], study, study) if c.note]
    return ["", "What they can and cannot conclude (the `note` each experiment declares with the claim):", "",
            *notes] if notes else []


def _definition(study: str, c: dict) -> str:
    """What a claim tests, whatever its name and role: its study, sides, expectation, margin and metric."""
    sides = [{**side, "metric": side.get("metric", c.get("metric"))} for side in (c["a"], c["b"])]
    return json.dumps([study, *sides, c["expect"], float(c.get("margin") or 0.0)], sort_keys=True, default=str)


def _tested(results: Path) -> tuple[dict, dict | None]:
    """summary.json's claim rows by (study, name), and run.json (None when not checked in). A claim declared
    today under another name than the record gave it (a model added to its name) is found by what it tests;
    its row keeps the record's name (recorded_name)."""
    summary = results / "summary.json"
    tested = {}
    if summary.exists():
        tested = {(c["study"], c["name"]): c for c in json.loads(summary.read_text())["claims"]}
        by_definition = {_definition(k[0], t): t for k, t in tested.items() if "a" in t and "b" in t}
        for study, c in declared():
            parsed = claims.parse([c], study, study)[0]
            t = by_definition.get(_definition(study, dataclasses.asdict(parsed)))
            if (study, parsed.name) not in tested and t is not None:
                tested[study, parsed.name] = {**t, "recorded_name": t["name"], "name_now": parsed.name}
    run = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else None
    return tested, run


def _ci(t: dict, c: claims.Claim) -> str:
    ci = f" [{_pts(t['ci_low'], c.scale)}, {_pts(t['ci_high'], c.scale)}]" if t["ci_low"] is not None else ""
    return f"{_pts(t['estimate'], c.scale)}{ci}"


def _verdict(t: dict, role: str) -> str:
    """The verdict as summary.json gives it; a run made before roles existed tested every claim as one
    family, so an exploratory claim's held/refuted is that family's, labelled so."""
    v = t["verdict"]
    if role == "exploratory" and "role" not in t and v != "exploratory":
        return f"exploratory (this run: **{v}**)"
    text = f"**{v}**"
    if t.get("role") and t["role"] != role:  # declared with another role since the run: the run's is shown
        text = f"{t['role']} in this run" + ("" if v == "exploratory" else f": {text}")
    if t.get("look"):
        text += f" (look {t['look']} of {t.get('looks') or '?'})"
    if not t["n"] and t.get("note"):
        text += f": {t['note']}"
    elif t.get("needed_to"):  # undecided after the last look: how many pairs would decide it
        text += (f": ~{t['pairs_needed']:,} pairs would {t['needed_to']} it ({POWER:.0%} power, were the "
                 "measured mean and SD true)" if t.get("pairs_needed") else
                 f": more than {PAIRS_LIMIT:,} pairs would be needed to {t['needed_to']} it")
    renamed = t.get("recorded_name")  # found by what it tests; said where more than the model was added
    if renamed and not t.get("name_now", "").startswith(renamed):
        text += f"; this run's name: {renamed}"
    return text


MODELS = {"mlp": "MLP", "cnn": "CNN", "resnet": "ResNet", "rnn": "RNN", "transformer": "Transformer"}
# summary.json's note, as normbench/summary/verdicts.py words it: whether a cell a claim reads chose its lr at its
# grid's edge
EDGE = re.compile(r"reads (\d+) cells? whose lr was chosen at its grid's edge")
RESTS = {"t-test": "t-test", "exact": "exact"}  # summary.json's rests_on, as the table's test column says it


def _model(t: dict) -> str:
    """The model of the runs a claim reads (summary.json's models)."""
    return ", ".join(MODELS.get(m, m) for m in t.get("models") or [])


def _as_tested(t: dict, c: claims.Claim) -> str:
    """a − b [95% CI] over the pairs its deciding look (or its last) tested (summary.json's look_estimate and
    look_ci_*); an exploratory claim's, and a record's made before those fields, over every pair."""
    if t.get("look_estimate") is None:
        return _ci(t, c)
    return _ci({"estimate": t["look_estimate"], "ci_low": t["look_ci_low"], "ci_high": t["look_ci_high"]}, c)


def _differs(t: dict, c: claims.Claim) -> bool:
    """Does the estimate the look tested differ, as printed, from the one over every pair?"""
    return _as_tested(t, c) != _ci(t, c)


def _test(t: dict) -> str:
    """The test that carried a held or refuted verdict (summary.json's rests_on); '—' where none did."""
    return RESTS.get(t.get("rests_on") or "", "—") if t["verdict"] in ("held", "refuted") else "—"


def _budget(t: dict) -> str:
    """The claim's budget label (summary.json's budget): stable, moving toward a side (from where to where), or
    not checkable (why is in docs/results/); and a cell whose lr sits at its grid's edge."""
    if not t["n"]:
        return ""
    label = t.get("budget") or ""
    text = "not checkable" if label.startswith("not checkable") else label
    edge = EDGE.search(t.get("note") or "")
    return text + (f"; lr at grid edge ({edge[1]} cell{'s' * (edge[1] != '1')})" if edge else "")


def _legend(tested: dict, rows: list[tuple[str, claims.Claim]]) -> list[str]:
    """What the table's model, estimate, test and budget columns say, with the counts over the claims shown,
    and, where the estimate a look tested differs from the one over every pair, the latter."""
    got = [(c, tested[(study, c.name)]) for study, c in rows if (study, c.name) in tested]
    held = [t for _, t in got if t["verdict"] == "held"]
    decided = [t for _, t in got if t["verdict"] in ("held", "refuted")]
    count = {label: sum(_budget(t).startswith(label) for t in held) for label in ("stable", "moving", "not checkable")}
    lines = [f"Model: the model of the runs the claim reads. a − b as tested: the pairs of the look that decided "
             f"the claim (or the last look), each seed's lr chosen on the other seeds of that look. Test: what "
             f"carried the verdict, the exact sign-flip test (it rejects too: no normality needed) or the t-test "
             f"alone (it needs the differences' normality). Budget: the claim's own difference, on validation "
             f"accuracy, over the last half of its runs' budget: stable when it moved less than the half-width of "
             f"its last interval, moving toward the side it moved to (from where to where, in points) otherwise, "
             f"not checkable where its runs share fewer than {MIN_POINTS} validations in that half or its metric is "
             f"not one accuracy read alike on both sides; lr at grid edge: a cell it reads chose the lowest or "
             f"highest lr of its grid (after any widening)."]
    if held:
        lines += ["", (f"Of the {len(held)} held: {sum(t.get('rests_on') == 't-test' for t in held)} rest on the "
                       f"t-test alone; {count['stable']} {'is' if count['stable'] == 1 else 'are'} stable, "
                       f"{count['moving']} moving and {count['not checkable']} not checkable"
                       f"{'' if len(decided) == len(held) else f' ({len(decided) - len(held)} refuted)'}.")]
    every = [f"{c.name}, {_ci(t, c)}" for c, t in got if _differs(t, c)]
    if every:
        lines += ["", ("Over every pair the runs have, each lr chosen over all the seeds its cell trained (a later "
                       "round trained it again for another claim), the estimate differs from the one its look "
                       f"tested: {'; '.join(every)}.")]
    return lines


def _where(run: dict) -> str:
    """The machine(s) a record trained on: its sittings' (run.json "machine"), or an older record's cores."""
    return run["machine"] if run.get("sittings") else f"{run['cores']} cores"


def _source(run: dict | None, link: str) -> str:
    """The sentence that says which run the verdicts are from, its links relative to `link`."""
    if not run:
        return ("No run of the current study designs is checked in yet (docs/results/): the claims below are "
                "declared, not yet tested.")
    where = f"checked into [docs/results/]({link}README.md)" if link else "checked in here"
    text = (f"Verdicts of the run {where} (git {run['git_sha']}; "
            f"{run['date']}, {run['wall_s']:,} s on {_where(run)}; its commands: [run.json]({link}run.json)), "
            f"from its [summary.json]({link}summary.json). a − b: mean [95% t-interval] over the pairs (seeds), in "
            "percentage points for accuracies (a metric's own unit otherwise).")
    return text


PRIMARY = ["study", "claim", "model", "hypothesis (points)", "pairs", "a − b [95% CI] as tested", "p (Holm)",
           "verdict", "test", "budget"]  # the README's table of the primary claims


def section(results: Path = RESULTS, link: str = "docs/results/") -> str:
    """README.md's section (without its marker lines): the primary claims and their figure."""
    tested, run = _tested(results)
    lines = [_source(run, link), "", "| " + " | ".join(PRIMARY) + " |", "|" + "---|" * len(PRIMARY)]
    rows = [(study, claims.parse([raw], study, study)[0]) for study, raw in primary()]  # as summarize reads them
    for study, c in rows:
        t = tested.get((study, c.name))
        if t is None:
            lines.append(f"| {study} | {c.name} | | {_hypothesis(c)} | | | | not in the checked-in run | | |")
            continue
        lines.append(f"| {study} | {c.name} | {_model(t)} | {_hypothesis(c)} | {t.get('look_n') or t['n']} | "
                     f"{_as_tested(t, c)} | {_p(t['p_holm'])} | {_verdict(t, 'primary')} | {_test(t)} | "
                     f"{_budget(t)} |")
    lines += ["", *_legend(tested, rows)]
    if any(raw.get("note") for _, raw in declared()):
        where = f"[{'docs/results/' if link else ''}README.md]({link}README.md#every-claim)"
        lines += ["", (f"What each claim can and cannot conclude (the confounds that remain), as its experiment "
                       f"declares it: {where}, under the claims.")]
    if (results / FIGURE).exists():
        lines += ["", (f"![The primary claims: a − b over every pair the runs have, with its 95% t-interval (thick) "
                       f"and bootstrap interval (thin), "
                       f"the margin dashed, coloured by verdict]({link}{FIGURE})")]
    return "\n".join(lines)


EVERY = {"primary": ["study", "claim", "model", "hypothesis (points)", "pairs", "a − b [95% CI] as tested", "p",
                     "p (Holm)", "exact p (Holm)", "verdict", "test", "budget"],
         "exploratory": ["study", "claim", "model", "hypothesis (points)", "pairs", "a − b [95% CI]", "p",
                         "p (Holm)", "exact p (Holm)", "verdict", "budget"]}  # docs/results/README.md's tables


def all_claims_section(results: Path = RESULTS, link: str = "") -> str:
    """docs/results/README.md's claims section: every declared claim, the primary ones first, then the
    exploratory ones (labelled so), with both p-values and the exact test's."""
    tested, run = _tested(results)
    lines = [_source(run, link), ""]
    for role, title in (("primary", "Primary claims: the protocol's confirmatory family (the README's table)"),
                        ("exploratory", "Exploratory claims: estimates, never held or refuted under the protocol")):
        head = EVERY[role]
        lines += [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        rows = [(study, claims.parse([raw], study, study)[0]) for study, raw in declared()
                if (raw.get("role") or "exploratory") == role]
        for study, c in rows:
            t = tested.get((study, c.name))
            if t is None:
                lines.append(f"| {study} | {c.name} | | {_hypothesis(c)} | | | | | | not in the checked-in run |"
                             + " |" * (len(head) - 10))
                continue
            if role == "primary":  # the README's columns, with the unadjusted and the exact p beside Holm's
                lines.append(f"| {study} | {c.name} | {_model(t)} | {_hypothesis(c)} | {t.get('look_n') or t['n']} | "
                             f"{_as_tested(t, c)} | {_p(t.get('p'))} | {_p(t['p_holm'])} | "
                             f"{_p(t.get('p_exact_holm'))} | {_verdict(t, role)} | {_test(t)} | {_budget(t)} |")
            else:
                lines.append(f"| {study} | {c.name} | {_model(t)} | {_hypothesis(c)} | {t['n']} | {_ci(t, c)} | "
                             f"{_p(t.get('p'))} | {_p(t['p_holm'])} | {_p(t.get('p_exact_holm'))} | "
                             f"{_verdict(t, role)} | {_budget(t)} |")
        if role == "primary":
            lines += ["", *_legend(tested, rows)]
        lines += _notes([(study, raw) for study, raw in declared() if (raw.get("role") or "exploratory") == role])
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def run_section(results: Path = RESULTS) -> str:
    """docs/results/README.md's account of how the record was made, from its run.json: the command, where
    and at which commit each sitting trained, the seconds of each round, each study's process time against
    the plan's estimate, the lr values widening added, and why the study stopped."""
    run = _tested(results)[1]
    if not run or "sittings" not in run:
        return ("No record made by `normbench study` is checked in here: `scripts/reproduce.sh` makes one and "
                "`scripts/readme_claims.py --record` writes its account here.")
    lines = [f"`{run['command']}` (`scripts/reproduce.sh`), its runs at git {run['git_sha']}, "
             f"last run {run['date']}; it stopped because {run['stopped']}.", "",
             "| sitting | started (UTC) | processor | cores | trained on | torch | commit | jobs done before |",
             "|---|---|---|---|---|---|---|---|"]
    for n, s in enumerate(run["sittings"], 1):
        lines.append(f"| {n} | {s.get('started', '')} | {s['cpu']} | {s['cores']} | {s['device']} | "
                     f"{s.get('torch', '')} | {str(s.get('git_sha', ''))[:7]} | {s.get('jobs_done_before', '')} |")
    rounds = ", ".join(f"round {k}: {hms(v)}" for k, v in run["seconds_per_round"].items())
    lines += ["", f"Training wall time, jobs side by side (calibrations, looks and summaries not counted): "
              f"{hms(run['wall_s'])} in all ({rounds})."]
    if run.get("seconds_per_study"):
        lines += ["", "Each study's process time (its jobs' seconds added up; a job a stopped sitting left "
                  "half-done counts only the sitting that finished it) against the plan's estimate (`normbench "
                  "study ... --plan`, from the calibrations the first sitting took):", "",
                  "| study | process time | the plan's | measured / planned |", "|---|---|---|---|"]
        for study, row in run["seconds_per_study"].items():
            ratio = f"{row['seconds'] / row['planned']:.2f}" if row["planned"] else ""
            lines.append(f"| {study} | {hms(row['seconds'])} | {hms(row['planned'])} | {ratio} |")
    if run.get("widened"):
        added = ", ".join(f"{w['study']}/{w['base']} lr {w['lr']:g} (round {w['round']})" for w in run["widened"])
        lines += ["", f"The lr values widening added (docs/protocol.md): {added}."]
    return "\n".join(lines)


def _pair(row: dict, low: str, high: str) -> tuple[float, float] | None:
    return None if row.get(low) is None else (row[low], row[high])


def figure(results: Path = RESULTS) -> Path | None:
    """docs/results/claims.png: the primary claims' forest plot, drawn by summarize's own claims_figure from
    summary.json's estimates and intervals (None when no primary claim has an estimate)."""
    from normbench.summary.show.plots import claims_figure

    tested, _ = _tested(results)
    shown = []
    for study, raw in primary():
        c = claims.parse([raw], study, study)[0]
        t = tested.get((study, c.name))
        if t is None:
            continue
        shown.append(claims.ClaimResult(claim=c, role="primary", n=t["n"], estimate=t["estimate"], verdict=t["verdict"],
                                        ci=_pair(t, "ci_low", "ci_high"),
                                        bootstrap=_pair(t, "bootstrap_low", "bootstrap_high")))
    out = results / FIGURE
    if not any(r.estimate is not None for r in shown):
        out.unlink(missing_ok=True)
        return None
    fig = claims_figure(shown)
    fig.set_size_inches(11, fig.get_size_inches()[1])  # room for the claims' names beside the axis and its title
    fig.savefig(out, dpi=120, metadata={"Software": None})
    return out


def _sections(markdown: str) -> list[tuple[str, list[str]]]:
    """(header line, body lines) per `##`/`###` section of a summary.md."""
    out: list[tuple[str, list[str]]] = []
    for line in markdown.splitlines():
        if line.startswith(("## ", "### ")):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def tables_section(results: Path = RESULTS, link: str = "") -> str:
    """Each checked-in study's test-accuracy tables (running statistics) and lr-sensitivity tables, with
    its time line and figures, copied from its summary.md (never computed here); links relative to `link`
    (docs/results/README.md's folder by default)."""
    studies = sorted((d for d in results.iterdir() if (d / "summary.md").exists()) if results.is_dir() else [],
                     key=lambda d: (ORDER.index(d.name) if d.name in ORDER else len(ORDER), d.name))
    if not studies:
        return "No study summaries are checked in yet (docs/results/<study>/summary.md)."
    lines = []
    for d in studies:
        md = (d / "summary.md").read_text()
        lines += [f"### `{d.name}`", "", f"From [{link}{d.name}/summary.md]({link}{d.name}/summary.md) "
                  "(every table, the paired comparisons, the runs that failed or diverged).", ""]
        lines += [line.lstrip("- ") for line in md.splitlines() if line.startswith("- time, ")] + [""]
        in_lr = False
        for header, body in _sections(md):
            in_lr = header == "## Learning-rate sensitivity" or (in_lr and header.startswith("### "))
            if KEPT in header or (in_lr and header.startswith("### ")) or header == "## Learning-rate sensitivity":
                text, seen_table = [], False
                for b in body:  # the table and the notes under it, not the paired comparisons after them
                    if seen_table and not b.strip():
                        break
                    if seen_table and not b.startswith("|") and text and text[-1].startswith("|"):
                        text.append("")  # a note right under a table would read as one more row
                    seen_table |= b.startswith("|")
                    if not b.startswith("!["):
                        text.append(b)
                while text and not text[-1].strip():
                    text.pop()
                lines += ["**" + header.lstrip("#").strip() + "**", *text, ""]
        lines += [f"![{png.stem}]({link}{d.name}/{png.name})" for png in sorted(d.glob("*.png"))
                  if not png.name.startswith("paired_")]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def current(text: str, begin: str = BEGIN, end: str = END, name: str = "README.md") -> str:
    if begin not in text or end not in text:
        raise SystemExit(f"readme_claims.py: {name} has no {begin} ... {end} section")
    return text[text.index(begin) + len(begin):text.index(end)].strip("\n")


def record(out: Path) -> None:
    """Check the `normbench study` run in `out` (scripts/reproduce.sh) into docs/results/: its joint
    summary.json, claims.csv and summary.md, its study.json (the protocol it pinned, which summarize reads,
    its frozen family and each look's decisions as made), run.json (the command, git shas, date, the seeds
    of each round, the family's hash, the machines it trained on and each sitting's, seconds per round, why
    it stopped: from out/study.json), and each study's
    summary.md, figures and runs (every member's results.json and command line, as one runs file,
    <study>/runs.jsonl.gz, which `normbench summarize` reads as it reads the study's folder); main() then
    rewrites the generated sections and claims.png from them."""
    import os

    src = out / "summary"
    state_path = out / "study.json"
    if not (src / "summary.json").exists() or not state_path.exists():
        raise SystemExit(f"readme_claims.py: no {src / 'summary.json'} or {state_path}; run scripts/reproduce.sh first")
    state = json.loads(state_path.read_text())
    if not state.get("finished"):
        raise SystemExit(f"readme_claims.py: the study in {out} has not finished; run scripts/reproduce.sh again")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "claims.csv", "summary.md"):
        if (src / name).exists():  # claims.csv only where claims were tested
            shutil.copy(src / name, RESULTS / name)
        else:
            (RESULTS / name).unlink(missing_ok=True)
    ran = sorted({str(json.loads(f.read_text()).get("git_sha") or "")[:7] for f in out.glob("**/results.json")} - {""})
    sha = ", ".join(ran) or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           cwd=REPO).stdout  # the commits the runs record
    dates = sorted(f.stat().st_mtime for f in out.glob("**/results.json"))
    sittings = state.get("sittings", [])  # where each invocation trained; a study before them: this machine
    where = ({"machine": " and ".join(sorted({f"{s['cpu']} ({s['cores']} cores, trained on {s['device']})"
                                              for s in sittings}))}
             if sittings else {"machine": cpu_model(), "cores": os.cpu_count()})
    proto = frozen.recorded_protocol(out, protocols.load()) or protocols.load()  # the seeds it trained by round
    rounds = [protocols.round_seeds(proto, i) for i in range(len(proto.looks))]
    run = {"command": f"normbench study {' '.join(state['studies'])} scale={state['scale']}",
           "git_sha": sha.strip(), "seeds": {str(i): f"{r[0]}-{r[-1]}" for i, r in enumerate(rounds, 1)},
           "family_hash": (state.get("family") or {}).get("hash"),
           **where, "sittings": sittings,
           "date": time.strftime("%Y-%m-%d", time.gmtime(dates[-1])) if dates else "",
           "wall_s": round(sum(state["seconds"].values())), "seconds_per_round": state["seconds"],
           "seconds_per_study": per_study(state),
           "widened": state.get("widened", []), "stopped": state["finished"]}
    for stale in (p for p in RESULTS.iterdir() if p.is_dir()):  # the previous record's studies (git keeps them)
        shutil.rmtree(stale)
    for study in sorted(p.parent.parent for p in out.glob("*/summary/summary.md")):  # each study's own
        dest = RESULTS / study.name
        dest.mkdir(exist_ok=True)
        for f in [study / "summary" / "summary.md", *sorted((study / "summary").glob("*.png"))]:
            if not f.name.startswith("paired_"):
                shutil.copy(f, dest / f.name)
        kept = [r for r in discover.find_runs(study) if _member(r.path.relative_to(study))
                and (r.results or r.status == "unreadable")]  # every run with a results.json
        discover.save_runs(kept, study, dest / RUNS)
    (RESULTS / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    shutil.copy(state_path, RESULTS / "study.json")


def _member(path: Path) -> bool:
    """Is `path` (in a study's folder) a round's job's member, r<round>/<job>/<member>?"""
    return len(path.parts) == 3 and path.match("r*/*/*")


def per_study(state: dict) -> dict:
    """Each study's process time against the plan's, from a study.json (rounds.State.per_study)."""
    from normbench.study.rounds import State

    return State(state["studies"], state["scale"], job_seconds=state.get("job_seconds", {})).per_study()


def _claims_section(markdown: str) -> tuple[list[list[str]], list[str]]:
    """A summary.md's claims table (its rows' cells) and the notes under it."""
    rows, notes, inside = [], [], False
    for line in markdown.splitlines():
        if line.startswith("## "):
            if inside:
                break
            inside = line == "## Claims"
        elif inside and line.startswith("| ") and not line.startswith("| claim |"):
            rows.append(line[2:-2].split(" | "))
        elif inside and line.startswith("- "):
            notes.append(line[2:])
    return rows, notes


def _same(a, b) -> bool:
    """Equal, floats (in lists and dicts too) to CLOSE."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, **CLOSE)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _markdown_differences(path: Path, summary) -> list[str]:
    """Where summary.md's claims table and notes (`path`) are not what `summary` shows."""
    old_rows, old_notes = _claims_section(path.read_text())
    old, new = {r[0]: r for r in old_rows}, {r[0]: r for r in claims_table.claims_rows(summary)}
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out = [f"{where}: {name!r} is {'not recomputed' if name in old else 'recomputed, not checked in'}"
           for name in sorted(set(old) ^ set(new))]
    for name in (n for n in old if n in new):
        out += [f"{where}: {name!r}: {column} {a or '(empty)'} checked in, {b or '(empty)'} recomputed"
                for column, a, b in zip(claims_table.CLAIMS_HEADER, old[name], new[name]) if a != b]
    if not out and old_notes != claims_table.claim_notes(summary):
        out.append(f"{where}: the notes under the claims table are not what summarizing gives again")
    return out


def _located(key: str, value):
    """A claim's field as compared: its diverged runs (at_chance), in any order, by where each sits,
    <study>/r<round>/<job>/<member>, not by the folder the summary read (outputs/reproduce/<study>/... checked in,
    docs/results/<study>/runs.jsonl.gz/... summarized again)."""
    if key == "at_chance" and isinstance(value, list):
        return sorted(tuple(part for part in Path(run).parts if part != RUNS)[-4:] for run in value)
    return value


def _json_differences(path: Path, summary) -> list[str]:
    """Where summary.json's claims and protocol (`path`) are not `summary`'s: every field it has."""
    from normbench.summary.show import report

    old, new = json.loads(path.read_text()), json.loads(report.to_json(summary))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    by_key = {(c["study"], c["name"]): c for c in new["claims"]}
    out = []
    for k, v in old["protocol"].items():
        again = new["protocol"].get(k)
        if k == "family":  # a set of claims, in whatever order: say which differ
            if _same(sorted(map(tuple, v)), sorted(map(tuple, again or []))):
                continue
            gone = [f"{s} · {n}" for s, n in v if [s, n] not in (again or [])]
            added = [f"{s or '(no study)'} · {n}" for s, n in again or [] if [s, n] not in v]
            out.append(f"{where}: protocol family: {len(v)} claims checked in, {len(again or [])} recomputed"
                       + (f"; not recomputed: {'; '.join(gone)}" if gone else "")
                       + (f"; recomputed, not checked in: {'; '.join(added)}" if added else ""))
        elif not _same(v, again):
            out.append(f"{where}: protocol {k}: {v!r} checked in, {again!r} recomputed")
    for c in old["claims"]:
        again = by_key.pop((c["study"], c["name"]), None)
        if again is None:
            out.append(f"{where}: {c['study']} · {c['name']!r} is not recomputed")
            continue
        out += [f"{where}: {c['study']} · {c['name']!r}: {k} {v!r} checked in, {again.get(k, '(none)')!r} recomputed"
                for k, v in c.items() if not _same(_located(k, v), _located(k, again.get(k)))]
    out += [f"{where}: {study} · {name!r} is recomputed, not checked in" for study, name in by_key]
    return out


def recomputed(results: Path = RESULTS) -> list[str]:
    """Where summarizing the checked-in runs again disagrees with the checked-in summaries (`--check`): the
    joint one (docs/results/ as a whole: summary.json and summary.md) and each study's (its runs file:
    summary.md, and the family it tested its primary claims in, which is the joint one's)."""
    from normbench.summary.summarize import compute

    out = []
    joint = compute(results, select=SELECT)
    if (results / "summary.json").exists():
        out += _json_differences(results / "summary.json", joint)
    if (results / "summary.md").exists():
        out += _markdown_differences(results / "summary.md", joint)
    family = joint.protocol.get("family")
    for runs in sorted(results.glob(f"*/{RUNS}")):
        s = compute(runs, select=SELECT)
        if s.protocol.get("family") != family:
            out.append(f"{runs.parent.name}: its primary claims are tested in a family of "
                       f"{len(s.protocol.get('family', []))} claims, the joint summary's in one of {len(family or [])}")
        if (runs.parent / "summary.md").exists():
            out += _markdown_differences(runs.parent / "summary.md", s)
    return out


def _table_rows(section: str) -> dict[tuple[str, str], dict[str, str]]:
    """A generated section's claims tables: each row's cells by column, keyed by (study, claim)."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    header: list[str] = []
    for line in section.splitlines():
        if not line.startswith("|"):
            header = []
        elif line.startswith("| "):  # not the |---| line; a hypothesis' bars are escaped (\|)
            cells = line[2:-2].split(" | ")
            if cells[:2] == ["study", "claim"]:
                header = cells
            elif header:
                rows[cells[0], cells[1]] = dict(zip(header, cells))
    return rows


def _cell_differences(have: str, want: str) -> list[str]:
    """Where a section's claims tables (`have`) are not what docs/results/ gives (`want`): by claim and column
    (a claim's model, its estimate as tested, the test that carried it, its budget, ...)."""
    old, new = _table_rows(have), _table_rows(want)
    out = [f"{s} · {n!r} {'is not in docs/results/ and the experiments' if (s, n) in old else 'is missing'}"
           for s, n in sorted(set(old) ^ set(new))]
    for key in (k for k in old if k in new):
        out += [f"{key[0]} · {key[1]!r}: {column} {old[key].get(column) or '(none)'!r} here, {value!r} from "
                "docs/results/" for column, value in new[key].items() if old[key].get(column) != value]
    return out


def stale() -> str:
    """What --check finds stale without summarizing anything (a generated section, the figure), '' if
    nothing: which section, and in a claims table which claim's column (model, estimate as tested, test,
    budget, ...) differs from summary.json."""
    sections = []
    for path, wanted_sections in wanted().items():
        for (b, e), want in wanted_sections.items():
            have = current(path.read_text(), b, e, path.name)
            if have != want:
                cells = _cell_differences(have, want)
                sections.append(f"{path.relative_to(REPO)} {b}" + (f" ({'; '.join(cells[:SHOWN])})" if cells else ""))
    if sections:
        return (f"{'; '.join(sections)} section(s) differ from docs/results/ and the experiments' claims; run "
                "python scripts/readme_claims.py")
    tested = _tested(RESULTS)[0]
    if any((tested.get((study, raw["name"])) or {}).get("estimate") is not None for study, raw in primary()) \
            and not (RESULTS / FIGURE).exists():
        return f"docs/results/{FIGURE} is missing; run python scripts/readme_claims.py"
    return ""


def wanted() -> dict[Path, dict[tuple[str, str], str]]:
    """Each generated file's sections, by their (begin, end) markers."""
    return {README: {(BEGIN, END): section()},
            RESULTS_README: {(RUN_BEGIN, RUN_END): run_section(), (BEGIN, END): all_claims_section(),
                             (TABLES_BEGIN, TABLES_END): tables_section()}}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a generated section is not what it would write, or summarizing the runs files "
                        "again does not give the checked-in summaries' claims")
    p.add_argument("--record", type=Path, metavar="OUT", help="check the reproduce run in OUT into docs/results/")
    args = p.parse_args(argv)
    if args.record:
        record(args.record)
    if args.check:
        problem = stale()
        if problem:
            print(f"readme_claims.py: {problem}", file=sys.stderr)
            return 1
        differ = recomputed()
        if differ:
            shown = differ[:SHOWN] + ([f"... and {len(differ) - SHOWN} more"] if len(differ) > SHOWN else [])
            print("readme_claims.py: summarizing docs/results/'s runs files again does not give the checked-in "
                  "summaries:\n  " + "\n  ".join(shown) + "\n(the runs or their command lines changed, or "
                  "summarize did: check them in again with `normbench summarize ... --select lr` as "
                  "docs/results/README.md says, or find what moved)", file=sys.stderr)
            return 1
        return 0
    figure()  # first: the README's section links it only where it exists
    for path, sections in wanted().items():
        text = path.read_text()
        for (begin, end), want in sections.items():
            current(text, begin, end, path.name)
            text = f"{text[:text.index(begin) + len(begin)]}\n{want}\n{text[text.index(end):]}"
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
