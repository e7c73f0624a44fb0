"""A shipped study as data: its experiment, the sweeps its tables and claims read, and its sizes.

    study = load("ghost_batch")                     # normbench/study/plans/ghost_batch.yaml
    study = load("my_study.yaml")                   # a study of your own, in one file (docs/examples/my_study.yaml)
    study.sweeps_at("laptop")                       # {"bn": [overrides...], ...}: a scale's sweeps, its sizes appended
    jobs(study.sweeps_at("laptop")["bn"])           # the sweep's jobs, one override list each (Hydra's order)

Every size a study runs at is a scale in its file (quick: a smoke run of the whole procedure; laptop: what
the record was trained at on a 2-core machine; full: the experiment as shipped), so no size lives in a shell
variable: `normbench study ghost_batch scale=laptop --plan` prints the `normbench train -m` command of each
sweep. The seeds are not a study's: the protocol's rounds choose them (normbench/configs/protocol.yaml).

A study file of your own holds in one file what a shipped study spreads over its experiment and its plan:
`experiment:` (the overrides every run shares), `sweeps:`, `scales:` (optional: a file without them runs
as written at any scale=), `claims:` (their own family, as a
--claims file's: confirmatory unless `role: exploratory`) and, optionally, `protocol:` (looks, alpha,
spending; protocol.yaml's looks and seed_base where it declares none, since a study trains its seeds in
rounds: from 1000, apart from a pilot's 0-9).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from normbench.errors import UserError
from normbench.userfiles import MAX_COUNT, load_yaml, safe_name

STUDIES = Path(__file__).resolve().parent / "plans"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "configs" / "experiment"
SCALES = ("quick", "laptop", "full")
# Every run of a study: one torch thread per job (the jobs run side by side), no live progress bars (they
# would interleave) and no TensorBoard event files (a study's record is its results.json files).
COMMON = ["threads=1", "progress=false", "tensorboard=false"]


@dataclass(frozen=True)
class Study:
    name: str
    experiment: str | None  # the shipped experiment (configs/experiment/); None for a study file
    sweeps: dict[str, list[str]]
    scales: dict[str, dict] = field(default_factory=dict)
    source: Path | None = None  # a study file: its claims are their own family, under its protocol
    overrides: tuple[str, ...] = ()  # a study file's `experiment:`, what every run of it shares

    def sweeps_at(self, scale: str) -> dict[str, list[str]]:
        """Each sweep's overrides at `scale`: the experiment, the sweep (or the scale's replacement of it;
        a sweep the scale sets to null is not run), the scale's sizes, the sizes the scale gives this sweep
        alone (`per_sweep`: a budget of its own, after the scale's, so they win), and COMMON."""
        where = self.source or f"normbench/study/plans/{self.name}.yaml"
        if self.scales and scale not in self.scales:  # no scales declared: the sweeps as written, at any scale
            raise UserError(f"study {self.name} has no scale {scale!r}", f"choose one of: {', '.join(self.scales)} ({where})")
        at = self.scales.get(scale) or {}
        if unknown := sorted(set(at) - {"overrides", "sweeps", "per_sweep"}):
            raise UserError(f"study {self.name}, scale {scale}: unknown key(s) {', '.join(map(str, unknown))}",
                            f"a scale has overrides:, sweeps: and per_sweep: ({where})")
        if not _overrides(at.get("overrides") or []):
            raise UserError(f"study {self.name}, scale {scale}: overrides must be a list of key=value overrides",
                            f"e.g. overrides: [epochs=1] ({where})")
        replaced = at.get("sweeps") or {}
        if not isinstance(replaced, dict) or not all(v is None or _overrides(v) for v in replaced.values()):
            raise UserError(f"study {self.name}, scale {scale}: sweeps must map sweep names to override lists "
                            "(or null)", f"e.g. sweeps: {{{next(iter(self.sweeps))}: [norm=bn]}} ({where})")
        per_sweep = at.get("per_sweep") or {}
        if not isinstance(per_sweep, dict) or not all(_overrides(v) for v in per_sweep.values()):
            raise UserError(f"study {self.name}, scale {scale}: per_sweep must map sweep names to override lists",
                            f"e.g. per_sweep: {{{next(iter(self.sweeps))}: [epochs=5]}} ({where})")
        if unknown := sorted(set(per_sweep) - set(self.sweeps)):
            raise UserError(f"study {self.name}, scale {scale}: per_sweep names no sweep {', '.join(unknown)}",
                            f"its sweeps are {', '.join(self.sweeps)} ({where})")
        shared = [f"experiment={self.experiment}"] if self.experiment else list(self.overrides)
        out = {}
        for name, overrides in self.sweeps.items():
            overrides = replaced.get(name, overrides)
            if overrides is not None:
                own = per_sweep.get(name) or []
                out[name] = _last_wins([*shared, *map(str, overrides), *map(str, at.get("overrides") or []),
                                        *map(str, own), *COMMON])
        return out


def _overrides(value) -> bool:
    """Is `value` a list of key=value overrides (or `~key` deletions)?"""
    return isinstance(value, list) and all(isinstance(o, str) and ("=" in o or o.startswith("~")) for o in value)


def _last_wins(overrides: list[str]) -> list[str]:
    """The overrides with each key once, at its last value (Hydra refuses a key given twice on one command
    line; a scale's sizes override the sweep's, a sweep's own sizes the scale's). `+k=v`, `++k=v`, `~k`
    and `k=v` set the same key; a key an earlier override added (`+`) keeps its `+` at its last value."""
    def key(o: str) -> str:
        return o.split("=", 1)[0].lstrip("+~")

    last = {key(o): i for i, o in enumerate(overrides)}
    plus = {key(o): o[: len(o) - len(o.lstrip("+"))] for o in overrides if o.startswith("+")}
    return [o if o[0] in "+~" else plus.get(key(o), "") + o for i, o in enumerate(overrides) if last[key(o)] == i]


def names() -> list[str]:
    return sorted(p.stem for p in STUDIES.glob("*.yaml"))


def is_file(name: str) -> bool:
    """Does `name` on the command line name a study file (a path) rather than a shipped study?"""
    return name.endswith((".yaml", ".yml")) or "/" in name


def load(name: str) -> Study:
    if is_file(name):
        return load_file(Path(name))
    path = STUDIES / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"no study named {name!r}", f"choose from: {', '.join(names())}, or all")
    raw = yaml.safe_load(path.read_text())
    return Study(name, raw["experiment"], {k: [str(o) for o in v] for k, v in raw["sweeps"].items()},
                 raw.get("scales") or {})


FILE_KEYS = ("name", "experiment", "sweeps", "scales", "claims", "protocol")


def load_file(path: Path) -> Study:
    """A study file of your own (the module docstring); a UserError naming the file for what is wrong."""
    if not path.exists():
        raise UserError(f"no study file {path}", "give the path of a study file (docs/examples/my_study.yaml)")
    raw = load_yaml(path, "study file")
    if not isinstance(raw, dict) or not isinstance(raw.get("sweeps"), dict) or not raw["sweeps"]:
        raise UserError(f"{path}: a study file needs `sweeps:`, a mapping of sweep names to overrides",
                        "see docs/examples/my_study.yaml")
    if unknown := sorted(set(raw) - set(FILE_KEYS)):
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}", f"use {', '.join(FILE_KEYS)}")
    if not raw.get("claims"):
        raise UserError(f"{path}: no claims", "a study decides claims: declare them under `claims:`")
    shared = raw.get("experiment") or []
    if not isinstance(shared, list) or not all(isinstance(o, str) and "=" in o for o in shared):
        raise UserError(f"{path}: experiment must be a list of key=value overrides", "e.g. experiment: [model=mlp, epochs=1]")
    for sweep, overrides in raw["sweeps"].items():
        if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise UserError(f"{path}: sweep {sweep!r} must be a list of key=value overrides",
                            f"e.g. {sweep}: [\"norm=ln,bn\", batch_size=2]")
        if str(sweep) != safe_name(str(sweep)) or "-lr" in str(sweep):  # a job's folder; '-lr' names a widened job
            raise UserError(f"{path}: sweep name {str(sweep)[:80]!r} is not a folder name, or holds '-lr'",
                            "name it with letters, digits and =._,+- (not '-lr'), e.g. with '_'")
    scales = raw.get("scales") or {}  # none: the file's sizes are its sizes, at whatever scale= asks
    if not isinstance(scales, dict) or not all(v is None or isinstance(v, dict) for v in scales.values()):
        raise UserError(f"{path}: `scales:` must map scale names to mappings (overrides:, sweeps:, per_sweep:)",
                        "e.g. scales: {quick: {overrides: [epochs=1]}}")
    name = raw.get("name") or path.stem
    if not isinstance(name, str) or name != safe_name(name):
        raise UserError(f"{path}: the study name {str(name)[:80]!r} is not a folder name",
                        "name it with letters, digits and =._,+- (not starting with '.')")
    sweeps = {k: [str(o) for o in v] for k, v in raw["sweeps"].items()}
    return Study(name, None, sweeps, scales, source=path.resolve(), overrides=tuple(shared))


def resolve(requested: list[str]) -> list[Study]:
    """The studies named on the command line (`all`: every shipped one), each once; a study file alone."""
    files = [n for n in requested if is_file(n)]
    wanted = names() if "all" in requested or not requested else list(dict.fromkeys(requested))
    wanted += [f for f in files if f not in wanted]
    if files and len(wanted) > 1:
        raise UserError(f"{files[0]} is a study file with claims of its own family, run with other studies",
                        "run a study file on its own: normbench study PATH.yaml")
    return [load(n) for n in wanted]


def _sweeper_params(experiment: str) -> list[str]:
    """The experiment's own `hydra.sweeper.params`, as overrides (the command line's win, key by key)."""
    path = EXPERIMENTS / f"{experiment}.yaml"
    if experiment != safe_name(experiment) or not path.is_file():  # composition then says what is wrong
        return []
    raw = yaml.safe_load(path.read_text()) or {}
    params = (((raw.get("hydra") or {}).get("sweeper") or {}).get("params")) or {}
    return [f"{k}={v}" for k, v in params.items()]


def jobs(overrides: list[str]) -> list[list[str]]:
    """The jobs `normbench train -m <overrides>` runs, in Hydra's BasicSweeper order (the cartesian
    product of the sweep overrides, the first key outermost), each as its override list. An override keeps
    its prefix (`+norm.options.eps=1e-6` adds a key, `~data.subset` deletes one)."""
    from normbench.cli_errors import parse_overrides

    experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), None)
    from hydra.errors import OverrideParseException

    try:
        found = parse_overrides((_sweeper_params(experiment) if experiment else []) + list(overrides))
    except OverrideParseException as e:
        raise UserError(f"a sweep's overrides do not parse ({' '.join(str(e).split())[:200]}): {' '.join(overrides)[:300]}",
                        "write each as key=value, a sweep as key=a,b (Hydra's override grammar)") from None
    parsed = {}
    for o in found:
        parsed[o.key_or_group] = o  # the command line wins over the experiment's sweeper params
    axes = []
    for o in parsed.values():
        if o.is_delete():
            axes.append([o.input_line])
            continue
        values = (list(itertools.islice(o.sweep_string_iterator(), MAX_COUNT + 1)) if o.is_sweep_override()
                  else [o.get_value_element_as_str()])
        axes.append([f"{o.get_key_element()}={v}" for v in values])
    if math.prod(map(len, axes)) > MAX_COUNT:
        raise UserError(f"a sweep of more than {MAX_COUNT:,} jobs ({' '.join(overrides)[:200]})",
                        "sweep fewer values: a study trains every job at every seed")
    return [list(combo) for combo in itertools.product(*axes)]
