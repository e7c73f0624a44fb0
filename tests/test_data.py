"""FashionMNIST loading: the IDX format, the search order of docs/design.md, and clear errors."""


import numpy as np
import pytest
import torch
from conftest import requires_real_data, tiny_images, write_idx, write_tiny_fashion_mnist

from normbench import data
from normbench.config import DataConfig
from normbench.data import fashion_mnist
from normbench.errors import UserError


def test_idx_roundtrip_plain_and_gz(tmp_path):
    """Reference: the IDX layout (magic, big-endian dims, bytes), as torchvision reads it."""
    x, _ = tiny_images(7, 0)
    for gz in (False, True):
        p = tmp_path / ("a.gz" if gz else "a")
        write_idx(p, x, gz)
        got = fashion_mnist.read_idx(p, 2051, (28, 28))
        assert torch.equal(got, torch.from_numpy(x))


def test_load_splits_and_normalizes(tiny_root):
    s = data.load(DataConfig(root=str(tiny_root), val_size=100, download=False), torch.device("cpu"))
    assert s.train_x.shape == (500, 1, 28, 28) and s.val_x.shape == (100, 1, 28, 28)
    assert s.test_x.shape == (200, 1, 28, 28) and s.num_classes == 10
    assert abs(s.train_x.mean().item()) < 1e-4 and abs(s.train_x.std().item() - 1) < 1e-3


def test_load_each_keeps_only_its_configs_splits(tiny_root):
    """Reference: a pack holds its members' splits and no earlier run's. Per-seed splits of seeds 0-5 loaded
    one run at a time (an in-process sweep) leave one split cached, besides the decoded files; a pack of
    seeds 6 and 7 leaves two, the same objects its members got, and each member's own."""
    from dataclasses import replace

    from normbench.config import Config
    from normbench.data import splits as splits_module

    base = Config(data=DataConfig(root=str(tiny_root), val_size=100, download=False, split="per_seed"))
    for seed in range(6):
        data.load_each([replace(base, seed=seed)], torch.device("cpu"))
    assert sum(k[1] != "files" for k in splits_module._CACHE) == 1
    pack = data.load_each([replace(base, seed=6), replace(base, seed=7)], torch.device("cpu"))
    assert sum(k[1] != "files" for k in splits_module._CACHE) == 2
    assert not torch.equal(pack[0].val_x, pack[1].val_x)
    assert data.load_each([replace(base, seed=6)], torch.device("cpu"))[0] is pack[0]


def test_gzipped_files_in_root(tmp_path):
    root = write_tiny_fashion_mnist(tmp_path, gz=True)
    s = data.load(DataConfig(root=str(root), val_size=10, download=False), torch.device("cpu"))
    assert len(s.train_x) == 590


def test_missing_everywhere_names_the_remedies(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "nowhere")
    with pytest.raises(UserError) as e:
        data.load(DataConfig(root=str(tmp_path), download=False), torch.device("cpu"))
    msg = str(e.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "FashionMNIST/raw" in msg and "download" in msg


@pytest.mark.parametrize("damage", ["truncate", "magic", "shape"])
def test_corrupt_files_are_refused(tmp_path, damage):
    x, _ = tiny_images(5, 0)
    p = tmp_path / "f"
    write_idx(p, x)
    blob = bytearray(p.read_bytes())
    if damage == "truncate":
        blob = blob[:-10]
    elif damage == "magic":
        blob[3] = 1
    else:
        blob[8:12] = (27).to_bytes(4, "big")
    p.write_bytes(bytes(blob))
    with pytest.raises(UserError, match="corrupt|truncated|not a valid"):
        fashion_mnist.read_idx(p, 2051, (28, 28))


def test_checksum_of_full_size_file(tmp_path):
    """A file with the full 10000 labels but wrong contents fails the known MD5 of the real one."""
    p = tmp_path / "t10k-labels-idx1-ubyte"
    write_idx(p, np.zeros(10000, np.uint8))
    magic, shape, count, md5 = fashion_mnist.FILES["t10k-labels-idx1-ubyte"]
    with pytest.raises(UserError, match="checksum"):
        fashion_mnist.read_idx(p, magic, shape, md5, count)


@requires_real_data
def test_real_fashion_mnist_from_debian(tmp_path):
    """Reference: the real dataset's sizes and label balance (6000 per class in training)."""
    s = data.load(DataConfig(root=str(tmp_path), val_size=0, download=False), torch.device("cpu"))
    assert s.train_x.shape == (60000, 1, 28, 28) and s.test_x.shape == (10000, 1, 28, 28)
    assert torch.bincount(s.train_y).tolist() == [6000] * 10


def reference(cfg: DataConfig, seed: int) -> dict[str, torch.Tensor]:
    """The splits by their definition: validation = the first `val_size` of `torch.randperm(n)` from a
    generator seeded by `seed`, training = the next `subset`, normalized by the training images' mean/std."""
    train_x, train_y, _, _ = fashion_mnist.load_fashion_mnist(cfg)
    perm = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(seed))
    val_idx, train_idx = perm[:cfg.val_size], perm[cfg.val_size:][:cfg.subset]
    train = train_x[train_idx].to(torch.get_default_dtype()).div_(255)
    mean, std = train.mean(dim=(0, 2, 3), keepdim=True), train.std(dim=(0, 2, 3), keepdim=True)
    val = (train_x[val_idx].to(torch.get_default_dtype()).div_(255) - mean) / std
    return {"train_x": (train - mean) / std, "train_y": train_y[train_idx].long(),
            "val_x": val, "val_y": train_y[val_idx].long()}


def same(s: data.Splits, want: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(getattr(s, k), v) for k, v in want.items())


def test_fixed_split_is_seed_0s_for_every_run_and_per_seed_is_the_runs_own(tiny_root):
    """Reference: `reference` above, the permutation of a generator seeded by 0 (data.split=fixed, the
    default: every run, whatever its seed, as before the option existed) or by the run's seed (per_seed)."""
    cfg = DataConfig(root=str(tiny_root), val_size=100, subset=200, download=False)
    assert cfg.split == "fixed"
    cpu = torch.device("cpu")
    fixed0, fixed3 = data.load(cfg, cpu, seed=0), data.load(cfg, cpu, seed=3)
    assert fixed3 is fixed0  # one split, so one cache entry: the cache keys on the seed the split is drawn from
    assert same(fixed0, reference(cfg, 0))
    per_seed = DataConfig(root=str(tiny_root), val_size=100, subset=200, download=False, split="per_seed")
    s0, s1 = data.load(per_seed, cpu, seed=0), data.load(per_seed, cpu, seed=1)
    assert same(s0, reference(cfg, 0)) and same(s1, reference(cfg, 1))  # per_seed at seed 0 is the fixed split
    assert not torch.equal(s0.val_y, s1.val_y) and not torch.equal(s0.train_y, s1.train_y)
    assert data.load(per_seed, cpu, seed=1) is s1
    assert torch.equal(s0.test_y, s1.test_y)  # the test set is always the whole official one
    with pytest.raises(UserError, match="unknown data.split 'seeded'"):
        DataConfig(split="seeded")


def test_per_seed_runs_at_one_seed_share_their_split_across_norms(tiny_cfg, tmp_path, monkeypatch):
    """Reference: `reference` at the run's seed. What runner.run trains on with data.split=per_seed: runs
    at one seed with another norm, batch size and lr see the same split (they pair); another seed its own."""
    from dataclasses import replace

    from normbench.config import NormConfig
    from normbench import runner

    seen = []
    real = data.load_each  # what the runner loads each run's (each member's) splits with

    def load_each(*a, **k):
        got = real(*a, **k)
        seen.extend(got)
        return got

    monkeypatch.setattr(data, "load_each", load_each)
    cfg = replace(tiny_cfg, max_steps=1, data=replace(tiny_cfg.data, subset=200, split="per_seed"))
    runs = [replace(cfg, seed=1), replace(cfg, seed=1, norm=NormConfig(name="gn", groups=4), batch_size=8, lr=0.01),
            replace(cfg, seed=2)]
    for k, c in enumerate(runs):
        assert runner.run(c, tmp_path / str(k))["status"] == "completed"
    assert len(seen) == 3
    assert same(seen[0], reference(cfg.data, 1)) and same(seen[1], reference(cfg.data, 1))
    assert same(seen[2], reference(cfg.data, 2)) and not torch.equal(seen[2].val_y, seen[0].val_y)
