"""The optimizer of a pack whose members have their own learning rates (`pack.lrs`).

torch's optimizers take one scalar lr per parameter group, and a packed parameter holds every member's
slice. `MemberLR` is AdamW or SGD-with-momentum written as torch documents them (torch.optim.AdamW's and
torch.optim.SGD's algorithm boxes), with the learning rate a per-member tensor broadcast over each
parameter's member axis: a stacked (S, ...) or concatenated (S*C, ...) first dimension, or one member's own
parameter in a `PerMember` layer. The tests check it against separate runs with torch's fused optimizers.
A pack whose members share one lr trains with torch's fused optimizer itself (`optim.make_optimizer`).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from normbench.config import Config, Optimizer

_MEMBER = re.compile(r"\.members\.(\d+)\.")


def member_index(name: str, p: torch.Tensor, members: int) -> torch.Tensor | int:
    """Which member each row of `p` belongs to: an int for a member's own parameter, else (rows,) indices."""
    own = _MEMBER.search(f".{name}")
    if own:
        return int(own.group(1))
    return torch.arange(members, device=p.device).repeat_interleave(p.shape[0] // members)


class MemberLR(torch.optim.Optimizer):
    """AdamW (`cfg.optimizer=adam`) or SGD with momentum over a packed model; `set_lrs` each step."""

    def __init__(self, model: nn.Module, members: int, cfg: Config):
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        super().__init__([p for _, p in named], {"lr": 0.0})
        self.kind, self.cfg = cfg.optimizer, cfg
        self.index = [member_index(n, p, members) for n, p in named]
        self.lrs = torch.zeros(members, dtype=torch.float64)

    def set_lrs(self, lrs: list[float]) -> None:
        self.lrs = torch.tensor(lrs, dtype=torch.float64)

    def _lr(self, i: int, p: torch.Tensor) -> torch.Tensor | float:
        index = self.index[i]
        if isinstance(index, int):
            return float(self.lrs[index])
        return self.lrs.to(p.device, p.dtype)[index].view(-1, *([1] * (p.dim() - 1)))

    @torch.no_grad()
    def step(self, closure=None):
        cfg = self.cfg
        for i, p in enumerate(self.param_groups[0]["params"]):
            if p.grad is None:
                continue
            g, lr, state = p.grad, self._lr(i, p), self.state[p]
            if self.kind == Optimizer.adam:  # AdamW, betas (0.9, 0.999), eps 1e-8: torch's defaults
                b1, b2 = 0.9, 0.999
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * cfg.weight_decay)
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v.sqrt() / (1 - b2 ** t) ** 0.5).add_(1e-8)
                p.sub_(m / denom * (lr / (1 - b1 ** t)))
            else:  # SGD: momentum, no dampening, L2 weight decay added to the gradient
                if cfg.weight_decay:
                    g = g.add(p, alpha=cfg.weight_decay)
                if cfg.momentum:
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = g.clone()
                    else:
                        state["momentum_buffer"].mul_(cfg.momentum).add_(g)
                    g = state["momentum_buffer"]
                p.sub_(g * lr)
