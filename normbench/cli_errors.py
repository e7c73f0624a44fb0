"""One-line messages for the mistakes Hydra finds while composing a config; part of the CLI.

    try: train()
    except Exception as e: raise explain(e) or e      # a UserError: what is wrong, how to fix it

Hydra reports a misspelled key, an unknown group option or a wrong type in several lines ending
with its search path. These say the same in one line and list what is valid, from the typed schema
(normbench/config.py), the config files (normbench/configs/) and the groups generated into Hydra's ConfigStore
(model, norm); a renamed key (rnn_norm, now seq_norm) says its new name. Hydra's own modules are imported
inside functions only, so nothing but the CLI ever loads Hydra.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import typing
from importlib import resources

from normbench.config import MODEL_DEFAULTS, Config
from normbench.errors import UserError

LABELS = {"model": "model", "norm": "norm", "data": "dataset", "experiment": "experiment"}


def _norm_options() -> list[str]:
    """The generated norm group's options, read from the norms' sources when asked, not on import."""
    from normbench.configs import norm_defaults

    return sorted(norm_defaults())


# Groups the CLI stores in Hydra's ConfigStore (configs.store_configs), not in config files: their options,
# computed when asked
STORED = {"model": lambda: sorted(MODEL_DEFAULTS), "norm": _norm_options}
# Keys that were renamed: old -> new (a command line or a recorded run may still say the old one)
RENAMED = {"rnn_norm": "seq_norm"}


def groups() -> list[str]:
    """The config groups: one folder each under normbench/configs/, the stored ones, and experiment."""
    found = {p.name for p in resources.files("normbench.configs").iterdir()
             if p.is_dir() and p.name not in ("hydra", "__pycache__")}
    return sorted(found | set(STORED) | {"experiment"})


def group_options(group: str) -> list[str]:
    if group in STORED:
        return STORED[group]()
    folder = resources.files("normbench.configs") / group
    if not folder.is_dir():
        return []
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _unknown_option(group: str, name: str, options: list[str] | None = None) -> UserError:
    options = group_options(group) if options is None else options
    label = LABELS.get(group, group)
    what = f"no {label} given" if not name else f"unknown {label} {name!r}"
    if not options:
        return UserError(what, f"no {label} configs are shipped here; drop the {group}= override")
    close = difflib.get_close_matches(name, options, 1)
    hint = f"did you mean {group}={close[0]}? " if close else ""
    return UserError(what, f"{hint}choose one of: {', '.join(options)} ({group}=NAME)")


def _schema_at(path: str):
    """The dataclass type at dotted `path` in Config ('' is the root), or None (e.g. hydra.*)."""
    node = Config
    for part in filter(None, path.split(".")):
        hints = typing.get_type_hints(node) if dataclasses.is_dataclass(node) else {}
        if part not in hints:
            return None
        node = hints[part]
    return node if dataclasses.is_dataclass(node) else None


def _keys(node) -> list[str]:
    return [f.name for f in dataclasses.fields(node)]


def key_exists(key: str) -> bool:
    """Is dotted `key` a key of the schema (or a config group), or one in a mapping the schema leaves open
    (norm.options.KEY: a user's norm's own options)?"""
    parent, _, leaf = key.rpartition(".")
    node = _schema_at(parent)
    return (not parent and leaf in groups()) or (node is not None and leaf in _keys(node)) or _open(parent)


def _open(path: str) -> bool:
    """Is dotted `path` a Dict field of the schema, which takes any key?"""
    owner, _, leaf = path.rpartition(".")
    node = _schema_at(owner) if path else None
    hint = typing.get_type_hints(node).get(leaf) if node is not None else None
    return typing.get_origin(hint) is dict


def unknown_key(key: str, value: str = "") -> UserError:
    parent, _, leaf = key.rpartition(".")
    if not parent and leaf in RENAMED:
        new = RENAMED[leaf]
        return UserError(f"unknown key {key!r}", f"{leaf} was renamed {new}; use {new}={value or 'NAME'}")
    if not parent and leaf in groups():  # a group with no config folder, e.g. experiment=...
        return _unknown_option(leaf, value)
    node = _schema_at(parent)
    if node is None:
        return UserError(f"unknown key {key!r}", "see `normbench train --help` and Hydra's docs for hydra.* keys")
    keys = _keys(node) + ([g for g in groups() if g not in _keys(node)] if not parent else [])
    close = difflib.get_close_matches(leaf, keys, 1)
    prefix = f"{parent}." if parent else ""
    hint = f"did you mean {prefix}{close[0]}? " if close else ""
    where = f" of {parent}" if parent else ""
    return UserError(f"unknown key {key!r}", f"{hint}valid keys{where}: {', '.join(keys)}")


def _type_words(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return f"{_type_words(inner)} or null"
    if origin in (list, typing.List):
        return f"a list of {_type_words(args[0]).removeprefix('an ').removeprefix('a ')}s, like [32,64]"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(hint, str(hint))


def _choices(hint) -> list[str]:
    """The values of an enum-typed key (also inside Optional), else []."""
    for t in (hint, *typing.get_args(hint)):
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return [m.value for m in t]
    return []


def wrong_type(key: str, value) -> UserError:
    parent, _, leaf = key.rpartition(".")
    node = _schema_at(parent)
    if node is None or leaf not in _keys(node):
        return UserError(f"{key}={value} has the wrong type", "see `normbench train --help` for each key's type")
    hint = typing.get_type_hints(node)[leaf]
    choices = _choices(hint)
    if choices:  # the schema's enums (config.Choice): say the values, not the type
        return UserError(f"unknown {key} {str(value)!r}", f"use one of: {', '.join(choices)}")
    field = next(f for f in dataclasses.fields(node) if f.name == leaf)
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    what = f"{key}={value}: {key} takes {_type_words(hint)}"
    if default is None:
        return UserError(what, "its default is null (leave it out to keep it)")
    return UserError(what, f"for example {key}={json.dumps(default, separators=(',', ':'))} (its default)")


def one_line(text: str) -> str:
    """Hydra's message without its search-path listing and hints, joined into one line."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("Config search path", "provider=", "Set the environment variable HYDRA_FULL_ERROR",
                            "full_key:", "object_type=", "reference_type=")):
            continue
        if line:
            lines.append(line.rstrip("."))
    return "; ".join(lines)


def _given(overrides: list[str]) -> dict[str, str]:
    """key -> value of each `key=value` on the command line (`+key`, `~key` as `key`)."""
    return dict(o.lstrip("+~").partition("=")[::2] for o in overrides)


def _value_of(key: str, overrides: list[str]) -> str:
    return _given(overrides).get(key, "")


def _missing_launcher(overrides: list[str]) -> UserError | None:
    """`hydra/launcher=slurm` without the `slurm` extra: what to install (hydra_plugins/normbench_slurm)."""
    if _given(overrides).get("hydra/launcher") != "slurm":
        return None
    from hydra_plugins.normbench_slurm import MISSING_EXTRA

    return MISSING_EXTRA


def explain(e: BaseException, overrides: list[str] = ()) -> UserError | None:
    """A one-line UserError for a Hydra/OmegaConf composition error, or None if `e` is not one."""
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

    missing = _missing_launcher(overrides)
    if missing is not None:  # e.g. hydra.launcher.<a key of hydra-submitit's schema>, which is not there
        return missing
    cause = e.__cause__
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and "/" in e.missing_cfg_file:
        group, _, name = e.missing_cfg_file.rpartition("/")
        options = group_options(group) if group in groups() else e.options
        return _unknown_option(group, name, options)
    if isinstance(cause, (ConfigKeyError, AttributeError)) and getattr(cause, "full_key", None):
        if not cause.full_key.startswith("hydra."):
            return unknown_key(cause.full_key, _value_of(cause.full_key, overrides))
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        return wrong_type(cause.full_key, cause.value)
    if isinstance(e, OverrideParseException):
        return UserError(f"cannot parse the overrides: {one_line(str(e))}")
    if isinstance(e, (HydraException, OmegaConfBaseException)):
        text = one_line(str(e)) + (f": {one_line(str(cause))}" if isinstance(cause, OmegaConfBaseException) else "")
        return UserError(text, "see `normbench train --help`")
    return None


def parse_overrides(overrides: list[str]) -> list:
    """Command-line overrides as Hydra reads them: its `Override`s (key_or_group, is_add(), is_force_add(),
    is_sweep_override(), sweep_iterator()); a malformed one raises hydra.errors.OverrideParseException.
    Hydra's parser is no documented API, but what its own launchers and sweepers call: it is called here
    only, and tests/test_private_apis.py checks what normbench reads of it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides)


def check_added_keys(overrides: list[str]) -> None:
    """Refuse `+key=value` for a key the schema lacks: Hydra would add it, and the typed config
    would then drop it without a word (Hydra's own message even suggests `+batchsize=8`)."""
    for o in parse_overrides(overrides):
        key = o.key_or_group.replace("/", ".")
        if (o.is_add() or o.is_force_add()) and not key.startswith("hydra") and not key_exists(key):
            raise unknown_key(key, _value_of(key, overrides))


def check_pack_overrides(overrides: list[str]) -> None:
    """`seed=...` with `pack.seeds=...` (or `lr=` with `pack.lrs=`) on one command line: the config alone
    cannot tell `seed=0` from the default, so the command line is read here."""
    given = {k: v for k, v in _given(overrides).items() if v != "null"}  # pack.lrs=null lr=0.1: one lr
    for one, many in (("seed", "pack.seeds"), ("lr", "pack.lrs")):
        if one in given and many in given:
            raise UserError(f"{one}={given[one]} and {many} both choose the {'seed' if one == 'seed' else 'learning rate'}",
                            f"drop {one}=...: each member's {one} comes from {many}")


def check_model_override(overrides: list[str]) -> None:
    """`model.name=cnn` would rename the composed model without its defaults (the MLP's depth and dropout
    would stay); the model group, `model=cnn`, brings the CNN's own."""
    given = _given(overrides)
    if "model.name" in given:
        value = given["model.name"]
        raise UserError(f"model.name={value} renames the model but keeps the other model's defaults",
                            f"choose the model with model={value or 'NAME'} (its own defaults come with it)")
