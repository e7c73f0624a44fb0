"""Sweeps that scale out: the learning-rate scaling rule, the shipped experiments and launcher presets,
and a multirun through the joblib launcher in which one job fails and the others finish and summarize."""

import json
import math
from pathlib import Path

import pytest
from conftest import normbench_cli
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from normbench import norms
from normbench.cli import store_configs
from normbench.config import Config
from normbench.errors import UserError
from normbench.train.optim import scaled_lr

CONFIGS = Path(__file__).resolve().parents[1] / "normbench" / "configs"


def _compose(overrides, hydra=False):
    store_configs()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra)


@pytest.mark.parametrize("batch, rule, expected", [
    (32, "linear", 0.1), (2, "linear", 0.1 * 2 / 32), (128, "linear", 0.4),
    (8, "sqrt", 0.1 * math.sqrt(8 / 32)), (128, "sqrt", 0.2), (2, "none", 0.1),
])
def test_lr_scaling_rule(batch, rule, expected):
    """Reference: the GroupNorm paper's rule lr = 0.1 x batch / 32 (linear, Goyal et al. 2017); the square
    root of that ratio (sqrt); the base lr unchanged (none)."""
    cfg = Config(lr=0.1, lr_ref_batch=32, lr_scaling=rule, batch_size=batch)
    assert scaled_lr(cfg) == pytest.approx(expected, rel=1e-12)


def test_unknown_lr_scaling_is_a_user_error():
    """Reference: the schema's choices (config.LrScaling), checked when the config is built."""
    with pytest.raises(UserError, match="lr_scaling 'cubic'; use one of: none, linear, sqrt"):
        Config(lr_scaling="cubic")


def test_small_batch_experiment_composes():
    """Reference: docs/regimes.md's study: SGD with linear lr scaling, both the MLP and the CNN, batch sizes 2..128,
    5 seeds as one pack per configuration (docs/packing.md), one torch thread per job, the local joblib
    launcher."""
    cfg = _compose(["experiment=small_batch"], hydra=True)
    assert cfg.lr_scaling == "linear" and cfg.optimizer == "sgd" and cfg.threads == 1
    params = cfg.hydra.sweeper.params
    assert params.model.split(",") == ["mlp", "cnn"]
    assert [int(b) for b in params.batch_size.split(",")] == [2, 4, 8, 16, 32, 64, 128]
    assert "seed" not in params and list(cfg.pack.seeds) == [0, 1, 2, 3, 4]
    assert {"bn", "gn", "ln"} <= set(params.norm.split(","))
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 2


def _seq_norm_options():
    return sorted(p.stem for p in (CONFIGS / "seq_norm").glob("*.yaml"))


@pytest.mark.parametrize("option", _seq_norm_options())
def test_variable_length_experiment_composes(option):
    """Reference: docs/regimes.md's variable-length study: the RNN, lengths 10-28, tests at 36 and 42 and under
    2x padding; each seq_norm option selects the norm and placement its file names, and that norm is a catalog
    name (norms.names()): a typo there fails here. pn and dyt are the Transformer's options, composed with
    experiment=variable_length_transformer."""
    text = (CONFIGS / "seq_norm" / f"{option}.yaml").read_text()
    norm = text.split("override /norm: ")[1].split()[0]
    assert norm in norms.names(), (f"seq_norm/{option}.yaml overrides /norm: {norm!r}, not a catalog name "
                                   f"({', '.join(norms.names())})")
    if option in ("pn", "dyt"):
        cfg = OmegaConf.to_object(_compose(["experiment=variable_length_transformer", f"seq_norm={option}"]))
        assert cfg.model.name == "transformer" and cfg.varlen.enabled and cfg.norm.name == norm
        return
    cfg = OmegaConf.to_object(_compose(["experiment=variable_length", f"seq_norm={option}"]))
    assert cfg.model.name == "rnn" and cfg.varlen.enabled and cfg.norm.name == norm
    assert (cfg.varlen.min_len, cfg.varlen.max_len) == (10, 28) and {36, 42} <= set(cfg.varlen.test_lengths)
    assert cfg.varlen.heavy_pad == 2
    assert cfg.model.placement == ("recurrent" if "recurrent" in option else "input" if option.endswith("_input")
                                   else "output")
    if option.startswith(("bn_naive", "bn_masked")):
        assert cfg.norm.masked == option.startswith("bn_masked")


def test_variable_length_sweep_names_every_variant():
    """Reference: docs/regimes.md's list: none, naive and masked BN (on the outputs and on W_x x_t),
    recurrent BN, LN (output and recurrent), RMS; under both designs (the length and the padding question)."""
    cfg = _compose(["experiment=variable_length"], hydra=True)
    assert set(cfg.hydra.sweeper.params.seq_norm.split(",")) == {
        "none", "bn_naive", "bn_masked", "bn_naive_input", "bn_masked_input", "bn_recurrent", "ln", "ln_recurrent",
        "rms"}
    assert set(cfg.hydra.sweeper.params.varlen_design.split(",")) == {"length", "padding"}
    transformer = _compose(["experiment=variable_length_transformer"], hydra=True)
    assert set(transformer.hydra.sweeper.params.seq_norm.split(",")) == {
        "none", "bn_naive", "bn_masked", "pn", "ln", "rms", "dyt"}
    assert set(cfg.hydra.sweeper.params.seq_norm.split(",")) | set(transformer.hydra.sweeper.params.seq_norm.split(
        ",")) == set(_seq_norm_options())


@pytest.mark.parametrize("experiment, norms_swept", [
    ("small_batch_transformer", {"bn", "pn", "ln", "rms", "dyt", "derf"}), ("lr_sensitivity", {"ln", "rms", "dyt", "none"})])
def test_transformer_experiments_compose(experiment, norms_swept):
    """Reference: issue 25's designs: the Transformer with AdamW; the small-batch study over batch 2..64 with
    BN, PN, LN, RMS, DyT; the lr study over pre/post x four norms x QK-norm on/off, an 8-value log grid."""
    cfg = _compose([f"experiment={experiment}"], hydra=True)
    assert cfg.model.name == "transformer" and cfg.optimizer == "adam" and cfg.threads == 1
    assert set(cfg.hydra.sweeper.params.norm.split(",")) == norms_swept
    if experiment == "lr_sensitivity":
        lrs = list(cfg.pack.lrs)
        assert len(lrs) >= 8 and all(2 <= b / a <= 3.5 for a, b in zip(lrs, lrs[1:]))
        assert set(cfg.hydra.sweeper.params["model.placement"].split(",")) == {"pre", "post"}
        assert set(cfg.hydra.sweeper.params["model.qk_norm"].split(",")) == {"none", "ln"}
    else:
        assert [int(b) for b in cfg.hydra.sweeper.params.batch_size.split(",")] == [2, 8, 32, 64]
    varlen = OmegaConf.to_object(_compose(["experiment=variable_length_transformer", "seq_norm=pn"]))
    assert varlen.model.name == "transformer" and varlen.varlen.enabled and varlen.norm.name == "pn"


def test_variable_length_designs_compose():
    """Reference: configs/varlen_design/: the length design trains bucketed and tests every other length
    10..42; the padding design trains on mixed lengths under a varying padding share with background
    padding, and tests at a share no training batch had (3x)."""
    length = OmegaConf.to_object(_compose(["experiment=variable_length"]))
    assert length.varlen.design == "length" and length.varlen.batching == "bucketed"
    assert length.varlen.test_lengths == list(range(10, 43, 2)) and length.varlen.min_step_samples == 32
    padding = OmegaConf.to_object(_compose(["experiment=variable_length", "varlen_design=padding"]))
    assert padding.varlen.design == "padding" and padding.varlen.batching == "mixed"
    assert (padding.varlen.train_pad, padding.varlen.train_pad_max, padding.varlen.heavy_pad) == (1.0, 2.0, 3.0)
    assert padding.varlen.pad_value == "background" and padding.varlen.heavy_pad > padding.varlen.train_pad_max


def test_slurm_preset_composes():
    """Reference: hydra-submitit-launcher's SlurmLauncher, with torch threads tied to cpus_per_task."""
    cfg = _compose(["hydra/launcher=slurm"], hydra=True).hydra.launcher
    assert cfg._target_.endswith("SlurmLauncher") and cfg.cpus_per_task >= 1
    assert any("OMP_NUM_THREADS" in line for line in cfg.setup)


def _hparam_domains(event_file: Path) -> dict:
    """The discrete HParams domains a run's event file declares, read back with TensorBoard's own parser."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    for event in EventFileLoader(str(event_file)).Load():
        for v in event.summary.value:
            if v.tag == "_hparams_/experiment":
                exp = plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content).experiment
                return {h.name: [getattr(x, x.WhichOneof("kind")) for x in h.domain_discrete.values]
                        for h in exp.hparam_infos if h.HasField("domain_discrete")}
    return {}


@pytest.mark.slow
def test_joblib_multirun_survives_a_failing_job_and_summarizes(tiny_root, tmp_path):
    """Reference: 4 jobs through the shipped joblib preset, 2 of them impossible (InstanceNorm on an MLP's
    flat features): those write results.json with status failed, the other 2 complete, the sweep exits
    with status 2 once all have run (docs/reliability.md: some runs failed by user error), the HParams tab gets batch_size's swept values as its domain, and summarize lists it all."""
    sweep = tmp_path / "sweep"
    r = normbench_cli("train", "-m", "hydra/launcher=local", "threads=1", "norm=ln,in", "batch_size=8,16",
                      f"data.root={tiny_root}", "data.val_size=100", "data.download=false", "max_steps=4",
                      "progress=false", "model.hidden=16", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "runs of the sweep failed" in r.stderr
    assert "JoblibLauncher" in r.stdout + r.stderr or "Joblib" in r.stdout + r.stderr
    results = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert len(results) == 4
    by_norm = {}
    for res in results:
        by_norm.setdefault(res["config"]["norm"]["name"], []).append(res)
    assert [x["status"] for x in by_norm["ln"]] == ["completed", "completed"]
    assert [x["status"] for x in by_norm["in"]] == ["failed", "failed"]
    assert all("not defined on flat" in x["error"] for x in by_norm["in"])
    assert all(x["torch_threads"] == 1 for x in by_norm["ln"])

    events = next(p for p in sweep.glob("ln,*/events.out.tfevents.*"))
    domains = _hparam_domains(events)
    assert domains["batch_size"] == ["8", "16"]  # integers shown as integers
    assert "ln" in domains["norm.name"]

    r = normbench_cli("summarize", str(sweep), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["runs"] == {"completed": 2, "failed": 2}
    cells = {(g["norm"], g["axis"]): g["n"] for g in summary["groups"] if g["metric"] == "test_acc"}
    assert cells == {("ln", "8"): 1, ("ln", "16"): 1, ("in", "8"): 0, ("in", "16"): 0}
    assert (sweep / "sweep_fashion_mnist.png").exists()  # a plain sweep, not the small-batch study
