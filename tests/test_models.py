"""Every model x norm builds, runs forward and backward, and has the right output shape; combinations a
norm does not define are refused with a message that says why (the catalog's `unsupported` entries)."""

import pytest
import torch

from normbench import models, norms
from normbench.config import ModelConfig
from normbench.errors import UserError

CONFIGS = {
    "mlp": ModelConfig(name="mlp", hidden=32, depth=2),
    "cnn": ModelConfig(name="cnn", channels=[8, 16], hidden=32),
    "rnn": ModelConfig(name="rnn", hidden=16, depth=2),
    "transformer": ModelConfig(name="transformer", hidden=16, depth=2),
}
LAYOUT = {"mlp": "flat", "cnn": "image", "rnn": "seq", "transformer": "seq"}


@pytest.mark.parametrize("norm", norms.names())
@pytest.mark.parametrize("model", models.names())
def test_model_norm_forward_backward(model, norm):
    """Reference: shape (N, 10) logits and a finite gradient on every parameter."""
    make = norms.factory(norm)
    if LAYOUT[model] not in norms.get(norm).layouts:
        with pytest.raises(UserError, match="not defined on"):
            models.create(CONFIGS[model], make, (1, 28, 28), 10)
        return
    if model == "transformer" and make.reparameterizes:  # wn, cn: the layer is the norm (test_transformer.py)
        with pytest.raises(UserError, match="reparameterizes the layer before it"):
            models.create(CONFIGS[model], make, (1, 28, 28), 10)
        return
    torch.manual_seed(0)
    net = models.create(CONFIGS[model], make, (1, 28, 28), 10)
    x = torch.randn(4, 1, 28, 28)
    logits = net(x)
    assert logits.shape == (4, 10)
    logits.logsumexp(1).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_rnn_reads_last_real_step(cell):
    """Reference: with lengths, the logits equal those of the unpadded sequence run alone."""
    torch.manual_seed(0)
    net = models.create(ModelConfig(name="rnn", hidden=16, cell=cell), norms.factory("ln"), (1, 28, 28), 10).eval()
    x = torch.randn(2, 1, 28, 28)
    x[1, :, 20:] = 0  # sample 1 is 20 rows long, then padding
    out = net(x, torch.tensor([28, 20]))
    alone = net(x[1:2, :, :20])
    torch.testing.assert_close(out[1:2], alone)
