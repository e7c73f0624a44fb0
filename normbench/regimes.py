"""What the two regimes (DESIGN.md) add to a run: the learning-rate scaling rule, the training batches,
the count of values each norm's statistics see, and the extra test evaluations in results.json.

    lr = scaled_lr(cfg)                                  # base lr x batch/ref (linear) or its sqrt
    results.update(extra_evaluations(model, splits, cfg))

Small batch: `test_acc_train_mode` is the test accuracy with every norm in training mode (BatchNorm
normalizing each test batch of `batch_size` by its own statistics), next to `test_acc` with running
statistics: their gap is the train/eval discrepancy. Variable length: accuracy per test length, on
mixed lengths, and under heavy padding, each also with batch statistics.
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from normbench import data
from normbench.config import Config
from normbench.data import varlen
from normbench.errors import UserError
from normbench.norms import NormFactory

LR_SCALING = ("none", "linear", "sqrt")


def scaled_lr(cfg: Config) -> float:
    """`cfg.lr` scaled to `cfg.batch_size` from `cfg.lr_ref_batch`: linear (Goyal et al. 2017, as the
    GroupNorm paper trains: lr = 0.1 x batch/32), sqrt (common for Adam), or none."""
    if cfg.lr_scaling not in LR_SCALING:
        raise UserError(f"unknown lr_scaling {cfg.lr_scaling!r}", f"use one of: {', '.join(LR_SCALING)}")
    ratio = cfg.batch_size / cfg.lr_ref_batch
    return cfg.lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[cfg.lr_scaling]


def validate(cfg: Config) -> None:
    """The regime settings a user can get wrong, checked before any data is read."""
    if cfg.lr_ref_batch < 1:
        raise UserError(f"lr_ref_batch must be >= 1 (got {cfg.lr_ref_batch})", "set lr_ref_batch=64")
    scaled_lr(cfg)
    v = cfg.varlen
    if not v.enabled:
        return
    if cfg.model.name != "rnn":
        raise UserError(f"varlen.enabled needs a sequence model, not model={cfg.model.name}",
                        "use model=rnn (or experiment=variable_length)")
    if not 1 <= v.min_len <= v.max_len:
        raise UserError(f"varlen lengths must satisfy 1 <= min_len <= max_len (got {v.min_len}, {v.max_len})",
                        "set e.g. varlen.min_len=10 varlen.max_len=28")
    if not v.test_lengths or min(v.test_lengths) < 1:
        raise UserError(f"varlen.test_lengths must be lengths >= 1 (got {v.test_lengths})",
                        "set e.g. varlen.test_lengths=[10,20,28,36,42]")
    for key in ("heavy_pad", "train_pad"):
        if getattr(v, key) < 1:
            raise UserError(f"varlen.{key} must be >= 1 (got {getattr(v, key)})", f"set varlen.{key}=1 or more")


def train_batches(cfg: Config):
    """The engine's training batches: plain, or resized to random lengths and padded (variable length)."""
    return varlen.train_batches(cfg.varlen) if cfg.varlen.enabled else data.batches


class NormCounter(NormFactory):
    """A norm constructor (`norms.factory`) that remembers the modules it builds, to count how many values
    each channel's statistics would see in one training batch (batch for linear layers, batch x H x W
    for convolutions, batch x T for sequences, batch for a per-step recurrent norm): BatchNorm's fate
    depends on this number more than on the batch size (issue 4)."""

    def __init__(self, name: str, **options):
        super().__init__(name, **options)
        self.built: list[tuple[nn.Module, int]] = []
        self.layouts: set[str] = set()

    def __call__(self, num_features: int, layout: str) -> nn.Module:
        module = super().__call__(num_features, layout)
        self.built.append((module, num_features))
        self.layouts.add(layout)
        return module

    @torch.no_grad()
    def values_per_channel(self, model: nn.Module, x: torch.Tensor) -> int | None:
        """The fewest values per channel any norm layer sees on input batch `x` (eval mode: no
        running-statistics update). None when the model has no norm layer."""
        seen: list[int] = []
        hooks = [m.register_forward_hook(lambda _m, args, _out, c=c: seen.append(args[0].numel() // c))
                 for m, c in self.built]
        was_training = model.training
        try:
            model.eval()
            model(x)
        finally:
            model.train(was_training)
            for h in hooks:
                h.remove()
        return min(seen) if seen else None


@contextmanager
def batch_statistics(model: nn.Module) -> Iterator[None]:
    """Norms in training mode (batch statistics), dropout off; on exit the model's state (running
    statistics included: training mode updates them) and its mode are restored."""
    saved = copy.deepcopy(model.state_dict())
    was_training = model.training
    model.train()
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.eval()
    try:
        yield
    finally:
        model.load_state_dict(saved)
        model.train(was_training)


@torch.no_grad()
def accuracy(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor, Any]]) -> float:
    """Fraction of correct predictions over (x, y, lengths) batches, in the model's current mode."""
    hits, n = None, 0
    for x, y, lengths in batches:
        h = (model(x, lengths).argmax(1) == y).sum()
        hits = h if hits is None else hits + h
        n += len(y)
    return hits.item() / n if n else float("nan")


def eval_accuracy(model: nn.Module, batches) -> float:
    was_training = model.training
    model.eval()
    try:
        return accuracy(model, batches)
    finally:
        model.train(was_training)


def stats_accuracy(model: nn.Module, batches) -> float:
    with batch_statistics(model):
        return accuracy(model, batches)


def extra_evaluations(model: nn.Module, splits, cfg: Config) -> dict[str, Any]:
    """The regime's test evaluations, for results.json. Batch-statistics evaluations run at the training
    batch size (that is what the norm saw in training), on the test set cut to a multiple of it."""
    x, y, bs, ebs = splits.test_x, splits.test_y, cfg.batch_size, cfg.eval_batch_size
    if bs > len(x):
        return {"test_acc_train_mode": None}
    out: dict[str, Any] = {
        "test_acc_train_mode": stats_accuracy(model, data.batches(x, y, bs, drop_last=True)),
    }
    v = cfg.varlen
    if not v.enabled:
        return out
    gen = torch.Generator().manual_seed(v.test_seed)
    mixed = varlen.random_lengths(len(x), v.min_len, v.max_len, gen).to(x.device)
    out["test_acc_by_length"] = {
        str(length): eval_accuracy(model, varlen.length_batches(x, y, length, ebs)) for length in v.test_lengths
    }
    for name, pad in (("mixed", 1.0), ("heavy_pad", v.heavy_pad)):
        out[f"test_acc_{name}"] = eval_accuracy(model, varlen.padded_batches(x, y, mixed, ebs, pad))
        out[f"test_acc_{name}_train_mode"] = stats_accuracy(
            model, varlen.padded_batches(x, y, mixed, bs, pad, drop_last=True))
    return out
