"""A packed run: `pack.seeds` (and `pack.lrs`) members, trained together, each written as its own run.

    run_pack(Config(pack=PackConfig(seeds=[0, 1, 2, 3, 4])), Path("outputs/try"))
    # outputs/try/seed=0/results.json ... seed=4/results.json, each with its own TensorBoard run;
    # outputs/try/checkpoint.pt holds the pack's state

Each member's results.json is the single-run contract, with its own seed and lr in `config` (and `pack`
unset there), plus `packed`: where and how it was trained. `normbench summarize` finds members as it finds
any run. Where the bench measured packing slower than separate runs (`mode=auto`, see `packs_faster`),
or with `pack.mode=sequential`, the members run one after another in this process instead: the same
outputs, the same files.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from normbench import data, guards, runner, studies
from normbench.config import Config, PackConfig, PackMode, to_dict
from normbench.errors import UserError
from normbench.pack.fit import fit_packed
from normbench.pack.model import pack_models
from normbench.results import PACK, atomic_write_text, write_results

DEFAULT = Config()


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


def member_values(values: Any, k: int) -> Any:
    """Member k's entries of a pack's evaluation results (lists, one entry per member, in nested dicts)."""
    if isinstance(values, dict):
        return {key: member_values(v, k) for key, v in values.items()}
    return values[k] if isinstance(values, list) else values


# Where `normbench bench --sections packed` measured packing faster than separate runs (docs/bench.md;
# MLP+BN, CNN+GN, RNN+LN on one CPU thread): model -> (largest batch, largest batch x members). Past these
# the work per step is large enough that one grouped convolution, or S members' hidden states in one
# recurrence, run slower than S separate kernels.
PACK_LIMITS: dict[str, tuple[int, int | None]] = {"mlp": (64, None), "cnn": (8, 40), "rnn": (8, None)}


def packs_faster(cfg: Config) -> bool:
    """Does `pack.mode=auto` pack this configuration (else its members run one after another)?"""
    size = len(cfg.pack.seeds or [cfg.seed]) * len(cfg.pack.lrs or [cfg.lr])
    max_batch, max_samples = PACK_LIMITS.get(cfg.model.name, (0, None))
    return size > 1 and cfg.batch_size <= max_batch and (max_samples is None or cfg.batch_size * size <= max_samples)


def _summary(names: list[str], results: list[dict]) -> dict[str, Any]:
    statuses = [r["status"] for r in results]
    status = "failed" if "failed" in statuses else "diverged" if "diverged" in statuses else "completed"
    return {"status": status, "members": [
        {"name": n, "status": r["status"], "diverged_step": r.get("diverged_step"), "test_acc": r.get("test_acc")}
        for n, r in zip(names, results)]}


def run_pack(cfg: Config, run_dir: Path, hparam_domains: dict[str, list] | None = None) -> dict[str, Any]:
    """Train every member of `cfg.pack`; write each member's results.json; return the pack's summary."""
    validate_pack(cfg)
    pack = members(cfg)
    # The members differ in seed (and lr): TensorBoard's HParams shows those axes as a sweep's would
    hparam_domains = {**(hparam_domains or {}), **{k: sorted({getattr(m, k) for _, m in pack}) for k in ("seed", "lr")}}
    names = [n for n, _ in pack]
    mode = cfg.pack.mode
    if mode == PackMode.auto:
        mode = PackMode.packed if packs_faster(cfg) else PackMode.sequential
    where = {"dir": str(run_dir), "members": len(pack), "mode": str(mode)}
    guards.check_writable(run_dir)
    # The pack's own record: its members and its config (summarize lists the members, not this directory)
    atomic_write_text(run_dir / PACK, json.dumps({**where, "names": names, "config": to_dict(cfg)}, indent=2) + "\n")
    if mode == PackMode.sequential:
        results = []
        for k, (name, member) in enumerate(pack):
            res = runner.run(member, run_dir / name, hparam_domains=hparam_domains)
            res["packed"] = {**where, "index": k, "name": name}
            write_results(run_dir / name, res)
            results.append(res)
        return _summary(names, results)

    started = time.perf_counter()
    dirs = [run_dir / n for n in names]
    for d in dirs:
        guards.check_writable(d)
    if cfg.resume:
        finished = [guards.finished_results(d, to_dict(m)) for d, (_, m) in zip(dirs, pack)]
        if all(f is not None for f in finished):
            return _summary(names, finished)
        guards.check_checkpoint(run_dir / guards.CHECKPOINT)
    results = [runner.start_results(m, d) for d, (_, m) in zip(dirs, pack)]
    for k, (res, name) in enumerate(zip(results, names)):
        res["packed"] = {**where, "index": k, "name": name}
    trackers: list = [None] * len(pack)
    try:
        device, make = runner.setup(pack[0][1])
        splits = data.load(cfg.data, device)
        models = [runner.build_model(m, make, splits, device, res) for (_, m), res in zip(pack, results)]
        packed = pack_models(models, seeds=[m.seed for _, m in pack],
                             packs=lambda batch: packs_faster(replace(cfg, batch_size=batch))).to(device)
        title = f"{cfg.model.name}/{cfg.norm.name} bs={cfg.batch_size} · {len(pack)} packed, showing {names[0]}"
        trackers = [runner.make_trackers(replace(m, progress=m.progress and k == 0), d, to_dict(m), hparam_domains,
                                         title=title) for k, ((_, m), d) in enumerate(zip(pack, dirs))]
        train_cfgs = [replace(m, lr=res["lr_effective"]) for (_, m), res in zip(pack, results)]
        fitted = fit_packed(packed, models, splits, train_cfgs, trackers, device,
                            checkpoint=run_dir / guards.CHECKPOINT, resume=cfg.resume,
                            batch_fn=studies.for_config(cfg).train_batches(cfg))
        for res, fit, model in zip(results, fitted, models):
            runner.record_fit(res, fit, model)
        if any(f.status == "completed" for f in fitted):  # every member's test suite at once
            tested = runner.test_results(packed, splits, cfg)
            for k, (res, fit) in enumerate(zip(results, fitted)):
                if fit.status == "completed":
                    res.update(member_values(tested, k))
    except BaseException as e:  # members not yet finished record why; what was written stays
        for res in results:
            if "error" in res:
                res["status"], res["error"] = "failed", guards.describe(e)
        raise
    finally:
        for res, d, tracker in zip(results, dirs, trackers):
            runner.close_results(res, d, started, tracker)
    return _summary(names, results)
