"""Packed layers: S members' copies of one layer as one module that runs them in one computation.

    layer = convert([m0.fc, m1.fc, m2.fc])      # three nn.Linear -> PackedLinear, weight (3, out, in)
    y = layer(x)                                # x: (S, N, in) -> (S, N, out)
    unpack_into(layer, [m0.fc, m1.fc, m2.fc])   # each member's weights back from the stack

Two layouts carry activations between packed layers:
  "m" (members first): (S, N, ...), member k's activations are x[k]  (linears, RNNs, per-token norms)
  "c" (channels packed): (N, S*C, H, W), member k owns channels k*C..(k+1)*C  (convolutions, BN and GN
      on images: a conv with groups=S, BN over S*C channels and GN with S*G groups are exactly S
      per-member layers, computed by torch's own kernels, running statistics included)
A module's `layout` says which it takes ("any" for elementwise ones); `PackedSequential` converts between
them where consecutive modules differ.

What has no packed form here (WeightNorm and Cosine layers, ghost-batch BN, Batch Renorm, FRN, EvoNorm,
Switchable, RMS on images, GN on rows, PowerNorm, DyT, Derf, LSTM and GRU, cells with a norm inside) is
wrapped in `PerMember`: each member's own module applied to its own slice. That is exact by construction
(the member's code runs on the member's data) and packs everything around it. BN on tokens
(`TokenBatchNorm`) keeps the members' own layers too, and runs them as one kernel call where no mask is
given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normbench.models import cells
from normbench.norms import batch_stats
from normbench.norms.batch import BatchNorm, train_dense
from normbench.norms.common import TokenWise, check_batch_values
from normbench.pack.linear import batched_linear
from normbench.pack.rnn import PackedRNN


def to_layout(x: torch.Tensor, have: str, want: str, members: int) -> torch.Tensor:
    """Move activations between the "m" (S, N, C, ...) and "c" (N, S*C, ...) layouts."""
    if have == want or "any" in (have, want):
        return x
    if want == "c":  # (S, N, C, H, W) -> (N, S*C, H, W)
        return x.transpose(0, 1).flatten(1, 2)
    n = x.shape[0]  # (N, S*C, H, W) -> (S, N, C, H, W)
    return x.view(n, members, -1, *x.shape[2:]).transpose(0, 1)


def _stack(tensors, dim: int = 0) -> torch.Tensor:
    return torch.stack([t.detach() for t in tensors], dim)


def _cat(tensors) -> torch.Tensor:
    return torch.cat([t.detach() for t in tensors])


class PerMember(nn.Module):
    """Each member's own module on its own slice of "m"-layout activations (and of the mask, if any).
    `steps` (one int per member, set by the pack while a batch is out) trims a sequence to the length the
    member's own batch was padded to, for norms whose statistics count padding."""

    layout = "m"

    def __init__(self, modules: list[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(modules)
        self.steps: list[int] | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        steps, outs = self.steps, []
        for k, module in enumerate(self.members):
            xk, mk = x[k], None if mask is None else mask[k]
            if steps is not None and steps[k] < x.shape[2]:
                y = module(xk[:, :steps[k]], None if mk is None else mk[:, :steps[k]])
                outs.append(torch.cat([y, y.new_zeros(y.shape[0], x.shape[2] - steps[k], *y.shape[2:])], 1))
            else:
                outs.append(module(xk) if mask is None else module(xk, mk))
        return torch.stack(outs)


class TokenBatchNorm(PerMember):
    """S BatchNorms on tokens (S, N, T, C), the members' own layers (as PerMember: their parameters and
    running statistics are theirs). Without a mask, one kernel call over the S*C channels of their
    concatenated scale, shift and running statistics, the statistics written back after a training call;
    with a mask, members padded to different lengths (`steps`), ghost batches (an evaluation pass sets them)
    or PreciseBN's sink, each member's own layer in turn. (A split eps is never converted: `convert` leaves
    it to PerMember.)"""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        ms = self.members
        if mask is not None or self.steps is not None or not self._plain():
            return super().forward(x, mask)
        s, n, t, c = x.shape
        first = ms[0]
        if first.training:
            check_batch_values(x[0].reshape(-1, c), "BatchNorm")  # as each member's own call reports it
        rows = x.permute(1, 2, 0, 3).reshape(n * t, s * c)
        weight = None if first.weight is None else torch.cat([m.weight for m in ms])
        bias = None if first.bias is None else torch.cat([m.bias for m in ms])
        mean, var = torch.cat([m.running_mean for m in ms]), torch.cat([m.running_var for m in ms])
        y = F.batch_norm(rows, mean, var, weight, bias, first.training, first.momentum if first.training else 0.0,
                         first.eps)
        if first.training:
            with torch.no_grad():
                for m, m_mean, m_var in zip(ms, mean.split(c), var.split(c)):
                    m.running_mean.copy_(m_mean)
                    m.running_var.copy_(m_var)
                    m.num_batches_tracked.add_(1)
        return y.view(n, t, s, c).permute(2, 0, 1, 3)

    def _plain(self) -> bool:
        """Every member a plain BN now: no ghost batches set for an evaluation pass, no PreciseBN sink."""
        return all(_is_plain_bn(m, "seq") and m.stats_sink is None for m in self.members)


class Elementwise(nn.Module):
    """A module without parameters that acts on each value alone (ReLU, dropout, identity): any layout."""

    layout = "any"

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.module(x)


class PackedLinear(nn.Module):
    """S linears as one batched matmul: weight (S, out, in), bias (S, 1, out); "m" layout."""

    layout = "m"

    def __init__(self, modules: list[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(_stack([m.weight for m in modules]))
        self.bias = None if modules[0].bias is None else nn.Parameter(_stack([m.bias for m in modules])[:, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return batched_linear(x, self.weight, self.bias)

    def unpack(self, modules: list[nn.Linear]) -> None:
        for k, m in enumerate(modules):
            m.weight.copy_(self.weight[k])
            if m.bias is not None:
                m.bias.copy_(self.bias[k, 0])


class PackedConv2d(nn.Module):
    """S convolutions as one grouped convolution over S*C channels; "c" layout."""

    layout = "c"

    def __init__(self, modules: list[nn.Conv2d]):
        super().__init__()
        m = modules[0]
        self.stride, self.padding, self.dilation = m.stride, m.padding, m.dilation
        self.groups = m.groups * len(modules)
        self.weight = nn.Parameter(_cat([m.weight for m in modules]))
        self.bias = None if m.bias is None else nn.Parameter(_cat([m.bias for m in modules]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def unpack(self, modules: list[nn.Conv2d]) -> None:
        for w, m in zip(self.weight.chunk(len(modules)), modules):
            m.weight.copy_(w)
        if self.bias is not None:
            for b, m in zip(self.bias.chunk(len(modules)), modules):
                m.bias.copy_(b)


def _affine(modules, packed: nn.Module, weight: str = "weight", bias: str = "bias") -> None:
    """Concatenate the members' per-channel scale and shift onto `packed` (None when not affine)."""
    w, b = getattr(modules[0], weight), getattr(modules[0], bias)
    packed.weight = None if w is None else nn.Parameter(_cat([getattr(m, weight) for m in modules]))
    packed.bias = None if b is None else nn.Parameter(_cat([getattr(m, bias) for m in modules]))


def _unpack_affine(packed: nn.Module, modules, weight: str = "weight", bias: str = "bias") -> None:
    for name, own in ((weight, "weight"), (bias, "bias")):
        stacked = getattr(packed, own)
        if stacked is not None:
            for part, m in zip(stacked.chunk(len(modules)), modules):
                getattr(m, name).copy_(part)


class PackedBatchNorm(batch_stats.BatchStatistics, nn.Module):
    """S BatchNorms as one over S*C channels: in training the members' own code (`norms.batch.train_dense`)
    over all their channels at once, running statistics updated in place. "c" layout for images; flat
    (S, N, C) features are moved to (N, S*C) and back. Its `ghost_batch` is set by
    norm_modes.split_statistics only: packs train ghost-batch BN per member. The members' `eps_grad` (one
    value: a pack's members differ in seed and lr only) splits its training output as theirs does."""

    def __init__(self, modules: list[BatchNorm]):
        super().__init__()
        m = modules[0]
        self.layout = "c" if m.layout == "image" else "m"
        self.eps, self.momentum, self.eps_grad = m.eps, m.momentum, m.eps_grad
        _affine(modules, self)
        self.register_buffer("running_mean", _cat([m.running_mean for m in modules]))
        self.register_buffer("running_var", _cat([m.running_var for m in modules]))
        self.register_buffer("num_batches_tracked", m.num_batches_tracked.detach().clone())

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        flat = self.layout == "m"
        if flat:  # (S, N, C) -> (N, S*C)
            s, n, c = x.shape
            x = x.transpose(0, 1).reshape(n, s * c)
        if self.training:
            y = train_dense(self, x, self.groups(x, "BatchNorm"))
        else:
            y = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, self.momentum,
                             self.eps)
        return y.view(n, s, c).transpose(0, 1) if flat else y

    def unpack(self, modules: list[BatchNorm]) -> None:
        _unpack_affine(self, modules)
        for k, m in enumerate(modules):
            m.running_mean.copy_(self.running_mean.chunk(len(modules))[k])
            m.running_var.copy_(self.running_var.chunk(len(modules))[k])
            m.num_batches_tracked.copy_(self.num_batches_tracked)

    def repack_buffers(self, modules: list[BatchNorm]) -> None:
        """The members' running statistics back into the stacked ones (`unpack`'s reverse for them)."""
        self.running_mean.copy_(_cat([m.running_mean for m in modules]))
        self.running_var.copy_(_cat([m.running_var for m in modules]))
        self.num_batches_tracked.copy_(modules[0].num_batches_tracked)


class PackedGroupNorm(nn.Module):
    """S GroupNorms on images (LayerNorm's image form included: one group) as one with S*G groups; "c"."""

    layout = "c"

    def __init__(self, modules: list[nn.GroupNorm]):
        super().__init__()
        self.groups, self.eps = modules[0].num_groups * len(modules), modules[0].eps
        _affine(modules, self)

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)

    def unpack(self, modules: list[nn.GroupNorm]) -> None:
        _unpack_affine(self, modules)


class PackedFeatureNorm(nn.Module):
    """S LayerNorms or RMSNorms over the last dim (rows, or each token): torch's kernel, then each member's
    own scale (and LayerNorm's shift), stored (S, C) and broadcast over (S, N, [T,] C); "m" layout. Their
    statistics are each token's own, so members never mix."""

    layout = "m"

    def __init__(self, modules: list[nn.LayerNorm | nn.RMSNorm]):
        super().__init__()
        m = modules[0]
        self.rms = isinstance(m, nn.RMSNorm)
        self.shape, self.eps = m.normalized_shape, m.eps
        self.weight = None if m.weight is None else nn.Parameter(_stack([k.weight for k in modules]))
        bias = getattr(m, "bias", None)  # RMSNorm has none
        self.bias = None if bias is None else nn.Parameter(_stack([k.bias for k in modules]))

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        y = F.rms_norm(x, self.shape, eps=self.eps) if self.rms else F.layer_norm(x, self.shape, eps=self.eps)
        if self.weight is None:
            return y
        view = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        if self.bias is None:
            return y * self.weight.view(view)
        return torch.addcmul(self.bias.view(view), y, self.weight.view(view))

    def unpack(self, modules: list[nn.Module]) -> None:
        """Into the members' nn.LayerNorm or nn.RMSNorm, or the one a TokenWise wraps."""
        for k, m in enumerate(getattr(m, "norm", m) for m in modules):
            if m.weight is not None:
                m.weight.copy_(self.weight[k])
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(self.bias[k])


class PackedMaxPool2d(nn.Module):
    layout = "c"

    def __init__(self, modules: list[nn.MaxPool2d]):
        super().__init__()
        self.pool = modules[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class PackedFlatten(nn.Module):
    """nn.Flatten of each member: (S, N, ...) -> (S, N, features)."""

    layout = "m"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], x.shape[1], -1)


def _is_plain_bn(m: nn.Module, *layouts: str) -> bool:
    return (type(m) is BatchNorm and m.ghost_batch is None and m.positions is None and m.momentum is not None
            and m.track_running_stats and m.layout in (layouts or ("flat", "image")))


def convert(modules: list[nn.Module]) -> nn.Module:
    """The packed form of S members' copies of one layer; `PerMember` where there is none."""
    m = modules[0]
    kind = type(m)
    if kind is nn.Linear:
        return PackedLinear(modules)
    if kind is nn.Conv2d and m.padding_mode == "zeros":
        return PackedConv2d(modules)
    if kind is nn.Flatten and m.start_dim == 1 and m.end_dim == -1:
        return PackedFlatten()
    if kind is nn.MaxPool2d:
        return PackedMaxPool2d(modules)
    if isinstance(m, (nn.ReLU, nn.GELU, nn.Identity, nn.Dropout, cells.Passthrough)):
        return Elementwise(m)
    if _is_plain_bn(m):
        return PackedBatchNorm(modules)
    if _is_plain_bn(m, "seq") and m.eps_grad is None:
        return TokenBatchNorm(modules)
    if kind is nn.GroupNorm:
        return PackedGroupNorm(modules)
    if kind in (nn.LayerNorm, nn.RMSNorm) and len(m.normalized_shape) == 1:
        return PackedFeatureNorm(modules)
    if kind is TokenWise and type(m.norm) in (nn.LayerNorm, nn.RMSNorm) and len(m.norm.normalized_shape) == 1:
        return PackedFeatureNorm([t.norm for t in modules])
    if PackedRNN.takes(m):
        return PackedRNN(modules)
    return PerMember(modules)


@torch.no_grad()
def unpack_into(packed: nn.Module, modules: list[nn.Module]) -> None:
    """Copy a packed layer's state back into each member's module (a PerMember's are the members' own)."""
    if hasattr(packed, "unpack"):
        packed.unpack(modules)
