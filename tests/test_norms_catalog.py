"""The catalog as users see it: one config file per norm whose values are the build defaults, every file
composing against the typed schema, and `normbench norms` printing the table."""

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from conftest import normbench_cli
from normbench import norms
from normbench.cli import store_configs
from normbench.runner import norm_options

CONFIGS = Path(norms.__file__).resolve().parents[1] / "configs" / "norm"


def test_one_config_file_per_catalog_name():
    """Reference: norms.names(), in catalog order (docs/design.md, README's catalog)."""
    assert norms.names() == ["none", "bn", "ln", "in", "gn", "rms", "wn", "cn", "sn", "brn", "frn", "evonorm",
                             "dyt", "pn"]
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(norms.names())


@pytest.mark.parametrize("name", norms.names())
def test_config_values_are_the_build_defaults(name):
    """Reference: the build function's keyword defaults (what `norms.create` uses with no options), so a
    run's resolved config in results.json states exactly what was built."""
    values = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    assert values.pop("name") == name
    defaults = norms.get(name).options()
    assert set(values) == set(defaults), "every option documented, no stray keys"
    assert values == defaults


@pytest.mark.parametrize("name", norms.names())
def test_config_composes_and_builds(name):
    """Reference: the typed schema (config.py) and norms.create, through the runner's option filter."""
    store_configs()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=[f"norm={name}"]))
    layout = norms.get(name).layouts[-1]
    assert norms.factory(name, **norm_options(cfg.norm))(16, layout) is not None


def test_normbench_norms_prints_the_catalog(tmp_path):
    """Reference: the README's catalog table: every name, its paper, and which are batch-dependent."""
    r = normbench_cli("norms", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for name in norms.names():
        spec = norms.get(name)
        assert f" {name} " in r.stdout and spec.paper.split(",")[0] in r.stdout
    detail = normbench_cli("norms", "brn", cwd=tmp_path)
    assert detail.returncode == 0 and "r_max" in detail.stdout and "renorm_r_ramp_frac" in detail.stdout
    bad = normbench_cli("norms", "xn", cwd=tmp_path)
    assert bad.returncode == 2 and "choose one of: none, bn" in bad.stderr
