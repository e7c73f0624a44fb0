"""A pack's plan: its members, whether it is asked for rightly, and whether it trains packed.

    the_plan = decide(cfg, run_dir)         # members, groups, mode and packing rule: decided once, handed down
    validate_pack(cfg)                      # UserError (one line) for each way a pack is asked for wrongly
    members(cfg)                            # [("lr=0.001,seed=3", member config), ...]: lrs outer, seeds inner
    packs_faster(cfg, "cpu")                # would pack.mode=auto pack it on this kind of device?

A packed pack is one computation whatever its members' data: with data.split=per_seed each member trains and
is evaluated on its own seed's split (data.MemberSplits), in the one model.

Each member is the single run it stands for: its own seed and lr, `pack` unset. This module builds nothing
(it reads the config, the device's kind and, on resume, pack.json), so the runner plans a pack before it
builds anything.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from normbench.config import Config, Optimizer, PackConfig, PackMode
from normbench.errors import UserError
from normbench.results import PACK
from normbench.device import pick_device

log = logging.getLogger(__name__)
DEFAULT = Config()


def is_pack(cfg: Config) -> bool:
    return cfg.pack.seeds is not None or cfg.pack.lrs is not None


def validate_pack(cfg: Config) -> None:
    """One line for each way a pack can be asked for wrongly."""
    p = cfg.pack
    for key, values in (("pack.seeds", p.seeds), ("pack.lrs", p.lrs)):
        if values is not None and not values:
            raise UserError(f"{key} is empty", f"give it values, e.g. {key}=[0,1,2], or leave it unset (null)")
        if values is not None and len(set(values)) < len(values):
            dup = sorted({v for v in values if values.count(v) > 1})
            raise UserError(f"{key} lists {', '.join(map(str, dup))} more than once",
                            "each member must differ: list each value once")
    if p.lrs is not None and min(p.lrs) <= 0:
        raise UserError(f"pack.lrs must be > 0 (got {min(p.lrs)})", "use e.g. pack.lrs=[1e-4,3e-4,1e-3]")
    if p.seeds is not None and cfg.seed != DEFAULT.seed:
        raise UserError(f"seed={cfg.seed} and pack.seeds both choose the seed",
                        "drop seed=...: each member's seed comes from pack.seeds")
    if p.lrs is not None and cfg.lr != DEFAULT.lr:
        raise UserError(f"lr={cfg.lr} and pack.lrs both choose the learning rate",
                        "drop lr=...: each member's lr comes from pack.lrs")
    if cfg.norm.track_stats:
        raise UserError("norm.track_stats hooks one run's norm layers, not a pack's",
                        "run the member you want to watch on its own (seed=..., no pack.seeds)")
    if cfg.optimizer == Optimizer.muon and cfg.pack.mode == PackMode.packed:
        raise UserError("optimizer=muon orthogonalizes each member's own weight matrices, which a packed model "
                        "stacks", "use pack.mode=auto or sequential: Muon's members train one after another")


def members(cfg: Config) -> list[tuple[str, Config]]:
    """(subdirectory name, member config) for every member: lrs outer, seeds inner."""
    out = []
    for lr in cfg.pack.lrs or [None]:
        for seed in cfg.pack.seeds or [cfg.seed]:
            name = ",".join(([f"lr={lr:g}"] if lr is not None else []) +
                            ([f"seed={seed}"] if cfg.pack.seeds is not None else []))
            out.append((name, replace(cfg, seed=seed, lr=cfg.lr if lr is None else lr, pack=PackConfig())))
    return out


def member_values(values: Any, k: int) -> Any:
    """Member k's entries of a pack's evaluation results (lists, one entry per member, in nested dicts)."""
    if isinstance(values, dict):
        return {key: member_values(v, k) for key, v in values.items()}
    return values[k] if isinstance(values, list) else values


# The packing limits, one table per kind of device: package data beside this module (pyproject.toml's
# package-data), so a regular install carries it; `pack_limits` says what it holds and where it comes from.
LIMITS_FILE = resources.files(__package__) / "limits.json"


def pack_limits(device_type: str) -> dict[str, tuple[int, int | None]] | None:
    """The measured limits for this kind of device, from LIMITS_FILE: model -> (largest batch, largest
    batch x members or None); pack when batch <= the first and batch x members <= the second. None where
    nothing was measured (no entry, or null, for `device_type`). The file is {"cpu": {"mlp": [64, null],
    ...}, "cuda": null or the same, ...}.

    Provenance: "cpu" is where `normbench bench --sections packed` measured packing faster than separate runs
    (docs/packing.md has the rows; MLP+BN, CNN+GN, RNN+LN, Transformer+LN on one thread). Past these the work per step is large enough that one grouped convolution,
    or S members' hidden states in one recurrence, run slower than S separate kernels. "cuda" stays null
    until a GPU bench is checked in: scripts/gpu_check.sh derives it from `normbench bench --sections
    packed --device cuda` (bench.packed.derive_limits) and writes this file with its "cuda" entry filled
    in (bench.packed.with_limits) as $OUT/limits.json, to copy over it."""
    import json

    table = json.loads(LIMITS_FILE.read_text()).get(device_type)
    if table is None:
        return None
    return {k: (int(v[0]), None if v[1] is None else int(v[1])) for k, v in table.items()}


def packs_faster(cfg: Config, device_type: str = "cpu") -> bool:
    """Does `pack.mode=auto` pack this configuration on this kind of device (else its members run one
    after another)? Where the bench measured limits for the device (`pack_limits`), they decide; where
    none were measured (a GPU without a checked-in table, MPS), every pack of two or more members trains
    packed, since there one small kernel per member leaves most of the device idle, which packing exists
    to fill."""
    return _rule(pack_limits(device_type), cfg.model.name, len(members(cfg))).faster(cfg.batch_size)


@dataclass(frozen=True)
class PackRule:
    """Is an evaluation batch of this size faster through the pack than through each member alone? The
    limits of this model on this kind of device, looked up once (None: nothing measured, always pack)."""
    max_batch: int | None
    max_samples: int | None
    size: int  # the members trained as one

    def __call__(self, batch: int) -> bool:
        if self.max_batch is None:
            return True
        return batch <= self.max_batch and (self.max_samples is None or batch * self.size <= self.max_samples)

    def faster(self, batch: int) -> bool:
        """Does `pack.mode=auto` pack a group of this size training at `batch`? Never a single member."""
        return self.size >= 2 and self(batch)


@dataclass(frozen=True)
class Group:
    """Members that train as one computation: their indices into `Plan.members`, the config that stands for
    them, where their checkpoint goes, and the packing rule their evaluations follow."""
    cfg: Config
    members: list[int]
    checkpoint_dir: Path
    packs: PackRule


@dataclass(frozen=True)
class Plan:
    """A pack, decided once before anything is built: its members (name, config), the groups they train in
    (one after another: packed, one group of every member; sequential, one a member), and the mode. The
    runner hands it down; nothing below asks the planner again."""
    members: list[tuple[str, Config]]
    groups: list[Group]
    mode: PackMode


def _rule(limits: dict[str, tuple[int, int | None]] | None, model: str, size: int) -> PackRule:
    if limits is None:
        return PackRule(None, None, size)
    max_batch, max_samples = limits.get(model, (0, None))
    return PackRule(max_batch, max_samples, size)


def device_type(cfg: Config) -> str:
    """The kind of device the pack will train on. A device that is missing is not an error here: setup
    says so inside the lifecycle, where every member records it."""
    try:
        return pick_device(cfg.device).type
    except UserError:
        return "cpu"


def recorded_mode(cfg: Config, run_dir: Path) -> PackMode | None:
    """On resume, the mode pack.json records (its checkpoints are where that mode put them, whatever device
    it resumes on); None when starting afresh, or when it cannot be read."""
    recorded = Path(run_dir) / PACK
    if not (cfg.resume and recorded.exists()):
        return None
    try:
        return PackMode(json.loads(recorded.read_text())["mode"])
    except (OSError, ValueError, KeyError):
        return None


def decide(cfg: Config, run_dir: Path, device: str | None = None) -> Plan:
    """The pack's plan on this kind of device (`device`, else the one cfg.device picks), its members and
    limits each found once. A pack being resumed keeps the mode pack.json records (its checkpoints are
    where that mode put them). Packed: every
    member in one computation (each on its own data), its checkpoint in the run directory; sequential:
    each member its own one-member run, checkpointed in its own directory. `pack.mode=auto` packs where
    the members `packs_faster`."""
    pack = members(cfg)
    device = device or device_type(cfg)
    limits = pack_limits(device)
    rule = _rule(limits, cfg.model.name, len(pack))
    mode = recorded_mode(cfg, run_dir) or cfg.pack.mode
    if mode == PackMode.auto:
        if limits is None and rule.size > 1:
            log.info("pack.mode=auto on %s packs every member together (no packing limits were measured on this "
                     "kind of device: scripts/gpu_check.sh writes CUDA's; set pack.mode=sequential to train "
                     "members one after another)", device)
        # Muon orthogonalizes each member's matrices: stacked (S, ...) they are not one matrix to it
        packs = rule.faster(cfg.batch_size) and cfg.optimizer != Optimizer.muon
        mode = PackMode.packed if packs else PackMode.sequential
    if mode == PackMode.sequential:
        return Plan(pack, [Group(m, [k], run_dir / name, PackRule(None, None, 1))
                           for k, (name, m) in enumerate(pack)], mode)
    return Plan(pack, [Group(cfg, list(range(len(pack))), run_dir, rule)], mode)
