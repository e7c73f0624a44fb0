"""The variable-length regime's data: image rows as time steps, each sample resized to its own length.

    lengths = random_lengths(64, 10, 28, generator)               # one length per sample
    x_pad = pad_to_lengths(x, lengths)                             # (N, C, max(lengths), W), right-padded
    for x, y, lengths in train_batches(cfg.varlen)(train_x, train_y, 64, shuffle=True, generator=g): ...

A sample of length L is the whole image squeezed or stretched along its height to L rows (content
preserved, as a shorter or longer sentence says the same thing); rows L.. of a padded batch are 0, and
the RNN reads `lengths` to mask them and to classify from row L-1.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch
import torch.nn.functional as F

from normbench.config import VarLenConfig
from normbench.data.splits import batches

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def resize_rows(x: torch.Tensor, length: int) -> torch.Tensor:
    """(N, C, H, W) -> (N, C, length, W): bilinear along the height only, the width untouched.

    Antialiasing makes a shrink average the rows it merges instead of skipping some (28 -> 10 rows would
    otherwise drop a third of the image)."""
    if length == x.shape[2]:
        return x
    return F.interpolate(x, size=(length, x.shape[3]), mode="bilinear", align_corners=False, antialias=True)


def pad_to_lengths(x: torch.Tensor, lengths: torch.Tensor, total: int | None = None) -> torch.Tensor:
    """Resize sample i of `x` to `lengths[i]` rows and right-pad all to `total` rows (default: the longest).

    One resize per distinct length (at most max_len - min_len + 1 per batch), never one per sample."""
    n, c, _, w = x.shape
    longest = int(lengths.max())
    total = longest if total is None else total
    if total < longest:
        raise ValueError(f"cannot pad to {total} rows a batch whose longest sample has {longest}")
    out = x.new_zeros(n, c, total, w)
    for length in lengths.unique().tolist():
        idx = (lengths == length).nonzero().squeeze(1)
        out[idx, :, :length] = resize_rows(x[idx], length)
    return out


def random_lengths(n: int, lo: int, hi: int, generator: torch.Generator | None = None,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """`n` lengths drawn uniformly from [lo, hi] (inclusive)."""
    if generator is not None:
        device = generator.device
    return torch.randint(lo, hi + 1, (n,), generator=generator, device=device)


def train_batches(cfg: VarLenConfig):
    """A drop-in for `data.batches` (the engine's `batch_fn`): the same shuffled batches, each sample
    resized to a fresh random length in [min_len, max_len], right-padded to `train_pad` x the batch's
    longest (1 by default: no more padding than the batch needs).

    Lengths come from the engine's shuffle generator, so a resumed run draws the same ones."""

    def batch_fn(x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, drop_last: bool = False) -> Iterator[Batch]:
        for xb, yb, _ in batches(x, y, batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last):
            lengths = random_lengths(len(xb), cfg.min_len, cfg.max_len, generator, xb.device)
            total = math.ceil(cfg.train_pad * int(lengths.max()))
            yield pad_to_lengths(xb, lengths, total), yb, lengths

    return batch_fn


def fixed_length(length: int):
    """A drop-in for `data.batches` whose batches have every sample resized to `length` rows (no padding):
    the test at one length, and PreciseBN's training batches stretched to it."""

    def batch_fn(x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, drop_last: bool = False) -> Iterator[Batch]:
        for xb, yb, _ in batches(x, y, batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last):
            yield resize_rows(xb, length), yb, torch.full((len(xb),), length, device=xb.device)

    return batch_fn


def length_batches(x: torch.Tensor, y: torch.Tensor, length: int, batch_size: int,
                   drop_last: bool = False) -> Iterator[Batch]:
    """Every sample resized to the same `length` (no padding), in order: the test at one length."""
    return fixed_length(length)(x, y, batch_size, drop_last=drop_last)


def padded_batches(x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor, batch_size: int,
                   pad_factor: float = 1.0, drop_last: bool = False) -> Iterator[Batch]:
    """Sample i resized to `lengths[i]`; each batch right-padded to `pad_factor` x its longest length
    (1 = the usual padding, 2 = the heavy-padding test)."""
    stop = len(x) - len(x) % batch_size if drop_last else len(x)
    for i in range(0, stop, batch_size):
        lb = lengths[i:i + batch_size]
        total = math.ceil(pad_factor * int(lb.max()))
        yield pad_to_lengths(x[i:i + batch_size], lb, total), y[i:i + batch_size], lb
