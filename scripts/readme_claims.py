"""The README's claims table and results tables, generated: the shipped experiments' declared claims with
the verdicts of the run checked into docs/results/ (its summary.json, with the git sha, command and wall
time in run.json), and each study's test-accuracy tables from its docs/results/<study>/summary.md.

    python scripts/readme_claims.py --record outputs/reproduce   # after scripts/reproduce.sh: check the run in
    python scripts/readme_claims.py                              # rewrite the README's section from it
    python scripts/readme_claims.py --check                      # exit 1 if the README disagrees (a test runs it)

The sections sit between the README's `<!-- claims:begin -->` and `<!-- claims:end -->` lines, and its
`<!-- tables:begin -->` and `<!-- tables:end -->` lines. Each claim of
normbench/configs/experiment/*.yaml is one row; a claim the checked-in run does not hold (a study not yet
run at its current design) says so instead of a verdict. Numbers are copied from summary.json, never
computed here: summarize tested them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
from normbench.summary import claims  # noqa: E402
from normbench.summary.show import claims_table

EXPERIMENTS = REPO / "normbench" / "configs" / "experiment"
RESULTS = REPO / "docs" / "results"
README = REPO / "README.md"
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
TABLES_BEGIN, TABLES_END = "<!-- tables:begin -->", "<!-- tables:end -->"
# The studies' own summaries (docs/results/<study>/summary.md, from `summarize <study> --select lr`), in the
# README's order; a study not listed comes after them.
ORDER = ["ghost_batch", "headline_seeds", "small_batch", "values_per_channel", "values_per_channel_ghost",
         "converged", "converged_small_batches", "converged_5_seeds", "converged_5_seeds_b2", "variable_length",
         "small_batch_transformer", "variable_length_transformer", "lr_sensitivity"]
KEPT = "test accuracy (running statistics)"  # the tables the README shows; summary.md has the others


def declared() -> list[tuple[str, dict]]:
    """(study, claim) for every claim the shipped experiments declare, in file order."""
    out = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        for claim in yaml.safe_load(path.read_text()).get("claims") or []:
            out.append((path.stem, claim))
    return out


def _pts(v: float | None, scale: float) -> str:
    return "" if v is None else f"{scale * v:+.1f}"


def _hypothesis(claim: claims.Claim) -> str:
    """summarize's wording of the hypothesis, its bars escaped for a Markdown table."""
    return claims_table.hypothesis(claim).replace("|", "\\|")


def section(results: Path = RESULTS) -> str:
    """The README section's text (without its marker lines)."""
    summary = results / "summary.json"
    tested = {}
    if summary.exists():
        tested = {(c["study"], c["name"]): c for c in json.loads(summary.read_text())["claims"]}
    run = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else None
    lines = []
    if run:
        lines += [f"Verdicts from the reproduce run of [docs/results/run.json](docs/results/run.json) (its commands; git "
                  f"{run['git_sha']}; {run['date']}, {run['wall_s']:,} s on {run['cores']} cores), summarized as one family (Holm over the {2 * len(tested)} hypotheses of its {len(tested)} claims) into "
                  f"[docs/results/summary.json](docs/results/summary.json). a − b: mean [95% t-interval] over the "
                  f"pairs (seeds), in percentage points for accuracies (a metric's own unit otherwise).", ""]
    else:
        lines += ["No run of the current study designs is checked in yet (docs/results/): the claims below are "
                  "declared, not yet tested.", ""]
    lines += ["| study | claim | hypothesis (points) | pairs | a − b [95% CI] | p (Holm) | exact p (Holm) | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for study, raw in declared():
        c = claims.parse([raw], study, study)[0]  # the claim as summarize reads it: its wording, its unit
        t = tested.get((study, c.name))
        if t is None:
            lines.append(f"| {study} | {c.name} | {_hypothesis(c)} | | | | | not in the checked-in run |")
            continue
        ci = f" [{_pts(t['ci_low'], c.scale)}, {_pts(t['ci_high'], c.scale)}]" if t["ci_low"] is not None else ""
        p = lambda v: "" if v is None else f"{v:.2g}"  # noqa: E731
        lines.append(f"| {study} | {c.name} | {_hypothesis(c)} | {t['n']} | {_pts(t['estimate'], c.scale)}{ci} | "
                     f"{p(t['p_holm'])} | {p(t.get('p_exact_holm'))} | **{t['verdict']}** |")
    return "\n".join(lines)


def _sections(markdown: str) -> list[tuple[str, list[str]]]:
    """(header line, body lines) per `##`/`###` section of a summary.md."""
    out: list[tuple[str, list[str]]] = []
    for line in markdown.splitlines():
        if line.startswith(("## ", "### ")):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def tables_section(results: Path = RESULTS) -> str:
    """Each checked-in study's test-accuracy tables (running statistics) and lr-sensitivity tables, with
    its time line and figures, copied from its summary.md (never computed here)."""
    studies = sorted((d for d in results.iterdir() if (d / "summary.md").exists()) if results.is_dir() else [],
                     key=lambda d: (ORDER.index(d.name) if d.name in ORDER else len(ORDER), d.name))
    if not studies:
        return "No study summaries are checked in yet (docs/results/<study>/summary.md)."
    lines = []
    for d in studies:
        md = (d / "summary.md").read_text()
        lines += [f"#### `{d.name}`", "", f"From [docs/results/{d.name}/summary.md](docs/results/{d.name}/summary.md) "
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
        lines += [f"![{png.stem}](docs/results/{d.name}/{png.name})" for png in sorted(d.glob("*.png"))
                  if not png.name.startswith("paired_")]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def current(readme: str, begin: str = BEGIN, end: str = END) -> str:
    if begin not in readme or end not in readme:
        raise SystemExit(f"readme_claims.py: README.md has no {begin} ... {end} section")
    return readme[readme.index(begin) + len(begin):readme.index(end)].strip("\n")


def record(out: Path) -> None:
    """Check the reproduce run in `out` into docs/results/: its joint summary.json, claims.csv and
    summary.md, run.json (git sha, command, date, wall time from out/timing.txt) and claims.md (the
    README's section)."""
    src = out / "summary"
    if not (src / "summary.json").exists():
        raise SystemExit(f"readme_claims.py: no {src / 'summary.json'}; run scripts/reproduce.sh first")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "claims.csv", "summary.md"):
        if (src / name).exists():  # claims.csv only where claims were tested
            shutil.copy(src / name, RESULTS / name)
        else:
            (RESULTS / name).unlink(missing_ok=True)
    timing = (out / "timing.txt").read_text().splitlines()
    totals = [line for line in timing if line.startswith("total")]  # one per invocation (PARTS=...)
    if not totals:
        raise SystemExit(f"readme_claims.py: {out / 'timing.txt'} has no total line; the run did not finish")
    ran = sorted({str(json.loads(f.read_text()).get("git_sha") or "")[:7] for f in out.glob("**/results.json")} - {""})
    sha = ", ".join(ran) or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           cwd=REPO).stdout  # the commits the runs record
    run = {"command": (out / "command.txt").read_text().strip().replace("\n", "; ") if (out / "command.txt").exists()
           else "scripts/reproduce.sh", "git_sha": sha.strip(), "date": (out / "date.txt").read_text().strip()
           if (out / "date.txt").exists() else "", "wall_s": max(int(t.split(": ")[1].split()[0]) for t in totals),
           "cores": int(totals[0].split(" on ")[1].split()[0]), "timing": timing}
    for study in sorted(p.parent for p in out.glob("*/summary.md") if p.parent != src):  # each study's own
        dest = RESULTS / study.name
        dest.mkdir(exist_ok=True)
        for f in [study / "summary.md", *sorted(study.glob("*.png"))]:
            if not f.name.startswith("paired_"):
                shutil.copy(f, dest / f.name)
    (RESULTS / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    (RESULTS / "claims.md").write_text("# The declared claims and their verdicts\n\n" + section() + "\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the README's section is not what it would write")
    p.add_argument("--record", type=Path, metavar="OUT", help="check the reproduce run in OUT into docs/results/")
    args = p.parse_args(argv)
    if args.record:
        record(args.record)
    readme = README.read_text()
    wants = {(BEGIN, END): section(), (TABLES_BEGIN, TABLES_END): tables_section()}
    if args.check:
        stale = [b for (b, e), want in wants.items() if current(readme, b, e) != want]
        if stale:
            print(f"readme_claims.py: README.md's {' and '.join(stale)} section(s) differ from docs/results/ and the "
                  "experiments' claims; run python scripts/readme_claims.py", file=sys.stderr)
            return 1
        return 0
    for (begin, end), want in wants.items():
        current(readme, begin, end)
        readme = f"{readme[:readme.index(begin) + len(begin)]}\n{want}\n{readme[readme.index(end):]}"
    README.write_text(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
