"""Bench section `packed`: one step of S packed members against S separate runs' steps, same process.

For MLP+BN, CNN+GN and RNN+LN at batch 2, 8, 64, 256 and S = 1, 5, 16: the separate variant steps S
models one after another (each its own fused AdamW), the packed variant steps the pack once (one fused
AdamW over the stacked parameters); both on their own batches, as real runs draw them. A speedup is
separate time / packed time, the median over interleaved rounds with its range. The MLP's memory-traffic
bound: a step touches each parameter ~10 times (forward and backward reads, the gradient write, AdamW's
reads of p, g, m, v and writes of p, m, v), so S members need at least 10 x 4 x params x S bytes over the
machine's copy bandwidth (measured here), however well they are packed. A second baseline, S times one
run's step (S=1), is runs trained one after another, as a sweep trains them.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from normbench import models, norms
from normbench.bench import fmt_ratio, interleave, markdown_table, paired_ratio, sync
from normbench.config import ModelConfig
from normbench.pack.model import PackedModel

CASES = (("mlp", "bn"), ("cnn", "gn"), ("rnn", "ln"))
BATCH_SIZES = (2, 8, 64, 256)
MEMBERS = (1, 5, 16)
TOUCHES = 10  # reads and writes of each parameter's float per AdamW step (see the module docstring)


def build(model: str, norm: str, seed: int, device) -> torch.nn.Module:
    torch.manual_seed(seed)
    return models.create(ModelConfig(name=model, dropout=0.0), norms.factory(norm), (1, 28, 28), 10).to(device)


def _opt(module):
    return torch.optim.AdamW(module.parameters(), lr=1e-3, fused=True)


def timer(step, steps: int, device):
    """A bench variant: `steps` calls of `step` after one untimed call; seconds per call."""
    def timed() -> float:
        step()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        return (time.perf_counter() - t0) / steps
    return timed


def variants(model: str, norm: str, batch: int, size: int, device, steps: int):
    members = [build(model, norm, s, device) for s in range(size)]
    xs = torch.randn(size, batch, 1, 28, 28, device=device)
    ys = torch.randint(0, 10, (size, batch), device=device)
    opts = [_opt(m) for m in members]

    def separate() -> None:
        for m, o, x, y in zip(members, opts, xs, ys):
            loss = F.cross_entropy(m(x), y)
            o.zero_grad(set_to_none=True)
            loss.backward()
            o.step()

    packed = PackedModel([build(model, norm, s, device) for s in range(size)]).to(device)
    popt = _opt(packed)

    def pack() -> None:
        logits = packed(xs)
        loss = F.cross_entropy(logits.flatten(0, 1), ys.flatten(), reduction="none").view(size, -1).mean(1).sum()
        popt.zero_grad(set_to_none=True)
        loss.backward()
        popt.step()

    params = sum(p.numel() for p in members[0].parameters())
    return {"separate": timer(separate, steps, device), "packed": timer(pack, steps, device)}, params


def copy_bandwidth(device) -> float:
    """Bytes per second of a 64 MB copy (read + write counted), the best of 5."""
    a = torch.empty(16 * 2 ** 20, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(5):
        sync(device)
        t0 = time.perf_counter()
        b.copy_(a)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() * 4 / best


def run(args, device: torch.device):
    rounds = args.rounds
    batches = (2, 64) if args.quick else BATCH_SIZES
    sizes = (1, 5) if args.quick else MEMBERS  # S=1 first: the one-run-at-a-time column uses it
    bandwidth = copy_bandwidth(device)
    rows, table = [], []
    for model, norm in CASES:
        for batch in batches:
            for size in sizes:
                probe, params = variants(model, norm, batch, size, device, 1)
                one = min(probe["separate"]() for _ in range(2))
                steps = max(2, min(200, int(args.seconds / max(one, 1e-6))))
                timed, _ = variants(model, norm, batch, size, device, steps)
                got = interleave(timed, rounds)
                speedup = paired_ratio(got["separate"], got["packed"])
                bound = TOUCHES * 4 * params * size / bandwidth
                if size == 1:
                    single = min(got["separate"])
                # One run at a time (a sweep's runs, each keeping its own state in cache): S x the S=1 step
                sequential = size * single / min(got["packed"])
                rows.append({"model": model, "norm": norm, "batch_size": batch, "members": size,
                             "separate_ms": 1e3 * min(got["separate"]), "packed_ms": 1e3 * min(got["packed"]),
                             "speedup": speedup, "speedup_vs_one_at_a_time": sequential,
                             "traffic_bound_ms": 1e3 * bound, "params": params})
                table.append([f"{model}+{norm}", batch, size, f"{1e3 * min(got['separate']):.2f}",
                              f"{1e3 * min(got['packed']):.2f}", fmt_ratio(speedup), f"{sequential:.2f}",
                              f"{1e3 * bound:.2f}" if model == "mlp" else "-"])
                print(f"  packed {model}+{norm} b={batch} S={size}: {fmt_ratio(speedup)}x", flush=True)
    text = ("### packed: S members in one step vs S separate steps\n\n"
            f"Copy bandwidth {bandwidth / 1e9:.1f} GB/s (64 MB, read + write). Times are per step of all S "
            "members (fastest round); speedup = separate / packed (median, range). The MLP's bound: "
            f"{TOUCHES} touches x 4 bytes x parameters x S at that bandwidth. `vs one at a time`: S x the "
            "S=1 separate step / packed, the baseline of runs trained one after another (each keeps its "
            "own state in cache, where S models stepped in turn evict each other's).\n\n"
            + markdown_table(["model", "batch", "S", "separate ms", "packed ms", "speedup", "vs one at a time",
                              "traffic bound ms"], table))
    return rows, text
