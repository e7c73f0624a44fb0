"""The packed training loop: S members step together, each on its own batches, each recorded on its own.

    results = fit_packed(packed, members, splits, cfgs, trackers, device, checkpoint=run_dir / "checkpoint.pt")

It is `engine.fit` with a member axis: every member draws its batches from its own generator (seeded by
its own seed, as its separate run's), the loss is the sum of the members' mean losses (so each member's
gradient is its own), and one optimizer step updates every member. A member whose loss turns non-finite
is recorded as diverged at its own step; its parameters are its own slices, so the others train on.
Validation, after every epoch, scores every member at once (`engine.evaluate` on the pack).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from normbench import engine, norms
from normbench.config import Config
from normbench.data import Splits, batches
from normbench.engine import FitResult, accelerate, evaluate, plan_steps
from normbench.optim import make_optimizer, make_schedule
from normbench.pack.model import PackedModel, unpack
from normbench.pack.optim import MemberLR


def stack_batches(parts: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[int] | None]:
    """S members' (x, y, lengths) -> (x (S, N, ...), y (S, N), lengths (S, N) or None, padded lengths).
    Members' variable-length batches can differ in padded length: each is padded to the longest, and the
    per-member lengths come back so norms that count padding see only their member's own."""
    xs, ys, ls = zip(*parts)
    steps = [x.shape[2] for x in xs]
    if len(set(steps)) > 1:
        longest = max(steps)
        xs = [F.pad(x, (0, 0, 0, longest - x.shape[2])) for x in xs]
    lengths = None if ls[0] is None else torch.stack(ls)
    return torch.stack(xs), torch.stack(ys), lengths, (steps if len(set(steps)) > 1 else None)


def member_batches(packed: PackedModel, batch_fn, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                   generators: list[torch.Generator], **kw):
    """Every member's own batches (`batch_fn` with its own generator), stacked: (x (S, N, ...), y (S, N),
    lengths). While a batch is out, the pack knows each member's padded length (for norms that count it)."""
    streams = [batch_fn(x, y, batch_size, shuffle=True, generator=g, drop_last=True, **kw) for g in generators]
    try:
        for parts in zip(*streams):
            xs, ys, lengths, padded = stack_batches(parts)
            packed.net.steps = padded
            yield xs, ys, lengths
    finally:
        packed.net.steps = None


class _Window(engine._Window):
    """engine's log window with a member axis: each step's per-member losses and hit counts."""

    def __init__(self):
        super().__init__()
        self.hits: list[torch.Tensor] = []

    def add(self, losses: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        self.items.append(losses.detach())
        self.hits.append((logits.detach().argmax(-1) == y).sum(1))

    def read(self) -> tuple[list[list[float]], list[float], float]:
        """(losses per member per step, hits per member, seconds) and a fresh window; call it paused."""
        out = (torch.stack(self.items).double().T.tolist(), torch.stack(self.hits).sum(0).tolist(), self.seconds)
        self.items, self.hits, self.seconds = [], [], 0.0
        return out


def make_packed_optimizer(packed: nn.Module, cfgs: list[Config]):
    """torch's fused optimizer when the members share one lr; `MemberLR` when they do not."""
    if len({c.lr for c in cfgs}) == 1:
        return make_optimizer(packed, cfgs[0])
    return MemberLR(packed, len(cfgs), cfgs[0])


def fit_packed(packed: PackedModel, members: list[nn.Module], splits: Splits, cfgs: list[Config], trackers: list,
               device: torch.device, checkpoint: Path | None = None, resume: bool = False,
               batch_fn=batches) -> list[FitResult]:
    """Train every member; `cfgs[k]` is member k's config (its own seed and lr; the rest shared)."""
    cfg, size = cfgs[0], len(cfgs)
    epochs, total_steps = plan_steps(cfg, len(splits.train_x))
    norms.set_total_steps(packed, total_steps)
    opt = make_packed_optimizer(packed, cfgs)
    schedules = [make_schedule(c, total_steps) for c in cfgs]
    shuffles = [torch.Generator(device=device).manual_seed(c.seed) for c in cfgs]
    outs = [FitResult() for _ in cfgs]
    if resume and checkpoint is not None and checkpoint.exists():
        outs = _load_checkpoint(checkpoint, packed, opt, shuffles)
    forward, autocast = accelerate(packed, cfg, device)
    for t in trackers:
        t.start(total_steps, outs[0].steps)
    steps = outs[0].steps

    for epoch in range(outs[0].epochs_done, epochs):
        if steps >= total_steps or all(o.status == "diverged" for o in outs):
            break
        packed.train()
        window, epoch_start = _Window(), time.perf_counter()
        for x, y, lengths in member_batches(packed, batch_fn, splits.train_x, splits.train_y, cfg.batch_size,
                                            shuffles):
            lrs = [lr_at(steps) for lr_at in schedules]
            if isinstance(opt, MemberLR):
                opt.set_lrs(lrs)
            else:
                for group in opt.param_groups:
                    group["lr"] = lrs[0]
            with autocast:
                logits = forward(x, lengths)
                losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(size, -1).mean(1)
            opt.zero_grad(set_to_none=True)
            losses.sum().backward()
            opt.step()
            window.add(losses, logits, y)
            steps += 1
            last = steps >= total_steps
            if len(window.items) == cfg.log_every or last:
                _log(window, outs, trackers, steps, cfg.batch_size, lrs)
                if all(o.status == "diverged" for o in outs):
                    break
            if last:
                break
        if window.items:
            _log(window, outs, trackers, steps, cfg.batch_size, lrs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - epoch_start
        live = [k for k, o in enumerate(outs) if o.status != "diverged"]
        for k in live:
            outs[k].train_seconds += seconds
            outs[k].steps, outs[k].samples = steps, steps * cfg.batch_size
        if not live:
            break

        val_losses, val_accs = evaluate(packed, batches(splits.val_x, splits.val_y, cfg.eval_batch_size))
        for k in live:
            val_loss, val_acc = val_losses[k], val_accs[k]
            out = outs[k]
            out.epochs_done = epoch + 1
            metrics = {"step": steps, "loss/val": val_loss, "acc/val": val_acc,
                       "train_samples_per_s": out.train_samples_per_s}
            out.history.append({"epoch": out.epochs_done, **metrics})
            trackers[k].epoch(out.epochs_done, metrics)
            if not math.isfinite(val_loss):
                out.status, out.diverged_step = "diverged", steps
        if checkpoint is not None:
            _save_checkpoint(checkpoint, packed, opt, shuffles, outs)
    unpack(packed, members)
    return outs


def _log(window: _Window, outs: list[FitResult], trackers: list, steps: int, batch_size: int,
         lrs: list[float]) -> None:
    """Report each live member's window; a member with a non-finite loss is marked diverged at its step."""
    window.pause()
    losses, hits, seconds = window.read()
    n = len(losses[0])
    for k, (member_losses, out) in enumerate(zip(losses, outs)):
        if out.status == "diverged":
            continue
        bad = [i for i, v in enumerate(member_losses) if not math.isfinite(v)]
        if bad:
            out.status, out.diverged_step = "diverged", steps - n + bad[0] + 1
            out.steps = out.diverged_step
            continue
        trackers[k].step(steps, {"loss/train": sum(member_losses) / n, "acc/train": hits[k] / (n * batch_size),
                                 "throughput/samples_per_s": n * batch_size / max(seconds, 1e-9), "lr": lrs[k]})
    window.resume()


def _save_checkpoint(path: Path, packed, opt, shuffles: list[torch.Generator], outs: list[FitResult]) -> None:
    engine.save_checkpoint(path, packed, opt, {"shuffles": [g.get_state() for g in shuffles]},
                           [dict(o.__dict__) for o in outs])


def _load_checkpoint(path: Path, packed, opt, shuffles: list[torch.Generator]) -> list[FitResult]:
    state = engine.load_checkpoint(path, packed, opt)
    for g, s in zip(shuffles, state["rng"]["shuffles"]):
        g.set_state(s)
    return [FitResult(**f) for f in state["fit"]]
