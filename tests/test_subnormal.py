"""Subnormal floats: `flush_denormal` (a runtime key, on by default) makes the CPU treat them as zero, and
the `subnormal` bench section builds the training state that made BN at batch 2 slow on some processors."""

from __future__ import annotations

import argparse

import torch

from normbench.bench import subnormal
from normbench.config import Config
from normbench import runner

SUB = 1e-39  # below float32's smallest normal, 2^-126 ~ 1.18e-38: a subnormal


def test_flush_denormal_sets_the_cpus_arithmetic():
    """Reference: IEEE 754. Without flushing, 1e-39 * 1 is the subnormal 1e-39; flushed, it is 0. The run's
    setup sets the process-wide flag from the config either way (false gives IEEE arithmetic back)."""
    supported = torch.set_flush_denormal(True)  # torch says whether this CPU can flush
    torch.set_flush_denormal(False)  # IEEE while the subnormal is made (flushed, it would be made as 0)
    x = torch.tensor([SUB], dtype=torch.float32)
    try:
        runner.setup(Config(flush_denormal=False))
        assert (x * 1.0).item() > 0
        runner.setup(Config(flush_denormal=True))
        assert (x * 1.0).item() == (0.0 if supported else x.item())
    finally:
        torch.set_flush_denormal(False)


def test_flush_denormal_is_a_runtime_key_recorded_with_the_run():
    """Reference: config.runtime_keys(), the list summaries and resume leave out; the key is in the config
    every results.json records."""
    from normbench.config import runtime_keys, to_dict

    assert "flush_denormal" in runtime_keys()
    assert to_dict(Config())["flush_denormal"] is True


def test_bench_builds_the_subnormal_training_state():
    """Reference: the measured state, 72% of SGD's momentum entries subnormal (|m| < torch.finfo.tiny, not
    zero), and the section's own report of that share."""
    g = torch.Generator().manual_seed(0)
    m = subnormal.subnormal_like(torch.empty(100_000), g)
    share = float(((m != 0) & (m.abs() < torch.finfo(torch.float32).tiny)).float().mean())
    assert abs(share - subnormal.SUBNORMAL_SHARE) < 0.01
    rows, text = subnormal.run(argparse.Namespace(quick=True, rounds=1), torch.device("cpu"))
    assert abs(rows["share"] - 0.72) < 0.01 and "IEEE / flushed" in text
    assert rows["update"]["ieee_ms"] > 0 and rows["sgd step"]["flush_ms"] > 0
    torch.set_flush_denormal(False)  # the flag is process-wide: leave IEEE arithmetic to the other tests
