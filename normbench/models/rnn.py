"""The RNN classifier: image rows as time steps, a recurrent stack built from a norm constructor.

    model = RNN(ModelConfig(name="rnn"), norms.factory("ln"), in_shape=(1, 28, 28), num_classes=10)
    logits = model(x, lengths)        # variable-length batches: right-padded rows, lengths (N,)

Its forward indexes from the end, so it runs unchanged over a leading member axis ((S, N, C, H, W),
lengths (S, N)) once a pack (normbench.pack) has swapped its layers for packed ones.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.config import ModelConfig
from normbench.models import cells
from normbench.norms import NormFactory


def length_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(..., N) lengths -> (..., N, steps) bool mask, True on real steps (sequences are right-padded)."""
    return torch.arange(steps, device=lengths.device) < lengths[..., None]


class RNN(nn.Module):
    """Image rows as time steps: depth x [recurrent layer -> norm on its outputs], then a
    linear classifier on the output at each sequence's last real step. With model.placement=recurrent the
    norm sits inside the cell at every step instead (LN-RNN, recurrent BN; see cells.py)."""

    @staticmethod
    def check(cfg: ModelConfig, make: NormFactory) -> None:
        """Its cell, placement and norm against each other, before any data is read (`models.validate`)."""
        cells.check(str(cfg.cell), str(cfg.placement), make)

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        c, _, w = in_shape
        size = c * w
        self.layers, self.norms = nn.ModuleList(), nn.ModuleList()
        for _ in range(cfg.depth):
            self.layers.append(cells.recurrent_layer(cfg.cell, size, cfg.hidden, make, cfg.placement))
            self.norms.append(make(cfg.hidden, "seq") if cfg.placement == "output" else cells.Passthrough())
            size = cfg.hidden
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(size, num_classes)

    member_axis = True  # its forward indexes from the end: a pack may swap its layers (normbench.pack)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        seq = x.transpose(-3, -2).flatten(-2)  # (N, C, H, W) -> (N, T=H, C*W)
        mask = None if lengths is None else length_mask(lengths, seq.shape[-2])
        for layer, norm in zip(self.layers, self.norms):
            seq = norm(layer(seq, mask), mask)
        if lengths is None:
            last = seq[..., -1, :]
        else:  # each sequence's last real step
            at = (lengths - 1)[..., None, None].expand(*lengths.shape, 1, seq.shape[-1])
            last = seq.gather(-2, at).squeeze(-2)
        return self.head(self.dropout(last))
