"""One run, start to finish, from a typed `Config`: data -> norm constructor -> model -> fit -> results.json.

    results = run(Config(model=ModelConfig(name="cnn")), run_dir=Path("outputs/try"))

The CLI calls this with the config Hydra composed; tests and library users call it directly. What a
study adds (its batches, its extra evaluations) comes from `normbench.studies`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from normbench import cells, data, guards, models, norms, probe, studies
from normbench.config import Config, NormConfig, to_dict
from normbench.data import batches
from normbench.engine import evaluate, fit, pick_device
from normbench.errors import UserError
from normbench.optim import scaled_lr
from normbench.results import git_sha, versions, write_results
from normbench.tracking import RichTracker, TensorBoardTracker, Trackers

CHECKPOINT = guards.CHECKPOINT
# The HParams tab shows these as discrete choices, so a sweep's runs can be filtered by them.
DISCRETE = {"norm.name": norms.names, "model.name": models.names, "data.name": data.names}


def norm_options(cfg: NormConfig) -> dict[str, Any]:
    """The options to pass to `norms.create`: those the user (or the norm's yaml) set."""
    skip = {"name", "track_stats", "track_every"}
    opts = {k: v for k, v in asdict(cfg).items() if k not in skip and v is not None}
    if opts.get("impl") == "native":
        opts.pop("impl")
    return opts


def validate(cfg: Config) -> None:
    """Reject what cannot work, before any data is read."""
    checks = [
        (cfg.batch_size >= 1, f"batch_size must be >= 1 (got {cfg.batch_size})", "set batch_size=2 or more"),
        (cfg.lr > 0, f"lr must be > 0 (got {cfg.lr})", "set e.g. lr=1e-3"),
        (cfg.epochs >= 1 or cfg.max_steps is not None,
         f"epochs must be >= 1 (got {cfg.epochs}) unless max_steps is set", "set epochs=1 or more, or max_steps"),
        (cfg.max_steps is None or cfg.max_steps >= 1, f"max_steps must be >= 1 (got {cfg.max_steps})",
         "set max_steps=null to train by epochs"),
        (cfg.log_every >= 1, f"log_every must be >= 1 (got {cfg.log_every})", "set log_every=50"),
        (cfg.lr_ref_batch >= 1, f"lr_ref_batch must be >= 1 (got {cfg.lr_ref_batch})", "set lr_ref_batch=64"),
        (cfg.norm.ghost_batch is None or (cfg.norm.ghost_batch >= 1 and cfg.batch_size % cfg.norm.ghost_batch == 0),
         f"norm.ghost_batch={cfg.norm.ghost_batch} does not divide batch_size={cfg.batch_size}",
         "set norm.ghost_batch to a divisor of batch_size (each SGD batch splits into whole ghost batches)"),
    ]
    for ok, what, fix in checks:
        if not ok:
            raise UserError(what, fix)
    studies.for_config(cfg).validate(cfg)
    if cfg.pack.seeds is not None or cfg.pack.lrs is not None:
        from normbench.pack.runner import validate_pack

        validate_pack(cfg)


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


def start_results(cfg: Config, run_dir: Path) -> dict[str, Any]:
    """The results a run writes before it starts: "failed, unfinished", so a run killed from then on leaves
    a results.json that says so."""
    results: dict[str, Any] = {"status": "failed", "error": guards.UNFINISHED, "config": to_dict(cfg),
                               "versions": versions(), "git_sha": git_sha()}
    write_results(run_dir, results)
    return results


def setup(cfg: Config) -> tuple[torch.device, norms.NormFactory]:
    """What every run does before reading data: check the config, set threads, pick the device."""
    validate(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return pick_device(cfg.device), norms.factory(cfg.norm.name, **norm_options(cfg.norm))


def build_model(cfg: Config, make: norms.NormFactory, splits: data.Splits, device: torch.device,
                results: dict[str, Any]) -> torch.nn.Module:
    """The model, initialized by `cfg.seed`, checked against the batch size; records what it sees."""
    torch.manual_seed(cfg.seed)
    model = models.create(cfg.model, make, splits.shape, splits.num_classes).to(device)
    values, layouts = models.norm_values_per_channel(model, splits.train_x[:cfg.batch_size])
    guards.check_batch_statistics(cfg, values, layouts)
    results.update(device=str(device), torch_threads=torch.get_num_threads(), norm_values_per_channel=values,
                   lr_effective=scaled_lr(cfg))
    return model


def record_fit(results: dict[str, Any], fitted, model: torch.nn.Module) -> None:
    """Record how training went (the history, its status, what the model is)."""
    results.pop("error", None)
    results.update(
        status=fitted.status, steps=fitted.steps, epochs_done=fitted.epochs_done,
        train_samples_per_s=fitted.train_samples_per_s, history=fitted.history,
        val_acc=fitted.history[-1]["acc/val"] if fitted.history else None,
        diverged_step=fitted.diverged_step,
        num_params=sum(p.numel() for p in model.parameters()),
        samples_per_step=cells.samples_per_step(model),  # per-step recurrent BN: what each step's saw
        test_acc=None,
    )


def test_results(model: torch.nn.Module, splits: data.Splits, cfg: Config) -> dict[str, Any]:
    """A trained model's test loss and accuracies (the study's suite included). For a pack, every value
    is a list with one entry per member."""
    out: dict[str, Any] = {}
    out["test_loss"], out["test_acc"] = evaluate(model, batches(splits.test_x, splits.test_y, cfg.eval_batch_size))
    out.update(studies.for_config(cfg).evaluations(model, splits, cfg))
    return out


def close_results(results: dict[str, Any], run_dir: Path, started: float, tracker) -> None:
    results["wall_s"] = time.perf_counter() - started
    write_results(run_dir, results)
    if tracker is not None:
        if results["status"] != "failed":
            tracker.finish(results)
        tracker.close()


def run(cfg: Config, run_dir: Path, tracker=None, hparam_domains: dict[str, list] | None = None) -> dict[str, Any]:
    """Train and test one configuration; write `run_dir/results.json` (also when the run fails, setup
    included, so a sweep's summary can list the failure). `hparam_domains`: extra discrete HParams
    domains, e.g. {"batch_size": [2, 8, 32]} from the sweep this run belongs to. With `pack.seeds` or
    `pack.lrs` set, the members train packed (normbench.pack) and this returns the pack's summary."""
    if cfg.pack.seeds is not None or cfg.pack.lrs is not None:
        from normbench.pack.runner import run_pack

        return run_pack(cfg, Path(run_dir), hparam_domains)
    started = time.perf_counter()
    run_dir = Path(run_dir)
    config_dict = to_dict(cfg)
    guards.check_writable(run_dir)
    if cfg.resume and (finished := guards.resume_state(run_dir, config_dict)) is not None:
        return finished
    results = start_results(cfg, run_dir)
    try:
        device, make = setup(cfg)
        splits = data.load(cfg.data, device)
        model = build_model(cfg, make, splits, device, results)
        tracker = tracker or make_trackers(cfg, run_dir, config_dict, hparam_domains)
        if cfg.norm.track_stats:  # forward hooks on the norm layers; when off, none exist
            probe.attach(model, tracker, cfg.norm.track_every)
        fitted = fit(model, splits, replace(cfg, lr=results["lr_effective"]), tracker, device,  # records the base lr
                     checkpoint=run_dir / CHECKPOINT, resume=cfg.resume, batch_fn=studies.for_config(cfg).train_batches(cfg))
        record_fit(results, fitted, model)
        if fitted.status == "completed":
            results.update(test_results(model, splits, cfg))
    except BaseException as e:  # a crash, a user error or Ctrl-C: record it, keep what was written, re-raise
        results["status"], results["error"] = "failed", guards.describe(e)
        raise
    finally:
        close_results(results, run_dir, started, tracker)
    return results
