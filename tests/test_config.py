"""The schema (normbench/config.py) as a library user and as the command line see it: plain values, one
source of each model's defaults, choices refused at composition, runtime keys declared once, and run
directories that never collide."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import CHILD_ENV, write_tiny_fashion_mnist
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import normbench
from normbench import cli, models, norms
from normbench.config import MODEL_DEFAULTS, Config, DataConfig, ModelConfig, data_root, runtime_keys, to_dict
from normbench.errors import UserError
from normbench import runner
from normbench.train import guards
from normbench.train.tracking import NullTracker


def _compose(overrides):
    cli.store_configs()
    cli.register_resolvers()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        return compose("config", overrides=overrides)


@pytest.mark.parametrize("name", models.names())
def test_command_line_and_library_build_the_same_default_model(name):
    """Reference: `ModelConfig(name=...)`, what bench, scripts and library users build, against the
    config Hydra composes for `model=NAME`, read as Hydra holds it (before any dataclass's __post_init__
    could fill a default in): the same values, and the same network (parameter shapes)."""
    raw = _compose([f"model={name}"]).model
    assert OmegaConf.to_container(raw, enum_to_str=True) == to_dict(ModelConfig(name=name))
    composed = OmegaConf.to_object(raw)
    shapes = [[tuple(p.shape) for p in models.create(m, norms.factory("bn"), (1, 28, 28), 10).parameters()]
              for m in (composed, ModelConfig(name=name))]
    assert shapes[0] == shapes[1]


def test_a_user_override_beats_the_model_default():
    """Reference: the override itself; the other defaults stay the model's."""
    cfg = OmegaConf.to_object(_compose(["model=cnn", "model.dropout=0.5"])).model
    assert cfg.dropout == 0.5 and cfg.channels == MODEL_DEFAULTS["cnn"]["channels"]


def test_config_outside_hydra_is_plain_values(monkeypatch, tmp_path):
    """Reference: a library user's `Config()` holds no interpolation strings, and data.root resolves to
    $NORMBENCH_DATA, else ./data, in code (the bug: a folder literally named '${oc.env:...}')."""
    for value in json.dumps(to_dict(Config())).split('"'):
        assert "${" not in value
    monkeypatch.delenv("NORMBENCH_DATA", raising=False)
    assert data_root(DataConfig()) == "./data"
    monkeypatch.setenv("NORMBENCH_DATA", str(tmp_path))
    assert data_root(DataConfig()) == str(tmp_path)
    assert data_root(DataConfig(root="/elsewhere")) == "/elsewhere"


def test_library_run_finds_data_through_the_environment(monkeypatch, tmp_path):
    """Reference: a tiny dataset written where $NORMBENCH_DATA points; `runner.run(Config(...))` with no
    data.root trains on it (and creates no folder named after an interpolation)."""
    root = write_tiny_fashion_mnist(tmp_path / "data")
    monkeypatch.setenv("NORMBENCH_DATA", str(root))
    monkeypatch.chdir(tmp_path)
    cfg = Config(model=ModelConfig(name="mlp", hidden=16), data=DataConfig(val_size=100, download=False),
                 batch_size=16, max_steps=5, epochs=1, progress=False, tensorboard=False, device="cpu")
    res = runner.run(cfg, tmp_path / "run", tracker=NullTracker())
    assert res["status"] == "completed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "run"]


@pytest.mark.parametrize("override, needle", [
    ("optimizer=adamw", "optimizer"), ("schedule=linear", "schedule"), ("lr_scaling=cubic", "lr_scaling"),
    ("model.cell=transformer", "cell"), ("model.placement=inside", "placement"),
])
def test_unknown_choices_fail_at_composition(override, needle):
    """Reference: Hydra structured configs with enum-typed keys refuse other values while composing,
    before any run starts (and a library user's plain string is checked the same way)."""
    with pytest.raises(Exception, match=needle):
        OmegaConf.to_object(_compose(["model=rnn", override]))
    key, value = override.split("=")
    with pytest.raises(UserError, match=f"unknown {key} '{value}'"):
        if key.startswith("model."):
            ModelConfig(name="rnn", **{key.split(".")[1]: value})
        else:
            Config(**{key: value})


def test_runtime_keys_are_declared_once_and_used_by_resume():
    """Reference: the keys the schema marks runtime: resume ignores exactly those when it compares configs."""
    keys = runtime_keys()
    assert {"device", "threads", "progress", "tensorboard", "resume", "data.root", "norm.track_stats"} <= keys
    assert not keys & {"lr", "batch_size", "seed", "norm.name", "model.hidden"}
    a = to_dict(Config())
    b = to_dict(replace(Config(), device="cpu", threads=3, progress=False, lr=0.5))
    assert guards.config_differences(a, b) == ["lr"]


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_runs_started_together_get_their_own_directories(tmp_path):
    """Reference: three `normbench train` processes started at once in one directory (the bug: they
    shared `outputs/<date>/<second>` and wrote one results.json between them) leave three run
    directories, each with its own completed results.json. The collision is made certain, not left to
    the clock: every process is given the same directory name but for `${nb.pid:}`, the part the
    shipped run and sweep directories end with."""
    shipped = OmegaConf.to_container(OmegaConf.load(Path(normbench.__file__).parent / "configs" / "config.yaml"))
    assert shipped["hydra"]["run"]["dir"].endswith("_${nb.pid:}")
    assert shipped["hydra"]["sweep"]["dir"].endswith("_${nb.pid:}")
    root = write_tiny_fashion_mnist(tmp_path / "data")
    env = dict(CHILD_ENV)
    args = [sys.executable, "-m", "normbench", "train", f"data.root={root}", "data.val_size=100",
            "data.download=false", "max_steps=3", "batch_size=16", "progress=false", "tensorboard=false",
            "threads=1", "hydra.run.dir=outputs/same_${nb.pid:}"]
    procs = [subprocess.Popen([*args, f"seed={i}"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
             for i in range(3)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    found = sorted((tmp_path / "outputs").glob("same_*/results.json"))
    assert len(found) == 3
    assert sorted(json.loads(f.read_text())["config"]["seed"] for f in found) == [0, 1, 2]


def test_a_run_recorded_before_a_key_existed_resumes_at_that_keys_default():
    """Reference: what such a run trained with, the key's default. A results.json written before
    data.split existed has no data.split: resume compares it as `fixed`, and refuses `per_seed`."""
    old = to_dict(Config())
    del old["data"]["split"]
    assert guards.config_differences(old, to_dict(Config())) == []
    assert guards.config_differences(old, to_dict(Config(data=DataConfig(split="per_seed")))) == ["data.split"]
