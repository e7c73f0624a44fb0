"""A small Transformer encoder over FashionMNIST/CIFAR-10 images, `model=transformer`.

    tokens (image rows, or 4 x 4 patches) -> linear embedding + learned positions
    -> depth x [multi-head self-attention, MLP (2 x width, GELU)], each a residual branch
    -> the mean of the real tokens' outputs -> dropout -> linear classifier

`model.placement` puts the norm where the two conventions do (Xiong et al. 2020, arXiv 2002.04745), or
around each sublayer (Peri-LN):
- `pre`: x + f(norm(x)) for each sublayer f, and a final norm before the pooling (GPT-2, ViT);
- `post`: norm(x + f(x)) after each residual sum, no final norm (the original Transformer, BERT);
- `peri`: x + norm_out(f(norm_in(x))), two norms of their own per sublayer, on its input and on its output
  before the residual add, and a final norm before the pooling (Peri-LN: Kim et al., ICML 2025, arXiv
  2502.02732; Gemma 2/3, OLMo 2). What this follows, found with the search tool (the paper's text was
  not in the store, only secondary summaries of it, which agree): the block equation, the final norm on the
  last block's output ("final normalization", as pre-LN's), and no norm on the embedding: the paper marks its
  initial embedding normalization optional, and leaving it out keeps peri different from pre in exactly
  the output norms.
`model.qk_norm=ln` (or rms, dyt) normalizes each head's queries and keys over the head's features before
their dot products (QK-layernorm: Dehghani et al. 2023, arXiv 2302.05442; Wortsman et al. 2023, arXiv
2309.14322), whatever `norm` is; `none` leaves them as they are.

Every norm comes from the catalog on the "seq" layout and gets the padding mask, so with variable
lengths a padded token enters neither attention (keys are masked), nor any norm's statistics, nor the
pooling. The positions are a learned table of `MAX_TOKENS`, so sequences up to that length (past the
trained one too) have positions to read; padding past it (heavy padding of short sequences) gets none, as
nothing reads it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from normbench import norms
from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.models import cells
from normbench.norms import NormFactory

MAX_TOKENS = 64  # the learned position table's length
PATCH = 4  # model.tokens=patches: 4 x 4 pixels a token
MLP_RATIO = 2  # the MLP's hidden width over the model's (ViT and BERT use 4; with 2 a default run took 180 s here)


def image_tokens(x: torch.Tensor, patches: bool) -> torch.Tensor:
    """(N, C, H, W) -> (N, T, features): rows (T = H), or 4 x 4 patches in raster order."""
    n, c, h, w = x.shape
    if patches:
        return F.unfold(x, PATCH, stride=PATCH).transpose(1, 2)
    return x.permute(0, 2, 1, 3).reshape(n, h, c * w)


def positions_for(table: torch.Tensor, t: int, lengths: torch.Tensor | None) -> torch.Tensor:
    """The first `t` rows of a learned position table (..., MAX_TOKENS, C); padding past the table (heavy
    padding of short sequences) gets zeros, as nothing reads it. More than MAX_TOKENS real tokens is a
    user error: they would have no positions. A plain model and a pack (one table per member) share this."""
    if t <= MAX_TOKENS:
        return table[..., :t, :]
    longest = t if lengths is None else int(lengths.max())  # a host sync only past the table
    if longest > MAX_TOKENS:
        raise UserError(f"{longest} tokens is more than the transformer's {MAX_TOKENS} learned positions",
                        "use shorter sequences, or model.tokens=rows")
    return F.pad(table, (0, 0, 0, t - MAX_TOKENS))


def placements(placement: str, depth: int, mix_ratio: float | None = None) -> list[str]:
    """Each block's placement: one for all, or under Mix-LN (Li et al., ICLR 2025, arXiv 2412.13795)
    post-LN in the first floor(mix_ratio x depth) blocks (0.25 of them by default) and pre-LN in the rest."""
    if placement != "mix":
        return [placement] * depth
    post = math.floor((0.25 if mix_ratio is None else mix_ratio) * depth)
    return ["post"] * post + ["pre"] * (depth - post)


class Block(nn.Module):
    """One encoder block: attention then MLP, each a residual branch with its norm before (pre), after the
    residual sum (post), or a norm on its input and another on its output before the sum (peri). `scale`
    multiplies the norms on the branches' inputs: 1/sqrt(l) in block l under LayerNorm Scaling (Sun et al.
    2025, arXiv 2502.05795), 1 otherwise."""

    member_axis = True  # its forward indexes from the end: a pack may swap its layers (normbench.pack)

    def __init__(self, width: int, heads: int, make: NormFactory, placement: str = "pre", qk_norm: str = "none",
                 scale: float = 1.0):
        super().__init__()
        self.heads, self.placement, self.scale = heads, placement, scale
        self.attn_norm, self.mlp_norm = make(width, "seq"), make(width, "seq")  # pre and peri: on the input
        if placement == "peri":  # on the sublayer's output, before the residual add
            self.attn_out_norm, self.mlp_out_norm = make(width, "seq"), make(width, "seq")
        self.qk = qk_norm != "none"
        if self.qk:  # one norm over the head's features, shared by the heads (as the papers' QK-layernorm)
            self.q_norm, self.k_norm = (norms.create(qk_norm, width // heads, "seq") for _ in range(2))
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, MLP_RATIO * width), nn.GELU(), nn.Linear(MLP_RATIO * width, width))

    def attend(self, z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        *lead, t, d = z.shape  # lead: (N,), or (S, N) in a pack
        h = self.heads
        q, k, v = self.qkv(z).view(-1, t, 3, h, d // h).permute(2, 0, 3, 1, 4)  # each (N, heads, T, d/heads)
        if self.qk:  # each token's head vector on its own (batch-free norms only), as (..., N * heads, T, d/heads)
            q = self.q_norm(q.reshape(*lead[:-1], -1, t, d // h)).view(q.shape)
            k = self.k_norm(k.reshape(*lead[:-1], -1, t, d // h)).view(k.shape)
        keys = None if mask is None else mask.reshape(-1, 1, 1, t)  # True: a real token, attended to
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keys)
        return self.proj(out.transpose(1, 2).reshape(*lead, t, d))

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        s = self.scale
        if self.placement == "pre":
            z = z + self.attend(self.attn_norm(z, mask) * s, mask)
            return z + self.mlp(self.mlp_norm(z, mask) * s)
        if self.placement == "peri":
            z = z + self.attn_out_norm(self.attend(self.attn_norm(z, mask) * s, mask), mask)
            return z + self.mlp_out_norm(self.mlp(self.mlp_norm(z, mask) * s), mask)
        z = self.attn_norm(z + self.attend(z, mask), mask)
        return self.mlp_norm(z + self.mlp(z), mask)


class Transformer(nn.Module):
    member_axis = True  # its forward indexes from the end: a pack may swap its layers (normbench.pack)

    @staticmethod
    def check(cfg: ModelConfig, make: NormFactory) -> None:
        """Its options against each other and the norm, before any data is read (`models.validate`)."""
        if cfg.placement not in ("pre", "post", "peri", "mix"):
            raise UserError(f"model.placement={cfg.placement} is an RNN's; the transformer puts its norms pre, post, "
                            "peri or mix", "use model.placement=pre, post, peri or mix")
        if cfg.placement == "mix" and not 0 <= (cfg.mix_ratio if cfg.mix_ratio is not None else 0.25) <= 1:
            raise UserError(f"model.mix_ratio={cfg.mix_ratio} is not a fraction of the blocks", "use e.g. model.mix_ratio=0.25")
        if cfg.layer_scaling and cfg.placement == "post":
            raise UserError("model.layer_scaling scales the norms on the residual branches' inputs, and post-LN has "
                            "none (its norm is the residual stream itself)", "use model.placement=pre, peri or mix")
        if cfg.hidden % cfg.heads:
            raise UserError(f"model.hidden={cfg.hidden} does not split into model.heads={cfg.heads} heads",
                            f"choose heads that divide {cfg.hidden}, e.g. model.heads=4")
        if make.reparameterizes:
            raise UserError(f"{make.name} reparameterizes the layer before it, and the transformer's layers are "
                            "attention and MLP projections it does not build through the norm",
                            "use a norm on the tokens: ln, rms, dyt, bn, none, ...")
        qk_norm = (cfg.qk_norm or "none").lower()
        free = norms.batch_free_names(["seq"], own_layer=True)
        if qk_norm != "none" and qk_norm not in free:
            raise UserError(f"model.qk_norm={cfg.qk_norm} is not a batch-free norm on tokens (a query's or key's "
                            "head vector is normalized on its own)", f"use one of: none, {', '.join(free)}")

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        c, h, w = in_shape
        width, heads = cfg.hidden, cfg.heads
        qk_norm = (cfg.qk_norm or "none").lower()
        self.patches = cfg.tokens == "patches"
        if self.patches and (h % PATCH or w % PATCH):
            raise UserError(f"{h}x{w} images do not split into {PATCH}x{PATCH} patches", "use model.tokens=rows")
        self.embed = nn.Linear(c * PATCH * PATCH if self.patches else c * w, width)
        self.positions = nn.Parameter(torch.randn(MAX_TOKENS, width) * 0.02)
        places = placements(str(cfg.placement), cfg.depth, cfg.mix_ratio)
        scales = [1 / math.sqrt(layer) if cfg.layer_scaling else 1.0 for layer in range(1, cfg.depth + 1)]
        self.blocks = nn.ModuleList(Block(width, heads, make, p, qk_norm, s) for p, s in zip(places, scales))
        self.final = make(width, "seq") if places and places[-1] in ("pre", "peri") else cells.Passthrough()
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(width, num_classes)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        return image_tokens(x, self.patches)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        if lengths is not None and self.patches:
            raise UserError("variable lengths count image rows, and model.tokens=patches makes tokens of 4 x 4 "
                            "patches", "use model.tokens=rows with variable lengths")
        *lead, c, h, w = x.shape  # lead: (N,), or (S, N) in a pack
        seq = self.tokens(x.reshape(-1, c, h, w))
        t = seq.shape[1]
        seq = seq.view(*lead, t, -1)
        mask = None if lengths is None else torch.arange(t, device=x.device) < lengths[..., None]
        z = self.embed(seq) + positions_for(self.positions, t, lengths).unsqueeze(-3)  # each sample's tokens
        for block in self.blocks:
            z = block(z, mask)
        z = self.final(z, mask)
        pooled = z.mean(-2) if mask is None else (z * mask[..., None]).sum(-2) / mask.sum(-1, keepdim=True)
        return self.head(self.dropout(pooled))
