"""norm.track_stats: forward hooks that log each norm layer's input statistics and learned vectors every
N training steps, and exist only when asked for."""

from dataclasses import replace

import pytest
import torch

from normbench import models, norms
from normbench.config import ModelConfig, NormConfig
from normbench.errors import UserError
from normbench.train import probe
from normbench.runner import run


class Writer:
    """A tracker that keeps what the probe sends through the tracker interface (scalars, histogram)."""

    records_scalars = True

    def __init__(self):
        self.logged, self.histograms = [], []

    def scalars(self, step, values):
        self.logged.extend((tag, value, step) for tag, value in values.items())

    def histogram(self, tag, values, step):
        self.histograms.append((tag, step))


def _train(model, steps, x):
    for _ in range(steps):
        model(x).sum().backward()


@pytest.mark.parametrize("model,norm", [("cnn", "bn"), ("mlp", "ln"), ("rnn", "sn"), ("mlp", "wn")])
def test_probe_logs_every_n_training_steps(model, norm):
    """Reference: the input statistics computed directly (per-channel mean and std of the first norm's
    input at the logged step, averaged over channels)."""
    torch.manual_seed(0)
    cfg = ModelConfig(name=model, hidden=16, channels=[4, 8])
    net = models.create(cfg, norms.factory(norm), (1, 8, 8), 10)
    w = Writer()
    p = probe.attach(net, w, every=3)
    x = torch.randn(5, 1, 8, 8)
    _train(net, 7, x)
    with torch.no_grad():  # evaluation is not a training step
        net.eval()(x)
    steps = sorted({s for _, _, s in w.logged})
    assert steps == [3, 6]
    layers = probe.norm_modules(net)
    first = layers[0][0]
    tags = {t for t, _, s in w.logged if s == 3}
    if norm == "wn":
        assert f"norm/{first}/g_mean" in tags or any("/g_mean" in t for t in tags)
    else:
        assert {f"norm/{first}/input_mean", f"norm/{first}/input_std", f"norm/{first}/scale_mean"} <= tags
    assert {t for t, _ in w.histograms}, "histograms on the first logged step"
    assert all(s == 3 for _, s in w.histograms)  # then only every tenth logged step
    p.remove()
    assert not any(m._forward_hooks for _, m in layers) and not net._forward_pre_hooks


def test_probe_on_recurrent_bn_watches_step_zero():
    """Reference: cells.StepNorm: the per-step copies made after the probe is attached carry no hooks of
    their own; the probe logs each in-cell norm once per logged step (its first call, step 0)."""
    torch.manual_seed(0)
    cfg = ModelConfig(name="rnn", hidden=8, depth=1, cell="lstm", placement="recurrent")
    net = models.create(cfg, norms.factory("bn"), (1, 6, 6), 10)
    w = Writer()
    probe.attach(net, w, every=2)
    _train(net, 4, torch.randn(5, 1, 6, 6))
    layer = net.layers[0]
    assert layer.norm_x.trained_steps == 6
    assert all(not step._forward_hooks for step in layer.norm_x.steps)
    per_step = [t for t, _, s in w.logged if s == 2 and t.endswith("input_mean")]
    assert len(per_step) == 3  # norm_x, norm_h, norm_c of the one layer


def test_probe_statistics_are_the_inputs_per_channel_statistics():
    """Reference: torch.mean / torch.std over (N, H, W) of the conv output that feeds BN."""
    torch.manual_seed(0)
    net = models.create(ModelConfig(name="cnn", channels=[4], hidden=8), norms.factory("bn"), (1, 6, 6), 10)
    w = Writer()
    probe.attach(net, w, every=1)
    x = torch.randn(5, 1, 6, 6)
    net(x)
    conv_out = net.net[0](x)
    got = {t.rpartition("/")[2]: v for t, v, _ in w.logged}
    assert got["input_mean"] == pytest.approx(conv_out.mean((0, 2, 3)).mean().item(), abs=1e-6)
    assert got["input_std"] == pytest.approx(conv_out.std((0, 2, 3), correction=0).mean().item(), abs=1e-6)
    assert got["scale_mean"] == 1.0 and got["shift_mean"] == 0.0


def test_derfs_scalar_shift_is_logged_apart_from_its_affine_shift():
    """Reference: the Derf layer's own parameters: alpha, s (erf(alpha x + s)) and the per-channel scale and
    shift (gamma, beta) each under its own tag, none overwriting another."""
    torch.manual_seed(0)
    derf = norms.create("derf", 4, "flat")
    with torch.no_grad():
        derf.shift.fill_(0.25)
        derf.bias.fill_(-1.0)
    w = Writer()
    probe.attach(derf, w, every=1)
    derf(torch.randn(3, 4))
    got = {t.rpartition("/")[2]: v for t, v, _ in w.logged}
    assert {k: got[k] for k in ("alpha_mean", "s_mean", "scale_mean", "shift_mean")} == {
        "alpha_mean": 0.5, "s_mean": 0.25, "scale_mean": 1.0, "shift_mean": -1.0}


def test_track_stats_off_registers_nothing(tiny_cfg, tmp_path, monkeypatch):
    """Reference: the default config: no probe is attached, so no hook runs (zero cost)."""
    calls = []
    monkeypatch.setattr(probe, "attach", lambda *a, **k: calls.append(a))
    run(tiny_cfg, tmp_path)
    assert calls == []


def test_track_stats_writes_tensorboard_scalars(tiny_cfg, tmp_path):
    """Reference: TensorBoard's own event reader finds the norm/... tags in the run's event file."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = replace(tiny_cfg, norm=NormConfig(name="bn", track_stats=True, track_every=4), tensorboard=True)
    run(cfg, tmp_path)
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    tags = [t for t in events.Tags()["scalars"] if t.startswith("norm/")]
    assert any(t.endswith("/input_std") for t in tags)
    assert [e.step for e in events.Scalars(tags[0])] == [4, 8]


def test_probe_refuses_a_tracker_that_keeps_nothing():
    """Reference: tracking.NullTracker records no scalars: attaching to it is the one-line user error."""
    from normbench.train.tracking import NullTracker, Trackers

    net = models.create(ModelConfig(name="mlp", hidden=8), norms.factory("bn"), (1, 4, 4), 10)
    with pytest.raises(UserError, match="set tensorboard=true"):
        probe.attach(net, Trackers([NullTracker()]), every=1)
    assert probe.attach(net, Trackers([NullTracker(), Writer()]), every=1).handles


def test_track_stats_needs_tensorboard(tiny_cfg, tmp_path):
    cfg = replace(tiny_cfg, norm=NormConfig(name="bn", track_stats=True), tensorboard=False)
    with pytest.raises(UserError, match="set tensorboard=true"):
        run(cfg, tmp_path)
