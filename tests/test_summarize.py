"""`normbench summarize` on hand-made results.json files: exact mean/std/n, labels, tables, the runs
listed apart, and every file it writes."""

import csv
import io
import json
import statistics
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from conftest import normbench_cli
from normbench.config import Config
from normbench.results import write_results
from normbench.summarize import summarize


def write_run(root: Path, name: str, status: str = "completed", **kw) -> Path:
    """A run directory as the runner leaves it: results.json (status, config, metrics) and .hydra/."""
    cfg = asdict(Config())
    cfg["model"]["name"] = kw.pop("model", "mlp")
    cfg["norm"]["name"] = kw.pop("norm", "bn")
    cfg["batch_size"] = kw.pop("bs", 8)
    cfg["seed"] = kw.pop("seed", 0)
    for key, value in kw.pop("config", {}).items():  # "norm.masked": False
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        node[leaf] = value
    run_dir = root / name
    (run_dir / ".hydra").mkdir(parents=True)
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
    """Reference: Python's statistics.fmean / statistics.stdev (n - 1) on the hand-written accuracies;
    the four runs that are not completed appear in the list of problems, with their reason."""
    root = tmp_path / "sweep"
    acc = small_batch_sweep(root)
    files, printed = _summarize(root)
    rows = _csv(files["csv"])
    bn2 = rows["mlp", "bn", "test_acc", "2"]
    assert int(bn2["n"]) == 3 and int(bn2["n_diverged"]) == 1
    assert float(bn2["mean"]) == statistics.fmean(acc["bn2"])
    assert float(bn2["std"]) == statistics.stdev(acc["bn2"])
    assert float(bn2["min"]) == 0.50 and float(bn2["max"]) == 0.72 and bn2["values_per_channel"] == "2"
    bn8 = rows["mlp", "bn", "test_acc", "8"]
    assert int(bn8["n"]) == 2 and float(bn8["std"]) == statistics.stdev(acc["bn8"])
    ln2 = rows["mlp", "ln", "test_acc", "2"]
    assert int(ln2["n"]) == 1 and ln2["std"] == ""  # one value: no standard deviation
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
    assert group["values"] == acc["bn2"]
    for name in problems:
        assert name in printed


def test_markdown_tables_mark_the_best_and_plots_are_written(tmp_path):
    """Reference: the hand-made accuracies, in percent, in a Markdown table with norms as rows and batch
    sizes as columns; the best of each column in bold; PNG files and a TensorBoard event file."""
    root = tmp_path / "sweep"
    small_batch_sweep(root)
    files, printed = _summarize(root)
    md = files["md"].read_text()
    assert "## small_batch · fashion_mnist · mlp · test accuracy (running statistics) by batch size" in md
    assert "| norm | 2 | 8 |" in md
    assert "| values/channel (BN) | 2 | 8 |" in md
    assert "| bn | 61.0 ± 11.0 †1 | **81.5 ± 2.1 (2)** |" in md  # n=2 differs from the table's usual 3
    assert "| ln | **75.0 (1)** | ✗1 |" in md
    assert "## Runs not in the tables" in md and "`ln8_failed` | failed" in md
    png = files["small_batch_fashion_mnist"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"![small_batch_fashion_mnist]({png.name})" in md
    assert list((root / "tensorboard").glob("events.out.tfevents.*"))
    assert "61.0 ± 11.0" in printed and "75.0 (1) *" in printed


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
