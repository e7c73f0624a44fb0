"""`normbench summarize` on hand-made results.json files: exact mean/std/n and intervals, paired
comparisons, labels, tables, the runs listed apart, and every file it writes."""

import csv
import io
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, normbench_cli
from rich.console import Console
from scipy import stats as scipy_stats

from normbench.config import Config, ModelConfig, to_dict
from normbench.results import write_results
from normbench.summary.summarize import compute, summarize


def write_run(root: Path, name: str, status: str = "completed", **kw) -> Path:
    """A run directory as the runner leaves it: results.json (status, config with its model's defaults,
    metrics) and .hydra/ (with overrides.yaml when `overrides` are given)."""
    cfg = to_dict(Config(model=ModelConfig(name=kw.pop("model", "mlp"))))
    cfg["norm"]["name"] = kw.pop("norm", "bn")
    cfg["batch_size"] = kw.pop("bs", 8)
    cfg["seed"] = kw.pop("seed", 0)
    for key, value in kw.pop("config", {}).items():  # "norm.masked": False
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        node[leaf] = value
    overrides = kw.pop("overrides", None)
    run_dir = root / name
    (run_dir / ".hydra").mkdir(parents=True)
    if overrides is not None:
        (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    write_results(run_dir, {"status": status, "config": cfg, **kw})
    return run_dir


def _summarize(root, **kw):
    out = io.StringIO()
    files = summarize(root, console=Console(file=out, width=200), **kw)
    return files, out.getvalue()


def _csv(path):
    return {(r["model"], r["norm"], r["metric"], r["axis"]): r for r in csv.DictReader(path.open())}


def small_batch_sweep(root: Path) -> dict:
    """bn at batch 2 over three seeds plus one diverged; ln at batch 2 once; bn at batch 8 twice; a cnn;
    and one run each that failed, never finished, cannot be read, or finished without a test accuracy."""
    acc = {"bn2": [0.50, 0.61, 0.72], "bn8": [0.80, 0.83], "ln2": [0.75]}
    for seed, a in enumerate(acc["bn2"]):
        write_run(root, f"bn2_{seed}", bs=2, seed=seed, test_acc=a, test_acc_train_mode=a - 0.2,
                  norm_values_per_channel=2)
    write_run(root, "bn2_3", "diverged", bs=2, seed=3, test_acc=None, diverged_step=17)
    for seed, a in enumerate(acc["bn8"]):
        write_run(root, f"bn8_{seed}", bs=8, seed=seed, test_acc=a, test_acc_train_mode=a, norm_values_per_channel=8)
    write_run(root, "ln2_0", norm="ln", bs=2, test_acc=acc["ln2"][0], test_acc_train_mode=acc["ln2"][0])
    write_run(root, "cnn_bn2", model="cnn", bs=2, test_acc=0.85, test_acc_train_mode=0.84,
              norm_values_per_channel=392)
    write_run(root, "ln8_failed", "failed", norm="ln", bs=8, error="UserError: in is not defined on flat features")
    (root / "killed" / ".hydra").mkdir(parents=True)
    (root / "garbled").mkdir()
    (root / "garbled" / "results.json").write_text("{not json")
    write_run(root, "no_acc", norm="ln", bs=8, seed=5)
    return acc


def test_mean_std_n_are_exact_and_problems_listed(tmp_path):
    """Reference: Python's statistics.fmean / statistics.stdev (n - 1) on the hand-written accuracies, and
    scipy.stats.t.interval for the 95% interval; the four runs that are not completed appear in the list
    of problems, with their reason."""
    root = tmp_path / "sweep"
    acc = small_batch_sweep(root)
    files, printed = _summarize(root)
    rows = _csv(files["csv"])
    bn2 = rows["mlp", "bn", "test_acc", "2"]
    assert int(bn2["n"]) == 3 and int(bn2["n_diverged"]) == 1
    assert float(bn2["mean"]) == statistics.fmean(acc["bn2"])
    assert float(bn2["std"]) == statistics.stdev(acc["bn2"])
    assert float(bn2["min"]) == 0.50 and float(bn2["max"]) == 0.72 and bn2["values_per_channel"] == "2"
    lo, hi = scipy_stats.t.interval(0.95, 2, loc=statistics.fmean(acc["bn2"]), scale=scipy_stats.sem(acc["bn2"]))
    assert float(bn2["ci_low"]) == pytest.approx(lo, rel=1e-12) and float(bn2["ci_high"]) == pytest.approx(hi, rel=1e-12)
    bn8 = rows["mlp", "bn", "test_acc", "8"]
    assert int(bn8["n"]) == 2 and float(bn8["std"]) == statistics.stdev(acc["bn8"])
    ln2 = rows["mlp", "ln", "test_acc", "2"]
    assert int(ln2["n"]) == 1 and ln2["std"] == "" and ln2["ci_low"] == ""  # one value: no spread, no interval
    train = rows["mlp", "bn", "test_acc_train_mode", "2"]
    assert float(train["mean"]) == statistics.fmean(a - 0.2 for a in acc["bn2"])
    assert int(rows["mlp", "ln", "test_acc", "8"]["n_failed"]) == 1
    assert rows["cnn", "bn", "test_acc", "2"]["values_per_channel"] == "392"

    summary = json.loads(files["json"].read_text())
    problems = {Path(p["path"]).name: (p["status"], p["note"]) for p in summary["problems"]}
    assert problems == {
        "bn2_3": ("diverged", "non-finite loss at step 17"),
        "ln8_failed": ("failed", "UserError: in is not defined on flat features"),
        "killed": ("incomplete", "no results.json (still running, or killed)"),
        "garbled": ("unreadable", problems["garbled"][1]),
        "no_acc": ("incomplete", "completed without a test_acc"),
    }
    assert "unreadable" in problems["garbled"][1]
    assert summary["runs"] == {"completed": 7, "diverged": 1, "failed": 1, "incomplete": 2, "unreadable": 1}
    group = next(g for g in summary["groups"] if (g["model"], g["norm"], g["metric"], g["axis"])
                 == ("mlp", "bn", "test_acc", "2"))
    assert group["values"] == acc["bn2"] and group["seeds"] == [0, 1, 2]
    assert group["ci_low"] == pytest.approx(lo, rel=1e-12)
    for name in problems:
        assert name in printed


def test_markdown_tables_mark_the_best_and_plots_are_written(tmp_path):
    """Reference: the hand-made accuracies, in percent, with the 95% t-interval computed by hand
    (t(0.975, 2) = 4.303, t(0.975, 1) = 12.706 from a t table), in a Markdown table with norms as rows
    and batch sizes as columns; n marked below 3; PNG files and summarize's TensorBoard run `summary`."""
    root = tmp_path / "sweep"
    small_batch_sweep(root)
    files, printed = _summarize(root)
    md = files["md"].read_text()
    assert "## fashion_mnist · mlp · test accuracy (running statistics) by batch size" in md
    assert "small_batch" not in md  # a plain sweep is not named after a study
    assert "| norm | 2 | 8 |" in md
    assert "| values/channel | 2 | 8 |" in md
    # 61.0 ± 4.303 * 11.0 / sqrt(3) = ± 27.3; 81.5 ± 12.706 * 2.12 / sqrt(2) = ± 19.1
    assert "| bn | 61.0 [33.7, 88.3] †1 | **81.5 [62.4, 100.6] (2)** |" in md
    assert "| ln | **75.0 (1)** | ✗1 |" in md
    assert "## Runs not in the tables" in md and "`ln8_failed` | failed" in md
    png = files["sweep_fashion_mnist"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"![sweep_fashion_mnist]({png.name})" in md
    assert list((root / "summary").glob("events.out.tfevents.*"))
    assert not (root / "tensorboard").exists()
    assert "61.0 [33.7, 88.3]" in printed and "75.0 (1) *" in printed


def test_a_ghost_batch_sweep_plots_accuracy_against_k(tmp_path):
    """Reference: plots.ghost_figure's contract: one line per norm (its ghost_batch rows, in order of K, at
    the hand-made means), a band for a norm without ghost batches, and the figure written as a PNG."""
    for seed in range(3):
        for k, acc in ((2, 0.60), (8, 0.80), (64, 0.84)):
            write_run(tmp_path, f"bn{k}_{seed}", bs=64, seed=seed, config={"norm.ghost_batch": k},
                      test_acc=acc + seed / 100, test_acc_train_mode=acc - 0.1)
        write_run(tmp_path, f"ln_{seed}", norm="ln", bs=64, seed=seed, test_acc=0.83, test_acc_train_mode=0.83)
    from normbench.summary.show import plots

    s = compute(tmp_path)
    evals = next(t for t in s.tables if t.metric == "test_acc")
    ax = plots.ghost_figure(evals, None).axes[0]
    (bars,) = [c for c in ax.containers if c.get_label() == "bn"]  # errorbar: data line, caps, bars
    line = bars.lines[0]
    assert list(line.get_xdata()) == [2, 8, 64]
    assert [round(y, 6) for y in line.get_ydata()] == [61.0, 81.0, 85.0]
    assert any(ln.get_label() == "ln (no ghost batch)" for ln in ax.lines)
    files, _ = _summarize(tmp_path)
    assert files["ghost_batch_fashion_mnist_mlp"].read_bytes()[:4] == b"\x89PNG"


def test_values_per_channel_panel_puts_each_cell_at_its_own_runs_count(tmp_path):
    """Reference: the runs' own norm_values_per_channel, set by hand. At batch 64 the column holds ghost
    batches of 2 and 8 beside plain BN (64 values): each row is plotted at its own count, not at the
    column's fewest (which put plain BN at batch 64 at 2 values)."""
    for seed in range(3):
        for k in (2, 8):
            write_run(tmp_path, f"bn{k}_{seed}", bs=64, seed=seed, config={"norm.ghost_batch": k},
                      test_acc=0.6 + k / 100, test_acc_train_mode=0.5, norm_values_per_channel=k)
        for bs in (8, 64):
            write_run(tmp_path, f"bn_{bs}_{seed}", bs=bs, seed=seed, test_acc=0.85, test_acc_train_mode=0.8,
                      norm_values_per_channel=bs)
    from normbench.summary.show import plots

    s = compute(tmp_path)
    tables = [t for t in s.tables if t.kind == "batch"]
    ax = plots.batch_figure(tables).axes[-1]
    xs = {c.get_label(): list(c.lines[0].get_xdata()) for c in ax.containers}
    assert xs["bn · mlp"] == [8, 64]
    assert xs["bn ghost_batch=2 · mlp"] == [2] and xs["bn ghost_batch=8 · mlp"] == [8]


def test_values_per_channel_panel_keeps_rows_without_statistics_passes(tmp_path):
    """Reference: results.json's `batch_dependent`, set by hand: BN runs with statistics_suite=false (no
    test_acc_train_mode, as the studies' CNN cells) are still plotted in the values-per-channel panel; LN,
    which records batch_dependent false, is not."""
    for seed in range(3):
        for bs in (8, 64):
            write_run(tmp_path, f"bn_{bs}_{seed}", bs=bs, seed=seed, test_acc=0.85, norm_values_per_channel=bs,
                      batch_dependent=True)
            write_run(tmp_path, f"ln_{bs}_{seed}", bs=bs, seed=seed, norm="ln", test_acc=0.84,
                      norm_values_per_channel=bs, batch_dependent=False)
    from normbench.summary.show import plots

    tables = [t for t in compute(tmp_path).tables if t.kind == "batch"]
    assert not [t for t in tables if t.metric == "test_acc_train_mode"]
    labels = [c.get_label() for c in plots.batch_figure(tables).axes[-1].containers]
    assert labels == ["bn · mlp"]


def test_every_table_states_its_budget(tmp_path):
    """Reference: the runs' own `steps` x batch_size, counted by hand: 10,000 samples at batch 2 (5,000
    steps) and at batch 8 (1,250 steps); a column whose runs differ shows the range."""
    for seed in range(2):
        write_run(tmp_path, f"b2_{seed}", bs=2, seed=seed, test_acc=0.5, steps=5000)
        write_run(tmp_path, f"b8_{seed}", bs=8, seed=seed, test_acc=0.8, steps=1250 + seed)
    s = compute(tmp_path)
    t = next(t for t in s.tables if t.metric == "test_acc")
    assert "budget: 10,000-10,008 training samples seen per run; steps: 5,000 at 2, 1,250-1,251 at 8" in t.notes


def test_labels_keep_apart_what_differs_and_lengths_sort(tmp_path):
    """Reference: runs that differ in more than the seed (norm.masked, model.placement, lr) are separate
    rows, labelled by what differs; test lengths sort as numbers, then the mixed and padded tests."""
    root = tmp_path / "sweep"
    varlen = {"varlen.enabled": True, "model.name": "rnn"}
    by_len = {"10": 0.8, "42": 0.5, "28": 0.85, "36": 0.6}
    variants = {"naive": {"norm.masked": False}, "masked": {}, "step": {"model.placement": "recurrent"}}
    for name, extra in variants.items():
        for seed in (0, 1):
            write_run(root, f"{name}_{seed}", model="rnn", seed=seed, config={**varlen, **extra},
                      test_acc=0.85, test_acc_train_mode=0.8, test_acc_by_length=by_len, test_acc_mixed=0.82,
                      test_acc_heavy_pad=0.82, test_acc_mixed_train_mode=0.8, test_acc_heavy_pad_train_mode=0.7)
    write_run(root, "ln_lr", model="rnn", norm="ln", config={**varlen, "lr": 0.01}, test_acc_by_length=by_len,
              test_acc=0.9)
    write_run(root, "ln", model="rnn", norm="ln", config=varlen, test_acc_by_length=by_len, test_acc=0.9)
    files, _ = _summarize(root, plots=True)
    rows = _csv(files["csv"])
    labels = {norm for (_, norm, _, _) in rows}
    assert labels == {"bn masked=false", "bn", "bn placement=recurrent", "ln", "ln lr=0.01"}
    md = files["md"].read_text()
    assert "| norm | 10 | 28 | 36 | 42 | mixed | pad×2 |" in md
    assert "| norm | original | mixed | pad×2 |" in md  # the batch-statistics table
    assert int(rows["rnn", "bn masked=false", "test_acc", "42"]["n"]) == 2
    assert float(rows["rnn", "bn", "test_acc_train_mode", "pad×2"]["mean"]) == 0.7
    assert files["variable_length_fashion_mnist_rnn"].exists()


def test_cli_summarize(tmp_path):
    """Reference: the command exits 0 and prints the tables; a missing path is one line and exit 2."""
    small_batch_sweep(tmp_path / "sweep")
    r = normbench_cli("summarize", str(tmp_path / "sweep"), "--no-plots", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "test accuracy (running statistics) by batch size" in r.stdout and "summary.md" in r.stdout
    assert not list((tmp_path / "sweep").glob("*.png"))
    r = normbench_cli("summarize", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    r = normbench_cli("summarize", str(tmp_path / "empty"), cwd=tmp_path)
    assert r.returncode == 2 and "no runs" in r.stderr


# Student's sleep data (Cushny & Peebles 1905; R's `sleep`): extra hours of sleep under two drugs, same
# ten patients. R: t.test(extra ~ group, data = sleep, paired = TRUE) gives t = -4.0621, df = 9,
# p-value = 0.002833, mean difference -1.58, 95% CI [-2.4598858, -0.7001142] (group 1 - group 2).
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def sleep_sweep(root: Path) -> None:
    """bn and gn over ten seeds at batch 4, accuracy = 0.5 + hours / 100 (gn gets the second drug); at
    batch 16 ln ties bn on average and gn is 5 points below on every seed."""
    for seed, (a, b) in enumerate(zip(SLEEP_1, SLEEP_2)):
        write_run(root, f"bn4_{seed}", bs=4, seed=seed, test_acc=0.5 + a / 100)
        write_run(root, f"gn4_{seed}", norm="gn", bs=4, seed=seed, test_acc=0.5 + b / 100)
    for seed, wiggle in enumerate([0.01, -0.02, 0.015, -0.005]):
        write_run(root, f"bn16_{seed}", bs=16, seed=seed, test_acc=0.8 + wiggle)
        write_run(root, f"ln16_{seed}", norm="ln", bs=16, seed=seed, test_acc=0.8 - wiggle)
        write_run(root, f"gn16_{seed}", norm="gn", bs=16, seed=seed, test_acc=0.75 + wiggle)


def test_paired_comparison_matches_r_on_the_sleep_data(tmp_path):
    """Reference: R's paired t-test on Student's sleep data (p = 0.002833, mean difference 1.58 hours,
    95% CI [0.7001142, 2.4598858], here in hundredths of accuracy); Holm over the table's three
    comparisons multiplies the smallest p by 3 and the next by 2 (Holm 1979); a difference the same on
    every seed gets the exact sign-flip p, 2 x 2^-n."""
    sleep_sweep(tmp_path)
    files, printed = _summarize(tmp_path, plots=False)
    paired = {(r["norm"], r["axis"]): r for r in csv.DictReader(files["paired_csv"].open())}
    gn4 = paired["gn", "4"]
    assert gn4["ref"] == "bn" and int(gn4["pairs"]) == 10
    assert float(gn4["mean_diff"]) == pytest.approx(0.0158, abs=1e-12)
    assert float(gn4["ci_low"]) == pytest.approx(0.007001142, abs=1e-9)
    assert float(gn4["ci_high"]) == pytest.approx(0.024598858, abs=1e-9)
    assert float(gn4["p"]) == pytest.approx(0.002833, abs=5e-7)
    ps = {k: float(r["p"]) for k, r in paired.items()}
    assert set(ps) == {("gn", "4"), ("gn", "16"), ("ln", "16")}
    assert ps["gn", "16"] == pytest.approx(2 / 2 ** 4)  # -5 points on all 4 seeds: the exact two-sided p
    assert float(gn4["p_holm"]) == pytest.approx(min(1.0, 3 * ps["gn", "4"]), rel=1e-12)  # rank 1 of 3
    assert float(paired["gn", "16"]["p_holm"]) == pytest.approx(2 * ps["gn", "16"], rel=1e-12)  # rank 2
    assert float(paired["ln", "16"]["p_holm"]) == pytest.approx(min(1.0, ps["ln", "16"]), rel=1e-12)
    assert "paired vs bn" in printed and "+1.6" in printed
    summary = json.loads(files["json"].read_text())
    comparison = next(c for c in summary["comparisons"] if (c["norm"], c["axis"]) == ("gn", "4"))
    assert comparison["seeds"] == list(range(10))


def test_best_is_every_norm_not_significantly_below_the_top(tmp_path):
    """Reference: the sleep sweep by construction: at batch 16, ln ties bn (paired differences average
    to zero: p = 1) and gn is 5 points below on each of 4 seeds, where the exact test's two-sided p is
    2 x 2^-4 = 0.125 (no t statistic at zero variance): not significantly below, so best too; at batch 4,
    bn is below gn (R: p = 0.0028)."""
    sleep_sweep(tmp_path)
    files, _ = _summarize(tmp_path, plots=False)
    best = {(r["norm"], r["axis"]) for r in csv.DictReader(files["csv"].open()) if r["best"] == "True"}
    assert best == {("gn", "4"), ("bn", "16"), ("ln", "16"), ("gn", "16")}


def test_ref_option_changes_the_reference(tmp_path):
    """Reference: the sleep sweep compared with gn: at batch 4 bn - gn is the negated difference."""
    sleep_sweep(tmp_path)
    r = normbench_cli("summarize", str(tmp_path), "--no-plots", "--ref", "gn", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    paired = {(row["norm"], row["axis"]): row for row in csv.DictReader((tmp_path / "summary_paired.csv").open())}
    assert paired["bn", "4"]["ref"] == "gn"
    assert float(paired["bn", "4"]["mean_diff"]) == pytest.approx(-0.0158, abs=1e-12)
    assert "paired vs gn" in r.stdout


def test_titles_say_what_was_swept_not_a_study(tmp_path):
    """Reference: the runs' own records: a CIFAR-10 sweep without an experiment is titled by its data and
    model; runs started with experiment=small_batch (their .hydra/overrides.yaml) by that study; the
    values-per-channel row shows every count its column's runs saw; the header lists what varied."""
    for seed in (0, 1, 2):
        write_run(tmp_path / "c", f"bn_{seed}", seed=seed, config={"data.name": "cifar10"}, test_acc=0.5,
                  norm_values_per_channel=8, overrides=["data=cifar10", f"seed={seed}"])
        write_run(tmp_path / "c", f"none_{seed}", norm="none", seed=seed, config={"data.name": "cifar10"},
                  test_acc=0.4, norm_values_per_channel=None)
        write_run(tmp_path / "s", f"bn_{seed}", seed=seed, test_acc=0.7, norm_values_per_channel=4 + 4 * (seed > 0),
                  config={"model.hidden": 64 + seed}, overrides=["experiment=small_batch", f"seed={seed}"])
    files, printed = _summarize(tmp_path / "c", plots=False)
    md = files["md"].read_text()
    assert "## cifar10 · mlp · test accuracy (running statistics) by batch size" in md and "small_batch" not in md
    assert "| values/channel | 8 |" in md
    assert "varied: norm.name ∈ {bn, none}; seed ∈ {0, 1, 2}" in printed
    files, _ = _summarize(tmp_path / "s", plots=False)
    md = files["md"].read_text()
    assert "## small_batch · fashion_mnist · mlp · test accuracy" in md
    assert "| values/channel | 4–8 |" in md  # not the first run's count alone
    assert "bn hidden=65" in md  # a setting that varies is in the label


def test_summarize_reads_a_sweep_without_torch_or_tensorboard(tmp_path):
    """Reference: sys.modules after computing the tables in a fresh interpreter: the numbers need neither
    torch nor TensorBoard (so `normbench summarize` starts fast)."""
    sleep_sweep(tmp_path)
    code = ("import sys; from normbench.summary.summarize import compute; s = compute(sys.argv[1]); "
            "assert s.tables[0].comparisons; "
            "print(sorted(m for m in ('torch', 'tensorboard', 'matplotlib', 'normbench.train.tracking') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def lr_sweep(root: Path) -> dict:
    """bn and gn at batch 4 over an lr grid of three, three seeds each: bn's validation accuracy peaks
    in the middle of the grid, gn's at its largest lr; test accuracies differ from validation ones."""
    val = {("bn", 0.001): 0.70, ("bn", 0.003): 0.80, ("bn", 0.01): 0.75,
           ("gn", 0.001): 0.60, ("gn", 0.003): 0.65, ("gn", 0.01): 0.72}
    test = {}
    for (norm, lr), v in val.items():
        for seed in range(3):
            test[norm, lr, seed] = v - 0.05 + 0.01 * seed
            write_run(root, f"{norm}_{lr}_{seed}", norm=norm, bs=4, seed=seed, config={"lr": lr},
                      val_acc=v + 0.001 * seed, test_acc=test[norm, lr, seed])
    return test


def test_select_lr_picks_on_validation_and_reports_test(tmp_path):
    """Reference: the hand-made grid: bn's best mean val_acc is at lr 0.003, gn's at 0.01 (the edge of
    the grid: flagged); each cell's test accuracy is the mean over the seeds at that lr alone."""
    test = lr_sweep(tmp_path)
    r = normbench_cli("summarize", str(tmp_path), "--no-plots", "--select", "lr", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = _csv(tmp_path / "summary.csv")
    assert set(rows) == {("mlp", "bn", "test_acc", "4"), ("mlp", "gn", "test_acc", "4")}  # lr not in the labels
    for norm, lr in (("bn", 0.003), ("gn", 0.01)):
        cell = rows["mlp", norm, "test_acc", "4"]
        assert int(cell["n"]) == 3
        assert float(cell["mean"]) == pytest.approx(statistics.fmean(test[norm, lr, s] for s in range(3)), rel=1e-12)
    selected = {s["norm"]: s["chosen"] for s in json.loads((tmp_path / "summary.json").read_text())["selected"]
                if s["metric"] == "test_acc"}
    assert selected == {"bn": "lr=0.003", "gn": "lr=0.01 ⚑"}
    assert "lr=0.01 ⚑" in r.stdout and "edge of the grid" in r.stdout


def test_select_lr_is_nested_leave_one_seed_out(tmp_path):
    """Reference: the grid worked by hand. Validation accuracy at lr 0.001: seeds 0-2 give 0.9, 0.5, 0.5
    (mean 0.633), at 0.003: 0.6 each: pooled, 0.001 wins. Leaving each seed out: seed 0 sees 0.5 vs 0.6 and
    reports its 0.003 run; seeds 1 and 2 see 0.7 vs 0.6 and report their 0.001 runs."""
    val = {0.001: [0.9, 0.5, 0.5], 0.003: [0.6, 0.6, 0.6]}
    for lr, vals in val.items():
        for seed, v in enumerate(vals):
            write_run(tmp_path, f"bn_{lr}_{seed}", seed=seed, config={"lr": lr}, val_acc=v,
                      test_acc=100 * lr + seed / 100, overrides=["norm=bn", f"lr={lr}", f"seed={seed}"])
    s = compute(tmp_path, select="lr")
    cell = s.tables[0].cells["bn", "8"]
    assert dict(zip(cell.seeds, cell.values)) == {0: pytest.approx(0.3), 1: pytest.approx(0.11),
                                                  2: pytest.approx(0.12)}
    assert s.tables[0].chosen["bn", "8"] == "lr=0.001 (2) 0.003 (1) ⚑"
    # both edges were chosen: the commands train the next grid value on each side, with the cell's command line
    assert sorted(s.extensions) == sorted(
        f"normbench train norm=bn seed=0 pack.lrs=null lr={v} hydra.run.dir={tmp_path}/lr_extension/fashion_mnist_mlp_bn_8_{v}"
        for v in ("0.000333", "0.009"))


def test_without_select_lrs_are_separate_rows(tmp_path):
    """Reference: the same grid without --select: every (norm, lr) is its own row, labelled by its lr
    (the default lr 0.001 unlabelled)."""
    lr_sweep(tmp_path)
    files, _ = _summarize(tmp_path, plots=False)
    labels = {norm for (_, norm, _, _) in _csv(files["csv"])}
    assert labels == {"bn", "bn lr=0.003", "bn lr=0.01", "gn", "gn lr=0.003", "gn lr=0.01"}


def test_select_needs_a_swept_key(tmp_path):
    """Reference: normbench's one-line user errors: --select lr on runs at one lr says how to fix it."""
    sleep_sweep(tmp_path)
    r = normbench_cli("summarize", str(tmp_path), "--no-plots", "--select", "lr", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "do not vary lr" in r.stderr


@pytest.mark.parametrize("split, computations", [("per_seed", 2), ("fixed", 1)])
def test_costs_count_each_seed_group_of_a_pack(tmp_path, split, computations):
    """Reference: a pack recorded before members with their own data trained together (no `computations` in
    its record): 2 lrs x 2 seeds trained as one computation with one shared split (data.split=fixed), as one
    per seed with data.split=per_seed; each member records its computation's seconds, so the study's
    seconds are those of each computation once."""
    from normbench.summary.discover import costs, find_runs

    seconds = {0: 10.0, 1: 30.0}  # each seed group's wall time
    for lr in (0.1, 0.2):
        for seed in (0, 1):
            wall = seconds[seed] if split == "per_seed" else 40.0
            write_run(tmp_path, f"lr={lr},seed={seed}", seed=seed, config={"data.split": split, "lr": lr},
                      test_acc=0.8, wall_s=wall, train_s=wall / 2, eval_s=wall / 4,
                      packed={"dir": str(tmp_path), "members": 4, "mode": "packed", "name": f"lr={lr},seed={seed}"})
    (study,) = costs(find_runs(tmp_path)).values()
    assert study["runs"] == 4 and study["computations"] == computations
    assert study["wall_s"] == 40.0 and study["train_s"] == 20.0 and study["other_s"] == 10.0


@pytest.mark.parametrize("split", ["fixed", "per_seed"])
def test_costs_count_a_pack_that_records_one_computation_once(tmp_path, split):
    """Reference: runner.run records `computations` (pack.plan: 1 when packed, members on their own data
    included): 2 lrs x 2 seeds sharing one 40 s computation count once, whatever the split."""
    from normbench.summary.discover import costs, find_runs

    for lr in (0.1, 0.2):
        for seed in (0, 1):
            write_run(tmp_path, f"lr={lr},seed={seed}", seed=seed, config={"data.split": split, "lr": lr},
                      test_acc=0.8, wall_s=40.0, train_s=20.0, eval_s=10.0,
                      packed={"dir": str(tmp_path), "members": 4, "mode": "packed", "computations": 1,
                              "name": f"lr={lr},seed={seed}"})
    (study,) = costs(find_runs(tmp_path)).values()
    assert study["runs"] == 4 and study["computations"] == 1 and study["wall_s"] == 40.0


def test_costs_floor_a_resumed_runs_wall_at_its_training_and_evaluation(tmp_path):
    """A run resumed before wall_s counted its earlier processes records its last one's wall only (here 10 s
    against 30 s of training and 5 of evaluation): its computation counts at least 35 s, so `other` is
    not negative. A run whose wall covers them keeps its own."""
    from normbench.summary.discover import costs, find_runs

    write_run(tmp_path, "resumed", seed=0, test_acc=0.8, wall_s=10.0, train_s=30.0, eval_s=5.0, resumed_at_step=[7])
    write_run(tmp_path, "whole", seed=1, test_acc=0.8, wall_s=50.0, train_s=30.0, eval_s=5.0)
    (study,) = costs(find_runs(tmp_path)).values()
    assert study["wall_s"] == 85.0 and study["train_s"] == 60.0 and study["other_s"] == 15.0


def test_summary_modules_stay_small_and_the_docs_list_them():
    """Reference: the project's rule (no module over ~400 lines) and its two layout trees, docs/design.md's
    "How a run flows" and README.md's "Where things live": each names every module of normbench/summary/
    and summary/show/; design.md says the model and norm groups are generated into Hydra's ConfigStore and
    lists seq_norm/ and protocol.yaml; summarize.py's docstring names the modules as they are called."""
    import normbench.summary.summarize as summarize_module

    package = REPO / "normbench" / "summary"
    modules = sorted(p for p in package.rglob("*.py") if p.name != "__init__.py")
    assert {p.name for p in modules} >= {"protocol.py", "claims.py", "report.py"}
    for path in modules:
        lines = len(path.read_text().splitlines())
        assert lines <= 400, f"{path.relative_to(REPO)} has {lines} lines"
    design = (REPO / "docs" / "design.md").read_text().split("## How a run flows")[1].split("\n## ")[0]
    readme = (REPO / "README.md").read_text().split("## Where things live")[1].split("\n## ")[0]
    for tree in (design, readme):
        summary = tree.split("summary/")[1].split("bench/")[0]
        for path in modules:
            assert path.name in summary, f"{path.name} is not in the tree:\n{summary}"
    configs = design.split("configs/")[1].split("norms/")[0]  # the configs entry of the tree
    assert "ConfigStore" in configs and "seq_norm" in configs and "protocol.yaml" in configs
    assert "yaml groups (model, norm" not in configs
    assert "discover.py" in summarize_module.__doc__ and "runs.py" not in summarize_module.__doc__
