"""A study's family frozen at its start, its fresh seeds and its looks' decisions as made (docs/protocol.md,
normbench/summary/frozen.py): the hash, a resume under another family refused in one line, the seeds and the
hash each job's run records."""

import hashlib
import io
import json
import shutil
from dataclasses import replace

import pytest
from conftest import REPO, requires_real_data
from rich.console import Console
from test_study import TOY as STUDY_TOY
from test_study import write_toy_study

from normbench.errors import UserError
from normbench.study import command, jobs, spec
from normbench.study.rounds import Rounds, family_members, primary_claims
from normbench.summary import frozen
from normbench.summary import protocol as protocols
from normbench.summary.show import report
from normbench.summary.summarize import compute


def _shipped_family():
    proto = protocols.load()
    return proto, family_members(proto, [])


def test_the_family_hash_is_sha256_of_its_canonical_json_and_moves_with_a_claim_or_a_number():
    """Reference: sha256 of the members (study, name, sides, expectation, margin, metric) in (study, name)
    order and the protocol's numbers, as JSON with sorted keys and no spaces, written out here; the same
    family declared in another order hashes the same, a margin or a seed base changed does not, and
    `changed` says which."""
    proto, members = _shipped_family()
    assert len(members) == len(proto.family) == 13  # one primary claim per phenomenon (issue 58)
    family = frozen.freeze(members, proto, "abc")
    entries = sorted(({k: getattr(c, k) for k in ("study", "name", "a", "b", "expect", "margin", "metric")}
                      for c in members), key=lambda c: (c["study"], c["name"]))
    body = json.dumps({"claims": entries, "protocol": {"alpha": 0.05, "looks": [3, 5, 10], "spending": "obrien_fleming",
                                                       "widen_limit": 4, "seed_base": 1000, "min_pairs": 5}},
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


# --- a toy study: its runs, its stored decisions, a resume under another family -------------------------------

TOY = STUDY_TOY.replace("epochs: 1\n", "lr: 0.05\nepochs: 1\n")  # test_study's toy experiment, at one lr
PROTOCOL = "alpha: 0.05\nlooks: [3, 5]\nspending: bonferroni\nwiden_limit: 2\nseed_base: 1000\n"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """tests/test_study.py's toy study (30 steps of the MLP on 1,000 FashionMNIST images: BN at ghost batch 2
    against 64, a ~30-point effect, and a null), one lr (nothing to widen), under a protocol of two looks
    at 3 and 5 seeds from 1000 (Bonferroni): 8 `normbench train` jobs. Returns (its folder, its study's
    arguments, the experiment file, the MonkeyPatch that keeps spec pointed at them)."""
    tmp = tmp_path_factory.mktemp("toy")
    studies = write_toy_study(tmp, TOY, [], [])
    configs = tmp / "configs" / "experiment"
    (tmp / "protocol.yaml").write_text(PROTOCOL)
    out = tmp / "out"
    args = ["toy", "scale=quick", f"out={out}", f"protocol={tmp / 'protocol.yaml'}"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spec, "STUDIES", studies)
        mp.setattr(spec, "EXPERIMENTS", configs)
        assert command.main(args) == 0
        yield out, args, configs / "toy.yaml"


@pytest.mark.slow
@requires_real_data
def test_each_run_names_its_fresh_seed_and_the_family_hash(toy):
    """Reference: the toy's protocol (seeds 1000-1002, then 1003-1004) and its study.json's family hash: every
    run's results.json (its config) carries one of those seeds, none below 10, and that hash."""
    out, _, _ = toy
    family = json.loads((out / "study.json").read_text())["family"]["hash"]
    results = [json.loads(p.read_text()) for p in out.glob("toy/r*/*/*/results.json")]
    assert len(results) >= 4 * 3
    assert {r["config"]["seed"] for r in results} <= set(range(1000, 1005))
    assert {r["config"]["family_hash"] for r in results} == {family}
    for p in out.glob("toy/r*/*/*/results.json"):  # each round's folder trains its own round's seeds
        assert json.loads(p.read_text())["config"]["seed"] in ((1000, 1001, 1002) if "/r1/" in str(p) else (1003, 1004))


@pytest.mark.slow
@requires_real_data
def test_the_stored_decisions_are_the_summarys_verdicts(toy):
    """Reference: the study's own joint summary (summary.json, summarize's replay of the looks): each claim's
    last stored decision in study.json (the look that decided it, or the last that tested it) has the
    summary's verdict, look, level, pairs and Holm p; look 1's entries hold both claims; the summary
    says the replay agrees."""
    out, _, _ = toy
    state = json.loads((out / "study.json").read_text())
    summary = json.loads((out / "summary" / "summary.json").read_text())
    assert {e["name"] for e in state["decisions"] if e["look"] == 1} == {c["name"] for c in summary["claims"]}
    last = frozen.latest(state["decisions"])
    for c in summary["claims"]:
        e = last["toy", c["name"]]
        assert (e["verdict"], e["look"], e["pairs"], e["level"]) == (c["verdict"], c["look"], c["look_n"], c["level"])
        assert (e["p"], e["p_refute"]) == pytest.approx((c["p_holm"], c["p_refute_holm"]), rel=1e-12)
    assert summary["decisions"]["disagreements"] == []
    assert "the replay with this code agrees with every stored decision" in (out / "summary" / "summary.md").read_text()


@pytest.mark.slow
@requires_real_data
def test_a_tampered_stored_decision_is_reported_in_one_line(toy, tmp_path):
    """Reference: the toy's study.json with its first claim's last stored verdict flipped (held <-> refuted,
    or inconclusive -> held): the replay (summarize on the same runs) disagrees, and the summary says so in
    one line naming the claim, the stored and the replayed verdict; the untouched claim is not named."""
    out, _, _ = toy
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    state = json.loads((copy / "study.json").read_text())
    e = max((e for e in state["decisions"] if e["name"].startswith("BN at")), key=lambda e: e["look"])
    replayed, e["verdict"] = e["verdict"], {"held": "refuted"}.get(e["verdict"], "held")
    (copy / "study.json").write_text(json.dumps(state))
    s = compute(copy)
    assert s.decisions["disagreements"] == [f"toy · {e['name']}: stored {e['verdict']} at look {e['look']}, "
                                            f"replayed {replayed} at look {e['look']}"]
    console = Console(file=io.StringIO(), width=200)
    report.print_summary(s, console)
    said = [line for line in console.file.getvalue().splitlines() if "disagrees" in line]
    assert said == [f"the replay with this code disagrees with 1 stored decision: {s.decisions['disagreements'][0]}"]


@pytest.mark.slow
@requires_real_data
def test_resuming_the_toy_under_another_family_is_refused_in_one_line(toy, tmp_path):
    """Reference: the family the toy's study.json froze: its experiment file with the null's margin raised
    (the claim redefined) is refused before anything trains, in one UserError line that names the claim
    and the change and says what to do; the same family resumes (nothing to train)."""
    out, args, experiment = toy
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    args = [a if not a.startswith("out=") else f"out={copy}" for a in args]
    original = experiment.read_text()
    try:
        experiment.write_text(original.replace("    expect: greater\n", "    expect: greater\n    margin: 1.0\n"))
        with pytest.raises(UserError) as refused:
            command.main(args)
        said = str(refused.value)
        assert "\n" not in said and said.startswith(f"{copy} froze another family at its start: ")
        assert "claim 'toy · a key the model ignores changes nothing (toy)' redefined (margin 0.0 -> 1.0)" in said
        assert "choose another out=" in said
    finally:
        experiment.write_text(original)
    assert command.main(args) == 0


def test_a_summary_of_a_study_folder_tests_the_family_it_froze(tmp_path):
    """Reference: docs/protocol.md, the family frozen at the start. The protocol a summary of a study folder
    tests with is its study.json's members with its pinned numbers (the checked-in record froze today's 13,
    with seeds from 1000 and the widening limit 4), not today's: the same study.json with a family of 2 and
    other numbers tests those; a folder from before families were frozen keeps the declared family."""
    results = REPO / "docs" / "results"  # the checkout's: an installed package has no docs/ beside it
    record = frozen.recorded_protocol(results, protocols.load())
    state = json.loads((results / "study.json").read_text())
    stored = state["family"]
    assert len(record.family) == 13 and set(record.family) == {(c["study"], c["name"]) for c in stored["claims"]}
    assert record.widen_limit == 4 and record.seed_base == 1000  # as the record pinned them
    today = protocols.load()
    fewer = {**state, "protocol": {**state["protocol"], "widen_limit": 2, "seed_base": 0},
             "family": {**stored, "claims": stored["claims"][:2]}}
    (tmp_path / "study.json").write_text(json.dumps(fewer))
    two = frozen.recorded_protocol(tmp_path, today)
    assert two.family == tuple((c["study"], c["name"]) for c in stored["claims"][:2])
    assert two.widen_limit == 2 and two.seed_base == 0  # the folder's numbers, not protocol.yaml's
    (tmp_path / "study.json").write_text(json.dumps({"protocol": {"alpha": 0.05, "looks": [3, 5, 10],
                                                                  "spending": "obrien_fleming", "widen_limit": 2}}))
    assert frozen.recorded_protocol(tmp_path, today).family == today.family


def test_resuming_under_other_protocol_numbers_names_each_that_changed(tmp_path):
    """Reference: docs/reliability.md, one line that says what is wrong: a folder started under the record's
    numbers (widen_limit 2, seed_base 0) refused under today's, naming those two and no other."""
    from normbench.study.rounds import State

    today = protocols.load().numbers()
    old = {**today, "widen_limit": 2, "seed_base": 0}
    (tmp_path / "study.json").write_text(json.dumps({"studies": ["ghost_batch"], "scale": "quick", "protocol": old}))
    with pytest.raises(UserError) as refused:
        State.open(tmp_path, ["ghost_batch"], "quick", today, {})
    said = str(refused.value)
    assert f"another protocol (widen_limit 2 -> {today['widen_limit']}, seed_base 0 -> {today['seed_base']})" in said
    assert "alpha" not in said


def test_stored_decisions_of_another_family_are_not_compared(tmp_path):
    """Reference: frozen.stored_decisions: a replay that tests none of the stored claims (a claims file of
    the user's own on a study folder) tests another family, so no stored decision is called contradicted."""
    from types import SimpleNamespace

    from normbench.summary import frozen

    entry = {"study": "toy", "name": "BN at ghost 2 loses", "look": 1, "verdict": "held", "level": 0.01}
    (tmp_path / frozen.STATE).write_text(json.dumps({"decisions": [entry]}))
    other = [SimpleNamespace(claim=SimpleNamespace(key=("", "mine")), role="primary", look=1, verdict="held")]
    assert frozen.stored_decisions(tmp_path, other) == {"stored": [entry], "disagreements": [], "other_family": True}
    same = [SimpleNamespace(claim=SimpleNamespace(key=("toy", "BN at ghost 2 loses")), role="primary", look=1,
                            verdict="inconclusive")]
    assert frozen.stored_decisions(tmp_path, same)["disagreements"] == [
        "toy · BN at ghost 2 loses: stored held at look 1, replayed inconclusive at look 1"]
