"""What tells a sweep's runs apart: each run's norm label (the norm's name plus every other setting that
varies between runs of the same model) and the sweep's axes (what varied, what was set to one value).

    labels = label_runs(runs)                # {run dir: "bn masked=false"}
    varied, constant = sweep_axes(runs)      # {"batch_size": ["2", "8"]}, {"epochs": 3}

Only runs that differ by seed alone share a label, so only they are pooled into one table entry.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from normbench.config import Config, ModelConfig, flatten, runtime_keys, to_dict
from normbench.summary.types import Run, col_key, fmt_value

# Settings that never make two runs different experiments: seed is what a cell pools over; the names
# are the table and the row themselves; the test lengths are the columns.
IGNORED = runtime_keys() | {"seed", "norm.name", "model.name", "data.name", "varlen.test_lengths"}


@lru_cache(maxsize=None)
def model_defaults(model: str | None) -> dict[str, Any]:
    """The flattened default config of `model` (each model has its own defaults, e.g. the CNN's dropout), built
    once a model (sweep_axes asks once a key and run: building it each time was most of a summary's time). Read
    it, never change it: the dict is shared."""
    return flatten(to_dict(Config(model=ModelConfig(name=model or "mlp"))))


def _same(values) -> bool:
    return len({json.dumps(v, sort_keys=True) for v in values}) <= 1


def label_runs(runs: list[Run], pooled: frozenset[str] = frozenset()) -> dict[Path, str]:
    """A norm label per run: the norm name plus the settings that vary among the runs of that norm in its
    (study, data, model), e.g. `bn masked=false` next to `bn`; options that merely differ from norm to
    norm (rms's eps) are not shown. `pooled` keys (lr under --select lr) are never in a label."""
    by_group: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        if r.config:
            by_group[r.table_study, r.config.get("data.name"), r.config.get("model.name"), r.config.get("norm.name")
                     ].append(r)
    labels = {}
    for (_, _, model, _), group in by_group.items():
        defaults = model_defaults(model)
        axis = set() if group[0].varlen else {"batch_size"}
        keys = sorted({k for r in group for k in r.config} - IGNORED - axis - pooled)
        varying = [k for k in keys if not _same(r.config.get(k) for r in group)]
        for r in group:
            extras = [f"{k.split('.')[-1]}={fmt_value(r.config.get(k))}" for k in varying
                      if r.config.get(k) is not None and r.config.get(k) != defaults.get(k)]
            labels[r.path] = " ".join([str(r.config.get("norm.name")), *extras])
    return labels


def sweep_axes(runs: list[Run]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """What varied across the runs (key -> its values) and what every run set to one value other than
    its model's default (key -> value); runtime keys are neither. A norm's own options (bn's momentum
    next to ln's none) vary only if they vary among the runs of one norm."""
    configs = [r for r in runs if r.config]
    keys = sorted({k for r in configs for k in r.config} - runtime_keys())
    by_norm: dict[Any, list[Run]] = defaultdict(list)
    for r in configs:
        by_norm[r.config.get("norm.name")].append(r)
    varied, constant = {}, {}
    for k in keys:
        values = [r.config.get(k) for r in configs]
        option = k.startswith("norm.") and k != "norm.name"
        if option and all(_same(r.config.get(k) for r in group) for group in by_norm.values()):
            continue
        if not _same(values):
            distinct = {json.dumps(v, sort_keys=True): v for v in values}.values()
            varied[k] = sorted((fmt_value(v) for v in distinct), key=col_key)
        elif values and any(values[0] != model_defaults(r.config.get("model.name")).get(k) for r in configs) \
                and k not in ("model.name", "norm.name", "data.name"):
            constant[k] = values[0]
    return varied, constant
