"""model=resnet, the CIFAR-style residual CNN (He et al. 2016, "Deep Residual Learning for Image Recognition",
arXiv 1512.03385): its shape and size, every image norm of the catalog through it, a block against the block
written out by hand, packed members against separate models, and the command."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import normbench_cli
from test_pack import assert_members_equal_separate_runs, torch_dtype

from normbench import models, norms
from normbench.config import Config, DataConfig, ModelConfig, NormConfig, PackConfig
from normbench.errors import UserError
from normbench.models.resnet import ResidualBlock
from normbench.norms import registry
from normbench.pack.layers import Elementwise, PackedBatchNorm, PackedConv2d, PackedGroupNorm, PerMember
from normbench.pack.model import PackedModel

SMALL = ModelConfig(name="resnet", channels=[8, 8, 16], depth=1)  # GN and EvoNorm: 8 groups


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_logits_are_n_by_10_on_fashion_mnist_and_cifar10(shape):
    """Reference: (N, 10) logits for FashionMNIST's 1x28x28 and CIFAR-10's 3x32x32 at the default size;
    its last stage's maps are 7x7 and 8x8 (28 -> 14 -> 7, 32 -> 16 -> 8)."""
    net = models.create(ModelConfig(name="resnet"), norms.factory("bn"), shape, 10)
    seen = []
    net.stages[-1].register_forward_hook(lambda _m, _a, out: seen.append(tuple(out.shape)))
    assert net(torch.randn(3, *shape)).shape == (3, 10)
    assert seen == [(3, 64, shape[1] // 4, shape[2] // 4)]


@pytest.mark.parametrize("depth,layers", [(1, 8), (3, 20)])
def test_depth_is_blocks_per_stage_and_resnet20_has_he_et_als_size(depth, layers):
    """Reference: He et al. 2016, section 4.2: 6n + 2 weighted layers (n blocks per stage, the stem and
    the classifier; the 1x1 projections not counted), ResNet-20 (n = 3) 0.27M parameters (their Table 6).
    Ours has the convolutions' biases and 1x1 projection skips (their option B) where they used zero-padded
    identities (option A), 3k parameters more: 0.27M still."""
    net = models.create(ModelConfig(name="resnet", depth=depth), norms.factory("bn"), (3, 32, 32), 10)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)]
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) + len(linears) == layers
    assert [len(stage) for stage in net.stages] == [depth] * 3
    if depth == 3:
        assert round(sum(p.numel() for p in net.parameters()) / 1e6, 2) == 0.27
    strides = [block.body[0].stride for stage in net.stages for block in stage]
    assert strides == [(1, 1)] * depth + ([(2, 2)] + [(1, 1)] * (depth - 1)) * 2


@pytest.mark.parametrize("norm", norms.names())
def test_every_image_norm_gives_finite_logits_and_gradients(norm):
    """Reference: finite (N, 10) logits and a finite gradient on every parameter, for each norm of the catalog
    that is defined on images; the others are refused with the registry's one-line reason."""
    make = norms.factory(norm)
    if "image" not in norms.get(norm).layouts:
        with pytest.raises(UserError, match="not defined on image"):
            models.create(SMALL, make, (1, 28, 28), 10)
        return
    torch.manual_seed(0)
    net = models.create(SMALL, make, (1, 28, 28), 10)
    logits = net(torch.randn(4, 1, 28, 28))
    assert logits.shape == (4, 10) and torch.isfinite(logits).all()
    logits.logsumexp(1).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_a_norm_not_defined_on_images_is_refused_in_one_line(monkeypatch, tmp_path):
    """Reference: the registry's own one-line reason, for a norm of your own that declares rows and
    sequences only (norm=custom; the catalog's own norms are all defined on images)."""
    (tmp_path / "rows_only.py").write_text(
        "from torch import nn\n\n"
        "class RowsOnly(nn.LayerNorm):\n"
        "    layouts = ('flat', 'seq')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the registration ends with the test
    make = norms.factory("custom", target="rows_only:RowsOnly")
    with pytest.raises(UserError) as err:
        models.create(ModelConfig(name="resnet"), make, (1, 28, 28), 10)
    assert str(err.value) == ("rows_only:RowsOnly is not defined on image features: rows_only:RowsOnly declares "
                              "layouts flat, seq")


def _bn(x, bn):
    """Training-mode batch norm by torch.nn.functional, on copies of the layer's running statistics."""
    return F.batch_norm(x, bn.running_mean.clone(), bn.running_var.clone(), bn.weight, bn.bias, True,
                        bn.momentum, bn.eps)


def _block_by_hand(x, block, stride):
    """He et al. 2016 (arXiv 1512.03385), figure 2 and section 4.2: y = relu(F(x) + shortcut(x)) with
    F = conv3x3 (stride) -> BN -> relu -> conv3x3 -> BN, and the shortcut the identity or, where the shape
    changes, a 1x1 convolution with the same stride -> BN (their projection, option B)."""
    conv1, bn1, _, conv2, bn2 = block.body
    h = F.relu(_bn(F.conv2d(x, conv1.weight, conv1.bias, stride=stride, padding=1), bn1))
    h = _bn(F.conv2d(h, conv2.weight, conv2.bias, padding=1), bn2)
    if isinstance(block.skip, torch.nn.Identity):
        skip = x
    else:
        conv, bn = block.skip
        skip = _bn(F.conv2d(x, conv.weight, conv.bias, stride=stride), bn)
    return F.relu(h + skip)


@pytest.mark.parametrize("c_in,c_out,stride", [(6, 6, 1), (4, 6, 2)], ids=["identity", "projection"])
def test_block_equals_he_et_al_written_out_in_functional_form(c_in, c_out, stride):
    """Reference: `_block_by_hand` (He et al. 2016) in float64: the same output and the same gradients of
    the input and every weight; and the running statistics BN updated are those of its inputs."""
    with torch_dtype(torch.float64):
        torch.manual_seed(0)
        block = ResidualBlock(c_in, c_out, stride, norms.factory("bn"))
        assert isinstance(block.skip, torch.nn.Identity) == (stride == 1 and c_in == c_out)
        x = torch.randn(5, c_in, 9, 9, requires_grad=True)
        ref = copy.deepcopy(block)
        y = block(x)
        assert y.shape == (5, c_out, 9 // stride + 9 % stride, 9 // stride + 9 % stride)
        want = _block_by_hand(x, ref, stride)
        torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
        g = torch.randn_like(y)
        got_grads = torch.autograd.grad(y, [x, *block.parameters()], g)
        want_grads = torch.autograd.grad(want, [x, *ref.parameters()], g)
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
        # one training call moved the running statistics from their start by momentum x the batch's
        conv1, bn1 = block.body[0], block.body[1]
        h = F.conv2d(x.detach(), conv1.weight.detach(), conv1.bias.detach(), stride=stride, padding=1)
        torch.testing.assert_close(bn1.running_mean, 0.1 * h.mean((0, 2, 3)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("norm", ["bn", "gn", "frn"])
def test_channels_last_weights_compute_what_contiguous_weights_compute(norm):
    """Reference: the same model with its weights contiguous, in float64: the same training outputs and
    parameter gradients, and the same eval-mode outputs (the resnet keeps its weights channels-last for speed)."""
    with torch_dtype(torch.float64):
        torch.manual_seed(0)
        net = models.create(SMALL, norms.factory(norm), (1, 28, 28), 10)
        assert net.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
        plain = copy.deepcopy(net).to(memory_format=torch.contiguous_format)
        x = torch.rand(6, 1, 28, 28)
        outs = [m(x) for m in (net, plain)]
        for out in outs:
            out.square().sum().backward()
        torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-12)
        for p, q in zip(net.parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-10)
        with torch.no_grad():
            torch.testing.assert_close(net.eval()(x), plain.eval()(x), rtol=0, atol=1e-12)


# norm -> what a block's first two layers become in the pack (WN's convolution is its own layer, its norm none)
PACKED_AS = {"bn": (PackedConv2d, PackedBatchNorm), "gn": (PackedConv2d, PackedGroupNorm),
             "frn": (PackedConv2d, PerMember), "wn": (PerMember, Elementwise)}


@pytest.mark.parametrize("norm", list(PACKED_AS))
def test_packed_members_equal_separate_models(norm):
    """Reference: each member alone, in float64: a pack of two resnets (seeds 0 and 1) gives each member's
    logits, each member's parameter gradients and, after 3 SGD steps, each member's parameters and running
    statistics. The pack swaps layers only: convolutions become one grouped convolution, the norm its packed
    form (or each member's own, PerMember), and the blocks' own forwards (skip, sum, ReLU) and the
    model's (the pooling) run over the leading member axis."""
    with torch_dtype(torch.float64):
        members = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            members.append(models.create(SMALL, norms.factory(norm), (1, 28, 28), 10))
        alone = [copy.deepcopy(m) for m in members]
        pack = PackedModel(members)
        block = pack.net.stages.layers[1].layers[0]  # stage 2's first block: stride 2, a projection skip
        assert isinstance(block, ResidualBlock)
        assert (type(block.body.layers[0]), type(block.body.layers[1])) == PACKED_AS[norm]
        assert type(block.skip.layers[0]) is PACKED_AS[norm][0]
        g = torch.Generator().manual_seed(0)
        xs = torch.randn(3, 2, 4, 1, 28, 28, generator=g)
        ys = torch.randint(0, 10, (3, 2, 4), generator=g)
        opt = torch.optim.SGD(pack.parameters(), lr=0.05, momentum=0.9)
        opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in alone]
        for x, y in zip(xs, ys):
            logits = pack(x)
            want = [m(x[k]) for k, m in enumerate(alone)]
            torch.testing.assert_close(logits, torch.stack(want), rtol=0, atol=1e-10)
            opt.zero_grad(), F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").backward(), opt.step()
            for k, o in enumerate(opts):
                o.zero_grad(), F.cross_entropy(want[k], y[k], reduction="sum").backward(), o.step()
        for have, want in zip(pack.unpacked(), alone):
            for (key, a), b in zip(have.state_dict().items(), want.state_dict().values(), strict=True):
                if a.is_floating_point():
                    torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=key)
                else:
                    assert torch.equal(a, b), key


@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_packed_training_equals_separate_runs(norm, tiny_root):
    """Reference: the runs seed=0 and seed=1 alone, as the runner trains them, in float64 (tests/test_pack.py's
    check: every step's loss, the validation, every parameter and running statistic after 20 steps, to 1e-8)."""
    cfg = Config(model=ModelConfig(name="resnet", channels=[8, 8], depth=1), norm=NormConfig(name=norm),
                 data=DataConfig(root=str(tiny_root), val_size=100, download=False), batch_size=4,
                 optimizer="sgd", max_steps=20, log_every=1, progress=False, tensorboard=False, device="cpu",
                 pack=PackConfig(seeds=[0, 1]))
    assert_members_equal_separate_runs(cfg)


# --- the command --------------------------------------------------------------------------------------

def _train(tiny_root: Path, tmp_path: Path, *overrides: str) -> Path:
    run_dir = tmp_path / "run"
    r = normbench_cli("train", "model=resnet", "batch_size=2", "max_steps=5", f"data.root={tiny_root}",
                      "data.val_size=100", "data.download=false", "threads=1", "progress=false", "tensorboard=false",
                      f"hydra.run.dir={run_dir}", *overrides, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return run_dir


@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_train_model_resnet_completes(norm, tiny_root, tmp_path):
    """Reference: the single-run contract: completed, 5 steps, the model's defaults recorded; BN's statistics
    suite (batch statistics at batch 2, PreciseBN) scored."""
    res = json.loads((_train(tiny_root, tmp_path, f"norm={norm}") / "results.json").read_text())
    assert res["status"] == "completed" and res["steps"] == 5, res
    assert res["config"]["model"]["name"] == "resnet" and res["config"]["model"]["channels"] == [16, 32, 64]
    assert 0 <= res["test_acc"] <= 1
    assert (res["test_acc_precise_bn"] is not None) == (norm == "bn")


def test_train_model_resnet_with_ghost_batches(tiny_root, tmp_path):
    """Reference: BN over each sample's own feature maps (ghost batches of 1 at batch 2) trains and is scored."""
    res = json.loads((_train(tiny_root, tmp_path, "norm=bn", "norm.ghost_batch=1") / "results.json").read_text())
    assert res["status"] == "completed" and res["config"]["norm"]["ghost_batch"] == 1
    assert res["test_acc_precise_bn"] is not None


@pytest.mark.parametrize("mode", ["packed", "sequential"])
def test_train_model_resnet_as_a_pack(mode, tiny_root, tmp_path):
    """Reference: a separate run's contract for each member of `pack.seeds=[0,1]`, packed (one computation)
    or one after another (what pack.mode=auto picks on the CPU past batch 8, limits.json)."""
    run_dir = _train(tiny_root, tmp_path, "norm=bn", "pack.seeds=[0,1]", f"pack.mode={mode}")
    for seed in (0, 1):
        res = json.loads((run_dir / f"seed={seed}" / "results.json").read_text())
        assert res["status"] == "completed" and res["config"]["seed"] == seed and res["steps"] == 5
        assert res["packed"]["mode"] == mode and res["test_acc_precise_bn"] is not None
