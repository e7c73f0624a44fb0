"""model=transformer (normbench/models/transformer.py) against torch's own encoder layer, and its refusals.

Reference: torch.nn.TransformerEncoderLayer (batch first, GELU, no dropout) with the same weights,
norm_first=True for placement=pre and False for post, with LayerNorm: the same computation written by
PyTorch, in float64. placement=peri (Peri-LN), which PyTorch does not ship: the block and the model written
out by hand from the same modules, in float64."""

from dataclasses import replace

import pytest
import torch
from torch import nn

from normbench import models, norms
from normbench.config import ModelConfig, NormConfig, PackConfig
from normbench.errors import UserError
from normbench.runner import run
from normbench.train.tracking import NullTracker


def _torch_layer(block, width: int, heads: int, pre: bool) -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=block.mlp[0].out_features, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=pre).double()
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(block.qkv.weight)
        layer.self_attn.in_proj_bias.copy_(block.qkv.bias)
        layer.self_attn.out_proj.weight.copy_(block.proj.weight)
        layer.self_attn.out_proj.bias.copy_(block.proj.bias)
        for ours, theirs in ((block.mlp[0], layer.linear1), (block.mlp[2], layer.linear2)):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        for ours, theirs in ((block.attn_norm.norm, layer.norm1), (block.mlp_norm.norm, layer.norm2)):  # TokenWise(LN)
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
    return layer.eval()


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_blocks_are_torchs_encoder_layer(placement):
    """Each block equals TransformerEncoderLayer(norm_first=pre) with its weights, padded keys masked
    (src_key_padding_mask), on every real token, to 1e-10 in float64."""
    torch.manual_seed(0)
    model = models.create(ModelConfig(name="transformer", placement=placement, depth=2), norms.factory("ln"),
                          (1, 28, 28), 10).double().eval()
    with torch.no_grad():
        for p in model.parameters():  # away from LN's ones and zeros
            p.add_(torch.randn_like(p) * 0.1)
    z = torch.randn(3, 28, 64, dtype=torch.float64)
    lengths = torch.tensor([28, 17, 9])
    mask = torch.arange(28) < lengths[:, None]
    for block in model.blocks:
        layer = _torch_layer(block, 64, 4, placement == "pre")
        with torch.no_grad():
            ours, theirs = block(z, mask), layer(z, src_key_padding_mask=~mask)
            torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(block(z), layer(z), rtol=1e-10, atol=1e-10)
        z = ours


def _away_from_init(model):
    with torch.no_grad():
        for p in model.parameters():  # away from the norms' ones and zeros (and alpha 0.5, s 0)
            p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("norm", ["ln", "rms", "dyt", "derf", "bn"])
def test_peri_blocks_are_the_block_written_out_by_hand(norm):
    """Reference: Peri-LN (Kim et al. 2025, arXiv 2502.02732) written out by hand with the block's own
    modules: u = z + n2(attn(n1(z))), then u + n4(mlp(n3(u))), each n its own module (four per block, none
    shared), with and without padding (eval mode, float64, 1e-12)."""
    torch.manual_seed(0)
    model = models.create(ModelConfig(name="transformer", placement="peri", depth=2), norms.factory(norm),
                          (1, 28, 28), 10).double().eval()
    _away_from_init(model)
    z = torch.randn(3, 28, 64, dtype=torch.float64)
    mask = torch.arange(28) < torch.tensor([28, 17, 9])[:, None]
    for block in model.blocks:
        n1, n2, n3, n4 = block.attn_norm, block.attn_out_norm, block.mlp_norm, block.mlp_out_norm
        assert len({id(n) for n in (n1, n2, n3, n4)}) == 4
        with torch.no_grad():
            for m in (None, mask):
                u = z + n2(block.attend(n1(z, m), m), m)
                expected = u + n4(block.mlp(n3(u, m)), m)
                torch.testing.assert_close(block(z, m), expected, rtol=1e-12, atol=1e-12)
            z = block(z, mask)


def test_peri_model_has_pre_lns_final_norm_and_no_embedding_norm():
    """Reference: the whole forward written out by hand in float64: embedding + positions (no norm on them,
    the paper's optional embedding norm left out), the peri blocks, one final norm (the paper's final
    normalization), mean over tokens, classifier; per sublayer two norms of the block's own, so peri holds
    exactly two more norm modules per block than pre."""
    torch.manual_seed(0)
    make = norms.factory("ln")
    model = _away_from_init(models.create(ModelConfig(name="transformer", placement="peri", depth=2), make,
                                          (1, 28, 28), 10).double().eval())
    x = torch.randn(2, 1, 28, 28, dtype=torch.float64)
    with torch.no_grad():
        z = model.embed(x[:, 0]) + model.positions[:28]  # rows as tokens
        for block in model.blocks:
            z = block(z)
        expected = model.head(model.final(z).mean(1))
        torch.testing.assert_close(model(x), expected, rtol=1e-12, atol=1e-12)
    pre = models.create(ModelConfig(name="transformer", placement="pre", depth=2), make, (1, 28, 28), 10)
    count = [sum(isinstance(m, nn.LayerNorm) for m in net.modules()) for net in (model, pre)]
    assert count == [2 * 4 + 1, 2 * 2 + 1]


@pytest.mark.parametrize("qk_norm", ["ln", "rms"])
def test_qk_norm_normalizes_each_heads_queries_and_keys(qk_norm):
    """Reference: attention written out by hand in float64: per head, q and k each normalized over the
    head's 16 features (LN: (v - mean) / sqrt(var + 1e-5); RMS: v / sqrt(mean(v^2) + 1e-8); gains 1),
    softmax(q k^T / sqrt(16)) v over the real keys, heads concatenated, the output projection."""
    torch.manual_seed(0)
    model = models.create(ModelConfig(name="transformer", qk_norm=qk_norm), norms.factory("ln"), (1, 28, 28), 10)
    block = model.blocks[0].double()
    z = torch.randn(3, 7, 64, dtype=torch.float64)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] * 2 + [False] * 5])
    q, k, v = block.qkv(z).view(3, 7, 3, 4, 16).permute(2, 0, 3, 1, 4)
    def norm(u):
        if qk_norm == "ln":
            return (u - u.mean(-1, keepdim=True)) / (u.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        return u / (u.square().mean(-1, keepdim=True) + 1e-8).sqrt()
    scores = norm(q) @ norm(k).transpose(-1, -2) / 4.0
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    expected = block.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(3, 7, 64))
    with torch.no_grad():
        torch.testing.assert_close(block.attend(z, mask), expected, rtol=1e-10, atol=1e-10)
    plain = models.create(ModelConfig(name="transformer"), norms.factory("ln"), (1, 28, 28), 10).blocks[0].double()
    plain.load_state_dict(block.state_dict(), strict=False)
    assert not torch.allclose(plain.attend(z, mask), block.attend(z, mask))  # it is not the plain attention


@pytest.mark.parametrize("norm", ["ln", "bn", "rms", "dyt", "pn"])
def test_padded_tokens_change_nothing(norm):
    """With lengths, what sits in the padded rows reaches no logit: not through attention, a norm's
    statistics (BN's are masked on sequences) or the pooling (eval mode, float64)."""
    torch.manual_seed(0)
    model = models.create(ModelConfig(name="transformer"), norms.factory(norm), (1, 28, 28), 10).double().eval()
    x = torch.randn(4, 1, 28, 28, dtype=torch.float64)
    lengths = torch.tensor([28, 20, 13, 5])
    noisy = x.clone()
    for i, n in enumerate(lengths):
        noisy[i, :, n:] = torch.randn_like(noisy[i, :, n:]) * 50
    with torch.no_grad():
        torch.testing.assert_close(model(noisy, lengths), model(x, lengths), rtol=1e-10, atol=1e-10)


def test_patches_are_4x4_tokens_in_raster_order():
    """Reference: the image cut by hand into 4 x 4 patches, row by row (49 tokens of 16 pixels)."""
    model = models.create(ModelConfig(name="transformer", tokens="patches"), norms.factory("ln"), (1, 28, 28), 10)
    x = torch.arange(28 * 28, dtype=torch.float32).view(1, 1, 28, 28)
    tokens = model.tokens(x)
    assert tokens.shape == (1, 49, 16)
    torch.testing.assert_close(tokens[0, 8], x[0, 0, 4:8, 4:8].reshape(16))  # patch (1, 1)


@pytest.mark.parametrize("cfg,options,needle", [
    (ModelConfig(name="transformer", placement="output"), {}, "model.placement=pre, post, peri or mix"),
    (ModelConfig(name="transformer", hidden=30, heads=4), {}, "does not split into model.heads=4"),
    (ModelConfig(name="transformer"), {"name": "wn"}, "reparameterizes the layer before it"),
    (ModelConfig(name="transformer"), {"name": "in"}, "not defined on"),
    (ModelConfig(name="transformer", qk_norm="bn"), {}, "model.qk_norm=bn is not a batch-free norm"),
    (ModelConfig(name="transformer", qk_norm="foo"), {}, "use one of: none, ln"),
])
def test_impossible_combinations_are_one_line_errors(cfg, options, needle):
    """Reference: docs/reliability.md: each fails in one line, before any data is read where the options
    alone decide it (`models.validate`), at build where the norm's layouts do (`in` on tokens)."""
    make = norms.factory(options.get("name", "ln"))
    with pytest.raises(UserError, match=needle):
        models.validate(cfg, make)
        models.create(cfg, make, (1, 28, 28), 10)


def test_post_norm_without_a_norm_trains_or_diverges_recorded(tiny_cfg, tmp_path):
    """model.placement=post norm=none (no norm at all, residual sums unnormalized): a result, never a
    crash: completed (with its accuracy) or diverged at its step."""
    cfg = replace(tiny_cfg, model=ModelConfig(name="transformer", placement="post", hidden=16, depth=2),
                  norm=NormConfig(name="none"), max_steps=20)
    res = run(cfg, tmp_path, tracker=NullTracker())
    assert res["status"] in ("completed", "diverged")
    assert res["status"] == "diverged" or 0 <= res["test_acc"] <= 1


def test_a_transformer_pack_trains_its_members_in_turn_on_the_cpu_or_packed(tiny_cfg, tmp_path):
    """On the CPU, auto packs a Transformer pack up to batch 8 (pack/limits.json, from `normbench bench
    --sections packed`) and trains its members one after another past it, as at this test's batch 16;
    pack.mode=packed packs them. Either way each member's results.json says what its separate run says
    (float64 equality: tests/test_pack.py)."""
    from normbench.pack.plan import decide

    cfg = replace(tiny_cfg, model=ModelConfig(name="transformer", hidden=16, depth=1), max_steps=6)
    for batch, mode in ((2, "packed"), (8, "packed"), (16, "sequential")):
        pack = replace(cfg, batch_size=batch, pack=PackConfig(seeds=[0, 1]))
        assert decide(pack, tmp_path, "cpu").mode == mode, batch
    alone = run(replace(cfg, seed=1), tmp_path / "b", tracker=NullTracker())
    for mode in ("auto", "packed"):
        summary = run(replace(cfg, pack=PackConfig(seeds=[0, 1], mode=mode)), tmp_path / mode)
        assert [m["status"] for m in summary["members"]] == ["completed", "completed"]
        assert summary["members"][1]["test_acc"] == pytest.approx(alone["test_acc"], abs=2e-4), mode


def test_more_real_tokens_than_positions_is_one_error_plain_and_packed():
    """Reference: the learned table's 64 rows (transformer.MAX_TOKENS). A plain model and a pack of two
    members both refuse 70 real rows with the same one-line error, and both run 90 padded rows of which
    at most 28 are real: each member as it runs the same 28 rows unpadded, and the pack as its members
    (float64)."""
    from normbench.pack.model import PackedModel

    torch.manual_seed(0)
    members = [models.create(ModelConfig(name="transformer"), norms.factory("ln"), (1, 28, 28), 10).double().eval()
               for _ in range(2)]
    pack = PackedModel(members).double().eval()
    tall = torch.randn(2, 3, 1, 70, 28, dtype=torch.float64)  # (S, N, C, H, W)
    for model, x in ((members[0], tall[0]), (pack, tall)):
        with pytest.raises(UserError, match="70 tokens is more than the transformer's 64 learned positions"):
            model(x)
    padded = torch.zeros(2, 3, 1, 90, 28, dtype=torch.float64)
    padded[..., :28, :] = torch.randn(2, 3, 1, 28, 28, dtype=torch.float64)
    lengths = torch.tensor([28, 20, 13])
    with torch.no_grad():
        together = pack(padded, lengths.expand(2, 3))
        for k, member in enumerate(members):
            alone = member(padded[k, :, :, :28], lengths)  # no padding past the table to read
            torch.testing.assert_close(member(padded[k], lengths), alone, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(together[k], alone, rtol=1e-10, atol=1e-10)
