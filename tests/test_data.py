"""FashionMNIST loading: the IDX format, the search order of docs/design.md, and clear errors."""


import numpy as np
import pytest
import torch

from conftest import requires_real_data, tiny_images, write_idx, write_tiny_fashion_mnist
from normbench import data
from normbench.config import DataConfig
from normbench.data import fashion_mnist
from normbench.errors import UserError


def test_idx_roundtrip_plain_and_gz(tmp_path):
    """Reference: the IDX layout (magic, big-endian dims, bytes), as torchvision reads it."""
    x, _ = tiny_images(7, 0)
    for gz in (False, True):
        p = tmp_path / ("a.gz" if gz else "a")
        write_idx(p, x, gz)
        got = fashion_mnist.read_idx(p, 2051, (28, 28))
        assert torch.equal(got, torch.from_numpy(x))


def test_load_splits_and_normalizes(tiny_root):
    s = data.load(DataConfig(root=str(tiny_root), val_size=100, download=False), torch.device("cpu"))
    assert s.train_x.shape == (500, 1, 28, 28) and s.val_x.shape == (100, 1, 28, 28)
    assert s.test_x.shape == (200, 1, 28, 28) and s.num_classes == 10
    assert abs(s.train_x.mean().item()) < 1e-4 and abs(s.train_x.std().item() - 1) < 1e-3


def test_gzipped_files_in_root(tmp_path):
    root = write_tiny_fashion_mnist(tmp_path, gz=True)
    s = data.load(DataConfig(root=str(root), val_size=10, download=False), torch.device("cpu"))
    assert len(s.train_x) == 590


def test_missing_everywhere_names_the_remedies(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "nowhere")
    with pytest.raises(UserError) as e:
        data.load(DataConfig(root=str(tmp_path), download=False), torch.device("cpu"))
    msg = str(e.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "FashionMNIST/raw" in msg and "download" in msg


@pytest.mark.parametrize("damage", ["truncate", "magic", "shape"])
def test_corrupt_files_are_refused(tmp_path, damage):
    x, _ = tiny_images(5, 0)
    p = tmp_path / "f"
    write_idx(p, x)
    blob = bytearray(p.read_bytes())
    if damage == "truncate":
        blob = blob[:-10]
    elif damage == "magic":
        blob[3] = 1
    else:
        blob[8:12] = (27).to_bytes(4, "big")
    p.write_bytes(bytes(blob))
    with pytest.raises(UserError, match="corrupt|truncated|not a valid"):
        fashion_mnist.read_idx(p, 2051, (28, 28))


def test_checksum_of_full_size_file(tmp_path):
    """A file with the full 10000 labels but wrong contents fails the known MD5 of the real one."""
    p = tmp_path / "t10k-labels-idx1-ubyte"
    write_idx(p, np.zeros(10000, np.uint8))
    magic, shape, count, md5 = fashion_mnist.FILES["t10k-labels-idx1-ubyte"]
    with pytest.raises(UserError, match="checksum"):
        fashion_mnist.read_idx(p, magic, shape, md5, count)


@requires_real_data
def test_real_fashion_mnist_from_debian(tmp_path):
    """Reference: the real dataset's sizes and label balance (6000 per class in training)."""
    s = data.load(DataConfig(root=str(tmp_path), val_size=0, download=False), torch.device("cpu"))
    assert s.train_x.shape == (60000, 1, 28, 28) and s.test_x.shape == (10000, 1, 28, 28)
    assert torch.bincount(s.train_y).tolist() == [6000] * 10
