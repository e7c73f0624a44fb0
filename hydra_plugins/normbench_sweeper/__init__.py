"""normbench's sweeper: Hydra's basic sweeper, composing each job's config once.

The basic sweeper composes every job of a batch to validate it (so a bad value fails before any job
runs), and then the launcher composes each job again to run it: ~0.35 s a job here, twice. This sweeper
keeps the composition the validation made and hands it to the launcher, so each job is composed once
and a bad value still fails before anything runs. Selected in normbench/configs/config.yaml
(`override hydra/sweeper: normbench`); everything else is the basic sweeper's (`hydra.sweeper.params`,
`max_batch_size`).
"""

from __future__ import annotations

import copy
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore

# The basic sweeper's options (BasicSweeperConf), as a plain node: Hydra's plugin scan runs this module
# without registering it in sys.modules, where a dataclass cannot be defined.
ConfigStore.instance().store(group="hydra/sweeper", name="normbench", provider="normbench", node={
    "_target_": "hydra_plugins.normbench_sweeper.NormbenchSweeper", "max_batch_size": None, "params": None})


def compose_once(loader) -> None:
    """Make `loader.load_sweep_config` compose each job's overrides once: the first call (the sweeper's
    validation) composes and keeps a copy, the second (the launcher's) takes that copy."""
    compose = loader.load_sweep_config
    composed: dict[tuple, Any] = {}

    def once(master_config, sweep_overrides):
        key = tuple(sweep_overrides)
        if key in composed:
            return composed.pop(key)
        cfg = compose(master_config, list(sweep_overrides))
        composed[key] = copy.deepcopy(cfg)
        return cfg

    loader.load_sweep_config = once


class NormbenchSweeper(BasicSweeper):
    def setup(self, *, hydra_context, task_function, config) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        compose_once(hydra_context.config_loader)  # the launcher composes through the same loader
