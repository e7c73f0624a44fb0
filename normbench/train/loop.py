"""The training loop: `train` trains a model's members and returns one result per member. A plain run is
one member (`pack.members.Solo`), a pack S; the loop never asks which.

    result = fit(net, splits, cfg, tracker, device, checkpoint=run_dir / "checkpoint.pt")   # a plain model
    results = train(model, splits, member_cfgs, trackers, device)                         # any Members, S

No Hydra and no display here: progress goes to a `Tracker` every `cfg.log_every` steps, which is also
the only point where the loop waits for the device (each step's loss and logits stay on the device).
The step itself is what a minimal hand-written loop does, plus one list append; `normbench bench`
measures the two side by side. Evaluation is evaluate.py, the checkpoint checkpoint.py.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from pathlib import Path

import torch
from torch import nn

from normbench import norms
from normbench.config import Config
from normbench.data import MemberSplits, Splits, batches
from normbench.pack.members import Members, each_member, joined, member_splits, members_of
from normbench.train import interrupts
from normbench.train.budget import plan_steps, validates
from normbench.train.checkpoint import load_checkpoint, save_checkpoint
from normbench.device import accelerate
from normbench.train.evaluate import evaluate
from normbench.train.optim import make_member_optimizer, make_schedule, set_lrs
from normbench.train.state import FitResult, LoopState


class _Window:
    """The steps since the last log: each step's loss (per member), logits and labels stay on the device
    until `read` (the loop's one host sync)."""

    def __init__(self):
        self.items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def add(self, losses: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        self.items.append((losses.detach(), logits.detach(), y))

    def read(self, size: int) -> tuple[list[list[float]], list[float]]:
        """(each member's losses, each member's accuracy) over the window, and a fresh window."""
        losses = torch.stack([w[0] for w in self.items]).double().view(len(self.items), size).T.tolist()  # sync
        logits = torch.stack([w[1] for w in self.items])
        y = torch.stack([w[2] for w in self.items])
        hits = logits.argmax(-1).eq(y).view(len(self.items), size, -1).transpose(0, 1).flatten(1)
        self.items = []
        return losses, hits.double().mean(1).tolist()


def fit(model: nn.Module, splits: Splits, cfg: Config, tracker, device: torch.device,
        checkpoint: Path | None = None, resume: bool = False, batch_fn=batches) -> FitResult:
    """`train` for one plain model: its one member's result."""
    return train(members_of(model, cfg.seed), splits, [cfg], [tracker], device, checkpoint, resume, batch_fn)[0]


def train(model: Members, splits: Splits | MemberSplits, cfgs: list[Config], trackers: list,
          device: torch.device, checkpoint: Path | None = None, resume: bool = False,
          batch_fn=batches) -> list[FitResult]:
    """Train `model`'s members on `splits.train_*`, evaluating on `splits.val_*` after every epoch (or after
    the cfg.validations epochs `validates` spreads over the run); one result per member of `model`
    (`Members`: a plain model is `Solo`, one), member k with `cfgs[k]` (its own seed and lr, the rest shared),
    `trackers[k]` and its own splits (`MemberSplits`; one `Splits` is every member's).

    Each member draws its batches from its own splits with its own generator (seeded by its seed, as its
    separate run's), the loss is the sum of the members' mean losses (so each member's gradient is its
    own), and one optimizer step updates every member. A member whose loss turns non-finite is recorded as diverged at
    that step; the others train on. `batch_fn` yields training batches (x, y, lengths) with
    `data.batches`' signature; a study may pass its own (augmented, or padded to random lengths).

    With `checkpoint`, the full state (model, optimizer, RNGs, loop and members) is saved atomically after
    every epoch, and at the step boundary where a signal stops the loop (`normbench.train.interrupts`: it then
    raises `Interrupted` with that step). `resume=True` continues from it, bit-identical on CPU to an
    unbroken run (mid-epoch: the epoch's batches are drawn again from its start and the ones already
    trained skipped), and never trains past the run's total steps. The checkpoint also adds this
    process's seconds so far to `earlier_wall_s`, so a resumed run's wall_s covers every process it took.
    """
    run = _Training(model, splits, cfgs, trackers, device, checkpoint, batch_fn)
    if resume and checkpoint is not None and checkpoint.exists():
        run.state, run.outs = load_checkpoint(checkpoint, model, run.opt, run.shuffles)
    for t in trackers:
        t.start(run.total_steps, run.state.steps)
    with interrupts.stoppable():
        for epoch in range(run.state.epochs_done, run.epochs):
            if run.state.steps >= run.total_steps or not _live(run.outs):  # resumed after its last step
                break
            run.train_epoch()
            if not _live(run.outs):
                break
            run.end_epoch(epoch)
            if validates(epoch, run.trained_epochs, run.cfg.validations):
                run.validate()
            if checkpoint is not None:
                run.save([g.get_state() for g in run.shuffles])
                if interrupts.pending() is not None:  # asked during validation: the epoch's checkpoint holds it
                    raise interrupts.pending().at(run.state.steps)
    model.unpacked()  # every member model holds its trained state
    return run.outs


class _Training:
    """One training's moving parts, built once: the optimizer and schedules, each member's batch generator,
    the loop's state and each member's result. `train` drives it epoch by epoch."""

    def __init__(self, model: Members, splits: Splits | MemberSplits, cfgs: list[Config], trackers: list,
                 device: torch.device, checkpoint: Path | None, batch_fn):
        self.leg_started = time.perf_counter()  # this process's part of the training's wall time
        self.model, self.splits, self.cfgs, self.trackers = model, member_splits(model, splits), cfgs, trackers
        self.cfg, self.size, self.checkpoint, self.batch_fn = cfgs[0], len(cfgs), checkpoint, batch_fn
        self.epochs, self.total_steps = plan_steps(self.cfg, len(self.splits.first.train_x))
        per_epoch = len(self.splits.first.train_x) // self.cfg.batch_size
        self.trained_epochs = math.ceil(self.total_steps / per_epoch)  # the last one may stop mid-epoch (max_steps)
        norms.set_total_steps(model, self.total_steps)  # Batch Renorm's schedule is in fractions of the run
        self.opt = make_member_optimizer(model, cfgs)
        self.schedules = [make_schedule(c, self.total_steps) for c in cfgs]
        self.shuffles = [torch.Generator(device=device).manual_seed(c.seed) for c in cfgs]
        self.state, self.outs = LoopState(), [FitResult() for _ in cfgs]
        self.forward, self.autocast = accelerate(model, self.cfg, device)

    def epoch_batches(self):
        """Each member's batches from its own training split, drawn by its own generator."""
        return joined(self.model, [self.batch_fn(s.train_x, s.train_y, self.cfg.batch_size, shuffle=True,
                                                 generator=g, drop_last=True)
                                   for s, g in zip(self.splits.each, self.shuffles)])

    def train_epoch(self) -> None:
        """One epoch's steps (or what is left of it after a mid-epoch resume), logging every `log_every`."""
        state, outs, cfg = self.state, self.outs, self.cfg
        self.model.train()
        window, clock = _Window(), _Clock(outs, cfg.batch_size)
        at_start = [g.get_state() for g in self.shuffles]  # a mid-epoch checkpoint's: the epoch is drawn again
        lrs: list[float] = []
        # closed as the loop leaves it, before validation: a pack's stream then forgets its members' lengths
        with contextlib.closing(self.epoch_batches()) as epoch_batches:
            for _ in itertools.islice(epoch_batches, state.epoch_steps):  # resumed mid-epoch: trained already
                pass
            for x, y, lengths in epoch_batches:
                lrs = [lr_at(state.steps) for lr_at in self.schedules]
                self.step(x, y, lengths, lrs, window)
                last = state.steps >= self.total_steps
                if len(window.items) == cfg.log_every or last:
                    _log(window, clock, outs, self.trackers, state.steps, lrs)
                    if not _live(outs):
                        break
                if last:
                    break
                if interrupts.pending() is not None:  # a signal: the run stops at this step, checkpointed
                    _stop(window, clock, outs, self.trackers, state, lrs,
                          None if self.checkpoint is None else lambda: self.save(at_start))
        if window.items and _live(outs):  # the epoch's last, partial window
            _log(window, clock, outs, self.trackers, state.steps, lrs)
        clock.lap(_live(outs), 0)  # the tail after the last log: time only

    def step(self, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor | None, lrs: list[float],
             window: "_Window") -> None:
        set_lrs(self.opt, lrs)
        with self.autocast:
            logits = self.forward(x, lengths)
            total, losses = self.model.losses(logits, y)
        self.opt.zero_grad(set_to_none=True)
        total.backward()
        if self.state.steps == 0:  # how hard the first step pulls on the input layer (one host sync)
            for out, ratio in zip(self.outs, first_grad_ratios(self.model)):
                out.first_grad_ratio = ratio
        self.opt.step()
        window.add(losses, logits, y)
        self.state.steps += 1
        self.state.epoch_steps += 1

    def end_epoch(self, epoch: int) -> None:
        """The epoch is done: the loop's and each live member's count (what a checkpoint resumes from)."""
        self.state.epochs_done, self.state.epoch_steps = epoch + 1, 0
        for k in _live(self.outs):
            self.outs[k].steps, self.outs[k].epochs_done = self.state.steps, self.state.epochs_done

    def validate(self) -> None:
        """The validation pass after an epoch: each live member's history, and a non-finite loss diverges it."""
        started = time.perf_counter()
        scores = evaluate(self.model, each_member(
            self.model, self.splits, lambda s: batches(s.val_x, s.val_y, self.cfg.eval_batch_size)))
        val_losses, val_accs = scores.loss, scores.acc
        for k in _live(self.outs):
            self.outs[k].val_seconds += time.perf_counter() - started
        for k in _live(self.outs):
            out = self.outs[k]
            metrics = {"step": self.state.steps, "loss/val": val_losses[k], "acc/val": val_accs[k],
                       "train_samples_per_s": out.train_samples_per_s}
            out.history.append({"epoch": out.epochs_done, **metrics})
            self.trackers[k].epoch(out.epochs_done, metrics)
            if not math.isfinite(val_losses[k]):
                out.status, out.diverged_step = "diverged", self.state.steps

    def save(self, shuffles: list[torch.Tensor]) -> None:
        save_checkpoint(self.checkpoint, self.model, self.opt, shuffles, self.state, self.outs,
                        time.perf_counter() - self.leg_started)


def _stop(window: "_Window", clock: "_Clock", outs: list[FitResult], trackers: list, state: LoopState,
          lrs: list[float], save) -> None:
    """A signal asked the loop to stop: report the steps since the last log, save the checkpoint at this
    step (`save()`), and raise the interruption with the step (with no checkpoint to save, without)."""
    stop = interrupts.pending()
    if window.items:
        _log(window, clock, outs, trackers, state.steps, lrs)
    clock.lap(_live(outs), 0)
    if save is None:
        raise stop
    for k in _live(outs):
        outs[k].steps = state.steps
    save()
    raise stop.at(state.steps)


def first_grad_ratios(model: Members) -> list[float]:
    """Per member, the norm of the loss's gradient over the norm of the first weight matrix (the first
    parameter with 2+ dimensions: the MLP's first linear layer, the CNN's first conv, the RNN's input
    weights)."""
    pairs = model.first_weights()
    return [math.nan if g is None else float(g.detach().double().norm() / w.detach().double().norm()) for w, g in pairs]


class _Clock:
    """Training time and samples per member: each lap (a log point, an epoch's end) is credited to the
    members still training, so a member that diverges mid-epoch keeps the time it trained. `window`: when
    the current log window's steps began (after the last report), for the per-window rate."""

    def __init__(self, outs: list[FitResult], batch_size: int):
        self.outs, self.batch_size = outs, batch_size
        self.started = self.window = time.perf_counter()

    def lap(self, members: list[int], steps: int) -> None:
        """Credit the time since the last lap, and `steps` steps' samples, to `members`."""
        now = time.perf_counter()
        for k in members:
            self.outs[k].train_seconds += now - self.started
            self.outs[k].samples += steps * self.batch_size
        self.started = now


def _live(outs: list[FitResult]) -> list[int]:
    """The members still training."""
    return [k for k, o in enumerate(outs) if o.status != "diverged"]


def _log(window: _Window, clock: _Clock, outs: list[FitResult], trackers: list, steps: int,
         lrs: list[float]) -> None:
    """Read the window and report each live member's part; a member with a non-finite loss is marked
    diverged at that step (its `steps`), whatever the log interval."""
    n = len(window.items)
    losses, accs = window.read(len(outs))  # the host sync: the clock reads after it
    members = _live(outs)
    clock.lap(members, n)
    seconds = clock.started - clock.window
    for k in members:
        out = outs[k]
        bad = [i for i, v in enumerate(losses[k]) if not math.isfinite(v)]
        if bad:
            out.status = "diverged"
            out.steps = out.diverged_step = steps - n + bad[0] + 1
            continue
        out.steps = steps
        trackers[k].step(steps, {"loss/train": sum(losses[k]) / n, "acc/train": accs[k],
                                 "throughput/samples_per_s": n * clock.batch_size / max(seconds, 1e-9),
                                 "lr": lrs[k]})
    clock.window = time.perf_counter()  # the next window's rate starts after these reports

