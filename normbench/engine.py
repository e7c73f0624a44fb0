"""The training loop: `fit` trains a model on tensors and returns its history; `evaluate` scores it.

    result = fit(model, splits, cfg, tracker, device, checkpoint=run_dir / "checkpoint.pt")
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

from normbench import norms
from normbench.config import Config
from normbench.data import Splits, batches
from normbench.errors import UserError
from normbench.optim import make_optimizer, make_schedule

Batch = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]  # (x, y, lengths)


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
    from normbench.norms.registry import TAG

    modules = list(model.modules())
    for member in getattr(model, "member_models", ()):  # a pack's member models, evaluated one by one
        modules += list(member.modules())
    def splits(m: nn.Module) -> bool:
        return hasattr(m, "ghost_batch") and getattr(m, "splits_statistics", True)

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
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch], batch_stats: bool = False,
             stats_per: int | None = None) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over (x, y, lengths) batches, in eval mode (running statistics),
    or with `batch_stats=True` normalizing each batch by its own statistics (the train/eval discrepancy);
    the model comes back unchanged either way. With `stats_per=k` (and batch_stats) each group of k
    samples of a batch is normalized on its own (`split_statistics`): batches of any multiple of k then
    score as batches of k would. A packed model (normbench.pack) scores every member on the same
    batches, or on each member's own ((S, N, ...) batches), and returns a list per member."""
    members = getattr(model, "size", None)
    if members is not None:
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return ([float("nan")] * members,) * 2
        batches = itertools.chain([first], batches)
        if not model.packs(len(first[1])):  # large batches: each member alone is faster (docs/packing.md)
            batches = list(batches)
            scores = [evaluate(m, batches, batch_stats, stats_per) for m in model.unpacked()]
            return [s[0] for s in scores], [s[1] for s in scores]
    loss = hits = None
    n = 0
    split = split_statistics(model, stats_per) if batch_stats and stats_per else contextlib.nullcontext()
    with batch_statistics(model) if batch_stats else _eval_mode(model), split:
        for x, y, lengths in batches:
            if members is not None:
                x, y, lengths = _for_members(members, x, y, lengths)
            logits = model(x, lengths)
            batch_loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)
            batch_loss, batch_hits = batch_loss.sum(-1), (logits.argmax(-1) == y).sum(-1)
            loss = batch_loss if loss is None else loss + batch_loss
            hits = batch_hits if hits is None else hits + batch_hits
            n += y.shape[-1]
    if not n:
        return (float("nan"), float("nan")) if members is None else ([float("nan")] * members,) * 2
    if members is None:
        return loss.item() / n, hits.item() / n
    return [v / n for v in loss.tolist()], [v / n for v in hits.tolist()]


def _for_members(members: int, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor | None):
    """One batch for every member of a pack: shared (N, C, H, W) batches expanded, own (S, N, ...) kept."""
    if x.dim() == 5:
        return x, y, lengths
    return (x.expand(members, *x.shape), y.expand(members, *y.shape),
            None if lengths is None else lengths.expand(members, *lengths.shape))


@dataclass
class FitResult:
    status: str = "completed"  # completed | diverged
    history: list[dict] = field(default_factory=list)  # one dict of metrics per epoch
    steps: int = 0
    epochs_done: int = 0
    train_seconds: float = 0.0  # time in training steps only (no evaluation)
    samples: int = 0
    diverged_step: int | None = None

    @property
    def train_samples_per_s(self) -> float:
        return self.samples / self.train_seconds if self.train_seconds else 0.0


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
    """The steps since the last log: their losses, logits and labels stay on the device until `read`
    (the loop's one host sync), and the clock runs only while training."""

    def __init__(self):
        self.items: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.seconds, self.started = 0.0, time.perf_counter()

    def add(self, loss: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        self.items.append((loss.detach(), logits.detach(), y))

    def pause(self) -> None:
        self.seconds += time.perf_counter() - self.started

    def resume(self) -> None:
        self.started = time.perf_counter()

    def read(self, batch_size: int) -> tuple[list[float], dict[str, float]]:
        """(the window's losses, its metrics) and a fresh window; call it paused."""
        losses = torch.stack([w[0] for w in self.items]).double().tolist()  # the host sync
        hits = torch.cat([w[1] for w in self.items]).argmax(1).eq(torch.cat([w[2] for w in self.items]))
        metrics = {"loss/train": sum(losses) / len(losses), "acc/train": hits.float().mean().item(),
                   "throughput/samples_per_s": len(self.items) * batch_size / max(self.seconds, 1e-9)}
        self.items, self.seconds = [], 0.0
        return losses, metrics


def fit(model: nn.Module, splits: Splits, cfg: Config, tracker, device: torch.device,
        checkpoint: Path | None = None, resume: bool = False, batch_fn=batches) -> FitResult:
    """Train `model` on `splits.train_*`, evaluating on `splits.val_*` after every epoch.

    `batch_fn` yields the training batches (x, y, lengths) with `data.batches`' signature; a study may
    pass its own (augmented, or resized to random lengths and right-padded).

    With `checkpoint`, the full state (model, optimizer, RNG, history) is saved atomically after every
    epoch; `resume=True` continues from it, bit-identical on CPU to an unbroken run, and never trains
    past the run's total steps.
    """
    epochs, total_steps = plan_steps(cfg, len(splits.train_x))
    norms.set_total_steps(model, total_steps)  # Batch Renorm's schedule is in fractions of the run
    opt = make_optimizer(model, cfg)
    lr_at = make_schedule(cfg, total_steps)
    shuffle = torch.Generator(device=device).manual_seed(cfg.seed)
    out = FitResult()
    if resume and checkpoint is not None and checkpoint.exists():
        out = _load_checkpoint(checkpoint, model, opt, shuffle)
    forward, autocast = accelerate(model, cfg, device)
    tracker.start(total_steps, out.steps)

    for epoch in range(out.epochs_done, epochs):
        if out.steps >= total_steps:  # a run resumed after its last step: nothing left to train
            break
        model.train()
        window, epoch_start = _Window(), time.perf_counter()
        for x, y, lengths in batch_fn(splits.train_x, splits.train_y, cfg.batch_size, shuffle=True,
                                     generator=shuffle, drop_last=True):
            lr = lr_at(out.steps)
            for group in opt.param_groups:
                group["lr"] = lr
            with autocast:
                logits = forward(x, lengths)
                loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            window.add(loss, logits, y)
            out.steps += 1
            last = out.steps >= total_steps
            if len(window.items) == cfg.log_every or last:
                if not _log(window, out, tracker, cfg.batch_size, lr):
                    break
            if last:
                break
        if window.items and out.status != "diverged":  # the epoch's last, partial window
            _log(window, out, tracker, cfg.batch_size, lr)
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.train_seconds += time.perf_counter() - epoch_start
        out.samples = out.steps * cfg.batch_size
        if out.status == "diverged":
            break

        val_loss, val_acc = evaluate(forward, batches(splits.val_x, splits.val_y, cfg.eval_batch_size))
        out.epochs_done = epoch + 1
        metrics = {"step": out.steps, "loss/val": val_loss, "acc/val": val_acc,
                   "train_samples_per_s": out.train_samples_per_s}
        out.history.append({"epoch": out.epochs_done, **metrics})
        tracker.epoch(out.epochs_done, metrics)
        if not math.isfinite(val_loss):
            out.status, out.diverged_step = "diverged", out.steps
            break
        if checkpoint is not None:
            _save_checkpoint(checkpoint, model, opt, shuffle, out)
    return out


def _log(window: _Window, out: FitResult, tracker, batch_size: int, lr: float) -> bool:
    """Read the window and report it; False (and `out` marked diverged at the exact step) on a
    non-finite loss."""
    window.pause()
    losses, metrics = window.read(batch_size)
    bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
    if bad:
        out.status, out.diverged_step = "diverged", out.steps - len(losses) + bad[0] + 1
        return False
    tracker.step(out.steps, {**metrics, "lr": lr})
    window.resume()
    return True


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


def save_checkpoint(path: Path, model, opt, generators: dict, fit) -> None:
    """The full training state, atomically: model, optimizer, torch's RNGs, the loop's own generators'
    states (`generators`, under rng) and what the loop has done (`fit`). No scheduler state: the learning
    rate is a function of the step."""
    from normbench.results import atomic_write_bytes

    state = {
        "model": model.state_dict(), "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [], **generators},
        "fit": fit,
    }
    atomic_write_bytes(path, lambda f: torch.save(state, f))


def load_checkpoint(path: Path, model, opt) -> dict:
    """Restore model, optimizer and torch's RNGs from `path`; the state, for the loop's generators and fit."""
    # weights_only=True: a checkpoint is data, never code to run.
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    if state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state


def _save_checkpoint(path: Path, model, opt, shuffle: torch.Generator, out: FitResult) -> None:
    save_checkpoint(path, model, opt, {"shuffle": shuffle.get_state()}, dict(out.__dict__))


def _load_checkpoint(path: Path, model, opt, shuffle: torch.Generator) -> FitResult:
    state = load_checkpoint(path, model, opt)
    shuffle.set_state(state["rng"]["shuffle"])
    return FitResult(**state["fit"])
