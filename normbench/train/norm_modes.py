"""How a model's norms take their statistics during an evaluation pass, as context managers.

    with eval_mode(model): ...                  # running statistics (the usual test)
    with batch_statistics(model): ...           # each batch normalized by its own statistics; state restored
    with split_statistics(model, 4): ...        # ... each group of 4 samples on its own (ghost batches)

Which modules are batch-dependent is the catalog's answer (`norms.is_batch_dependent`), asked here once.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Iterator

from torch import nn

from normbench import norms
from normbench.norms.batch_stats import BatchStatistics
from normbench.pack.members import members_of


@contextlib.contextmanager
def batch_statistics(model: nn.Module) -> Iterator[None]:
    """Norms in training mode (each batch normalized by its own statistics), dropout off; on exit the
    model's state and mode are restored, so the running statistics that training mode updates are
    left exactly as they were."""
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


def _statistics_modules(model: nn.Module) -> tuple[list[nn.Module], bool]:
    """(the modules whose batch statistics can be split into groups, whether every batch-dependent one can)."""
    # a pack's member models are not its submodules, and past its limit they are evaluated one by one
    nets = members_of(model).member_models
    modules = list(dict.fromkeys([*model.modules(), *(m for net in nets for m in net.modules())]))

    def splits(m: nn.Module) -> bool:
        return isinstance(m, BatchStatistics) and m.splits_statistics

    return [m for m in modules if splits(m)], all(splits(m) for m in modules if norms.is_batch_dependent(m))


def can_split_statistics(model: nn.Module) -> bool:
    """Can every batch-dependent norm of `model` normalize groups of a batch on their own (ghost batches)?"""
    return _statistics_modules(model)[1]


@contextlib.contextmanager
def split_statistics(model: nn.Module, samples: int) -> Iterator[None]:
    """Every batch-dependent norm normalizes each group of `samples` consecutive samples by their own
    statistics (a ghost batch; a norm with a smaller ghost batch keeps it), so one pass over large batches
    computes what passes over batches of `samples` compute, in a few kernel calls instead of thousands.
    Only where `can_split_statistics(model)`."""
    modules, ok = _statistics_modules(model)
    if not ok:
        raise ValueError("a batch-dependent norm of this model cannot split its statistics")
    saved = [(m, m.ghost_batch) for m in modules]
    for m in modules:
        if m.ghost_batch is None:
            m.ghost_batch = samples
    try:
        yield
    finally:
        for m, k in saved:
            m.ghost_batch = k


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)

