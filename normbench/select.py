"""`normbench summarize DIR --select lr`: one learning rate per cell, chosen on validation accuracy.

    chosen = choose(runs, "lr", labels)              # summarize.compute does this with --select lr
    kept = [r for r in runs if kept_by(chosen, r, labels, "lr")]; annotate(tables, chosen, "lr", grid)

For every cell (study x data x model x norm label x batch size; per norm label in the variable-length
study, whose columns are test lengths of the same runs), the value of the selected key whose runs have
the best mean *validation* accuracy (results.json `val_acc`) over their seeds is chosen, and the cell
reports the *test* accuracy of those runs: the test set never takes part in the choice. The chosen
value is shown in the cell; ⚑ marks a choice at the edge of the grid (the smallest or largest value the
cell tried), where a wider grid might have chosen differently.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from normbench.tables import Run, Table, fmt_value

EDGE = "⚑"


def _cell_key(run: Run, label: str) -> tuple:
    column = None if run.varlen else run.config.get("batch_size")
    return (run.varlen, run.study, run.config.get("data.name"), run.config.get("model.name"), label, column)


def choose(runs: list[Run], key: str, labels: dict) -> dict[tuple, tuple[Any, bool, list]]:
    """cell key -> (chosen value, at the edge of the grid, the grid), from completed runs' val_acc."""
    scores: dict[tuple, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.status == "completed" and isinstance(r.results.get("val_acc"), (int, float)):
            scores[_cell_key(r, labels[r.path])][r.config.get(key)].append(r.results["val_acc"])
    chosen = {}
    for cell, by_value in scores.items():
        grid = sorted(by_value)
        best = max(grid, key=lambda v: (statistics.fmean(by_value[v]), -grid.index(v)))  # a tie: the smaller
        chosen[cell] = (best, len(grid) > 1 and best in (grid[0], grid[-1]), grid)
    return chosen


def kept_by(chosen: dict, run: Run, labels: dict, key: str) -> bool:
    """Is `run` at its cell's chosen value? (Failed and diverged runs there too: their cell marks them.)"""
    c = chosen.get(_cell_key(run, labels.get(run.path))) if run.config else None
    return c is not None and run.config.get(key) == c[0]


def annotate(tables: list[Table], chosen: dict, key: str, grid: list[str]) -> None:
    """Write each cell's chosen value (⚑ at the edge) and a note on how it was chosen into the tables."""
    for t in tables:
        varlen = t.kind == "variable_length"
        for row in t.rows:
            for col in t.cols:
                cell = (varlen, t.study, t.data, t.model, row, None if varlen else int(col))
                if cell in chosen:
                    value, edge, _ = chosen[cell]
                    t.chosen[row, col] = f"{key}={fmt_value(value)}" + f" {EDGE}" * edge
        t.notes.append(f"{key} chosen per cell by the best mean validation accuracy over seeds (test accuracy "
                       f"shown); {EDGE}: the choice is at the edge of the grid tried ({', '.join(grid)}): a wider "
                       f"grid might choose differently")
