"""The optimizer, its learning rate, and how that rate follows the step and the batch size.

    opt = make_optimizer(model, cfg)            # AdamW or SGD, one fused kernel for all parameters
    opt = make_member_optimizer(model, cfgs)    # ... or a pack's, its members with their own lrs; or Muon's
    lr_at = make_schedule(cfg, total_steps)     # step -> lr: warmup, then cosine or constant
    base = scaled_lr(cfg)                       # cfg.lr scaled from lr_ref_batch to batch_size
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from normbench.config import Config, LrScaling, Optimizer, Schedule
from normbench.pack.optim import MemberLR
from normbench.train.muon import MuonAdamW


def scaled_lr(cfg: Config) -> float:
    """`cfg.lr` scaled to `cfg.batch_size` from `cfg.lr_ref_batch`: linear (Goyal et al. 2017,
    arXiv 1706.02677, as the GroupNorm paper trains: lr = 0.1 x batch/32), sqrt (common for Adam), or none."""
    ratio = cfg.batch_size / cfg.lr_ref_batch
    return cfg.lr * {LrScaling.none: 1.0, LrScaling.linear: ratio, LrScaling.sqrt: math.sqrt(ratio)}[cfg.lr_scaling]


def make_optimizer(model: nn.Module, cfg: Config) -> torch.optim.Optimizer:
    params = list(model.parameters())
    # One fused kernel for all parameters instead of a Python loop over them (docs/performance.md
    # measures it at batch 2). Fused needs floating-point parameters on CPU/CUDA/MPS.
    fast = {"fused": True} if all(p.is_floating_point() and p.device.type in ("cpu", "cuda", "mps")
                                  for p in params) else {}
    if cfg.optimizer == Optimizer.adam:
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fast)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **fast)


def make_schedule(cfg: Config, total_steps: int) -> Callable[[int], float]:
    """step -> learning rate: linear warmup over `warmup_steps`, then constant or cosine decay to 0 at
    `total_steps`. A plain function of the step (as nanoGPT's get_lr), so resuming needs no scheduler
    state and a step costs no LRScheduler bookkeeping."""

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return cfg.lr * ((step + 1) / cfg.warmup_steps)
        if cfg.schedule == Schedule.constant:
            return cfg.lr
        progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
        return cfg.lr * (0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    return lr_at


def make_member_optimizer(model: nn.Module, cfgs: list[Config]) -> torch.optim.Optimizer:
    """The optimizer of a model's members (`cfgs[k]` is member k's): Muon with AdamW for one member
    (`optimizer=muon`: a pack of several trains them one after another, pack.plan), torch's fused one when
    they share one lr (a plain run always), `MemberLR` when a pack's members have their own."""
    if cfgs[0].optimizer == Optimizer.muon:
        (net,) = model.member_models  # pack.plan never packs Muon's members: its matrices are each member's
        return MuonAdamW(net, cfgs[0])
    if len({c.lr for c in cfgs}) == 1:
        return make_optimizer(model, cfgs[0])
    return MemberLR(model, len(cfgs), cfgs[0])


def set_lrs(opt: torch.optim.Optimizer, lrs: list[float]) -> None:
    """This step's learning rate, one per member."""
    if isinstance(opt, (MemberLR, MuonAdamW)):
        opt.set_lrs(lrs)
        return
    for group in opt.param_groups:
        group["lr"] = lrs[0]
