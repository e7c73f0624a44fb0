"""The run: runner (a run's plan, decided once) -> loop -> evaluate, checkpoint; optim, interrupts, tracking."""
