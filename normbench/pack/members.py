"""The member axis: what the engine, the evaluations and PreciseBN need of a model that trains S members
as one computation (normbench.pack.PackedModel is the one implementation).

    if isinstance(model, Members):            # a pack: inputs (S, N, ...), logits (S, N, classes)
        for x, y, lengths in model.member_batches(batch_fn, x, y, batch_size, generators): ...

A plain model is one member and needs none of this: the engine trains it on its batches as they come.
Declared here, away from the packed layers, so the core tests a type rather than probing attributes.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]  # (x, y, lengths)


class Members(nn.Module):
    """S members trained as one model; member k was built (and is recorded) as the run with `seeds[k]`
    (None when the pack was built without them: then nothing that draws a member's batches can run)."""

    batch_dim = 1  # inputs are (S, N, ...)
    size: int
    seeds: list[int] | None

    def member_batches(self, batch_fn: Callable, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                       generators: list[torch.Generator], **kw) -> Iterator[Batch]:
        """Every member's own batches (`batch_fn` with member k's generator), stacked: (S, N, ...)."""
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

    def first_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Each member's first weight matrix (its first parameter with 2+ dimensions) and that weight's
        gradient, as views into the pack's parameters."""
        raise NotImplementedError
