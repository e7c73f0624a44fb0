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
