"""The member axis: what the engine, the evaluations and PreciseBN need of a model that trains S members
as one computation (normbench.pack.PackedModel is the one implementation).

    batches = joined(model, [batch_fn(s.train_x, ..., generator=g) for s, g in zip(splits.each, gens)])
    batches = each_member(model, splits, lambda s: data.batches(s.test_x, s.test_y, 1000))

A plain model is one member and needs none of this: the engine trains it on its batches as they come.
Declared here, away from the packed layers, so the core tests a type rather than probing attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

from normbench.data.members import MemberSplits
from normbench.data.splits import Splits

Batch = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]  # (x, y, lengths)


class Members(nn.Module):
    """S members trained as one model; member k was built (and is recorded) as the run with `seeds[k]`
    (None when the pack was built without them: then nothing that draws a member's batches can run)."""

    batch_dim = 1  # inputs are (S, N, ...)
    size: int
    seeds: list[int] | None

    def member_batches(self, streams: list[Iterable[Batch]]) -> Iterator[Batch]:
        """Member k's batches from `streams[k]`, stacked: (S, N, ...)."""
        raise NotImplementedError

    def packs(self, batch_size: int) -> bool:
        """Is a batch of this size faster through the pack than through each member alone?"""
        raise NotImplementedError

    @property
    def member_models(self) -> tuple[nn.Module, ...]:
        """The member models (not submodules: the pack's parameters are their stacked copies)."""
        raise NotImplementedError

    def unpacked(self) -> tuple[nn.Module, ...]:
        """The member models, holding the pack's current state (for recording or evaluating them alone)."""
        raise NotImplementedError

    def repack_buffers(self) -> None:
        """The member models' buffers (running statistics) back into the pack, after each was changed alone
        (PreciseBN past the pack's limit): `unpacked`'s reverse for the state that is not trained."""
        raise NotImplementedError

    def first_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Each member's first weight matrix (its first parameter with 2+ dimensions) and that weight's
        gradient, as views into the pack's parameters."""
        raise NotImplementedError


def member_splits(model: nn.Module, splits: Splits | MemberSplits) -> MemberSplits:
    """`splits` as each member's: one `Splits` is every member's."""
    return MemberSplits.of(splits, model.size if isinstance(model, Members) else 1)


def joined(model: nn.Module, streams: list[Iterable[Batch]]) -> Iterable[Batch]:
    """Each member's own stream of batches as the model takes them: a pack's stacked, a plain model's as is."""
    return model.member_batches(streams) if isinstance(model, Members) else streams[0]


class MemberStreams:
    """Each member's own batches, for a pack whose members have their own data. Iterated, it gives the
    pack's stacked batches (`Members.member_batches`); `evaluate` reads `streams` instead where the pack
    would not pack batches that large, and scores each member on its own batches, never stacked."""

    def __init__(self, model: Members, streams: list[Iterable[Batch]]):
        self.model, self.streams = model, streams

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.model.member_batches(self.streams))


def each_member(model: nn.Module, splits: Splits | MemberSplits,
                make: Callable[[Splits], Iterable[Batch]]) -> Iterable[Batch]:
    """One pass over each member's data, `make(a member's splits)` giving its batches: where the members
    share their splits, the batches once (a pack scores every member on them); where each has its own,
    each member's (`MemberStreams`: stacked where the pack packs them)."""
    splits = member_splits(model, splits)
    if splits.shared is not None:
        return make(splits.shared)
    streams = [make(s) for s in splits.each]
    return MemberStreams(model, streams) if isinstance(model, Members) else streams[0]
