"""Your own norm: `norm=custom norm.target=MODULE:NAME`, an installed package's entry point, and
`normbench norms check`, the contract the catalog's norms meet, run on any norm."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, normbench_cli
from normbench import norms
from normbench.norm_check import check
from normbench.norm_check import main as check_main

# Three layers that break the contract, each in one way, beside the example that keeps it.
BROKEN = textwrap.dedent('''
    import torch
    from torch import nn

    class Shrinks(nn.Module):  # changes the shape: drops the last channel
        def __init__(self, num_features):
            super().__init__()
        def forward(self, x, mask=None):
            return x[..., :-1] if x.dim() != 4 else x[:, :-1]

    class MixesSamples(nn.Module):  # BN's batch statistics, but declares itself batch-free (the default)
        def __init__(self, num_features, layout="flat"):
            super().__init__()
            self.dims = {"flat": (0,), "image": (0, 2, 3), "seq": (0, 1)}[layout]
        def forward(self, x, mask=None):
            return (x - x.mean(self.dims, keepdim=True)) / (x.var(self.dims, keepdim=True) + 1e-5).sqrt()

    class ForgetsItsState(nn.Module):  # a running scale kept as a plain attribute: not in its state_dict
        def __init__(self, num_features):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(num_features))
            self.scale = 1.0
        def forward(self, x, mask=None):
            if self.training:
                self.scale = 0.9 * self.scale + 0.1 * float(x.detach().abs().mean())
            w = self.weight if x.dim() != 4 else self.weight[:, None, None]
            return x / self.scale * w
''')


@pytest.fixture()
def user_modules(tmp_path, monkeypatch):
    """A folder holding the example norm (docs/examples/my_norm.py) and the broken ones, importable."""
    shutil.copy(REPO / "docs/examples/my_norm.py", tmp_path / "my_norm.py")
    (tmp_path / "broken_norms.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("name", norms.names())
def test_every_catalog_norm_meets_the_contract(name):
    """Reference: the contract's definition (normbench/norm_check.py), which the catalog's own tests
    check item by item (shapes, train/eval, batch dependence against the spec, state, packing against
    separate members in float64, gradcheck): `norms check` passes every shipped norm."""
    failed = [f"{i.name}: {i.why}" for i in check(name) if not i.ok]
    assert not failed, failed


def test_the_example_norm_passes_and_broken_ones_fail_one_line_each(user_modules, capsys):
    """Reference: each broken layer's defect, known by construction: the shape changer fails the shape
    items, the batch mixer declared batch-free fails batch dependence, the state kept outside state_dict
    fails the round trip; each failure is one line and the command exits 1."""
    assert check_main(["my_norm:ScaleNorm"]) == 0
    for target, item in (("broken_norms:Shrinks", "shape flat"), ("broken_norms:MixesSamples", "batch dependence"),
                         ("broken_norms:ForgetsItsState", "state round trip and resume")):
        capsys.readouterr()
        assert check_main([target]) == 1, target
        lines = capsys.readouterr().out.splitlines()
        failing = [ln for ln in lines if ln.startswith("FAIL")]
        assert any(ln.startswith(f"FAIL  {item}:") for ln in failing), (target, lines)
        # one line an item: no traceback (its "Traceback" line and indented frames)
        assert not any("Traceback" in ln or ln.startswith(" ") for ln in lines), (target, lines)
    out = {i.name: i.ok for i in check("broken_norms:MixesSamples")}
    assert out["shape flat"] and not out["batch dependence"]


def test_a_norm_from_a_module_trains_by_norm_custom(user_modules, tiny_root):
    """Reference: the run's own results.json: `norm=custom norm.target=my_norm:ScaleNorm` with an option
    through norm.options trains to completion, and its config records the target and the option."""
    r = normbench_cli("train", "norm=custom", "norm.target=my_norm:ScaleNorm", "+norm.options.eps=1e-6",
                      f"data.root={tiny_root}", "data.val_size=100", "max_steps=5", "progress=false", "tensorboard=false", "threads=1",
                      "hydra.run.dir=run", cwd=user_modules)
    assert r.returncode == 0, r.stderr
    results = json.loads((user_modules / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["batch_dependent"] is False
    assert results["config"]["norm"]["target"] == "my_norm:ScaleNorm"
    assert results["config"]["norm"]["options"] == {"eps": 1e-6}
    bad = normbench_cli("train", "norm=custom", "norm.target=my_norm:Missing", f"data.root={tiny_root}",
                        "max_steps=1", "hydra.run.dir=bad", cwd=user_modules)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "has no 'Missing'" in bad.stderr, bad.stderr


def test_a_norm_from_an_installed_entry_point_is_a_norm_by_name(user_modules, tiny_root, tmp_path):
    """Reference: importlib.metadata's entry points (what `pip install` writes into a package's
    dist-info): a package declaring `scale = "my_norm:ScaleNorm"` in the group normbench.norms makes
    `scale` a norm: listed by `normbench norms`, trained by `norm=scale`, in a sweep beside a shipped norm."""
    site = tmp_path / "site"
    (site / "my_norm_pkg-0.1.dist-info").mkdir(parents=True)
    shutil.copy(user_modules / "my_norm.py", site / "my_norm.py")
    (site / "my_norm_pkg-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: my-norm-pkg\n"
                                                                 "Version: 0.1\n")
    (site / "my_norm_pkg-0.1.dist-info" / "entry_points.txt").write_text("[normbench.norms]\nscale = my_norm:ScaleNorm\n")
    env = {"PYTHONPATH": f"{REPO}:{site}"}
    listed = normbench_cli("norms", cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "scale" in listed.stdout and "Nguyen" in listed.stdout, listed.stderr
    r = normbench_cli("train", "-m", "norm=scale,ln", f"data.root={tiny_root}", "data.val_size=100", "max_steps=3", "progress=false",
                      "tensorboard=false", "threads=1", "hydra.sweep.dir=sweep", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    done = {json.loads(p.read_text())["config"]["norm"]["name"]: json.loads(p.read_text())["status"]
            for p in Path(tmp_path / "sweep").glob("*/results.json")}
    assert done == {"scale": "completed", "ln": "completed"}


def test_a_module_that_fails_as_it_loads_is_one_line_and_a_broken_plugin_leaves_the_others(tmp_path, monkeypatch, caplog):
    """Reference: docs/your-question.md: a norm that cannot be loaded is one line (norm.target), and an
    installed package's broken norm is skipped with a warning while every other norm and command works."""
    from normbench.errors import UserError
    from normbench.norms import user

    (tmp_path / "explodes.py").write_text("raise RuntimeError('top-level bug')\n")
    (tmp_path / "strs.py").write_text("import torch.nn as nn\nclass OneLayout(nn.LayerNorm):\n    layouts = 'seq'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match="importing 'explodes' for norm.target=explodes:X failed: RuntimeError: top-level bug"):
        user.load("explodes:X")
    with pytest.raises(UserError, match="declares layouts = 'seq'"):
        user.spec_of("strs:OneLayout", "strs:OneLayout", user.load("strs:OneLayout"))

    class EntryPoint:  # what importlib.metadata gives: a name and its target
        name, value = "exploding", "explodes:X"

    monkeypatch.setattr(user, "entry_points", lambda group: [EntryPoint()])
    with caplog.at_level("WARNING"):
        user.load_entry_points()
    assert "the norm 'exploding' (explodes:X) could not be loaded" in caplog.text
    assert "exploding" not in norms.names() and "ln" in norms.names()
