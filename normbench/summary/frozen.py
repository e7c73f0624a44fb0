"""What a study folder's study.json fixes before its looks are taken (docs/protocol.md): the protocol it
ran under.

    proto = recorded_protocol(folder, protocol.load())   # the numbers the study pinned (None: no study here)

Why read it from there: a study's looks read the seeds it trained, which the protocol it pinned says (its
seed base among them), not the protocol.yaml of the day: the checked-in record trained seeds 0-9 before
fresh seeds from 1000 were declared.
"""

from __future__ import annotations

import json
from pathlib import Path

STATE = "study.json"  # a study folder's state (study/rounds.py's State)


def study_state(folder: Path) -> dict | None:
    """The study.json of `folder` (a `normbench study` out=), parsed; None where there is none."""
    path = Path(folder) / STATE
    return json.loads(path.read_text()) if path.is_file() else None


def recorded_protocol(folder: Path, base):
    """The protocol the study in `folder` ran under: `base`'s family (protocol.Protocol) with the numbers the
    study pinned in its study.json (that of `folder`, or of its parent: a study's own folder <out>/<study>,
    or a runs file's); None where neither holds one. Why: a study's looks read the seeds it trained, which
    its numbers (the seed base among them) say, not the protocol.yaml of the day."""
    for where in (Path(folder), Path(folder).parent):
        state = study_state(where)
        if state and state.get("protocol"):
            return base.with_numbers(state["protocol"])
    return None
