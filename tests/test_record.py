"""The record as data (docs/results/<study>/runs.jsonl.gz): each run carries the command line that trained it
(its pack's .hydra/overrides.yaml), so summarizing the runs files gives the checked-in summaries again
(scripts/readme_claims.py --check)."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

from normbench.summary import discover
from normbench.summary import protocol as protocols

RESULTS = REPO / "docs" / "results"


def test_each_run_names_its_study_and_the_seeds_of_its_round():
    """Reference: the record's layout, <study>/r<round>/<job>/<member> (normbench/study/jobs.py), and the
    rounds of the protocol it pinned (docs/results/study.json: seeds 1000-1002, 1003-1004, 1005-1009, fresh
    seeds no earlier record trained): a run without its command line belongs to no experiment, and summarize
    would count its study's primary claims as a family of their own."""
    from normbench.summary import frozen

    runs = discover.find_runs(RESULTS)
    assert len(runs) == 2321
    proto = frozen.recorded_protocol(RESULTS, protocols.load())
    assert proto.seed_base == 1000 and list(protocols.look_seeds(proto, 2)) == list(range(1000, 1010))
    for r in runs:
        study, _, round_folder, job, _ = r.path.relative_to(RESULTS).parts
        seeds = list(protocols.round_seeds(proto, int(round_folder.removeprefix("r")) - 1))
        assert r.study == study, r.path
        assert f"pack.seeds=[{','.join(map(str, seeds))}]" in r.overrides, r.path
        assert r.config["seed"] in seeds, r.path
        assert ("-lr" in job) == any(o.startswith("pack.lrs=") and job.endswith(f"-lr{o[10:-1]}")
                                     for o in r.overrides), r.path  # a widened job trains its one value


@pytest.mark.slow  # ~30 s: every study summarized again from its runs file, and the joint summary
def test_summarizing_the_runs_files_again_gives_the_checked_in_summaries():
    """Reference: the checked-in summaries (summary.json's claims and protocol, each summary.md's claims table
    and notes), made from the study's folders before they became runs files."""
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_claims.py"), "--check"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr


def test_a_runs_file_without_command_lines_fails_the_check(tmp_path):
    """Reference: how summarize tells a run's study (its experiment= override): the converged study's runs
    without their command lines belong to no study, so its primary claim is tested outside the record's
    family and its Holm-adjusted p moves (9.7e-05 checked in, 1.0e-04 recomputed): the check says so."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims

    study = RESULTS / "converged"
    runs = discover.read_runs_file(study / "runs.jsonl.gz")
    for r in runs:
        r.overrides = []
    (tmp_path / "converged").mkdir()
    (tmp_path / "study.json").write_text((RESULTS / "study.json").read_text())  # the protocol it ran under
    discover.save_runs(runs, study / "runs.jsonl.gz", tmp_path / "converged" / "runs.jsonl.gz")
    (tmp_path / "converged" / "summary.md").write_text((study / "summary.md").read_text())
    from normbench.summary.summarize import compute

    summary = compute(tmp_path / "converged" / "runs.jsonl.gz", select=readme_claims.SELECT)
    differ = readme_claims._markdown_differences(tmp_path / "converged" / "summary.md", summary)
    assert any("p (Holm) 9.7e-05 checked in, 1.0e-04 recomputed" in d for d in differ), differ
    again = compute(study / "runs.jsonl.gz", select=readme_claims.SELECT)
    assert readme_claims._markdown_differences(study / "summary.md", again) == []


def test_a_diverged_run_is_compared_by_where_it_sits_in_its_study_not_by_the_folder_read(tmp_path):
    """Reference: summary.json's at_chance (the diverged runs a claim scored at chance) as the study's own
    summary wrote it (outputs/reproduce/<study>/...) and as summarizing the runs file gives it again
    (docs/results/<study>/runs.jsonl.gz/...): the same runs in another order are the same; another run, or
    the same run in another study, is a difference the check reports."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_claims
    from normbench.summary.summarize import compute

    summary = compute(RESULTS / "lr_sensitivity" / "runs.jsonl.gz", select=readme_claims.SELECT)
    checked = json.loads((RESULTS / "summary.json").read_text())
    claim = next(c for c in checked["claims"] if c.get("at_chance"))  # pre-LN against no norm: one diverged run
    study = claim["study"]
    assert study == "lr_sensitivity" and claim["at_chance"][0].startswith(f"outputs/reproduce/{study}/r1/")
    mine = {"protocol": checked["protocol"], "claims": [claim]}
    path = tmp_path / "summary.json"

    def differences(at_chance):
        path.write_text(json.dumps({**mine, "claims": [{**claim, "at_chance": at_chance}]}))
        return [d for d in readme_claims._json_differences(path, summary)
                if "at_chance" in d and claim["name"] in d]

    assert differences(claim["at_chance"]) == []
    moved = [claim["at_chance"][0].replace("seed=1000", "seed=1001")]
    assert differences(moved), "another run must be reported"
    elsewhere = [claim["at_chance"][0].replace(f"/{study}/", "/converged/")]
    assert differences(elsewhere), "the same run in another study must be reported"
    two = ["outputs/reproduce/a/r1/j/m1", "outputs/reproduce/a/r1/j/m2"]
    assert readme_claims._located("at_chance", two) == readme_claims._located("at_chance", two[::-1])
    assert readme_claims._located("estimate", two) == two  # every other field as it is
