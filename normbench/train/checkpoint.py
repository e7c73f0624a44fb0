"""A run's checkpoint: the full training state, saved atomically after every epoch and at a signal, and read back.

    save_checkpoint(path, model, opt, shuffles, state, outs, leg_s)
    state, outs = load_checkpoint(path, model, opt, generators)     # bit-identical continuation on the CPU
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from normbench.errors import UserError
from normbench.results import atomic_write_bytes
from normbench.train.state import FitResult, LoopState

CHECKPOINT_FORMAT = 3  # 2: epoch boundaries only; 1: before one loop served runs and packs (both read below)


def save_checkpoint(path: Path, model, opt, shuffles: list[torch.Tensor], state: LoopState,
                    outs: list[FitResult], leg_s: float = 0.0) -> None:
    """The full training state, atomically: model, optimizer, torch's RNGs, each member's batch generator
    as it was at the start of the epoch in progress (`shuffles`: their states; at an epoch's end, the next
    one's start), where the loop is (`state.epoch_steps` batches into that epoch) and what each member has
    done, its wall time counting this process's `leg_s` seconds. No scheduler state: the learning rate is
    a function of the step."""
    blob = {
        "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "shuffles": list(shuffles)},
        "loop": dict(state.__dict__),
        "members": [{**o.__dict__, "earlier_wall_s": o.earlier_wall_s + leg_s} for o in outs],
    }
    # Serialized in memory, then written: torch's zip writer reports a full disk as a RuntimeError about a
    # file position, a plain write as the OSError it is (the CLI says it in one line; the last checkpoint stays)
    buffer = io.BytesIO()
    torch.save(blob, buffer)
    atomic_write_bytes(path, lambda f: f.write(buffer.getbuffer()))


def load_checkpoint(path: Path, model, opt, shuffles: list[torch.Generator]) -> tuple[LoopState, list[FitResult]]:
    """Restore model, optimizer, RNGs and generators from `path`; (the loop's state, each member's)."""
    # weights_only=True: a checkpoint is data, never code to run.
    blob = _current(torch.load(path, map_location="cpu", weights_only=True), path)
    if len(blob["members"]) != len(shuffles):
        raise UserError(f"{path} holds {len(blob['members'])} members, this run trains {len(shuffles)}",
                        "resume with the same pack.seeds and pack.lrs, or choose a new hydra.run.dir")
    try:
        model.load_state_dict(blob["model"])
    except RuntimeError:  # other layers: another model, or a pack's checkpoint in an older normbench's layout
        raise UserError(f"{path} holds a model with other layers than this run builds (a pack checkpointed by an "
                        "older normbench, or another model)", "resume it with the normbench that wrote it, or "
                        "delete the checkpoint to start over") from None
    opt.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"]["torch"])
    if blob["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(blob["rng"]["cuda"])
    for g, s in zip(shuffles, blob["rng"]["shuffles"]):
        g.set_state(s)
    state, outs = LoopState(**blob["loop"]), [FitResult(**m) for m in blob["members"]]
    for out in outs:
        out.resumed_at_step = [*out.resumed_at_step, state.steps]
    return state, outs


def _current(blob: dict, path: Path) -> dict:
    """A checkpoint in today's format. Format 2 is today's at epoch boundaries. Format 1 (no "format" key) kept a run's loop state in its one
    member, and a pack's in member 0, which stops counting when it diverges: the loop's state is then the
    furthest any member got (a live member's), which is where the pack was."""
    version = blob.get("format", 1)
    if version in (2, CHECKPOINT_FORMAT):  # 2 lacks what 3 adds (epoch_steps, resumed_at_step): defaults
        return blob
    if version != 1:
        raise UserError(f"{path} was written by a newer normbench (checkpoint format {version})",
                        "resume it with that version, or delete it to start over")
    fits = blob["fit"] if isinstance(blob["fit"], list) else [blob["fit"]]
    shuffles = blob["rng"].get("shuffles") or [blob["rng"]["shuffle"]]
    loop = {"steps": max(f["steps"] for f in fits), "epochs_done": max(f["epochs_done"] for f in fits)}
    return {**blob, "rng": {**blob["rng"], "shuffles": shuffles}, "loop": loop, "members": fits}

