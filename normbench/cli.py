"""The `normbench` command: the only module that imports Hydra.

    normbench train [-m] [key=value ...]      # one run, or a sweep with -m (a Hydra app)
    normbench norms                           # the catalog
    normbench summarize PATH                  # a sweep -> tables, CSV, Markdown, plots
"""

from __future__ import annotations

import os
import sys
import traceback

from normbench.errors import UserError

USAGE = """\
usage: normbench <command> [args]

Which normalization layer works, where, and why: real training runs on FashionMNIST and CIFAR-10.

commands:
  train [-m] [key=value ...]   train one model (or a sweep with -m); `normbench train --help` lists every key
  norms                        the normalization catalog: what each norm normalizes over, and its paper
  summarize PATH               turn a sweep's results.json files into tables, CSV, Markdown and plots

examples:
  normbench train norm=ln model=rnn
  normbench train -m norm=bn,gn,ln batch_size=2,8,32,128
  tensorboard --logdir outputs
"""


def _fail(e: BaseException, debug: bool) -> int:
    if debug or os.environ.get("NORMBENCH_DEBUG"):
        traceback.print_exception(e)
    print(f"normbench: error: {e}", file=sys.stderr)
    return 2


def _sweep_domains(hc) -> dict[str, list]:
    """The values each swept key takes in this run's sweep ({"batch_size": [2, 8, 32]}), read from the
    sweep's multirun.yaml, for TensorBoard's HParams tab. Groups map to their name key (norm -> norm.name)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    path = os.path.join(hc.sweep.dir, "multirun.yaml")
    if not os.path.exists(path):
        return {}
    sweep = OmegaConf.load(path).hydra
    # As Hydra's BasicSweeper does: the config's sweeper params, then the command line, which wins.
    lines = [f"{k}={v}" for k, v in (sweep.sweeper.get("params") or {}).items()] + list(sweep.overrides.task)
    domains = {}
    for line in lines:
        try:  # a glob over a group needs Hydra's config loader: skip what cannot be listed here
            (o,) = OverridesParser.create().parse_overrides([line])
            if o.is_sweep_override():
                key = o.key_or_group.lstrip("+~")
                key = f"{key}.name" if key in ("model", "norm", "data") else key
                domains[key] = sorted(set(o.sweep_iterator()), key=lambda v: (str(type(v)), v))
        except Exception:  # noqa: BLE001  the HParams domain is a convenience, never a reason to fail a run
            continue
    return domains


def _hydra_train(argv: list[str]) -> int:
    import hydra
    from hydra.core.config_store import ConfigStore
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from normbench.config import Config
    from normbench.runner import run

    ConfigStore.instance().store(name="base_config", node=Config)
    status = {"code": 0}

    @hydra.main(config_path="configs", config_name="config", version_base="1.3")
    def train(dict_cfg) -> None:
        cfg: Config = OmegaConf.to_object(dict_cfg)
        hc = HydraConfig.get()
        sweep = hc.mode == RunMode.MULTIRUN
        try:
            run(cfg, hc.runtime.output_dir, hparam_domains=_sweep_domains(hc) if sweep else None)
        except UserError as e:
            if sweep:
                print(f"normbench: job {hc.job.num} ({hc.job.override_dirname}) failed", file=sys.stderr)
            status["code"] = _fail(e, cfg.debug)
            if not sweep:
                raise SystemExit(status["code"]) from None
        except Exception as e:  # noqa: BLE001  in a sweep, one crash must not stop the others
            if not sweep:
                raise
            print(f"normbench: job {hc.job.num} ({hc.job.override_dirname}) crashed", file=sys.stderr)
            status["code"] = _fail(e, True)
        except KeyboardInterrupt:
            print("normbench: interrupted; what was done is saved in the run directory", file=sys.stderr)
            raise SystemExit(130) from None

    sys.argv = ["normbench train", *argv]
    train()
    return status["code"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "train":
        return _hydra_train(rest)
    if command == "summarize":
        from normbench.summarize import main as summarize

        try:
            return summarize(rest)
        except UserError as e:
            return _fail(e, False)
    print(f"normbench: error: unknown command {command!r}; choose train, norms or summarize "
          "(see normbench --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
