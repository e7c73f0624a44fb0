"""The variable-length regime's data: image rows as time steps, each sample resized to its own length.

    lengths = random_lengths(64, 10, 28, generator)               # one length per sample
    lengths = bucket_lengths(64, 10, 28, 2, generator)             # or one bucket: 32 at L, 32 at L + 1
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


def pad_to_lengths(x: torch.Tensor, lengths: torch.Tensor, total: int | None = None,
                   value: float = 0.0) -> torch.Tensor:
    """Resize sample i of `x` to `lengths[i]` rows and right-pad all to `total` rows (default: the longest)
    with `value`.

    One resize per distinct length (at most max_len - min_len + 1 per batch), never one per sample."""
    n, c, _, w = x.shape
    longest = int(lengths.max())
    total = longest if total is None else total
    if total < longest:
        raise ValueError(f"cannot pad to {total} rows a batch whose longest sample has {longest}")
    out = x.new_full((n, c, total, w), value)
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


def bucket_width(cfg: VarLenConfig, batch_size: int) -> int:
    """How many consecutive lengths a bucketed batch spans: each gets an equal share of the batch, so the
    longest (the fewest samples reach it) still has >= min_step_samples."""
    return max(1, min(batch_size // cfg.min_step_samples, cfg.max_len - cfg.min_len + 1))


def bucket_lengths(n: int, lo: int, hi: int, width: int, generator: torch.Generator | None = None,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """`n` lengths from one bucket of `width` consecutive lengths, its first drawn uniformly from
    [lo, hi - width + 1]: the batch in `width` equal blocks (the first n % width blocks one larger), block j
    at first + j. The samples are shuffled already, so which sample gets which length is random."""
    if generator is not None:
        device = generator.device
    first = torch.randint(lo, hi - width + 2, (1,), generator=generator, device=device)
    return first + torch.arange(n, device=device) * width // n


def background(x: torch.Tensor) -> float:
    """The normalized value of the image background: the smallest value (a 0 pixel, which every
    FashionMNIST image has)."""
    return float(x.amin())


def train_batches(cfg: VarLenConfig):
    """A drop-in for `data.batches` (the engine's `batch_fn`): the same shuffled batches, each sample
    resized to its length and right-padded to a factor x the batch's longest. Lengths (`varlen.batching`):
    `mixed`, each sample a fresh random length in [min_len, max_len]; `bucketed`, one bucket of
    `bucket_width` consecutive lengths per batch, each in an equal share. The factor is `train_pad` (1 by
    default: no more padding than the batch needs), or drawn per batch from [train_pad, train_pad_max] so
    that the padding share varies; padded rows hold 0 or the background (`pad_value`).

    Lengths and factors come from the engine's shuffle generator, so a resumed run draws the same ones."""

    def batch_fn(x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, drop_last: bool = False) -> Iterator[Batch]:
        value = background(x) if cfg.pad_value == "background" else 0.0
        for xb, yb, _ in batches(x, y, batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last):
            if cfg.batching == "bucketed":
                lengths = bucket_lengths(len(xb), cfg.min_len, cfg.max_len, bucket_width(cfg, batch_size),
                                         generator, xb.device)
            else:
                lengths = random_lengths(len(xb), cfg.min_len, cfg.max_len, generator, xb.device)
            factor = cfg.train_pad
            if cfg.train_pad_max is not None:
                u = torch.rand((), generator=generator, device=xb.device)
                factor = cfg.train_pad + float(u) * (cfg.train_pad_max - cfg.train_pad)
            total = math.ceil(factor * int(lengths.max()))
            yield pad_to_lengths(xb, lengths, total, value), yb, lengths

    return batch_fn


def background_rows(length: int, value: float):
    """A drop-in for `data.batches` whose samples are `length` rows long by a second manipulation: the
    image unchanged in its rows and background rows after it (`value`), where `fixed_length` stretches the
    image over all of them; shorter than the image, it is squeezed as there. Past the trained length
    this asks the model to carry what it read through steps that add nothing, with row t the same as in
    training."""

    def batch_fn(x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, drop_last: bool = False) -> Iterator[Batch]:
        for xb, yb, _ in batches(x, y, batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last):
            n, c, h, w = xb.shape
            out = resize_rows(xb, length) if length <= h else torch.cat([xb, xb.new_full((n, c, length - h, w), value)], 2)
            yield out, yb, torch.full((n,), length, device=xb.device)

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
                   pad_factor: float = 1.0, drop_last: bool = False, value: float = 0.0) -> Iterator[Batch]:
    """Sample i resized to `lengths[i]`; each batch right-padded with `value` to `pad_factor` x its longest
    length (1 = the usual padding, 2 = the heavy-padding test)."""
    stop = len(x) - len(x) % batch_size if drop_last else len(x)
    for i in range(0, stop, batch_size):
        lb = lengths[i:i + batch_size]
        total = math.ceil(pad_factor * int(lb.max()))
        yield pad_to_lengths(x[i:i + batch_size], lb, total, value), y[i:i + batch_size], lb
