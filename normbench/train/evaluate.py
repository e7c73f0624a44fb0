"""The one evaluation loop: mean loss and accuracy over batches, for a plain model or every member of a pack.

    scores = evaluate(model, data.batches(splits.test_x, splits.test_y, 1000))
    scores.loss, scores.acc                       # a number each, or a list per member for a pack
    evaluate(model, batches, batch_stats=True, stats_per=4, per_sample=True).correct   # (N,) or (S, N) bool
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from normbench.pack.members import Batch, Members, MemberStreams
from normbench.train.norm_modes import batch_statistics, eval_mode, split_statistics


class PassClock:
    """Seconds per evaluation pass, by name: `with clock("test_acc_train_mode"): ...` (a name timed twice
    adds up). results.json's `eval_passes`."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@dataclass(frozen=True)
class Scores:
    """What an evaluation pass gives: mean cross-entropy and accuracy (a number for a plain model, a list
    with one per member for a pack) and, when asked for (`per_sample`), which samples it classified
    correctly, in order ((N,) or (S, N) bool), so a later number over a prefix of them needs no pass."""
    loss: float | list[float]
    acc: float | list[float]
    correct: torch.Tensor | None = None


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch], batch_stats: bool = False,
             stats_per: int | None = None, per_sample: bool = False) -> Scores:
    """Score `model` over (x, y, lengths) batches, in eval mode (running statistics), or with
    `batch_stats=True` normalizing each batch by its own statistics (the train/eval discrepancy); the model
    comes back unchanged either way. With `stats_per=k` (and batch_stats) each group of k samples of a
    batch is normalized on its own (`split_statistics`): batches of any multiple of k then score as
    batches of k would. A packed model (normbench.pack) scores every member on the same batches, or on
    each member's own (`MemberStreams`, or stacked (S, N, ...) batches)."""
    members = model.size if isinstance(model, Members) else None
    if isinstance(batches, MemberStreams):  # each member its own data
        first, head = _peek(batches.streams[0])
        streams = [head, *batches.streams[1:]]
        if first is None:
            return _empty(members, per_sample)
        if not model.packs(first[1].shape[-1]):  # large batches: each member alone is faster (docs/packing.md)
            return _each(model, streams, batch_stats, stats_per, per_sample)
        batches = model.member_batches(streams)
    elif members is not None:
        first, batches = _peek(batches)
        if first is None:
            return _empty(members, per_sample)
        if not model.packs(first[1].shape[-1]):
            batches = list(batches)
            return _each(model, [[_member(b, k) for b in batches] for k in range(members)], batch_stats,
                         stats_per, per_sample)
    loss = hits = None
    n = 0
    correct: list[torch.Tensor] = []
    split = split_statistics(model, stats_per) if batch_stats and stats_per else contextlib.nullcontext()
    with batch_statistics(model) if batch_stats else eval_mode(model), split:
        for x, y, lengths in batches:
            if members is not None:
                x, y, lengths = _for_members(members, x, y, lengths)
            logits = model(x, lengths)
            batch_loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)
            right = logits.argmax(-1) == y
            if per_sample:
                correct.append(right)
            batch_loss, batch_hits = batch_loss.sum(-1), right.sum(-1)
            loss = batch_loss if loss is None else loss + batch_loss
            hits = batch_hits if hits is None else hits + batch_hits
            n += y.shape[-1]
    if not n:
        return _empty(members, per_sample)
    hit_mask = torch.cat(correct, -1) if per_sample else None
    if members is None:
        return Scores(loss.item() / n, hits.item() / n, hit_mask)
    return Scores([v / n for v in loss.tolist()], [v / n for v in hits.tolist()], hit_mask)


def _peek(batches: Iterable[Batch]) -> tuple[Batch | None, Iterable[Batch]]:
    """The first batch (None for none) and all the batches, the first included."""
    rest = iter(batches)
    first = next(rest, None)
    return first, rest if first is None else itertools.chain([first], rest)


def _each(model: Members, streams: list[Iterable[Batch]], batch_stats: bool, stats_per: int | None,
          per_sample: bool) -> Scores:
    """Each member alone on its own batches, as the pack's scores."""
    each = [evaluate(m, s, batch_stats, stats_per, per_sample) for m, s in zip(model.unpacked(), streams)]
    return Scores([s.loss for s in each], [s.acc for s in each],
                  torch.stack([s.correct for s in each]) if per_sample else None)


def _empty(members: int | None, per_sample: bool) -> Scores:
    """No batch at all: NaN scores (a member each for a pack) and no samples."""
    nan = float("nan") if members is None else [float("nan")] * members
    none = torch.zeros(0 if members is None else (members, 0), dtype=torch.bool) if per_sample else None
    return Scores(nan, nan, none)


def _member(batch: Batch, k: int) -> Batch:
    """Member k's part of a pack's batch: its own of (S, N, ...) batches, all of a shared one."""
    x, y, lengths = batch
    if x.dim() < 5:
        return batch
    return x[k], y[k], None if lengths is None else lengths[k]


def _for_members(members: int, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor | None):
    """One batch for every member of a pack: shared (N, C, H, W) batches expanded, own (S, N, ...) kept."""
    if x.dim() == 5:
        return x, y, lengths
    return (x.expand(members, *x.shape), y.expand(members, *y.shape),
            None if lengths is None else lengths.expand(members, *lengths.shape))

