"""Each run's command line in the record's runs files (docs/results/<study>/runs.jsonl.gz), rebuilt from how
`normbench study` trained it, and checked against the config the run resolved.

    python scripts/record_overrides.py            # rebuild, check, write the files (byte-identical when unchanged)
    python scripts/record_overrides.py --check    # rebuild and check only: exit 1 where a file or a config disagrees

The record was checked in as run folders holding results.json alone, without the `.hydra/overrides.yaml`
Hydra wrote beside each pack, and summarize tells a run's experiment (so its study, its claims' scope and
the family's members) from that command line only (summary.types.Run.study). The command is not guessed:
it is what normbench/study/jobs.py gave the pack at the record's commit (run.json's git_sha), from that
commit's plans (normbench/study/plans/), the experiments' sweeper params, protocol.yaml's rounds and
run.json's `widened` (the lr-widening jobs). The plans, experiments and protocol.yaml are read from the
commit (`git show`: ghost_batch's plan has changed since, its bn sweep then norm=bn,brn); jobs.py and spec.py
are this checkout's, which trained them the same way. A run at <study>/r<k>/<job>/<member> was trained by
`normbench train <job's overrides> pack.seeds=[<round k's seeds>] [resume=true] hydra.run.dir=...`, and a
pack's members carry the pack's command line (discover.find_runs); Hydra keeps hydra.* out of
overrides.yaml, so hydra.run.dir is not in it. resume=true was on the command line of a pack whose folder
existed when a sitting started it again: the packs one of whose members' configs records resume true (its
members finished before the interruption kept the config of the first invocation).

Every rebuilt override is checked against the config each run resolved (results.json's `config`): a plain
key=value against that key; pack.seeds and pack.lrs against the member's seed and lr and the pack's members;
a group (model=, norm=, seq_norm=, varlen_design=, experiment=) against what its file at the commit sets,
where nothing later on the command line sets it again; experiment= also against the claims the run recorded.
And the whole command, composed by this checkout's Hydra (jobs.Job's config), against every key of the
config but a member's own (seed, lr, pack, resume), the claims, and the keys the study's experiment file sets
differently in this checkout than at the commit: a study redesigned since (norm_free_regime's budget moved
from steps to epochs, issue 58) composes its new design from the old command line, and those keys are checked
against the commit's experiment instead (`expected`); each study's line names the keys it left out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
from normbench.config import flatten
from normbench.study import jobs as joblist
from normbench.study import spec
from normbench.summary import discover
from normbench.summary import protocol as protocols

RESULTS = REPO / "docs" / "results"
RUNS = "runs.jsonl.gz"
GROUPS = ("experiment", "model", "norm", "data", "seq_norm", "varlen_design")  # config groups, not keys
NAMED = {"model": "model.name", "norm": "norm.name", "data": "data.name"}  # a group whose choice is a key


@cache
def git_show(sha: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{sha}:{path}"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


@cache
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


@cache
def parse(override: str) -> tuple[str, Any]:
    """(key or group, value) of one override, as Hydra reads it."""
    (o,) = _parser().parse_overrides([override])
    return o.key_or_group, o.value()


class Commit:
    """The record's commit: its plans, experiments, config groups and protocol."""

    def __init__(self, sha: str, folder: Path):
        self.sha, self.folder = sha, folder
        experiments = folder / "experiment"
        experiments.mkdir()
        for name in self._listed("normbench/configs/experiment"):
            (experiments / f"{name}.yaml").write_text(git_show(sha, f"normbench/configs/experiment/{name}.yaml"))
        (folder / "protocol.yaml").write_text(git_show(sha, "normbench/configs/protocol.yaml"))
        self.protocol = protocols.load(folder / "protocol.yaml", experiments)

    def _listed(self, where: str) -> list[str]:
        out = subprocess.run(["git", "ls-tree", "--name-only", f"{self.sha}:{where}"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
        return [Path(n).stem for n in out.split() if n.endswith(".yaml")]

    def study(self, name: str) -> spec.Study:
        """spec.load at the commit: its plan's sweeps and scales."""
        raw = yaml.safe_load(git_show(self.sha, f"normbench/study/plans/{name}.yaml"))
        return spec.Study(name, raw["experiment"], {k: [str(o) for o in v] for k, v in raw["sweeps"].items()},
                          raw.get("scales") or {"full": {}})

    @cache
    def group(self, group: str, choice: str) -> dict:
        return yaml.safe_load(self.folder.joinpath("experiment", f"{choice}.yaml").read_text() if group == "experiment"
                              else git_show(self.sha, f"normbench/configs/{group}/{choice}.yaml")) or {}


def study_jobs(commit: Commit, study: str, scale: str, widened: list[dict]) -> dict[str, joblist.Job]:
    """jobs.study_jobs at the commit: each job of `study` by its name (its folder in a round)."""
    before = spec.EXPERIMENTS
    spec.EXPERIMENTS = commit.folder / "experiment"  # the sweeper params the commit's experiments declared
    try:
        return {j.name: j for j in joblist.study_jobs(commit.study(study), scale, widened)}
    finally:
        spec.EXPERIMENTS = before


def _choices(raw: dict) -> dict[str, str]:
    """The groups a file's defaults list chooses (`override /norm: bn` -> {"norm": "bn"})."""
    return {k.removeprefix("override ").strip("/"): v for d in raw.get("defaults") or [] if isinstance(d, dict)
            for k, v in d.items()}


def _body(raw: dict) -> dict[str, Any]:
    """The keys a group's file sets, flattened (its defaults, hydra part and claims aside)."""
    return flatten({k: v for k, v in raw.items() if k not in ("defaults", "hydra", "claims")})


def expected(commit: Commit, overrides: list[str]) -> dict[str, tuple[Any, str]]:
    """key -> (the value the command line `overrides` gives it, which override gave it), for every key a
    group it chooses sets and every key it sets itself, each at Hydra's precedence: the groups' files
    (a group the experiment chooses and the command line does not, too), then the experiment's body, then
    the command line's keys. pack.* is left to `check`: a pack's member records its own seed and lr."""
    parsed = [parse(o) for o in overrides]
    named = {k: v for k, v in parsed if k in GROUPS}
    exp = commit.group("experiment", named["experiment"])
    groups = {**{g: c for g, c in _choices(exp).items() if g in GROUPS}, **named}
    want: dict[str, tuple[Any, str]] = {}
    for group, choice in groups.items():
        why = f"{group}={choice}" + ("" if group in named else f" (experiment={named['experiment']}'s choice)")
        if group in NAMED:
            want.setdefault(NAMED[group], (choice, why))
        elif group != "experiment":
            raw = commit.group(group, choice)
            for g, c in _choices(raw).items():  # seq_norm's norm, unless the command line chose one
                if g in NAMED and g not in named:
                    want[NAMED[g]] = (c, why)
            want.update({k: (v, why) for k, v in _body(raw).items()})
    want.update({k: (v, f"experiment={named['experiment']}") for k, v in _body(exp).items()})
    want.update({k: (v, f"{k}={v!r}") for k, v in parsed if k not in GROUPS})
    return {k: v for k, v in want.items() if not k.startswith("pack.") and k != "resume"}


def redesigned(commit: Commit, experiment: str) -> set[str]:
    """The keys `experiment`'s file sets differently in this checkout than at the commit (its claims aside)."""
    then = _body(commit.group("experiment", experiment))
    now = _body(yaml.safe_load((spec.EXPERIMENTS / f"{experiment}.yaml").read_text()) or {})
    return {k for k in then.keys() | now.keys() if then.get(k) != now.get(k) and not k.startswith("pack.")}


def check(commit: Commit, overrides: list[str], run: discover.Run, members: list[discover.Run],
          composed: dict[str, Any] | None = None, changed: set[str] = frozenset()) -> list[str]:
    """Where the command line `overrides` disagrees with the config `run` resolved (and with its pack's
    `members`): one line each. `composed`: the job's config as this checkout's Hydra composes its command
    (jobs.Job's config), compared key by key too where both have the key; a pack's member has its own seed
    and lr and no pack, and the claims are compared with the commit's experiment instead (its notes were
    reworded since); so are the keys in `changed` (`redesigned`)."""
    config, bad = run.config, []
    own = {"claims", "resume", "seed", "lr", "pack.seeds", "pack.lrs", *changed}
    for key in sorted(set(composed or {}) & set(config) - own):
        if composed[key] != config[key]:
            bad.append(f"composed by this checkout, {key}={composed[key]!r}; the config has {config[key]!r}")
    for key, (value, why) in expected(commit, overrides).items():
        if key not in config:
            bad.append(f"{why}: {key} is not in the config")
        elif config[key] != value:
            bad.append(f"{why}: {key}={value!r}, the config has {config[key]!r}")
    values = dict(parse(o) for o in overrides)
    exp = commit.group("experiment", values["experiment"])
    if config.get("claims") != exp.get("claims"):
        bad.append(f"experiment={values['experiment']}: the config's claims are not the experiment's at {commit.sha}")
    seeds = values.get("pack.seeds")
    lrs = values.get("pack.lrs", (exp.get("pack") or {}).get("lrs"))
    if config.get("seed") not in seeds:
        bad.append(f"pack.seeds={seeds}: the run's seed is {config.get('seed')}")
    if lrs is not None and config.get("lr") not in lrs:
        bad.append(f"pack.lrs={lrs}: the run's lr is {config.get('lr')}")
    trained = {k: sorted({m.config.get(k) for m in members}) for k in ("seed", "lr")}
    if trained["seed"] != sorted(seeds):
        bad.append(f"pack.seeds={seeds}: its pack's members have seeds {trained['seed']}")
    if lrs is not None and trained["lr"] != sorted(set(lrs)):
        bad.append(f"pack.lrs={lrs}: its pack's members have lrs {trained['lr']}")
    packed = run.results.get("packed") or {}
    if packed.get("members") != len(members) or packed.get("members") != len(seeds) * len(lrs or [None]):
        bad.append(f"its pack has {packed.get('members')} members, its folder {len(members)}, its command line "
                   f"{len(seeds)} seeds x {len(lrs or [None])} lrs")
    if not str(packed.get("dir", "")).endswith("/" + "/".join((run.path.parts[-5], *run.path.parts[-3:-1]))):
        bad.append(f"its pack's folder is {packed.get('dir')}")
    return bad


def rebuild(commit: Commit, run_json: dict, write: bool, say=print) -> tuple[int, int]:
    """Rebuild every runs file's command lines and check them; with `write`, write the files whose lines
    changed. (runs whose rebuilt command line disagrees with their config, runs whose line changed)."""
    scale = run_json["command"].split("scale=")[1].split()[0]
    disagreeing = changed = 0
    for path in sorted(RESULTS.glob(f"*/{RUNS}")):
        study = path.parent.name
        jobs = study_jobs(commit, study, scale, run_json.get("widened", []))
        moved = redesigned(commit, commit.study(study).experiment)
        if moved:
            say(f"{study}: its experiment sets {', '.join(sorted(moved))} differently since {commit.sha}; "
                "these are checked against the commit's experiment, not this checkout's composition")
        runs = discover.read_runs_file(path)
        packs: dict[Path, list[discover.Run]] = defaultdict(list)
        for r in runs:
            packs[r.path.parent].append(r)
        here = bad_here = 0
        for r in runs:
            round_folder, job_name, _ = r.path.relative_to(path).parts
            job = jobs.get(job_name)
            if job is None:
                say(f"  {study}/{round_folder}/{job_name}: no such job in the plan at {commit.sha}")
                bad_here += 1
                continue
            seeds = protocols.round_seeds(commit.protocol, int(round_folder.removeprefix("r")) - 1)
            members = packs[r.path.parent]
            again = ["resume=true"] if any(m.config.get("resume") for m in members) else []
            overrides = [*job.overrides, f"pack.seeds=[{','.join(map(str, seeds))}]", *again]
            bad = check(commit, overrides, r, members, job.config, moved)
            for b in bad:
                say(f"  {study}/{r.path.relative_to(path)}: {b}")
            bad_here += bool(bad)
            here += r.overrides != overrides
            r.overrides = overrides
        say(f"{study}: {len(runs)} runs in {len(packs)} packs; {here} command lines "
            f"{'changed' if write and not bad_here else 'to change'}, {bad_here} disagreeing with their config")
        if write and here and not bad_here:  # a command line that disagrees with its run is not written
            discover.save_runs(runs, path, path)
        disagreeing, changed = disagreeing + bad_here, changed + here
    return disagreeing, changed


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="write nothing: exit 1 where a runs file's command lines are not the rebuilt ones, or "
                        "a rebuilt one disagrees with its run's config")
    args = p.parse_args(argv)
    run_json = json.loads((RESULTS / "run.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        disagreeing, changed = rebuild(Commit(run_json["git_sha"], Path(tmp)), run_json, write=not args.check)
    if disagreeing:
        print(f"record_overrides.py: {disagreeing} runs' rebuilt command lines disagree with their config",
              file=sys.stderr)
    if args.check and changed:
        print(f"record_overrides.py: {changed} runs' command lines are not the rebuilt ones; run python "
              "scripts/record_overrides.py", file=sys.stderr)
    return 1 if disagreeing or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
