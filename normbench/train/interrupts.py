"""Stopping a run cleanly: a signal asks, the training loop answers at its next step boundary.

    interrupts.install([signal.SIGINT, signal.SIGTERM])   # the CLI; a SLURM task adds SIGUSR2
    with interrupts.stoppable():                           # loop.train, around its loop
        ...                                                # each step: interrupts.pending()

A signal that arrives while the loop runs (Ctrl-C, `kill`, a container stop, SLURM's preemption or
time-limit warning) only sets a flag: the loop finishes the step it is in, saves a checkpoint there and
raises `Interrupted` with that step, so `resume=true` continues from exactly that point. Outside the loop
(data loading, the test suite) the signal raises `Interrupted` at once: the last checkpoint (an epoch's
end, or training's) is where a resume starts. A second signal while one is pending raises at once too,
so a user who presses Ctrl-C twice is never kept waiting.

What happens after an interruption (rerun by hand, or requeued on a cluster) is decided by `policy`,
which a launcher may replace (hydra_plugins/normbench_slurm); results.json records its answer.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass(frozen=True)
class Outcome:
    """What follows an interruption: `requeue` (a cluster task that requeues itself with resume=true) and
    the sentence results.json and the CLI say about it."""
    requeue: bool
    then: str


def _by_hand(signal_name: str) -> Outcome:
    return Outcome(False, "rerun the same command with resume=true to continue")


policy: Callable[[str], Outcome] = _by_hand


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal: `signal` its name ("SIGINT", "SIGTERM", "SIGUSR2"), `step` the optimizer
    step its checkpoint holds when the loop stopped at a step boundary (None when it stopped elsewhere)."""

    def __init__(self, signal_name: str, step: int | None = None):
        super().__init__(signal_name)
        self.signal, self.step = signal_name, step
        self._outcome: Outcome | None = None

    @property
    def outcome(self) -> Outcome:
        """Decided once, when first asked (a cluster's policy reads the job's state at that moment)."""
        if self._outcome is None:
            self._outcome = policy(self.signal)
        return self._outcome

    @property
    def where(self) -> str:
        """Where a resume starts, in words: the step its checkpoint holds, or the last finished epoch."""
        return (f"at step {self.step}, kept in checkpoint.pt" if self.step is not None else
                "checkpoint.pt keeps its last finished epoch")

    def at(self, step: int) -> "Interrupted":
        """The same interruption, stopped at `step` (its checkpoint saved there)."""
        out = Interrupted(self.signal, step)
        out._outcome = self._outcome
        return out


_pending: Interrupted | None = None
_depth = 0  # > 0 while a training loop runs (it answers at its next step)


def _handler(signum: int, frame) -> None:
    global _pending
    stop = Interrupted(signal.Signals(signum).name)
    if _depth and _pending is None:
        _pending = stop  # the loop stops at its next step boundary
        return
    raise stop


def install(signals: list[signal.Signals]) -> None:
    """Route `signals` here (main thread only, as Python's signal module requires)."""
    for s in signals:
        signal.signal(s, _handler)


def pending() -> Interrupted | None:
    """The interruption a signal asked for since the loop began, if any."""
    return _pending


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Signals that arrive inside wait for the loop's next `pending()` check; one left unanswered when the
    block ends (the loop was past its last check) is raised as it leaves."""
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        left, _pending = _pending, None
    if left is not None and _depth == 0:
        raise left


def exit_status(e: Interrupted) -> int:
    """128 + the signal's number, as a shell reports a process a signal ended (130 for Ctrl-C)."""
    try:
        return 128 + signal.Signals[e.signal].value
    except KeyError:
        return 130
