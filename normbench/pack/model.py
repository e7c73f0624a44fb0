"""S member models (each built and initialized by its own seed) -> one packed model, and back.

    members = [build(seed) for seed in seeds]          # exactly the models separate runs would train
    packed = PackedModel(members)                       # forward((S, N, C, H, W), lengths (S, N)) -> (S, N, classes)
    packed.unpacked()                                   # the member models, holding the pack's state
    model = model_of(nets, seeds)                       # what the engine trains: Solo for one, packed for S

The packed network is the members' model with its layers swapped for packed ones (layers.convert), not a
copy of its forward: a model whose forward indexes from the end declares `member_axis = True`, and its
own forward then runs over a leading member axis. Its free parameters (the Transformer's position table)
are stacked per member; an `nn.Sequential` becomes a `PackedSequential`, which moves activations between
the packed layers' layouts; a layer with no packed form is `PerMember`, each member's own module on its
own slice. Unpacking copies each packed layer's state back into the members' layers.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from normbench.pack.layers import PackedConv2d, PerMember, convert, to_layout, unpack_into
from normbench.pack.members import Members, Solo


class PackedSequential(nn.Module):
    """The packed form of an `nn.Sequential`: its layers' packed forms, converting layouts between them."""

    def __init__(self, seqs: list[nn.Sequential], swapped: list):
        super().__init__()
        self.members = len(seqs)
        self.layers = nn.ModuleList(_pack([seq[i] for seq in seqs], swapped) for i in range(len(seqs[0])))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        have = "m"
        for layer in self.layers:
            want = getattr(layer, "layout", "m")
            x = layer(to_layout(x, have, want, self.members))
            have = want if want != "any" else have
        return to_layout(x, have, "m", self.members)


def _shell(members: list[nn.Module], swapped: list) -> nn.Module:
    """Member 0's module with its own forward and settings, its children packed and its own parameters
    stacked per member ((S, ...)): what a `member_axis` model (or an nn.ModuleList) becomes in a pack."""
    first = members[0]
    shell = type(first).__new__(type(first))
    nn.Module.__init__(shell)  # fresh parameter, buffer, child and hook tables
    for key, value in first.__dict__.items():
        shell.__dict__.setdefault(key, value)  # its settings (heads, pre, patches, ...)
    for name in first._buffers:
        raise TypeError(f"{type(first).__name__}.{name}: a buffer outside a layer has no packed form")
    for name, p in first._parameters.items():
        if p is None:  # a parameter slot left empty (no bias): empty in the pack too
            shell._parameters[name] = None
            continue
        stacked = nn.Parameter(torch.stack([getattr(m, name).detach() for m in members]))
        shell._parameters[name] = stacked
        swapped.append((stacked, [getattr(m, name) for m in members]))
    for name in first._modules:
        shell._modules[name] = _pack([m._modules[name] for m in members], swapped)
    return shell


def _pack(members: list[nn.Module], swapped: list) -> nn.Module:
    """The packed form of S members' copies of one module; every swap is noted in `swapped`, for unpacking."""
    first = members[0]
    if isinstance(first, nn.Sequential):
        return PackedSequential(members, swapped)
    if isinstance(first, nn.ModuleList) or getattr(first, "member_axis", False):
        return _shell(members, swapped)
    packed = convert(members)
    swapped.append((packed, members))
    return packed


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
    """What the engine trains for a pack: `net` is the members' model with packed layers.
    `seeds`: the members' seeds, for evaluations that draw training batches per member (PreciseBN)."""

    def __init__(self, members: list[nn.Module], seeds: list[int] | None = None,
                 packs: Callable[[int], bool] | None = None):
        super().__init__()
        self.seeds = seeds
        self._members = tuple(members)  # not submodules: the pack's parameters are their stacked copies
        self._packs = packs
        if not getattr(members[0], "member_axis", False):
            raise TypeError(f"no packed form of {type(members[0]).__name__}: its forward is not declared to run "
                            "over a leading member axis (member_axis = True)")
        self._swapped: list[tuple[nn.Module | nn.Parameter, list]] = []
        self.net = _pack(members, self._swapped)
        self._per_member = [m for m in self.net.modules() if isinstance(m, PerMember)]
        self.size = len(members)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x, lengths)

    def first_weights(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Each member's first weight matrix, as `loop.first_grad_ratios` picks it in a plain model: the
        first parameter of 2+ dimensions that belongs to a layer (the model's own free parameters are not)."""
        def first(module: nn.Module):
            if isinstance(module, PerMember):  # the members' own modules
                params = [next((p for p in m.parameters() if p.dim() >= 2), None) for m in module.members]
                return None if params[0] is None else [(p, p.grad) for p in params]
            own = [p for p in module.parameters(recurse=False) if p.dim() >= 2]
            if own and module is not self.net and not getattr(module, "member_axis", False):
                w = own[0]  # stacked (S, ...) copies; a packed conv's are concatenated along its output channels
                split = (lambda t: t.chunk(self.size)) if isinstance(module, PackedConv2d) else (lambda t: t.unbind(0))
                return list(zip(split(w), split(w.grad) if w.grad is not None else [None] * self.size))
            return next((found for child in module.children() if (found := first(child))), None)

        return first(self.net)

    def member_batches(self, streams):
        """While a batch is out, the pack's per-member layers know each member's padded length."""
        try:
            for parts in zip(*streams):
                xs, ys, lengths, padded = stack_batches(parts)
                self._set_steps(padded)
                yield xs, ys, lengths
        finally:
            self._set_steps(None)

    def _set_steps(self, steps: list[int] | None) -> None:
        for m in self._per_member:
            m.steps = steps

    def packs(self, batch_size: int) -> bool:
        return True if self._packs is None else self._packs(batch_size)

    @property
    def member_models(self) -> tuple[nn.Module, ...]:
        return self._members

    def unpacked(self) -> tuple[nn.Module, ...]:
        unpack(self)
        return self._members

    @torch.no_grad()
    def repack_buffers(self) -> None:
        for swapped, originals in self._swapped:  # a PerMember's modules are the members' own already
            if isinstance(swapped, nn.Module) and hasattr(swapped, "repack_buffers"):
                swapped.repack_buffers(originals)


def model_of(nets: list[nn.Module], seeds: list[int] | None = None,
            packs: Callable[[int], bool] | None = None) -> Members:
    """The members' models as what the engine trains: a set of one (`Solo`, the model itself) or a pack."""
    if len(nets) == 1:
        return Solo(nets[0], None if seeds is None else seeds[0])
    return PackedModel(nets, seeds=seeds, packs=packs)


@torch.no_grad()
def unpack(packed: PackedModel) -> None:
    """Write the pack's state into the member models, which then evaluate as separate runs' models would."""
    for swapped, originals in packed._swapped:
        if isinstance(swapped, nn.Parameter):
            for k, p in enumerate(originals):
                p.copy_(swapped[k])
        else:
            unpack_into(swapped, originals)
