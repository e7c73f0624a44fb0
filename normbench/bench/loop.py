"""Bench section `loop`: the runner's training step (loop.fit) against a minimal hand-written loop.

Same model, norm, data (real FashionMNIST, resident on the device), batch size and optimizer kernel;
the hand-written loop indexes tensors per batch, steps Adam and logs nothing. The runner runs with no
tracker, and with the real ones (rich progress on a terminal, TensorBoard), which must cost nothing.
A fourth variant is the same hand-written loop with torch's default Adam (no `fused=True`): the loop
most people write. Warmup steps (the optimizer's lazy state, the allocator) are never timed.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console

from normbench import data, models, norms
from normbench.bench import clocks, fmt_ratio, interleave, markdown_table, paired_ratio, sync
from normbench.config import Config, DataConfig, ModelConfig, NormConfig, to_dict
from normbench.train.loop import fit
from normbench.train.tracking import NullTracker, RichTracker, TensorBoardTracker, Trackers

# (model, norm): the default runs, and the residual CNN with BN, where the small-batch result lives
CASES = (("mlp", "bn"), ("cnn", "bn"), ("rnn", "ln"), ("transformer", "ln"), ("resnet", "bn"))
BATCH_SIZES = (2, 64, 256)
LR = 1e-3


class Stopwatch(NullTracker):
    """Reads the clocks at the runner's log points: once after the warmup steps, then at every later
    one. The engine syncs with the device just before each, so the span is exactly the timed steps."""

    def __init__(self, warmup: int):
        self.warmup, self.t0, self.t1 = warmup, None, None

    def step(self, step: int, metrics: dict[str, float]) -> None:
        if step == self.warmup:
            self.t0 = clocks()
        elif step > self.warmup:
            self.t1 = clocks()

    def elapsed(self) -> tuple[float, float]:
        return self.t1[0] - self.t0[0], self.t1[1] - self.t0[1]


def hand_loop(model, x, y, batch_size: int, warmup: int, steps: int, fused: bool, device) -> tuple[float, float]:
    """The baseline: what one writes without a runner. Returns (wall, cpu) seconds of `steps` steps."""
    opt = torch.optim.Adam(model.parameters(), lr=LR, fused=True if fused else None)
    order = torch.randperm(len(x), device=x.device)
    model.train()
    for i in range(warmup + steps):
        if i == warmup:
            sync(device)
            t0 = clocks()
        idx = order[i * batch_size:(i + 1) * batch_size]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    sync(device)
    t1 = clocks()
    return t1[0] - t0[0], t1[1] - t0[1]


def runner_loop(model, splits, cfg: Config, warmup: int, terminal, tmp: Path) -> tuple[float, float]:
    """loop.fit for `warmup` + timed steps; with a `terminal` file, also the real trackers."""
    watch = Stopwatch(warmup)
    tracker: NullTracker = watch
    if terminal is not None:
        # A forced terminal console, so rich renders and refreshes as it does in front of a user.
        console = Console(file=terminal, force_terminal=True, width=120)
        tracker = Trackers([RichTracker("bench", console=console),
                            TensorBoardTracker(Path(tempfile.mkdtemp(dir=tmp)), to_dict(cfg)), watch])
    try:
        fit(model, splits, cfg, tracker, torch.device(cfg.device))
    finally:
        tracker.close()
    return watch.elapsed()


def plan(step_seconds: float, target: float, per_epoch: int) -> tuple[int, int, int]:
    """(log_every, warmup, timed steps) for about `target` seconds of timed steps, in one epoch.

    Steps up to 10 ms: the runner's default log interval, 50, with 50 warmup steps and at least 50
    timed. Slower steps: logging every step (its ~0.1 ms is then noise) and one warmup step (the
    allocator is warm from the calibration), so the slowest configurations stay a few seconds.
    """
    if step_seconds <= 0.01:
        log_every = 50
        steps = log_every * max(1, round(target / step_seconds / log_every))
    else:
        log_every = 1
        steps = max(2, round(target / step_seconds))
    warmup = log_every
    while warmup + steps > per_epoch and steps > log_every:
        steps -= log_every
    return log_every, warmup, steps


def run(args, device: torch.device):
    splits = data.load(DataConfig(root=args.data_root, download=False), device)
    # Validation runs after the timed steps; a small split keeps the bench short.
    splits = replace(splits, val_x=splits.val_x[:256], val_y=splits.val_y[:256])
    x, y = splits.train_x, splits.train_y
    rows, table = [], []
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as terminal:
        for model_name, norm in CASES:
            for bs in BATCH_SIZES:
                torch.manual_seed(0)
                # One model for every variant: separate copies sit at other addresses, which alone moved
                # an A/A comparison by a few percent here. Each call builds its own optimizer.
                net = models.create(ModelConfig(name=model_name), norms.factory(norm), splits.shape,
                                    splits.num_classes).to(device)
                first = hand_loop(net, x, y, bs, 1, 2, True, device)[0] / 2  # calibration
                log_every, warmup, steps = plan(first, args.seconds, len(x) // bs)
                cfg = Config(model=ModelConfig(name=model_name), norm=NormConfig(name=norm), batch_size=bs,
                             epochs=1, max_steps=warmup + steps, lr=LR, log_every=log_every,
                             device=device.type, eval_batch_size=256)
                times = interleave({
                    "hand": lambda: hand_loop(net, x, y, bs, warmup, steps, True, device),
                    "runner": lambda: runner_loop(net, splits, cfg, warmup, None, Path(tmp)),
                    "runner+trackers": lambda: runner_loop(net, splits, cfg, warmup, terminal, Path(tmp)),
                    "hand (default Adam)": lambda: hand_loop(net, x, y, bs, warmup, steps, False, device),
                }, args.rounds)
                wall = {k: [t[0] for t in v] for k, v in times.items()}
                cpu = {k: [t[1] for t in v] for k, v in times.items()}
                # Throughput ratio runner / hand = hand time / runner time: >= 1 means as fast.
                row = {
                    "model": model_name, "norm": norm, "batch_size": bs, "timed_steps": steps,
                    "warmup_steps": warmup, "log_every": log_every, "wall_s": wall, "cpu_s": cpu,
                    "hand_us_per_step": min(wall["hand"]) / steps * 1e6,
                    "runner_us_per_step": min(wall["runner"]) / steps * 1e6,
                    "ratio": paired_ratio(wall["hand"], wall["runner"]),
                    "ratio_trackers": paired_ratio(wall["hand"], wall["runner+trackers"]),
                    "ratio_cpu": paired_ratio(cpu["hand"], cpu["runner"]),
                    "ratio_trackers_cpu": paired_ratio(cpu["hand"], cpu["runner+trackers"]),
                    "ratio_vs_default_adam": paired_ratio(wall["hand (default Adam)"], wall["runner"]),
                }
                rows.append(row)
                table.append([model_name, norm, bs, f"{steps} ({log_every})",
                              f"{row['hand_us_per_step']:,.0f}", f"{row['runner_us_per_step']:,.0f}",
                              fmt_ratio(row["ratio"]), fmt_ratio(row["ratio_trackers"]),
                              fmt_ratio(row["ratio_cpu"]), fmt_ratio(row["ratio_trackers_cpu"]),
                              fmt_ratio(row["ratio_vs_default_adam"])])
                print(" | ".join(map(str, table[-1])), flush=True)
    text = ("### Runner vs hand-written loop (throughput ratio runner / hand-written; >= 1 is as fast)\n\n"
            "Hand-written: tensors indexed per batch, `Adam(fused=True)`, no logging. Runner: `loop.fit` "
            "with no tracker, and with rich progress + TensorBoard. CPU = process CPU time (all threads). "
            "Last column: the runner against the same loop with torch's default Adam.\n\n")
    text += markdown_table(
        ["model", "norm", "batch", "timed steps (log every)", "hand µs/step", "runner µs/step", "runner",
         "runner + rich + TB", "runner (CPU)", "runner + rich + TB (CPU)", "runner vs default-Adam loop"],
        table)
    return rows, text
