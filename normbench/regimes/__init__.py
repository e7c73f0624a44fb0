"""The regimes: what a regime adds to a plain training run, each in a room of its own.

    regime = regimes.for_config(cfg)            # variable_length when cfg.varlen.enabled, else default
    regime.validate(cfg)                        # its settings, checked before any data is read
    batch_fn = regime.train_batches(cfg)        # the engine's training batches
    results.update(regime.evaluations(model, splits, cfg))   # its extra test evaluations

A regime is a module with these three functions. A new regime (docs/regimes.md) is a new module here
and one line in `for_config`.
"""

from __future__ import annotations

from types import ModuleType

from normbench.config import Config
from normbench.regimes import default, variable_length


def for_config(cfg: Config) -> ModuleType:
    return variable_length if cfg.varlen.enabled else default


__all__ = ["for_config", "default", "variable_length"]
