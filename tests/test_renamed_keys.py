"""Renamed config keys and the generated groups, as the CLI's one-line errors (normbench/cli_errors.py) and
summarize's commands (normbench/summary/select.py) say them: `rnn_norm` became `seq_norm`, and the `norm`
group is generated into Hydra's ConfigStore (normbench/configs/__init__.py), not a folder of yaml files."""

import signal
import sys

import pytest
from test_summarize import write_run

from normbench import cli, cli_errors
from normbench.summary import select
from normbench.summary.discover import find_runs
from normbench.summary.labels import label_runs


def _train_error(overrides, tmp_path, capsys, monkeypatch) -> tuple[int, str]:
    """`normbench train OVERRIDES` in this process (cli.main, as the command calls it): exit status, stderr."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # the CLI installs its own
    try:
        code = cli.main(["train", *overrides, f"hydra.run.dir={tmp_path / 'run'}"])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert not (tmp_path / "run").exists(), "composition failed: no run may start"
    return code, capsys.readouterr().err


@pytest.mark.parametrize("override", ["rnn_norm=ln", "+rnn_norm=bn_masked"])
def test_rnn_norm_says_it_was_renamed(override, tmp_path, capsys, monkeypatch):
    """Reference: docs/reliability.md's one-line errors (exit 2) and the rename rnn_norm -> seq_norm: the
    message says so and gives the same option under the new name, not difflib's "did you mean norm?"."""
    code, err = _train_error(["experiment=variable_length", override], tmp_path, capsys, monkeypatch)
    value = override.split("=", 1)[1]
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"rnn_norm was renamed seq_norm; use seq_norm={value}" in err and "did you mean norm" not in err


def test_the_generated_norm_group_is_a_group(monkeypatch):
    """Reference: normbench/configs/__init__.py's norm_defaults(), which generates the `norm` group: groups()
    lists `norm` beside the folders, and its options are the generated ones, read when asked (a stand-in
    norm_defaults shows the lookup is made then, not when cli_errors is imported)."""
    from normbench import configs

    assert "norm" in cli_errors.groups() and "model" in cli_errors.groups()
    assert cli_errors.group_options("norm") == sorted(configs.norm_defaults())
    assert {"bn", "gn", "ln"} <= set(cli_errors.group_options("norm"))
    monkeypatch.setattr(configs, "norm_defaults", lambda: {"zz": {}, "aa": {}})
    assert cli_errors.group_options("norm") == ["aa", "zz"]


def test_commands_for_old_runs_use_seq_norm(tmp_path):
    """Reference: the rename rnn_norm -> seq_norm: a variable-length run recorded before it (its overrides say
    rnn_norm=bn_naive) gets a "grids to widen" command that says seq_norm=bn_naive, which composes today;
    every other override is kept as recorded."""
    old = ["experiment=variable_length", "rnn_norm=bn_naive", "seed=0"]
    for lr, val in ((0.01, 0.6), (0.03, 0.7)):
        write_run(tmp_path, f"bn_{lr}", norm="bn", seed=0, config={"lr": lr}, val_acc=val, test_acc=val,
                  overrides=[*old, f"lr={lr}"])
    runs = find_runs(tmp_path)
    labels = label_runs(runs, pooled=frozenset({"lr"}))
    (command,) = select.extensions(select.choose(runs, "lr", labels), runs, labels, "lr", tmp_path)
    assert "rnn_norm" not in command and " seq_norm=bn_naive " in command
    assert command.startswith("normbench train experiment=variable_length seq_norm=bn_naive seed=0 pack.lrs=null "
                              "lr=0.09 hydra.run.dir=")
