"""Kill a run with SIGKILL halfway through an epoch, resume it, and compare with two unbroken runs.

    python scripts/check_resume.py /tmp/resume-check model=cnn norm=gn data.subset=5000 epochs=3 threads=1

Runs the same `normbench train` command three times in OUT: `a` and `b` unbroken (same seed: the
determinism check), `k` killed after its 2nd checkpoint plus half an epoch, then resumed with
`resume=true`. Prints each run's metrics and whether they are identical (timings excluded).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def train(out: Path, overrides: list[str], *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "normbench", "train", "progress=false", "tensorboard=false", "device=cpu",
            *overrides, f"hydra.run.dir={out}", *extra]
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_mid_epoch(proc: subprocess.Popen, checkpoint: Path) -> None:
    stamps, last = [], None
    while len(stamps) < 2:  # two checkpoints: one epoch's duration
        if proc.poll() is not None:
            sys.exit(f"the run ended before its 2nd epoch: {proc.stderr.read()}")
        mtime = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        if mtime is not None and mtime != last:
            stamps.append(time.monotonic())
            last = mtime
        time.sleep(0.005)
    time.sleep((stamps[1] - stamps[0]) / 2)
    if proc.poll() is not None:
        sys.exit("the run finished before it could be killed; give it more epochs")
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def metrics(res: dict) -> dict:
    history = [{k: v for k, v in e.items() if k != "train_samples_per_s"} for e in res["history"]]
    return {"history": history, **{k: res[k] for k in ("steps", "test_loss", "test_acc")}}


def main() -> None:
    out, overrides = Path(sys.argv[1]), sys.argv[2:]
    shutil.rmtree(out, ignore_errors=True)
    for name in "ab":
        proc = train(out / name, overrides)
        if proc.wait():
            sys.exit(proc.stderr.read())
    proc = train(out / "k", overrides)
    kill_mid_epoch(proc, out / "k" / "checkpoint.pt")
    import torch  # only here: the three runs above should not wait for it

    state = torch.load(out / "k" / "checkpoint.pt", weights_only=True)["loop"]
    print(f"k: SIGKILL after {state['epochs_done']} epochs ({state['steps']} steps checkpointed); results.json "
          f"says: {json.loads((out / 'k' / 'results.json').read_text())['error'][:60]}...")
    proc = train(out / "k", overrides, "resume=true")
    if proc.wait():
        sys.exit(proc.stderr.read())
    res = {name: json.loads((out / name / "results.json").read_text()) for name in "abk"}
    for name, r in res.items():
        print(f"{name}: test_acc={r['test_acc']} test_loss={r['test_loss']!r} "
              f"val_acc per epoch={[e['acc/val'] for e in r['history']]}")
    print(f"same seed, two runs identical: {metrics(res['a']) == metrics(res['b'])}")
    print(f"killed + resumed identical to unbroken: {metrics(res['a']) == metrics(res['k'])}")


if __name__ == "__main__":
    main()
