"""`MemberLR` (a pack's optimizer when its members have their own learning rates) against its reference:
each member's own model stepped by torch's SGD or AdamW (the unfused, for-loop implementation: the
algorithm as torch documents it) with that member's lr, on that member's own batches, in float64. Both of
MemberLR's paths, torch's fused kernels per member and the functional fallback, and a model with both kinds
of parameter: stacked (the packed linears) and a member's own (FRN's scale, shift and threshold on the
MLP's rows, kept per member)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from normbench import models, norms
from normbench.config import Config, ModelConfig, Optimizer
from normbench.pack.model import PackedModel
from normbench.pack.optim import MemberLR

LRS = {"sgd": [0.05, 0.2, 0.01], "adam": [1e-3, 3e-3, 1e-2]}


def members(norm: str) -> list[torch.nn.Module]:
    out = []
    for seed in range(3):
        torch.manual_seed(seed)
        out.append(models.create(ModelConfig(name="mlp", hidden=12, dropout=0.0), norms.factory(norm), (1, 6, 6), 4)
                   .double())
    return out


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("optimizer,momentum,decay", [("sgd", 0.9, 1e-2), ("sgd", 0.0, 0.0), ("adam", 0.9, 1e-2),
                                                      ("adam", 0.9, 0.0)])
def test_each_member_steps_as_torch_optimizer_with_its_own_lr(optimizer, momentum, decay, fused):
    nets = members("frn")
    refs = [copy.deepcopy(n) for n in nets]
    pack = PackedModel(nets)
    cfg = Config(optimizer=Optimizer(optimizer), momentum=momentum, weight_decay=decay)
    opt = MemberLR(pack, 3, cfg, fused=fused)
    assert {o is None for o in opt.owner} == {True, False}  # both kinds of parameter are stepped
    make = (lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=momentum, weight_decay=decay, foreach=False)) \
        if optimizer == "sgd" else (lambda p, lr: torch.optim.AdamW(p, lr=lr, weight_decay=decay, foreach=False))
    ref_opts = [make(r.parameters(), lr) for r, lr in zip(refs, LRS[optimizer])]
    gen = torch.Generator().manual_seed(0)
    for step in range(4):
        x = torch.randn(3, 5, 1, 6, 6, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 4, (3, 5), generator=gen)
        opt.set_lrs([lr * (step + 1) / 4 for lr in LRS[optimizer]])  # a schedule: the lrs change every step
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(pack(x).flatten(0, 1), y.flatten(), reduction="none").view(3, -1).mean(1).sum().backward()
        opt.step()
        for r, o, lr, xk, yk in zip(refs, ref_opts, LRS[optimizer], x, y):
            for g in o.param_groups:
                g["lr"] = lr * (step + 1) / 4
            o.zero_grad(set_to_none=True)
            F.cross_entropy(r(xk), yk).backward()
            o.step()
    for got, want in zip(pack.unpacked(), refs):
        for (name, a), b in zip(got.named_parameters(), want.parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)


def test_a_checkpoint_with_one_adamw_step_count_resumes_with_one_per_member():
    """Reference: the same optimizer run unbroken. A checkpoint written before each member kept its own
    AdamW step count held one int per parameter; loading it continues exactly, with a count per member."""
    pack = PackedModel(members("frn"))  # stacked parameters and a member's own (one step count each)
    cfg = Config(optimizer=Optimizer.adam)
    x = torch.randn(3, 5, 1, 6, 6, dtype=torch.float64)
    y = torch.randint(0, 4, (3, 5))

    def step(opt):
        opt.set_lrs(LRS["adam"])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(pack(x).flatten(0, 1), y.flatten()).backward()
        opt.step()

    opt = MemberLR(pack, 3, cfg)
    step(opt)
    saved = copy.deepcopy(opt.state_dict())
    for s in saved["state"].values():
        s["step"] = int(s["step"][0])  # the old form
    start = copy.deepcopy(pack.state_dict())
    step(opt)
    want = copy.deepcopy(pack.state_dict())
    pack.load_state_dict(start)
    resumed = MemberLR(pack, 3, cfg)
    resumed.load_state_dict(saved)
    step(resumed)
    for p, s in resumed.state.items():  # one float32 count per member, on the parameter's device
        rows = 3 if s["step"].numel() == 3 else 1
        assert s["step"].dtype == torch.float32 and s["step"].device == p.device and s["step"].tolist() == [2.0] * rows
    assert {s["step"].numel() for s in resumed.state.values()} == {1, 3}
    for k, v in want.items():
        torch.testing.assert_close(pack.state_dict()[k], v, rtol=0, atol=0, msg=k)
