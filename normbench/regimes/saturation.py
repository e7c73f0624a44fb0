"""How many of DyT's and Derf's activations saturate: per norm layer, the fraction of the values it
transforms on the test set whose squashing function sits near its bound (|tanh(alpha x)| > tanh(2)).

    out.update(measure(model, splits, cfg, clock))   # {} for a model with no DyT or Derf layer

DyT computes gamma * tanh(alpha x) + beta and Derf gamma * erf(alpha x + s) + beta (normbench/norms/dyt.py,
derf.py). Where the squashing function is flat, the layer passes on (nearly) only the sign of its input and
(nearly) no gradient: that is what "saturated" means here. The declared threshold is on the function's
output, the same for both: a value is saturated when |tanh(alpha x)| > tanh(2) = 0.964, i.e. |alpha x| > 2,
and for Derf when |erf(alpha x + s)| > tanh(2), i.e. |alpha x + s| > erfinv(0.964) = 1.483. Why this level:
it is the one Verma (2026, arXiv 2604.23434, "When Does Removing LayerNorm Help?") reports DyT's saturation
at (|alpha x| > 2: 49% of DyT's activations with 1M training tokens against 23% with 118M, in GPT-2-family
models), so the regime study (experiment=norm_free_regime) reads its fractions on the same scale; there the
slope of tanh is 1 - 0.964^2 = 7% of its largest (11% for erf at 1.483: 2/sqrt(pi) exp(-1.483^2) over
2/sqrt(pi)). The fraction at another level is a different number, so the level is recorded with it
(`threshold`, the output level).

Measured after training, in eval mode, on the whole test set as the test pass sees it (eval_batch_size,
no padding: every token is a real one; with a mask, only real tokens count), by forward hooks on every
DynamicTanh and DynamicErf module, QK-norm ones included. results.json's `saturation`:

    {"threshold": 0.964,                    # |f(z)| above it (tanh(2)) is saturated
     "all": 0.031,                          # over every value of every DyT/Derf layer (each counted once)
     "layers": {"blocks.0.attn_norm": 0.012, ...},   # each layer's own fraction, by module name
     "alpha": {"blocks.0.attn_norm": 0.61, ...}}     # each layer's learned alpha at the end

A pack whose members share their data measures every member on the same batches: the hooks sit on each
member's own modules (a DyT layer has no packed form: the pack runs each member's own module on its slice,
normbench/pack/layers.py's PerMember), and each number is a list with one entry per member, which the runner
splits. Members with their own data (data.split=per_seed) each see their own test tensors in that pass.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from normbench import data
from normbench.norms.dyt import Squashing
from normbench.pack.members import each_member, members_of
from normbench.train.evaluate import PassClock, evaluate

THRESHOLD = math.tanh(2.0)  # |tanh(alpha x)| or |erf(alpha x + s)| above it: saturated (|alpha x| > 2 for DyT)


def layers(net: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every DyT and Derf module of a (plain) model, by name."""
    return [(name, m) for name, m in net.named_modules() if isinstance(m, Squashing)]  # DyT and Derf


class Counter:
    """Forward hooks counting, per layer, the values seen and the saturated ones (real tokens only)."""

    def __init__(self, named: list[tuple[str, nn.Module]], threshold: float = THRESHOLD):
        self.threshold = threshold
        self.seen = {name: 0 for name, _ in named}
        self.saturated = {name: 0 for name, _ in named}
        self.handles = [m.register_forward_hook(self._hook(name)) for name, m in named]

    def _hook(self, name: str):
        def record(module: nn.Module, args, output) -> None:
            x = args[0]
            mask = args[1] if len(args) > 1 else None
            with torch.no_grad():
                hit = module.squash(x).abs() > self.threshold
                if mask is not None and hit.dim() == mask.dim() + 1:  # (N, T, C) with a (N, T) mask
                    hit = hit[mask]
                self.seen[name] += hit.numel()
                self.saturated[name] += int(hit.sum())
        return record

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def fractions(self) -> tuple[float | None, dict[str, float | None]]:
        total = sum(self.seen.values())
        every = sum(self.saturated.values()) / total if total else None
        return every, {n: (self.saturated[n] / self.seen[n] if self.seen[n] else None) for n in self.seen}


def measure(model: nn.Module, splits: data.Splits | data.MemberSplits, cfg, clock: PassClock | None = None,
            threshold: float = THRESHOLD) -> dict[str, Any]:
    """{"saturation": ...} (above) for a model with DyT or Derf layers, after a test pass of its own (each
    member of a pack on its own test tensors, `each_member`); {} for any other model (no pass). Its
    numbers are lists, one entry per member."""
    model = members_of(model)
    nets = list(model.member_models)
    named = [layers(net) for net in nets]
    if not named[0]:
        return {}
    counters = [Counter(n, threshold) for n in named]
    try:
        with (clock or PassClock())("saturation"):
            evaluate(model, each_member(model, splits, lambda s: data.batches(s.test_x, s.test_y,
                                                                               cfg.eval_batch_size)))
    finally:
        for c in counters:
            c.remove()
    found = [c.fractions() for c in counters]
    alphas = [{name: float(m.alpha.detach()) for name, m in n} for n in named]
    names = [name for name, _ in named[0]]  # a pack's members are one architecture: the same names
    return {"saturation": {"threshold": threshold, "all": [every for every, _ in found],
                           "layers": {n: [by_layer[n] for _, by_layer in found] for n in names},
                           "alpha": {n: [a[n] for a in alphas] for n in names}}}
