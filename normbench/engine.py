"""The training loop, one for plain runs and packs: `train` trains a model's members and returns one
result per member; `evaluate` scores it.

    result = fit(model, splits, cfg, tracker, device, checkpoint=run_dir / "checkpoint.pt")   # one member
    results = train(packed, splits, member_cfgs, trackers, device)                          # a pack's S
    loss, acc = evaluate(model, data.batches(splits.test_x, splits.test_y, 1000))

No Hydra and no display here: progress goes to a `Tracker` every `cfg.log_every` steps, which is also
the only point where the loop waits for the device (each step's loss and logits stay on the device).
The step itself is what a minimal hand-written loop does, plus one list append; `normbench bench`
measures the two side by side.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from normbench import interrupts, norms
from normbench.config import Config
from normbench.data import Splits, batches
from normbench.errors import UserError
from normbench.members import Batch, Members
from normbench.optim import make_member_optimizer, make_schedule, set_lrs



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


@contextlib.contextmanager
def batch_statistics(model: nn.Module) -> Iterator[None]:
    """Norms in training mode (each batch normalized by its own statistics), dropout off; on exit the
    model's state and mode are restored, so the running statistics that training mode updates are
    left exactly as they were."""
    saved = copy.deepcopy(model.state_dict())
    was_training = model.training
    model.train()
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.eval()
    try:
        yield
    finally:
        model.load_state_dict(saved)
        model.train(was_training)


def _statistics_modules(model: nn.Module) -> tuple[list[nn.Module], bool]:
    """(the modules whose batch statistics can be split into groups, whether every batch-dependent one can)."""
    from normbench.norms.batch_stats import BatchStatistics
    from normbench.norms.registry import TAG

    modules = list(model.modules())
    for member in model.member_models if isinstance(model, Members) else ():  # evaluated one by one
        modules += list(member.modules())
    def splits(m: nn.Module) -> bool:
        return isinstance(m, BatchStatistics) and m.splits_statistics

    dependent = [m for m in modules if torch.is_tensor(getattr(m, "running_mean", None))
                 or (hasattr(m, TAG) and getattr(m, TAG)[1] != "layer" and norms.get(getattr(m, TAG)[0]).batch_dependent)]
    return [m for m in modules if splits(m)], all(splits(m) for m in dependent)


def can_split_statistics(model: nn.Module) -> bool:
    """Can every batch-dependent norm of `model` normalize groups of a batch on their own (ghost batches)?"""
    return _statistics_modules(model)[1]


@contextlib.contextmanager
def split_statistics(model: nn.Module, samples: int) -> Iterator[None]:
    """Every batch-dependent norm normalizes each group of `samples` consecutive samples by their own
    statistics (a ghost batch; a norm with a smaller ghost batch keeps it), so one pass over large batches
    computes what passes over batches of `samples` compute, in a few kernel calls instead of thousands.
    Only where `can_split_statistics(model)`."""
    modules, ok = _statistics_modules(model)
    if not ok:
        raise ValueError("a batch-dependent norm of this model cannot split its statistics")
    saved = [(m, m.ghost_batch) for m in modules]
    for m in modules:
        if m.ghost_batch is None:
            m.ghost_batch = samples
    try:
        yield
    finally:
        for m, k in saved:
            m.ghost_batch = k


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


class PassClock:
    """Seconds per evaluation pass, by name: `with clock("test_acc_train_mode"): ...` (a name timed twice
    adds up). results.json's `eval_passes`."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch], batch_stats: bool = False,
             stats_per: int | None = None, per_sample: bool = False):
    """Mean cross-entropy and accuracy over (x, y, lengths) batches, in eval mode (running statistics),
    or with `batch_stats=True` normalizing each batch by its own statistics (the train/eval discrepancy);
    the model comes back unchanged either way. With `stats_per=k` (and batch_stats) each group of k
    samples of a batch is normalized on its own (`split_statistics`): batches of any multiple of k then
    score as batches of k would. A packed model (normbench.pack) scores every member on the same
    batches, or on each member's own ((S, N, ...) batches), and returns a list per member. With
    `per_sample`, a third value: which samples it classified correctly, in order ((N,) or (S, N) bool), so
    a later number over a prefix of them needs no pass of its own."""
    members = model.size if isinstance(model, Members) else None
    if members is not None:
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return ([float("nan")] * members,) * 2
        batches = itertools.chain([first], batches)
        if not model.packs(len(first[1])):  # large batches: each member alone is faster (docs/packing.md)
            batches = list(batches)
            scores = [evaluate(m, batches, batch_stats, stats_per, per_sample) for m in model.unpacked()]
            out = [s[0] for s in scores], [s[1] for s in scores]
            return (*out, torch.stack([s[2] for s in scores])) if per_sample else out
    loss = hits = None
    n = 0
    correct: list[torch.Tensor] = []
    split = split_statistics(model, stats_per) if batch_stats and stats_per else contextlib.nullcontext()
    with batch_statistics(model) if batch_stats else eval_mode(model), split:
        for x, y, lengths in batches:
            if members is not None:
                x, y, lengths = _for_members(members, x, y, lengths)
            logits = model(x, lengths)
            batch_loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)
            right = logits.argmax(-1) == y
            if per_sample:
                correct.append(right)
            batch_loss, batch_hits = batch_loss.sum(-1), right.sum(-1)
            loss = batch_loss if loss is None else loss + batch_loss
            hits = batch_hits if hits is None else hits + batch_hits
            n += y.shape[-1]
    if not n:
        out = (float("nan"), float("nan")) if members is None else ([float("nan")] * members,) * 2
        return (*out, torch.zeros(0, dtype=torch.bool)) if per_sample else out
    if members is None:
        out = loss.item() / n, hits.item() / n
    else:
        out = [v / n for v in loss.tolist()], [v / n for v in hits.tolist()]
    return (*out, torch.cat(correct, -1)) if per_sample else out


def _for_members(members: int, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor | None):
    """One batch for every member of a pack: shared (N, C, H, W) batches expanded, own (S, N, ...) kept."""
    if x.dim() == 5:
        return x, y, lengths
    return (x.expand(members, *x.shape), y.expand(members, *y.shape),
            None if lengths is None else lengths.expand(members, *lengths.shape))


@dataclass
class FitResult:
    """One member's training, as results.json records it."""
    status: str = "completed"  # completed | diverged
    history: list[dict] = field(default_factory=list)  # one dict of metrics per epoch
    steps: int = 0  # optimizer steps trained; a diverged run's is the step whose loss was non-finite
    epochs_done: int = 0
    train_seconds: float = 0.0  # time in training steps only (no evaluation)
    samples: int = 0  # samples stepped in those seconds (a diverged run's include its last log window's)
    diverged_step: int | None = None
    first_grad_ratio: float | None = None  # ||dL/dW|| / ||W|| of the first weight matrix at the first step
    val_seconds: float = 0.0  # time in the per-epoch validation passes (a pack's members share them)
    resumed_at_step: list[int] = field(default_factory=list)  # each step this training resumed from
    earlier_wall_s: float = 0.0  # wall time of the processes before this one, each up to the checkpoint it left

    @property
    def train_samples_per_s(self) -> float:
        return self.samples / self.train_seconds if self.train_seconds else 0.0


@dataclass
class LoopState:
    """Where the loop is, shared by every member: a diverged member stops counting, the loop does not."""
    steps: int = 0
    epochs_done: int = 0
    epoch_steps: int = 0  # steps into the epoch in progress (a checkpoint taken mid-epoch, at a signal)


def plan_steps(cfg: Config, n_train: int) -> tuple[int, int]:
    """(epochs, total optimizer steps): `max_steps` caps `epochs`; with epochs < 1 it alone decides."""
    per_epoch = n_train // cfg.batch_size
    if per_epoch < 1:
        raise UserError(f"batch_size={cfg.batch_size} is larger than the {n_train} training samples",
                        "lower batch_size or raise data.subset")
    if cfg.max_steps is not None:
        epochs = cfg.epochs if cfg.epochs >= 1 else math.ceil(cfg.max_steps / per_epoch)
        return epochs, min(cfg.max_steps, epochs * per_epoch)
    return cfg.epochs, cfg.epochs * per_epoch


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
    return train(model, splits, [cfg], [tracker], device, checkpoint, resume, batch_fn)[0]


def train(model: nn.Module, splits: Splits, cfgs: list[Config], trackers: list, device: torch.device,
          checkpoint: Path | None = None, resume: bool = False, batch_fn=batches) -> list[FitResult]:
    """Train `model`'s members on `splits.train_*`, evaluating on `splits.val_*` after every epoch; one
    result per member. A plain model is one member; a pack (`Members`) is S, member k with `cfgs[k]` (its
    own seed and lr, the rest shared) and `trackers[k]`.

    Each member draws its batches from its own generator (seeded by its seed, as its separate run's),
    the loss is the sum of the members' mean losses (so each member's gradient is its own), and one
    optimizer step updates every member. A member whose loss turns non-finite is recorded as diverged at
    that step; the others train on. `batch_fn` yields training batches (x, y, lengths) with
    `data.batches`' signature; a study may pass its own (augmented, or padded to random lengths).

    With `checkpoint`, the full state (model, optimizer, RNGs, loop and members) is saved atomically after
    every epoch, and at the step boundary where a signal stops the loop (`normbench.interrupts`: it then
    raises `Interrupted` with that step). `resume=True` continues from it, bit-identical on CPU to an
    unbroken run (mid-epoch: the epoch's batches are drawn again from its start and the ones already
    trained skipped), and never trains past the run's total steps. The checkpoint also adds this
    process's seconds so far to `earlier_wall_s`, so a resumed run's wall_s covers every process it took.
    """
    leg_started = time.perf_counter()  # this process's part of the training's wall time
    cfg, size = cfgs[0], len(cfgs)
    packed = isinstance(model, Members)
    epochs, total_steps = plan_steps(cfg, len(splits.train_x))
    norms.set_total_steps(model, total_steps)  # Batch Renorm's schedule is in fractions of the run
    opt = make_member_optimizer(model, cfgs)
    schedules = [make_schedule(c, total_steps) for c in cfgs]
    shuffles = [torch.Generator(device=device).manual_seed(c.seed) for c in cfgs]
    state, outs = LoopState(), [FitResult() for _ in cfgs]
    if resume and checkpoint is not None and checkpoint.exists():
        state, outs = load_checkpoint(checkpoint, model, opt, shuffles)
    forward, autocast = accelerate(model, cfg, device)
    for t in trackers:
        t.start(total_steps, state.steps)

    def losses_of(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what to differentiate, each member's mean loss)"""
        if not packed:
            loss = F.cross_entropy(logits, y)
            return loss, loss
        losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(size, -1).mean(1)
        return losses.sum(), losses

    with interrupts.stoppable():
        for epoch in range(state.epochs_done, epochs):
            if state.steps >= total_steps or not _live(outs):  # resumed after its last step: nothing left to train
                break
            model.train()
            window, clock = _Window(), _Clock(outs, cfg.batch_size)
            at_start = [g.get_state() for g in shuffles]  # a mid-epoch checkpoint's: the epoch is drawn again
            epoch_batches = (model.member_batches(batch_fn, splits.train_x, splits.train_y, cfg.batch_size, shuffles)
                             if packed else batch_fn(splits.train_x, splits.train_y, cfg.batch_size, shuffle=True,
                                                     generator=shuffles[0], drop_last=True))
            # closed as the loop leaves it, before validation: a pack's stream then forgets its members' lengths
            with contextlib.closing(epoch_batches):
                for _ in itertools.islice(epoch_batches, state.epoch_steps):  # resumed mid-epoch: trained already
                    pass
                for x, y, lengths in epoch_batches:
                    lrs = [lr_at(state.steps) for lr_at in schedules]
                    set_lrs(opt, lrs)
                    with autocast:
                        logits = forward(x, lengths)
                        total, losses = losses_of(logits, y)
                    opt.zero_grad(set_to_none=True)
                    total.backward()
                    if state.steps == 0:  # how hard the first step pulls on the input layer (one host sync)
                        for out, ratio in zip(outs, first_grad_ratios(model)):
                            out.first_grad_ratio = ratio
                    opt.step()
                    window.add(losses, logits, y)
                    state.steps += 1
                    state.epoch_steps += 1
                    last = state.steps >= total_steps
                    if len(window.items) == cfg.log_every or last:
                        _log(window, clock, outs, trackers, state.steps, lrs)
                        if not _live(outs):
                            break
                    if last:
                        break
                    if interrupts.pending() is not None:  # a signal: the run stops at this step, checkpointed
                        _stop(window, clock, outs, trackers, state, lrs, None if checkpoint is None else
                              lambda: save_checkpoint(checkpoint, model, opt, at_start, state, outs,
                                                      time.perf_counter() - leg_started))
            if window.items and _live(outs):  # the epoch's last, partial window
                _log(window, clock, outs, trackers, state.steps, lrs)
            clock.lap(_live(outs), 0)  # the tail after the last log: time only
            if not _live(outs):
                break

            started = time.perf_counter()
            val_losses, val_accs = evaluate(model if packed else forward,
                                            batches(splits.val_x, splits.val_y, cfg.eval_batch_size))
            for k in _live(outs):
                outs[k].val_seconds += time.perf_counter() - started
            if not packed:
                val_losses, val_accs = [val_losses], [val_accs]
            state.epochs_done, state.epoch_steps = epoch + 1, 0
            for k in _live(outs):
                out = outs[k]
                out.steps, out.epochs_done = state.steps, state.epochs_done
                metrics = {"step": state.steps, "loss/val": val_losses[k], "acc/val": val_accs[k],
                           "train_samples_per_s": out.train_samples_per_s}
                out.history.append({"epoch": out.epochs_done, **metrics})
                trackers[k].epoch(out.epochs_done, metrics)
                if not math.isfinite(val_losses[k]):
                    out.status, out.diverged_step = "diverged", state.steps
            if checkpoint is not None:
                save_checkpoint(checkpoint, model, opt, [g.get_state() for g in shuffles], state, outs,
                                time.perf_counter() - leg_started)
                if interrupts.pending() is not None:  # asked during validation: the epoch's checkpoint holds it
                    raise interrupts.pending().at(state.steps)
    if packed:
        model.unpacked()  # every member model holds its trained state
    return outs


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


def first_grad_ratios(model: nn.Module) -> list[float]:
    """Per member, the norm of the loss's gradient over the norm of the first weight matrix (the first
    parameter with 2+ dimensions: the MLP's first linear layer, the CNN's first conv, the RNN's input
    weights)."""
    if isinstance(model, Members):
        pairs = model.first_weights()
    else:
        w = next(p for p in model.parameters() if p.dim() >= 2)
        pairs = [(w, w.grad)]
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


CHECKPOINT_FORMAT = 3  # 2: epoch boundaries only; 1: before one loop served runs and packs (both read below)


def save_checkpoint(path: Path, model, opt, shuffles: list[torch.Tensor], state: LoopState,
                    outs: list[FitResult], leg_s: float = 0.0) -> None:
    """The full training state, atomically: model, optimizer, torch's RNGs, each member's batch generator
    as it was at the start of the epoch in progress (`shuffles`: their states; at an epoch's end, the next
    one's start), where the loop is (`state.epoch_steps` batches into that epoch) and what each member has
    done, its wall time counting this process's `leg_s` seconds. No scheduler state: the learning rate is
    a function of the step."""
    from normbench.results import atomic_write_bytes

    blob = {
        "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "shuffles": list(shuffles)},
        "loop": dict(state.__dict__),
        "members": [{**o.__dict__, "earlier_wall_s": o.earlier_wall_s + leg_s} for o in outs],
    }
    atomic_write_bytes(path, lambda f: torch.save(blob, f))


def load_checkpoint(path: Path, model, opt, shuffles: list[torch.Generator]) -> tuple[LoopState, list[FitResult]]:
    """Restore model, optimizer, RNGs and generators from `path`; (the loop's state, each member's)."""
    # weights_only=True: a checkpoint is data, never code to run.
    blob = _current(torch.load(path, map_location="cpu", weights_only=True), path)
    if len(blob["members"]) != len(shuffles):
        raise UserError(f"{path} holds {len(blob['members'])} members, this run trains {len(shuffles)}",
                        "resume with the same pack.seeds and pack.lrs, or choose a new hydra.run.dir")
    model.load_state_dict(blob["model"])
    opt.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"]["torch"])
    if blob["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(blob["rng"]["cuda"])
    for g, s in zip(shuffles, blob["rng"]["shuffles"]):
        g.set_state(s)
    state, outs = LoopState(**blob["loop"]), [FitResult(**m) for m in blob["members"]]
    for out in outs:
        out.resumed_at_step = [*out.resumed_at_step, state.steps]
    return state, outs


def _current(blob: dict, path: Path) -> dict:
    """A checkpoint in today's format. Format 2 is today's at epoch boundaries. Format 1 (no "format" key) kept a run's loop state in its one
    member, and a pack's in member 0, which stops counting when it diverges: the loop's state is then the
    furthest any member got (a live member's), which is where the pack was."""
    version = blob.get("format", 1)
    if version in (2, CHECKPOINT_FORMAT):  # 2 lacks what 3 adds (epoch_steps, resumed_at_step): defaults
        return blob
    if version != 1:
        raise UserError(f"{path} was written by a newer normbench (checkpoint format {version})",
                        "resume it with that version, or delete it to start over")
    fits = blob["fit"] if isinstance(blob["fit"], list) else [blob["fit"]]
    shuffles = blob["rng"].get("shuffles") or [blob["rng"]["shuffle"]]
    loop = {"steps": max(f["steps"] for f in fits), "epochs_done": max(f["epochs_done"] for f in fits)}
    return {**blob, "rng": {**blob["rng"], "shuffles": shuffles}, "loop": loop, "members": fits}
