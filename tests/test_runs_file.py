"""Runs files (normbench/summary/discover.py): a sweep written as one `*.jsonl.gz` file summarizes as its
folder does, alone or in a folder; the record keeps each study's runs this way; a file that is not one is a
one-line user error."""

import gzip
import json
from pathlib import Path

import pytest
from conftest import REPO, normbench_cli
from test_summarize import _summarize, lr_sweep, small_batch_sweep, write_run

from normbench.errors import UserError
from normbench.summary.discover import find_runs, read_runs_file, save_runs


def _same_summary(a: Path, b: Path, root_a: Path, root_b: Path) -> None:
    """summary.json at `a` and at `b` are equal but for the root each names and the problem runs' paths,
    which are the same relative to it."""
    ja, jb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for j, root in ((ja, root_a), (jb, root_b)):
        assert j.pop("root") == str(root)
        for p in j["problems"]:
            p["path"] = str(Path(p["path"]).relative_to(root))
    assert ja == jb


def _sweep(root: Path) -> None:
    """The small-batch sweep (every kind of problem run among its runs) and a pack's members, whose command
    line is the pack's."""
    small_batch_sweep(root)
    for seed in (0, 1):
        write_run(root / "pack", f"seed={seed}", norm="gn", bs=2, seed=seed, test_acc=0.6 + seed / 10,
                  test_acc_train_mode=0.6)
    (root / "pack" / ".hydra").mkdir()
    (root / "pack" / ".hydra" / "overrides.yaml").write_text("- norm=gn\n- pack.seeds=[0,1]\n")


def test_a_runs_file_summarizes_as_its_sweep(tmp_path):
    """Reference: the summary of the sweep's folder: `summarize SWEEP --save-runs FILE` then `summarize FILE`
    gives the same summary.json (every table, claim, cost and problem run), the runs the same statuses,
    notes and command lines; the summary of a runs file is written beside it."""
    _sweep(tmp_path / "sweep")
    runs_file = tmp_path / "shared" / "sweep.jsonl.gz"
    r = normbench_cli("summarize", str(tmp_path / "sweep"), "--no-plots", "--save-runs", str(runs_file), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert str(runs_file) in r.stdout
    r = normbench_cli("summarize", str(runs_file), "--no-plots", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _same_summary(tmp_path / "sweep", runs_file.parent, tmp_path / "sweep", runs_file)
    folder, file = find_runs(tmp_path / "sweep"), find_runs(runs_file)
    assert [(r.path.relative_to(tmp_path / "sweep"), r.status, r.note.replace(str(tmp_path / "sweep"), ""),
             r.overrides, r.results) for r in folder] == \
           [(r.path.relative_to(runs_file), r.status, r.note.replace(str(tmp_path / "sweep"), ""),
             r.overrides, r.results) for r in file]
    assert [r.overrides for r in file if r.path.parent.name == "pack"] == [["norm=gn", "pack.seeds=[0,1]"]] * 2


def test_a_folder_of_runs_files_summarizes_as_their_sweeps(tmp_path):
    """Reference: the summary of a folder holding the two sweeps' folders: the same folder holding the two
    sweeps as runs files (the record's layout, docs/results/<study>/runs.jsonl.gz) summarizes the same, with
    --select lr the same lrs; a run a command names is named inside its runs file."""
    lr_sweep(tmp_path / "runs" / "lr")
    _sweep(tmp_path / "runs" / "small")
    for name in ("lr", "small"):
        save_runs(find_runs(tmp_path / "runs" / name), tmp_path / "runs" / name,
                  tmp_path / "files" / name / "runs.jsonl.gz")
    for root in ("runs", "files"):
        _summarize(tmp_path / root, out=tmp_path / f"out_{root}", plots=False, select="lr")
    a, b = ((tmp_path / f"out_{root}" / "summary.json").read_text() for root in ("runs", "files"))
    assert json.loads(b)["extensions"] == [  # a choice at the grid's edge: the run it names, in its runs file
        "# lr/runs.jsonl.gz/gn_0.001_0 and its cell: train pack.lrs=null lr=0.0333 with the command that trained "
        "them (none is recorded)"]
    b = b.replace(str(tmp_path / "files"), str(tmp_path / "runs")).replace("/runs.jsonl.gz", "")  # the paths alone
    assert json.loads(a) == json.loads(b)
    assert json.loads(a)["runs"] == {"completed": 27, "diverged": 1, "failed": 1, "incomplete": 2, "unreadable": 1}


def test_the_record_is_one_runs_file_per_study():
    """Reference: docs/results/README.md's account of the record (each study's runs in
    <study>/runs.jsonl.gz, no run folders): every study with a summary.md has its runs file, and the record
    read as a folder is exactly its files' runs, each a member of a round's job (r<round>/<job>/<member>)."""
    results = REPO / "docs" / "results"
    studies = sorted(d for d in results.iterdir() if (d / "summary.md").exists())
    assert studies and all((d / "runs.jsonl.gz").is_file() for d in studies)
    assert not list(results.rglob("results.json"))
    runs = find_runs(results)
    assert len(runs) == sum(len(read_runs_file(d / "runs.jsonl.gz")) for d in studies)
    assert {len(r.path.relative_to(results).parts) for r in runs} == {5}  # <study>/runs.jsonl.gz/r<k>/<job>/<member>
    assert all(r.status in ("completed", "diverged") for r in runs)


@pytest.mark.parametrize("content, what", [
    (b"{}", "is not a runs file"),  # not gzip'd
    (gzip.compress(b'{"path": "a", "results": {}}\n{not json\n'), "is not a runs file"),
    (gzip.compress(b'{"results": {"status": "completed"}}\n'), "line 1: not a run"),
    (gzip.compress(b'{"path": "../elsewhere"}\n'), "line 1: not a run"),
], ids=["not-gzip", "bad-json", "no-path", "path-outside"])  # not the bytes: gzip's header holds the time
def test_a_file_that_is_not_a_runs_file_is_one_line(tmp_path, content, what):
    """Reference: normbench's one-line user errors (normbench/errors.py): a file that is not gzip'd JSON
    Lines of runs, a missing path, a --save-runs name a folder's runs files do not have, or one inside the
    sweep (whose next summary would read its runs twice) each end the command with `normbench: error:
    <what>; <fix>` and exit 2."""
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(content)
    with pytest.raises(UserError, match=what):
        find_runs(bad)
    r = normbench_cli("summarize", str(bad), "--no-plots", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("normbench: error: ") and what in r.stderr and "; give a file" in r.stderr


def test_missing_file_and_bad_save_runs_are_one_line(tmp_path):
    """Reference: as above, for a path that does not exist and --save-runs' two refusals."""
    _sweep(tmp_path / "sweep")
    for args, what in ((["nowhere.jsonl.gz"], "does not exist"),
                       (["sweep", "--save-runs", "sweep.json"], "a runs file's name ends in .jsonl.gz"),
                       (["sweep", "--save-runs", "sweep/again.jsonl.gz"], "would read each run twice")):
        r = normbench_cli("summarize", *args, "--no-plots", cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("normbench: error: ") and what in r.stderr
    assert not (tmp_path / "sweep" / "summary.json").exists()  # refused before anything was computed
