"""The member axis: what the engine, the evaluations and PreciseBN need of a model that trains S members
as one computation. Every run is a set of members: a plain run is `Solo`, a set of one; a pack is
normbench.pack.PackedModel. Nothing outside normbench.pack asks which one it holds.

    model = members_of(net, seed=0)              # a plain model as a set of one (a Members as is)
    batches = joined(model, [batch_fn(s.train_x, ..., generator=g) for s, g in zip(splits.each, gens)])
    batches = each_member(model, splits, lambda s: data.batches(s.test_x, s.test_y, 1000))
    logits = model(x, lengths)                   # x (S, N, ...) -> logits (S, N, classes)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
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

    def losses(self, logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what to differentiate, each member's mean cross-entropy (S,)): the sum of the members' mean
        losses, so each member's gradient is its own."""
        losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(self.size, -1).mean(1)
        return losses.sum(), losses


class Solo(Members):
    """A plain model as a set of one member: its batches gain a leading member axis of 1 (a view) and
    lose it again inside `forward`, so the model computes exactly what it computes alone, with the same
    parameters (`net` is its one submodule). What the engine, the evaluations and PreciseBN ask of a pack
    they ask of this, and get the plain model's answer."""

    def __init__(self, net: nn.Module, seed: int | None = None):
        super().__init__()
        self.net, self.size, self.seeds = net, 1, None if seed is None else [seed]
        self.train(net.training)  # its mode is the model's: an evaluation restores the mode it found

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x[0], None if lengths is None else lengths[0]).unsqueeze(0)

    # Its state is the model's, keys and all: a plain run's checkpoint loads into the model it trained.
    def state_dict(self, *args, **kwargs):
        return self.net.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.net.load_state_dict(state_dict, strict=strict, assign=assign)

    def losses(self, logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = F.cross_entropy(logits[0], y[0])  # the plain model's loss, bit for bit
        return loss, loss.unsqueeze(0)

    def member_batches(self, streams: list[Iterable[Batch]]) -> Iterator[Batch]:
        for x, y, lengths in streams[0]:
            yield x.unsqueeze(0), y.unsqueeze(0), None if lengths is None else lengths.unsqueeze(0)

    def packs(self, batch_size: int) -> bool:
        return True  # one member: stacking is a view, never slower

    @property
    def member_models(self) -> tuple[nn.Module, ...]:
        return (self.net,)

    def unpacked(self) -> tuple[nn.Module, ...]:
        return (self.net,)

    def repack_buffers(self) -> None:
        pass  # the member model is the model: nothing to copy back

    def first_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        # a layer's: the model's own free parameters (the Transformer's position table) are not a layer
        w = next(p for name, p in self.net.named_parameters() if "." in name and p.dim() >= 2)
        return [(w, w.grad)]


def members_of(model: nn.Module, seed: int | None = None) -> Members:
    """`model` as a set of members: a pack as it is, a plain model as `Solo` (with its run's `seed`, which
    PreciseBN draws its batches by). The one place a plain model becomes a member: the public entry points
    (`loop.fit`, `evaluate`, the regimes' evaluations) take either, and call this first."""
    return model if isinstance(model, Members) else Solo(model, seed)


def member_splits(model: Members, splits: Splits | MemberSplits) -> MemberSplits:
    """`splits` as each member's: one `Splits` is every member's."""
    return MemberSplits.of(splits, model.size)


def joined(model: Members, streams: list[Iterable[Batch]]) -> Iterable[Batch]:
    """Each member's own stream of batches, stacked as the model takes them: (S, N, ...)."""
    return model.member_batches(streams)


class MemberStreams:
    """Each member's own batches, for a pack whose members have their own data. Iterated, it gives the
    pack's stacked batches (`Members.member_batches`); `evaluate` reads `streams` instead where the pack
    would not pack batches that large, and scores each member on its own batches, never stacked."""

    def __init__(self, model: Members, streams: list[Iterable[Batch]]):
        self.model, self.streams = model, streams

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.model.member_batches(self.streams))


def each_member(model: Members, splits: Splits | MemberSplits,
                make: Callable[[Splits], Iterable[Batch]]) -> Iterable[Batch] | MemberStreams:
    """One pass over each member's data, `make(a member's splits)` giving its batches: where the members
    share their splits, the batches once, unstacked (every member scores on them); where each has its own,
    each member's (`MemberStreams`: stacked where the pack packs them)."""
    splits = member_splits(model, splits)
    if splits.shared is not None:
        return make(splits.shared)
    return MemberStreams(model, [make(s) for s in splits.each])
