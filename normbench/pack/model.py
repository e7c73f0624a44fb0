"""S member models (each built and initialized by its own seed) -> one packed model, and back.

    members = [build(seed) for seed in seeds]          # exactly the models separate runs would train
    packed = PackedModel(members)                       # forward((S, N, C, H, W), lengths (S, N)) -> (S, N, classes)
    unpack(packed, members)                            # each member's weights and statistics, from the pack

The packed model mirrors the members' structure layer for layer (layers.convert); its parameters are
the members' stacked (or concatenated) copies. Layers that stay per member (`PerMember`) hold the
members' own modules, so unpacking leaves nothing to copy for them.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from normbench.members import Members
from normbench.models import CNN, MLP, RNN, length_mask
from normbench.pack.layers import PackedConv2d, PerMember, convert, to_layout, unpack_into
from normbench.pack.transformer import PackedTransformer
from normbench.transformer import Transformer


class PackedSequential(nn.Module):
    """The packed form of a member's `net` (nn.Sequential): converts layouts between layers."""

    def __init__(self, nets: list[nn.Sequential]):
        super().__init__()
        self.members = len(nets)
        self.layers = nn.ModuleList(convert([net[i] for net in nets]) for i in range(len(nets[0])))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        have = "m"
        for layer in self.layers:
            x = layer(to_layout(x, have, layer.layout, self.members))
            have = layer.layout if layer.layout != "any" else have
        return to_layout(x, have, "m", self.members)

    def unpack(self, nets: list[nn.Sequential]) -> None:
        for i, layer in enumerate(self.layers):
            unpack_into(layer, [net[i] for net in nets])


class PackedRNNModel(nn.Module):
    """The packed form of `models.RNN`: the same forward, over (S, N, ...) with per-member lengths."""

    def __init__(self, members: list[RNN]):
        super().__init__()
        self.layers = nn.ModuleList(convert([m.layers[i] for m in members]) for i in range(len(members[0].layers)))
        self.norms = nn.ModuleList(convert([m.norms[i] for m in members]) for i in range(len(members[0].norms)))
        self.dropout = members[0].dropout
        self.head = convert([m.head for m in members])
        self.steps: list[int] | None = None  # each member's padded length, when members' batches differ in it

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        s, n, c, h, w = x.shape
        seq = x.permute(0, 1, 3, 2, 4).reshape(s, n, h, c * w)  # (S, N, T=H, C*W)
        mask = None if lengths is None else length_mask(lengths.reshape(-1), h).view(s, n, h)
        for layer, norm in zip(self.layers, self.norms):
            seq = norm(layer(seq, mask), mask, self.steps)
        if lengths is None:
            last = seq[:, :, -1]
        else:
            last = seq[torch.arange(s, device=x.device)[:, None], torch.arange(n, device=x.device), lengths - 1]
        return self.head(self.dropout(last))

    def unpack(self, members: list[RNN]) -> None:
        for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
            unpack_into(layer, [m.layers[i] for m in members])
            unpack_into(norm, [m.norms[i] for m in members])
        unpack_into(self.head, [m.head for m in members])


def stack_batches(parts: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[int] | None]:
    """S members' (x, y, lengths) -> (x (S, N, ...), y (S, N), lengths (S, N) or None, padded lengths).
    Members' variable-length batches can differ in padded length: each is padded to the longest, and the
    per-member lengths come back so norms that count padding see only their member's own."""
    xs, ys, ls = zip(*parts)
    steps = [x.shape[2] for x in xs]
    if len(set(steps)) > 1:
        longest = max(steps)
        xs = [F.pad(x, (0, 0, 0, longest - x.shape[2])) for x in xs]
    lengths = None if ls[0] is None else torch.stack(ls)
    return torch.stack(xs), torch.stack(ys), lengths, (steps if len(set(steps)) > 1 else None)


class PackedModel(Members):
    """What the engine trains for a pack: `net` is the packed network of the S member models.
    `seeds`: the members' seeds, for evaluations that draw training batches per member (PreciseBN)."""

    def __init__(self, members: list[nn.Module], seeds: list[int] | None = None,
                 packs: Callable[[int], bool] | None = None):
        super().__init__()
        self.seeds = seeds
        self._members = tuple(members)  # not submodules: the pack's parameters are their stacked copies
        self._packs = packs
        kind = type(members[0])
        if kind in (MLP, CNN):
            self.net = PackedSequential([m.net for m in members])
        elif kind is RNN:
            self.net = PackedRNNModel(members)
        elif kind is Transformer:
            self.net = PackedTransformer(members)
        else:
            raise TypeError(f"no packed form of {kind.__name__}")
        self.size = len(members)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x, lengths)

    def first_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        def first(module: nn.Module):
            if isinstance(module, PerMember):  # the members' own modules
                params = [next((p for p in m.parameters() if p.dim() >= 2), None) for m in module.members]
                return None if params[0] is None else [(p, p.grad) for p in params]
            own = [p for p in module.parameters(recurse=False) if p.dim() >= 2]
            if own:  # stacked (S, ...) copies; a packed conv's are concatenated along its output channels
                w = own[0]
                split = (lambda t: t.chunk(self.size)) if isinstance(module, PackedConv2d) else (lambda t: t.unbind(0))
                return list(zip(split(w), split(w.grad) if w.grad is not None else [None] * self.size))
            return next((found for child in module.children() if (found := first(child))), None)

        return first(self.net)

    def member_batches(self, batch_fn, x, y, batch_size, generators, drop_last=True, **kw):
        """While a batch is out, the pack knows each member's padded length (for norms that count it)."""
        streams = [batch_fn(x, y, batch_size, shuffle=True, generator=g, drop_last=drop_last, **kw)
                   for g in generators]
        try:
            for parts in zip(*streams):
                xs, ys, lengths, padded = stack_batches(parts)
                self.net.steps = padded
                yield xs, ys, lengths
        finally:
            self.net.steps = None

    def packs(self, batch_size: int) -> bool:
        return True if self._packs is None else self._packs(batch_size)

    @property
    def member_models(self) -> tuple[nn.Module, ...]:
        return self._members

    def unpacked(self) -> tuple[nn.Module, ...]:
        unpack(self, list(self._members))
        return self._members


@torch.no_grad()
def unpack(packed: PackedModel, members: list[nn.Module]) -> None:
    """Write the pack's state into the member models, which then evaluate as separate runs' models would."""
    packed.net.unpack([m.net for m in members] if isinstance(packed.net, PackedSequential) else members)
