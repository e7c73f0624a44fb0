"""PreciseBN (Wu & Johnson 2021, arXiv 2105.07576, section 3): replace the running statistics, an EMA over
weights that kept changing, by population statistics recomputed with the final, frozen weights.

    if precise_bn.has_running_stats(model):
        batches = data.batches(train_x, train_y, cfg.batch_size, shuffle=True, drop_last=True)
        report = precise_bn.recompute_statistics(model, batches, num_samples=10_000)
        test_acc_precise_bn = evaluate(model, ...)      # eval mode, now with the population statistics

The model runs forward (no gradients) with dropout off and every norm that keeps running statistics in
training mode, so each computes its batch statistics exactly as in training: at the batches' size, or per
ghost batch when the norm has `ghost_batch` set. Each layer's batch statistics (mean, unbiased variance,
count) go to an estimator instead of the running buffers (the norms' `stats_sink`, see norms/batch_stats.py);
at the end the population mean and variance over every value seen replace running_mean / running_var.
That is fvcore's `update_bn_stats` with its `_PopulationVarianceEstimator` (batches weighted by their
counts, the Bessel correction undone), combined per batch with Chan et al.'s pairwise update rather than
E[x^2] - E[x]^2, so large means cost no precision. Everything else is restored exactly: parameters (never
touched), the other buffers (num_batches_tracked, Batch Renorm's step clock, samples_per_step), and every
module's train/eval mode. Batch Renorm's correction reads its trained running statistics during the pass,
as in its last training steps.

Recurrent per-step BN (cells.py): each step's copy gets its own step's population statistics. A step past
the trained ones reads the last step's statistics and does not add to them; `steps=T` first gives steps up
to T statistics of their own (to re-estimate, e.g., steps 29-42 on longer sequences).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

from normbench import norms
from normbench.models.cells import StepNorm
from normbench.norms.batch_stats import BatchStatistics

DEFAULT_SAMPLES = 10_000  # Wu & Johnson: ~10k samples make the estimate's error negligible (their figure 3)


@dataclass(frozen=True)
class Recomputed:
    layers: int  # norm layers whose running statistics were replaced (per-step copies counted)
    samples: int  # training samples the forward passes saw


def running_stats_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that keep running statistics (bn, brn, sn, masked bn, each recurrent step's copy)."""
    return [m for m in model.modules() if norms.has_running_statistics(m)]


def has_running_stats(model: nn.Module) -> bool:
    """Does evaluation of `model` use running statistics (so PreciseBN applies)? False -> null in results."""
    return bool(running_stats_modules(model))


class _Population:
    """Running count, mean and sum of squared deviations (M2) of every value a layer's statistics saw."""

    def __init__(self, like: torch.Tensor):
        dtype = torch.float32 if like.device.type == "mps" else torch.float64  # MPS has no float64
        self.n = torch.zeros((), dtype=dtype, device=like.device)
        self.mean = torch.zeros_like(like, dtype=dtype)
        self.m2 = torch.zeros_like(like, dtype=dtype)

    def __call__(self, mean: torch.Tensor, var_unbiased: torch.Tensor, n: torch.Tensor) -> None:
        """One batch's groups: (G, C) means, unbiased variances, (G,) counts."""
        mean, var_unbiased, n = (t.to(self.mean.dtype) for t in (mean, var_unbiased, n))
        m2_groups = var_unbiased * (n - 1).clamp_min(0)[:, None]  # sum of squared deviations per group
        n_b = n.sum()
        mean_b = (n[:, None] * mean).sum(0) / n_b.clamp_min(1)
        m2_b = m2_groups.sum(0) + (n[:, None] * (mean - mean_b).square()).sum(0)
        total = self.n + n_b
        share = n_b / total.clamp_min(1)  # 0 for a batch with no values (no host sync to skip it)
        delta = mean_b - self.mean
        self.mean = self.mean + delta * share
        self.m2 = self.m2 + m2_b + delta.square() * (self.n * share)
        self.n = total

    @property
    def var(self) -> torch.Tensor:
        return self.m2 / self.n  # the population variance over every value (fvcore's pop_var)


def _inputs(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(x, y, lengths) as data.batches yields, (x, y), or x alone."""
    if torch.is_tensor(batch):
        return batch, None
    return batch[0], (batch[2] if len(batch) > 2 else None)


def extend_steps(model: nn.Module, steps: int) -> None:
    """Give per-step recurrent statistics (cells.StepNorm) copies of their own up to `steps` steps."""
    for m in model.modules():
        if isinstance(m, StepNorm) and m.per_step:
            m.extend(steps)


@torch.no_grad()
def recompute_statistics(model: nn.Module, batches: Iterable[Any], num_samples: int = DEFAULT_SAMPLES, *,
                         steps: int | None = None, groups_of: int | None = None, batch_dim: int = 0) -> Recomputed:
    """Replace every running statistic of `model` by population statistics over `batches` (at the training
    batch size: drop the last partial batch), stopping once `num_samples` samples were seen (whole batches:
    at least that many when there are enough). `steps`: extend per-step recurrent statistics to that many
    steps first. `groups_of=k`, for batches of several groups of k each normalized on its own
    (`norm_modes.split_statistics`, batches drawn without dropping the last): the pass stops after the first
    ceil(num_samples / k) whole groups, a batch cut to them, so it sees the samples that batches of k
    would. `batch_dim`: the samples' axis of the batches (1 for a set of members' (S, N, ...), pack.Members).
    Returns how many layers changed and how many samples they saw."""
    if groups_of is not None:
        num_samples = -(-num_samples // groups_of) * groups_of
    if steps is not None:
        extend_steps(model, steps)
    modules = running_stats_modules(model)
    if not modules:
        return Recomputed(layers=0, samples=0)
    deaf = [type(m).__name__ for m in modules if not isinstance(m, BatchStatistics)]
    if deaf:
        raise TypeError(f"PreciseBN cannot read the batch statistics of {', '.join(sorted(set(deaf)))}: "
                        "a norm with running statistics needs a stats_sink (norms/batch_stats.py)")
    keep = {name: b.clone() for name, b in model.named_buffers()}
    modes = {m: m.training for m in model.modules()}
    estimators = {m: _Population(m.running_mean) for m in modules}
    seen = 0
    try:
        model.eval()  # dropout off, and every other layer as at test time
        for m in modules:
            m.train()
            m.stats_sink = estimators[m]
        for batch in batches:
            if seen >= num_samples:
                break
            x, lengths = _inputs(batch)
            if groups_of is not None:  # whole groups only, and only those still needed
                take = min(num_samples - seen, x.shape[batch_dim] // groups_of * groups_of)
                if take == 0:
                    break
                x = x.narrow(batch_dim, 0, take)
                lengths = None if lengths is None else lengths.narrow(lengths.dim() - 1, 0, take)
            model(x) if lengths is None else model(x, lengths)
            seen += x.shape[batch_dim]
    finally:
        for m in modules:
            m.__dict__.pop("stats_sink", None)
        for m, training in modes.items():
            m.training = training
        for name, b in model.named_buffers():
            if name in keep:
                saved = keep[name]
                (b if b.shape == saved.shape else b[:len(saved)]).copy_(saved)
    for m, est in estimators.items():
        if est.n.item() > 0:  # a layer no batch reached keeps what it had
            m.running_mean.copy_(est.mean)
            m.running_var.copy_(est.var)
    return Recomputed(layers=len(modules), samples=seen)
