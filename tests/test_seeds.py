"""The worked examples in the seed articles (/work/shared/seeds), recomputed with the catalog's norms.

Seed 000 (LayerNorm, 6.4): the 2x4x3 RNN embedding and its printed LN output; the CNN example's printed
per-sample statistics and last-channel outputs. Seed 003: BN on the 2x2x2x2 `conv_output` (the seed prints
no values: the expected ones are computed here from the definition with numpy, as the seed's own code does)
and its LN statistics for Feature1.
"""

import numpy as np
import pytest
import torch

from normbench import norms

# Seed 000, section 6.4.3: `embedding` (batch 2, sentence length 4, embedding dim 3) and the printed output.
EMBEDDING = [[[1, 1, 2], [2, 0, 0], [0, 0, 1.], [0, 1, 0]],
             [[1, 0, 1], [1, 1, 2], [1, 0, 2], [0, 2, 2]]]
EMBEDDING_LN = [[[-0.7071, -0.7071, 1.4142], [1.4142, -0.7071, -0.7071],
                 [-0.7071, -0.7071, 1.4142], [-0.7071, 1.4142, -0.7071]],
                [[0.7071, -1.4142, 0.7071], [-0.7071, -0.7071, 1.4142],
                 [0.0000, -1.2247, 1.2247], [-1.4142, 0.7071, 0.7071]]]
# Sample 1's per-step means and variances, as the seed states them.
SAMPLE1_MEAN, SAMPLE1_VAR = [1.3333, 0.6667, 0.3333, 0.3333], [0.2222, 0.8889, 0.2222, 0.2222]

# Seed 000, section 6.4.2 (CNN, figure 6-17): each sample's last-channel 5x5 map after LN, as printed.
LAST_CHANNEL_LN = [
    [[0.8484, 0.8484, -0.8261, -0.8261, -0.8261], [-0.8261, 0.8484, -0.8261, -0.8261, 0.8484],
     [-0.8261, 0.8484, 0.8484, 0.8484, 0.8484], [-0.8261, 0.8484, -0.8261, -0.8261, -0.8261],
     [-0.8261, 0.8484, -0.8261, -0.8261, -0.8261]],
    [[-1.0441, 0.3060, 0.3060, -1.0441, -1.0441], [-1.0441, 0.3060, -1.0441, 1.6561, 0.3060],
     [0.3060, 1.6561, 0.3060, 0.3060, -1.0441], [0.3060, 0.3060, -1.0441, -1.0441, -1.0441],
     [-1.0441, 0.3060, 0.3060, -1.0441, -1.0441]],
]
SAMPLE_STATS = [(0.4933, 0.3566), (0.7733, 0.5486)]  # eq. (6-23): mean and variance of each 3x5x5 sample

# Seed 003: the convolution output (batch 2, channels 2, 2x2).
CONV_OUTPUT = [[[[1, 1], [1, 2]], [[-1, 1], [0, 1]]],
               [[[0, -1], [2, 2]], [[0, -1], [3, 1]]]]

IMPLS = ["native", "scratch"]


@pytest.mark.parametrize("impl", IMPLS)
def test_seed000_layernorm_on_rnn_embedding(impl):
    """Reference: seed 000's printed LayerNorm output of its 2x4x3 embedding (eps = 0 as the seed assumes)."""
    x = torch.tensor(EMBEDDING)
    ln = norms.create("ln", 3, "seq", eps=0.0, impl=impl)
    torch.testing.assert_close(ln(x), torch.tensor(EMBEDDING_LN), atol=1e-4, rtol=0)
    torch.testing.assert_close(x[0].mean(-1), torch.tensor(SAMPLE1_MEAN), atol=1e-4, rtol=0)
    torch.testing.assert_close(x[0].var(-1, correction=0), torch.tensor(SAMPLE1_VAR), atol=1e-4, rtol=0)


def _cnn_sample(last_channel_ln, mean, var, fills):
    """A 3x5x5 sample consistent with the seed: its last channel recovered from the printed LN output
    (each printed value is (v - mean) / std for an integer v), the first two channels holding `fills`
    (value -> count), chosen so the sample's sum and sum of squares give the printed mean and variance.
    The seed's figure with the full maps is not in the text; LN's output at a position depends only on the
    value there and on the sample's mean and variance, so this is enough to check the printed numbers."""
    last = torch.tensor(last_channel_ln) * var ** 0.5 + mean
    assert torch.allclose(last, last.round(), atol=2e-3), "printed values map back to integers"
    values = [v for v, count in fills.items() for _ in range(count)]
    assert len(values) == 50
    first_two = torch.tensor(values, dtype=torch.float32).view(2, 5, 5)
    return torch.cat([first_two, last.round()[None]])


@pytest.mark.parametrize("impl", IMPLS)
def test_seed000_layernorm_on_cnn_feature_maps(impl):
    """Reference: seed 000's eq. (6-23)-(6-26): each sample's mean and variance over its 75 values, and the
    printed last-channel maps after LN (gamma = 1, beta = 0, eps = 0)."""
    # Counts: left sample 37 = sum, 45 = sum of squares (mean 0.4933, var 0.3566 over 75 values);
    # right sample 58 and 86. Minus the last channels' own values, the first two channels hold these:
    fills = [{0: 27, 1: 19, 2: 4}, {0: 18, 1: 22, 2: 9, 3: 1}]
    x = torch.stack([_cnn_sample(LAST_CHANNEL_LN[i], *SAMPLE_STATS[i], fills[i]) for i in range(2)])
    for i, (mean, var) in enumerate(SAMPLE_STATS):
        assert abs(x[i].mean().item() - mean) < 1e-4 and abs(x[i].var(correction=0).item() - var) < 1e-4
    ln = norms.create("ln", 3, "image", eps=0.0, impl=impl)
    torch.testing.assert_close(ln(x)[:, 2], torch.tensor(LAST_CHANNEL_LN), atol=1e-4, rtol=0)


def _numpy_batch_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Seed 003's own `batch_normalization`: mean and variance over axes (N, H, W) per channel."""
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


@pytest.mark.parametrize("impl", IMPLS)
def test_seed003_batchnorm_on_conv_output(impl):
    """Reference: the definition, by hand and by numpy (seed 003's code): channel 0 holds 1,1,1,2,0,-1,2,2
    (mean 1, variance 1), channel 1 holds -1,1,0,1,0,-1,3,1 (mean 0.5, variance 12/8 = 1.5)."""
    x = np.array(CONV_OUTPUT, dtype=np.float64)
    by_hand = np.stack([(x[:, 0] - 1.0) / np.sqrt(1.0 + 1e-5), (x[:, 1] - 0.5) / np.sqrt(1.5 + 1e-5)], axis=1)
    np.testing.assert_allclose(_numpy_batch_norm(x), by_hand, rtol=1e-12)
    bn = norms.create("bn", 2, "image", affine=False, impl=impl)  # nn.BatchNorm2d(2, affine=False) in the seed
    out = bn(torch.tensor(CONV_OUTPUT, dtype=torch.float32))
    np.testing.assert_allclose(out.detach().numpy(), by_hand, rtol=1e-5, atol=1e-6)
    # The running statistics after this one batch: momentum 0.1 toward the batch mean and the unbiased variance.
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.1 * 1.0, 0.1 * 0.5], rtol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), [0.9 + 0.1 * 8 / 7, 0.9 + 0.1 * 1.5 * 8 / 7], rtol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_seed003_layernorm_feature1(impl):
    """Reference: seed 003 says Feature1's mean is 0.75 and its variance 0.785. That variance is the unbiased
    one (6/8 mean, 5.5/7 = 0.7857); LayerNorm divides by the biased one (5.5/8 = 0.6875), as nn.LayerNorm does."""
    x = torch.tensor(CONV_OUTPUT, dtype=torch.float32)
    f1 = x[0].flatten()
    assert f1.mean().item() == 0.75
    assert abs(f1.var(correction=1).item() - 0.785) < 1e-3
    ln = norms.create("ln", 2, "image", impl=impl)
    expected = (x[0] - 0.75) / (0.6875 + 1e-5) ** 0.5
    torch.testing.assert_close(ln(x)[0], expected)
    torch.testing.assert_close(ln(x), torch.nn.LayerNorm(x.shape[1:])(x))  # the seed's nn.LayerNorm([C, H, W])
