"""FashionMNIST from its 4 IDX files, found in this order (docs/design.md):

1. `data.root`/FashionMNIST/raw/ (torchvision's layout; `.gz` or extracted),
2. the Debian package `dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist/*.gz),
3. torchvision's download into `data.root` (when `data.download=true` and the network allows).

Every file is checked before use: the IDX header (magic number, dimensions), the byte count the
header implies, and for the full-size files the known MD5 of their extracted contents.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path

import numpy as np
import torch

from normbench.config import DataConfig
from normbench.data.splits import register
from normbench.errors import UserError

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {  # name -> (IDX magic, item shape, count, MD5 of the extracted bytes)
    "train-images-idx3-ubyte": (2051, (28, 28), 60000, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
    "train-labels-idx1-ubyte": (2049, (), 60000, "9018921c3c673c538a1fc5bad174d6f9"),
    "t10k-images-idx3-ubyte": (2051, (28, 28), 10000, "8181f5470baa50b63fa0f6fddb340f0a"),
    "t10k-labels-idx1-ubyte": (2049, (), 10000, "15d484375f8d13e6eb1aabb0c3f46965"),
}


def _find(directory: Path, name: str) -> Path | None:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _locate(cfg: DataConfig) -> dict[str, Path]:
    """The directory holding all 4 files, in the search order; download as a last resort."""
    raw = Path(cfg.root) / "FashionMNIST" / "raw"
    for directory in (raw, DEBIAN_DIR):
        found = {name: _find(directory, name) for name in FILES}
        if all(found.values()):
            return found
    if cfg.download:
        try:
            from torchvision.datasets import FashionMNIST

            for train in (True, False):
                FashionMNIST(cfg.root, train=train, download=True)
            found = {name: _find(raw, name) for name in FILES}
            if all(found.values()):
                return found
        except Exception:  # no network, a proxy, a full disk: the remedies below cover them all
            pass
    raise UserError(
        f"FashionMNIST not found in {raw} nor in {DEBIAN_DIR}"
        + (", and the download failed" if cfg.download else " (data.download=false)"),
        "install it offline with `apt-get update && apt-get install dataset-fashion-mnist`, or place the 4 IDX files in "
        f"{raw}, or allow torchvision to download them (data.download=true, with network)",
    )


def read_idx(path: Path, magic: int, item_shape: tuple[int, ...], md5: str | None = None,
             count: int | None = None) -> torch.Tensor:
    """Parse one IDX file (gzipped or not) into a uint8 tensor, checking header, size and checksum."""
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:  # zlib.error: a damaged deflate stream
        raise UserError(f"cannot read {path}: {e}", "the file is corrupt or truncated; replace it") from None
    bad = f"{path} is not a valid IDX file"
    if len(raw) < 4 or int.from_bytes(raw[:4], "big") != magic:
        raise UserError(f"{bad} (wrong magic number)", "the file is corrupt; replace it")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    if tuple(dims[1:]) != item_shape:
        raise UserError(f"{bad} (items of shape {tuple(dims[1:])}, expected {item_shape})",
                        "the file is corrupt or not FashionMNIST; replace it")
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise UserError(f"{path} is truncated or padded ({len(raw)} bytes, its header says {expected})",
                        "the file is corrupt; download or copy it again")
    if md5 and dims[0] == count and hashlib.md5(raw).hexdigest() != md5:
        raise UserError(f"{path} fails its checksum (MD5 of the contents is not {md5})",
                        "the file is corrupt; download or copy it again")
    return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8, offset=header).copy()).reshape(dims)


@register("fashion_mnist")
def load_fashion_mnist(cfg: DataConfig):
    """uint8 images (N, 1, 28, 28) and labels for the 60k training and 10k test sets."""
    paths = _locate(cfg)
    t = {name: read_idx(paths[name], magic, shape, md5, count)
         for name, (magic, shape, count, md5) in FILES.items()}
    train_x, test_x = t["train-images-idx3-ubyte"], t["t10k-images-idx3-ubyte"]
    train_y, test_y = t["train-labels-idx1-ubyte"], t["t10k-labels-idx1-ubyte"]
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise UserError("FashionMNIST images and labels disagree in count", "replace the IDX files")
    return train_x.unsqueeze(1), train_y, test_x.unsqueeze(1), test_y
