"""A norm of your own, for normbench: ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears",
arXiv 1910.05895): each feature vector divided by its L2 norm and scaled by one learned scalar g,
initialized to sqrt(C). No statistics over the batch, nothing to keep between steps but g.

    cd docs/examples                                 # or put this file's folder on PYTHONPATH
    normbench norms check my_norm:ScaleNorm          # the catalog's contract, one line per item
    normbench train norm=custom norm.target=my_norm:ScaleNorm +norm.options.eps=1e-6 model=transformer

normbench calls `ScaleNorm(num_features, layout=..., **options)` for each norm layer of a model, and the
module with (x, mask) on sequences: x is (N, C) for an MLP, (N, C, H, W) for a CNN, (N, T, C) for an RNN
or a Transformer. The class attributes below tell normbench what the catalog knows of each norm;
`normbench norms check` verifies them.
"""

import math

import torch
from torch import nn


class ScaleNorm(nn.Module):
    layouts = ("flat", "image", "seq")  # where it is defined
    batch_dependent = False  # a sample's output never reads the rest of its batch
    paper = "Nguyen & Salazar 2019, arXiv 1910.05895"

    def __init__(self, num_features: int, layout: str = "flat", eps: float = 1e-5):
        super().__init__()
        self.dim = 1 if layout == "image" else -1  # the channel axis
        self.eps = eps
        self.g = nn.Parameter(torch.tensor(math.sqrt(num_features)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        # per position: padding (mask False) is normalized like any token and never read by another
        return self.g * x / x.norm(dim=self.dim, keepdim=True).clamp_min(self.eps)
