"""The variable-length batching: lengths, padding and masks, the last real step, and a resize that keeps
the content where it was."""

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from normbench import data, models, norms
from normbench.config import ModelConfig, VarLenConfig
from normbench.data import varlen


def test_resize_at_the_same_length_is_the_identity():
    """Reference: the input itself."""
    x = torch.randn(3, 1, 28, 28)
    assert torch.equal(varlen.resize_rows(x, 28), x)


@pytest.mark.parametrize("length", [10, 19, 36, 42])
def test_resize_keeps_content_in_place(length):
    """Reference: an image whose rows ramp linearly from 0 to 1 stays a ramp from 0 to 1 (bilinear sampling
    of a linear function is exact: row i of L reads source row (i + 0.5) * 28 / L - 0.5; the antialiasing
    filter's discrete weights leave < 0.2% of the range, while a shift by one source row would be 3.7%),
    and the width is untouched."""
    ramp = torch.linspace(0, 1, 28)
    x = ramp.view(1, 1, 28, 1).expand(2, 1, 28, 28).contiguous()
    out = varlen.resize_rows(x, length)
    assert out.shape == (2, 1, length, 28)
    src = ((torch.arange(length) + 0.5) * 28 / length - 0.5).clamp(0, 27) / 27
    interior = slice(2, length - 2)  # the antialiasing filter is clipped at the borders
    torch.testing.assert_close(out[0, 0, interior, 5], src[interior], atol=2e-3, rtol=0)
    assert torch.equal(out[:, :, :, 0:1].expand_as(out), out)  # every column alike: width untouched


def test_shrink_averages_instead_of_skipping_rows():
    """Reference: a resize to L rows preserves an image's mean (area-like averaging), so no row of a
    28-row image is dropped on the way to 10 rows."""
    x = torch.rand(4, 1, 28, 28)
    for length in (10, 14, 42):
        out = varlen.resize_rows(x, length)
        torch.testing.assert_close(out.mean(dim=(1, 2, 3)), x.mean(dim=(1, 2, 3)), atol=0.02, rtol=0)


def test_pad_to_lengths_matches_a_per_sample_loop():
    """Reference: each sample resized alone with F.interpolate, then zero-padded: the batched version
    (one resize per distinct length) must give exactly that."""
    torch.manual_seed(0)
    x = torch.randn(9, 1, 28, 28)
    lengths = torch.tensor([10, 28, 13, 10, 20, 28, 11, 13, 25])
    out = varlen.pad_to_lengths(x, lengths)
    assert out.shape == (9, 1, 28, 28)
    for i, length in enumerate(lengths.tolist()):
        ref = F.interpolate(x[i:i + 1], size=(length, 28), mode="bilinear", align_corners=False, antialias=True)
        torch.testing.assert_close(out[i:i + 1, :, :length], ref)
        assert (out[i, :, length:] == 0).all()
    assert varlen.pad_to_lengths(x, lengths, total=40).shape == (9, 1, 40, 28)
    with pytest.raises(ValueError):
        varlen.pad_to_lengths(x, lengths, total=20)


def test_train_batches_lengths_padding_and_order():
    """Reference: `data.batches` with the same generator seed yields the same labels in the same order
    (lengths are drawn after the permutation); lengths lie in [min_len, max_len]; rows past a sample's
    length are zero; a batch is padded to its longest sample, or train_pad x that."""
    x, y = torch.randn(50, 1, 28, 28), torch.arange(50)
    cfg = VarLenConfig(enabled=True, min_len=5, max_len=12)
    got = list(varlen.train_batches(cfg)(x, y, 8, shuffle=True, generator=torch.Generator().manual_seed(3),
                                         drop_last=True))
    ref = list(data.batches(x, y, 8, shuffle=True, generator=torch.Generator().manual_seed(3), drop_last=True))
    assert len(got) == len(ref) == 6
    for (xb, yb, lb), (_, yr, _) in zip(got, ref):
        assert torch.equal(yb, yr)
        assert lb.shape == (8,) and lb.min() >= 5 and lb.max() <= 12
        assert xb.shape == (8, 1, int(lb.max()), 28)
        mask = models.length_mask(lb, xb.shape[2])
        assert (xb.permute(0, 2, 1, 3)[~mask] == 0).all()
    heavy = replace(cfg, train_pad=2.0)
    xb, _, lb = next(iter(varlen.train_batches(heavy)(x, y, 8, generator=torch.Generator().manual_seed(3))))
    assert xb.shape[2] == 2 * int(lb.max())


def test_length_mask_marks_real_steps():
    """Reference: the mask written out by hand."""
    mask = models.length_mask(torch.tensor([1, 3, 2]), 4)
    assert mask.tolist() == [[True, False, False, False], [True, True, True, False], [True, True, False, False]]


@pytest.mark.parametrize("norm", ["none", "ln", "bn"])
def test_rnn_on_a_padded_batch_equals_each_sample_alone(norm):
    """Reference: each sample resized to its length and run alone, unpadded: the padded batch's logits
    (classified from each sample's last real step) must match, also under 2x padding (eval mode:
    BatchNorm uses its running statistics)."""
    torch.manual_seed(0)
    net = models.create(ModelConfig(name="rnn", hidden=16, depth=2), norms.factory(norm), (1, 28, 28), 10).eval()
    x, y = torch.randn(6, 1, 28, 28), torch.arange(6)
    lengths = torch.tensor([10, 28, 14, 10, 21, 17])
    for pad in (1.0, 2.0):
        xb, _, lb = next(varlen.padded_batches(x, y, lengths, 6, pad_factor=pad))
        assert xb.shape[2] == math.ceil(pad * 28)
        with torch.no_grad():
            batched = net(xb, lb)
            alone = torch.cat([net(varlen.resize_rows(x[i:i + 1], int(n))) for i, n in enumerate(lengths)])
        torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)


def test_length_batches_resize_every_sample():
    """Reference: `resize_rows` on the whole set, and lengths all equal to the test length."""
    x, y = torch.randn(7, 1, 28, 28), torch.arange(7)
    out = list(varlen.length_batches(x, y, 36, 3))
    assert [len(b[1]) for b in out] == [3, 3, 1]
    torch.testing.assert_close(torch.cat([b[0] for b in out]), varlen.resize_rows(x, 36))
    assert all((b[2] == 36).all() for b in out)
