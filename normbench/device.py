"""Where a run computes: the device `auto` picks, and the compiled / autocast forward of the training step.

    device = pick_device("auto")                          # cuda > mps > cpu
    forward, autocast = accelerate(model, cfg, device)    # torch.compile and bf16 autocast when asked
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from normbench.config import Config
from normbench.errors import UserError


def pick_device(name: str) -> torch.device:
    """`auto` prefers cuda, then mps, then cpu; asking for one that is missing is a user error."""
    has = {"cuda": torch.cuda.is_available(),
           "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(),
           "cpu": True}
    if name == "auto":
        return torch.device(next(d for d in ("cuda", "mps", "cpu") if has[d]))
    if name not in has:
        raise UserError(f"unknown device {name!r}", "use device=auto, cpu, cuda or mps")
    if not has[name]:
        raise UserError(f"device={name} but no {name.upper()} device is available here", "use device=auto or cpu")
    return torch.device(name)


def accelerate(model: nn.Module, cfg: Config, device: torch.device):
    """(forward, autocast) for the training step: the model, compiled when `cfg.compile`; a bf16
    autocast context when `cfg.amp`, else a no-op one. Both are reused every step."""
    if device.type == "cuda":
        # Fixed input shapes, so cuDNN's one-time algorithm search pays off from the first epoch.
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
        if cfg.amp and not torch.cuda.is_bf16_supported():
            raise UserError(f"amp=true computes in bf16, which {torch.cuda.get_device_name()} does not support",
                            "set amp=false")
    forward = torch.compile(model) if cfg.compile else model
    # bf16 keeps fp32's exponent range, so no loss scaling is needed (unlike fp16).
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if cfg.amp else contextlib.nullcontext()
    return forward, autocast
