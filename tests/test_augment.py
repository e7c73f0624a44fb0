"""Batched augmentation (normbench/data/augment.py): random crop of the zero-padded image and horizontal
flip, on whole batches, applied to the training batches only."""

from dataclasses import replace

import pytest
import torch

from normbench.config import DataConfig, ModelConfig, VarLenConfig
from normbench.data import batches
from normbench.data.augment import augmented, random_crop_flip, validate
from normbench.errors import UserError
from normbench import runner


def _images(n=64, c=3, h=8, w=10):
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(0))


def test_flip_gives_exact_mirror_images():
    """Reference: torch.flip on the width axis; about half the batch flipped."""
    x = _images()
    out = random_crop_flip(x, padding=0, flip=True, generator=torch.Generator().manual_seed(1))
    assert out.shape == x.shape
    flipped = [torch.equal(o, xi.flip(-1)) for o, xi in zip(out, x)]
    kept = [torch.equal(o, xi) for o, xi in zip(out, x)]
    assert all(f != k for f, k in zip(flipped, kept))  # each image is exactly one of the two
    assert 16 <= sum(flipped) <= 48


def test_crop_gives_shifted_windows_of_the_zero_padded_image():
    """Reference: a window padded[:, dy:dy+H, dx:dx+W] of the zero-padded image, found by search; offsets vary."""
    x, p = _images(), 3
    out = random_crop_flip(x, padding=p, flip=False, generator=torch.Generator().manual_seed(2))
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (p, p, p, p))
    offsets = set()
    for o, pad in zip(out, padded):
        found = [(dy, dx) for dy in range(2 * p + 1) for dx in range(2 * p + 1)
                 if torch.equal(o, pad[:, dy:dy + x.shape[2], dx:dx + x.shape[3]])]
        assert len(found) == 1, "not a window of the padded image"
        offsets.update(found)
    assert len(offsets) >= 20  # of the 49 possible


def test_augmentation_is_deterministic_under_a_seeded_generator():
    """Reference: the same output for the same seed, a different one for another seed."""
    x = _images()
    a = random_crop_flip(x, 4, True, generator=torch.Generator().manual_seed(5))
    b = random_crop_flip(x, 4, True, generator=torch.Generator().manual_seed(5))
    c = random_crop_flip(x, 4, True, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_augment_off_is_the_plain_batches_and_on_augments_only_the_training_batches(tiny_cfg):
    """Reference: data.batches itself when off; when on, the same shuffled batches (same labels, same
    order) with every image a crop/flip of its clean self, and the model a plain model (no wrapper, so
    its state_dict keys are those of the unaugmented model)."""
    assert augmented(batches, DataConfig()) is batches
    fn = augmented(batches, DataConfig(augment=True, crop_padding=2))
    x, y = _images(32), torch.arange(32)
    plain = list(batches(x, y, 8, shuffle=True, generator=torch.Generator().manual_seed(3)))
    torch.manual_seed(0)
    aug = list(fn(x, y, 8, shuffle=True, generator=torch.Generator().manual_seed(3)))
    assert len(aug) == len(plain)
    for (xa, ya, _), (xp, yp, _) in zip(aug, plain):
        assert torch.equal(ya, yp) and xa.shape == xp.shape and not torch.equal(xa, xp)
        padded = torch.nn.functional.pad(xp, (2, 2, 2, 2))
        for a, pad in zip(xa, padded):  # each augmented image is a window of its padded self, maybe mirrored
            windows = [pad[:, dy:dy + 8, dx:dx + 10] for dy in range(5) for dx in range(5)]
            assert any(torch.equal(a, w) or torch.equal(a, w.flip(-1)) for w in windows)


def test_augment_settings_that_cannot_work_are_refused(tiny_cfg):
    """Reference: the one-line errors, raised by the study's validation before any data is read."""
    with pytest.raises(UserError, match="crop_padding"):
        validate(DataConfig(augment=True, crop_padding=-1))
    with pytest.raises(UserError, match="does nothing"):
        validate(DataConfig(augment=True, crop_padding=0, hflip=False))
    varlen = replace(tiny_cfg, model=ModelConfig(name="rnn"), data=replace(tiny_cfg.data, augment=True),
                     varlen=VarLenConfig(enabled=True))
    with pytest.raises(UserError, match="variable-length"):
        runner.validate(varlen)
