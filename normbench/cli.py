"""The `normbench` command: the only module that imports Hydra.

    normbench train [-m] [key=value ...]      # one run, or a sweep with -m (a Hydra app)
    normbench norms                           # the catalog
    normbench summarize PATH                  # a sweep -> tables, CSV, Markdown, plots
    normbench bench [--quick]                 # how fast the runner is (normbench/bench/)
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
  bench [--quick]              time the runner against a hand-written loop, norms, cells and sweeps

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
        try:
            run(cfg, hc.runtime.output_dir)
        except UserError as e:
            status["code"] = _fail(e, cfg.debug)
            if hc.mode != RunMode.MULTIRUN:  # a sweep goes on with its other runs
                raise SystemExit(status["code"]) from None
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
    if command == "bench":
        from normbench.bench import main as bench

        return bench(rest)
    print(f"normbench: error: unknown command {command!r}; choose train, norms or summarize "
          "(see normbench --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
