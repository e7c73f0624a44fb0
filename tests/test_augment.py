"""Batched augmentation (normbench/data/augment.py): random crop of the zero-padded image and horizontal
flip, on whole batches, and the `Augmented` stage that applies it to training steps only."""

import pytest
import torch

from normbench.config import DataConfig
from normbench.data.augment import Augmented, random_crop_flip, with_augment
from normbench.errors import UserError


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


class Probe(torch.nn.Module):
    """Records the input it was given."""

    def forward(self, x, lengths=None):
        self.seen = x
        return x


def test_augment_off_is_identity_and_only_training_steps_are_augmented():
    """Reference: the input itself; with augment off the model is returned unchanged, and with it on the
    model sees clean images in eval mode and under no_grad (how engine.evaluate runs, also train_mode)."""
    probe, x = Probe(), _images()
    assert with_augment(probe, DataConfig()) is probe
    model = with_augment(probe, DataConfig(augment=True))
    assert isinstance(model, Augmented)
    model.eval()
    model(x)
    assert probe.seen is x
    model.train()
    with torch.no_grad():
        model(x)
    assert probe.seen is x
    model(x)
    assert probe.seen.shape == x.shape and not torch.equal(probe.seen, x)
    with pytest.raises(UserError, match="variable-length"):
        model(x, torch.full((len(x),), 8))


def test_augment_settings_that_cannot_work_are_refused():
    with pytest.raises(UserError, match="crop_padding"):
        with_augment(Probe(), DataConfig(augment=True, crop_padding=-1))
    with pytest.raises(UserError, match="does nothing"):
        with_augment(Probe(), DataConfig(augment=True, crop_padding=0, hflip=False))
