"""CIFAR-10: tiny files in the real `cifar-10-batches-py` format, read by torchvision's own CIFAR10 code;
augmentation in training (resume included); every model on 3x32x32; the CLI end to end; the error when
the files are missing.

torchvision checks each file's MD5 against the official batches, which tiny files cannot match; as
torchvision's own tests do (test/datasets_utils.py, DatasetTestCase._patch_checks), the tests that read
tiny files patch `check_integrity` in `torchvision.datasets.cifar` to return True.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from conftest import CHILD_ENV, normbench_cli
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from normbench import data, models, norms
from normbench.cli import store_configs
from normbench.config import Config, DataConfig, ModelConfig, NormConfig
from normbench.data import cifar10
from normbench.errors import UserError
from normbench.runner import run
from normbench.train.tracking import NullTracker

PER_BATCH, N_TEST = 40, 60  # 200 training images over data_batch_1..5, 60 test images
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PATCH_MD5 = "torchvision.datasets.cifar.check_integrity"


def tiny_cifar(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """Learnable colour images (N, 3, 32, 32): class k lights up rows 3k..3k+2 of channel k % 3."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 80, (n, 3, 32, 32))
    for i, k in enumerate(labels):
        images[i, k % 3, 3 * k: 3 * k + 3] += 170
    return images.astype(np.uint8), [int(k) for k in labels]


def write_batch(path: Path, images: np.ndarray, labels: list[int], name: str) -> None:
    """One batch file as https://www.cs.toronto.edu/~kriz/cifar.html describes it: a pickled dict whose
    `data` is uint8 (N, 3072), each row the 1024 red values, then green, then blue, each channel row-major.
    The real files are Python 2 pickles whose keys torchvision's `pickle.load(encoding="latin1")` returns
    as str (the page's b'data' comes from its own snippet's encoding="bytes"), so the keys here are str."""
    entry = {"batch_label": name, "labels": labels, "data": images.reshape(len(images), 3072),
             "filenames": [f"{name}_{i}.png" for i in range(len(images))]}
    path.write_bytes(pickle.dumps(entry, protocol=2))


def write_tiny_cifar10(root: Path) -> dict[str, np.ndarray]:
    """data.root/cifar-10-batches-py with data_batch_1..5, test_batch and batches.meta; returns what was written."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i in range(1, 6):
        x, y = tiny_cifar(PER_BATCH, seed=i)
        write_batch(folder / f"data_batch_{i}", x, y, f"training batch {i} of 5")
        xs.append(x), ys.extend(y)
    test_x, test_y = tiny_cifar(N_TEST, seed=99)
    write_batch(folder / "test_batch", test_x, test_y, "testing batch 1 of 1")
    meta = {"num_cases_per_batch": PER_BATCH, "label_names": LABEL_NAMES, "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return {"train_x": np.concatenate(xs), "train_y": np.array(ys), "test_x": test_x, "test_y": np.array(test_y)}


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    write_tiny_cifar10(root)
    return root


@pytest.fixture
def md5_patched():
    with mock.patch(PATCH_MD5, return_value=True):
        yield


def cfg_for(root: Path, **kw) -> DataConfig:
    return DataConfig(name="cifar10", root=str(root), val_size=50, download=False, **kw)


# --- loading ------------------------------------------------------------------------------------------

def test_torchvision_reads_the_files_in_their_layout(tmp_path, md5_patched):
    """Reference: the CIFAR-10 page's format (row = 1024 R, 1024 G, 1024 B, row-major; batches 1..5 in
    order) and the arrays written; read by torchvision.datasets.CIFAR10 itself."""
    written = write_tiny_cifar10(tmp_path)
    train_x, train_y, test_x, test_y = cifar10.load_cifar10(cfg_for(tmp_path))
    assert train_x.shape == (5 * PER_BATCH, 3, 32, 32) and train_x.dtype == torch.uint8
    assert test_x.shape == (N_TEST, 3, 32, 32)
    assert torch.equal(train_x, torch.from_numpy(written["train_x"]))
    assert torch.equal(test_x, torch.from_numpy(written["test_x"]))
    assert train_y.tolist() == written["train_y"].tolist() and test_y.tolist() == written["test_y"].tolist()
    # The layout, spelled out on one raw row of data_batch_2 (its first image is training image 40).
    entry = pickle.loads((tmp_path / "cifar-10-batches-py" / "data_batch_2").read_bytes(), encoding="latin1")
    row, img = torch.from_numpy(entry["data"][0]), train_x[PER_BATCH]
    assert torch.equal(img[0, 0], row[:32]) and torch.equal(img[0, 1], row[32:64])  # red, rows 0 and 1
    assert torch.equal(img[1].flatten(), row[1024:2048]) and torch.equal(img[2].flatten(), row[2048:])
    assert img[2, 31, 31] == row[3071]


def test_torchvision_md5_check_is_live(cifar_root):
    """Reference: torchvision's MD5 list for the official batches; unpatched, tiny files are refused."""
    with pytest.raises(UserError, match="fail their MD5 check: data_batch_1, .*test_batch, batches.meta"):
        cifar10.load_cifar10(cfg_for(cifar_root))


def test_splits_normalize_per_channel_with_train_statistics(cifar_root, md5_patched):
    """Reference: per-channel mean/std of the training split alone, computed here from the raw uint8."""
    s = data.load(cfg_for(cifar_root), torch.device("cpu"), seed=0)
    assert s.shape == (3, 32, 32) and s.num_classes == 10 and s.name == "cifar10"
    assert len(s.train_x) == 150 and len(s.val_x) == 50 and len(s.test_x) == N_TEST
    assert s.train_x.mean(dim=(0, 2, 3)).abs().max() < 1e-4
    assert (s.train_x.std(dim=(0, 2, 3)) - 1).abs().max() < 1e-3
    raw_x, raw_y, raw_test, _ = cifar10.load_cifar10(cfg_for(cifar_root))
    perm = torch.randperm(200, generator=torch.Generator().manual_seed(0))
    train = raw_x[perm[50:]].double() / 255
    mean, std = train.mean(dim=(0, 2, 3), keepdim=True), train.std(dim=(0, 2, 3), keepdim=True)
    assert torch.allclose(s.val_x.double(), (raw_x[perm[:50]].double() / 255 - mean) / std, atol=1e-5)
    assert torch.allclose(s.test_x.double(), (raw_test.double() / 255 - mean) / std, atol=1e-5)
    assert torch.equal(s.val_y, raw_y[perm[:50]].long())


def test_missing_files_name_where_they_go(tmp_path):
    """Reference: the brief's contract, one UserError naming the folder, the URL and data.download."""
    with pytest.raises(UserError) as e:
        data.load(cfg_for(tmp_path), torch.device("cpu"))
    msg = str(e.value)
    assert str(tmp_path / "cifar-10-batches-py") in msg and "data.download=false" in msg
    assert cifar10.URL in msg and "data.download=true" in msg and "/data_batch_1 exists" in msg


def test_partly_missing_files_are_listed(tmp_path):
    write_tiny_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(UserError, match=r"which lacks data_batch_3 \(data.download=false\)"):
        cifar10.load_cifar10(cfg_for(tmp_path))


def test_official_archive_in_root_is_extracted_offline(tmp_path, md5_patched):
    """Reference: torchvision's extract_archive; the archive's MD5 check is patched as torchvision's tests do."""
    src = tmp_path / "src"
    written = write_tiny_cifar10(src)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(root / cifar10.ARCHIVE, "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    with mock.patch("torchvision.datasets.utils.check_integrity", return_value=True):
        train_x, *_ = cifar10.load_cifar10(cfg_for(root))
    assert torch.equal(train_x, torch.from_numpy(written["train_x"]))


# --- augmentation in training (the function itself: test_augment.py) ----------------------------------

class StopAt(NullTracker):
    """Interrupts training at a given step, as a crash or Ctrl-C would."""

    def __init__(self, step):
        self.at = step

    def step(self, step, metrics):
        if step >= self.at:
            raise KeyboardInterrupt


def test_resume_with_augmentation_matches_an_unbroken_run(cifar_root, tmp_path, md5_patched):
    """Reference: the unbroken run; the draws come from the global RNG that the checkpoint saves."""
    torch.set_num_threads(1)
    cfg = Config(model=ModelConfig(name="cnn", channels=[4, 8], hidden=16), norm=NormConfig(name="bn"),
                 data=cfg_for(cifar_root, augment=True), batch_size=30, epochs=3, log_every=1,
                 progress=False, tensorboard=False, device="cpu")
    unbroken = run(cfg, tmp_path / "a", tracker=NullTracker())
    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path / "b", tracker=StopAt(7))  # in epoch 2 of 3 (5 steps per epoch)
    cfg.resume = True
    resumed = run(cfg, tmp_path / "b", tracker=NullTracker())
    def curve(res):
        return [(h["step"], h["loss/val"], h["acc/val"]) for h in res["history"]]  # not the timings

    assert curve(resumed) == curve(unbroken) and resumed["test_acc"] == unbroken["test_acc"]
    cfg.resume, cfg.data.augment = False, False
    plain = run(cfg, tmp_path / "c", tracker=NullTracker())
    assert curve(plain) != curve(unbroken)  # augmentation did change training


# --- models on 3x32x32 --------------------------------------------------------------------------------

# model -> (attribute path to the first layer that sees the data, the size it must read)
FIRST_LAYER = {"mlp": (lambda m: m.net[1].in_features, 3 * 32 * 32),
               "cnn": (lambda m: m.net[-4].in_features, 64 * 8 * 8),  # 2 stages pool 32 -> 8; classifier
               "resnet": (lambda m: m.stem[0].in_channels, 3),  # the stem's conv reads the 3 colour channels
               "rnn": (lambda m: m.layers[0].input_size, 3 * 32),  # 32 rows, 3 x 32 features per step
               "transformer": (lambda m: m.embed.in_features, 3 * 32)}  # a token per row, as the RNN's steps


@pytest.mark.parametrize("model", models.names())
def test_default_models_are_sized_for_3x32x32(model):
    """Reference: flattened 3*32*32 (MLP), 64 channels at 8x8 into the classifier (CNN), 3 channels into the
    ResNet's stem (its global pooling takes any size), 3*32 per step (RNN) and per token (Transformer)."""
    net = models.create(ModelConfig(name=model), norms.factory("bn"), (3, 32, 32), 10)
    size, expected = FIRST_LAYER[model]
    assert size(net) == expected
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("norm", norms.names())
@pytest.mark.parametrize("model", models.names())
def test_every_model_and_norm_gives_logits_and_gradients_on_colour(model, norm):
    """Reference: (N, 10) logits and a finite gradient on every parameter, for 3-channel 32x32 input."""
    small = {"mlp": ModelConfig(name="mlp", hidden=16), "cnn": ModelConfig(name="cnn", channels=[8, 16], hidden=16),
             "resnet": ModelConfig(name="resnet", channels=[8, 8, 16], depth=1),
             "rnn": ModelConfig(name="rnn", hidden=16), "transformer": ModelConfig(name="transformer", hidden=16)}[model]
    if {"mlp": "flat", "cnn": "image", "resnet": "image", "rnn": "seq", "transformer": "seq"}[model] \
            not in norms.get(norm).layouts:
        pytest.skip(f"{norm} is not defined on this model's layout (test_models checks the refusal)")
    if model == "transformer" and norms.get(norm).reparameterizes:
        pytest.skip(f"{norm} reparameterizes layers the transformer does not build through it (test_models)")
    net = models.create(small, norms.factory(norm), (3, 32, 32), 10)
    net(torch.randn(4, 3, 32, 32)).logsumexp(1).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


# --- the command --------------------------------------------------------------------------------------

# `normbench` with torchvision's MD5 check patched, as its tests do; a subprocess cannot see a mock.patch.
PATCHED_CLI = ("import sys; from unittest import mock; from normbench.cli import main; "
               f"mock.patch({PATCH_MD5!r}, return_value=True).start(); sys.exit(main(sys.argv[1:]))")


def patched_cli(*args: str, cwd: Path):
    env = dict(CHILD_ENV)
    return subprocess.run([sys.executable, "-c", PATCHED_CLI, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_data_cifar10_composes_with_typed_augment_keys():
    """Reference: the typed schema; data=cifar10 and its augment keys compose, a wrong type fails."""
    store_configs()
    with initialize_config_module("normbench.configs", version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=["data=cifar10", "data.augment=true"]))
        assert cfg.data.name == "cifar10" and cfg.data.augment is True and cfg.data.crop_padding == 4
        with pytest.raises(Exception, match="crop_padding"):
            compose("config", overrides=["data=cifar10", "data.crop_padding=wide"])


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
@pytest.mark.parametrize("model,extra", [("mlp", []), ("cnn", ["data.augment=true"]), ("rnn", [])])
def test_cli_trains_on_cifar10(model, extra, cifar_root, tmp_path):
    """Reference: docs/design.md's results.json contract, for data=cifar10 with each model."""
    run_dir = tmp_path / "run"
    r = patched_cli("train", "data=cifar10", f"model={model}", f"data.root={cifar_root}", "data.val_size=50",
                    "data.download=false", "max_steps=6", "batch_size=16", "log_every=3", "threads=1",
                    "progress=false", f"hydra.run.dir={run_dir}", *extra, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads((run_dir / "results.json").read_text())
    assert res["status"] == "completed" and res["steps"] == 6 and 0 <= res["test_acc"] <= 1
    assert res["config"]["data"]["name"] == "cifar10" and res["config"]["model"]["name"] == model
    assert res["config"]["data"]["augment"] == bool(extra)


def test_cli_missing_files_is_one_clear_line(tmp_path):
    """Reference: the CLI's UserError contract: exit status 2 and one line naming where the files go."""
    r = normbench_cli("train", "data=cifar10", f"data.root={tmp_path}", "data.download=false", "threads=1",
                      f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "cifar-10-batches-py") in lines[0], r.stderr
