"""The record as data (docs/results/<study>/runs.jsonl.gz): each run carries the command line that trained it,
so summarizing the runs files gives the checked-in summaries again (scripts/readme_claims.py --check) and
each run's command line is the one scripts/record_overrides.py rebuilds and checks against its config."""

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
    rounds of the protocol it pinned (docs/results/study.json: seeds 0-2, 3-4, 5-9, from before the seed base
    of fresh seeds): a run without its command line belongs to no experiment, and summarize would count its
    study's primary claims as a family of their own (24 claims, not 21)."""
    from normbench.summary import frozen

    runs = discover.find_runs(RESULTS)
    assert len(runs) == 2203
    proto = frozen.recorded_protocol(RESULTS, protocols.load())
    assert proto.seed_base == 0 and list(protocols.look_seeds(proto, 2)) == list(range(10))
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


def _has_commit(sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=REPO, capture_output=True).returncode == 0


@pytest.mark.slow  # ~25 s: Hydra composes each of the record's 137 jobs
def test_the_command_lines_are_the_rebuilt_ones_and_agree_with_each_runs_config():
    """Reference: the record's commit (run.json's git_sha): its plans, its jobs' commands, and each run's
    resolved config in its results.json."""
    sha = json.loads((RESULTS / "run.json").read_text())["git_sha"]
    if not _has_commit(sha):
        pytest.skip(f"the record's commit {sha} is not in this clone's history")
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "record_overrides.py"), "--check"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr


def test_a_runs_file_without_command_lines_fails_the_check(tmp_path):
    """Reference: how summarize tells a run's study (its experiment= override): the converged study's runs
    without their command lines are claims of no study, so its summary.md's claims are not recomputed."""
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
    assert any("p (Holm) 1.9e-04 checked in, 2.2e-04 recomputed" in d for d in differ), differ
    again = compute(study / "runs.jsonl.gz", select=readme_claims.SELECT)
    assert readme_claims._markdown_differences(study / "summary.md", again) == []


@pytest.mark.slow  # ~15 s: Hydra composes norm_free_regime's 27 jobs
def test_a_redesigned_study_is_checked_against_the_records_experiment_and_a_changed_budget_is_caught(tmp_path):
    """Reference: norm_free_regime's experiment at the record's commit (run.json's git_sha: steps decide, epochs
    0, max_steps 3000, 10 validations) and in this checkout (epochs 10, 6 validations, issue 58). Composed by
    this checkout, the old command line gives the new budget; the keys the redesign moved leave that comparison,
    and a run whose config disagreed with the commit's experiment on one of them is still reported."""
    run_json = json.loads((RESULTS / "run.json").read_text())
    sha = run_json["git_sha"]
    if not _has_commit(sha):
        pytest.skip(f"the record's commit {sha} is not in this clone's history")
    sys.path.insert(0, str(REPO / "scripts"))
    import record_overrides as ro

    commit = ro.Commit(sha, tmp_path)
    moved = ro.redesigned(commit, "norm_free_regime")
    assert {"epochs", "max_steps", "validations"} <= moved
    assert ro.redesigned(commit, "converged") == set()
    jobs = ro.study_jobs(commit, "norm_free_regime", "laptop", run_json.get("widened", []))
    runs = discover.read_runs_file(RESULTS / "norm_free_regime" / "runs.jsonl.gz")
    run = runs[0]
    members = [r for r in runs if r.path.parent == run.path.parent]
    composed = jobs[run.path.parts[-2]].config
    assert "composed by this checkout, epochs=10; the config has 0" in ro.check(commit, run.overrides, run, members,
                                                                                   composed)
    assert ro.check(commit, run.overrides, run, members, composed, moved) == []
    run.config = {**run.config, "epochs": 10}  # what this checkout's experiment would compose
    assert ro.check(commit, run.overrides, run, members, composed, moved) == [
        "experiment=norm_free_regime: epochs=0, the config has 10"]
