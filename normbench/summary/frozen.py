"""What a study folder's study.json fixes before and as its looks are taken (docs/protocol.md): the protocol
it ran under, its family frozen at the start, and each look's decisions as they were made.

    proto = recorded_protocol(folder, protocol.load())   # the numbers the study pinned (None: no study here)
    family = freeze(claims, proto, commit)               # study.json's `family`: claims, numbers, commit, hash
    changed(stored, family)                              # what differs, in words ('' : the same family)
    entries = look_entries(results, index, members)      # look index's decisions, for study.json's `decisions`
    stored_decisions(folder, results)                    # them, and where a replay with this code disagrees

Why read the protocol from there: a study's looks read the seeds it trained, which the protocol it pinned says
(its seed base among them), not the protocol.yaml of the day: the records before fresh seeds trained seeds 0-9,
before fresh seeds from 1000 were declared, and a later protocol may move the base again. Why freeze the
family and store the decisions: a summary replays the looks from the runs with the code and experiment files
of the day, so a claim redefined, a protocol number changed or a bug fixed after the study started would
silently change what its looks decided. The hash makes a changed family refusable on resume (study/rounds.py)
and is each of its runs' `family_hash`; the stored decisions are printed beside the replay's verdicts, and a
disagreement is said.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

STATE = "study.json"  # a study folder's state (study/rounds.py's State)
CLAIM_KEYS = ("study", "name", "a", "b", "expect", "margin", "metric")  # what defines a member, not its words


def study_state(folder: Path) -> dict | None:
    """The study.json of `folder` (a `normbench study` out=), parsed; None where there is none."""
    path = Path(folder) / STATE
    return json.loads(path.read_text()) if path.is_file() else None


def recorded_protocol(folder: Path, base):
    """The protocol the study in `folder` ran under: the numbers the study pinned in its study.json (that of
    `folder`, or of its parent: a study's own folder <out>/<study>, or a runs file's) and the family it froze
    there (`base`'s, today's primary claims, for a study from before families were frozen); None where
    neither holds one. Why: a study's looks read the seeds it trained, which its numbers (the seed base
    among them) say, not the protocol.yaml of the day; and they test the family it started with, not one
    whose members were declared, demoted or renamed since."""
    for where in (Path(folder), Path(folder).parent):
        state = study_state(where)
        if state and state.get("protocol"):
            family = state.get("family") or {}
            proto = base.with_numbers(state["protocol"], family.get("source"))
            members = tuple((c["study"], c["name"]) for c in family.get("claims") or [])
            return replace(proto, family=members) if members else proto
    return None


def family_hash(folder: Path) -> str | None:
    """The hash of the family the study in `folder` froze (None: no study, or one from before families
    were frozen): each job's run records it (config `family_hash`)."""
    state = study_state(folder)
    return ((state or {}).get("family") or {}).get("hash")


# --- the family frozen at the start -------------------------------------------------------------------------

def claim_entry(claim) -> dict[str, Any]:
    """A member as study.json keeps it: what its test depends on (its note and role are words, not the claim)."""
    return {k: getattr(claim, k) for k in CLAIM_KEYS}


def digest(claims: list[dict], numbers: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of the members, in (study, name) order, and the
    protocol's numbers: the same family gives the same hash on any machine and in any file order."""
    body = {"claims": sorted(claims, key=lambda c: (c["study"], c["name"])), "protocol": numbers}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def freeze(claims, proto, commit: str | None) -> dict[str, Any]:
    """study.json's `family`: each member (`claims`: claims.Claim) as claim_entry, the protocol's numbers,
    where they were declared, the commit of the first sitting, and the hash of members and numbers (not of
    the commit: code changes are what the replay checks)."""
    entries = sorted((claim_entry(c) for c in claims), key=lambda c: (c["study"], c["name"]))
    numbers = proto.numbers()
    return {"hash": digest(entries, numbers), "commit": commit, "source": proto.source, "protocol": numbers,
            "claims": entries}


def changed(stored: dict, family: dict) -> str:
    """What differs between a stored family and `family`, in one phrase ('' where the hashes agree): the
    protocol's numbers, then the first member gone, added or redefined (and how many more)."""
    if stored.get("hash") == family["hash"]:
        return ""
    pinned = stored.get("protocol", {})
    said = [f"protocol {k} {pinned.get(k)!r} -> {v!r}" for k, v in family["protocol"].items() if pinned.get(k) != v]
    old = {(c["study"], c["name"]): c for c in stored.get("claims", [])}
    new = {(c["study"], c["name"]): c for c in family["claims"]}
    for what, keys in (("no longer declared", [k for k in old if k not in new]),
                       ("added", [k for k in new if k not in old]),
                       ("redefined", [k for k in new if k in old and new[k] != old[k]])):
        if keys:
            how = f" ({_fields(old[keys[0]], new[keys[0]])})" if what == "redefined" else ""
            more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
            said.append(f"claim {' · '.join(keys[0])!r} {what}{how}{more}")
    return "; ".join(said) or "its hash differs"


def _fields(old: dict, new: dict) -> str:
    """'margin 0.0 -> 1.0': what a redefined member changed."""
    return ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in CLAIM_KEYS if old.get(k) != new.get(k))


# --- each look's decisions, as made ---------------------------------------------------------------------------

def look_entries(results, index: int, members) -> list[dict[str, Any]]:
    """Look `index`'s (0-based) decisions for study.json: each member of `members` (keys) that the look
    tested (summarize's ClaimResults, replayed up to this look), with its pairs, Holm-adjusted p's of its
    hypothesis and of the opposite, the look's level and the verdict it left (held, refuted, inconclusive)."""
    members = set(members)
    return [{"look": index + 1, "study": r.claim.study, "name": r.claim.name, "pairs": r.look_n, "p": r.p_holm,
             "p_refute": r.p_refute, "level": r.level, "verdict": r.verdict}
            for r in results if r.role == "primary" and r.claim.key in members and r.look == index + 1]


def latest(entries: list[dict]) -> dict[tuple[str, str], dict]:
    """Each claim's last stored decision: the look that decided it, or the last that tested it."""
    out: dict[tuple[str, str], dict] = {}
    for e in sorted(entries, key=lambda e: e["look"]):
        out[e["study"], e["name"]] = e
    return out


def disagreements(entries: list[dict], results) -> list[str]:
    """Where a replay (`results`: summarize's ClaimResults) disagrees with the stored decisions: for each
    claim, its verdict as of its last stored look against the stored one (a decision at another look
    counts as a disagreement); 'study · name: stored held at look 1, replayed inconclusive at look 2'."""
    replayed = {r.claim.key: r for r in results if r.role == "primary"}
    out = []
    for key, e in latest(entries).items():
        r = replayed.get(key)
        if r is None or r.look is None:
            verdict, look = ("not in the family" if r is None else "not tested"), None
        elif r.look > e["look"]:  # tested again after the stored look: undecided there
            verdict, look = "inconclusive", e["look"]
        else:
            verdict, look = r.verdict, r.look
        if (verdict, look) != (e["verdict"], e["look"]):
            out.append(f"{' · '.join(key)}: stored {e['verdict']} at look {e['look']}, replayed {verdict}"
                       + (f" at look {look}" if look is not None else ""))
    return out


def stored_decisions(folder: Path, results) -> dict[str, Any]:
    """A summary's `decisions` for the study in `folder` (not its parent's: a study's own folder tests its
    claims with the other studies' members at p = 1, so it may legitimately be more conservative): the
    stored entries and where the replay disagrees; {} where the folder stores none. A replay that tests none
    of the stored claims (`summarize OUT --claims other.yaml`, a study file's folder summarized without its
    file) tests another family: nothing to compare, and `other_family` says so."""
    entries = (study_state(folder) or {}).get("decisions") or []
    if not entries:
        return {}
    replayed = {r.claim.key for r in results if r.role == "primary"}
    if not replayed & {(e["study"], e["name"]) for e in entries}:
        return {"stored": entries, "disagreements": [], "other_family": True}
    return {"stored": entries, "disagreements": disagreements(entries, results)}
