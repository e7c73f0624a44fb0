"""The dataset registry, the `Splits` every loader returns, and batching by index."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch

from normbench.config import DataConfig, data_root, split_seed
from normbench.errors import UserError


@dataclass
class Splits:
    """Normalized float images (N, C, H, W) and int64 labels, already on the training device."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    name: str

    @property
    def shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one sample."""
        return tuple(self.train_x.shape[1:])


# name -> loader(cfg) returning uint8 (train_x, train_y, test_x, test_y) on the CPU, images (N, C, H, W)
Loader = Callable[[DataConfig], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
_REGISTRY: dict[str, Loader] = {}


def register(name: str):
    def deco(fn: Loader) -> Loader:
        _REGISTRY[name] = fn
        return fn

    return deco


def names() -> list[str]:
    return list(_REGISTRY)


# the last data config's decoded files and its splits, one per split seed (a pack's members, a sweep's runs)
_CACHE: dict[tuple, Any] = {}


def _fingerprint(root: str) -> tuple:
    """The files under `root` (path, size, mtime): a dataset rewritten on disk is read again."""
    found = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            found.append((dirpath, f, st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))


def load(cfg: DataConfig, device: torch.device, seed: int = 0) -> Splits:
    """Read dataset `cfg.name`, split validation off the training set, normalize, move to `device`.

    `seed` is the run's seed. The validation split and `cfg.subset` are drawn from a generator seeded by
    `split_seed(cfg, seed)`: 0 for every run with `data.split=fixed`, the run's seed with `per_seed`;
    either way runs that differ only in norm, batch size or lr see the same split. Mean/std come from the
    training split alone. The last data config's decoded files and splits are kept, one split per split
    seed (`load_each` keeps only its configs' seeds): a pack's members (each seed its own with `per_seed`)
    and the runs of a sweep in one process (Hydra's basic launcher) decode the files once and normalize once
    per seed (with `fixed`, once). They
    are never written to (batches are copies), so sharing is safe.
    """
    seed = split_seed(cfg, seed)  # the cache keys on the seed the split is drawn from
    same_data = (repr(replace(cfg, root=data_root(cfg), download=False)), str(device), torch.get_default_dtype(),
                 _fingerprint(data_root(cfg)))
    if any(k[0] != same_data for k in _CACHE):
        _CACHE.clear()
    key = (same_data, seed)
    if key not in _CACHE:
        if (same_data, "files") not in _CACHE:
            _CACHE[(same_data, "files")] = _decode(cfg)
        _CACHE[key] = _split(cfg, device, seed, *_CACHE[(same_data, "files")])
    return _CACHE[key]


def load_each(cfgs, device: torch.device) -> list[Splits]:
    """Each config's splits (`load` with its data and seed), the cache keeping no other split: a pack holds
    its members' splits, a run of an in-process sweep its own, never those of the runs before it (the
    decoded files stay)."""
    keep = {split_seed(c.data, c.seed) for c in cfgs}
    for key in [k for k in _CACHE if k[1] != "files" and k[1] not in keep]:
        del _CACHE[key]
    return [load(c.data, device, seed=c.seed) for c in cfgs]


def _decode(cfg: DataConfig) -> tuple[torch.Tensor, ...]:
    """The dataset's files as uint8 (train_x, train_y, test_x, test_y) on the CPU."""
    if cfg.name not in _REGISTRY:
        raise UserError(f"unknown dataset {cfg.name!r}", f"choose one of: {', '.join(names())}")
    return _REGISTRY[cfg.name](replace(cfg, root=data_root(cfg)))  # the loaders see a real path, never null


def _split(cfg: DataConfig, device: torch.device, seed: int, train_x: torch.Tensor, train_y: torch.Tensor,
           test_x: torch.Tensor, test_y: torch.Tensor) -> Splits:
    n = len(train_x)
    if not 0 <= cfg.val_size < n:
        raise UserError(f"data.val_size={cfg.val_size} must be in [0, {n})", "lower data.val_size")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    val_idx, train_idx = perm[: cfg.val_size], perm[cfg.val_size:]
    if cfg.subset is not None:
        if cfg.subset < 1:
            raise UserError(f"data.subset={cfg.subset} must be >= 1", "set data.subset=null to use all")
        train_idx = train_idx[: cfg.subset]

    train = train_x[train_idx].to(torch.get_default_dtype()).div_(255)
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True)

    def prep(x: torch.Tensor) -> torch.Tensor:
        return ((x.to(torch.get_default_dtype()).div_(255) - mean) / std).to(device)

    return Splits(
        train_x=((train - mean) / std).to(device), train_y=train_y[train_idx].long().to(device),
        val_x=prep(train_x[val_idx]), val_y=train_y[val_idx].long().to(device),
        test_x=prep(test_x), test_y=test_y.long().to(device),
        num_classes=int(train_y.max()) + 1, name=cfg.name,
    )


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = False,
            generator: torch.Generator | None = None, drop_last: bool = False
            ) -> Iterator[tuple[torch.Tensor, torch.Tensor, None]]:
    """Yield (x, y, lengths=None) batches by indexing device tensors; no DataLoader, no workers.

    Training drops the last partial batch so BatchNorm never sees a batch of one sample.
    """
    n = len(x)
    stop = n - n % batch_size if drop_last else n
    if not shuffle:
        for i in range(0, stop, batch_size):
            yield x[i:i + batch_size], y[i:i + batch_size], None
        return
    # The permutation moves to the data's device once per epoch, not once per batch, and slices are cut
    # one at a time, not an epoch's views at once: both measured in docs/performance.md ("Batches").
    order = torch.randperm(n, generator=generator, device=generator.device if generator else "cpu").to(x.device)
    for i in range(0, stop, batch_size):
        idx = order[i:i + batch_size]
        yield x.index_select(0, idx), y.index_select(0, idx), None
