"""The data of a summary, shared by its computation (discover.py, labels.py, tables.py, summarize.py) and its
displays (report.py, plots.py, html_report.py, tensorboard.py): runs, entries of seeds, tables, paired
comparisons and their order.

    cell = Entry(); cell.add(seed=0, value=0.84)
    cell.mean, cell.ci                                  # None where undefined (n < 2)
    rows = sorted(labels, key=row_key)

    relative(run.path, root)                            # how every display names a run directory

Plain Python only: reading a sweep's numbers imports neither torch nor TensorBoard.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normbench.summary import stats

VARLEN = "variable_length"
METRICS = {"test_acc": "test accuracy (running statistics)",
           "test_acc_train_mode": "test accuracy with batch statistics (norms in train mode)",
           "test_acc_precise_bn": "test accuracy with PreciseBN statistics",
           "train_acc": "training-set accuracy (running statistics)",
           "train_acc_train_mode": "training-set accuracy with batch statistics",
           "test_acc_background": "test accuracy with background rows after the image (the second length manipulation)",
           "test_acc_precise_bn_past": "test accuracy with PreciseBN on the steps past the trained ones only (the control)"}
CORE_METRICS = ("test_acc", "test_acc_train_mode")  # every study has these; a failed run is marked in them
MODEL_ORDER = ["mlp", "cnn", "resnet", "rnn", "transformer"]  # tables and figures list models in this order
MIN_N = 3  # cells with fewer seeds are marked: their interval is too wide to read, or undefined


@dataclass
class Run:
    path: Path  # the run directory
    status: str  # completed | diverged | failed | incomplete | unreadable
    config: dict[str, Any] = field(default_factory=dict)  # flattened: {"norm.name": "bn", ...}
    results: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # why it is not completed
    overrides: list[str] = field(default_factory=list)  # the command line Hydra recorded (.hydra/overrides.yaml)

    @property
    def varlen(self) -> bool:
        return bool(self.config.get("varlen.enabled"))

    @property
    def study(self) -> str:
        """The shipped experiment the run came from (experiment=... on its command line), else ''."""
        named = [o.split("=", 1)[1] for o in self.overrides if o.lstrip("+").startswith("experiment=")]
        return named[-1] if named else (VARLEN if self.varlen else "")

    @property
    def table_study(self) -> str:
        """The study as tables and labels group runs: the experiment, and the variable-length regime's
        design (varlen_design=length or padding) beside it, whose runs answer different questions."""
        design = self.config.get("varlen.design") if self.varlen else None
        return f"{self.study} ({design})" if design else self.study


@dataclass
class Entry:
    """One entry (a cell) of a table: the seeds of one (norm label, column), their values, and the runs
    that did not give one."""
    values: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)  # aligned with values: what pairs two cells
    paths: list[Path] = field(default_factory=list)  # aligned with values: the run directories
    n_diverged: int = 0
    n_failed: int = 0

    def add(self, seed: int, value: float, path: Path | None = None) -> None:
        self.seeds.append(seed)
        self.values.append(value)
        self.paths.append(path)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:  # sample standard deviation (n - 1), undefined for one value
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    @property
    def ci(self) -> tuple[float, float] | None:
        return stats.t_interval(self.values)

    def by_seed(self) -> dict[int, float]:
        """Seed -> value for seeds that occur once (a repeated seed cannot be paired unambiguously)."""
        counts = {s: self.seeds.count(s) for s in self.seeds}
        return {s: v for s, v in zip(self.seeds, self.values) if counts[s] == 1}


@dataclass
class Comparison:
    """One norm against the reference in one column: per-seed differences (row - reference)."""
    row: str
    col: str
    result: stats.Paired
    p_holm: float | None = None  # adjusted within the table

    @property
    def significant(self) -> bool:
        return self.p_holm is not None and self.p_holm < 1 - stats.LEVEL


@dataclass
class Table:
    kind: str  # "batch" (columns are batch sizes) | "variable_length" (columns are test lengths)
    study: str  # the experiment the runs came from, '' for a plain sweep
    data: str
    model: str
    metric: str
    rows: list[str] = field(default_factory=list)  # norm labels
    cols: list[str] = field(default_factory=list)  # batch sizes or test lengths
    cells: dict[tuple[str, str], Entry] = field(default_factory=dict)
    values_per_channel: dict[tuple[str, str], set[int]] = field(default_factory=dict)  # batch: cell -> the counts seen
    batch_dependent: set[str] = field(default_factory=set)  # rows whose runs record a batch-dependent norm
    train_range: tuple[int, int] | None = None  # variable length: the trained lengths
    ref: str | None = None  # the row the comparisons are against (None: not in this table)
    comparisons: list[Comparison] = field(default_factory=list)
    best: dict[str, set[str]] = field(default_factory=dict)  # column -> rows not significantly below the top
    chosen: dict[tuple[str, str], str] = field(default_factory=dict)  # --select: cell -> "lr=0.01", "lr=0.1 ⚑"
    notes: list[str] = field(default_factory=list)  # said under the table in every format

    @property
    def axis(self) -> str:
        return "test length (rows)" if self.kind == VARLEN else "batch size"

    @property
    def title(self) -> str:
        parts = [self.study, self.data, self.model] if self.study else [self.data, self.model]
        return " · ".join(parts) + f" · {METRICS[self.metric]} by {self.axis}"

    @property
    def slug(self) -> str:
        return "_".join(p for p in (self.study or "sweep", self.data, self.model, self.metric) if p)

    def column_values_per_channel(self, col: str) -> list[int]:
        """The counts a column's runs saw, over its rows (a column mixes them: ghost batches at batch 64)."""
        return sorted({v for (_, c), seen in self.values_per_channel.items() if c == col for v in seen})


@dataclass
class Summary:
    """Everything summarize computed: the displays only format it."""
    root: Path
    runs: list[Run]
    tables: list[Table]
    varied: dict[str, list[str]]  # key -> the values it takes across the runs (seed included)
    constant: dict[str, Any]  # keys set to one non-default value in every run
    ref: str
    claims: list = field(default_factory=list)  # claims.ClaimResult, in the order declared
    extensions: list[str] = field(default_factory=list)  # --select: commands that widen a grid chosen at its edge
    costs: dict = field(default_factory=dict)  # study -> runs, computations, wall_s, train_s, eval_s, other_s
    lr_curves: list = field(default_factory=list)  # lr_sensitivity.LrCurve: accuracy against lr, where lr varies
    protocol: dict = field(default_factory=dict)  # the confirmatory protocol the claims were tested under (describe())
    # a study folder's decisions as its looks made them (study.json) and where this replay disagrees with them
    # (frozen.stored_decisions): {"stored": [...], "disagreements": [...]}, or {}
    decisions: dict = field(default_factory=dict)

    @property
    def problems(self) -> list[Run]:
        """The runs not in the tables, a duplicate aside (`duplicates` counts them)."""
        return [r for r in self.runs if r.status not in ("completed", "duplicate")]

    @property
    def duplicates(self) -> list[Run]:
        """The runs read twice or more (discover.distinct): each counted once."""
        return [r for r in self.runs if r.status == "duplicate"]

    @property
    def duplicates_line(self) -> str:
        n = len(self.duplicates)
        return (f"{n} duplicate run{'s' * (n > 1)} dropped (the same study, config and seed as a run already read; "
                f"e.g. {self.duplicates[0].path}): each run counted once") if n else ""


def col_key(col: str):
    """Numbers (batch sizes, lengths) in order, then the unresized, mixed-length and padded tests."""
    named = {"original": 0, "mixed": 1}
    return (0, int(col), "") if col.isdigit() else (1, named.get(col, 2), col)


def row_key(label: str, ref: str = "bn"):
    """No norm first (the baseline), then the reference, then by name; a label's extras after its norm,
    numbers in order (ghost_batch=2 before ghost_batch=16)."""
    name = label.split(" ")[0]
    natural = tuple((0, float(p), "") if p.replace(".", "", 1).isdigit() else (1, 0.0, p)
                    for p in re.split(r"(\d+(?:\.\d+)?)", label) if p)
    return (0 if name == "none" else 1 if name == ref else 2, name, natural)


def fmt_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def relative(path: Path, root: Path) -> str:
    """`path` as the displays show it: relative to the summary's root ("." for the root itself)."""
    return str(path.relative_to(root)) if path != root else "."
