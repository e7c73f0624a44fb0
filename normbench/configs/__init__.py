"""The yaml config groups Hydra composes (`config.yaml`, `norm/`, `experiment/`, ...), and `store_configs`,
which registers what they build on: the typed schema and the `model` group."""


def store_configs() -> None:
    """Hydra's ConfigStore: the typed schema as `base_config`, and the `model` group from MODEL_DEFAULTS,
    the one place each model's defaults are written, so `--cfg job`, `--help` and every run's
    .hydra/config.yaml show the values that train (a CNN's channels [32, 64], not null)."""
    from hydra.core.config_store import ConfigStore

    from normbench.config import MODEL_DEFAULTS, schema

    store = ConfigStore.instance()
    store.store(name="base_config", node=schema())
    for name, defaults in MODEL_DEFAULTS.items():
        store.store(group="model", name=name, node={"name": name, **defaults})
