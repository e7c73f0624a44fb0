"""Bad input, divergence, sweeps that lose nothing, atomic files, determinism (docs/reliability.md).

Every mistake a user can make on the command line must end in one line on stderr saying what is
wrong and how to fix it, exit status 2, and no traceback; `debug=true` brings the traceback back.
"""

import gzip
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import CHILD_ENV, normbench_cli, write_tiny_fashion_mnist

from normbench import cli, results
from normbench.config import ModelConfig, NormConfig
from normbench.errors import UserError
from normbench import runner
from normbench.train import guards
from normbench.train.tracking import NullTracker


def quiet(tiny_root, run_dir, **extra) -> list[str]:
    """CLI overrides for a short, quiet CPU run on the tiny dataset; `extra` replaces or adds keys."""
    base = {"data.root": tiny_root, "data.val_size": 100, "data.download": "false", "threads": 1,
            "progress": "false", "tensorboard": "false", "epochs": 1, "batch_size": 16, "log_every": 5,
            "device": "cpu", "hydra.run.dir": run_dir}
    return [f"{k}={v}" for k, v in {**base, **extra}.items()]


def assert_one_line_error(r, *needles: str, code: int = 2) -> str:
    """Reference: docs/design.md's contract for user mistakes: exit 2, one stderr line, no traceback."""
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert len(err.splitlines()) == 1, err
    assert err.startswith("normbench: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# (overrides, words the message must contain). Hydra finds these at composition, before any task runs:
# tested in process (cli.main, as the command calls it), since only Hydra and the explainer take part.
COMPOSITION_ERRORS = {
    "misspelled key": ({"batchsize": 8}, ["unknown key 'batchsize'", "did you mean batch_size?"]),
    "misspelled nested key": ({"model.hiden": 3}, ["unknown key 'model.hiden'", "did you mean model.hidden?",
                                                   "valid keys of model: name, hidden"]),
    "added unknown key": ({"+batchsize": 8}, ["unknown key 'batchsize'"]),
    "unknown norm": ({"norm": "foo"}, ["unknown norm 'foo'", "choose one of:", "bn", "gn", "ln"]),
    "unknown model": ({"model": "xyz"}, ["unknown model 'xyz'", "choose one of: cnn, mlp, resnet, rnn, transformer"]),
    "unknown dataset": ({"data": "mnist"}, ["unknown dataset 'mnist'", "fashion_mnist"]),
    "unknown experiment": ({"experiment": "nope"}, ["unknown experiment 'nope'"]),
    "wrong type int": ({"batch_size": "abc"}, ["batch_size=abc: batch_size takes an integer"]),
    "wrong type float": ({"lr": "fast"}, ["lr=fast: lr takes a number"]),
    "wrong type list": ({"model.channels": "abc"}, ["model.channels takes a list of integers"]),
    "bad syntax": ({"batch_size": "[1"}, ["cannot parse the overrides"]),
    "empty group option": ({"norm": ""}, ["no norm given; choose one of:"]),
    "wrong type bool": ({"resume": "maybe"}, ["resume=maybe: resume takes true or false"]),
    "wrong type optional": ({"norm.groups": "x"}, ["norm.groups takes an integer or null"]),
    "unknown optimizer": ({"optimizer": "adamw"}, ["unknown optimizer 'adamw'", "use one of: adam, sgd"]),
    "unknown schedule": ({"schedule": "linear"}, ["unknown schedule 'linear'"]),
    "unknown RNN cell": ({"model": "rnn", "model.cell": "transformer"}, ["unknown model.cell 'transformer'", "use one of: rnn, lstm, gru"]),
    "model.name instead of model": ({"model.name": "cnn"}, ["model.name=cnn renames the model", "model=cnn"]),
}

# Found by the run itself (the runner's checks, the data, the model): a process each, as a user runs it.
BAD_INPUTS = {
    # found by the runner, before any data is read
    "batch_size < 1": ({"batch_size": 0}, ["batch_size must be >= 1 (got 0)"]),
    "lr = 0": ({"lr": 0}, ["lr must be > 0 (got 0.0)"]),
    "lr < 0": ({"lr": -0.1}, ["lr must be > 0 (got -0.1)"]),
    "epochs < 1, no max_steps": ({"epochs": 0}, ["epochs must be >= 1 (got 0) unless max_steps is set"]),
    "max_steps < 1": ({"max_steps": 0}, ["max_steps must be >= 1"]),
    "unwritable run dir": ({"hydra.run.dir": "/proc/normbench"}, ["cannot write /proc/normbench",
                                                                 "writable directory"]),
    # found once the data and the model are there, still before the first step
    "GN groups": ({"norm": "gn", "norm.groups": 5, "model.hidden": 32},
                  ["groups=5 does not divide 32 channels", "1, 2, 4, 8, 16, 32"]),
    "BN at batch size 1": ({"batch_size": 1}, ["at batch_size=1 the mlp's linear layers give it one value per "
                                               "channel", "use batch_size=2 or more", "ln, gn"]),
    "log_every < 1": ({"log_every": 0}, ["log_every must be >= 1"]),
    "validations < 1": ({"validations": 0}, ["validations must be >= 1", "validations=null"]),
    "unknown device": ({"device": "tpu"}, ["unknown device 'tpu'"]),
    "norm undefined on layout": ({"norm": "in"}, ["in is not defined on flat features", "use ln or bn"]),
    "too many conv stages": ({"model": "cnn", "model.channels": "[8,8,8,8,8,8]"}, ["pool a 28x28 image to nothing"]),
    "val_size too large": ({"data.val_size": 100000}, ["data.val_size=100000 must be in [0, 600)"]),
    "subset < 1": ({"data.subset": 0}, ["data.subset=0 must be >= 1"]),
    "batch larger than data": ({"batch_size": 1000}, ["batch_size=1000 is larger than the 500 training samples"]),
}


class _Result:
    def __init__(self, returncode: int, stderr: str):
        self.returncode, self.stderr = returncode, stderr


@pytest.mark.parametrize("case", COMPOSITION_ERRORS, ids=list(COMPOSITION_ERRORS))
def test_a_composition_error_is_one_line(case, tiny_root, tmp_path, capsys, monkeypatch):
    """Reference: docs/reliability.md, 'Validation before any work' (one line, exit 2, no traceback), for
    what Hydra refuses while composing: `normbench train` in this process (cli.main), its stderr read."""
    extra, needles = COMPOSITION_ERRORS[case]
    run_dir = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # the CLI installs its own
    try:
        code = cli.main(["train", *quiet(tiny_root, run_dir, **extra)])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert_one_line_error(_Result(code, capsys.readouterr().err), *needles)
    assert not run_dir.exists(), "composition failed: no run may start"


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_one_line(case, tiny_root, tmp_path):
    """Reference: docs/reliability.md, 'Validation before any work' (one line, exit 2, no traceback)."""
    extra, needles = BAD_INPUTS[case]
    run_dir = tmp_path / "run"
    r = normbench_cli("train", *quiet(tiny_root, run_dir, **extra), cwd=tmp_path)
    assert_one_line_error(r, *needles)
    assert not (run_dir / guards.CHECKPOINT).exists(), "no training step may run"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(tiny_root, tmp_path):
    r = normbench_cli("train", *quiet(tiny_root, tmp_path / "run", device="cuda"), cwd=tmp_path)
    assert_one_line_error(r, "device=cuda but no CUDA device is available here", "use device=auto or cpu")


def test_run_dir_under_a_file(tiny_root, tmp_path):
    """A run directory that cannot be created (its parent is a file) fails before Hydra writes anything."""
    (tmp_path / "afile").write_text("x")
    r = normbench_cli("train", *quiet(tiny_root, tmp_path / "afile" / "run"), cwd=tmp_path)
    assert_one_line_error(r, "cannot write", "afile", "writable directory")


def test_unwritable_sweep_dir(tiny_root, tmp_path):
    args = [a for a in quiet(tiny_root, "x") if not a.startswith("hydra.")]
    r = normbench_cli("train", "-m", "norm=bn,ln", *args, "hydra.sweep.dir=/proc/normbench", cwd=tmp_path)
    assert_one_line_error(r, "cannot write /proc/normbench", "hydra.sweep.dir")


# Root writes into a 0o555 directory through CAP_DAC_OVERRIDE, and CI runs as root. This prelude gives that
# capability up, then execs Python with the arguments that follow it: dropped from the bounding set (prctl
# PR_CAPBSET_DROP) and from the effective, permitted and inheritable sets (capset), so the exec cannot get it
# back and a directory's mode binds root as it binds any user. A prelude that cannot drop it exits 3.
DROP_DAC_OVERRIDE = """
import ctypes, os, sys
libc, bit = ctypes.CDLL(None, use_errno=True), 1  # CAP_DAC_OVERRIDE = 1
hdr, caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # v3: {eff, perm, inh} x 2 words
if libc.prctl(24, bit, 0, 0, 0) or libc.capget(hdr, caps):  # 24 = PR_CAPBSET_DROP
    print("cannot drop CAP_DAC_OVERRIDE:", os.strerror(ctypes.get_errno()), file=sys.stderr); sys.exit(3)
for i in range(3):
    caps[i] &= ~(1 << bit)
if libc.capset(hdr, caps):
    print("cannot drop CAP_DAC_OVERRIDE:", os.strerror(ctypes.get_errno()), file=sys.stderr); sys.exit(3)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def _python_bound_by_modes(*args: str, cwd: Path):
    """`python ARGS` in a subprocess that file modes bind: as root, without CAP_DAC_OVERRIDE."""
    import subprocess
    prelude = ["-c", DROP_DAC_OVERRIDE] if os.geteuid() == 0 else []
    return subprocess.run([sys.executable, *prelude, *args], cwd=cwd, env=dict(CHILD_ENV), capture_output=True,
                          text=True, timeout=300, check=False)


def test_read_only_run_dir(tiny_root, tmp_path):
    """A run directory inside an existing directory the user may not write (mode 0o555) fails with the OS's
    reason: the command in one line before Hydra writes anything (cli.py), and the library's own check
    (guards.check_writable, which runner.run calls first) with a UserError. As root (CI) both run without
    CAP_DAC_OVERRIDE, so the mode stops them too."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    r = _python_bound_by_modes("-m", "normbench", "train", *quiet(tiny_root, ro / "run"), cwd=tmp_path)
    assert_one_line_error(r, f"cannot write {ro / 'run'} (Permission denied)", "writable directory")
    assert not (ro / "run").exists()
    code = "import sys; from normbench.train import guards; guards.check_writable(sys.argv[1])"
    r = _python_bound_by_modes("-c", code, str(ro / "run"), cwd=tmp_path)
    assert r.returncode == 1 and f"UserError: cannot write the run directory {ro / 'run'} (Permission denied)" \
        in r.stderr, r.stderr
    assert not (ro / "run").exists()


def test_runner_refuses_unwritable_run_dir(tiny_cfg, tmp_path):
    """Library users get the same check: nothing is trained when results could not be saved."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="cannot write the run directory"):
        runner.run(tiny_cfg, tmp_path / "afile" / "run")


def test_dataset_missing(tmp_path):
    """Reference: docs/design.md's three remedies. The Debian copy is hidden by pointing the search at nothing."""
    code = ("import sys, pathlib; from normbench.data import fashion_mnist as f; "
            "f.DEBIAN_DIR = pathlib.Path('/nonexistent'); from normbench.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    import subprocess
    r = subprocess.run([sys.executable, "-c", code, "train", *quiet(tmp_path / "empty", tmp_path / "run")],
                       cwd=tmp_path, env=dict(CHILD_ENV), capture_output=True, text=True,
                       timeout=300)
    assert_one_line_error(r, "FashionMNIST not found", "apt-get install dataset-fashion-mnist",
                          "data.download=false")


def _damaged_copy(tiny_root: Path, tmp_path: Path, damage: str) -> Path:
    if damage == "corrupt gz":
        root = write_tiny_fashion_mnist(tmp_path / "gzdata", gz=True)
        f = root / "FashionMNIST/raw/train-images-idx3-ubyte.gz"
        blob = bytearray(f.read_bytes())
        start = blob.index(0, 10) + 1 if blob[3] & 0x08 else 10  # after the header's file name, if any
        blob[start] = 0xFF  # the first deflate block gets the reserved block type: zlib.error
        f.write_bytes(bytes(blob))
        return root
    root = tmp_path / "data"
    shutil.copytree(tiny_root, root)
    f = root / "FashionMNIST/raw/train-images-idx3-ubyte"
    blob = f.read_bytes()
    if damage == "truncated":
        f.write_bytes(blob[: len(blob) // 2])
    elif damage == "bad header":
        f.write_bytes(b"\x00\x00\x08\x01" + blob[4:])
    elif damage == "truncated gz":
        f.unlink()
        gz = f.with_suffix(".gz")
        gz.write_bytes(gzip.compress(blob)[:-100])
    return root


@pytest.mark.parametrize("damage,needle", [("truncated", "is truncated or padded"),
                                           ("bad header", "not a valid IDX file (wrong magic number)"),
                                           ("truncated gz", "the file is corrupt or truncated"),
                                           ("corrupt gz", "the file is corrupt or truncated")])
def test_damaged_dataset_file(damage, needle, tiny_root, tmp_path):
    """Reference: the IDX header/size checks of normbench.data.fashion_mnist, seen from the CLI."""
    root = _damaged_copy(tiny_root, tmp_path, damage)
    r = normbench_cli("train", *quiet(root, tmp_path / "run"), cwd=tmp_path)
    assert_one_line_error(r, "train-images-idx3-ubyte", needle)


def test_debug_shows_the_traceback(tiny_root, tmp_path):
    """debug=true (or NORMBENCH_DEBUG=1) keeps the one line and adds the traceback above it."""
    r = normbench_cli("train", *quiet(tiny_root, tmp_path / "a", lr=0, debug="true"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("normbench: error: lr must be > 0")
    r = normbench_cli("train", "batchsize=3", cwd=tmp_path, env={"NORMBENCH_DEBUG": "1"})
    assert r.returncode == 2 and "Traceback" in r.stderr and "ConfigCompositionException" in r.stderr


def test_sweep_with_an_unknown_value_runs_nothing(tiny_root, tmp_path):
    """Hydra composes every job of a sweep first: a typo in the 2nd value fails before the 1st runs."""
    sweep = tmp_path / "sweep"
    args = [a for a in quiet(tiny_root, "x") if not a.startswith("hydra.")]
    r = normbench_cli("train", "-m", "norm=bn,foo", *args, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert_one_line_error(r, "unknown norm 'foo'")
    assert not list(sweep.glob("*/results.json"))


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_sweep_goes_on_past_a_failed_and_a_diverged_run(tiny_root, tmp_path):
    """Reference: docs/reliability.md -- in a sweep, a failed run (BN at batch size 1) and a diverged one (SGD at
    lr=1e6 without a norm) each leave a results.json that says so, and the other runs complete."""
    sweep = tmp_path / "sweep"
    args = [a for a in quiet(tiny_root, "x") if not a.startswith(("hydra.", "batch_size"))]
    r = normbench_cli("train", "-m", "norm=bn,none", "batch_size=1,16", "optimizer=sgd", "lr=0.01,1e6",
                      *args, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr  # some runs failed: a user error in the sweep
    assert "Traceback" not in r.stderr
    got = {}
    for path in sweep.glob("*/results.json"):
        res = json.loads(path.read_text())
        c = res["config"]
        got[(c["norm"]["name"], c["batch_size"], c["lr"])] = res
    assert len(got) == 8, sorted(got)
    for (norm, bs, lr), res in got.items():
        if norm == "bn" and bs == 1:
            assert res["status"] == "failed" and "one value per channel" in res["error"]
        elif norm == "none" and lr == 1e6:
            assert res["status"] == "diverged" and res["diverged_step"] >= 1 and res["test_acc"] is None
        elif lr == 0.01:
            assert res["status"] == "completed" and 0 <= res["test_acc"] <= 1, res
    assert r.stderr.count("one value per channel") >= 2  # each failed run said once, plus the summary


def test_diverged_single_run_is_a_result(tiny_root, tmp_path):
    """Divergence is a result, not a crash: exit status 0, status diverged and the step in results.json."""
    run_dir = tmp_path / "run"
    r = normbench_cli("train", *quiet(tiny_root, run_dir, norm="none", optimizer="sgd", lr="1e6"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads((run_dir / "results.json").read_text())
    assert res["status"] == "diverged" and res["test_acc"] is None and "error" not in res
    assert f"diverged at step {res['diverged_step']}" in r.stderr


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path):
    """Reference: the previous contents. A write that dies halfway leaves the old file and no temporary."""
    path = tmp_path / "results.json"
    results.write_results(tmp_path, {"status": "completed", "config": {}, "test_acc": 0.5})
    before = path.read_bytes()

    def half_then_die(f):
        f.write(b'{"status": "comp')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        results.atomic_write_bytes(path, half_then_die)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write_bytes(tmp_path / "checkpoint.pt", half_then_die)
    assert not (tmp_path / "checkpoint.pt").exists()


def test_same_seed_same_metrics(tiny_cfg, tmp_path):
    """Reference: the first run. Two CPU runs with one seed and config agree exactly; another seed differs."""
    tiny_cfg.epochs, tiny_cfg.max_steps = 2, None
    a = runner.run(tiny_cfg, tmp_path / "a", tracker=NullTracker())
    b = runner.run(tiny_cfg, tmp_path / "b", tracker=NullTracker())
    tiny_cfg.seed = 1
    c = runner.run(tiny_cfg, tmp_path / "c", tracker=NullTracker())
    metrics = lambda r: ([{k: v for k, v in e.items() if k != "train_samples_per_s"} for e in r["history"]],
                         r["test_loss"], r["test_acc"])
    assert metrics(a) == metrics(b)
    assert metrics(a) != metrics(c)


@pytest.mark.parametrize("model,norm,batch_size,fails", [
    ("mlp", "bn", 1, True), ("mlp", "bn", 2, False), ("mlp", "ln", 1, False), ("cnn", "bn", 1, False),
    ("rnn", "bn", 1, False)])
def test_batch_statistics_rule(model, norm, batch_size, fails, tiny_cfg):
    """Reference: BN needs more than one value per channel: batch for linear layers, batch x H x W for
    convolutions, batch x T for a norm on RNN outputs: PyTorch's own F.batch_norm, given each norm layer's
    real input in training mode, raises on exactly the shapes the guard refuses (for a batch-dependent norm)."""
    from normbench import models, norms
    from normbench.norms.registry import LAYOUTS, TAG

    tiny_cfg.model, tiny_cfg.norm, tiny_cfg.batch_size = ModelConfig(name=model, hidden=8), NormConfig(name=norm), \
        batch_size
    m = models.create(tiny_cfg.model, norms.factory(norm), (1, 28, 28), 10)
    x = torch.randn(batch_size, 1, 28, 28)
    values, layouts = models.norm_values_per_channel(m, x)
    inputs = []
    hooks = [mod.register_forward_pre_hook(lambda mod, args: inputs.append((getattr(mod, TAG)[1], args[0])))
             for mod in m.modules() if hasattr(mod, TAG) and getattr(mod, TAG)[1] in LAYOUTS]
    with torch.no_grad():
        m.eval()(x)
    for h in hooks:
        h.remove()
    native_fails = False
    for layout, t in inputs:
        try:
            F.batch_norm(t.reshape(-1, t.shape[-1]) if layout == "seq" else t, None, None, training=True)
        except ValueError:
            native_fails = True
    assert fails == (native_fails and norms.get(norm).batch_dependent)
    if fails:
        with pytest.raises(UserError, match="one value per channel"):
            guards.check_batch_statistics(tiny_cfg, norms.factory(norm), values, layouts)
    else:
        guards.check_batch_statistics(tiny_cfg, norms.factory(norm), values, layouts)
