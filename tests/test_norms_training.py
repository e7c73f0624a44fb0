"""Every norm trains in every model where it is defined: a short run through the runner on the tiny
dataset (conftest.py), training loss going down. Where a norm is not defined, the run is refused."""

from dataclasses import replace

import pytest

from normbench import models, norms
from normbench.config import ModelConfig, NormConfig
from normbench.errors import UserError
from normbench.runner import run
from normbench.train.tracking import NullTracker

LAYOUT = {"mlp": "flat", "cnn": "image", "resnet": "image", "rnn": "seq", "transformer": "seq"}
SMALL = {"mlp": ModelConfig(name="mlp", hidden=32), "cnn": ModelConfig(name="cnn", channels=[8, 16], hidden=32),
         "resnet": ModelConfig(name="resnet", channels=[8, 8, 16], depth=1),
         "rnn": ModelConfig(name="rnn", hidden=24), "transformer": ModelConfig(name="transformer", hidden=16, depth=1)}


class LossLog(NullTracker):
    def __init__(self):
        self.losses = []

    def step(self, step, metrics):
        self.losses.append(metrics["loss/train"])


@pytest.mark.parametrize("norm", norms.names())
@pytest.mark.parametrize("model", models.names())
def test_every_norm_trains_in_every_model(tiny_cfg, tmp_path, model, norm):
    """Reference: the first log window's mean training loss: the last window's must be lower."""
    cfg = replace(tiny_cfg, model=SMALL[model], norm=NormConfig(name=norm), max_steps=24, log_every=6, lr=3e-3,
                  schedule="constant", threads=1)
    windows = 4
    if model == "transformer":  # the tiny images' class is which rows are bright: positions take longer
        cfg, windows = replace(cfg, epochs=4, max_steps=96, log_every=24), 7  # 31-step epochs: logs at 24, 31, 55, ...
    if LAYOUT[model] not in norms.get(norm).layouts:
        with pytest.raises(UserError, match="not defined on"):
            run(cfg, tmp_path, tracker=LossLog())
        return
    if model == "transformer" and norms.get(norm).reparameterizes:  # wn, cn: the layer is the norm
        with pytest.raises(UserError, match="reparameterizes the layer before it"):
            run(cfg, tmp_path, tracker=LossLog())
        return
    log = LossLog()
    results = run(cfg, tmp_path, tracker=log)
    assert results["status"] == "completed" and len(log.losses) == windows
    assert log.losses[-1] < log.losses[0], log.losses


@pytest.mark.parametrize("norm", [n for n in norms.names()
                                  if "flat" in norms.get(n).layouts and not norms.get(n).own_activation])
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_every_norm_trains_inside_a_recurrent_cell(tiny_cfg, tmp_path, norm, cell):
    """Reference: as above, for model.placement=recurrent (the norm inside the cell at every step)."""
    # 32 units: GN's default 8 groups then hold 4 channels of the LSTM's cell state, not 3.
    model = replace(SMALL["rnn"], hidden=32, cell=cell, placement="recurrent")
    cfg = replace(tiny_cfg, model=model, norm=NormConfig(name=norm), max_steps=30, log_every=10, lr=5e-3,
                  schedule="constant", threads=1)
    log = LossLog()
    assert run(cfg, tmp_path, tracker=log)["status"] == "completed"
    assert log.losses[-1] < log.losses[0], log.losses
