"""The yaml config groups Hydra composes (`config.yaml`, `data/`, `experiment/`, ...), and `store_configs`,
which registers what they build on: the typed schema and the `model` and `norm` groups."""

from __future__ import annotations

import ast
import re
from pathlib import Path


def store_configs() -> None:
    """Hydra's ConfigStore: the typed schema as `base_config`, and two groups generated from the one place
    their defaults are written, so `--cfg job`, `--help` and every run's .hydra/config.yaml show the values
    that train: `model` from MODEL_DEFAULTS (a CNN's channels [32, 64], not null), and `norm` from each
    norm's build function's keyword defaults (`norm_defaults`; gn's groups 8, bn's eps 1e-5). The keys a
    norm does not take stay null in the schema."""
    from hydra.core.config_store import ConfigStore

    from normbench.config import MODEL_DEFAULTS, schema

    store = ConfigStore.instance()
    store.store(name="base_config", node=schema())
    for name, defaults in MODEL_DEFAULTS.items():
        store.store(group="model", name=name, node={"name": name, **defaults})
    for name, options in norm_defaults().items():
        store.store(group="norm", name=name, node={"name": name, **options})
    # Your own norms: `custom` names its class by norm.target; an installed package's (its entry points,
    # read without importing it) by name. Their options are norm.options, which the schema leaves open.
    from normbench.norms.user import CUSTOM, entry_point_names

    for name in [CUSTOM, *entry_point_names()]:
        store.store(group="norm", name=name, node={"name": name})


def norm_defaults() -> dict[str, dict[str, object]]:
    """{norm name: its options and their defaults}, equal to `norms.get(name).options()` for every catalog
    name (tests/test_norms_catalog.py), read from the build functions' signatures in normbench/norms/*.py
    without importing them: they import torch (seconds), which a mistyped override, `--help` and `--cfg
    job` would otherwise pay before Hydra says anything; reading the sources costs a small fraction of it. A
    default that is not a literal, or sources that cannot be read, make it ask the registry itself."""
    try:
        found = _read_norm_defaults()
    except Exception:  # noqa: BLE001  the registry is the truth; reading the source only spares torch's import
        found = {}
    if found:
        return found
    from normbench import norms

    return {name: norms.get(name).options() for name in norms.names()}


def _call_name(node: ast.AST) -> str | None:
    return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None


def _read_norm_defaults() -> dict[str, dict[str, object]]:
    """What `NormSpec.options()` returns, from the source: each `@register(NormSpec(name=...))` function's
    keyword-only parameters (`registry.keyword_options`), plus `impl` for a name with a `twin(name, ...)`."""
    found: dict[str, dict[str, object]] = {}
    twins: set[str] = set()
    registrations = 0  # every line that registers a norm: each must be a decorator read below
    for path in sorted((Path(__file__).resolve().parents[1] / "norms").glob("*.py")):  # not imported
        text = path.read_text(encoding="utf-8")
        if "register(" not in text and "twin(" not in text:
            continue
        registrations += len(re.findall(r"^\s*@?register\(", text, re.M))  # as a decorator or a call
        for node in ast.walk(ast.parse(text)):
            if _call_name(node) == "twin":
                twins.add(ast.literal_eval(node.args[0]))
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if _call_name(deco) == "register" and deco.args and _call_name(deco.args[0]) == "NormSpec":
                    name = next(ast.literal_eval(k.value) for k in deco.args[0].keywords if k.arg == "name")
                    params = node.args
                    if None in params.kw_defaults:
                        raise ValueError(f"{name}: a keyword option without a default")
                    found[name] = {a.arg: ast.literal_eval(d) for a, d in zip(params.kwonlyargs, params.kw_defaults)}
    if len(found) != registrations:
        raise ValueError("a norm is registered in a form this reader does not parse: ask the registry")
    return {name: {**options, **({"impl": "native"} if name in twins else {})} for name, options in found.items()}
