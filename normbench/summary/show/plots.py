"""The plots of `normbench summarize`, as PNG files and as SVG text for the HTML page.

    rendered = render_all(summary, out_dir)   # {"sweep_fashion_mnist": (out_dir/"sweep_fashion_mnist.png", "<svg ...")}

Every error bar is the 95% t-interval of the mean over seeds (the titles say so). Batch sizes: one
panel per model, test accuracy vs batch size (log x), one line per norm, dashed where the norm was also
evaluated with batch statistics and that changed its accuracy (batch-dependent norms); and one panel
with the same accuracies against the number of values each channel's statistics average over (batch
for an MLP, batch x H x W for a CNN). Variable length: accuracy vs test length, and the mixed-length /
heavy-padding tests as bars. Paired: a forest plot of each norm's per-seed difference from the
reference, one row per norm x column, with its interval and the zero line. Ghost batches (one SGD batch,
rows that differ by norm.ghost_batch): accuracy against K, the norms without ghost batches as bands.
Uses matplotlib's object API only (no pyplot): nothing global changes in the caller's process.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from matplotlib.figure import Figure

from normbench.summary import stats
from normbench.summary.types import MODEL_ORDER, VARLEN, Summary, Table

MARKERS = "os^vD<>ph*"
CI_NOTE = f"error bars: {stats.LEVEL:.0%} t-interval of the mean over seeds"


def _log2_axis(ax, ticks: list[int]) -> None:
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(ticks)), [str(t) for t in sorted(set(ticks))])
    ax.xaxis.set_minor_locator(NullLocator())


def _colors(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _err(cell) -> tuple[float, float]:
    """Below/above the mean: the t-interval's half-widths (0 where undefined, n < 2)."""
    if cell.ci is None:
        return 0.0, 0.0
    return cell.mean - cell.ci[0], cell.ci[1] - cell.mean


def _series(t: Table, label: str, numeric_only: bool = True):
    cols = [c for c in t.cols if (label, c) in t.cells and t.cells[label, c].n and (c.isdigit() or not numeric_only)]
    cells = [t.cells[label, c] for c in cols]
    errs = [_err(c) for c in cells]
    return cols, [c.mean for c in cells], ([e[0] for e in errs], [e[1] for e in errs])


def _batch_dependent(evals: Table, trains: Table | None, label: str) -> bool:
    """The label's runs record a batch-dependent norm (results.json's `batch_dependent`), or, for runs from
    before that key, evaluating with batch statistics changed the accuracy."""
    if label in evals.batch_dependent:
        return True
    if trains is None:
        return False
    for (row, col), cell in evals.cells.items():
        other = trains.cells.get((row, col))
        if row == label and cell.n and other is not None and other.n and abs(other.mean - cell.mean) > 1e-9:
            return True
    return False


def batch_figure(tables: list[Table]) -> Figure:
    """`tables`: the batch-size tables of one (study, dataset): test_acc and test_acc_train_mode, per model."""
    evals = {t.model: t for t in tables if t.metric == "test_acc"}
    trains = {t.model: t for t in tables if t.metric == "test_acc_train_mode"}
    models = sorted(evals, key=lambda m: (MODEL_ORDER.index(m) if m in MODEL_ORDER else 9, m))
    labels = list(dict.fromkeys(r for m in models for r in evals[m].rows))
    colors = _colors(labels)
    bn_like = [r for r in labels if any(_batch_dependent(evals[m], trains.get(m), r) for m in models)]
    vpc = bn_like and any(evals[m].values_per_channel for m in models)
    panels = len(models) + bool(vpc)
    fig = Figure(figsize=(5.2 * panels, 4.4), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False, sharey=True)[0]  # one scale: MLP and CNN compare
    for ax, model in zip(axes, models):
        for label in evals[model].rows:
            cols, mean, err = _series(evals[model], label)
            if cols:
                ax.errorbar([int(c) for c in cols], mean, yerr=err, marker="o", ms=4, capsize=3,
                            color=colors[label], label=label)
            if label in bn_like and model in trains:
                cols, mean, err = _series(trains[model], label)
                if cols:
                    ax.errorbar([int(c) for c in cols], mean, yerr=err, marker="x", ms=4, capsize=2, ls="--",
                                color=colors[label], alpha=0.7, label=f"{label}, batch stats at test")
        _log2_axis(ax, [int(c) for c in evals[model].cols if c.isdigit()])
        ax.set_xlabel("batch size")
        ax.set_ylabel("test accuracy")
        ax.set_title(model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if vpc:
        ax = axes[-1]
        for m, model in enumerate(models):
            t = evals[model]
            for label in bn_like:
                cols, mean, (lo, hi) = _series(t, label)
                # each cell at its own runs' count: a column mixes them (ghost batches of 2, 8 and 64 at batch 64)
                points = [(min(t.values_per_channel[label, c]), mu, a, b) for c, mu, a, b in zip(cols, mean, lo, hi)
                          if t.values_per_channel.get((label, c))]
                if points:
                    x, y, a, b = zip(*points)
                    ax.errorbar(x, y, yerr=(a, b), marker=MARKERS[m % len(MARKERS)], ms=5, capsize=3,
                                color=colors[label], ls="-" if m == 0 else ":", label=f"{label} · {model}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("values per channel in the norm's statistics")
        ax.set_title("batch-dependent norms: batch (MLP) or batch × H × W (CNN)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    first = tables[0]
    fig.suptitle(" · ".join(p for p in (first.study, first.data) if p) + f" · {CI_NOTE}")
    return fig


def variable_length_figure(evals: Table, trains: Table | None = None) -> Figure:
    """`evals`/`trains`: the variable-length test_acc / test_acc_train_mode tables of one (data, model)."""
    colors = _colors(evals.rows)
    fig = Figure(figsize=(12, 5.2), layout="constrained")
    ax, bx = fig.subplots(1, 2)
    for label in evals.rows:  # the mean and its 95% band over seeds, at each test length
        cells = [(int(c), evals.cells[label, c]) for c in evals.cols
                 if c.isdigit() and (label, c) in evals.cells and evals.cells[label, c].n]
        if cells:
            xs = [x for x, _ in cells]
            ax.plot(xs, [c.mean for _, c in cells], marker="o", ms=3, color=colors[label], label=label)
            banded = [(x, c.ci) for x, c in cells if c.ci]
            if banded:
                ax.fill_between([x for x, _ in banded], [ci[0] for _, ci in banded], [ci[1] for _, ci in banded],
                                color=colors[label], alpha=0.15, lw=0)
    if evals.train_range:
        ax.axvspan(*evals.train_range, color="grey", alpha=0.12, label="trained lengths")
    ax.set_xlabel("test length (rows)")
    ax.set_ylabel("test accuracy")
    ax.set_title("accuracy vs test length (running statistics)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)

    settings = [(evals, c, c) for c in evals.cols if not c.isdigit()]
    settings += [(trains, c, f"{c}\nbatch stats") for c in (trains.cols if trains else []) if not c.isdigit()]
    width = 0.8 / max(1, len(evals.rows))
    lows, highs = [], []
    for i, label in enumerate(evals.rows):
        xs, ys, lo, hi = [], [], [], []
        for j, (t, col, _) in enumerate(settings):
            cell = t.cells.get((label, col))
            if cell is not None and cell.n:
                xs.append(j + (i - (len(evals.rows) - 1) / 2) * width)
                ys.append(cell.mean)
                a, b = _err(cell)
                lo.append(a)
                hi.append(b)
        bx.bar(xs, ys, width, yerr=(lo, hi), capsize=2, color=colors[label], label=label)
        lows += [y - e for y, e in zip(ys, lo)]
        highs += [y + e for y, e in zip(ys, hi)]
    if lows:  # zoom in: the differences are points of accuracy, not tens of them
        pad = 0.1 * (max(highs) - min(lows)) + 0.005
        bx.set_ylim(max(0.0, min(lows) - pad), min(1.0, max(highs) + pad))
    # Labels on two lines and the legend under the axes: long labels never overlap, no bar is covered.
    bx.set_xticks(range(len(settings)), [name for _, _, name in settings], fontsize=8)
    bx.set_ylabel("test accuracy")
    bx.set_title("mixed lengths and heavy padding (y zoomed)")
    bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=min(4, len(evals.rows)),
              frameon=False)
    bx.grid(alpha=0.3, axis="y")
    fig.suptitle(" · ".join(p for p in (evals.study, evals.data, evals.model) if p) + f" · {CI_NOTE}")
    return fig


def forest_figure(t: Table) -> Figure:
    """Each norm minus the reference, seed by seed: the mean difference and its 95% t-interval per
    norm x column, in percentage points; filled where Holm-significant."""
    comps = [c for c in t.comparisons if c.result.n]
    fig = Figure(figsize=(7.5, 1.2 + 0.38 * len(comps)), layout="constrained")
    ax = fig.subplots()
    colors = _colors(t.rows)
    for y, c in enumerate(reversed(comps)):
        mean = 100 * c.result.mean
        lo, hi = (100 * c.result.ci[0], 100 * c.result.ci[1]) if c.result.ci else (mean, mean)
        ax.errorbar([mean], [y], xerr=[[mean - lo], [hi - mean]], fmt="o", capsize=3, color=colors[c.row],
                    mfc=colors[c.row] if c.significant else "white")
    ax.axvline(0, color="black", lw=1)
    ax.set_yticks(range(len(comps)), [f"{c.row} · {t.axis.split(' ')[0]} {c.col}" for c in reversed(comps)],
                  fontsize=8)
    ax.set_xlabel(f"{t.metric}: norm − {t.ref}, percentage points (95% t-interval of the paired difference)")
    ax.set_ylim(-0.7, len(comps) - 0.3)
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(f"paired vs {t.ref} · {t.title.split(' · test')[0]} (filled: Holm-significant)", fontsize=10)
    return fig


VERDICT_COLORS = {"held": "#2e7d32", "refuted": "#c62828", "inconclusive": "#9e9e9e", "exploratory": "#5c6bc0"}


def claims_figure(results: list) -> Figure:
    """Each claim's mean difference a − b (points for accuracies) with its 95% t-interval (thick) and
    bootstrap interval (thin), the margin it is tested against (dashed; ±margin for equivalence), coloured
    by verdict."""
    shown = [r for r in results if r.estimate is not None]
    fig = Figure(figsize=(7.5, 1.3 + 0.36 * len(shown)), layout="constrained")
    ax = fig.subplots()
    for y, r in enumerate(reversed(shown)):
        k, color = r.claim.scale, VERDICT_COLORS[r.verdict]
        mean = k * r.estimate
        if r.bootstrap:
            ax.plot([k * r.bootstrap[0], k * r.bootstrap[1]], [y - 0.18] * 2, color=color, lw=1)
        lo, hi = (k * r.ci[0], k * r.ci[1]) if r.ci else (mean, mean)
        ax.errorbar([mean], [y], xerr=[[mean - lo], [hi - mean]], fmt="o", capsize=3, color=color, lw=2)
        for m in ((-r.claim.margin, r.claim.margin) if r.claim.expect == "equivalent" else (r.claim.margin,)):
            ax.plot([m, m], [y - 0.4, y + 0.4], color="black", ls="--", lw=1)
    ax.axvline(0, color="black", lw=0.6, alpha=0.5)
    ax.set_yticks(range(len(shown)), [f"{r.claim.name} ({r.verdict})" for r in reversed(shown)], fontsize=8)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_xlabel("a − b, points · thick: 95% t · thin: bootstrap · dashed: margin")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title("claims: " + ", ".join(f"{sum(r.verdict == v for r in results)} {v}" for v in VERDICT_COLORS
                                        if v != "exploratory" or any(r.verdict == v for r in results)),
                 fontsize=10)
    return fig


GHOST = re.compile(r"(?:^| )ghost_batch=(\d+)")


def ghost_figure(evals: Table, trains: Table | None) -> Figure:
    """Accuracy against the ghost batch K at a fixed SGD batch (one column): a line per norm label without
    its ghost_batch (solid: running statistics; dashed: batch statistics at test), the norms without
    ghost batches as horizontal bands (their mean and interval)."""
    col = evals.cols[0]
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    lines: dict[str, list[tuple[int, str]]] = {}
    flat = []
    for row in evals.rows:
        m = GHOST.search(row)
        if m:
            lines.setdefault(GHOST.sub("", row).strip(), []).append((int(m.group(1)), row))
        elif (row, col) in evals.cells and evals.cells[row, col].n:
            flat.append(row)
    colors = _colors([*lines, *flat])
    ks = sorted({k for pts in lines.values() for k, _ in pts})
    for i, (name, pts) in enumerate(lines.items()):
        for table, style, suffix in ((evals, "-", ""), (trains, "--", ", batch stats at test")):
            pts_in = [(k, table.cells[row, col]) for k, row in sorted(pts)
                      if table is not None and (row, col) in table.cells and table.cells[row, col].n]
            if not pts_in:
                continue
            errs = [_err(c) for _, c in pts_in]
            ax.errorbar([k for k, _ in pts_in], [100 * c.mean for _, c in pts_in],
                        yerr=[[100 * e[0] for e in errs], [100 * e[1] for e in errs]], fmt=style,
                        marker=MARKERS[i % len(MARKERS)], color=colors[name], capsize=3, label=name + suffix)
    for name in flat:
        cell = evals.cells[name, col]
        ax.axhline(100 * cell.mean, color=colors[name], lw=1, ls=":", label=f"{name} (no ghost batch)")
        if cell.ci:
            ax.axhspan(100 * cell.ci[0], 100 * cell.ci[1], color=colors[name], alpha=0.12, lw=0)
    if ks:
        _log2_axis(ax, ks)
    ax.set_xlabel(f"ghost batch K: samples per BatchNorm statistic (SGD batch {col})")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{evals.title.split(' · test')[0]} · ghost batches\n{CI_NOTE}", fontsize=9)
    return fig


def lr_figure(curves: list) -> Figure:
    """Test accuracy against lr (log axis) for curves of one (study, data, model, batch): the mean and its
    95% band over seeds per norm label, each label's sensitivity in the legend."""
    labels = [c.label for c in curves]
    colors = _colors(labels)
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for c in curves:
        lrs = [lr for lr in c.lrs if lr in c.cells and c.cells[lr].n]
        cells = [c.cells[lr] for lr in lrs]
        sens = c.sensitivity.mean
        name = c.label + ("" if sens is None else f" (sensitivity {100 * sens:.1f})")
        ax.plot(lrs, [e.mean for e in cells], marker="o", ms=3, color=colors[c.label], label=name)
        banded = [(lr, e.ci) for lr, e in zip(lrs, cells) if e.ci]
        if banded:
            ax.fill_between([lr for lr, _ in banded], [ci[0] for _, ci in banded], [ci[1] for _, ci in banded],
                            color=colors[c.label], alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("test accuracy (diverged: chance)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"{curves[0].title}\nbands: {CI_NOTE.split(': ', 1)[1]}", fontsize=10)
    return fig


def _batch_stats_twin(s: Summary, t: Table) -> Table | None:
    """The same runs' table with batch statistics at test (test_acc_train_mode), if there is one."""
    return next((u for u in s.tables if (u.kind, u.study, u.data, u.model, u.metric)
                 == (t.kind, t.study, t.data, t.model, "test_acc_train_mode")), None)


def figures(s: Summary) -> dict[str, Figure]:
    """The claims' forest plot (when claims were tested), then one figure per (study, dataset) of batch
    tables, per (dataset, model) of variable-length tables, and one forest plot per test_acc table that has
    comparisons."""
    out = {"claims": claims_figure(s.claims)} if any(r.estimate is not None for r in s.claims) else {}
    batch = [t for t in s.tables if t.kind != VARLEN]
    for study, data in dict.fromkeys((t.study, t.data) for t in batch):
        out[f"{study or 'sweep'}_{data}"] = batch_figure([t for t in batch if (t.study, t.data) == (study, data)])
    for t in batch:
        if t.metric == "test_acc" and len(t.cols) == 1 and any(GHOST.search(r) for r in t.rows):
            out[f"ghost_batch_{t.data}_{t.model}"] = ghost_figure(t, _batch_stats_twin(s, t))
    for t in s.tables:
        if t.kind == VARLEN and t.metric == "test_acc":
            design = (t.study or "").partition(" (")[2].rstrip(")")  # each design's runs its own figure
            name = f"variable_length_{t.data}_{t.model}" + (f"_{design}" if design else "")
            out[name] = variable_length_figure(t, _batch_stats_twin(s, t))
    for t in s.tables:
        if t.metric == "test_acc" and any(c.result.n for c in t.comparisons):
            out[f"paired_{t.slug}"] = forest_figure(t)
    by_title: dict[str, list] = {}
    for c in s.lr_curves:
        by_title.setdefault(c.title, []).append(c)
    for curves in by_title.values():
        c = curves[0]
        out["_".join(["lr", c.study or "sweep", c.data, c.model, f"bs{c.batch_size}"])] = lr_figure(curves)
    return out


def svg_text(fig: Figure) -> str:
    """The figure as an <svg> element (text kept as text, so it stays small and selectable)."""
    from matplotlib import rc_context

    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def render_all(s: Summary, out: Path) -> dict[str, tuple[Path, str]]:
    """Every figure as out/<name>.png and as SVG text."""
    from normbench.userfiles import inside, safe_name

    rendered = {}
    for name, fig in figures(s).items():  # named from the runs' data (study, dataset, model): made file names
        name = safe_name(name)
        png = inside(out, out / f"{name}.png")
        fig.savefig(png, dpi=120)
        rendered[name] = (png, svg_text(fig))
    return rendered
