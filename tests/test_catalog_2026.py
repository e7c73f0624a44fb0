"""The 2025-26 placements and optimizer: Mix-LN (Li et al., ICLR 2025, arXiv 2412.13795), LayerNorm Scaling
(Sun et al., NeurIPS 2025, arXiv 2502.05795) and Muon (Jordan et al. 2024; torch.optim.Muon); and the study
that compares them, `normbench study catalog_2026`, run through the protocol end to end."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import normbench_cli, write_tiny_fashion_mnist

from normbench import models, norms
from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.models.transformer import Transformer, placements
from normbench.train.muon import MuonAdamW, muon_split
from normbench.runner import run
from normbench.train.tracking import NullTracker


@pytest.fixture()
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _ln(norm, x):
    return F.layer_norm(x, x.shape[-1:], norm.norm.weight, norm.norm.bias, norm.norm.eps)


def block_by_hand(block, z: torch.Tensor, placement: str, s: float) -> torch.Tensor:
    """One encoder block written out: multi-head attention (softmax(q k^T / sqrt(d)) v) and the GELU MLP,
    each a residual branch, its LayerNorm (F.layer_norm) before the branch times s (pre) or after the sum (post)."""
    n, t, c = z.shape
    h = block.heads

    def attend(x):
        q, k, v = (x @ block.qkv.weight.T + block.qkv.bias).view(n, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c // h), -1)
        return (weights @ v).transpose(1, 2).reshape(n, t, c) @ block.proj.weight.T + block.proj.bias

    def mlp(x):
        first, second = block.mlp[0], block.mlp[2]
        return F.gelu(x @ first.weight.T + first.bias) @ second.weight.T + second.bias

    if placement == "pre":
        z = z + attend(_ln(block.attn_norm, z) * s)
        return z + mlp(_ln(block.mlp_norm, z) * s)
    z = _ln(block.attn_norm, z + attend(z))
    return _ln(block.mlp_norm, z + mlp(z))


def test_mix_ln_places_post_ln_in_the_first_quarter_of_the_blocks():
    """Reference: Mix-LN's definition (Li et al., arXiv 2412.13795): post-LN in the first floor(alpha L)
    layers, pre-LN in the rest, alpha = 0.25 by default."""
    assert placements("mix", 8) == ["post"] * 2 + ["pre"] * 6
    assert placements("mix", 4, 0.5) == ["post", "post", "pre", "pre"]
    assert placements("mix", 3) == ["pre"] * 3 and placements("post", 2) == ["post", "post"]


@pytest.mark.parametrize("placement,scaling", [("mix", False), ("mix", True), ("pre", True), ("peri", False)])
def test_each_block_is_the_block_written_out_by_hand(placement, scaling, float64):
    """Reference: block_by_hand (F.layer_norm, softmax attention, the GELU MLP), block by block in float64:
    Mix-LN's post-LN blocks then pre-LN ones (arXiv 2412.13795), and under LayerNorm Scaling each pre-LN
    block l's norms times 1/sqrt(l) (arXiv 2502.05795); peri-LN's blocks are checked against their own
    placement being unscaled."""
    torch.manual_seed(0)
    cfg = ModelConfig(name="transformer", hidden=16, depth=8, heads=2, placement=placement, layer_scaling=scaling)
    net = Transformer(cfg, norms.factory("ln"), (1, 6, 6), 10).double()
    z = torch.randn(3, 6, 16)
    for layer, (block, where) in enumerate(zip(net.blocks, placements(placement, 8)), start=1):
        want_scale = 1 / math.sqrt(layer) if scaling else 1.0
        assert block.placement == where and block.scale == pytest.approx(want_scale)
        if where == "peri":
            continue
        torch.testing.assert_close(block(z), block_by_hand(block, z, where, want_scale), rtol=1e-12, atol=1e-12)
    assert isinstance(net.final, type(net.blocks[0].attn_norm))  # the last blocks are pre-LN: a final norm


def test_layer_scaling_is_refused_where_it_has_nothing_to_scale():
    """Reference: arXiv 2502.05795 scales the norm on a branch's input; post-LN has none."""
    with pytest.raises(UserError, match="layer_scaling"):
        models.validate(ModelConfig(name="transformer", placement="post", layer_scaling=True), norms.factory("ln"))
    with pytest.raises(UserError, match="mix_ratio"):
        models.validate(ModelConfig(name="transformer", placement="mix", mix_ratio=1.5), norms.factory("ln"))


def test_packed_mix_ln_with_scaling_equals_its_members(float64):
    """Reference: each member's own forward (normbench.pack's contract), float64."""
    from normbench.pack.model import PackedModel

    cfg = ModelConfig(name="transformer", hidden=16, depth=4, heads=2, placement="mix", mix_ratio=0.5,
                      layer_scaling=True, dropout=0.0)
    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        members.append(models.create(cfg, norms.factory("ln"), (1, 6, 6), 10).double())
    packed = PackedModel(copy.deepcopy(members))
    x = torch.randn(2, 5, 1, 6, 6)
    out = packed(x)
    for k, m in enumerate(members):
        torch.testing.assert_close(out[k], m(x[k]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", models.names())
def test_muon_takes_the_hidden_matrices_and_adamw_every_other_parameter(name):
    """Reference: Muon's reference split (kellerjordan.github.io/posts/muon): the hidden 2-D weights to
    Muon; the input layer's weight, the head, biases, gains, convolution filters and the model's own
    embeddings to AdamW. Every trainable parameter in exactly one group."""
    net = models.create(ModelConfig(name=name), norms.factory("ln" if name != "cnn" else "gn"), (1, 28, 28), 10)
    muon, adamw = muon_split(net)
    names = {n for n, p in net.named_parameters() if p.requires_grad}
    assert {n for n, _ in muon} | {n for n, _ in adamw} == names and not {n for n, _ in muon} & {n for n, _ in adamw}
    assert all(p.dim() == 2 for _, p in muon)
    expected = {"mlp": {"net.4.weight"}, "rnn": {"layers.0.weight_hh_l0"}}
    if name in expected:
        assert {n for n, _ in muon} == expected[name]
    if name == "transformer":
        assert {"embed.weight", "positions", "head.weight"} <= {n for n, _ in adamw}
        assert {"blocks.0.qkv.weight", "blocks.0.proj.weight", "blocks.0.mlp.0.weight"} <= {n for n, _ in muon}


def test_muon_resumes_bit_identical(float64):
    """Reference: an unbroken run of 3 steps; 2 steps, both optimizers' state and the model's saved and
    loaded into fresh ones, then the third step: equal to the last bit."""
    from normbench.config import Config, Optimizer

    cfg = Config(optimizer=Optimizer.muon, lr=0.02, aux_lr=1e-3)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))

    def fresh():
        torch.manual_seed(0)
        net = models.create(ModelConfig(name="mlp", hidden=16), norms.factory("ln"), (1, 28, 28), 10).double()
        return net, MuonAdamW(net, cfg)

    def step(net, opt):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    a, opt_a = fresh()
    for _ in range(3):
        step(a, opt_a)
    b, opt_b = fresh()
    for _ in range(2):
        step(b, opt_b)
    state = copy.deepcopy((b.state_dict(), opt_b.state_dict()))
    c, opt_c = fresh()
    c.load_state_dict(state[0])
    opt_c.load_state_dict(state[1])
    step(c, opt_c)
    for (k, u), v in zip(a.state_dict().items(), c.state_dict().values()):
        assert torch.equal(u, v), k


@pytest.mark.parametrize("overrides", [
    {"model": ModelConfig(name="transformer", hidden=16, depth=2, heads=2, placement="mix", mix_ratio=0.5)},
    {"model": ModelConfig(name="transformer", hidden=16, depth=2, heads=2, layer_scaling=True)},
    {"optimizer": "muon", "lr": 0.02},
])
def test_the_new_keys_train(overrides, tiny_cfg, tmp_path):
    """Reference: the run's own results.json: each trains to completion at the tiny size."""
    cfg = replace(tiny_cfg, **overrides, max_steps=5)
    assert run(cfg, tmp_path, tracker=NullTracker())["status"] == "completed"


@pytest.mark.slow  # ~2.5 min on 2 shared cores: 8 calibrations and 42 runs of 30 steps
@pytest.mark.timeout(900)
def test_the_catalog_study_at_its_quick_size_runs_through_the_protocol(tmp_path):
    """Reference: the protocol (docs/protocol.md) and the claims catalog_2026 declares before it runs
    (normbench/configs/experiment/catalog_2026.yaml). `normbench study catalog_2026 scale=quick`, on a
    FashionMNIST-format dataset of 1,000 + 200 images ($NORMBENCH_DATA; the real test set's 10,000 images
    made evaluation three quarters of the study): the plan is printed before anything trains, every job of
    its plan trains all its seeds to completion, the summary is written, and every declared claim gets an
    estimate over the 3 seeds with the verdict `exploratory`. The study owns no primary claim, so its look
    tests none and no later round trains."""
    from normbench.study import jobs, spec
    from normbench.study.rounds import declared_claims, primary_claims

    data = write_tiny_fashion_mnist(tmp_path / "data", n_train=1000)  # the quick size's 500 validation + 500
    out = tmp_path / "study"
    r = normbench_cli("study", "catalog_2026", "scale=quick", f"out={out}", cwd=tmp_path,
                      env={"NORMBENCH_DATA": str(data)}, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    study = spec.load("catalog_2026")
    assert primary_claims(study) == []
    state = json.loads((out / "study.json").read_text())
    universe = jobs.study_jobs(study, "quick", state["widened"])
    assert r.stdout.index(f"round 1, seeds 1000-1002: {len(universe)} jobs") < r.stdout.index("round 1: ")
    assert "look 1 (seeds 1000-1002, level " in r.stdout and "0 of 0 primary claims still open" in r.stdout
    assert "stopped: these studies declare no primary claim" in r.stdout
    assert sorted(state["done"]) == sorted(str(jobs.directory(j, 0, out).relative_to(out)) for j in universe)
    for job in universe:
        runs = sorted(jobs.directory(job, 0, out).glob("seed=*/results.json"))
        assert [p.parent.name for p in runs] == ["seed=1000", "seed=1001", "seed=1002"], job.name
        assert {json.loads(p.read_text())["status"] for p in runs} == {"completed"}, job.name
    assert not (out / "catalog_2026" / "r2").exists()  # later rounds are for primary claims only
    assert (out / "catalog_2026" / "summary" / "summary.json").exists()
    summary = json.loads((out / "summary" / "summary.json").read_text())
    by_name = {c["name"]: c for c in summary["claims"]}
    assert set(by_name) == {c.name for c in declared_claims(study)}
    for name, c in by_name.items():
        assert (c["role"], c["verdict"], c["n"]) == ("exploratory", "exploratory", 3), name
        assert c["ci_low"] <= c["estimate"] <= c["ci_high"], name


def test_muon_on_a_torch_without_it_is_one_line(monkeypatch):
    """Reference: torch.optim.Muon came with torch 2.9, while normbench accepts torch >= 2.4: there the run is
    refused before any data is read, in one line naming the torch it needs."""
    from normbench.config import Config
    from normbench.runner import validate

    monkeypatch.delattr(torch.optim, "Muon", raising=False)
    with pytest.raises(UserError, match=r"optimizer=muon needs torch.optim.Muon, which torch .* does not have"):
        validate(Config(optimizer="muon"))
    validate(Config(optimizer="adam"))
