"""Bench section `subnormal`: does this processor pay for subnormal floats, and does flushing them cure it?

Late in a converged BN run at batch 2, 72% of SGD's momentum entries were subnormal (|m| < 2^-126,
docs/performance.md), and on some processors arithmetic on them runs many times slower. This section
builds that training state for the default MLP's parameters (each momentum buffer and gradient 72%
subnormal, the rest of normal size) and times, with `torch.set_flush_denormal(False)` (IEEE arithmetic)
and `True` (normbench's default on the CPU, `flush_denormal`), interleaved:
- `update`: the momentum update `m.mul_(0.9).add_(g)` over every parameter's buffer;
- `sgd step`: one fused SGD step (momentum 0.9), the optimizer every small-batch study uses.
The state is restored before every timed call (a flushed step zeroes the subnormals it touches). A ratio
near 1 says this processor does not pay; 3x or more says it does.
"""

from __future__ import annotations

import time

import torch

from normbench import models, norms
from normbench.bench import fmt_ratio, interleave, markdown_table, paired_ratio
from normbench.config import ModelConfig

SUBNORMAL_SHARE = 0.72  # of the momentum entries, as measured at the end of a converged bn run at batch 2
TINY = torch.finfo(torch.float32).tiny  # 2^-126, the smallest normal float32


def subnormal_like(p: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A tensor shaped as `p`: SUBNORMAL_SHARE of its entries subnormal (|x| in [TINY/1000, TINY/2]),
    the rest normal-sized (~1e-3), random signs."""
    size = torch.rand(p.shape, generator=generator)
    sign = torch.randint(0, 2, p.shape, generator=generator) * 2 - 1
    small = TINY * (0.001 + 0.499 * torch.rand(p.shape, generator=generator))
    normal = 1e-3 * (0.1 + torch.rand(p.shape, generator=generator))
    return (torch.where(size < SUBNORMAL_SHARE, small, normal) * sign).to(p.dtype)


def _timer(flush: bool, work, restore, calls: int):
    """Seconds per call of `work` (the state restored before each, untimed) with flushing on or off."""
    def timed() -> float:
        torch.set_flush_denormal(flush)  # a process-wide flag: set for this variant, cleared after it
        try:
            total = 0.0
            for _ in range(calls):
                restore()
                started = time.perf_counter()
                work()
                total += time.perf_counter() - started
            return total / calls
        finally:
            torch.set_flush_denormal(True)  # back to a run's default (the bench sets it for every section)
    return timed


def run(args, device: torch.device) -> tuple[dict, str]:
    if device.type != "cpu" or not torch.set_flush_denormal(False):
        why = "flushing subnormals is a CPU setting" if device.type != "cpu" else "this CPU cannot flush subnormals"
        return {"skipped": why}, f"### Subnormal floats\n\nSkipped: {why}."
    g = torch.Generator().manual_seed(0)
    params = list(models.create(ModelConfig(name="mlp"), norms.factory("bn"), (1, 28, 28), 10).parameters())
    momenta = [subnormal_like(p, g) for p in params]
    grads = [subnormal_like(p, g) for p in params]
    share = sum(int(((m != 0) & (m.abs() < TINY)).sum()) for m in momenta) / sum(m.numel() for m in momenta)
    bufs = [m.clone() for m in momenta]
    calls = 3 if args.quick else 30

    def restore_bufs():
        for b, m in zip(bufs, momenta):
            b.copy_(m)

    def update():
        for b, gr in zip(bufs, grads):
            b.mul_(0.9).add_(gr)

    weights = [p.detach().clone().requires_grad_() for p in params]
    opt = torch.optim.SGD(weights, lr=0.025, momentum=0.9, fused=True)
    for w, gr in zip(weights, grads):
        w.grad = gr.clone()
    opt.step()  # creates the momentum buffers, then set to the subnormal state before each call
    saved = [p.detach().clone() for p in weights]

    def restore_opt():
        with torch.no_grad():
            for w, s, m in zip(weights, saved, momenta):
                w.copy_(s)
                opt.state[w]["momentum_buffer"].copy_(m)

    rows = {}
    for name, work, restore in (("update", update, restore_bufs), ("sgd step", opt.step, restore_opt)):
        times = interleave({"ieee": _timer(False, work, restore, calls),
                            "flush": _timer(True, work, restore, calls)}, args.rounds)
        rows[name] = {"ieee_ms": 1e3 * min(times["ieee"]), "flush_ms": 1e3 * min(times["flush"]),
                      "ratio": paired_ratio(times["ieee"], times["flush"])}
    worst = max(v["ratio"]["median"] for v in rows.values())
    verdict = ("pays for subnormal arithmetic: `flush_denormal=true` (the default) removes the cost" if worst >= 2
               else f"pays a little for subnormal arithmetic (up to {worst:.2f}x, which flushing saves)" if worst >= 1.1
               else "does not pay for subnormal arithmetic: `flush_denormal` changes nothing measurable here")
    pays = worst >= 2
    text = ("### Subnormal floats\n\n"
            f"{share:.0%} of the momentum entries of the default MLP's {sum(p.numel() for p in params):,} "
            "parameters subnormal, as at the end of a converged bn run at batch 2. Milliseconds per call "
            "(the fastest round) and the ratio IEEE / flushed (median over rounds, range):\n\n"
            + markdown_table(["work", "IEEE ms", "flushed ms", "IEEE / flushed"],
                             [[k, f"{v['ieee_ms']:.3f}", f"{v['flush_ms']:.3f}", fmt_ratio(v["ratio"])]
                              for k, v in rows.items()])
            + f"\n\nThis processor {verdict}.")
    return {"share": share, "pays": pays, **rows}, text
