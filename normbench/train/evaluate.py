"""The one evaluation loop: each member's mean loss and accuracy over batches (a plain model is one member).

    scores = evaluate(model, data.batches(splits.test_x, splits.test_y, 1000))
    scores.loss, scores.acc                       # one number per member: [0.41], or S of them for a pack
    evaluate(model, batches, batch_stats=True, stats_per=4, per_sample=True).correct   # (S, N) bool
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

from normbench.pack.members import Batch, Members, MemberStreams, Solo, members_of
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
    """What an evaluation pass gives, per member: mean cross-entropy and accuracy (lists of S) and, when
    asked for (`per_sample`), which samples it classified correctly, in order ((S, N) bool), so a later
    number over a prefix of them needs no pass."""
    loss: list[float]
    acc: list[float]
    correct: torch.Tensor | None = None


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch] | MemberStreams, batch_stats: bool = False,
             stats_per: int | None = None, per_sample: bool = False) -> Scores:
    """Score each member of `model` (a plain model is one: `members_of`) over (x, y, lengths) batches, in
    eval mode (running statistics), or with `batch_stats=True` normalizing each batch by its own
    statistics (the train/eval discrepancy); the model comes back unchanged either way. With
    `stats_per=k` (and batch_stats) each group of k samples of a batch is normalized on its own
    (`split_statistics`): batches of any multiple of k then score as batches of k would. `batches` are
    shared (every member scores on them) or each member's own (`MemberStreams`)."""
    model = members_of(model)
    streams = None
    if isinstance(batches, MemberStreams):  # each member its own data
        first, head = _peek(batches.streams[0])
        streams = [head, *batches.streams[1:]]
    else:  # shared: every member on the same batches
        first, batches = _peek(batches)
    if first is None:
        return _empty(model.size, per_sample)
    if not model.packs(first[1].shape[-1]):  # large batches: each member alone is faster (docs/packing.md)
        return _each(model, streams or [list(batches)] * model.size, batch_stats, stats_per, per_sample)
    batches = model.member_batches(streams) if streams is not None else _shared(model.size, batches)
    loss = hits = None
    n = 0
    correct: list[torch.Tensor] = []
    split = split_statistics(model, stats_per) if batch_stats and stats_per else contextlib.nullcontext()
    with batch_statistics(model) if batch_stats else eval_mode(model), split:
        for x, y, lengths in batches:
            logits = model(x, lengths)
            batch_loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)
            right = logits.argmax(-1) == y
            if per_sample:
                correct.append(right)
            batch_loss, batch_hits = batch_loss.sum(-1), right.sum(-1)
            loss = batch_loss if loss is None else loss + batch_loss
            hits = batch_hits if hits is None else hits + batch_hits
            n += y.shape[-1]
    return Scores([v / n for v in loss.tolist()], [v / n for v in hits.tolist()],
                  torch.cat(correct, -1) if per_sample else None)


def _peek(batches: Iterable[Batch]) -> tuple[Batch | None, Iterable[Batch]]:
    """The first batch (None for none) and all the batches, the first included."""
    rest = iter(batches)
    first = next(rest, None)
    return first, rest if first is None else itertools.chain([first], rest)


def _each(model: Members, streams: list[Iterable[Batch]], batch_stats: bool, stats_per: int | None,
          per_sample: bool) -> Scores:
    """Each member alone on its own (unstacked) batches, as the pack's scores."""
    each = [evaluate(Solo(m), s, batch_stats, stats_per, per_sample) for m, s in zip(model.unpacked(), streams)]
    return Scores([s.loss[0] for s in each], [s.acc[0] for s in each],
                  torch.cat([s.correct for s in each]) if per_sample else None)


def _empty(members: int, per_sample: bool) -> Scores:
    """No batch at all: NaN scores, one per member, and no samples."""
    nan = [float("nan")] * members
    return Scores(nan, nan, torch.zeros((members, 0), dtype=torch.bool) if per_sample else None)


def _shared(members: int, batches: Iterable[Batch]) -> Iterator[Batch]:
    """Shared (N, ...) batches as every member's: expanded to (S, N, ...), a view."""
    for x, y, lengths in batches:
        yield (x.expand(members, *x.shape), y.expand(members, *y.shape),
               None if lengths is None else lengths.expand(members, *lengths.shape))
