"""A run, start to finish, from a typed `Config`: data -> norm constructor -> model -> train -> results.json.

    results = run(Config(model=ModelConfig(name="cnn")), run_dir=Path("outputs/try"))
    summary = run(Config(pack=PackConfig(seeds=[0, 1, 2])), run_dir=Path("outputs/pack"))
    # outputs/pack/seed=0/results.json ... each member written as the run it stands for

The CLI calls this with the config Hydra composed; tests and library users call it directly. A plain run
is one member, a pack (`pack.seeds`, `pack.lrs`; normbench.pack) S members: both go through one
lifecycle (`_train_members`) and one training loop (`loop.train`), which never ask which they hold.
What a regime adds (its batches, its extra evaluations) comes from `normbench.regimes`, chosen once per
run and handed down.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from normbench import data, models, norms, regimes
from normbench.config import Config, NormConfig, to_dict
from normbench.errors import UserError
from normbench.models import cells
from normbench.pack import plan
from normbench.pack.model import model_of
from normbench.results import PACK, atomic_write_text, git_sha, versions, write_results
from normbench.train import guards, interrupts, loop, probe
from normbench.device import pick_device
from normbench.train.evaluate import PassClock
from normbench.train.optim import scaled_lr
from normbench.train.state import FitResult
from normbench.train.tracking import RichTracker, TensorBoardTracker, Trackers

CHECKPOINT = guards.CHECKPOINT
# The HParams tab shows these as discrete choices, so a sweep's runs can be filtered by them.
DISCRETE = {"norm.name": norms.names, "model.name": models.names, "data.name": data.names}


def norm_options(cfg: NormConfig) -> dict[str, Any]:
    """The options to pass to `norms.create`: those the user (or the norm's defaults, the `norm` group) set,
    a user's norm's own (`norm.options`) among them."""
    skip = {"name", "track_stats", "track_every", "target", "options"}
    opts = {k: v for k, v in asdict(cfg).items() if k not in skip and v is not None}
    if opts.get("impl") == "native":
        opts.pop("impl")
    return {**opts, **cfg.options}


def validate(cfg: Config, regime=None) -> None:
    """Reject what cannot work, before any data is read: the run's keys, its regime's (`regimes.for_config`
    unless given) and its model's options."""
    checks = [
        (cfg.batch_size >= 1, f"batch_size must be >= 1 (got {cfg.batch_size})", "set batch_size=2 or more"),
        (cfg.lr > 0, f"lr must be > 0 (got {cfg.lr})", "set e.g. lr=1e-3"),
        (cfg.epochs >= 1 or cfg.max_steps is not None,
         f"epochs must be >= 1 (got {cfg.epochs}) unless max_steps is set", "set epochs=1 or more, or max_steps"),
        (cfg.max_steps is None or cfg.max_steps >= 1, f"max_steps must be >= 1 (got {cfg.max_steps})",
         "set max_steps=null to train by epochs"),
        (cfg.log_every >= 1, f"log_every must be >= 1 (got {cfg.log_every})", "set log_every=50"),
        (cfg.validations is None or cfg.validations >= 1, f"validations must be >= 1 (got {cfg.validations})",
         "set validations=null to validate after every epoch"),
        (cfg.lr_ref_batch >= 1, f"lr_ref_batch must be >= 1 (got {cfg.lr_ref_batch})", "set lr_ref_batch=64"),
        (cfg.norm.ghost_batch is None or (cfg.norm.ghost_batch >= 1 and cfg.batch_size % cfg.norm.ghost_batch == 0),
         f"norm.ghost_batch={cfg.norm.ghost_batch} does not divide batch_size={cfg.batch_size}",
         "set norm.ghost_batch to a divisor of batch_size (each SGD batch splits into whole ghost batches)"),
        (cfg.optimizer != "muon" or hasattr(torch.optim, "Muon"),
         f"optimizer=muon needs torch.optim.Muon, which torch {torch.__version__} does not have",
         "install torch 2.9 or later (pip install -U torch), or choose another optimizer"),
    ]
    for ok, what, fix in checks:
        if not ok:
            raise UserError(what, fix)
    (regime or regimes.for_config(cfg)).validate(cfg)


def make_trackers(cfg: Config, run_dir: Path, config_dict: dict,
                  hparam_domains: dict[str, list] | None = None, title: str | None = None) -> Trackers:
    trackers = []
    if cfg.progress:
        trackers.append(RichTracker(title or f"{cfg.model.name}/{cfg.norm.name} bs={cfg.batch_size}"))
    if cfg.tensorboard:
        discrete = {k: list(names()) for k, names in DISCRETE.items()}
        discrete.update({k: list(v) for k, v in (hparam_domains or {}).items() if k not in discrete})
        trackers.append(TensorBoardTracker(run_dir, config_dict, discrete))
    return Trackers(trackers)


TRAINED = ("unfinished: trained, but stopped before its evaluations finished; rerun the same command with "
           "resume=true to finish them from checkpoint.pt (no retraining)")


def start_results(cfg: Config, run_dir: Path, packed: dict | None = None) -> dict[str, Any]:
    """The results a run writes before it starts: "failed, unfinished", so a run killed from then on leaves
    a results.json that says so. A run says completed only once every number it promises is in."""
    results: dict[str, Any] = {"status": "failed", "error": guards.UNFINISHED, "config": to_dict(cfg),
                               "versions": versions(), "git_sha": git_sha()}
    if packed is not None:
        results["packed"] = packed
    write_results(run_dir, results)
    return results


def setup(cfg: Config, regime=None) -> tuple[torch.device, norms.NormFactory]:
    """What every run does before reading data: check the config (`validate`; the model's options against
    its norm), set threads and the CPU's handling of subnormal floats (process-wide: a later run in the
    process sets its own), pick the device."""
    validate(cfg, regime)
    make = norms.factory(cfg.norm.name, target=cfg.norm.target, **norm_options(cfg.norm))
    models.validate(cfg.model, make)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.set_flush_denormal(cfg.flush_denormal)  # a no-op returning False where the CPU cannot flush
    return pick_device(cfg.device), make


def build_model(cfg: Config, make: norms.NormFactory, splits: data.Splits, device: torch.device,
                results: dict[str, Any]) -> torch.nn.Module:
    """The model, initialized by `cfg.seed`, checked against the batch size; records what it sees. `cfg` is
    the member's as it trains: `cfg.lr` its effective lr (`scaled_lr`), which results.json records beside
    the base lr of its config."""
    torch.manual_seed(cfg.seed)
    model = models.create(cfg.model, make, splits.shape, splits.num_classes).to(device)
    values, layouts = models.norm_values_per_channel(model, splits.train_x[:cfg.batch_size])
    guards.check_batch_statistics(cfg, make, values, layouts)
    results.update(device=str(device), torch_threads=torch.get_num_threads(), norm_values_per_channel=values,
                   batch_dependent=not regimes.default.batch_free(model), lr_effective=cfg.lr)
    return model


def record_fit(results: dict[str, Any], fitted: FitResult, model: torch.nn.Module) -> None:
    """Record how training went (the history, what the model is). A diverged run is finished; a run that
    trained to the end is not, until its evaluations are in (`finish`)."""
    results.update(
        steps=fitted.steps, epochs_done=fitted.epochs_done,
        train_samples_per_s=fitted.train_samples_per_s, history=fitted.history,
        val_acc=fitted.history[-1]["acc/val"] if fitted.history else None,
        diverged_step=fitted.diverged_step, train_s=fitted.train_seconds,
        resumed_at_step=fitted.resumed_at_step,  # each step an interrupted training continued from
        first_layer_grad_ratio=fitted.first_grad_ratio,  # ||dL/dW|| / ||W||, first weight matrix, first step
        eval_s=fitted.val_seconds, eval_passes={"validation": fitted.val_seconds},  # the test suite adds its own
        num_params=sum(p.numel() for p in model.parameters()),
        samples_per_step=cells.samples_per_step(model),  # per-step recurrent BN: what each step's saw
        step_samples=cells.step_samples(model),  # ... per training batch: each step's mean and fewest
        test_acc=None,
    )
    if fitted.status == "diverged":
        results.pop("error", None)
        results["status"] = "diverged"
    else:
        results["error"] = TRAINED


def finish(results: dict[str, Any], tested: dict[str, Any], passes: dict[str, float]) -> None:
    """Every number is in, with the seconds each evaluation pass took: the run is completed."""
    results.update(tested)
    results["eval_passes"] = {**results.get("eval_passes", {}), **passes}
    results["eval_s"] = sum(results["eval_passes"].values())
    results.pop("error", None)
    results["status"] = "completed"


def close_results(results: dict[str, Any], run_dir: Path, started: float, tracker) -> None:
    results["wall_s"] = time.perf_counter() - started
    write_results(run_dir, results)
    if tracker is not None:
        if results["status"] != "failed":
            tracker.finish(results)
        tracker.close()


def run(cfg: Config, run_dir: Path, tracker=None, hparam_domains: dict[str, list] | None = None) -> dict[str, Any]:
    """Train and test `cfg`; write `run_dir/results.json` (also when the run fails, setup included, so a
    sweep's summary can list the failure) and return it. `hparam_domains`: extra discrete HParams
    domains, e.g. {"batch_size": [2, 8, 32]} from the sweep this run belongs to. With `pack.seeds` or
    `pack.lrs`, each member is written in its own subdirectory and this returns the pack's summary."""
    run_dir, regime = Path(run_dir), regimes.for_config(cfg)
    guards.check_writable(run_dir)  # a pack's members and checkpoints are written below it
    if not plan.is_pack(cfg):
        return _train_members(cfg, regime, [(run_dir, cfg, None)], run_dir, hparam_domains, tracker=tracker)[0]
    plan.validate_pack(cfg)
    the_plan = plan.decide(cfg, run_dir)
    names = [n for n, _ in the_plan.members]
    # The members differ in seed (and lr): TensorBoard's HParams shows those axes as a sweep's would
    hparam_domains = {**(hparam_domains or {}),
                      **{k: sorted({getattr(m, k) for _, m in the_plan.members}) for k in ("seed", "lr")}}
    where = {"dir": str(run_dir), "members": len(names), "mode": str(the_plan.mode),
             "computations": len(the_plan.groups)}
    # The pack's own record: its members and its config (summarize lists the members, not this directory)
    record = {**where, "names": names, "config": to_dict(cfg)}
    atomic_write_text(run_dir / PACK, json.dumps(record, indent=2) + "\n")
    members = [(run_dir / name, m, {**where, "index": k, "name": name}) for k, (name, m) in enumerate(the_plan.members)]
    results: list[dict[str, Any]] = [{}] * len(members)
    for group in the_plan.groups:  # one computation each, one after another
        trained = _train_members(group.cfg, regime, [members[k] for k in group.members], group.checkpoint_dir,
                                 hparam_domains, packs=group.packs)
        for k, res in zip(group.members, trained):
            results[k] = res
    return _summary(names, results)


def _summary(names: list[str], results: list[dict]) -> dict[str, Any]:
    statuses = [r["status"] for r in results]
    status = "failed" if "failed" in statuses else "diverged" if "diverged" in statuses else "completed"
    return {"status": status, "members": [
        {"name": n, "status": r["status"], "diverged_step": r.get("diverged_step"), "test_acc": r.get("test_acc")}
        for n, r in zip(names, results)]}


def _member_trackers(cfgs: tuple, dirs: tuple, wheres: tuple, hparam_domains: dict[str, list] | None,
                     tracker) -> list:
    """Each member's trackers (the caller's `tracker` for a plain run, when given): a pack's TensorBoard
    events per member, its progress shown for the first member of each computation, titled by the pack."""
    if tracker is not None:
        return [tracker]
    return [make_trackers(replace(c, progress=c.progress and k == 0), d, to_dict(c), hparam_domains,
                          title=_title(c, w)) for k, (c, d, w) in enumerate(zip(cfgs, dirs, wheres))]


def _title(cfg: Config, where: dict | None) -> str:
    """The progress bar's title: the run, and which member of which pack it shows."""
    title = f"{cfg.model.name}/{cfg.norm.name} bs={cfg.batch_size}"
    return title if where is None else f"{title} · {where['members']} {where['mode']}, showing {where['name']}"


def assemble(cfg: Config, regime, cfgs, packs: plan.PackRule | None = None, results: list[dict] | None = None):
    """What one computation trains, up to its training: (device, the members' splits, each member's config
    at its effective lr, each member's network, the model of them all). `results`: each member's results,
    given its parameter count."""
    device, make = setup(cfg, regime)
    # each member's own splits: one object for members that share a split seed (data.load's cache)
    splits = data.MemberSplits.of(data.load_each(cfgs, device))
    trained = [replace(c, lr=scaled_lr(c)) for c in cfgs]  # as each member trains: its effective lr
    results = results or [{} for _ in cfgs]
    nets = [build_model(t, make, s, device, r) for t, s, r in zip(trained, splits.each, results)]
    model = model_of(nets, seeds=[c.seed for c in cfgs], packs=packs).to(device)
    return device, splits, trained, nets, model


def _train_members(cfg: Config, regime, members: list[tuple], checkpoint_dir: Path,
                   hparam_domains: dict[str, list] | None, tracker=None,
                   packs: plan.PackRule | None = None) -> list[dict[str, Any]]:
    """The one lifecycle: members [(run_dir, member config, where it was packed or None)] trained as one
    model (`pack.model.model_of`: a plain model is a set of one), each written as its own run, with what
    `regime` (its module in normbench.regimes) adds. Every member not finished when anything stops it (a
    crash, a user error, Ctrl-C, its test suite cut short) is written as failed with why; what was already
    written stays."""
    started = time.perf_counter()
    dirs, cfgs, wheres = zip(*members)
    if cfg.resume:
        finished = [guards.finished_results(d, to_dict(c)) for d, c in zip(dirs, cfgs)]
        if all(f is not None for f in finished):
            return finished
        guards.check_checkpoint(checkpoint_dir / CHECKPOINT, dirs)
    results = [start_results(c, d, w) for d, c, w in members]
    trackers: list = [tracker] if tracker is not None else [None] * len(members)  # closed however it ends
    try:
        device, splits, trained, nets, model = assemble(cfg, regime, cfgs, packs, results)
        trackers = _member_trackers(cfgs, dirs, wheres, hparam_domains, tracker)
        if cfg.norm.track_stats:  # forward hooks on a plain run's norm layers (a pack refuses the key)
            probe.attach(nets[0], trackers[0], cfg.norm.track_every)
        fitted = loop.train(model, splits, trained, trackers, device, checkpoint=checkpoint_dir / CHECKPOINT,
                            resume=cfg.resume, batch_fn=regime.train_batches(cfg))
        started -= max(f.earlier_wall_s for f in fitted)  # a resumed run's wall_s: its earlier processes too
        for res, fit, net in zip(results, fitted, nets):
            record_fit(res, fit, net)
        if any(f.status == "completed" for f in fitted):  # every member's test suite at once
            clock = PassClock()
            tested = regime.evaluations(model, splits, cfg, clock=clock)
            for k, (res, fit) in enumerate(zip(results, fitted)):
                if fit.status == "completed":
                    finish(res, plan.member_values(tested, k), clock.seconds)
    except BaseException as e:  # a crash, a user error, Ctrl-C or a signal: every unfinished member records why
        for res in results:
            if "error" in res:
                res["status"], res["error"] = "failed", guards.describe(e)
                if isinstance(e, interrupts.Interrupted):  # where a resume starts
                    res["interrupted"] = {"signal": e.signal, "step": e.step}
        raise
    finally:
        for res, d, t in zip(results, dirs, trackers):
            close_results(res, d, started, t)
    return results
