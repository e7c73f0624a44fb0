"""The README's claims, each as a paired difference with its 95% interval, from a reproduce run.

    python scripts/claims.py outputs/reproduce          # after scripts/reproduce.sh: a Markdown table

Reads the `summary.json` that `normbench summarize DIR --select lr` wrote in each study's directory (each
cell at its chosen learning rate) and, for every claim below, pairs the two cells' runs seed by seed
(normbench.stats.paired: the mean of the per-seed differences a - b and its Student-t interval). Within a
column the pairs share the initialization, the training subset and the batch order; across batch sizes
(the `drop` claims) they share the initialization and subset only. A claim whose cells are missing (a
smaller QUICK run) is listed as such.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from normbench import stats  # noqa: E402

A = "test_acc"
B = "test_acc_train_mode"
P = "test_acc_precise_bn"
REC, MASK, NAIVE = "bn placement=recurrent", "bn masked=true", "bn masked=false"

# (claim, study directory, model, (metric, norm label, column) of a, the same of b): the claim is a - b
CLAIMS = [
    ("(b) GN over BN at batch 2 (the GroupNorm paper's comparison)", "small_batch", "mlp",
     (A, "gn", "2"), (A, "bn", "2")),
    ("(b) LN over BN at batch 2", "small_batch", "mlp", (A, "ln", "2"), (A, "bn", "2")),
    ("(b) GN over BN at batch 128", "small_batch", "mlp", (A, "gn", "128"), (A, "bn", "128")),
    ("(b) none under BN at batch 128", "small_batch", "mlp", (A, "none", "128"), (A, "bn", "128")),
    ("(b) BN's drop, batch 32 -> 2", "small_batch", "mlp", (A, "bn", "2"), (A, "bn", "32")),
    ("(b) GN's drop, batch 32 -> 2", "small_batch", "mlp", (A, "gn", "2"), (A, "gn", "32")),
    ("(b) BN at batch 2: batch statistics at test vs running", "small_batch", "mlp", (B, "bn", "2"), (A, "bn", "2")),
    ("(b) BN at batch 2: PreciseBN vs running", "small_batch", "mlp", (P, "bn", "2"), (A, "bn", "2")),
    ("(b) BRN over BN at batch 2", "small_batch", "mlp", (A, "brn", "2"), (A, "bn", "2")),
    ("(b) BRN over BN at batch 8", "small_batch", "mlp", (A, "brn", "8"), (A, "bn", "8")),
    ("(a) BN ghost 2 vs ghost 64, SGD batch 64", "ghost_batch", "mlp",
     (A, "bn ghost_batch=2", "64"), (A, "bn ghost_batch=64", "64")),
    ("(a) BN ghost 4 vs ghost 64, SGD batch 64", "ghost_batch", "mlp",
     (A, "bn ghost_batch=4", "64"), (A, "bn ghost_batch=64", "64")),
    ("(a) BN ghost 2: PreciseBN vs running", "ghost_batch", "mlp",
     (P, "bn ghost_batch=2", "64"), (A, "bn ghost_batch=2", "64")),
    ("(a) GN over BN ghost 2", "ghost_batch", "mlp", (A, "gn", "64"), (A, "bn ghost_batch=2", "64")),
    ("(a) BRN over its ablation, ghost 2", "ghost_batch", "mlp",
     (A, "brn ghost_batch=2 r_max=3", "64"), (A, "brn ghost_batch=2 r_max=1", "64")),
    ("(a) BRN's ablation over BN, ghost 2", "ghost_batch", "mlp",
     (A, "brn ghost_batch=2 r_max=1", "64"), (A, "bn ghost_batch=2", "64")),
    ("values/ch: CNN BN at batch 8, 1 position (8 values/ch) vs all (1,568)", "values_per_channel", "cnn",
     (A, "bn positions=1", "8"), (A, "bn", "8")),
    ("values/ch: CNN BN at batch 8, 4 positions (32 values/ch) vs all", "values_per_channel", "cnn",
     (A, "bn positions=4", "8"), (A, "bn", "8")),
    ("values/ch: MLP BN ghost 8 (8 values/ch) vs ghost 64, for comparison", "ghost_batch", "mlp",
     (A, "bn ghost_batch=8", "64"), (A, "bn ghost_batch=64", "64")),
    ("varlen: recurrent BN's drop, 28 -> 42 rows", "variable_length", "rnn", (A, REC, "42"), (A, REC, "28")),
    ("varlen: none's drop, 28 -> 42 rows", "variable_length", "rnn", (A, "none", "42"), (A, "none", "28")),
    ("varlen: LN in the cell's drop, 28 -> 42 rows", "variable_length", "rnn",
     (A, "ln placement=recurrent", "42"), (A, "ln placement=recurrent", "28")),
    ("varlen: recurrent BN at 42 rows, stretched PreciseBN vs running", "variable_length", "rnn",
     (P, REC, "42"), (A, REC, "42")),
    ("varlen: recurrent BN's drop 28 -> 42 after stretched PreciseBN at each", "variable_length", "rnn",
     (P, REC, "42"), (P, REC, "28")),
    ("varlen: masked over naive BN, pad x2, batch statistics", "variable_length", "rnn",
     (B, MASK, "pad×2"), (B, NAIVE, "pad×2")),
    ("varlen: naive BN, pad x2 vs mixed, batch statistics", "variable_length", "rnn",
     (B, NAIVE, "pad×2"), (B, NAIVE, "mixed")),
]


# Single cells the README quotes: (what, study, model, (metric, norm label, column)).
TA, TT = "train_acc", "train_acc_train_mode"
CELLS = [
    (f"(b) {norm} at batch 2: {what}", "small_batch", "mlp", (metric, norm, "2"))
    for norm in ("bn", "brn", "gn") for what, metric in (
        ("training images, batch statistics (as it trained)", TT), ("training images, running statistics", TA),
        ("test, running statistics", A), ("test, batch statistics", B), ("test, PreciseBN", P))
] + [
    (f"(a) bn ghost 2: {what}", "ghost_batch", "mlp", (metric, "bn ghost_batch=2", "64")) for what, metric in (
        ("training images, batch statistics (as it trained)", TT), ("training images, running statistics", TA),
        ("test, running statistics", A), ("test, batch statistics", B), ("test, PreciseBN", P))
] + [
    (f"values/ch: CNN bn at batch 8, {k}", "values_per_channel", "cnn", (A, label, "8"))
    for k, label in (("1 position", "bn positions=1"), ("4 positions", "bn positions=4"),
                     ("16 positions", "bn positions=16"), ("all positions", "bn"))
] + [
    (f"varlen: {name} at {length} rows{how}", "variable_length", "rnn", (metric, label, length))
    for name, label in (("none", "none"), ("recurrent bn", REC), ("ln in the cell", "ln placement=recurrent"))
    for length in ("28", "36", "42")
    for how, metric in (("", A), (", stretched PreciseBN", P)) if not (metric == P and label != REC)
]


def load(root: Path) -> dict[tuple, dict]:
    cells = {}
    for path in sorted(root.glob("*/summary.json")):
        for g in json.loads(path.read_text())["groups"]:
            cells[path.parent.name, g["model"], g["metric"], g["norm"], g["axis"]] = g
    return cells


def find(cells: dict, study: str, model: str, metric: str, label: str, axis: str) -> dict | None:
    """The cell whose norm label is `label`, or else the one label holding all of its words with the fewest
    others (summarize shows only the settings that vary, so "bn placement=recurrent" may read
    "bn masked=true placement=recurrent"); None when there is none or more than one."""
    if (study, model, metric, label, axis) in cells:
        return cells[study, model, metric, label, axis]
    want = set(label.split())
    fits = [k for k in cells if k[:3] == (study, model, metric) and k[4] == axis and want <= set(k[3].split())]
    fewest = [k for k in fits if len(k[3].split()) == min(len(f[3].split()) for f in fits)]
    return cells[fewest[0]] if len(fewest) == 1 else None


def pct(x: float) -> str:
    return f"{100 * x:+.1f}"


def main(root: Path) -> None:
    cells = load(root)
    if not cells:
        sys.exit(f"claims.py: no */summary.json under {root}; run `normbench summarize DIR --select lr` first")
    print("| cell | mean, % [95% CI] | seeds |")
    print("|---|---|---|")
    for what, study, model, spec in CELLS:
        g = find(cells, study, model, *spec)
        ci = f" [{100 * g['ci_low']:.1f}, {100 * g['ci_high']:.1f}]" if g and g["ci_low"] is not None else ""
        print(f"| {what} | {100 * g['mean']:.1f}{ci} | {g['n']} |" if g else f"| {what} | not in this run | 0 |")
    print()
    print("| claim | a | b | a − b, points [95% CI] | pairs |")
    print("|---|---|---|---|---|")
    for claim, study, model, a, b in CLAIMS:
        ga, gb = find(cells, study, model, *a), find(cells, study, model, *b)
        if ga is None or gb is None:
            print(f"| {claim} | – | – | not in this run | 0 |")
            continue
        xa, xb = dict(zip(ga["seeds"], ga["values"])), dict(zip(gb["seeds"], gb["values"]))
        seeds = sorted(set(xa) & set(xb))
        d = stats.paired([xa[s] for s in seeds], [xb[s] for s in seeds], seeds)
        ci = f" [{pct(d.ci[0])}, {pct(d.ci[1])}]" if d.ci else ""
        print(f"| {claim} | {100 * ga['mean']:.1f} | {100 * gb['mean']:.1f} | {pct(d.mean)}{ci} | {d.n} |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "outputs/reproduce"))
