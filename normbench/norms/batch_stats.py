"""The batch-statistics protocol every norm with running statistics follows (`BatchStatistics`: BatchNorm,
Batch Renorm, Switchable Norm, the scratch BN, the packed BN), and what they share to follow it: ghost
batches (Hoffer et al. 2017, arXiv 1705.08741) and the running-statistics update.

    isinstance(m, BatchStatistics)                 # what the evaluations, PreciseBN and the models look for
    g = m.groups(x, "BatchNorm")                   # N = 64 samples, ghost_batch=4 -> 16 (a UserError if 4 ∤ N)
    y = from_groups(F.batch_norm(to_groups(x, g), ...), g)   # torch's kernel, one "channel" per (group, c)
    absorb(bn, mean, var_unbiased, n)                # (G, C) group statistics -> running statistics

With `ghost_batch=K` a training batch of N = G K samples is split into G groups of K consecutive samples;
each group is normalized by its own statistics, and the running statistics take the G groups one after
another, exactly as G separate BatchNorm calls would (tests/test_ghost_batch.py checks this against torch's
BatchNorm applied to each group in turn). G sequential updates r <- (1 - m_g) r + m_g s_g have the closed
form r_G = prod_g (1 - m_g) r_0 + sum_j m_j prod_{h > j} (1 - m_h) s_j, one weighted sum instead of a loop.
m_g is the momentum, or 0 for a group with fewer than two real values (no variance estimate).

`split_eps(value, grad)` is BatchNorm's `eps_grad` option (and the scratch and packed BN's): an output with
the numbers of BN at `eps` and the gradient of BN at `eps_grad`, both with batch statistics.

`absorb` is also where PreciseBN (normbench/regimes/precise_bn.py) listens: a module whose `stats_sink` is set hands
its per-group statistics to the sink instead of folding them into the running buffers.
"""

from __future__ import annotations

import torch

from normbench.errors import UserError

Tensor = torch.Tensor


class BatchStatistics:
    """A norm whose training output depends on the batch, with running statistics for evaluation. What
    the rest of normbench reads or sets on it, declared once:

    - `ghost_batch`: statistics over each group of this many consecutive samples (None: the whole batch).
      A training option of bn, brn and sn; norm_modes.split_statistics sets it during an evaluation pass, so
      one pass over large batches normalizes each group of the training batch size on its own.
    - `splits_statistics`: False where such a pass is not the same as passes over each group (Batch
      Renorm's output reads running statistics that every batch moves; BN over random positions draws
      per batch): split_statistics then leaves the norm alone and its callers pass small batches.
    - `stats_sink`: set by PreciseBN; `absorb` hands each group's statistics to it instead of the
      running buffers.
    - `running_mean`, `running_var`: buffers, what evaluation normalizes with.
    """

    ghost_batch: int | None = None
    splits_statistics: bool = True
    stats_sink = None

    def groups(self, x: Tensor, name: str) -> int:
        """How many ghost batches this forward's batch holds: 1 in eval mode or without ghost batches."""
        return num_groups(x.shape[0], self.ghost_batch, name) if self.training else 1


def check_option(ghost_batch: int | None, name: str) -> None:
    """At build time: K is a positive number of samples, or None for the whole batch."""
    if ghost_batch is not None and (isinstance(ghost_batch, bool) or not isinstance(ghost_batch, int)
                                    or ghost_batch < 1):
        raise UserError(f"{name} ghost_batch must be a number of samples >= 1 (got {ghost_batch!r})",
                        "set norm.ghost_batch=K with K dividing batch_size, or null for the whole batch")


def check_eps_grad(eps_grad, name: str) -> None:
    """At build time: the eps whose gradient BN backpropagates (`split_eps`) is a number > 0, or None for
    eps's own."""
    if eps_grad is not None and (isinstance(eps_grad, bool) or not isinstance(eps_grad, (int, float))
                                 or not eps_grad > 0):
        raise UserError(f"{name} eps_grad must be a number > 0 (got {eps_grad!r})",
                        "set norm.eps_grad=1e-5 (say), or null for the gradient of norm.eps itself")


def num_groups(samples: int, ghost_batch: int | None, name: str) -> int:
    """How many ghost batches a training batch of `samples` holds (1 without ghost batches)."""
    if ghost_batch is None:
        return 1
    if samples % ghost_batch:
        raise UserError(f"{name} ghost_batch={ghost_batch} does not divide this batch of {samples} samples",
                        f"set batch_size to a multiple of {ghost_batch}, or norm.ghost_batch to a divisor of "
                        f"{samples}")
    return samples // ghost_batch


def check_group_values(values: int, ghost_batch: int | None, name: str) -> None:
    """A ghost batch needs two values per channel (K samples x H x W, or K x T tokens)."""
    if ghost_batch is not None and values < 2:
        raise UserError(f"{name} with ghost_batch={ghost_batch} computes each group's statistics over "
                        f"{values} value per channel, which has no variance",
                        "use norm.ghost_batch >= 2")


def to_groups(x: Tensor, groups: int) -> Tensor:
    """(G K, C, ...) -> (K, G C, ...): group g's samples become channels g C .. g C + C - 1, so one BatchNorm
    kernel call over G C channels computes every group's statistics. One copy of x."""
    if groups == 1:
        return x
    n, c = x.shape[:2]
    return x.reshape(groups, n // groups, c, *x.shape[2:]).transpose(0, 1).reshape(n // groups, groups * c,
                                                                                   *x.shape[2:])


def from_groups(y: Tensor, groups: int) -> Tensor:
    """The inverse of `to_groups`."""
    if groups == 1:
        return y
    k, gc = y.shape[:2]
    return y.reshape(k, groups, gc // groups, *y.shape[2:]).transpose(0, 1).reshape(groups * k, gc // groups,
                                                                                    *y.shape[2:])


def spread(stat: Tensor, groups: int, rows: int) -> Tensor:
    """A per-group statistic (G, C) as one row per sample or token, (rows, C), each group's repeated."""
    if groups == 1:
        return stat
    return stat[:, None].expand(groups, rows // groups, stat.shape[-1]).reshape(rows, stat.shape[-1])


def grouped_masked_moments(xf: Tensor, w: Tensor, groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per group of rows, the mean and biased variance per channel of the rows with w = 1, and their count:
    (G, C), (G, C), (G,). The statistics over each ghost batch's real tokens; 0 where a group has none."""
    xg, wg = xf.reshape(groups, -1, xf.shape[-1]), w.reshape(groups, -1, 1)
    n = wg.sum(1)  # (G, 1)
    mean = (xg * wg).sum(1) / n.clamp_min(1)
    var = ((xg - mean[:, None]).square() * wg).sum(1) / n.clamp_min(1)
    return mean, var, n.squeeze(1)


def unbiased(var: Tensor, n: Tensor) -> Tensor:
    """The variance the running average stores: n / (n - 1) times the batch's, as torch and the paper do."""
    return var * (n / (n - 1).clamp_min(1))[..., None]


def momenta(n: Tensor, momentum: float) -> Tensor:
    """Each group's update rate: the momentum, or 0 (no update) with fewer than two values."""
    return torch.where(n >= 2, torch.full_like(n, momentum), torch.zeros_like(n))


def final_weights(m: Tensor) -> tuple[Tensor, Tensor]:
    """(keep, w) with r_G = keep r_0 + w @ s after G sequential updates at rates m (G,)."""
    a = 1 - m
    suffix = torch.cat([a.flip(0).cumprod(0).flip(0)[1:], a.new_ones(1)])  # prod_{h > j} a_h
    return a.prod(), m * suffix


def prefix_weights(m: Tensor) -> tuple[Tensor, Tensor]:
    """(keep (G,), W (G, G)) with r_i = keep_i r_0 + W[i] @ s: the running value group i sees before its
    own update (Batch Renorm's r and d depend on it). W[i, j] = m_j prod_{j < h < i} (1 - m_h) for j < i,
    built by a cumulative product down each column, so no division (and no 0/0 when a product underflows)."""
    g = m.shape[0]
    a = 1 - m
    below = torch.arange(g, device=m.device)[:, None] > torch.arange(g, device=m.device)[None, :]  # i > j
    first = torch.arange(g, device=m.device)[:, None] == torch.arange(g, device=m.device)[None, :] + 1
    # column j down the rows i: 1 (i <= j), m_j (i = j + 1), a_{i-1} (i > j + 1)
    steps = torch.where(first, m[None, :].expand(g, g), a.roll(1)[:, None].expand(g, g))
    steps = torch.where(below, steps, torch.ones_like(steps))
    w = steps.cumprod(0) * below
    keep = torch.cat([a.new_ones(1), a.cumprod(0)[:-1]])
    return keep, w


def running_before(running: Tensor, stats: Tensor, m: Tensor) -> Tensor:
    """The running statistic each of G groups sees (G, C) when the groups update it in turn."""
    if stats.shape[0] == 1:
        return running[None]
    keep, w = prefix_weights(m)
    return keep[:, None] * running + w @ stats


def splits_eps(module) -> bool:
    """Does this training forward take `split_eps`'s path? Only with an `eps_grad` other than `eps` (stored as
    None when equal), in training, and where a gradient is recorded; else today's code path, bit for bit."""
    return module.eps_grad is not None and module.training and torch.is_grad_enabled()


def split_eps(value: Tensor, grad: Tensor) -> Tensor:
    """`value`'s numbers with `grad`'s gradient: value.detach() + (grad - grad.detach()).

    `value` is BN's output at eps (computed as without the option: the same kernel, the running statistics
    updated once, there), `grad` BN's output at eps_grad over the same input, the same batch statistics and
    ghost-batch groups (running statistics untouched). grad - grad.detach() is exactly 0 in floating point
    (finite x - x), so the sum is `value` bit for bit (but a -0.0, which becomes +0.0); autograd passes the
    incoming gradient unchanged through both additions into `grad`'s graph, so backward is autograd's own
    gradient of BN at eps_grad (input, scale and shift) at this input. Chosen over a custom
    autograd.Function whose backward would recompute BN at eps_grad and differentiate it: the same numbers,
    with no hand-written backward to get wrong and no recomputation; it costs one more BN forward (its
    numbers unused) and that forward's saved tensors."""
    return value.detach() + (grad - grad.detach())


def absorb(module, mean: Tensor, var_unbiased: Tensor, n) -> None:
    """Fold G groups' statistics ((G, C) mean and unbiased variance, (G,) or int counts) into the module's
    running_mean / running_var, in order, at `module.momentum`; or hand them to `module.stats_sink`."""
    mean, var_unbiased = mean.detach(), var_unbiased.detach()
    if not torch.is_tensor(n):
        n = torch.full((mean.shape[0],), float(n), dtype=mean.dtype, device=mean.device)
    n = n.detach().to(mean.dtype)
    sink = getattr(module, "stats_sink", None)
    if sink is not None:
        sink(mean, var_unbiased, n)
        return
    with torch.no_grad():
        keep, w = final_weights(momenta(n, module.momentum))
        module.running_mean.copy_(keep * module.running_mean + w @ mean)
        module.running_var.copy_(keep * module.running_var + w @ var_unbiased)
