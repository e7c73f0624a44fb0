"""A pack's plan: its members, whether it is asked for rightly, and whether it trains packed.

    validate_pack(cfg)                      # UserError (one line) for each way a pack is asked for wrongly
    members(cfg)                            # [("lr=0.001,seed=3", member config), ...]: lrs outer, seeds inner
    groups(cfg)                             # [(group config, [member index, ...]), ...]: trained as one each
    mode_for(cfg, "cpu")                    # PackMode.packed or PackMode.sequential on this kind of device

Each member is the single run it stands for: its own seed and lr, `pack` unset. This module imports only
the config (the device comes in as its type), so the runner plans a pack before it builds anything.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from normbench.config import Config, PackConfig, PackMode, split_seed
from normbench.errors import UserError

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


def members(cfg: Config) -> list[tuple[str, Config]]:
    """(subdirectory name, member config) for every member: lrs outer, seeds inner."""
    out = []
    for lr in cfg.pack.lrs or [None]:
        for seed in cfg.pack.seeds or [cfg.seed]:
            name = ",".join(([f"lr={lr:g}"] if lr is not None else []) +
                            ([f"seed={seed}"] if cfg.pack.seeds is not None else []))
            out.append((name, replace(cfg, seed=seed, lr=cfg.lr if lr is None else lr, pack=PackConfig())))
    return out


def groups(cfg: Config) -> list[tuple[Config, list[int]]]:
    """The members (indices into `members(cfg)`) that train as one computation, with the pack config that
    stands for each group. A packed model trains on one shared split, so members train together only where
    their data is the same: all of them with `data.split=fixed`; with `per_seed` (each seed its own
    validation split and subset) the members of each seed, one seed after another, each group a pack of
    its own with `pack.seeds=[seed]` (its lrs, or one member)."""
    pack = members(cfg)
    by_split: dict[int, list[int]] = {}
    for k, (_, m) in enumerate(pack):
        by_split.setdefault(split_seed(m.data, m.seed), []).append(k)
    if len(by_split) == 1:
        return [(cfg, list(range(len(pack))))]
    return [(replace(cfg, pack=replace(cfg.pack, seeds=[pack[ks[0]][1].seed])), ks) for ks in by_split.values()]


def group_size(cfg: Config) -> int:
    """How many members train as one computation: the largest of `groups(cfg)`."""
    return max(len(ks) for _, ks in groups(cfg))


def member_values(values: Any, k: int) -> Any:
    """Member k's entries of a pack's evaluation results (lists, one entry per member, in nested dicts)."""
    if isinstance(values, dict):
        return {key: member_values(v, k) for key, v in values.items()}
    return values[k] if isinstance(values, list) else values


# Where `normbench bench --sections packed` measured packing faster than separate runs on the CPU
# (docs/bench.md; MLP+BN, CNN+GN, RNN+LN on one thread): model -> (largest batch, largest batch x members).
# Past these the work per step is large enough that one grouped convolution, or S members' hidden states in
# one recurrence, run slower than S separate kernels.
# The Transformer is not in it: its pack is not benchmarked on the CPU yet, so `auto` trains its members
# one after another there (pack.mode=packed packs them; equal to separate runs, tests/test_pack.py).
PACK_LIMITS: dict[str, tuple[int, int | None]] = {"mlp": (64, None), "cnn": (8, 40), "rnn": (8, None)}


# The same limits on CUDA, as scripts/gpu_check.sh derives them from `normbench bench --sections packed
# --device cuda` (bench.packed.derive_limits): {"mlp": [max batch, max batch x members or null], ...}.
CUDA_LIMITS_FILE = Path(__file__).with_name("cuda_limits.json")


def pack_limits(device_type: str) -> dict[str, tuple[int, int | None]] | None:
    """The measured limits for this kind of device: the CPU's above, CUDA's from CUDA_LIMITS_FILE when a
    GPU bench has been checked in; None where nothing was measured."""
    if device_type == "cpu":
        return PACK_LIMITS
    if device_type == "cuda" and CUDA_LIMITS_FILE.exists():
        import json

        return {k: (int(v[0]), None if v[1] is None else int(v[1]))
                for k, v in json.loads(CUDA_LIMITS_FILE.read_text()).items()}
    return None


def packs_faster(cfg: Config, device_type: str = "cpu") -> bool:
    """Does `pack.mode=auto` pack this configuration on this kind of device (else its members run one
    after another)? Where the bench measured limits for the device (`pack_limits`), they decide; where
    none were measured (a GPU without a checked-in table, MPS), every pack of two or more members trains
    packed, since there one small kernel per member leaves most of the device idle, which packing exists
    to fill."""
    size = group_size(cfg)  # with data.split=per_seed, the members of one seed
    if size < 2:
        return False
    limits = pack_limits(device_type)
    if limits is None:
        return True
    max_batch, max_samples = limits.get(cfg.model.name, (0, None))
    return cfg.batch_size <= max_batch and (max_samples is None or cfg.batch_size * size <= max_samples)


def mode_for(cfg: Config, device_type: str) -> PackMode:
    """`pack.mode`, with `auto` decided by `packs_faster`."""
    if cfg.pack.mode != PackMode.auto:
        return cfg.pack.mode
    if pack_limits(device_type) is None and group_size(cfg) > 1:
        log.info("pack.mode=auto on %s packs %s together (no packing limits were measured on this kind of "
                 "device: scripts/gpu_check.sh writes CUDA's; set pack.mode=sequential to train members one "
                 "after another)", device_type, "every member" if len(groups(cfg)) == 1 else "each seed's members")
    return PackMode.packed if packs_faster(cfg, device_type) else PackMode.sequential
