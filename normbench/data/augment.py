"""Training-time augmentation on whole batches on the training device: random crop with zero padding
and horizontal flip, vectorized (one gather and one `where` per batch, no per-sample Python loop).

    x = random_crop_flip(x, padding=4, flip=True, generator=g)      # x: (N, C, H, W)
    model = with_augment(model, cfg.data)                            # identity unless data.augment=true

The images are already normalized, so the zero padding is the training mean colour (as in GPU-side
pipelines such as cifar10-airbench), not black as in torchvision's RandomCrop on PIL images.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.config import DataConfig
from normbench.errors import UserError


def random_crop_flip(x: torch.Tensor, padding: int, flip: bool,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Each image becomes an (H, W) window of itself zero-padded by `padding` on every side, at an
    offset drawn uniformly from [0, 2*padding]^2, then (with `flip`) is mirrored left-right with
    probability 1/2. `generator` (on x's device) makes it reproducible; None uses torch's global RNG."""
    n, c, h, w = x.shape
    if padding > 0:
        padded = nn.functional.pad(x, (padding, padding, padding, padding))
        dy, dx = torch.randint(0, 2 * padding + 1, (2, n, 1), device=x.device, generator=generator)
        rows = (dy + torch.arange(h, device=x.device))[:, None, :, None].expand(n, c, h, w + 2 * padding)
        x = padded.gather(2, rows)  # (N, C, H, W + 2p): each sample's rows
        cols = (dx + torch.arange(w, device=x.device))[:, None, None, :].expand(n, c, h, w)
        x = x.gather(3, cols)
    if flip:
        mirror = torch.rand(n, device=x.device, generator=generator) < 0.5
        x = torch.where(mirror[:, None, None, None], x.flip(3), x)
    return x


class Augmented(nn.Module):
    """Wraps a model so that its training forward passes see augmented batches.

    Augments only when the model is in train mode *and* autograd is on, i.e. in the optimizer steps:
    `engine.evaluate` runs under no_grad, so validation and test (also train-mode BN evaluation) see
    the clean images. Draws come from torch's global RNG on the device, which the engine seeds and
    checkpoints, so a resumed run augments exactly as an unbroken one. (Like Keras' RandomCrop /
    RandomFlip layers, which are identities at inference.)
    """

    def __init__(self, model: nn.Module, padding: int, flip: bool):
        super().__init__()
        self.model, self.padding, self.flip = model, padding, flip

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            if lengths is not None:  # a crop would shift padding rows into the real ones
                raise UserError("data.augment does not apply to variable-length sequences",
                                "set data.augment=false")
            x = random_crop_flip(x, self.padding, self.flip)
        return self.model(x, lengths)

    def extra_repr(self) -> str:
        return f"crop_padding={self.padding}, hflip={self.flip}"


def with_augment(model: nn.Module, cfg: DataConfig) -> nn.Module:
    """`model` itself when `cfg.augment` is off; else the model behind an `Augmented` stage."""
    if not cfg.augment:
        return model
    if cfg.crop_padding < 0:
        raise UserError(f"data.crop_padding must be >= 0 (got {cfg.crop_padding})", "set data.crop_padding=4")
    if cfg.crop_padding == 0 and not cfg.hflip:
        raise UserError("data.augment=true with crop_padding=0 and hflip=false does nothing",
                        "set data.crop_padding=4 or data.hflip=true, or data.augment=false")
    return Augmented(model, cfg.crop_padding, cfg.hflip)
