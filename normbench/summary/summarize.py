"""`normbench summarize PATH`: the results.json files of a sweep (or of all of outputs/, or of a runs file)
-> the verdicts of its declared claims, then tables with 95% intervals and paired comparisons, accuracy
against lr with each configuration's lr sensitivity (where lr varies), as CSV, JSON, Markdown, one HTML
page, plots and TensorBoard runs.

    normbench summarize outputs/multirun/2025-01-01/12-00-00
    normbench summarize outputs --out reports/ --ref gn   # every run under outputs/, compared with gn
    normbench summarize SWEEP --select lr                  # the best lr per cell, chosen on validation
    normbench summarize SWEEP --claims claims.yaml         # test these claims, as a family of their own
    normbench summarize SWEEP --wide                       # the claims with every statistic in the terminal too
    normbench summarize SWEEP --save-runs sweep.jsonl.gz   # its runs as one file, to share: summarize reads it as SWEEP

Runs are grouped by (study, data, model, norm label, column); the norm label is the norm's name plus
every other setting that varies between runs of the same model (norm.masked, model.placement, lr, ...),
so only runs that differ by seed alone are pooled. Columns are batch sizes, or test lengths for the
variable-length study. Each cell: n, mean, its 95% t-interval; each norm against the reference by
per-seed (paired) differences, Holm-corrected within a table. Failed, diverged, incomplete and
unreadable run directories are listed apart, never fatal.

The flow, a module each: discover.py (find the runs, what each reports) -> labels.py (what tells them
apart, the sweep's axes) -> tables.py (tables, budgets, paired tests), select.py (--select lr) ->
claims.py (what was declared) -> verdicts.py (the claims tested, look by look of protocol.py, each run's
number read by metrics.py) -> this
module (compute, the files, the command line). It only computes (a `Summary`); show/report.py,
claims_table.py, plots.py, html_report.py and tensorboard.py show it.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from normbench.errors import UserError
from normbench.results import atomic_write_text
from normbench.summary.discover import check_runs_file, costs, distinct, find_runs, folder, save_runs
from normbench.summary.labels import label_runs, sweep_axes
from normbench.summary.lr_sensitivity import lr_curves
from normbench.summary.tables import build_tables
from normbench.summary.types import Summary


def compute(root: Path, ref: str = "bn", select: str | None = None, claims_file: Path | None = None,
            protocol=None) -> Summary:
    """Read every run under `root`, compute the tables and test the claims: those in `claims_file` as a
    family of their own, under the protocol the file declares (claims.load_file); else those the runs'
    experiments declared, in the shipped family under `protocol` (default: the numbers a study folder's
    study.json pinned, frozen.recorded_protocol, else the declared ones, protocol.load()). A study folder's
    stored decisions come with the replay's disagreements (frozen.stored_decisions). Raises UserError for a
    path without runs."""
    from normbench.summary import claims as claiming
    from normbench.summary import frozen
    from normbench.summary import protocol as protocols
    from normbench.summary import verdicts

    root = Path(root)
    if not root.exists():
        raise UserError(f"{root} does not exist", "give a sweep directory, e.g. outputs/multirun/<date>/<time>, or a "
                                                  "runs file (--save-runs)")
    own = claiming.load_file(claims_file) if claims_file is not None else None  # a bad file fails first
    runs, duplicates = distinct(find_runs(root))
    if not runs:
        raise UserError(f"no runs under {root} (no results.json, no Hydra run directory)",
                        "point it at a sweep directory or at outputs/")
    varied, constant = sweep_axes(runs)
    extensions: list[str] = []
    pick = None  # how a look of the protocol keeps its seeds' runs (None: all of them)
    if select is None:
        kept = runs
        tables = build_tables(runs, label_runs(runs), ref)
    else:  # one value of `select` per cell and seed, chosen on the other seeds' validation accuracy
        from normbench.summary import select as selection

        if select not in varied:
            raise UserError(f"--select {select}: the runs do not vary {select}",
                            f"sweep it, e.g. {select}=1e-3,3e-3,1e-2")
        labels = label_runs(runs, pooled=frozenset({select}))
        chosen = selection.choose(runs, select, labels)
        kept = [r for r in runs if selection.kept_by(chosen, r, labels, select)]
        tables = build_tables(kept, labels, ref)
        selection.annotate(tables, chosen, select)
        extensions = selection.extensions(chosen, runs, labels, select, folder(root))
        pick = partial(selection.kept, key=select)  # a look's lrs chosen among its own seeds' runs alone
    if own is not None:  # a user's claims: Holm over their own hypotheses, never the shipped family's
        found, proto = own.claims, own.protocol
    else:
        found = claiming.declared(runs)
        proto = protocol or frozen.recorded_protocol(folder(root), protocols.load()) or protocols.load()
    tested = verdicts.test(found, kept, runs, proto, pick)
    if select is not None:  # a verdict read off an lr chosen at its grid's edge says so
        for r in tested:
            edge = [c for c in verdicts.cells_read(r.claim, runs, labels) if c in chosen
                    and (chosen[c].low_edge or chosen[c].high_edge)]
            if edge and r.n:
                said = (f"reads {len(edge)} cell{'s' * (len(edge) > 1)} whose {select} was chosen at its grid's "
                        f"edge (grids to widen)")
                r.note = "; ".join(filter(None, [r.note, said]))
    family = proto.with_members(r.claim.key for r in tested if r.role == "primary")
    curves = lr_curves(runs, label_runs(runs, pooled=frozenset({"lr"}))) if "lr" in varied else []
    return Summary(root, runs + duplicates, tables, varied, constant, ref, tested, extensions, costs(runs), curves,
                   family.describe() if tested else {}, frozen.stored_decisions(folder(root), tested))


def write_files(s: Summary, out: Path, plots: bool = True) -> dict[str, Path]:
    """summary.csv, summary_paired.csv, summary.json, summary.md, summary.html, and claims.csv where claims
    were tested; with `plots`, the PNG figures (also inline in the HTML page) and TensorBoard's summary runs
    under out/summary/."""
    from normbench.summary.show import claims_table, html_report, report

    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": out / "summary.csv", "paired_csv": out / "summary_paired.csv", "json": out / "summary.json",
             "md": out / "summary.md", "html": out / "summary.html"}
    atomic_write_text(files["csv"], report.to_csv(s.tables))
    atomic_write_text(files["paired_csv"], report.to_paired_csv(s.tables))
    atomic_write_text(files["json"], report.to_json(s))
    if s.claims:
        files["claims_csv"] = out / "claims.csv"
        atomic_write_text(files["claims_csv"], claims_table.to_claims_csv(s))
    else:  # no claims: no header-only file, and none left from an earlier summary with claims
        (out / "claims.csv").unlink(missing_ok=True)
    figures, svgs = {}, {}
    if plots:
        from normbench.summary.show import plots as plotting

        rendered = plotting.render_all(s, out)
        figures = {name: png for name, (png, _) in rendered.items()}
        svgs = {name: svg for name, (_, svg) in rendered.items()}
    markdown = report.to_markdown(s, figures)
    atomic_write_text(files["md"], markdown)
    atomic_write_text(files["html"], html_report.to_html(s, svgs))
    if plots:
        from normbench.summary.show import tensorboard

        from normbench.userfiles import inside

        tensorboard.write(s, inside(out, out / tensorboard.SUBDIR), figures, markdown)  # not a symlink out
        files.update(figures)
    return files


def summarize(root: Path, out: Path | None = None, plots: bool = True, console=None, ref: str = "bn",
              select: str | None = None, claims_file: Path | None = None, protocol=None,
              runs_file: Path | None = None, wide: bool = False) -> dict[str, Path]:
    """Summarize every run under `root` into `out` (default `root`, a runs file's folder): print the tables
    (`wide`: the claims with every statistic, as summary.md has them), write the files (and, with
    `runs_file`, the runs as one file); returns the files written."""
    from normbench.summary.show import report

    if runs_file is not None:  # a wrong name fails before the computation, not after
        check_runs_file(root, runs_file)
    summary = compute(root, ref, select, claims_file, protocol)
    saved = {"runs": save_runs(summary.runs, Path(root), runs_file)} if runs_file is not None else {}
    report.print_summary(summary, console, wide=wide)
    return {**write_files(summary, Path(out or folder(root)), plots=plots), **saved}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="normbench summarize", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a sweep directory, outputs/ as a whole, or a runs file (--save-runs)")
    p.add_argument("--out", type=Path, default=None, help="where to write the files (default: PATH, or a runs "
                                                          "file's folder)")
    p.add_argument("--ref", default="bn", help="the norm every other is compared with, seed by seed (default: bn)")
    p.add_argument("--select", choices=["lr"], default=None,
                   help="pick, per cell and seed, the value with the best mean validation accuracy over the other "
                        "seeds (that seed's test accuracy reported)")
    p.add_argument("--claims", type=Path, default=None, metavar="FILE.yaml",
                   help="test these claims (a YAML list: name, a, b, expect, margin, metric; or `claims:` and a "
                        "`protocol:`) instead of those the runs' experiments declared, as a family of their own: "
                        "Holm over their hypotheses, one look at every seed unless the file declares looks")
    p.add_argument("--wide", action="store_true",
                   help="print the claims with every statistic (bootstrap, exact p, each look's α) and each "
                        "claim's cells, wider than a terminal; summary.md and summary.html always have them")
    p.add_argument("--no-plots", action="store_true", help="skip the plots, the HTML figures and TensorBoard")
    p.add_argument("--save-runs", type=Path, default=None, metavar="FILE.jsonl.gz",
                   help="also write PATH's runs as one file (each results.json and its command line, gzip'd JSON "
                        "Lines), which `normbench summarize FILE.jsonl.gz` reads as it reads PATH: a sweep to share")
    args = p.parse_args(argv)
    files = summarize(args.path, args.out, plots=not args.no_plots, ref=args.ref, select=args.select,
                      claims_file=args.claims, runs_file=args.save_runs, wide=args.wide)
    print("wrote " + ", ".join(str(f) for f in files.values()))
    return 0
