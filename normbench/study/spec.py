"""A shipped study as data: its experiment, the sweeps its tables and claims read, and its sizes.

    study = load("ghost_batch")                     # normbench/study/plans/ghost_batch.yaml
    study.sweeps_at("laptop")                       # {"bn": [overrides...], ...}: a scale's sweeps, its sizes appended
    jobs(study.sweeps_at("laptop")["bn"])           # the sweep's jobs, one override list each (Hydra's order)

Every size a study runs at is a scale in its file (quick: a smoke run of the whole procedure; laptop: what
the record was trained at on a 2-core machine; full: the experiment as shipped), so no size lives in a shell
variable: `normbench study ghost_batch scale=laptop --plan` prints the `normbench train -m` command of each
sweep. The seeds are not a study's: the protocol's rounds choose them (normbench/configs/protocol.yaml).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from normbench.errors import UserError

STUDIES = Path(__file__).resolve().parent / "plans"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "configs" / "experiment"
SCALES = ("quick", "laptop", "full")
# Every run of a study: one torch thread per job (the jobs run side by side), no live progress bars (they
# would interleave) and no TensorBoard event files (a study's record is its results.json files).
COMMON = ["threads=1", "progress=false", "tensorboard=false"]


@dataclass(frozen=True)
class Study:
    name: str
    experiment: str
    sweeps: dict[str, list[str]]
    scales: dict[str, dict] = field(default_factory=dict)

    def sweeps_at(self, scale: str) -> dict[str, list[str]]:
        """Each sweep's overrides at `scale`: the experiment, the sweep (or the scale's replacement of it;
        a sweep the scale sets to null is not run), the scale's sizes, and COMMON."""
        if scale not in self.scales:
            raise UserError(f"study {self.name} has no scale {scale!r}",
                            f"choose one of: {', '.join(self.scales)} (normbench/study/plans/{self.name}.yaml)")
        at = self.scales[scale] or {}
        replaced = at.get("sweeps") or {}
        out = {}
        for name, overrides in self.sweeps.items():
            overrides = replaced.get(name, overrides)
            if overrides is not None:
                out[name] = [f"experiment={self.experiment}", *map(str, overrides),
                             *map(str, at.get("overrides") or []), *COMMON]
        return out


def names() -> list[str]:
    return sorted(p.stem for p in STUDIES.glob("*.yaml"))


def load(name: str) -> Study:
    path = STUDIES / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"no study named {name!r}", f"choose from: {', '.join(names())}, or all")
    raw = yaml.safe_load(path.read_text())
    return Study(name, raw["experiment"], {k: [str(o) for o in v] for k, v in raw["sweeps"].items()},
                 raw.get("scales") or {"full": {}})


def resolve(requested: list[str]) -> list[Study]:
    """The studies named on the command line (`all`: every shipped one), each once."""
    wanted = names() if "all" in requested or not requested else list(dict.fromkeys(requested))
    return [load(n) for n in wanted]


def _sweeper_params(experiment: str) -> list[str]:
    """The experiment's own `hydra.sweeper.params`, as overrides (the command line's win, key by key)."""
    raw = yaml.safe_load((EXPERIMENTS / f"{experiment}.yaml").read_text()) or {}
    params = (((raw.get("hydra") or {}).get("sweeper") or {}).get("params")) or {}
    return [f"{k}={v}" for k, v in params.items()]


def jobs(overrides: list[str]) -> list[list[str]]:
    """The jobs `normbench train -m <overrides>` runs, in Hydra's BasicSweeper order (the cartesian
    product of the sweep overrides, the first key outermost), each as its override list."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), None)
    parser = OverridesParser.create()
    parsed = {}
    for line in (_sweeper_params(experiment) if experiment else []) + list(overrides):
        (o,) = parser.parse_overrides([line])
        parsed[o.key_or_group] = o  # the command line wins over the experiment's sweeper params
    axes = []
    for key, o in parsed.items():
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        axes.append([f"{key}={v}" for v in values])
    return [list(combo) for combo in itertools.product(*axes)]
