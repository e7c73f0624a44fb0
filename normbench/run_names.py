"""Names of a sweep's run directories, which are also TensorBoard's run names: what varies, first.

    sweep_subdir(["norm.name", "batch_size", "seed"], ["norm=bn", "batch_size=4", "seed=0", "max_steps=60"], 3)
    # -> "bn,bs=4,seed=0,job3"

The identity keys (norm, model, data) as their bare value, then the other keys the sweep varies as
short key=value pairs in command-line order, the seed last, then the job number (unique per job even
when two jobs share their values), joined by commas as Hydra's own override_dirname is. One directory
level, not bn/bs=4/...: TensorBoard shows the same name either way, and whatever reads a sweep as
<sweep>/<run>/results.json keeps working. Constant overrides (max_steps=60) stay in the run's config, not in
its name; runtime keys never vary a name. Hydra's config calls this through a resolver (cli.py).
"""

from __future__ import annotations

from normbench.config import runtime_keys

IDENTITY = ("norm.name", "model.name", "data.name")
GROUPS = {"norm", "model", "data"}  # config groups: `norm=bn` sets norm.name
SHORT = {"batch_size": "bs", "norm.ghost_batch": "ghost", "weight_decay": "wd", "max_steps": "steps"}


def _key(override: str) -> str:
    key = override.split("=", 1)[0].lstrip("+~")
    return f"{key}.name" if key in GROUPS else key


def _part(key: str, value: str) -> str:
    value = value.replace("/", "_").replace(",", "_").replace(" ", "")
    if key in IDENTITY:
        return value
    return f"{SHORT.get(key, key.rpartition('.')[2] if key.count('.') == 1 else key)}={value}"


def sweep_subdir(varying: list[str], task: list[str], num: int) -> str:
    """The run directory under the sweep directory for job `num` with overrides `task` (each `key=value`),
    given the keys the sweep gives more than one value (`varying`)."""
    values = {_key(o): o.split("=", 1)[1] for o in task if "=" in o}
    keys = [k for k in dict.fromkeys(_key(k) for k in varying) if k in values and k not in runtime_keys()]
    order = [k for k in IDENTITY if k in keys] + [k for k in keys if k not in IDENTITY and k != "seed"]
    order += ["seed"] * ("seed" in keys)
    return ",".join([*(_part(k, values[k]) for k in order), f"job{num}"])
