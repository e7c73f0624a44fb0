"""Time to a test accuracy: train with the runner's engine and score the test set after every epoch.

    python scripts/time_to_accuracy.py --device cuda --amp --compile        # default CNN + BN, 92%
    python scripts/time_to_accuracy.py --model mlp --norm ln --target 0.88 --epochs 5

Prints one JSON line: for every epoch, the cumulative training seconds (steps only), the wall seconds
since training started (validation included, this script's own test scoring excluded) and the test
accuracy; and the first epoch at or above `--target`. The run is planned for `--epochs` epochs (the
cosine schedule spans them all) and stops early once the target is reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from normbench import data, models, norms  # noqa: E402
from normbench.config import Config, DataConfig, ModelConfig, NormConfig, to_dict  # noqa: E402
from normbench.data import batches  # noqa: E402
from normbench.results import versions  # noqa: E402
from normbench.device import pick_device  # noqa: E402
from normbench.train.evaluate import evaluate  # noqa: E402
from normbench.train.loop import fit  # noqa: E402
from normbench.train.tracking import NullTracker  # noqa: E402


class Reached(Exception):
    """Raised from the tracker to stop training once the target accuracy is reached."""


class TestEveryEpoch(NullTracker):
    def __init__(self, model, splits, cfg: Config, target: float):
        self.model, self.splits, self.cfg, self.target = model, splits, cfg, target
        self.started = time.perf_counter()
        self.excluded = 0.0  # seconds spent here scoring the test set
        self.epochs: list[dict] = []

    def epoch(self, epoch: int, metrics: dict) -> None:
        wall = time.perf_counter() - self.started - self.excluded
        t = time.perf_counter()
        test_acc = evaluate(self.model, batches(self.splits.test_x, self.splits.test_y, self.cfg.eval_batch_size)).acc[0]
        self.excluded += time.perf_counter() - t
        train_s = metrics["step"] * self.cfg.batch_size / metrics["train_samples_per_s"]
        self.epochs.append({"epoch": epoch, "train_s": train_s, "wall_s": wall, "val_acc": metrics["acc/val"],
                            "test_acc": test_acc})
        print(json.dumps(self.epochs[-1]), file=sys.stderr, flush=True)
        if test_acc >= self.target:
            raise Reached


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="cnn")
    p.add_argument("--norm", default="bn")
    p.add_argument("--target", type=float, default=0.92)
    p.add_argument("--epochs", type=int, default=10, help="the planned run (its cosine schedule); stops at the target")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--amp", action="store_true", help="bf16 autocast")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", default="./data")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    cfg = Config(model=ModelConfig(name=args.model), norm=NormConfig(name=args.norm),
                 data=DataConfig(root=args.data_root, download=False), batch_size=args.batch_size,
                 epochs=args.epochs, lr=args.lr, seed=args.seed, device=device.type, amp=args.amp,
                 compile=args.compile, progress=False, tensorboard=False)
    loaded = time.perf_counter()
    splits = data.load(cfg.data, device)
    load_s = time.perf_counter() - loaded
    torch.manual_seed(cfg.seed)
    model = models.create(cfg.model, norms.factory(cfg.norm.name), splits.shape, splits.num_classes).to(device)
    tracker = TestEveryEpoch(model, splits, cfg, args.target)
    try:
        fit(model, splits, cfg, tracker, device)
    except Reached:
        pass
    hit = next((e for e in tracker.epochs if e["test_acc"] >= args.target), None)
    print(json.dumps({
        "target": args.target, "reached": hit is not None, "at": hit, "epochs": tracker.epochs,
        "data_load_s": load_s, "device": str(device),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "config": to_dict(cfg), "versions": versions(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
