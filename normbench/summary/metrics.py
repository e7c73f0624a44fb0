"""A run's numbers as claims read them: a selector's value matched against a run's config, and a metric read
from results.json by its path (claims.py documents the forms).

    matches(run.config.get("norm.eps"), 1e-5)         # numbers numerically: YAML reads 1e-5 as a string
    read(results, "test_acc_by_length.42 - test_acc_by_length.28")   # a run's own drop
    read(results, "history[-3:].acc/val")             # the mean of the last 3 epochs' validation accuracy
    value(run, "test_acc")                            # read, with a diverged run at chance
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from normbench.summary import lr_sensitivity
from normbench.summary.types import Run, fmt_value


def number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def matches(value: Any, want: Any) -> bool:
    """Does a run's config value equal a selector's? Numbers numerically (YAML reads 1e-5 as a string)."""
    if value == want:
        return True
    a, b = number(value), number(want)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return fmt_value(value) == fmt_value(want) or str(value) == str(want)


LAST = re.compile(r"^(?P<name>[^.\[\]]+)\[-(?P<k>[1-9][0-9]*):\]$")  # history[-3:]: a list's last 3 entries


def read(results: dict[str, Any], path: str) -> float | None:
    """A number of results.json by its dotted path (test_acc_by_length.42), the difference of two
    ('test_acc_by_length.42 - test_acc_by_length.28': a run's own drop), or the mean over a list's last k
    entries ('history[-3:].acc/val': the last 3 epochs' validation accuracy; None unless all k have it);
    None where one is missing."""
    if " - " in path:
        x, y = (read(results, part) for part in terms(path))
        return None if x is None or y is None else x - y
    node: Any = results
    parts = path.split(".")
    for i, part in enumerate(parts):
        if last := LAST.match(part):
            entries, k = node.get(last["name"]) if isinstance(node, dict) else None, int(last["k"])
            if not isinstance(entries, list) or len(entries) < k:
                return None
            values = [read(e, ".".join(parts[i + 1:])) for e in entries[-k:]]
            return None if None in values else statistics.fmean(values)
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    out = number(node) if isinstance(node, (int, float)) else None
    return out if out is not None and math.isfinite(out) else None  # NaN: missing, not a number to test


def terms(metric: str) -> list[str]:
    """The paths a metric reads: two for 'x - y' (a run's own difference), else one."""
    return [term.strip() for term in metric.split(" - ", 1)]


def is_accuracy(metric: str) -> bool:
    """Is every term of the metric an accuracy (which has a chance level)?"""
    return all("acc" in term for term in terms(metric))


def value(run: Run, metric: str) -> float | None:
    """The run's metric; a diverged run's at chance (x - y of two accuracies: chance - chance = 0)."""
    if run.status == "diverged":
        if not is_accuracy(metric):
            return None
        return 0.0 if " - " in metric else lr_sensitivity.chance(run)
    return read(run.results, metric)
