"""`optimizer=muon`: torch.optim.Muon on a model's hidden 2-D weights, AdamW on the rest, as Muon's
reference setup splits them (Jordan et al. 2024, kellerjordan.github.io/posts/muon; torch.optim.Muon).

    opt = MuonAdamW(model, cfg)              # lr: Muon's; aux_lr (null: lr): the AdamW group's
    opt.set_lrs([lr])                        # this step's schedule; the AdamW group follows in proportion

Which parameters Muon takes (`muon_split`): every 2-D weight of a layer, except the model's input layer's
(its first weight: the MLP's first linear, the RNN's W_ih of its first layer, the Transformer's token
embedding; a CNN's is a convolution) and its last (the classifier head). AdamW takes those two, every parameter that is not 2-D
(biases, norm gains and shifts, DyT's alpha, convolution filters: torch's Muon orthogonalizes matrices
only), and the model's own free parameters (the Transformer's position table, an embedding). A parameter
in neither group is an error, never silently left untrained.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.config import Config


def muon_split(model: nn.Module) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """(Muon's parameters, AdamW's), by name, as the module docstring says."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    weights = [n for n, p in named if p.dim() >= 2 and "." in n]  # a layer's, not the model's own (positions)
    matrices = [n for n in weights if dict(named)[n].dim() == 2]
    edges = {weights[0], matrices[-1]} if matrices else set()  # the input layer's weight, the head's
    muon = [(n, p) for n, p in named if n in matrices and n not in edges]
    adamw = [(n, p) for n, p in named if n not in {m for m, _ in muon}]
    if len(muon) + len(adamw) != len(named) or {id(p) for _, p in muon} & {id(p) for _, p in adamw}:
        raise ValueError("a parameter in neither or both of Muon's and AdamW's groups")
    return muon, adamw


class MuonAdamW:
    """Two torch optimizers stepped as one: Muon over `muon_split`'s matrices at `cfg.lr`, AdamW over the
    rest at `cfg.aux_lr` (null: cfg.lr), both with `cfg.weight_decay`. Its state_dict holds both."""

    def __init__(self, model: nn.Module, cfg: Config):
        muon, adamw = muon_split(model)
        self.ratio = (cfg.aux_lr if cfg.aux_lr is not None else cfg.lr) / cfg.lr
        self.muon = torch.optim.Muon([p for _, p in muon], lr=cfg.lr, weight_decay=cfg.weight_decay) if muon else None
        self.adamw = torch.optim.AdamW([p for _, p in adamw], lr=cfg.lr * self.ratio, weight_decay=cfg.weight_decay)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.muon, self.adamw) if o is not None]

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers for g in o.param_groups]

    def set_lrs(self, lrs: list[float]) -> None:
        """This step's lr (one member): Muon's, and AdamW's in the configured proportion to it."""
        for group in self.muon.param_groups if self.muon else ():
            group["lr"] = lrs[0]
        for group in self.adamw.param_groups:
            group["lr"] = lrs[0] * self.ratio

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict:
        return {"muon": None if self.muon is None else self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.muon is not None:
            self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
