"""The training loop: `fit` trains a model on tensors and returns its history; `evaluate` scores it.

    history = fit(model, splits, cfg, tracker, device, checkpoint=run_dir / "checkpoint.pt")

No Hydra and no display here: progress goes to a `Tracker` every `cfg.log_every` steps, which is also
the only point where the loop waits for the device (each step's loss and logits stay on the device).
The step itself is what a minimal hand-written loop does, plus one list append; `normbench bench`
measures the two side by side.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from normbench.config import Config
from normbench.data import Splits, batches
from normbench.errors import UserError
from normbench.results import atomic_save


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


def make_optimizer(model: nn.Module, cfg: Config) -> torch.optim.Optimizer:
    params = list(model.parameters())
    # One fused kernel for all parameters instead of a Python loop over them: at batch 2 on the CPU the
    # step is ~1.6x faster. Fused needs floating-point parameters on CPU/CUDA/MPS.
    fast = {"fused": True} if all(p.is_floating_point() and p.device.type in ("cpu", "cuda", "mps")
                                  for p in params) else {}
    if cfg.optimizer == "adam":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fast)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **fast)
    raise UserError(f"unknown optimizer {cfg.optimizer!r}", "use optimizer=adam or optimizer=sgd")


def make_schedule(cfg: Config, total_steps: int) -> Callable[[int], float]:
    """step -> learning rate: linear warmup over `warmup_steps`, then constant or cosine decay to 0 at
    `total_steps`. A plain function of the step (as nanoGPT's get_lr), so resuming needs no scheduler
    state and a step costs no LRScheduler bookkeeping."""
    if cfg.schedule not in ("cosine", "constant"):
        raise UserError(f"unknown schedule {cfg.schedule!r}", "use schedule=cosine or schedule=constant")

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return cfg.lr * ((step + 1) / cfg.warmup_steps)
        if cfg.schedule == "constant":
            return cfg.lr
        progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
        return cfg.lr * (0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    return lr_at


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
             lengths: torch.Tensor | None = None, train_mode: bool = False) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over (x, y). `train_mode=True` keeps batch statistics live
    (BatchNorm normalizes each test batch by itself), to expose the train/eval discrepancy."""
    was_training = model.training
    model.train(train_mode)
    loss = torch.zeros((), device=x.device)
    hits = torch.zeros((), device=x.device, dtype=torch.long)
    for i in range(0, len(x), batch_size):
        logits = model(x[i:i + batch_size], None if lengths is None else lengths[i:i + batch_size])
        loss += F.cross_entropy(logits, y[i:i + batch_size], reduction="sum")
        hits += (logits.argmax(1) == y[i:i + batch_size]).sum()
    model.train(was_training)
    return loss.item() / len(x), hits.item() / len(x)


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


def fit(model: nn.Module, splits: Splits, cfg: Config, tracker, device: torch.device,
        checkpoint: Path | None = None, resume: bool = False, batch_fn=batches) -> FitResult:
    """Train `model` on `splits.train_*`, evaluating on `splits.val_*` after every epoch.

    `batch_fn` yields the training batches (x, y, lengths) with `data.batches`' signature; the
    variable-length regime passes its own (samples resized to random lengths, right-padded).

    With `checkpoint`, the full state (model, optimizer, RNG, history) is saved atomically after every
    epoch; `resume=True` continues from it, bit-identical on CPU to an unbroken run.
    """
    epochs, total_steps = plan_steps(cfg, len(splits.train_x))
    opt = make_optimizer(model, cfg)
    lr_at = make_schedule(cfg, total_steps)
    shuffle = torch.Generator(device=device).manual_seed(cfg.seed)
    out = FitResult()
    if resume and checkpoint is not None and checkpoint.exists():
        out = _load_checkpoint(checkpoint, model, opt, shuffle)
    forward, autocast = accelerate(model, cfg, device)
    tracker.start(total_steps, out.steps)

    # Each step's loss, logits and labels stay on the device, with no host sync; they are read once
    # every `log_every` steps, which is also where divergence is detected (to the exact step).
    window: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    window_start = time.perf_counter()
    for epoch in range(out.epochs_done, epochs):
        model.train()
        epoch_start = time.perf_counter()
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
            window.append((loss.detach(), logits.detach(), y))
            out.steps += 1
            if len(window) == cfg.log_every or out.steps == total_steps:
                losses = torch.stack([w[0] for w in window]).float().tolist()  # the host sync
                bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
                if bad:
                    out.status, out.diverged_step = "diverged", out.steps - len(losses) + bad[0] + 1
                    break
                hits = torch.cat([w[1] for w in window]).argmax(1).eq(torch.cat([w[2] for w in window]))
                now = time.perf_counter()
                tracker.step(out.steps, {
                    "loss/train": sum(losses) / len(losses),
                    "acc/train": hits.float().mean().item(),
                    "lr": lr,
                    "throughput/samples_per_s": len(window) * cfg.batch_size / (now - window_start),
                })
                window, window_start = [], now
            if out.steps >= total_steps:
                break
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.train_seconds += time.perf_counter() - epoch_start
        out.samples = out.steps * cfg.batch_size
        if out.status == "diverged":
            break

        val_loss, val_acc = evaluate(forward, splits.val_x, splits.val_y, cfg.eval_batch_size)
        out.epochs_done = epoch + 1
        metrics = {"epoch": out.epochs_done, "step": out.steps, "loss/val": val_loss, "acc/val": val_acc,
                   "train_samples_per_s": out.train_samples_per_s}
        out.history.append(metrics)
        tracker.epoch(out.epochs_done, metrics)
        if not math.isfinite(val_loss):
            out.status, out.diverged_step = "diverged", out.steps
            break
        if checkpoint is not None:
            _save_checkpoint(checkpoint, model, opt, shuffle, out)
        window_start = time.perf_counter()  # evaluation is not training time
        if out.steps >= total_steps:
            break
    return out


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


def _save_checkpoint(path: Path, model, opt, shuffle: torch.Generator, out: FitResult) -> None:
    # No scheduler state: the learning rate is a function of `out.steps`.
    state = {
        "model": model.state_dict(), "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "shuffle": shuffle.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
        "fit": {k: v for k, v in out.__dict__.items()},
    }
    atomic_save(state, path)


def _load_checkpoint(path: Path, model, opt, shuffle: torch.Generator) -> FitResult:
    # weights_only=True: a checkpoint is data, never code to run.
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    shuffle.set_state(state["rng"]["shuffle"])
    if state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return FitResult(**state["fit"])
