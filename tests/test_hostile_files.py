"""Files a user receives are data: runs files, claims files and study files written as an adversary would
(issue 66). Each case writes the hostile file itself and checks what normbench says: one line, exit 2, and
nothing written outside the output folder; the runs that break results.json's contract (docs/design.md) are
listed as unreadable, never pooled. A seeded fuzz loop then mutates a valid file of each kind.

Reference for every one-line case: docs/design.md's contract for a user's mistakes (exit 2, one stderr
line, `normbench: error: <what>; <fix>`, no traceback); for the figures, the folder's listing before and
after; for duplicates, the summary of the same runs read once.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import random
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import REPO, normbench_cli
from rich.console import Console
from test_reliability import assert_one_line_error

from normbench.errors import UserError
from normbench.summary import claims as claiming
from normbench.summary.discover import find_runs
from normbench.summary.show import report
from normbench.summary.summarize import compute, write_files

RECORD = REPO / "docs" / "results" / "ghost_batch" / "runs.jsonl.gz"


def record_lines(n: int = 12) -> list[dict]:
    """The first `n` runs of the checked-in record's ghost_batch study: real runs, as a runs file holds them."""
    with gzip.open(RECORD, "rt") as f:
        return [json.loads(next(f)) for _ in range(n)]


def write_runs(path: Path, entries: list, raw_lines: list[str] = ()) -> Path:
    text = "".join(json.dumps(e) + "\n" for e in entries) + "".join(raw_lines)
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    return path


def listing(root: Path, skip: Path | None = None) -> dict[str, int]:
    """Every file under `root` (but `skip`'s) with its size and mtime: what a writer may not change."""
    out = {}
    for p in sorted(root.rglob("*")):
        if skip is not None and p.is_relative_to(skip):
            continue
        out[str(p.relative_to(root))] = (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else -1
    return out


# --- 1. a runs file names a path: nothing is written outside the output folder ------------------------------

def test_a_runs_file_naming_paths_writes_only_inside_its_folder(tmp_path):
    """The runs carry `experiment=../../../somewhere/NAME` (figures are named after the study: the old code
    wrote report/../../../somewhere/NAME_fashion_mnist.png, over the PNG that sits there) and a norm named
    `../../../evil` (TensorBoard's folders are named after labels); summary/ is a symlink out of --out:
    summarize writes its figures inside --out, refuses the symlink in one line, and the listing of
    everything outside the shared folder is unchanged."""
    outside = tmp_path / "somewhere"
    outside.mkdir()
    (outside / "NAME_fashion_mnist.png").write_bytes(b"precious")
    share = tmp_path / "a" / "b"
    share.mkdir(parents=True)
    entries = record_lines()
    for e in entries:
        e["overrides"] = [o if not o.startswith("experiment=") else "experiment=../../../somewhere/NAME"
                          for o in e["overrides"]]
    for e in entries[:4]:
        e["results"]["config"]["norm"]["name"] = "../../../evil"
    runs = write_runs(share / "hostile.jsonl.gz", entries)
    before = listing(tmp_path, skip=share)
    r = normbench_cli("summarize", str(runs), "--out", str(share / "report"), cwd=share, timeout=600)
    assert r.returncode == 0, r.stderr
    assert listing(tmp_path, skip=share) == before
    assert (outside / "NAME_fashion_mnist.png").read_bytes() == b"precious"
    pngs = sorted(p.name for p in (share / "report").glob("*.png"))
    assert "_.._.._somewhere_NAME_fashion_mnist.png" in pngs, pngs  # the name, made one file name
    assert all(p.resolve().is_relative_to(share / "report") for p in (share / "report").rglob("*"))
    assert not list(tmp_path.glob("evil*")) and not list((tmp_path / "a").glob("evil*"))
    shutil.rmtree(share / "report" / "summary")
    (share / "report" / "summary").symlink_to(outside, target_is_directory=True)
    r = normbench_cli("summarize", str(runs), "--out", str(share / "report"), cwd=share, timeout=600)
    assert_one_line_error(r, f"refusing to write {share / 'report' / 'summary'}")
    assert listing(tmp_path, skip=share) == before


def test_raw_html_in_a_runs_fields_is_text_in_summary_md(tmp_path):
    """A norm named `<script>...` is shown as text in summary.md ('<' of a tag escaped), while the claims'
    hypotheses keep their '< 0'."""
    entries = record_lines()
    for e in entries[:4]:
        e["results"]["config"]["norm"]["name"] = "<script>alert(1)</script>"
    runs = write_runs(tmp_path / "html.jsonl.gz", entries)
    s = compute(runs)
    md = report.to_markdown(s)
    assert "<script>" not in md and "&lt;script>alert(1)&lt;/script>" in md


# --- 2. duplicates are counted once ---------------------------------------------------------------------------

def test_a_runs_file_with_every_line_twice_summarizes_as_the_file_once(tmp_path):
    """Reference: the same runs read once. Every line twice: the tables and paired tests are the same, and
    the summary says how many duplicates it dropped (terminal, summary.md, summary.json)."""
    entries = record_lines(30)
    once = compute(write_runs(tmp_path / "once.jsonl.gz", entries))
    twice = compute(write_runs(tmp_path / "twice.jsonl.gz", entries + copy.deepcopy(entries)))
    assert [(t.title, {k: (c.values, c.seeds) for k, c in t.cells.items()}) for t in twice.tables] == \
        [(t.title, {k: (c.values, c.seeds) for k, c in t.cells.items()}) for t in once.tables]
    assert len(twice.duplicates) == 30 and not once.duplicates
    out = io.StringIO()
    report.print_summary(twice, Console(file=out, width=200))
    assert "30 duplicate runs dropped" in out.getvalue()
    assert "30 duplicate runs dropped" in report.to_markdown(twice)
    assert len(json.loads(report.to_json(twice))["duplicates"]) == 30


def test_a_completed_retry_stands_for_its_failed_attempt(tmp_path):
    """Reference: the contract's order of results (completed, diverged, failed). The same run failed in an
    earlier sweep folder and completed in a later one: the completed one is kept, the failed one is the
    duplicate, whichever path sorts first; --save-runs keeps the completed one."""
    (entry,) = record_lines(1)
    failed = copy.deepcopy(entry)
    failed["results"].update(status="failed", error="OSError: disk full", test_acc=None)
    runs = write_runs(tmp_path / "runs.jsonl.gz", [{**failed, "path": "2026-01-01/0"}, {**entry, "path": "2026-01-02/0"}])
    s = compute(runs)
    assert [(r.path.name, r.path.parent.name, r.status) for r in s.runs] == [("0", "2026-01-02", "completed"),
                                                                             ("0", "2026-01-01", "duplicate")]


STUDY = """\
experiment: [model=mlp, model.hidden=16, epochs=1, max_steps=5]
sweeps:
  first: ["norm=bn,ln", batch_size=8]
  second: [norm=gn, batch_size=8]
claims:
  - name: BN beats LN
    a: {norm.name: bn, batch_size: 8}
    b: {norm.name: ln, batch_size: 8}
    expect: greater
"""


def _study(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("change, words", [
    (lambda t: t.replace("second: [norm=gn, batch_size=8]", 'second: ["norm=gn,ln", batch_size=8]'),
     "train the same runs"),
    (lambda t: t.replace("b: {norm.name: ln, batch_size: 8}", "b: {norm.name: ln, batch_size: 64}"),
     "reads a cell no sweep trains"),
    (lambda t: t.replace("  second: [norm=gn, batch_size=8]", "  second: [norm=gn, batch_size=8]\n"
                                                              "  second: [norm=rms, batch_size=8]"),
     "the key 'second' twice"),
    (lambda t: t.replace("a: {norm.name: bn, batch_size: 8}", "a: {norm.name: bn, batch_size: 8, lr: 0.5}"),
     "reads a cell no sweep trains"),
    (lambda t: "name: ..\n" + t, "is not a folder name"),
    (lambda t: t + "scales:\n  quick: {overrides: epochs=1}\n", "overrides must be a list"),
    (lambda t: t + "protocol: {looks: [3, 100000000]}\n", "more than 20 looks or 1000 pairs"),
], ids=["overlapping-sweeps", "claim-on-no-cell", "claim-on-no-lr", "duplicate-key", "name-dotdot", "scale-overrides-string",
        "huge-look"])
def test_a_study_file_that_cannot_be_decided_is_refused_at_plan(tmp_path, change, words):
    """Before any calibration trains: two sweeps that train the same runs (each seed twice: no claim could
    read them), a claim on a cell no sweep trains (never decided), a duplicate key (YAML keeps the second
    silently), a study named `..`, a scale's overrides as a string, a look of 10^8 pairs."""
    path = _study(tmp_path, change(STUDY))
    r = normbench_cli("study", str(path), "scale=quick", f"out={tmp_path / 'out'}", "--plan", cwd=tmp_path,
                      timeout=120)
    assert_one_line_error(r, words)
    assert not (tmp_path / "out" / "calibration.json").exists()


# --- 3. resource bombs ----------------------------------------------------------------------------------------

BOMB = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"] +
                 [f"a{k}: &a{k} [*a{k - 1}, *a{k - 1}, *a{k - 1}, *a{k - 1}, *a{k - 1}, *a{k - 1}, *a{k - 1}, "
                  f"*a{k - 1}, *a{k - 1}]" for k in range(1, 10)])


@pytest.mark.parametrize("text, words", [
    ("claims:\n  - name: x\n    a: {norm.name: *a9}\n    b: {norm.name: bn}\n    expect: greater\n",
     "expand to more than"),
    ("claims:\n  - name: *a9\n    a: {norm.name: gn}\n    b: {norm.name: bn}\n    expect: greater\n",
     "expand to more than"),
    ("claims:\n  - {name: x, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater}\nprotocol: *a9\n",
     "expand to more than"),
    ("claims:\n  - {name: x, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater}\n"
     "protocol: {looks: [3, 1e12]}\n", "is not a list of pair counts"),
    ("claims:\n  - {name: x, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater}\n"
     "protocol: {looks: [3, 100000000]}\n", "more than 20 looks or 1000 pairs"),
    ("claims:\n  - {name: x, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater, margin: -.inf}\n",
     "is not a number"),
    ("claims:\n  - {name: x, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater, margin: .nan}\n",
     "is not a number"),
    ("claims:\n  - {name: x, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater}\n"
     "  - {name: y, name: z, a: {norm.name: gn}, b: {norm.name: bn}, expect: greater}\n", "the key 'name' twice"),
    ("[" * 100_000, "nested too deeply"),
], ids=["bomb-selector", "bomb-name", "bomb-protocol", "looks-1e12", "looks-1e8", "margin-inf", "margin-nan",
        "duplicate-key", "deep-nesting"])
def test_a_hostile_claims_file_is_one_line_in_seconds(tmp_path, text, words):
    """An alias bomb (9^10 values written out) in a selector, a name or the protocol; looks of 10^12 or
    10^8 pairs; an infinite or NaN margin (held always, or never decided); a duplicate key; 100,000 nested
    lists. Each is one line from `summarize --claims`, within a minute (the bombs were a MemoryError)."""
    runs = write_runs(tmp_path / "runs.jsonl.gz", record_lines(4))
    path = tmp_path / "claims.yaml"
    path.write_text(f"{BOMB}\n{text}" if "*a9" in text else text)
    r = normbench_cli("summarize", str(runs), "--no-plots", "--claims", str(path), cwd=tmp_path, timeout=60)
    assert_one_line_error(r, "claims.yaml", words)


def test_a_binary_claims_file_is_one_line(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    runs = write_runs(tmp_path / "runs.jsonl.gz", record_lines(4))
    r = normbench_cli("summarize", str(runs), "--no-plots", "--claims", str(path), cwd=tmp_path)
    assert_one_line_error(r, str(path), "not a text file")


# --- 4. values nobody wrote -----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, why", [
    (lambda res: res.update(test_acc=7.0), "test_acc 7.0 is not an accuracy"),
    (lambda res: res.update(test_acc=float("inf")), "test_acc inf is not an accuracy"),
    (lambda res: res.update(test_acc_by_length={"28": -0.5}), "test_acc_by_length -0.5 is not an accuracy"),
    (lambda res: res.update(steps=-5), "steps -5 is not a count"),
    (lambda res: res.update(wall_s=-1e9), "wall_s -1000000000.0 is not a duration"),
    (lambda res: res.update(config="norm=bn"), "config is not a mapping"),
    (lambda res: res.update(status=3), "status '3' is none of"),
    (lambda res: res.update(history="[1, 2]"), "history is not a list of epochs"),
    (lambda res: res.update(history=[[1, 2]]), "history is not a list of epochs"),
], ids=["acc-7", "acc-inf", "acc-by-length", "steps", "wall", "config-string", "status-int", "history-string",
        "history-lists"])
def test_a_run_with_values_out_of_range_is_unreadable_and_listed_apart(tmp_path, change, why):
    """Reference: results.json's contract (normbench/results.py `problem`): accuracies in [0, 1], counts
    and durations >= 0, config a mapping, history a list of epochs. The broken run is listed as unreadable
    with why; the others are summarized as before (exit 0)."""
    entries = record_lines(6)
    change(entries[0]["results"])
    runs = write_runs(tmp_path / "runs.jsonl.gz", entries)
    s = compute(runs)
    (bad,) = [r for r in s.runs if r.status == "unreadable"]
    assert why in bad.note and len([r for r in s.runs if r.status == "completed"]) == 5
    r = normbench_cli("summarize", str(runs), "--no-plots", cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "unreadable" in r.stdout


def test_nan_accuracy_and_deep_json_in_a_runs_file(tmp_path):
    """A NaN test accuracy (JSON's NaN) is a run without one (listed apart, as results.json's contract says
    for a missing number); JSON nested 100,000 deep is one line: not a runs file."""
    entries = record_lines(4)
    entries[0]["results"]["test_acc"] = float("nan")
    s = compute(write_runs(tmp_path / "nan.jsonl.gz", entries))
    assert [r.note for r in s.runs if r.status == "incomplete"] == ["completed without a test_acc"]
    deep = write_runs(tmp_path / "deep.jsonl.gz", [], ["[" * 100_000 + "\n"])
    r = normbench_cli("summarize", str(deep), "--no-plots", cwd=tmp_path)
    assert_one_line_error(r, "is not a runs file", "nested too deeply")


# --- 5. where the machine says no ------------------------------------------------------------------------------

@pytest.fixture
def mount(tmp_path):
    """A tmpfs of the given size and options at tmp_path/<name>, unmounted after (root only)."""
    mounted = []

    def make(name: str, options: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()}): needs root")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_summaries_into_a_read_only_folder_or_onto_a_file_are_one_line(tmp_path, mount):
    """summarize into a read-only file system, onto a file; --save-runs into the read-only one; a study
    whose out= is a file: each one line naming the place, exit 2."""
    runs = write_runs(tmp_path / "runs.jsonl.gz", record_lines(4))
    ro = mount("ro", "ro,size=1m")
    (tmp_path / "afile").write_text("x")
    for args, where in ((["--out", str(ro / "report")], ro / "report"),
                        (["--out", str(tmp_path / "afile")], tmp_path / "afile"),
                        (["--save-runs", str(ro / "s.jsonl.gz")], ro)):
        r = normbench_cli("summarize", str(runs), "--no-plots", *args, cwd=tmp_path)
        assert_one_line_error(r, "cannot write", str(where))
    study = _study(tmp_path, STUDY)
    r = normbench_cli("study", str(study), f"out={tmp_path / 'afile'}", "--plan", cwd=tmp_path)
    assert_one_line_error(r, "cannot write", str(tmp_path / "afile"), "a file stands where a folder is needed")


def test_a_full_disk_while_training_is_one_line_and_results_json_stays_readable(tmp_path, mount, tiny_root):
    """A 1 MB file system: Hydra's files and results.json fit, the MLP's first checkpoint (its weights and
    Adam's moments, ~3 MB) does not. One line, exit 2, and results.json is whole JSON saying why."""
    disk = mount("disk", "size=1m")
    r = normbench_cli("train", f"data.root={tiny_root}", "data.val_size=100", "epochs=1", "progress=false",
                      "tensorboard=false", "threads=1", f"hydra.run.dir={disk / 'run'}", cwd=tmp_path)
    assert_one_line_error(r, "the disk is full")
    res = json.loads((disk / "run" / "results.json").read_text())
    assert res["status"] == "failed" and "No space left" in res["error"]


def test_a_full_disk_while_summarizing_keeps_the_summary_written_before(tmp_path, mount):
    """Summarized once into a small file system, then the disk filled: the second summary is one line
    and summary.json is the first one's, whole."""
    disk = mount("disk", "size=2m")
    runs = write_runs(tmp_path / "runs.jsonl.gz", record_lines(12))
    r = normbench_cli("summarize", str(runs), "--no-plots", "--out", str(disk), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    first = (disk / "summary.json").read_bytes()
    with open(disk / "filler", "wb") as f:  # every byte left
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    r = normbench_cli("summarize", str(runs), "--out", str(disk), cwd=tmp_path)
    assert_one_line_error(r, "the disk is full")
    assert (disk / "summary.json").read_bytes() == first


BROKEN = """\
import torch
from torch import nn


class Halves(nn.Module):  # returns half the features
    def __init__(self, num_features):
        super().__init__()

    def forward(self, x):
        return x[..., : x.shape[-1] // 2]


class Raises(nn.Module):
    def __init__(self, num_features):
        raise RuntimeError("no GPU named bob")


class TwoArgs(nn.Module):
    def __init__(self, num_features, groups):
        super().__init__()
"""


@pytest.mark.parametrize("target, words", [
    ("bad_norms:Halves", "the norm Halves turned a (16, "),
    ("bad_norms:Raises", "raised RuntimeError: no GPU named bob"),
    ("bad_norms:TwoArgs", "raised TypeError"),
], ids=["changes-shape", "raises", "other-arguments"])
def test_a_broken_custom_norm_at_train_is_one_line(tmp_path, tiny_root, target, words):
    """`normbench norms check` reports these in one line; `normbench train` now does too, and names the
    check."""
    (tmp_path / "bad_norms.py").write_text(BROKEN)
    r = normbench_cli("train", "norm=custom", f"norm.target={target}", f"data.root={tiny_root}",
                      "data.val_size=100", "max_steps=2", "batch_size=16", "progress=false", "tensorboard=false",
                      "hydra.run.dir=run", cwd=tmp_path)
    assert_one_line_error(r, words, "normbench norms check")


# --- 6. two studies at once -----------------------------------------------------------------------------------

def test_a_second_study_into_a_held_folder_names_the_holder(tmp_path):
    """A study holds its folder's lock for its life: a second one into the same out= is one line naming
    the first's process, and trains nothing."""
    from normbench.study import launch

    out = tmp_path / "out"
    launch.hold(out, "normbench study first")
    try:
        r = normbench_cli("study", str(_study(tmp_path, STUDY)), f"out={out}", "--plan", cwd=tmp_path)
        assert_one_line_error(r, f"{out} is in use by process {os.getpid()} (normbench study first")
    finally:
        launch.release()
    assert not (out / "calibration.json").exists()
    (out / ".lock").unlink()
    (out / ".lock").symlink_to(tmp_path / "precious")
    (tmp_path / "precious").write_text("precious")
    r = normbench_cli("study", str(_study(tmp_path, STUDY)), f"out={out}", "--plan", cwd=tmp_path)
    assert_one_line_error(r, f"{out / '.lock'} is a symbolic link")
    assert (tmp_path / "precious").read_text() == "precious"


# --- the fuzz loop ---------------------------------------------------------------------------------------------

NASTY = [None, True, -1, 0, 7.0, 1e308, -1e308, float("nan"), float("inf"), 10**30, "", "../../x", "/etc/passwd",
         "..", "[/]", "<b>", "a" * 5000, [], {}, [[[[]]]], {"a": {"b": {}}}, "norm=bn", "1e12", "x\0y"]


def _mutate(rng: random.Random, value, depth: int = 0):
    """`value` with one random part changed: a leaf swapped for a nasty value, a key dropped or added, a
    list truncated or doubled."""
    if isinstance(value, dict) and value and depth < 6 and rng.random() < 0.8:
        key = rng.choice(list(value))
        out = dict(value)
        roll = rng.random()
        if roll < 0.1:
            del out[key]
        elif roll < 0.2:
            out[rng.choice(["path", "status", "results", "config", "../k", "claims", "history"])] = rng.choice(NASTY)
        else:
            out[key] = _mutate(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6 and rng.random() < 0.8:
        roll, out = rng.random(), list(value)
        if roll < 0.15:
            return out[: rng.randrange(len(out))]
        if roll < 0.25:
            return out + out
        k = rng.randrange(len(out))
        out[k] = _mutate(rng, out[k], depth + 1)
        return out
    return rng.choice(NASTY)


def _fuzz_runs(rng, entries, path: Path) -> None:
    entries = list(entries)
    for k in rng.sample(range(len(entries)), rng.choice([1, 1, 1, 2, 3])):  # most of the file stays valid
        e = entries[k]
        entries[k] = {**e, "results": _mutate(rng, e["results"])} if rng.random() < 0.7 else _mutate(rng, e)
    lines = [json.dumps(e) for e in entries]
    text = "\n".join(lines) + "\n"
    if rng.random() < 0.15:
        text = text[: rng.randrange(len(text))]
    data = gzip.compress(text.encode(), mtime=0)
    if rng.random() < 0.1:
        data = data[: rng.randrange(len(data))]
    path.write_bytes(data)


def _fuzz_yaml(rng, raw, path: Path) -> None:
    text = yaml.safe_dump(_mutate(rng, raw), allow_unicode=True)
    roll = rng.random()
    if roll < 0.1:
        text = text[: rng.randrange(len(text) + 1)]
    elif roll < 0.2:
        text = f"{BOMB}\n" + text.replace(": ", ": *a9 #", 1)
    elif roll < 0.25:
        text = text + text  # every key twice
    path.write_text(text)


@pytest.mark.timeout(900)
def test_fuzzed_runs_claims_and_study_files_never_raise_a_traceback(tmp_path):
    """600 seeded mutations (200 of each kind) of a valid runs file (12 record runs), claims file
    (docs/examples/claims.yaml) and study file (docs/examples/my_study.yaml): leaf values swapped for
    NaN, huge numbers, path strings, markup, wrong types; keys dropped and added; lists truncated and
    doubled; the text truncated, an alias bomb spliced in, every key twice. Each is read as normbench
    reads it (summarize computed and written without plots; claims tested on the runs; the study's
    sweeps expanded at every scale): a UserError, or a result, never another exception, and nothing
    written outside its output folder."""
    from normbench.study import spec

    rng = random.Random(66)
    entries = record_lines(12)
    claims_raw = yaml.safe_load((REPO / "docs" / "examples" / "claims.yaml").read_text())
    study_raw = yaml.safe_load((REPO / "docs" / "examples" / "my_study.yaml").read_text())
    base = find_runs(write_runs(tmp_path / "base.jsonl.gz", entries))
    work = tmp_path / "work"
    outcomes = {"ok": 0, "user error": 0}
    for case in range(600):
        work.mkdir()
        kind = ("runs", "claims", "study")[case % 3]
        try:
            if kind == "runs":
                path = work / "runs.jsonl.gz"
                _fuzz_runs(rng, entries, path)
                s = compute(path)
                write_files(s, work / "out", plots=False)
                report.print_summary(s, Console(file=io.StringIO(), width=200))
            elif kind == "claims":
                path = work / "claims.yaml"
                _fuzz_yaml(rng, claims_raw, path)
                found = claiming.load_file(path)
                from normbench.summary import verdicts

                verdicts.test(found.claims, base, base, found.protocol)
            else:
                path = work / "study.yaml"
                _fuzz_yaml(rng, study_raw, path)
                study = spec.load_file(path)
                for scale in study.scales or ["quick"]:
                    for overrides in study.sweeps_at(scale).values():
                        spec.jobs(overrides)
                claiming.load_file(path)
            outcomes["ok"] += 1
            outcomes[f"{kind} ok"] = outcomes.get(f"{kind} ok", 0) + 1
        except UserError as e:
            assert "\n" not in str(e).strip(), (case, kind, str(e))
            outcomes["user error"] += 1
        except Exception as e:
            shutil.copy(path, tmp_path / f"case{case}{path.suffix}")
            raise AssertionError(f"case {case} ({kind}, kept as {tmp_path / f'case{case}'}): "
                                 f"{type(e).__name__}: {e}") from e
        assert sorted(p.name for p in tmp_path.iterdir()) == ["base.jsonl.gz", "work"], case
        shutil.rmtree(work)
    print(outcomes)
    assert outcomes["ok"] > 50 and outcomes["user error"] > 50, outcomes  # both kinds of answer were reached
