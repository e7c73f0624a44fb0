"""The small-batch study, and the default for every run without `varlen`: plain shuffled batches
(augmented on the device when data.augment=true), and the test accuracy with batch statistics.

    batch_fn = train_batches(cfg)
    results.update(evaluations(model, splits, cfg))   # {"test_acc_train_mode": 0.83}

`test_acc_train_mode` is the test accuracy with every norm normalizing each test batch of `batch_size`
by its own statistics, next to `test_acc` with running statistics: their gap is BatchNorm's
train/eval discrepancy (none for a batch-independent norm).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from normbench import data
from normbench.config import Config
from normbench.data import augment
from normbench.engine import evaluate


def validate(cfg: Config) -> None:
    augment.validate(cfg.data)


def train_batches(cfg: Config):
    return augment.augmented(data.batches, cfg.data)


def evaluations(model: nn.Module, splits: data.Splits, cfg: Config) -> dict[str, Any]:
    """Batch statistics at the training batch size (what the norm saw in training), on the test set cut
    to a multiple of it."""
    x, y, bs = splits.test_x, splits.test_y, cfg.batch_size
    if bs > len(x):
        return {"test_acc_train_mode": None}
    _, acc = evaluate(model, data.batches(x, y, bs, drop_last=True), batch_stats=True)
    return {"test_acc_train_mode": acc}
