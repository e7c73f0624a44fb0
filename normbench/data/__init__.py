"""Datasets as tensors: one registry from a name to a loader, and the batches the engine iterates.

    splits = data.load(DataConfig(name="fashion_mnist"), device=torch.device("cpu"))
    for x, y, lengths in data.batches(splits.train_x, splits.train_y, 64, shuffle=True, generator=g):
        ...

Each dataset is read once into normalized float tensors on the training device and indexed per
batch: torchvision's per-sample PIL path runs at ~17k samples/s on 2 cores, slower than training.
"""

from normbench.data.augment import random_crop_flip
from normbench.data.members import MemberSplits
from normbench.data.splits import Splits, batches, load, load_each, names, register

# Importing a dataset module registers it.
from normbench.data import cifar10, fashion_mnist  # noqa: E402,F401  isort: skip

__all__ = ["MemberSplits", "Splits", "batches", "load", "load_each", "names", "random_crop_flip", "register"]
