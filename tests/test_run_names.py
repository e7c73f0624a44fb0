"""Sweep run directory names (TensorBoard's run names): what the sweep varies first, constant overrides
and runtime keys out, unique per job."""

from normbench.run_names import sweep_subdir


def test_name_leads_with_what_varies():
    """Reference: the issue's example run name `bn/bs=4/seed=0`, in Hydra's comma form, plus the job."""
    task = ["max_steps=60", "batch_size=4", "norm=bn", "seed=0", "data.subset=2000", "threads=1"]
    assert sweep_subdir(["batch_size", "norm.name", "seed"], task, 3) == "bn,bs=4,seed=0,job3"


def test_runtime_and_constant_keys_stay_out():
    """Reference: config.runtime_keys() (threads, device): never in a name, even when swept; a key the
    sweep does not vary (max_steps) is not either; nothing varied leaves the job number."""
    task = ["threads=1", "device=cpu", "max_steps=60", "+norm.groups=8", "model=cnn"]
    assert sweep_subdir(["threads", "device", "norm.groups", "model.name"], task, 0) == "cnn,groups=8,job0"
    assert sweep_subdir([], task, 7) == "job7"


def test_values_cannot_make_subdirectories():
    """Reference: one directory level per run: a value's '/' or ',' is replaced."""
    assert sweep_subdir(["model.channels"], ["model.channels=[16,32]"], 1) == "channels=[16_32],job1"
