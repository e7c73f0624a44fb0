"""Checks that stop a run before any work, and what `resume=true` finds in a run directory.

    check_writable(run_dir)                     # UserError if results could not be saved there
    check_batch_statistics(cfg, make, values, layouts) # UserError for BatchNorm at one value per channel
    finished = finished_results(run_dir, config) # the results of a finished run, or None to train

The runner calls these; each failure is a `UserError` (one line: what is wrong, how to fix it).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import torch

from normbench import norms
from normbench.config import Config, flatten, runtime_keys, to_dict
from normbench.errors import UserError
from normbench.results import RESULTS
from normbench.train import interrupts

log = logging.getLogger(__name__)  # the CLI shows these on stderr; a library caller decides
CHECKPOINT = "checkpoint.pt"
UNFINISHED = ("unfinished: the process stopped before writing its result (killed, or still running); "
              "rerun the same command with resume=true to continue from checkpoint.pt")


def check_writable(run_dir: Path) -> None:
    """Create `run_dir` and write a file in it, so a run that could not save its results never starts."""
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=run_dir, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"cannot write the run directory {run_dir} ({e.strerror or e})",
                        "point hydra.run.dir (hydra.sweep.dir with -m) at a writable directory") from None


def check_batch_statistics(cfg: Config, make: norms.NormFactory, values_per_channel: int | None,
                           layouts: set[str]) -> None:
    """A batch-dependent norm (what `make` builds) that sees one value per channel in a training batch (linear
    layers or per-time-step statistics at batch_size=1) has variance 0 and learns nothing (PyTorch's
    BatchNorm refuses it). `values_per_channel` is the fewest any norm layer sees, measured on a real batch."""
    spec = make.spec
    if not spec.batch_dependent or values_per_channel is None or values_per_channel > 1:
        return
    where = "per-time-step statistics" if cfg.model.placement == "recurrent" else "linear layers"
    free = norms.batch_free_names(layouts)
    raise UserError(f"{make.name} normalizes each channel over the batch, and at batch_size=1 the "
                    f"{cfg.model.name}'s {where} give it one value per channel (zero variance)",
                    f"use batch_size=2 or more, or a batch-independent norm: {', '.join(free)}")


def config_differences(old: dict, new: dict) -> list[str]:
    """The keys (dotted) whose values differ, ignoring the runtime keys (config.py marks them: they do
    not change what is trained, so resuming with another value is fine). A key a config lacks (one recorded
    before the key existed, such as data.split) counts as at its default, which is what that run trained with."""
    a, b, default = flatten(old), flatten(new), flatten(to_dict(Config()))
    return sorted(k for k in a.keys() | b.keys()
                  if k not in runtime_keys() and a.get(k, default.get(k)) != b.get(k, default.get(k)))


def finished_results(run_dir: Path, config: dict) -> dict | None:
    """For `resume=true`: the results.json in `run_dir` if it records a finished run of `config` (nothing
    to redo), else None (train, from checkpoint.pt when there is one); refuses another config's."""
    results = Path(run_dir) / RESULTS
    if not results.exists():
        return None
    try:
        old = json.loads(results.read_text())
    except (OSError, json.JSONDecodeError):
        old = {}
    changed = config_differences(old.get("config", {}), config) if "config" in old else []
    if changed:
        raise UserError(f"{run_dir} holds a run of another config (it differs in {', '.join(changed)})",
                        "resume with the same overrides, or choose a new hydra.run.dir")
    if old.get("status") in ("completed", "diverged"):
        log.info("%s already finished (%s); nothing to resume", run_dir, old["status"])
        return old
    return None


def check_checkpoint(checkpoint: Path, member_dirs: tuple[Path, ...] = ()) -> None:
    """Before resuming from `checkpoint`: warn when there is none, refuse one that cannot be read. A packed
    pack (`member_dirs`, two or more) keeps its one checkpoint in its run directory; one in a member's
    directory, with none of the pack's own, was written by an earlier normbench, which trained a
    data.split=per_seed pack one seed at a time: refused, as that layout cannot continue as one
    computation."""
    old = [d for d in member_dirs if len(member_dirs) > 1 and (d / CHECKPOINT).exists()]
    if old and not checkpoint.exists():  # the pack's own one, where present, is what resumes
        raise UserError(f"{old[0] / CHECKPOINT} is a checkpoint of an older pack layout (one computation per "
                        "seed); this normbench trains every member as one and cannot resume it",
                        "rerun without resume=true in a new directory, or finish it with the normbench that started it")
    if not checkpoint.exists():
        log.warning("resume=true but %s has no %s; starting from scratch (to resume, pass the interrupted "
                    "run's directory as hydra.run.dir)", checkpoint.parent, CHECKPOINT)
        return
    try:  # written atomically, so only a foreign or damaged file fails here
        torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as e:
        # (torch's own message suggests weights_only=False: never for a file we cannot vouch for)
        raise UserError(f"cannot read {checkpoint}: damaged, or not a normbench checkpoint ({type(e).__name__})",
                        "delete it to start over, or run without resume=true in a new directory") from None


def describe(e: BaseException) -> str:
    """What results.json says about a run that stopped with `e`."""
    if isinstance(e, interrupts.Interrupted):
        return f"interrupted ({e.signal}) {e.where}; {e.outcome.then}"
    if isinstance(e, KeyboardInterrupt):
        return (f"interrupted ({str(e) or 'Ctrl-C'}): finished epochs are kept in {CHECKPOINT}; "
                "rerun the same command with resume=true to continue")
    return str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
