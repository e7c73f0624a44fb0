"""The saturation fraction of DyT and Derf layers (normbench/regimes/saturation.py): against a hand count,
per member of a pack as in separate models, and in a run's results.json."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from normbench import data, models, norms
from normbench.config import ModelConfig, NormConfig, PackConfig
from normbench.pack.plan import member_values  # a plain model's numbers: member 0's
from normbench.regimes import saturation
from normbench.runner import run
from normbench.train.tracking import NullTracker


class _Fixed(nn.Module):
    """The test images' first 6 pixels, straight into a DyT or Derf layer, then a linear head."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm, self.head = norm, nn.Linear(6, 10)

    def forward(self, x, lengths=None):
        return self.head(self.norm(x.flatten(1)[:, :6]))


def _test_only(x: torch.Tensor, y: torch.Tensor) -> data.Splits:
    """Splits holding test images only (what the measure reads)."""
    return data.Splits(x[:0], y[:0], x[:0], y[:0], x, y, num_classes=10, name="test")


def _splits(values: list[float]) -> data.Splits:
    x = torch.zeros(2, 1, 28, 28)
    x.view(2, -1)[:, :6] = torch.tensor(values)  # the same 6 values in both test images
    return _test_only(x, torch.zeros(2, dtype=torch.long))


def test_thresholds_are_the_declared_output_level():
    """Reference: tanh(2) = 0.96403 (Verma 2026's |alpha x| > 2) and erfinv(0.96403) = 1.4830 (tables of the
    functions: erf(1.4830) = 0.96403)."""
    assert saturation.THRESHOLD == pytest.approx(0.96403, abs=1e-5)
    assert math.atanh(saturation.THRESHOLD) == pytest.approx(2.0)
    assert torch.special.erfinv(torch.tensor(saturation.THRESHOLD, dtype=torch.float64)).item() == pytest.approx(
        1.4830, abs=1e-4)


def test_dyt_and_derf_fractions_are_the_hand_count():
    """By hand. DyT, alpha 1: of x = 0, 1, 1.9, 2.1, -3, 10, |x| > atanh(tanh 2) = 2 for 2.1, -3 and 10:
    3 of 6 values. DyT, alpha 0.5: |0.5 x| > 2 for 10 only: 1 of 6. Derf, alpha 2, s 0.5, x = 0.45, 0.55,
    -0.95, -1.05, 0, 5: z = 2x + 0.5 = 1.4, 1.6, -1.4, -1.6, 0.5, 10.5, and |z| > erfinv(tanh 2) = 1.483 for
    1.6, -1.6 and 10.5: 3 of 6. The test set (2 images) repeats the 6 values, so the fractions stand."""
    cfg = SimpleNamespace(eval_batch_size=1)  # two batches: the counts add up over batches
    for alpha, want in ((1.0, 0.5), (0.5, 1 / 6)):
        model = _Fixed(norms.create("dyt", 6, "flat", alpha_init=alpha))
        got = member_values(saturation.measure(model, _splits([0, 1, 1.9, 2.1, -3, 10]), cfg)["saturation"], 0)
        assert got["all"] == pytest.approx(want) and got["layers"] == {"norm": pytest.approx(want)}
        assert got["threshold"] == pytest.approx(math.tanh(2)) and got["alpha"] == {"norm": alpha}
    model = _Fixed(norms.create("derf", 6, "flat", alpha_init=2.0, shift_init=0.5))
    got = member_values(saturation.measure(model, _splits([0.45, 0.55, -0.95, -1.05, 0, 5]), cfg)["saturation"], 0)
    assert got["all"] == pytest.approx(0.5) and got["alpha"] == {"norm": 2.0}


def test_only_real_tokens_count_and_other_norms_measure_nothing():
    """A masked token is not counted (DyT alone, alpha 1: one real token of values 3 and 0 saturates 1 of 2
    values, |3| > 2; the padded one, all 5s, would add 2 saturated); a model with no DyT or Derf gets {} and
    no pass."""
    dyt = norms.create("dyt", 2, "seq", alpha_init=1.0)
    counter = saturation.Counter([("dyt", dyt)])
    with torch.no_grad():
        dyt(torch.tensor([[[3.0, 0.0], [5.0, 5.0]]]), torch.tensor([[True, False]]))
    counter.remove()
    assert counter.fractions() == (0.5, {"dyt": 0.5})
    ln = models.create(ModelConfig(name="transformer", hidden=16, depth=1), norms.factory("ln"), (1, 28, 28), 10)
    assert saturation.measure(ln, None, None) == {}


def test_a_packs_members_measure_as_separate_models():
    """A pack of two DyT Transformers (QK-norm DyT too) on the same test images: each member's fractions and
    alphas equal its separate model's (float64)."""
    from normbench.pack.model import PackedModel

    torch.manual_seed(0)
    cfg = ModelConfig(name="transformer", hidden=16, depth=2, qk_norm="dyt")
    members = [models.create(cfg, norms.factory("dyt", alpha_init=a), (1, 28, 28), 10).double() for a in (0.5, 2.0)]
    splits = _test_only(3 * torch.randn(20, 1, 28, 28, dtype=torch.float64), torch.zeros(20, dtype=torch.long))
    alone = [member_values(saturation.measure(m, splits, SimpleNamespace(eval_batch_size=8))["saturation"], 0)
             for m in members]
    packed = saturation.measure(PackedModel(members).double(), splits, SimpleNamespace(eval_batch_size=8))
    got = packed["saturation"]
    assert set(got["layers"]) == set(alone[0]["layers"]) and "blocks.0.q_norm" in got["layers"]
    for k in range(2):
        assert got["all"][k] == pytest.approx(alone[k]["all"])
        assert {n: v[k] for n, v in got["layers"].items()} == pytest.approx(alone[k]["layers"])
        assert {n: v[k] for n, v in got["alpha"].items()} == alone[k]["alpha"]
    assert alone[1]["all"] > alone[0]["all"] > 0  # a larger alpha saturates more of the same inputs


def test_a_packs_members_on_their_own_test_tensors_measure_as_separate_models():
    """Members with their own data (data.split=per_seed: each its own normalization of the test images): in
    the one packed pass each member's fractions equal its separate model's on its own tensors (float64)."""
    from normbench.pack.model import PackedModel

    torch.manual_seed(0)
    cfg = ModelConfig(name="transformer", hidden=16, depth=2)
    members = [models.create(cfg, norms.factory("dyt", alpha_init=1.0), (1, 28, 28), 10).double() for _ in (0, 1)]
    y = torch.zeros(20, dtype=torch.long)
    own = [_test_only(scale * torch.randn(20, 1, 28, 28, dtype=torch.float64), y) for scale in (1.0, 4.0)]
    alone = [member_values(saturation.measure(m, s, SimpleNamespace(eval_batch_size=8))["saturation"], 0)
             for m, s in zip(members, own)]
    packed = saturation.measure(PackedModel(members).double(), data.MemberSplits.of(own),
                                SimpleNamespace(eval_batch_size=8))["saturation"]
    for k in range(2):
        assert packed["all"][k] == pytest.approx(alone[k]["all"])
    assert alone[1]["all"] > alone[0]["all"]  # the members did see their own tensors


@pytest.mark.parametrize("norm", ["dyt", "derf"])
def test_a_runs_results_hold_its_saturation_and_a_packs_members_theirs(norm, tiny_cfg, tmp_path):
    cfg = replace(tiny_cfg, model=ModelConfig(name="transformer", hidden=16, depth=1), norm=NormConfig(name=norm),
                  max_steps=4)
    res = run(cfg, tmp_path / "one", tracker=NullTracker())
    sat = res["saturation"]
    assert res["status"] == "completed" and 0 <= sat["all"] <= 1 and sat["threshold"] == pytest.approx(math.tanh(2))
    assert set(sat["layers"]) == {"blocks.0.attn_norm", "blocks.0.mlp_norm", "final"}
    assert res["eval_passes"]["saturation"] > 0
    summary = run(replace(cfg, pack=PackConfig(seeds=[0, 1], mode="packed")), tmp_path / "pack")
    import json
    member = json.loads((tmp_path / "pack" / "seed=0" / "results.json").read_text())
    assert member["saturation"]["all"] == pytest.approx(sat["all"], abs=1e-3)
    assert isinstance(member["saturation"]["layers"]["final"], float)
    assert [m["status"] for m in summary["members"]] == ["completed", "completed"]


def test_the_test_accuracy_tables_note_says_each_cells_saturation():
    """Two DyT runs at batch 64 (shares 0.2 and 0.4 of all values; layers 0.1/0.3 and 0.3/0.5; alphas 0.5/0.7
    and 0.9/1.1) and an LN run: the note gives dyt at 64 30.0% (layers 20.0-40.0%: the means of each layer
    over the runs), alpha 0.80, n=2, and nothing for LN."""
    from pathlib import Path

    from normbench.summary.tables import build_tables
    from normbench.summary.types import Run

    def one(name, norm, seed, sat=None):
        res = {"status": "completed", "test_acc": 0.8, "steps": 10, **({"saturation": sat} if sat else {})}
        return Run(Path(name), "completed", {"norm.name": norm, "batch_size": 64, "seed": seed, "data.name":
                                             "fashion_mnist", "model.name": "transformer"}, res)

    level = math.tanh(2)
    runs = [one("a", "dyt", 0, {"threshold": level, "all": 0.2, "layers": {"x": 0.1, "y": 0.3},
                                "alpha": {"x": 0.5, "y": 0.7}}),
            one("b", "dyt", 1, {"threshold": level, "all": 0.4, "layers": {"x": 0.3, "y": 0.5},
                                "alpha": {"x": 0.9, "y": 1.1}}),
            one("c", "ln", 0)]
    (table,) = [t for t in build_tables(runs, {r.path: r.config["norm.name"] for r in runs}, ref="ln")
                if t.metric == "test_acc"]
    (note,) = [n for n in table.notes if n.startswith("saturation")]
    assert "|f| > 0.964" in note and "dyt at 64 30.0% (layers 20.0-40.0%), alpha 0.80 (n=2)" in note
    assert "ln at" not in note
