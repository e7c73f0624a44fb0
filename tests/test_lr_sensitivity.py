"""Learning-rate sensitivity (normbench/summary/lr_sensitivity.py): per seed, the mean over the grid of the best
accuracy minus the accuracy at each lr (Wortsman et al. 2023, on accuracy), against a hand computation;
its claims (metric: lr_sensitivity) under --select lr, and summarize's table, JSON and figure."""

import io
import json

import pytest
from rich.console import Console
from test_summarize import write_run

from normbench.summary import claims, lr_sensitivity, verdicts
from normbench.summary.discover import find_runs
from normbench.summary.summarize import compute, summarize

LRS = [1e-3, 1e-2, 1e-1]
# (placement, seed) -> accuracy per lr; None: the run diverged
ACC = {("pre", 0): [0.80, 0.85, 0.70], ("pre", 1): [0.78, 0.86, 0.72], ("pre", 2): [0.81, 0.84, 0.69],
       ("post", 0): [0.79, 0.84, None], ("post", 1): [0.77, 0.85, None], ("post", 2): [0.80, 0.83, 0.30]}


def _sweep(root):
    for (placement, seed), accs in ACC.items():
        for lr, acc in zip(LRS, accs):
            write_run(root, f"{placement}_lr{lr}_s{seed}", "diverged" if acc is None else "completed",
                      model="transformer", norm="ln", bs=64, seed=seed, test_acc=acc, val_acc=acc,
                      config={"lr": lr, "model.placement": placement}, overrides=["experiment=lr_sensitivity"])


def _by_hand(accs):
    """Reference: the definition written out: diverged = chance (0.1), best of the grid minus each, averaged."""
    accs = [0.1 if a is None else a for a in accs]
    return sum(max(accs) - a for a in accs) / len(accs)


def test_per_seed_sensitivity_matches_the_definition(tmp_path):
    _sweep(tmp_path)
    runs = [r for r in find_runs(tmp_path) if r.config["model.placement"] == "post"]
    values, lost = lr_sensitivity.per_seed(runs)
    assert lost == []
    assert values == pytest.approx({s: _by_hand(ACC["post", s]) for s in range(3)}, abs=1e-12)
    assert values[0] == pytest.approx((0.84 - 0.79 + 0 + 0.84 - 0.1) / 3, abs=1e-12)  # one diverged lr


def test_a_failed_run_leaves_its_seed_out(tmp_path):
    _sweep(tmp_path)
    write_run(tmp_path, "pre_lr0.3_s1", "failed", model="transformer", norm="ln", bs=64, seed=1,
              config={"lr": 0.3, "model.placement": "pre"}, error="OSError: disk full")
    runs = [r for r in find_runs(tmp_path) if r.config["model.placement"] == "pre"]
    values, lost = lr_sensitivity.per_seed(runs)
    assert lost == [1] and sorted(values) == [0, 2]


def test_sensitivity_claims_read_every_lr_under_select(tmp_path):
    """Under --select lr the tables keep one lr per seed; a sensitivity claim still pairs each seed's whole
    grid: a - b per seed equals the hand-computed sensitivities' difference."""
    _sweep(tmp_path)
    claim = {"name": "pre is less sensitive", "a": {"model.placement": "pre", "metric": "lr_sensitivity"},
             "b": {"model.placement": "post", "metric": "lr_sensitivity"}, "expect": "less"}
    s = compute(tmp_path, select="lr", claims_file=_claims_file(tmp_path, [claim]))
    result = s.claims[0]
    diffs = [_by_hand(ACC["pre", k]) - _by_hand(ACC["post", k]) for k in range(3)]
    assert result.n == 3 and result.estimate == pytest.approx(sum(diffs) / 3, abs=1e-12)
    assert result.claim.scale == 100.0  # margins in points, as for accuracies
    direct = verdicts.test(claims.parse([claim], "test"), find_runs(tmp_path))[0]
    assert direct.estimate == pytest.approx(result.estimate, abs=1e-12)


def test_summarize_reports_curves_and_sensitivity(tmp_path):
    _sweep(tmp_path)
    out = io.StringIO()
    files = summarize(tmp_path, console=Console(file=out, width=250), select="lr")
    text = out.getvalue()
    assert "learning-rate sensitivity" in text and "(2 diverged)" in text
    data = json.loads(files["json"].read_text())["lr_sensitivity"]
    by_label = {d["norm"]: d for d in data}
    assert set(by_label) == {"ln", "ln placement=post"}
    post = by_label["ln placement=post"]
    assert post["lrs"] == LRS and post["diverged"] == {"0.1": 2}
    assert post["acc"]["0.1"]["values"] == pytest.approx([0.1, 0.1, 0.30])  # diverged at chance
    assert post["sensitivity"]["mean"] == pytest.approx(sum(_by_hand(ACC["post", k]) for k in range(3)) / 3)
    assert any(p.name.startswith("lr_lr_sensitivity") and p.suffix == ".png" for p in files.values())
    assert "## Learning-rate sensitivity" in files["md"].read_text()


def _claims_file(root, items):
    path = root.parent / f"{root.name}_claims.yaml"
    import yaml
    path.write_text(yaml.safe_dump(items))
    return path


def test_lr_table_marks_only_cells_with_another_seed_count(tmp_path):
    """Reference: the tables' convention (report.format_cell): "(n)" where a cell's seed count differs from
    the table's usual one (or is under 3), nowhere when every cell has the same 4 seeds."""
    import shutil

    def lr_section() -> str:
        md = summarize(tmp_path, console=Console(file=io.StringIO()), select="lr")["md"].read_text()
        return md[md.index("## Learning-rate sensitivity"):]

    for seed in range(4):
        for lr, acc in zip(LRS, [0.80, 0.85, 0.70]):
            write_run(tmp_path, f"lr{lr}_s{seed}", model="transformer", norm="ln", bs=64, seed=seed,
                      test_acc=acc + seed / 100, val_acc=acc, config={"lr": lr}, overrides=["experiment=lr_sensitivity"])
    assert "(4)" not in lr_section() and "(3)" not in lr_section()
    shutil.rmtree(tmp_path / f"lr{LRS[0]}_s3")  # one cell keeps 3 of its 4 seeds
    md = lr_section()
    assert md.count("(3)") == 1 and "(4)" not in md
