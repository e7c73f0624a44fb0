"""Worked numeric examples of LayerNorm and BatchNorm (from the articles normbench grew out of, copied here
in full so nothing outside this repository is needed; docs/design.md), recomputed with the catalog's norms.

A 2x4x3 batch of token embeddings and its printed LayerNorm output; BN and LN on a 2x2x2x2 convolution
output, whose expected values are worked out by hand in each test's docstring.
"""

import numpy as np
import pytest
import torch

from normbench import norms

# `embedding` (batch 2, sentence length 4, embedding dim 3) and its printed LayerNorm output.
EMBEDDING = [[[1, 1, 2], [2, 0, 0], [0, 0, 1.], [0, 1, 0]],
             [[1, 0, 1], [1, 1, 2], [1, 0, 2], [0, 2, 2]]]
EMBEDDING_LN = [[[-0.7071, -0.7071, 1.4142], [1.4142, -0.7071, -0.7071],
                 [-0.7071, -0.7071, 1.4142], [-0.7071, 1.4142, -0.7071]],
                [[0.7071, -1.4142, 0.7071], [-0.7071, -0.7071, 1.4142],
                 [0.0000, -1.2247, 1.2247], [-1.4142, 0.7071, 0.7071]]]
# Sample 1's per-step means and variances, as the example states them.
SAMPLE1_MEAN, SAMPLE1_VAR = [1.3333, 0.6667, 0.3333, 0.3333], [0.2222, 0.8889, 0.2222, 0.2222]

# A convolution output (batch 2, channels 2, 2x2).
CONV_OUTPUT = [[[[1, 1], [1, 2]], [[-1, 1], [0, 1]]],
               [[[0, -1], [2, 2]], [[0, -1], [3, 1]]]]

IMPLS = ["native", "scratch"]


@pytest.mark.parametrize("impl", IMPLS)
def test_layernorm_on_token_embeddings(impl):
    """Reference: the worked example's printed LayerNorm output of its 2x4x3 embedding (eps = 0, as it assumes)."""
    x = torch.tensor(EMBEDDING)
    ln = norms.create("ln", 3, "seq", eps=0.0, impl=impl)
    torch.testing.assert_close(ln(x), torch.tensor(EMBEDDING_LN), atol=1e-4, rtol=0)
    torch.testing.assert_close(x[0].mean(-1), torch.tensor(SAMPLE1_MEAN), atol=1e-4, rtol=0)
    torch.testing.assert_close(x[0].var(-1, correction=0), torch.tensor(SAMPLE1_VAR), atol=1e-4, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
def test_batchnorm_on_conv_output(impl):
    """Reference: the definition, by hand: channel 0 holds 1,1,1,2,0,-1,2,2
    (mean 1, variance 1), channel 1 holds -1,1,0,1,0,-1,3,1 (mean 0.5, variance 12/8 = 1.5)."""
    x = np.array(CONV_OUTPUT, dtype=np.float64)
    by_hand = np.stack([(x[:, 0] - 1.0) / np.sqrt(1.0 + 1e-5), (x[:, 1] - 0.5) / np.sqrt(1.5 + 1e-5)], axis=1)
    bn = norms.create("bn", 2, "image", affine=False, impl=impl)  # as nn.BatchNorm2d(2, affine=False)
    out = bn(torch.tensor(CONV_OUTPUT, dtype=torch.float32))
    np.testing.assert_allclose(out.detach().numpy(), by_hand, rtol=1e-5, atol=1e-6)
    # The running statistics after this one batch: momentum 0.1 toward the batch mean and the unbiased variance.
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.1 * 1.0, 0.1 * 0.5], rtol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), [0.9 + 0.1 * 8 / 7, 0.9 + 0.1 * 1.5 * 8 / 7], rtol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_layernorm_on_conv_output_feature1(impl):
    """Reference: the example says Feature1's mean is 0.75 and its variance 0.785. That variance is the unbiased
    one (6/8 mean, 5.5/7 = 0.7857); LayerNorm divides by the biased one (5.5/8 = 0.6875), as nn.LayerNorm does."""
    x = torch.tensor(CONV_OUTPUT, dtype=torch.float32)
    ln = norms.create("ln", 2, "image", impl=impl)
    expected = (x[0] - 0.75) / (0.6875 + 1e-5) ** 0.5
    torch.testing.assert_close(ln(x)[0], expected)
    torch.testing.assert_close(ln(x), torch.nn.LayerNorm(x.shape[1:])(x))  # nn.LayerNorm([C, H, W]), as the example uses
