"""A study's family frozen at its start, its fresh seeds and its looks' decisions as made (docs/protocol.md,
normbench/summary/frozen.py): the hash, a resume under another family refused in one line, the seeds and the
hash each job's run records."""

import hashlib
import json
from dataclasses import replace

from normbench.study import jobs, spec
from normbench.study.rounds import Rounds, family_members, primary_claims
from normbench.summary import frozen
from normbench.summary import protocol as protocols


def _shipped_family():
    proto = protocols.load()
    return proto, family_members(proto, [])


def test_the_family_hash_is_sha256_of_its_canonical_json_and_moves_with_a_claim_or_a_number():
    """Reference: sha256 of the members (study, name, sides, expectation, margin, metric) in (study, name)
    order and the protocol's numbers, as JSON with sorted keys and no spaces, written out here; the same
    family declared in another order hashes the same, a margin or a seed base changed does not, and
    `changed` says which."""
    proto, members = _shipped_family()
    assert len(members) == len(proto.family) == 21
    family = frozen.freeze(members, proto, "abc")
    entries = sorted(({k: getattr(c, k) for k in ("study", "name", "a", "b", "expect", "margin", "metric")}
                      for c in members), key=lambda c: (c["study"], c["name"]))
    body = json.dumps({"claims": entries, "protocol": {"alpha": 0.05, "looks": [3, 5, 10], "spending": "obrien_fleming",
                                                       "widen_limit": 2, "seed_base": 1000}},
                      sort_keys=True, separators=(",", ":"))
    assert family["hash"] == hashlib.sha256(body.encode()).hexdigest()
    assert frozen.freeze(members[::-1], proto, "def")["hash"] == family["hash"]  # order and commit aside
    first = members[0]
    wider = frozen.freeze([replace(first, margin=first.margin + 1), *members[1:]], proto, "abc")
    assert wider["hash"] != family["hash"]
    assert frozen.changed(family, wider) == (f"claim '{first.study} · {first.name}' redefined "
                                             f"(margin {first.margin!r} -> {first.margin + 1!r})")
    reseeded = frozen.freeze(members, replace(proto, seed_base=0), "abc")
    assert frozen.changed(family, reseeded) == "protocol seed_base 1000 -> 0"
    assert frozen.changed(family, frozen.freeze(members[1:], proto, "abc")) == \
        f"claim '{first.study} · {first.name}' no longer declared"
    assert frozen.changed(family, family) == ""


def test_the_declared_seeds_are_fresh_and_each_job_names_them_and_the_family(tmp_path):
    """Reference: protocol.yaml (seed_base 1000, looks 3/5/10) and the seeds 0-9 that every earlier record and
    `normbench train`'s default (seed 0) use: no round of the declared protocol trains one of them; a study's
    job command (study/jobs.py) names its round's seeds and the hash study.json froze."""
    proto = protocols.load()
    rounds = [list(protocols.round_seeds(proto, i)) for i in range(len(proto.looks))]
    assert rounds == [[1000, 1001, 1002], [1003, 1004], list(range(1005, 1010))]
    assert not set().union(*rounds) & set(range(10)) and list(protocols.look_seeds(proto, 2)) == list(range(1000, 1010))
    study = Rounds([spec.load("ghost_batch")], "quick", tmp_path, 1, None)
    study.state.save(tmp_path)
    job = study.round_jobs(0, None)[0]
    line = jobs.command(job, rounds[0], tmp_path, 0)
    assert "pack.seeds=[1000,1001,1002]" in line
    assert f"family_hash={study.state.family['hash']}" in line and len(study.state.family["hash"]) == 64
    own = primary_claims(spec.load("ghost_batch"))
    assert {c["name"] for c in study.state.family["claims"]} >= {c.name for c in own}
    assert study.state.family["protocol"] == proto.numbers() and study.state.protocol == proto.numbers()
