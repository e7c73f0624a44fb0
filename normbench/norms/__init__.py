"""The normalization catalog: `create(name, num_features, layout, **options)` and `names()`.

    from normbench import norms
    norms.names()                                   # ['none', 'bn', 'ln', 'in', 'gn', ...]
    bn = norms.create("bn", 32, "image")            # nn.Module for (N, 32, H, W)
    make = norms.factory("gn", groups=8)            # what a model receives
    norms.set_total_steps(model, 5000)              # before training: Batch Renorm's schedule needs it
    make = norms.factory("custom", target="my_norm:ScaleNorm")   # your own norm (user.py)

Each family lives in its own module and registers itself on import; see registry.py for the spec. Norms
that installed packages declare (entry points in the group `normbench.norms`) register after them.
"""

from normbench.norms.registry import (
                                      LAYOUTS,
                                      NormFactory,
                                      NormSpec,
                                      batch_free_names,
                                      create,
                                      get,
                                      has_running_statistics,
                                      is_batch_dependent,
                                      names,
                                      register,
)

# Importing a family registers its norms, in catalog order.
from normbench.norms import basic, batch, layer, group, rms, weight  # noqa: E402,F401  isort: skip
from normbench.norms import switchable, renorm, frn, evonorm, dyt, power, derf, seednorm, dyisru  # noqa: E402,F401  isort: skip
from normbench.norms import scratch  # noqa: E402,F401  isort: skip  (the from-scratch twins, norm.impl=scratch)
from normbench.norms.renorm import set_total_steps  # noqa: E402  isort: skip
from normbench.norms.user import CUSTOM, factory, load_entry_points  # noqa: E402  isort: skip

load_entry_points()

__all__ = ["CUSTOM", "LAYOUTS", "NormFactory", "NormSpec", "batch_free_names", "create", "factory", "get", "has_running_statistics",
           "is_batch_dependent", "names", "register", "set_total_steps"]
