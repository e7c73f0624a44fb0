"""`normbench summarize DIR --select lr`: the learning rate of each cell, chosen on validation accuracy
without the seed it reports (nested, leave one seed out).

    chosen = choose(runs, "lr", labels)              # summarize.compute does this with --select lr
    kept = [r for r in runs if kept_by(chosen, r, labels, "lr")]; annotate(tables, chosen, "lr")
    look_runs = kept(runs_of_a_look, "lr")           # the same, chosen among those runs alone (verdicts.py)
    extensions(chosen, runs, labels, "lr", root)     # the commands that widen a grid chosen at its edge

For every cell (study x data x model x norm label x batch size; per norm label in the variable-length
study, whose columns are test lengths of the same runs), each seed s reports the *test* accuracy of its run
at the value, among those *s ran*, whose runs on the *other* seeds have the best mean *validation* accuracy
(results.json `val_acc`). No seed's own numbers take part in choosing the value it reports, so the best of
a grid is not flattered by the noise it was picked on; the test set never takes part. A value s never ran
(a grid widened at later seeds only) is not a choice for s; a seed none of whose values ran at another
seed is left without a run, and the cell's table says so. A cell with one seed chooses on that seed's
validation (noted). A run that diverged counts at chance accuracy (10%; lr_sensitivity.py scores it so
too), so a value that diverges on some seeds is not judged on its survivors alone; a failed run (not the
value's doing) counts nowhere in the means, but its value was tried at its seed. The chosen values are
shown in the cell; ⚑ marks a choice at the edge of the grid (its smallest or largest value), where a wider
grid might choose differently: summarize prints the command that trains the next value on that side (a
run recorded with an old key name, rnn_norm, gets the current one, seq_norm).

The protocol's looks (verdicts.py) call `kept` on the runs of a look's seeds only, so a look's choices never
read a later round's runs.
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normbench.summary.lr_sensitivity import chance
from normbench.summary.types import Run, Table, fmt_value, relative

EDGE = "⚑"


@dataclass
class Selection:
    per_seed: dict[int, Any]  # seed -> the value chosen for it (on the other seeds' validation)
    grid: list[Any]  # the values the cell tried, in order
    unchosen: list[int] = field(default_factory=list)  # seeds none of whose values ran at another seed
    tried: dict[int, list[Any]] = field(default_factory=dict)  # seed -> the values it ran (any status)

    @property
    def low_edge(self) -> bool:
        return len(self.grid) > 1 and self.grid[0] in self.per_seed.values()

    @property
    def high_edge(self) -> bool:
        return len(self.grid) > 1 and self.grid[-1] in self.per_seed.values()

    def text(self, key: str) -> str:
        """'lr=0.003', or 'lr=0.003 (4) 0.01 (1)' where seeds chose differently; ⚑ at an edge."""
        counts = Counter(self.per_seed.values())
        values = sorted(counts, key=self.grid.index)
        shown = fmt_value(values[0]) if len(values) == 1 else " ".join(f"{fmt_value(v)} ({counts[v]})" for v in values)
        return f"{key}={shown}" + f" {EDGE}" * (self.low_edge or self.high_edge)


def cell_key(run: Run, label: str) -> tuple:
    column = None if run.varlen else run.config.get("batch_size")
    return (run.varlen, run.table_study, run.config.get("data.name"), run.config.get("model.name"), label, column)


def score(run: Run) -> float | None:
    """A run's validation accuracy as the choice reads it: chance for a diverged run (or a non-finite
    accuracy: what a diverged model predicts), so an lr that diverges on some seeds is not judged on its
    survivors alone; None for a failed or unfinished run, or one without val_acc (not the lr's doing)."""
    if run.status == "diverged":
        return chance(run)
    value = run.results.get("val_acc")
    if run.status != "completed" or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else chance(run)


def choose(runs: list[Run], key: str, labels: dict) -> dict[tuple, Selection]:
    """cell key -> its Selection, from the runs' validation accuracy (`score`: a diverged run at chance): for
    each seed, among the values that seed ran (a failed or diverged run too), the one with the best mean
    over the other seeds (a tie: the smaller value); a seed none of whose values has a score at another seed
    is `unchosen`."""
    scores: dict[tuple, dict[Any, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    tried: dict[tuple, dict[int, set]] = defaultdict(lambda: defaultdict(set))  # cell -> seed -> values run
    for r in runs:
        if not r.config or r.path not in labels:
            continue
        cell, seed = cell_key(r, labels[r.path]), int(r.config.get("seed", 0))
        tried[cell][seed].add(r.config.get(key))
        if (v := score(r)) is not None:
            scores[cell][r.config.get(key)][seed] = v
    chosen = {}
    for cell, by_value in scores.items():
        # every value the cell ran: one that diverged everywhere is still the grid's edge, not a gap
        grid = sorted(set().union(*tried[cell].values()))
        seeds = sorted({s for vals in by_value.values() for s in vals})

        def best(seed: int, excluded: int | None) -> Any:
            means = {v: statistics.fmean(x for s, x in by_value[v].items() if s != excluded) for v in grid
                     if v in tried[cell][seed] and v in by_value and any(s != excluded for s in by_value[v])}
            return max(means, key=lambda v: (means[v], -grid.index(v))) if means else None

        per_seed = {s: best(s, s if len(seeds) > 1 else None) for s in seeds}
        chosen[cell] = Selection({s: v for s, v in per_seed.items() if v is not None}, grid,
                              [s for s, v in per_seed.items() if v is None],
                              {s: sorted(vals) for s, vals in sorted(tried[cell].items())})
    return chosen


def kept(runs: list[Run], key: str) -> list[Run]:
    """The runs at the values chosen for their seeds, chosen among `runs` alone (labels and all): what a
    look of the protocol reads, given its seeds' runs."""
    from normbench.summary.labels import label_runs

    labels = label_runs(runs, pooled=frozenset({key}))
    chosen = choose(runs, key, labels)
    return [r for r in runs if kept_by(chosen, r, labels, key)]


def kept_by(chosen: dict[tuple, Selection], run: Run, labels: dict, key: str) -> bool:
    """Is `run` at the value chosen for its seed in its cell? (Failed and diverged runs there too: their cell
    marks them; a claim reads a diverged one at chance.)"""
    c = chosen.get(cell_key(run, labels.get(run.path))) if run.config else None
    if c is None:
        return False
    seed = int(run.config.get("seed", 0))
    if seed in c.per_seed:
        return run.config.get(key) == c.per_seed[seed]
    # a seed with no validation accuracy in the cell (it diverged or failed at every value): at a chosen value
    return run.status != "completed" and run.config.get(key) in c.per_seed.values()


def annotate(tables: list[Table], chosen: dict[tuple, Selection], key: str) -> None:
    """Write each cell's chosen values (⚑ at the edge) and how they were chosen into the tables."""
    for t in tables:
        varlen = t.kind == "variable_length"
        grids = set()
        for row in t.rows:
            for col in t.cols:
                cell = (varlen, t.study, t.data, t.model, row, None if varlen else int(col))
                if cell in chosen:
                    t.chosen[row, col] = chosen[cell].text(key)
                    grids.add(", ".join(fmt_value(v) for v in chosen[cell].grid))
                    for seed in chosen[cell].unchosen:
                        ran = ", ".join(fmt_value(v) for v in chosen[cell].tried.get(seed, []))
                        note = (f"seed {seed} of {row}{'' if varlen else f' at batch {col}'} is left without a "
                                f"run: no {key} it ran ({ran}) ran at another seed")
                        if note not in t.notes:  # a variable-length cell spans every column
                            t.notes.append(note)
        if grids:
            t.notes.append(f"{key} chosen per seed on the other seeds' mean validation accuracy (nested: no seed "
                           f"reports a value it helped choose); (k): seeds at that value; {EDGE}: a choice at the "
                           f"edge of the grid ({'; '.join(sorted(grids))}); a diverged run counts at chance")


def _next(grid: list[float], high: bool) -> float:
    """One more step of the grid's spacing beyond its edge: log spacing for positive grids (a factor),
    even spacing otherwise."""
    a, b = (grid[-2], grid[-1]) if high else (grid[1], grid[0])
    return float(f"{b * (b / a):.3g}") if a > 0 and b > 0 else b + (b - a)


def _renamed(override: str) -> str:
    """A recorded override under the key's current name (rnn_norm=ln -> seq_norm=ln): the command must compose
    today (cli_errors.RENAMED)."""
    from normbench.cli_errors import RENAMED

    prefix = override[:len(override) - len(override.lstrip("+~"))]
    name, eq, value = override[len(prefix):].partition("=")
    return f"{prefix}{RENAMED.get(name, name)}{eq}{value}" if eq else override


def extensions(chosen: dict[tuple, Selection], runs: list[Run], labels: dict, key: str, root: Path) -> list[str]:
    """For each cell whose choice sits at an edge of its grid: the command that trains the next value on
    that side for the cell's runs (their recorded command line, with `key` replaced), into `root`, so the
    next `summarize --select` sees it."""
    by_cell: dict[tuple, Run] = {}
    for r in runs:
        if r.config and r.path in labels:
            by_cell.setdefault(cell_key(r, labels[r.path]), r)
    commands = []
    for cell, c in chosen.items():
        run = by_cell.get(cell)
        if run is None or len(c.grid) < 2 or not all(isinstance(v, (int, float)) for v in c.grid):
            continue
        for high in [h for h, at in ((False, c.low_edge), (True, c.high_edge)) if at]:
            value = fmt_value(float(_next(c.grid, high)))
            # a pack's member: the pack again, at the new value; a plain run: no pack grid (an experiment's
            # own pack.lrs would otherwise come back), the new value
            new = f"pack.{key}s=[{value}]" if run.results.get("packed") else f"pack.{key}s=null {key}={value}"
            if not run.overrides:  # a run made without Hydra's record of its command line
                commands.append(f"# {relative(run.path, root)} and its cell: train {new} with the command that "
                                f"trained them (none is recorded)")
                continue
            keep = [_renamed(o) for o in run.overrides
                    if o.split("=", 1)[0].lstrip("+") not in (key, f"pack.{key}s")]
            name = re.sub(r"[^A-Za-z0-9.-]+", "_", "_".join(map(str, filter(None, [*cell[1:], value]))))
            where = root / f"{key}_extension" / name  # no = or , in the path: Hydra's override grammar
            commands.append(shlex.join(["normbench", "train", *keep, *new.split(), f"hydra.run.dir={where}"]))
    return commands
