"""What the training loop keeps: each member's result (`FitResult`, as results.json records it) and where
the loop is (`LoopState`). Shared by the loop and its checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FitResult:
    """One member's training, as results.json records it."""
    status: str = "completed"  # completed | diverged
    history: list[dict] = field(default_factory=list)  # one dict of metrics per validated epoch (cfg.validations)
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

