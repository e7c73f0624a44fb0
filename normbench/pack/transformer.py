"""The packed form of `transformer.Transformer`: S members' encoders as one computation over (S, N, T, C).

    net = PackedTransformer(members)         # forward((S, N, C, H, W), lengths (S, N)) -> (S, N, classes)
    net.unpack(members)                      # each member's weights (and norm statistics) back

Every linear (embedding, q/k/v, output projection, MLP, classifier) is one batched matmul over the members
(pack/linear.py); attention is one scaled_dot_product_attention over S x N sequences, each member's padded
keys masked; LayerNorm is torch's kernel with each member's scale and shift (layers.PackedLayerNorm); every
other norm, and QK-norms other than LN, stay each member's own module (layers.PerMember), which is exact by
construction. The forward is `Transformer.forward` line for line, with a member axis in front.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normbench.pack.layers import PackedLinear, convert, unpack_into
from normbench.transformer import Block, Transformer, image_tokens, positions_for


class Positions(nn.Module):
    """The members' learned position tables, (S, MAX_TOKENS, C): a module of its own, after the embedding,
    so the pack's first weight matrix is the embedding's, as a member's is (first_layer_grad_ratio)."""

    def __init__(self, members: list[Transformer]):
        super().__init__()
        self.table = nn.Parameter(torch.stack([m.positions.detach() for m in members]))

    def forward(self, t: int, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return positions_for(self.table, t, lengths)


class PackedBlock(nn.Module):
    def __init__(self, blocks: list[Block]):
        super().__init__()
        first = blocks[0]
        self.heads, self.pre, self.qk = first.heads, first.pre, first.qk
        self.attn_norm, self.mlp_norm = (convert([getattr(b, name) for b in blocks]) for name in ("attn_norm", "mlp_norm"))
        self.qkv, self.proj = PackedLinear([b.qkv for b in blocks]), PackedLinear([b.proj for b in blocks])
        self.fc1, self.fc2 = PackedLinear([b.mlp[0] for b in blocks]), PackedLinear([b.mlp[2] for b in blocks])
        self.act = first.mlp[1]
        if self.qk:
            self.q_norm, self.k_norm = convert([b.q_norm for b in blocks]), convert([b.k_norm for b in blocks])

    def attend(self, z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        s, n, t, d = z.shape
        h = self.heads
        q, k, v = self.qkv(z).view(s, n, t, 3, h, d // h).permute(3, 0, 1, 4, 2, 5)  # (S, N, heads, T, d/heads)
        if self.qk:  # each member's norm on its (N * heads, T, d/heads) head vectors
            q = self.q_norm(q.reshape(s, n * h, t, d // h)).view(q.shape)
            k = self.k_norm(k.reshape(s, n * h, t, d // h)).view(k.shape)
        keys = None if mask is None else mask.reshape(s * n, 1, 1, t)
        out = F.scaled_dot_product_attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), attn_mask=keys)
        return self.proj(out.transpose(1, 2).reshape(s, n, t, d))

    def mlp(self, z: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(z)))

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None, steps: list[int] | None) -> torch.Tensor:
        if self.pre:
            z = z + self.attend(self.attn_norm(z, mask, steps), mask)
            return z + self.mlp(self.mlp_norm(z, mask, steps))
        z = self.attn_norm(z + self.attend(z, mask), mask, steps)
        return self.mlp_norm(z + self.mlp(z), mask, steps)

    def unpack(self, blocks: list[Block]) -> None:
        for name in ("attn_norm", "mlp_norm", "qkv", "proj") + (("q_norm", "k_norm") if self.qk else ()):
            unpack_into(getattr(self, name), [getattr(b, name) for b in blocks])
        unpack_into(self.fc1, [b.mlp[0] for b in blocks])
        unpack_into(self.fc2, [b.mlp[2] for b in blocks])


class PackedTransformer(nn.Module):
    def __init__(self, members: list[Transformer]):
        super().__init__()
        first = members[0]
        self.patches = first.patches
        self.embed = PackedLinear([m.embed for m in members])
        self.positions = Positions(members)
        self.blocks = nn.ModuleList(PackedBlock([m.blocks[i] for m in members]) for i in range(len(first.blocks)))
        self.final = convert([m.final for m in members])
        self.dropout = first.dropout
        self.head = PackedLinear([m.head for m in members])
        self.steps: list[int] | None = None  # each member's padded length, when members' batches differ in it

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        s, n = x.shape[:2]
        seq = image_tokens(x.flatten(0, 1), self.patches)
        t = seq.shape[1]
        seq = seq.view(s, n, t, -1)
        mask = None if lengths is None else torch.arange(t, device=x.device) < lengths[..., None]  # (S, N, T)
        z = self.embed(seq) + self.positions(t, lengths)[:, None]
        for block in self.blocks:
            z = block(z, mask, self.steps)
        z = self.final(z, mask, self.steps)
        pooled = z.mean(2) if mask is None else (z * mask[..., None]).sum(2) / mask.sum(2, keepdim=True)
        return self.head(self.dropout(pooled))

    @torch.no_grad()
    def unpack(self, members: list[Transformer]) -> None:
        unpack_into(self.embed, [m.embed for m in members])
        for k, m in enumerate(members):
            m.positions.copy_(self.positions.table[k])
        for i, block in enumerate(self.blocks):
            block.unpack([m.blocks[i] for m in members])
        unpack_into(self.final, [m.final for m in members])
        unpack_into(self.head, [m.head for m in members])
