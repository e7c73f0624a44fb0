"""A study of your own from one file: `normbench study PATH.yaml` plans, trains in rounds and decides its
claims as a family of their own, from any folder."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO, normbench_cli, requires_real_data
from normbench.errors import UserError
from normbench.study import rounds, spec

EXAMPLE = REPO / "docs/examples/my_study.yaml"


def test_the_example_study_file_is_a_study_with_its_own_family_and_protocol():
    """Reference: docs/examples/my_study.yaml as written: its sweeps with its `experiment:` overrides in
    front and the scale's sizes after, its two primary claims the family (the exploratory one left out),
    its declared looks [3, 5] and α 0.05, and no shipped experiment."""
    study = spec.load(str(EXAMPLE))
    assert study.name == "my_study" and study.experiment is None and study.source == EXAMPLE.resolve()
    mine = study.sweeps_at("quick")["mine"]
    assert mine[:2] == ["model=mlp", "model.hidden=64"] and "norm.target=my_norm:ScaleNorm" in mine
    assert "max_steps=150" in mine and mine[-3:] == spec.COMMON
    assert [c.name for c in rounds.primary_claims(study)] == ["ScaleNorm beats BN at batch 2 (MLP)",
                                                              "ScaleNorm is within 2 points of LN at batch 32 (MLP)"]
    from normbench.summary.claims import load_file

    proto = load_file(EXAMPLE).protocol
    assert proto.looks == (3, 5) and proto.alpha == 0.05 and len(proto.family) == 2


def test_a_study_file_without_looks_takes_the_shipped_looks(tmp_path):
    """Reference: normbench/configs/protocol.yaml's looks (a study trains its seeds in rounds, so it needs
    them), while a --claims file without looks is one look at every seed (protocol.of_claims_file)."""
    from normbench.summary import protocol
    from normbench.summary.claims import load_file

    text = EXAMPLE.read_text().replace("protocol: {looks: [3, 5], alpha: 0.05}", "protocol: {alpha: 0.01}")
    (tmp_path / "s.yaml").write_text(text)
    proto = load_file(tmp_path / "s.yaml").protocol
    assert list(proto.looks) == protocol.shipped_rounds()["looks"] and proto.alpha == 0.01
    assert proto.min_pairs == protocol.load().min_pairs == 5  # the shipped looks come with their min_pairs
    assert load_file(EXAMPLE).protocol.min_pairs == 2  # a file's own looks [3, 5]: no minimum it did not declare


def test_a_study_file_without_scales_runs_as_written_at_any_scale(tmp_path):
    """Reference: the file's own lines. Without `scales:`, the default scale (laptop) and any other give the
    file's experiment, its sweep and COMMON, nothing added; a file that declares scales still refuses one
    it does not declare."""
    text = EXAMPLE.read_text()
    cut = text[:text.index("scales:")] + text[text.index("claims:"):]
    (tmp_path / "s.yaml").write_text(cut)
    study = spec.load(str(tmp_path / "s.yaml"))
    want = ["model=mlp", "model.hidden=64", "norm=custom", "norm.target=my_norm:ScaleNorm", "batch_size=2,32", *spec.COMMON]
    assert study.sweeps_at("laptop")["mine"] == want and study.sweeps_at("quick")["mine"] == want
    with pytest.raises(UserError, match="has no scale 'full'"):
        spec.load(str(EXAMPLE)).sweeps_at("full")


def _under(text: str, key: str, line: str) -> str:
    """`text` with `line` first under the top-level `key` (whose line may end in a comment)."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(key))
    return "\n".join([*lines[:at + 1], line, *lines[at + 1:]]) + "\n"


@pytest.mark.parametrize("change,message", [
    (lambda t: t.replace("sweeps:", "sweps:"), "a study file needs `sweeps:`"),
    (lambda t: t + "\nseeds: [0, 1]\n", "unknown key(s) seeds"),
    (lambda t: t.replace("  - model=mlp\n", "  - model mlp\n"), "experiment must be a list of key=value"),
    (lambda t: t[:t.index("claims:")], "no claims"),
    (lambda t: _under(t, "sweeps:", "  a: norm=ln"), "sweep 'a' must be a list of key=value"),
    (lambda t: _under(t, "sweeps:", "  high-lr: [norm=ln]"), "sweep name 'high-lr' is not a folder name, or holds '-lr'"),
    (lambda t: _under(t, "scales:", "  tiny: [epochs=1]"), "`scales:` must map scale names to mappings"),
])
def test_a_broken_study_file_is_one_line(tmp_path, change, message):
    """Reference: docs/reliability.md: a user's mistake is one line saying what and how to fix it."""
    (tmp_path / "s.yaml").write_text(change(EXAMPLE.read_text()))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec.load(str(tmp_path / "s.yaml"))


def test_a_study_keeps_each_overrides_prefix():
    """Reference: Hydra's override grammar: `+k=v` adds a key the config lacks (a custom norm's options,
    docs/your-question.md), `~k` deletes one; without its prefix the first fails to compose and the second
    sets null. A later plain `k=v` of an added key keeps the `+`."""
    assert spec.jobs(["model=mlp", "+norm.options.eps=1e-6", "~data.subset", "norm=bn,gn"]) == [
        ["model=mlp", "+norm.options.eps=1e-06", "~data.subset", "norm=bn"],
        ["model=mlp", "+norm.options.eps=1e-06", "~data.subset", "norm=gn"]]
    assert spec._last_wins(["+norm.options.eps=1", "epochs=1", "norm.options.eps=2"]) == ["epochs=1", "+norm.options.eps=2"]


def test_a_job_that_does_not_compose_is_one_line(tmp_path):
    """Reference: `normbench train`'s one line for the same mistake (cli_errors.explain): a study file's typo
    is found while the plan composes its jobs, named with the job's overrides, exit 2 and no traceback."""
    text = EXAMPLE.read_text().replace("  - model=mlp\n", "  - model=mlp\n  - model.hiden=64\n")
    (tmp_path / "s.yaml").write_text(text)
    shutil.copy(EXAMPLE.parent / "my_norm.py", tmp_path)
    r = normbench_cli("study", str(tmp_path / "s.yaml"), "scale=quick", f"out={tmp_path / 'out'}", "--plan", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "a job of the study does not compose: unknown key 'model.hiden'; did you mean model.hidden?" in r.stderr
    assert "Traceback" not in r.stderr


def test_all_with_a_study_file_is_refused():
    """Reference: a study file's claims are their own family (docs/your-question.md): `all` beside it too."""
    with pytest.raises(UserError, match="run a study file on its own"):
        spec.resolve(["all", "my.yaml"])


def test_a_study_file_runs_alone():
    """Reference: the family rule: a study file's claims are their own family, never pooled with the
    shipped studies' (which share protocol.yaml's)."""
    with pytest.raises(UserError, match="run a study file on its own"):
        spec.resolve([str(EXAMPLE), "ghost_batch"])


@pytest.mark.slow
@requires_real_data
def test_the_example_study_runs_from_its_own_folder_and_decides(tmp_path):
    """Reference: the protocol (docs/protocol.md) on the example's own family: copied outside the
    repository with its norm module, `normbench study my_study.yaml scale=quick` plans, trains its rounds
    and writes a summary whose primary claims carry a verdict from its family ("your claims",
    my_study.yaml's looks), the exploratory one an estimate only; run again, it trains nothing more."""
    for name in ("my_study.yaml", "my_norm.py"):
        shutil.copy(REPO / "docs/examples" / name, tmp_path / name)
    r = normbench_cli("study", "my_study.yaml", "scale=quick", cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "outputs/study/summary/summary.json").read_text())
    assert summary["protocol"]["name"] == "your claims" and summary["protocol"]["looks"] == [3, 5]
    verdicts = {c["name"]: c["verdict"] for c in summary["claims"]}
    primary = [c for c in summary["claims"] if c["role"] == "primary"]
    assert len(primary) == 2 and all(c["verdict"].split(" ")[0] in ("held", "refuted", "inconclusive") for c in primary)
    assert verdicts["BN at batch 32 against batch 2 (MLP)"] == "exploratory"
    state = json.loads((tmp_path / "outputs/study/study.json").read_text())
    again = normbench_cli("study", "my_study.yaml", "scale=quick", cwd=tmp_path, timeout=300)
    assert again.returncode == 0 and json.loads((tmp_path / "outputs/study/study.json").read_text())["done"] == state["done"]


def test_a_scale_gives_one_sweep_a_budget_of_its_own(tmp_path):
    """Reference: Hydra's rule that a key is given once on a command line, the last value the one meant. A
    scale's `per_sweep` overrides come after the scale's own (small_batch's ResNet: 5 epochs of 2k images where
    the scale trains 1 epoch of 10k), each key once in the sweep's overrides; a per_sweep naming no sweep is
    one line naming the sweeps there are."""
    resnet = spec.load("small_batch").sweeps_at("laptop")["resnet"]
    assert [o for o in resnet if o.split("=")[0] in ("epochs", "data.subset")] == ["epochs=5", "data.subset=2000"]
    mlp = spec.load("small_batch").sweeps_at("laptop")["mlp"]
    assert "epochs=1" in mlp and "data.subset=10000" in mlp
    study = tmp_path / "s.yaml"
    text = EXAMPLE.read_text()
    study.write_text(text[:text.index("scales:")] + "scales: {full: {per_sweep: {nosuch: [epochs=2]}}}\n"
                     + text[text.index("claims:"):])
    with pytest.raises(UserError, match=r"per_sweep names no sweep nosuch; its sweeps are "):
        spec.load(str(study)).sweeps_at("full")
    study.write_text(study.read_text().replace("{nosuch: [epochs=2]}", "{mine: epochs=2}"))
    with pytest.raises(UserError, match=r"per_sweep must map sweep names to override lists; e.g. per_sweep: "):
        spec.load(str(study)).sweeps_at("full")
