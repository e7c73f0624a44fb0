"""Shared fixtures: a tiny FashionMNIST written in the real IDX format, and a small test config."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import normbench
from normbench.config import Config, DataConfig, ModelConfig, NormConfig

REPO = Path(__file__).resolve().parents[1]
# Where the normbench these tests import lives (site-packages in CI, the checkout in development): the
# commands the tests start import the same one.
CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(normbench.__file__).resolve().parents[1])}
# Under pytest-xdist (`pytest -n auto`: a worker per core), each worker and the commands it starts use one torch
# thread: two 2-thread processes on 2 cores run many times slower than two 1-thread ones.
XDIST = "PYTEST_XDIST_WORKER" in os.environ
if XDIST:
    CHILD_ENV["OMP_NUM_THREADS"] = "1"
REAL_FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
requires_real_data = pytest.mark.skipif(not REAL_FMNIST, reason="apt-get install dataset-fashion-mnist")


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> None:
    """Write `array` (uint8) as an IDX file: magic 0x0000 08 <ndim>, big-endian dims, raw bytes."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    blob = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    (gzip.open(path, "wb") if gz else open(path, "wb")).write(blob)


def tiny_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Learnable fake images: class k lights up horizontal band k, plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 60, (n, 28, 28))
    for i, k in enumerate(labels):
        images[i, 2 * k + 4: 2 * k + 7] += 180
    return images.astype(np.uint8), labels.astype(np.uint8)


def write_tiny_fashion_mnist(root: Path, n_train: int = 600, n_test: int = 200, gz: bool = False) -> Path:
    raw = root / "FashionMNIST" / "raw"
    for prefix, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        x, y = tiny_images(n, seed)
        sfx = ".gz" if gz else ""
        write_idx(raw / f"{prefix}-images-idx3-ubyte{sfx}", x, gz)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte{sfx}", y, gz)
    return root


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory) -> Path:
    """A data.root holding a 600/200-sample FashionMNIST in torchvision's raw layout."""
    return write_tiny_fashion_mnist(tmp_path_factory.mktemp("data"))


@pytest.fixture
def tiny_cfg(tiny_root) -> Config:
    """A config that trains for a few steps on the tiny dataset, quietly, on the CPU."""
    return Config(model=ModelConfig(name="mlp", hidden=32), norm=NormConfig(name="bn"),
                  data=DataConfig(root=str(tiny_root), val_size=100, download=False),
                  batch_size=16, epochs=1, max_steps=10, log_every=5, progress=False, tensorboard=False,
                  device="cpu")


def normbench_cli(*args: str, cwd: Path, env: dict | None = None, timeout: int = 300):
    """Run `python -m normbench ...` in a subprocess, as a user would run the command."""
    full_env = {**CHILD_ENV, **(env or {})}
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(autouse=True)
def _few_threads():
    torch.set_num_threads(1 if XDIST else 2)
