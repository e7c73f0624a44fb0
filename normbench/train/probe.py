"""`norm.track_stats=true`: watch what each norm layer receives and learns, in TensorBoard.

    probe = attach(model, tracker, every=100)   # the runner does this; any tracker (tracking.py) will do
    ...train...                                 # every 100 training steps: scalars per norm layer
    probe.remove()

Every `every` training steps, for each norm layer: the mean over channels of its input's per-channel mean
and standard deviation (the distribution shift the seeds discuss, before the norm removes it) and the mean
of each of its learned vectors (scale, shift, ...); every tenth time also histograms of those per-channel
values. Hooks exist only when this is on, so it costs nothing otherwise; when on, the hooks return at once
except on logged steps, the only ones that sync with the device. Steps count the model's training forward
passes (a resumed run counts from its restart).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from normbench.errors import UserError
from normbench.norms.registry import TAG

HISTOGRAM_EVERY = 10  # histograms on every tenth logged step: they are large in the event file
# Derf's own scalar `shift` (s in erf(alpha x + s)) is logged as "s", apart from the affine shift (its bias).
NAMES = {"weight": "scale", "bias": "shift", "shift": "s", "original0": "g", "weight_g": "g"}


def norm_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules a norm factory built, outermost only (a norm's own submodules are not separate layers)."""
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if hasattr(module, TAG) and not any(name.startswith(f"{outer}.") for outer, _ in found):
            found.append((name, module))
    return found


def channel_stats(x: torch.Tensor, layout: str, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std of a norm's input: over N (flat), N, H, W (image), real tokens (seq)."""
    if layout == "image":
        rows = x.transpose(0, 1).reshape(x.shape[1], -1).t()
    elif layout == "seq":
        rows = x[mask] if mask is not None else x.reshape(-1, x.shape[-1])
    else:
        rows = x
    rows = rows.float()
    return rows.mean(0), rows.std(0, correction=0)


class Probe:
    def __init__(self, model: nn.Module, tracker, every: int):
        self.tracker, self.every = tracker, every
        self.step, self.logged, self.active, self.seen = 0, 0, False, set()
        self.handles = [model.register_forward_pre_hook(self._count)]
        for name, module in norm_modules(model):
            self.handles.append(module.register_forward_hook(partial(self._record, name or "norm")))

    def _count(self, model: nn.Module, args) -> None:
        # Training steps only: evaluation runs under no_grad, even when it keeps BN in train mode.
        if model.training and torch.is_grad_enabled():
            self.step += 1
            self.active, self.seen = self.step % self.every == 0, set()
            self.logged += self.active
        else:
            self.active = False

    @torch.no_grad()
    def _record(self, name: str, module: nn.Module, inputs, output) -> None:
        if not self.active or name in self.seen:  # a norm inside a cell runs every time step: log the first
            return
        self.seen.add(name)
        layout = getattr(module, TAG)[1]
        histograms = self.logged % HISTOGRAM_EVERY == 1
        t, step, scalars = self.tracker, self.step, {}
        if layout != "layer":
            mask = inputs[1] if len(inputs) > 1 and torch.is_tensor(inputs[1]) else None
            mean, std = channel_stats(inputs[0].detach(), layout, mask)
            scalars[f"norm/{name}/input_mean"] = mean.mean().item()
            scalars[f"norm/{name}/input_std"] = std.mean().item()
            if histograms:
                t.histogram(f"norm/{name}/input_mean_per_channel", mean, step)
                t.histogram(f"norm/{name}/input_std_per_channel", std, step)
        for pname, p in module.named_parameters():
            if p.squeeze().dim() > 1:  # a layer's weight matrix, not a per-channel vector
                continue
            leaf = pname.rpartition(".")[2]
            label = NAMES.get(leaf, leaf)
            scalars[f"norm/{name}/{label}_mean"] = p.detach().float().mean().item()
            if histograms:
                t.histogram(f"norm/{name}/{label}", p.detach().float().flatten(), step)
        t.scalars(step, scalars)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def attach(model: nn.Module, tracker, every: int) -> Probe:
    """Hook every norm layer of `model`; its numbers go to `tracker.scalars` / `tracker.histogram`."""
    if every < 1:
        raise UserError(f"norm.track_every must be >= 1 (got {every})", "set norm.track_every=100")
    if not getattr(tracker, "records_scalars", False):
        raise UserError("norm.track_stats=true logs each norm layer's statistics to TensorBoard, which is off",
                        "set tensorboard=true")
    return Probe(model, tracker, every)
