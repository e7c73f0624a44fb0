"""The real client: a `tensorboard` server on loopback reads a finished run's scalars and HParams back
through its HTTP data API (the same endpoints its web page uses)."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace

import pytest

from normbench.runner import run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, body: dict | None = None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def tensorboard_server(tmp_path):
    def start(logdir, n_runs):
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                                 "--host", "127.0.0.1", "--port", str(port), "--reload_interval", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):  # the server takes a few seconds to start and load the runs
            try:
                runs = _get(f"{base}/data/runs")
                if len(runs) >= n_runs:
                    return base
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError("tensorboard did not start")

    procs = []
    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def test_tensorboard_serves_scalars_and_hparams(tiny_cfg, tmp_path, tensorboard_server):
    """Reference: two runs (bn, ln) appear as runs with loss/acc scalars and one HParams table."""
    for norm in ("bn", "ln"):
        cfg = replace(tiny_cfg, norm=replace(tiny_cfg.norm, name=norm), tensorboard=True, max_steps=10)
        run(cfg, tmp_path / "sweep" / norm)
    base = tensorboard_server(tmp_path / "sweep", n_runs=2)

    tags = _get(f"{base}/data/plugin/scalars/tags")
    assert set(tags) >= {"bn", "ln"}
    for run_name in ("bn", "ln"):
        assert {"loss/train", "acc/train", "acc/val", "lr", "throughput/samples_per_s",
                "final/test_acc"} <= set(tags[run_name])

    experiment = _get(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
    hp_names = {h["name"] for h in experiment["hparamInfos"]}
    assert {"norm.name", "model.name", "batch_size", "lr"} <= hp_names
    norm_info = next(h for h in experiment["hparamInfos"] if h["name"] == "norm.name")
    assert {"bn", "ln"} <= set(norm_info["domainDiscrete"])  # a discrete domain: filterable in the tab
    metrics = {m["name"]["tag"] for m in experiment["metricInfos"]}
    assert "final/test_acc" in metrics

    sessions = _get(f"{base}/data/plugin/hparams/session_groups",
                    {"experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
                     "colParams": [], "startIndex": 0, "sliceSize": 10})
    assert sessions["totalSize"] == 2


@pytest.fixture(scope="module")
def summarized_sweep(tmp_path_factory):
    """A real sweep through the CLI (2 norms x 2 batch sizes x 2 seeds, a few steps each), summarized."""
    from conftest import normbench_cli, write_tiny_fashion_mnist

    tmp = tmp_path_factory.mktemp("tb_sweep")
    root = write_tiny_fashion_mnist(tmp / "data")
    sweep = tmp / "sweep"
    r = normbench_cli("train", "-m", "hydra/launcher=local", "norm=bn,ln", "batch_size=8,16", "seed=0,1",
                      "model.hidden=16", "max_steps=6", "log_every=2", f"data.root={root}", "data.val_size=100",
                      "data.download=false", "threads=1", "progress=false", "device=cpu",
                      f"hydra.sweep.dir={sweep}", cwd=tmp)
    assert r.returncode == 0, r.stderr
    r = normbench_cli("summarize", str(sweep), cwd=tmp)
    assert r.returncode == 0, r.stderr
    return sweep


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_sweep_runs_are_named_by_what_varies(summarized_sweep, tensorboard_server):
    """Reference: the sweep's command line: norm, batch size and seed vary, max_steps and the data
    options do not; run names lead with the norm and end with the job number; summarize's own runs
    sit under summary/, and no run is called `tensorboard`."""
    base = tensorboard_server(summarized_sweep, n_runs=8 + 3)
    runs = set(_get(f"{base}/data/runs"))
    training = {r for r in runs if not r.startswith("summary")}
    expected = {f"{norm},bs={bs},seed={seed}" for norm in ("bn", "ln") for bs in (8, 16) for seed in (0, 1)}
    assert {r.rpartition(",")[0] for r in training} == expected
    assert sorted(int(r.rpartition(",job")[2]) for r in training) == list(range(8))
    assert {"summary", "summary/bn", "summary/ln"} <= runs and "tensorboard" not in runs
    tags = _get(f"{base}/data/plugin/scalars/tags")
    assert all("epoch" not in tags[r] and "step" not in tags[r] for r in training)  # no bookkeeping cards


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_hparams_show_identity_and_swept_keys_only(summarized_sweep, tensorboard_server):
    """Reference: the sweep's varying keys (norm, batch_size, seed) plus model and data; integers shown as
    integers (strings: the table prints numbers with five digits); the final accuracies as metrics."""
    base = tensorboard_server(summarized_sweep, n_runs=8 + 3)
    experiment = _get(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
    infos = {h["name"]: h for h in experiment["hparamInfos"]}
    assert set(infos) == {"model.name", "norm.name", "data.name", "batch_size", "seed"}
    assert infos["batch_size"]["domainDiscrete"] == ["8", "16"]
    assert {m["name"]["tag"] for m in experiment["metricInfos"]} == {"final/test_acc", "final/val_acc",
                                                                     "final/test_acc_precise_bn"}  # bn runs have it
    sessions = _get(f"{base}/data/plugin/hparams/session_groups",
                    {"experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
                     "colParams": [], "startIndex": 0, "sliceSize": 20})
    assert sessions["totalSize"] == 8
    values = {g["hparams"]["batch_size"] for g in sessions["sessionGroups"]}
    assert values == {"8", "16"}


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_custom_scalars_layout_has_one_band_per_norm(summarized_sweep, tensorboard_server):
    """Reference: TensorBoard's custom-scalars layout route: one category per batch size, one margin chart
    per curve whose mean/lower/upper tags the aggregate runs summary/bn and summary/ln both hold; the
    mean at each step equals the mean of the two seeds' values read back from their own runs."""
    base = tensorboard_server(summarized_sweep, n_runs=8 + 3)
    layout = _get(f"{base}/data/plugin/custom_scalars/layout")
    categories = {c["title"]: c for c in layout["category"]}
    assert set(categories) == {"mean and 95% CI over seeds · bs=8", "mean and 95% CI over seeds · bs=16"}
    charts = {ch["title"]: ch for ch in categories["mean and 95% CI over seeds · bs=8"]["chart"]}
    assert {"acc/train · bs=8", "loss/train · bs=8", "acc/val · bs=8"} <= set(charts)
    series = charts["loss/train · bs=8"]["margin"]["series"][0]
    tags = _get(f"{base}/data/plugin/scalars/tags")
    for run_name in ("summary/bn", "summary/ln"):
        assert {series["value"], series["lower"], series["upper"]} <= set(tags[run_name])
    mean = _get(f"{base}/data/plugin/scalars/scalars?run=summary/bn&tag={series['value']}")
    seeds = [r for r in tags if r.startswith("bn,bs=8,")]
    per_seed = [{e[1]: e[2] for e in _get(f"{base}/data/plugin/scalars/scalars?run={r}&tag=loss/train")}
                for r in seeds]
    assert len(seeds) == 2 and mean
    for _, step, value in mean:
        assert value == pytest.approx(sum(s[step] for s in per_seed) / 2, rel=1e-5)
    images = _get(f"{base}/data/plugin/images/tags")
    assert any(t.startswith("summary/paired_") for t in images["summary"])
