"""A plain `pip install normbench` (without the `slurm` extra): no warning on any command, and the SLURM
preset, selected anyway, says in one line what to install (hydra_plugins/normbench_slurm).

Hydra imports every module under the hydra_plugins namespace at startup, whichever launcher is selected,
so the test needs an environment where hydra-submitit-launcher is really absent, not merely unimportable:
Hydra's scan lists the namespace's folders itself. `site_without_extra` builds one from this environment's
site-packages, with links, minus hydra-submitit-launcher and submitit; the commands run with `python -S`
and only that on their path.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

import normbench

# What the `slurm` extra installs (hydra-submitit-launcher, and submitit, its dependency)
EXTRA = ("hydra_submitit_launcher", "submitit")
ONE_LINE = ("normbench: error: the slurm launcher (hydra/launcher=slurm) needs hydra-submitit-launcher; "
            "pip install 'normbench[slurm]'")


def site_without_extra(dest: Path) -> Path:
    """A folder of links to everything importable here (normbench, where it is imported from, first), less
    the `slurm` extra; the hydra_plugins namespace merged from every place that holds part of it."""
    roots = [Path(normbench.__file__).resolve().parents[1], *map(Path, site.getsitepackages())]
    (dest / "hydra_plugins").mkdir(parents=True)
    for root in filter(Path.is_dir, dict.fromkeys(roots)):  # in order, each once
        for entry in sorted(root.iterdir()):
            if entry.name.startswith(EXTRA) or entry.name.endswith(".pth"):
                continue
            if entry.name == "hydra_plugins":
                for plugin in entry.iterdir():
                    link = dest / "hydra_plugins" / plugin.name
                    if not plugin.name.startswith(EXTRA) and not link.exists():
                        link.symlink_to(plugin)
            elif not (dest / entry.name).exists():
                (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """Run `python -S ARGS` in the environment without the extra: (args, cwd) -> CompletedProcess."""
    path = site_without_extra(tmp_path_factory.mktemp("site"))
    env = {**os.environ, "PYTHONPATH": str(path)}
    env.pop("NORMBENCH_DEBUG", None)

    def python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True,
                              check=False, timeout=300)

    return python


def test_the_environment_lacks_only_the_extra(bare, tmp_path):
    """The check of the check: without the extra, hydra-submitit-launcher cannot be found at all, and
    normbench's own plugins come from where the tests import normbench."""
    r = bare("-c", "import importlib.util as u, hydra_plugins.normbench_slurm as s, normbench; "
                   "print(u.find_spec('hydra_plugins.hydra_submitit_launcher'), u.find_spec('submitit'), "
                   "s.MISSING_EXTRA is not None, normbench.__file__)", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:3] == ["None", "None", "True"]
    assert Path(r.stdout.split()[3]).resolve() == Path(normbench.__file__).resolve()


def test_no_warning_without_the_slurm_extra(bare, tmp_path):
    """Reference: hydra-core's plugin scan warns "Error importing 'hydra_plugins.normbench_slurm'" for a
    plugin module that fails to import (it scans at every start). Here nothing is said on stderr."""
    r = bare("-m", "normbench", "train", "--help", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (0, "")
    assert "batch_size" in r.stdout


@pytest.mark.slow  # a training run in a subprocess: ~15 s on two cores
def test_a_first_run_without_the_slurm_extra_is_quiet(bare, tmp_path, tiny_root):
    """A first run, a few steps on a tiny FashionMNIST: nothing on stderr, and its results written."""
    run_dir = tmp_path / "run"
    r = bare("-m", "normbench", "train", f"data.root={tiny_root}", "data.val_size=100", "data.download=false",
             "max_steps=2", "batch_size=16", "progress=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (0, "")
    assert (run_dir / "results.json").exists()


@pytest.mark.parametrize("more", [[], ["hydra.launcher.constraint=gpu"]],
                         ids=["preset", "a key of hydra-submitit's schema"])
def test_the_slurm_preset_without_the_extra_says_what_to_install(bare, tmp_path, more):
    """A sweep on the SLURM preset stops before any run with one line and exit status 2; so does one setting
    a key that only hydra-submitit's schema has (a composition error, without the extra)."""
    r = bare("-m", "normbench", "train", "-m", "hydra/launcher=slurm", "norm=bn,ln", "max_steps=1",
             f"hydra.sweep.dir={tmp_path / 'sweep'}", *more, cwd=tmp_path)
    assert (r.returncode, r.stderr.splitlines()) == (2, [ONE_LINE]), r.stderr
    assert not list(tmp_path.rglob("results.json"))


def test_with_the_extra_the_launcher_is_hydra_submitits():
    """With the extra (the tests' own environment has it), nothing is missing: the launcher is submitit's.
    Checked in a fresh interpreter: Hydra's plugin scan in this test process may have imported the plugin
    modules again, and a class from a second import is not a subclass of the first's."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    check = ("from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher\n"
             "from hydra_plugins.normbench_slurm import MISSING_EXTRA, NormbenchSlurmLauncher\n"
             "assert MISSING_EXTRA is None and issubclass(NormbenchSlurmLauncher, SlurmLauncher)\n")
    r = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
