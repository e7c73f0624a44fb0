"""The optimizer of a pack whose members have their own learning rates (`pack.lrs`).

torch's optimizers take one scalar lr per parameter group, and a packed parameter holds every member's
slice: a stacked (S, ...) or concatenated (S*C, ...) first dimension, or one member's own parameter in a
`PerMember` layer. `MemberLR` is AdamW or SGD with momentum (torch.optim.AdamW's and torch.optim.SGD's
algorithms, torch's defaults) that steps each member's slices of all parameters through torch's own fused
kernel (`fused_sgd`, `fused_adamw`: the kernels `torch.optim.SGD(fused=True)` and `AdamW(fused=True)` run)
with that member's lr, so a member's update is computed as its separate run's is. Where torch has no fused
kernel (a dtype or device it does not cover) the same update goes through torch's functional `sgd` /
`adamw`. tests/test_pack.py checks the fused path against separate runs with torch's fused optimizers, and
tests/test_pack_optim.py both paths against torch's unfused ones, member by member.
A pack whose members share one lr trains with torch's fused optimizer itself (`optim.make_optimizer`).

The state is the packed parameters' (one stacked momentum buffer, or AdamW's moments and a step count per
member, per parameter), so a checkpoint holds it whole. The members' views of the parameters and of the
state are cut once and kept; only the gradients, new every step, are cut each step: cutting everything
each step is a loop of small ops per parameter, a third of a batch-2 step (docs/performance.md).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn
from torch.optim.adamw import adamw
from torch.optim.sgd import sgd

from normbench.config import Config, Optimizer

_MEMBER = re.compile(r"\.members\.(\d+)\.")
BETAS, EPS = (0.9, 0.999), 1e-8  # AdamW's: torch's defaults


def member_of(name: str) -> int | None:
    """The member a `PerMember` layer's own parameter belongs to; None for a packed (stacked) parameter."""
    own = _MEMBER.search(f".{name}")
    return int(own.group(1)) if own else None


class MemberLR(torch.optim.Optimizer):
    """AdamW (`cfg.optimizer=adam`) or SGD with momentum over a packed model; `set_lrs` each step."""

    def __init__(self, model: nn.Module, members: int, cfg: Config, fused: bool | None = None):
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        super().__init__([p for _, p in named], {"lr": 0.0})
        self.cfg, self.members = cfg, members
        self.adam = cfg.optimizer == Optimizer.adam
        self.owner = [member_of(n) for n, _ in named]
        self.fused = fused if fused is not None else all(
            p.is_floating_point() and p.device.type in ("cpu", "cuda", "mps") for _, p in named)
        self.lrs = [0.0] * members
        self._cut: dict[int, tuple] = {}  # id(tensor) -> (tensor, its storage's address, its members' views)

    def set_lrs(self, lrs: list[float]) -> None:
        self.lrs = [float(lr) for lr in lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._cut.clear()  # the state is new tensors
        for p in self.param_groups[0]["params"]:  # torch leaves "step" where the checkpoint was loaded (the CPU)
            step = self.state.get(p, {}).get("step")
            if torch.is_tensor(step):
                self.state[p]["step"] = step.to(p.device, torch.float32)

    def _views(self, i: int, t: torch.Tensor, keep: bool = True) -> list[torch.Tensor | None]:
        """Parameter i's tensor `t` (the parameter, its gradient or its state) as each member's view
        (None for the members a `PerMember` parameter is not theirs); kept unless `keep` is False."""
        own = self.owner[i]
        if own is not None:
            return [t if k == own else None for k in range(self.members)]
        hit = self._cut.get(id(t))
        if hit is not None and hit[0] is t and hit[1] == t.data_ptr():  # the same tensor, the same storage
            return hit[2]
        views = list(t.chunk(self.members, 0))
        if keep:
            self._cut[id(t)] = (t, t.data_ptr(), views)
        return views

    def _state(self, i: int, p: torch.Tensor) -> list[torch.Tensor]:
        """Parameter i's state tensors, created on its first step: AdamW's moments and step counts (one
        per member), or SGD's momentum buffer (m * 0 + g: its first step's buffer is g, as torch's)."""
        state = self.state[p]
        if self.adam:
            if not state:
                state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
            if not torch.is_tensor(state["step"]):  # a checkpoint from before this kept one int
                rows = 1 if self.owner[i] is not None else self.members
                state["step"] = torch.full((rows,), float(state["step"]), dtype=torch.float32, device=p.device)
            return [state["exp_avg"], state["exp_avg_sq"], state["step"]]
        if not self.cfg.momentum:
            return []
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        return [state["momentum_buffer"]]

    @torch.no_grad()
    def step(self, closure=None):
        per_member: list[list[list[torch.Tensor]]] = [[] for _ in range(self.members)]
        for i, p in enumerate(self.param_groups[0]["params"]):
            if p.grad is None:
                continue
            cut = [self._views(i, p), self._views(i, p.grad, keep=False)]
            cut += [self._views(i, t) for t in self._state(i, p)]
            for k in range(self.members):
                if cut[0][k] is None:
                    continue
                if not per_member[k]:
                    per_member[k] = [[] for _ in cut]
                for lst, views in zip(per_member[k], cut):
                    lst.append(views[k])
        for k, lists in enumerate(per_member):
            if lists:
                (self._adamw if self.adam else self._sgd)(lists, self.lrs[k])

    def _sgd(self, lists: list[list[torch.Tensor]], lr: float) -> None:
        """SGD: momentum, no dampening, L2 weight decay added to the gradient."""
        params, grads, bufs = lists[0], lists[1], (lists[2] if len(lists) > 2 else [])
        if self.fused:
            fused_sgd(params, grads, bufs, lr=lr, momentum=self.cfg.momentum, weight_decay=self.cfg.weight_decay)
        else:
            sgd(params, grads, bufs or [None] * len(params), foreach=False, weight_decay=self.cfg.weight_decay,
                momentum=self.cfg.momentum, lr=lr, dampening=0.0, nesterov=False, maximize=False)

    def _adamw(self, lists: list[list[torch.Tensor]], lr: float) -> None:
        """AdamW at torch's defaults; each member's step count is its own tensor."""
        params, grads, m, v, steps = lists
        steps = [s.view(()) for s in steps]
        if self.fused:
            fused_adamw(params, grads, m, v, steps, lr=lr, weight_decay=self.cfg.weight_decay)
        else:
            adamw(params, grads, m, v, [], steps, foreach=False, amsgrad=False, lr=lr, beta1=BETAS[0],
                  beta2=BETAS[1], weight_decay=self.cfg.weight_decay, eps=EPS, maximize=False)


# torch's fused optimizer kernels, called directly: torch.optim's public functional `sgd(fused=True)` and
# `adamw(fused=True)` run the same kernels after grouping the tensors by device and dtype in Python, a cost
# paid once per member per step here (docs/performance.md, "Optimizer"). The kernels are private to torch,
# so each is called in one place, below, and tests/test_private_apis.py checks both against
# torch.optim.SGD(fused=True) and AdamW(fused=True) bit for bit. torch >= 2.4: their CPU implementations.

def fused_sgd(params: list[torch.Tensor], grads: list[torch.Tensor], bufs: list[torch.Tensor], *, lr: float,
              momentum: float, weight_decay: float) -> None:
    """One SGD step (no dampening, L2 weight decay added to the gradient) of `params` through
    `torch._fused_sgd_`. `bufs`: the momentum buffers, or [] without momentum; never a first step (the
    buffers start at zeros, and m * 0 + g is the g torch's first step takes)."""
    torch._fused_sgd_(params, grads, bufs, weight_decay=weight_decay, momentum=momentum, lr=lr, dampening=0.0,
                      nesterov=False, maximize=False, is_first_step=False)


def fused_adamw(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                exp_avg_sqs: list[torch.Tensor], steps: list[torch.Tensor], *, lr: float,
                weight_decay: float) -> None:
    """One AdamW step (torch's betas and eps) of `params` through `torch._fused_adamw_`; `steps` (one
    0-d float tensor per parameter) counted first, as torch's fused AdamW counts them."""
    torch._foreach_add_(steps, 1)
    torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=lr, beta1=BETAS[0],
                        beta2=BETAS[1], weight_decay=weight_decay, eps=EPS, maximize=False)
