"""The variable-length study: image rows as time steps, each training sample resized along its height to
a random length in [varlen.min_len, varlen.max_len], batches right-padded with a mask.

    batch_fn = train_batches(cfg)
    results.update(evaluations(model, splits, cfg))

Evaluations: the small-batch study's, then accuracy per test length (also longer than any trained), on
mixed lengths, and with each batch padded to `varlen.heavy_pad` x its longest length, each with running
and with batch statistics. For norms with running statistics, `test_acc_by_length_precise_bn` tests each
length >= varlen.max_len after PreciseBN re-estimated the statistics on training images stretched to that
length (every step up to it gets statistics of its own): if a norm recovers there, what it lacked past the
trained length was statistics; if not, the cause is the dynamics. Stretching changes the images too, so
read it against `none`'s drop over the same lengths.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from normbench import data, precise_bn
from normbench.config import Config
from normbench.data import varlen
from normbench.engine import evaluate
from normbench.errors import UserError
from normbench.studies import small_batch


def validate(cfg: Config) -> None:
    v = cfg.varlen
    if cfg.model.name != "rnn":
        raise UserError(f"varlen.enabled needs a sequence model, not model={cfg.model.name}",
                        "use model=rnn (or experiment=variable_length)")
    if cfg.data.augment:  # a crop would shift padding rows into the real ones
        raise UserError("data.augment does not apply to variable-length sequences", "set data.augment=false")
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
    return varlen.train_batches(cfg.varlen)


def evaluations(model: nn.Module, splits: data.Splits, cfg: Config) -> dict[str, Any]:
    out = small_batch.evaluations(model, splits, cfg, train_batches(cfg))  # on the unresized test set
    x, y, bs, ebs, v = splits.test_x, splits.test_y, cfg.batch_size, cfg.eval_batch_size, cfg.varlen
    if bs > len(x):
        return out
    gen = torch.Generator().manual_seed(v.test_seed)
    mixed = varlen.random_lengths(len(x), v.min_len, v.max_len, gen).to(x.device)
    out["test_acc_by_length"] = {
        str(length): evaluate(model, varlen.length_batches(x, y, length, ebs))[1] for length in v.test_lengths
    }
    if precise_bn.has_running_stats(model):
        out["test_acc_by_length_precise_bn"] = {
            str(length): stretched_precise_bn(model, splits, cfg, length)
            for length in v.test_lengths if length >= v.max_len
        }
    for name, pad in (("mixed", 1.0), ("heavy_pad", v.heavy_pad)):
        out[f"test_acc_{name}"] = evaluate(model, varlen.padded_batches(x, y, mixed, ebs, pad))[1]
        out[f"test_acc_{name}_train_mode"] = evaluate(
            model, varlen.padded_batches(x, y, mixed, bs, pad, drop_last=True), batch_stats=True)[1]
    return out


def stretched_precise_bn(model: nn.Module, splits: data.Splits, cfg: Config, length: int) -> float:
    """Test accuracy at `length` rows after PreciseBN on training images stretched to it, at the training
    batch size, every step up to `length` with statistics of its own; on a copy (the run's model is kept)."""
    stretched = copy.deepcopy(model)
    batches = small_batch.precise_batches(stretched, splits, cfg, varlen.fixed_length(length))
    precise_bn.recompute_statistics(stretched, batches, small_batch.PRECISE_SAMPLES, steps=length)
    return evaluate(stretched, varlen.length_batches(splits.test_x, splits.test_y, length, cfg.eval_batch_size))[1]
