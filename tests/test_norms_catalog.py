"""The catalog as users see it: the `norm` config group generated from each norm's build defaults
(normbench/configs/__init__.py), every entry composing against the typed schema, and `normbench norms`
printing the table."""

from pathlib import Path

import pytest
import torch
from conftest import normbench_cli
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from normbench import norms
from normbench.cli import store_configs
from normbench.configs import _read_norm_defaults
from normbench.norms.registry import TAG
from normbench.runner import norm_options


def test_one_norm_config_per_catalog_name():
    """Reference: norms.names(), in catalog order (docs/design.md, README's catalog): the `norm` group holds
    exactly those and `custom` (your norm by norm.target, normbench/norms/user.py), and no config file beside
    them."""
    assert norms.names() == ["none", "bn", "ln", "in", "gn", "rms", "wn", "cn", "sn", "brn", "frn", "evonorm",
                             "dyt", "pn", "derf", "seednorm", "dyisru"]
    store_configs()
    assert sorted(n.removesuffix(".yaml") for n in ConfigStore.instance().list("norm")) == \
        sorted([*norms.names(), norms.CUSTOM])
    assert not (Path(norms.__file__).resolve().parents[1] / "configs" / "norm").exists()


def test_defaults_read_from_the_source_are_the_registrys():
    """Reference: NormSpec.options() of every catalog name (the build function's keyword defaults, `impl`
    where a twin exists), which configs/__init__.py reads from normbench/norms/*.py without importing torch."""
    assert _read_norm_defaults() == {name: norms.get(name).options() for name in norms.names()}


@pytest.mark.parametrize("name", norms.names())
def test_composed_norm_is_the_build_defaults(name):
    """Reference: the build function's keyword defaults (what `norms.create` uses with no options), so a
    run's resolved config in results.json states exactly what was built; the keys it does not take stay
    null (impl native, the runtime keys at their defaults)."""
    store_configs()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        node = OmegaConf.to_container(compose("config", overrides=[f"norm={name}"]).norm)
    defaults = norms.get(name).options()
    assert node.pop("name") == name
    assert {key: node.pop(key) for key in defaults} == defaults
    assert (node.pop("impl", "native"), node.pop("track_stats"), node.pop("track_every")) == ("native", False, 100)
    assert node.pop("options") == {}  # a user's norm's own options: none for a catalog norm
    assert all(value is None for value in node.values()), node


@pytest.mark.filterwarnings("ignore:Batch Renorm was not told the run's length")
@pytest.mark.parametrize("name", norms.names())
def test_config_composes_and_builds(name):
    """Reference: the norm's own build function called with no options (its keyword defaults), for the same
    seed: the module built from the composed config (typed schema, config.py, then the runner's option filter
    and norms.factory) must be of the same class, carry the same parameters and buffers, give the same output
    on the same batch in training mode, and be tagged (name, layout) for probe.py."""
    store_configs()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=[f"norm={name}"]))
    spec = norms.get(name)
    layout = spec.layouts[-1]
    torch.manual_seed(0)
    built = norms.factory(name, **norm_options(cfg.norm))(16, layout)
    torch.manual_seed(0)
    reference = spec.build(16, layout)
    assert type(built) is type(reference)
    assert getattr(built, TAG) == (name, layout)
    want = reference.state_dict()
    got = built.state_dict()
    assert list(got) == list(want)
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, msg=key)
    x = torch.randn(*{"flat": (8, 16), "image": (8, 16, 3, 3), "seq": (8, 5, 16)}[layout],
                    generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(built.train()(x), reference.train()(x), rtol=0, atol=0)


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
