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
    "resnet": ModelConfig(name="resnet", channels=[8, 8, 16], depth=1),
    "rnn": ModelConfig(name="rnn", hidden=16, depth=2),
    "transformer": ModelConfig(name="transformer", hidden=16, depth=2),
}
LAYOUT = {"mlp": "flat", "cnn": "image", "resnet": "image", "rnn": "seq", "transformer": "seq"}


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
            models.validate(CONFIGS[model], make)
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


@pytest.mark.parametrize("norm", ["bn", "gn", "ln", "frn"])
def test_cnn_channels_last_computes_what_contiguous_weights_compute(norm):
    """Reference: the same CNN with its weights in the default contiguous layout, in float64: the
    channels-last CNN (models.CNN keeps its weights so, for speed) gives the same training outputs and
    parameter gradients (dropout drawn alike) and the same eval-mode outputs."""
    import copy

    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        net = models.create(ModelConfig(name="cnn"), norms.factory(norm), (1, 28, 28), 10)
        assert net.net[4].weight.is_contiguous(memory_format=torch.channels_last)
        plain = copy.deepcopy(net).to(memory_format=torch.contiguous_format)
        assert plain.net[4].weight.is_contiguous()
        x = torch.rand(16, 1, 28, 28)
        outs = []
        for m in (net, plain):
            torch.manual_seed(1)
            out = m(x)
            out.square().sum().backward()
            outs.append(out)
        torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-12)
        for p, q in zip(net.parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-11)
        with torch.no_grad():
            torch.testing.assert_close(net.eval()(x), plain.eval()(x), rtol=0, atol=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)
