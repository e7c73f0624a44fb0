"""Bench section `eval`: what share of a shipped study's run goes to evaluation, at the study's own budget.

A study's full run is long (10 epochs of 55k images for the variable-length RNN), but its two parts scale
apart: training is steps x seconds per step, evaluation is the validation passes plus one test
suite that does not depend on how long the model trained. So each cell below is the shipped experiment
(`experiment=...` as composed by Hydra, one seed, its own lr grid as one pack) trained for a few hundred
real steps and then evaluated with its full suite, and its full-budget share is projected:

    share = (suite + validation passes x one pass) / (steps x step seconds + that)

with the steps of the shipped budget (epochs x training images // batch size, or max_steps where it caps
them; train/budget.plan_steps) and its passes (one an epoch, or `validations`). Every figure in it is
measured in the short run; only the step count is the shipped one's. The cells are each study's costliest
to evaluate (batch-dependent norms, the longest suites), so "every run" is bounded by them.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

from normbench.bench import markdown_table

# (study, overrides): the shipped experiments, one seed each; their lr grids as the experiments set them.
CELLS = [
    ("ghost_batch", ["norm=bn", "norm.ghost_batch=2"]),
    ("ghost_batch", ["norm=brn", "norm.ghost_batch=2"]),
    ("ghost_batch", ["norm=bn", "norm.ghost_batch=64"]),
    ("small_batch", ["norm=bn", "batch_size=2"]),
    ("small_batch", ["norm=bn", "batch_size=128"]),
    ("small_batch", ["norm=bn", "batch_size=2", "model=cnn"]),
    ("converged", ["norm=bn", "batch_size=64"]),
    ("variable_length", ["varlen_design=length", "seq_norm=bn_recurrent"]),
    ("variable_length", ["varlen_design=length", "seq_norm=ln"]),
    ("variable_length", ["varlen_design=padding", "seq_norm=bn_naive_input"]),
    ("small_batch_transformer", ["norm=bn", "batch_size=64", "pack.lrs=null", "lr=1e-3"]),
    ("variable_length_transformer", ["varlen_design=padding", "seq_norm=bn_naive", "pack.lrs=null", "lr=1e-3"]),
    ("variable_length_transformer", ["varlen_design=length", "seq_norm=ln", "pack.lrs=null", "lr=1e-3"]),
    ("lr_sensitivity", ["norm=ln", "model.placement=post", "pack.lrs=null", "lr=1e-3"]),
]
TARGET = 0.25  # the largest share of any shipped study's run that evaluation may take: each cell is checked


def compose(study: str, overrides: list[str], data_root: str):
    """The run config Hydra composes for `normbench train experiment=<study> <overrides>`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from omegaconf import OmegaConf

    from normbench.config import schema
    from normbench.configs import store_configs

    store_configs()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        dict_cfg = hydra_compose("config", overrides=[f"experiment={study}", *overrides])
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema()), dict_cfg))
    cfg.data.root = data_root
    return cfg


def measure(study: str, overrides: list[str], args) -> dict:
    """One cell: a short run of the shipped config (seed 0, `steps` steps), its costs, and the projection."""
    from dataclasses import replace

    from normbench import data
    from normbench import runner
    from normbench.device import pick_device
    from normbench.train.budget import plan_steps, validation_passes

    steps = 20 if args.quick else 300
    shipped = compose(study, overrides, args.data_root)
    cfg = replace(shipped, max_steps=steps, threads=args.threads, tensorboard=False, progress=False,
                  pack=replace(shipped.pack, seeds=[0] if shipped.pack.seeds else None))
    train_images = len(data.load(cfg.data, pick_device("cpu"), seed=0).train_x)
    # the shipped budget as the loop counts it (max_steps caps the epochs, and alone decides below 1 epoch)
    full_steps = plan_steps(shipped, train_images)[1]
    epochs = math.ceil(full_steps / (train_images // cfg.batch_size))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        runner.run(cfg, Path(tmp))
        wall = time.perf_counter() - started
        results = [json.loads(p.read_text()) for p in sorted(Path(tmp).rglob("results.json"))]
    r = results[0]  # a packed pack's members share their seconds; a sequential one's add up
    members = results if r.get("packed", {}).get("mode") == "sequential" else [r]  # whose passes add up
    suite = sum(m["eval_s"] - m["eval_passes"].get("validation", 0.0) for m in members)
    validation = sum(m["eval_passes"].get("validation", 0.0) / max(1, len(m["history"])) for m in members)  # a pass
    step_s = sum(m["train_s"] for m in members) / r["steps"]
    passes = validation_passes(full_steps, train_images // cfg.batch_size, cfg.validations)
    evaluation = suite + passes * validation
    share = evaluation / (full_steps * step_s + evaluation)
    return {"study": study, "overrides": overrides, "members": len(results), "steps": r["steps"],
            "step_ms": 1e3 * step_s, "suite_s": suite, "validation_s": validation, "epochs": epochs,
            "validations": passes,
            "full_steps": full_steps, "short_wall_s": wall, "share": share, "passes": r["eval_passes"]}


def run(args, device) -> tuple[list[dict], str]:
    import torch._dynamo  # noqa: F401  imported by the first optimizer step: paid here, not in a cell's steps

    rows = []
    for study, overrides in CELLS[:3] if args.quick else CELLS:
        m = measure(study, overrides, args)
        rows.append(m)
        print(f"  {study} {' '.join(overrides)}: {m['share']:.0%} evaluation at the shipped budget", flush=True)
    table = [[r["study"], " ".join(r["overrides"]), r["members"], f"{r['step_ms']:.1f}", f"{r['full_steps']:,}",
              f"{r['suite_s']:.1f}", f"{r['validation_s']:.2f} x {r['validations']}", f"{r['share']:.0%}",
              "yes" if r["share"] <= TARGET else "**no**"] for r in rows]
    text = ("### Evaluation's share of the shipped studies' runs\n\n"
            "Each cell is `normbench train experiment=<study> <overrides>` with one seed (its lr grid as one "
            f"pack), trained {rows[0]['steps']} steps and then evaluated with its whole suite; the share is "
            "projected to the shipped budget: (suite + its validation passes x one pass) / (the budget's steps x "
            f"the measured step + that). Target: at most {TARGET:.0%}.\n\n"
            + markdown_table(["study", "cell", "members", "step ms", "shipped steps", "suite s", "validation s",
                              "evaluation share", f"<= {TARGET:.0%}"], table))
    return rows, text
