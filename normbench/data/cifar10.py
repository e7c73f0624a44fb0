"""CIFAR-10 through torchvision's own loader, read once into uint8 tensors (N, 3, 32, 32).

    splits = data.load(DataConfig(name="cifar10", root="./data"), device)

The files are the official "python version" batches: `data.root`/cifar-10-batches-py/ holding
data_batch_1..5, test_batch and batches.meta. They are found there, else extracted from
`data.root`/cifar-10-python.tar.gz, else downloaded by torchvision (data.download=true, with network).
torchvision checks every file's MD5 before reading it, so a damaged or foreign file is refused.
"""

from __future__ import annotations

from pathlib import Path

import torch

from normbench.config import DataConfig
from normbench.data.splits import register
from normbench.errors import UserError

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]


def _missing(folder: Path) -> list[str]:
    return [name for name in FILES if not (folder / name).is_file()]


def _fetch(cfg: DataConfig) -> str | None:
    """Put the batches under `cfg.root` from a local archive or a download; return why that failed, or None."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity, extract_archive

    archive = Path(cfg.root).absolute() / ARCHIVE
    if archive.is_file():
        if check_integrity(str(archive), CIFAR10.tgz_md5):
            extract_archive(str(archive), cfg.root)  # offline: the user copied the official archive
            return None
        if not cfg.download:
            return f"{archive} fails its MD5 check, and data.download=false"
    if not cfg.download:
        return "data.download=false"
    try:
        CIFAR10(cfg.root, train=True, download=True)
        return None
    except Exception as e:  # no network, a proxy, a full disk: the remedies below cover them all
        return f"the download failed: {type(e).__name__}: {e}"


def _corrupt(folder: Path) -> list[str]:
    """The files whose MD5 is not the official one (only computed once torchvision has refused them)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    listed = CIFAR10.train_list + CIFAR10.test_list + [[CIFAR10.meta["filename"], CIFAR10.meta["md5"]]]
    return [name for name, md5 in listed if not check_integrity(str(folder / name), md5)]


def _read(root: str, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's reader, then its (N, 32, 32, 3) HWC array back to the (N, 3, 32, 32) of the files."""
    from torchvision.datasets import CIFAR10

    ds = CIFAR10(root, train=train, download=False)
    x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
    return x, torch.tensor(ds.targets, dtype=torch.uint8)


@register("cifar10")
def load_cifar10(cfg: DataConfig):
    """uint8 images (N, 3, 32, 32) and labels: 50k training (data_batch_1..5 in order), 10k test."""
    root = Path(cfg.root).absolute()
    folder = root / FOLDER
    why = _fetch(cfg) if _missing(folder) else None
    missing = _missing(folder)
    if missing:
        lacks = "" if len(missing) == len(FILES) else f", which lacks {', '.join(missing)}"
        raise UserError(
            f"CIFAR-10 not found in {folder}{lacks} ({why})",
            f"download {URL} (the python version, 163 MB) into {root}, where the next run extracts it, or "
            f"extract it yourself so that {folder}/data_batch_1 exists"
            + ("" if cfg.download else "; or set data.download=true on a machine with network")
            + "; data.root (or $NORMBENCH_DATA) moves the folder",
        )
    try:
        train_x, train_y = _read(cfg.root, train=True)
        test_x, test_y = _read(cfg.root, train=False)
    except RuntimeError as e:  # torchvision's "not found or corrupted": its MD5 check failed
        bad = _corrupt(folder)
        raise UserError(f"CIFAR-10 files in {folder} fail their MD5 check: {', '.join(bad) or e}",
                        f"they are damaged or not the official batches; delete them and download {URL} "
                        "again") from None
    return train_x, train_y, test_x, test_y
