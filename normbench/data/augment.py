"""Training-time augmentation on whole batches on the training device: random crop with zero padding
and horizontal flip, vectorized (one gather and one `where` per batch, no per-sample Python loop).

    x = random_crop_flip(x, padding=4, flip=True, generator=g)      # x: (N, C, H, W)
    batch_fn = augmented(data.batches, cfg.data)                     # data.batches unless data.augment=true

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


def validate(cfg: DataConfig) -> None:
    if not cfg.augment:
        return
    if cfg.crop_padding < 0:
        raise UserError(f"data.crop_padding must be >= 0 (got {cfg.crop_padding})", "set data.crop_padding=4")
    if cfg.crop_padding == 0 and not cfg.hflip:
        raise UserError("data.augment=true with crop_padding=0 and hflip=false does nothing",
                        "set data.crop_padding=4 or data.hflip=true, or data.augment=false")


def augmented(batch_fn, cfg: DataConfig):
    """`batch_fn` itself when `cfg.augment` is off; else the same batches, each cropped and flipped.

    Only training batches pass through here, so validation and test (batch-statistics evaluations
    included) see the clean images, and the model is the plain model (its state_dict keys unchanged).
    Draws come from the batches' generator (the run's shuffle generator, which the engine seeds and
    checkpoints), so a resumed run augments exactly as an unbroken one, and each member of a pack
    augments as its own run would."""
    if not cfg.augment:
        return batch_fn

    def augmented_batches(x, y, batch_size, **kw):
        for xb, yb, lengths in batch_fn(x, y, batch_size, **kw):
            yield random_crop_flip(xb, cfg.crop_padding, cfg.hflip, kw.get("generator")), yb, lengths

    return augmented_batches
