"""`results.json`: the stable per-run contract (docs/design.md), written atomically, and read back.

    write_results(run_dir, {"status": "completed", "test_acc": 0.91, ...})
    res = read_results(run_dir / "results.json")

Fields: status (completed | diverged | failed), test_acc, val_acc, train_samples_per_s, wall_s,
epochs_done, history, config, versions, git_sha, plus regime-specific extras.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO, Callable

import normbench

RESULTS = "results.json"
PACK = "pack.json"  # in a pack's run directory: its members (each a run directory with a results.json)
STATUSES = ("completed", "diverged", "failed")


def atomic_write_bytes(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Write through a temporary file in the same directory, then rename: readers never see half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode()))


def versions() -> dict[str, str]:
    """Read from the installed packages' metadata: no need to import torch (summarize starts fast)."""
    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "torch": version("torch"), "normbench": normbench.__version__}


def cpu_model() -> str:
    """The processor's model name (lscpu's "Model name", from /proc/cpuinfo): timings mean nothing without it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    found = (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    return next(found, None) or platform.processor() or platform.machine()


def git_sha() -> str | None:
    """The commit of the normbench checkout that ran, when it is a git checkout; else $NORMBENCH_GIT_SHA,
    which a copy of a checkout without its .git (a cluster's or a GPU machine's) sets to the commit it copied."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(normbench.__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        out = None
    found = out.stdout.strip() if out is not None and out.returncode == 0 else ""
    return found or os.environ.get("NORMBENCH_GIT_SHA") or None


def write_results(run_dir: Path, results: dict[str, Any]) -> Path:
    if results.get("status") not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {results.get('status')!r}")
    path = Path(run_dir) / RESULTS
    atomic_write_text(path, json.dumps(results, indent=2, sort_keys=False) + "\n")
    return path


def read_results(path: Path) -> dict[str, Any]:
    """Parse one results.json; raises ValueError when it is unreadable or breaks the contract (`problem`)."""
    try:
        res = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: unreadable ({type(e).__name__})") from None
    if why := problem(res):
        raise ValueError(f"{path}: {why}")
    return res


COUNTS = ("steps", "epochs_done", "diverged_step")  # whole numbers >= 0 where given
SECONDS = ("wall_s", "train_s", "eval_s")  # durations >= 0 where given


def problem(res: Any) -> str | None:
    """Why `res` is not a results.json normbench could have written (a shared runs file is data from anyone),
    or None: status one of STATUSES, config a mapping, history a list of epochs, every accuracy (a key with
    "acc" in its name, or a mapping of them, by length) None, NaN (missing) or a fraction in [0, 1], counts whole and
    durations finite, both >= 0."""
    if not isinstance(res, dict):
        return "not a JSON object"
    if missing := [k for k in ("status", "config") if k not in res]:
        return f"missing {', '.join(missing)}"
    if res["status"] not in STATUSES:
        return f"status {str(res['status'])[:40]!r} is none of {', '.join(STATUSES)}"
    if not isinstance(res["config"], dict):
        return "config is not a mapping"
    if why := _config(res["config"]):
        return f"config: {why}"
    if not isinstance(res.get("versions") or {}, dict) or not isinstance(res.get("git_sha") or "", str):
        return "versions is not a mapping, or git_sha not a string"
    history = res.get("history")
    if history is not None and not (isinstance(history, list) and all(isinstance(e, dict) for e in history)):
        return "history is not a list of epochs"
    for where in [res, *(history or [])]:
        if why := _values(where):
            return why if where is res else f"history: {why}"
    return None


def _config(config: dict) -> str | None:
    """Why a run's config cannot be what it trained with: empty, or a key every summary reads of another type."""
    if not config:
        return "empty"
    for key in ("norm", "model", "data"):
        group = config.get(key, {})
        if not isinstance(group, dict) or not isinstance(group.get("name", ""), str):
            return f"{key}.name is not a name"
    for key, least in (("seed", 0), ("batch_size", 1), ("epochs", 0)):
        v = config.get(key, least)
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            return f"{key} {str(v)[:40]} is not a whole number >= {least}"
    if not _number(config.get("lr", 0.0)):
        return f"lr {str(config['lr'])[:40]} is not a number"
    return None


def _values(res: dict) -> str | None:
    """Why one level of results (the run's, or an epoch of its history) holds an impossible number."""
    for key, value in res.items():
        if "acc" not in key:
            continue
        for v in value.values() if isinstance(value, dict) else [value]:
            if v is not None and (not _number(v) or not (0 <= v <= 1 or math.isnan(v))):  # NaN: missing
                return f"{key} {str(v)[:40]} is not an accuracy in [0, 1]"
    for key in (*COUNTS, *SECONDS, "epoch", "step"):
        v = res.get(key)
        if v is not None and (not _number(v) or not 0 <= v < math.inf or (key not in SECONDS and v != int(v))):
            return f"{key} {str(v)[:40]} is not a {'duration' if key in SECONDS else 'count'} >= 0"
    return None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
