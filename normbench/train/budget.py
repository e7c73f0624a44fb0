"""A run's budget as arithmetic on its config, with no torch: how many epochs and optimizer steps
(`plan_steps`, `count_steps`) and after which epochs a validation pass runs (`validates`,
`validation_passes`). The loop trains by it; the study's estimate and the sweep's plan line count by it.
"""

from __future__ import annotations

import math

from normbench.config import Config
from normbench.errors import UserError


def plan_steps(cfg: Config, n_train: int) -> tuple[int, int]:
    """(epochs, total optimizer steps): `max_steps` caps `epochs`; with epochs < 1 it alone decides."""
    per_epoch = n_train // cfg.batch_size
    if per_epoch < 1:
        raise UserError(f"batch_size={cfg.batch_size} is larger than the {n_train} training samples",
                        "lower batch_size or raise data.subset")
    return count_steps(cfg.epochs, cfg.max_steps, per_epoch)


def count_steps(epochs: int, max_steps: int | None, per_epoch: int) -> tuple[int, int]:
    """plan_steps' count for `per_epoch` steps an epoch (the study's estimate counts a budget by it too)."""
    if max_steps is not None:
        epochs = epochs if epochs >= 1 else math.ceil(max_steps / per_epoch)
        return epochs, min(max_steps, epochs * per_epoch)
    return epochs, epochs * per_epoch


def validates(epoch: int, epochs: int, validations: int | None) -> bool:
    """Is there a validation pass after `epoch` (from 0) of a run's `epochs`? After every one, or with
    `validations` (cfg.validations) below the epochs, after that many spread evenly over the run: the k-th
    after epoch ceil(k x epochs / validations), the last epoch's always (the run's val_acc)."""
    if validations is None or epochs <= validations:
        return True
    return (epoch + 1) * validations // epochs > epoch * validations // epochs


def validation_passes(steps: int, per_epoch: int, validations: int | None) -> int:
    """How many passes `validates` makes over a run of `steps` steps (the last epoch may stop mid-way)."""
    epochs = math.ceil(steps / max(1, per_epoch))
    return min(epochs, validations or epochs)
