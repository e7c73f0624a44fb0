"""The plots of `normbench summarize`, as PNG files and as TensorBoard figures.

    figures = plot_all(tables, out_dir)   # {"small_batch_fashion_mnist": out_dir/"small_batch_fashion_mnist.png"}
    log_to_tensorboard(figures, markdown, out_dir / "tensorboard")

Small batch: one panel per model, test accuracy vs batch size (log x), one line per norm with error
bars (std over seeds), dashed where a batch-dependent norm is evaluated with batch statistics; and one
panel with the same accuracies against the number of values each BN channel averages over (batch for
an MLP, batch x H x W for a CNN), where the two models' BN curves should line up if that number is what
decides BN's fate. Variable length: accuracy vs test length, and the mixed-length / heavy-padding tests.
Uses matplotlib's object API only (no pyplot): nothing global changes in the caller's process.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from normbench.summarize import row_key

MARKERS = "os^vD<>ph*"
MODEL_ORDER = ["mlp", "cnn", "rnn"]


def _log2_axis(ax, ticks: list[int]) -> None:
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(ticks)), [str(t) for t in sorted(set(ticks))])
    ax.xaxis.set_minor_locator(NullLocator())


def _batch_dependent(label: str) -> bool:
    from normbench import norms

    try:
        return norms.get(label.split(" ")[0]).batch_dependent
    except Exception:  # a norm this version does not know: draw it as batch-independent
        return False


def _colors(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _series(t, label: str, numeric_only: bool = True):
    cols = [c for c in t.cols if (label, c) in t.cells and t.cells[label, c].n and (c.isdigit() or not numeric_only)]
    cells = [t.cells[label, c] for c in cols]
    return cols, [c.mean for c in cells], [c.std or 0.0 for c in cells]


def small_batch_figure(tables: list) -> Figure:
    """`tables`: the small-batch tables of one dataset (test_acc and test_acc_train_mode, per model)."""
    evals = {t.model: t for t in tables if t.metric == "test_acc"}
    trains = {t.model: t for t in tables if t.metric == "test_acc_train_mode"}
    models = sorted(evals, key=lambda m: (MODEL_ORDER.index(m) if m in MODEL_ORDER else 9, m))
    labels = sorted({r for t in evals.values() for r in t.rows}, key=row_key)
    colors = _colors(labels)
    bn_like = [r for r in labels if _batch_dependent(r)]
    panels = len(models) + bool(bn_like)
    fig = Figure(figsize=(5.2 * panels, 4.2), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False, sharey=True)[0]  # one scale: MLP and CNN compare
    for ax, model in zip(axes, models):
        for label in evals[model].rows:
            cols, mean, std = _series(evals[model], label)
            if cols:
                ax.errorbar([int(c) for c in cols], mean, yerr=std, marker="o", ms=4, capsize=3,
                            color=colors[label], label=label)
            if label in bn_like and model in trains:
                cols, mean, std = _series(trains[model], label)
                if cols:
                    ax.errorbar([int(c) for c in cols], mean, yerr=std, marker="x", ms=4, capsize=2, ls="--",
                                color=colors[label], alpha=0.7, label=f"{label}, batch stats at test")
        _log2_axis(ax, [int(c) for c in evals[model].cols if c.isdigit()])
        ax.set_xlabel("batch size")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{model}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if bn_like:
        ax = axes[-1]
        for m, model in enumerate(models):
            t = evals[model]
            for label in bn_like:
                cols, mean, std = _series(t, label)
                cols_vpc = [(t.values_per_channel.get(c), mu, s) for c, mu, s in zip(cols, mean, std)]
                cols_vpc = [p for p in cols_vpc if p[0]]
                if cols_vpc:
                    x, y, e = zip(*cols_vpc)
                    ax.errorbar(x, y, yerr=e, marker=MARKERS[m % len(MARKERS)], ms=5, capsize=3,
                                color=colors[label], ls="-" if m == 0 else ":", label=f"{label} · {model}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("values per channel in BN's statistics")
        ax.set_ylabel("test accuracy")
        ax.set_title("batch-dependent norms: batch (MLP) or batch × H × W (CNN)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"small batch · {tables[0].data} · mean ± std over seeds")
    return fig


def variable_length_figure(evals, trains=None) -> Figure:
    """`evals`/`trains`: the variable-length test_acc / test_acc_train_mode tables of one (data, model)."""
    colors = _colors(evals.rows)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, bx = fig.subplots(1, 2)
    for label in evals.rows:
        cols, mean, std = _series(evals, label)
        if cols:
            ax.errorbar([int(c) for c in cols], mean, yerr=std, marker="o", ms=4, capsize=3,
                        color=colors[label], label=label)
    if evals.train_range:
        ax.axvspan(*evals.train_range, color="grey", alpha=0.12, label="trained lengths")
    ax.set_xlabel("test length (rows)")
    ax.set_ylabel("test accuracy")
    ax.set_title("accuracy vs test length (running statistics)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)

    settings = [(evals, c, c) for c in evals.cols if not c.isdigit()]
    settings += [(trains, c, f"{c}, batch stats") for c in (trains.cols if trains else []) if not c.isdigit()]
    width = 0.8 / max(1, len(evals.rows))
    lows, highs = [], []
    for i, label in enumerate(evals.rows):
        xs, ys, es = [], [], []
        for j, (t, col, _) in enumerate(settings):
            cell = t.cells.get((label, col))
            if cell is not None and cell.n:
                xs.append(j + (i - (len(evals.rows) - 1) / 2) * width)
                ys.append(cell.mean)
                es.append(cell.std or 0.0)
        bx.bar(xs, ys, width, yerr=es, capsize=2, color=colors[label], label=label)
        lows += [y - e for y, e in zip(ys, es)]
        highs += [y + e for y, e in zip(ys, es)]
    if lows:  # zoom in: the differences are points of accuracy, not tens of them
        pad = 0.1 * (max(highs) - min(lows)) + 0.005
        bx.set_ylim(max(0.0, min(lows) - pad), min(1.0, max(highs) + pad))
    bx.set_xticks(range(len(settings)), [name for _, _, name in settings], fontsize=8)
    bx.set_ylabel("test accuracy")
    bx.set_title("mixed lengths and heavy padding (y zoomed)")
    bx.legend(fontsize=7)
    bx.grid(alpha=0.3, axis="y")
    fig.suptitle(f"variable length · {evals.data} · {evals.model} · mean ± std over seeds")
    return fig


def plot_all(tables: list, out: Path) -> dict[str, Path]:
    """One PNG per (regime, dataset) for small batch, per (dataset, model) for variable length."""
    files = {}
    small = [t for t in tables if t.regime == "small_batch"]
    for data in sorted({t.data for t in small}):
        files[f"small_batch_{data}"] = small_batch_figure([t for t in small if t.data == data])
    for t in tables:
        if t.regime == "variable_length" and t.metric == "test_acc":
            trains = next((u for u in tables if (u.regime, u.data, u.model, u.metric)
                           == (t.regime, t.data, t.model, "test_acc_train_mode")), None)
            files[f"variable_length_{t.data}_{t.model}"] = variable_length_figure(t, trains)
    paths = {}
    for name, fig in files.items():
        paths[name] = out / f"{name}.png"
        fig.savefig(paths[name], dpi=120)
    return paths


def log_to_tensorboard(figures: dict[str, Path], markdown: str, log_dir: Path) -> None:
    """The PNGs as TensorBoard images (tab Images) and the Markdown tables as text (tab Text)."""
    import numpy as np
    from matplotlib.image import imread
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(log_dir)) as writer:
        for name, path in figures.items():
            image = (imread(path)[..., :3] * 255).astype(np.uint8)
            writer.add_image(f"summary/{name}", image, dataformats="HWC")
        writer.add_text("summary", markdown)
