"""Bench section `packed`: one step of S packed members against S separate runs' steps, same process.

For MLP+BN, CNN+GN and RNN+LN at batch 2, 8, 64, 256 and S = 1, 5, 16: the separate variant steps S
models one after another (each its own fused AdamW), the packed variant steps the pack once (one fused
AdamW over the stacked parameters); both on their own batches, as real runs draw them. A speedup is
separate time / packed time, the median over interleaved rounds with its range. The MLP's memory-traffic
bound: a step touches each parameter ~10 times (forward and backward reads, the gradient write, AdamW's
reads of p, g, m, v and writes of p, m, v), so S members need at least 10 x 4 x params x S bytes over the
machine's copy bandwidth (measured here), however well they are packed. A second baseline, S times one
run's step (S=1), is runs trained one after another, as a sweep trains them.

Every line also says how far its step is from the machine's limits: the memory-traffic bound (the
parameter touches above, plus each activation written in the forward pass and read, with its gradient
written and read, in the backward: 4 touches x 4 bytes, counted by hooks on one member's modules; the
input batch read once) at the measured copy bandwidth, and the FLOP bound (the matmul and convolution
FLOPs of forward and backward, torch.utils.flop_counter, at the rate a large matmul reaches here). A
step / bound ratio near 1 is at the limit; far above it, per-call overhead fills the gap, and the per-op
profile at batch 2 (torch.profiler: the ops with the most self time per step) says which.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from normbench import models, norms
from normbench.bench import fmt_ratio, interleave, markdown_table, paired_ratio, sync
from normbench.config import ModelConfig
from normbench.pack.model import PackedModel

CASES = (("mlp", "bn"), ("cnn", "gn"), ("rnn", "ln"), ("transformer", "ln"))
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
    params = sum(p.numel() for p in members[0].parameters())
    return {"separate": timer(separate, steps, device),
            "packed": timer(pack_step(packed, _opt(packed), xs, ys), steps, device)}, params


def pack_step(packed: PackedModel, opt, xs: torch.Tensor, ys: torch.Tensor):
    """One training step of `packed` on its members' batches (S, N, ...): the sum of their mean losses."""
    size = xs.shape[0]

    def step() -> None:
        loss = F.cross_entropy(packed(xs).flatten(0, 1), ys.flatten(), reduction="none").view(size, -1).mean(1).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


ACTIVATION_TOUCHES = 4  # forward write, backward read, gradient write and read, per activation value


def limits(model: str, norm: str, batch: int, device) -> tuple[float, float]:
    """(bytes, FLOPs) one member's training step must move and compute: parameters x TOUCHES and
    activations x ACTIVATION_TOUCHES (4 bytes each, activations from hooks on the leaf modules) plus the
    input; matmul/conv FLOPs of forward and backward (FlopCounterMode)."""
    from torch.utils.flop_counter import FlopCounterMode

    net = build(model, norm, 0, device)
    x = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    activations = []
    hooks = [m.register_forward_hook(lambda m, i, out: activations.append(out.numel() if torch.is_tensor(out) else 0))
             for m in net.modules() if not list(m.children())]
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(net(x), y).backward()
    for h in hooks:
        h.remove()
    params = sum(p.numel() for p in net.parameters())
    traffic = 4 * (TOUCHES * params + ACTIVATION_TOUCHES * sum(activations) + x.numel())
    return float(traffic), float(counter.get_total_flops())


def gemm_rate(device) -> float:
    """FLOP/s of a 1024 x 1024 float32 matmul here (2 n^3 FLOPs), the best of 5: the rate compute can reach."""
    a = torch.randn(1024, 1024, device=device)
    best = float("inf")
    for _ in range(6):
        sync(device)
        t0 = time.perf_counter()
        a @ a
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * 1024 ** 3 / best


def op_profile(model: str, norm: str, size: int, device, steps: int = 20, top: int = 6) -> list[list]:
    """The ops with the most self time in a batch-2 step (S separate members' steps, or the pack's),
    per step, from torch.profiler: where a step's time goes when it is far from its bounds."""
    from torch.profiler import ProfilerActivity, profile

    timed, _ = variants(model, norm, 2, size, device, 1)
    call = timed["packed" if size > 1 else "separate"]  # each call: one untimed step and one timed (`timer`)
    call()  # warm
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            call()
    done = 2 * steps
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return [[f"{model}+{norm}", size, e.key, f"{e.self_cpu_time_total / done / 1e3:.3f}",
             f"{100 * e.self_cpu_time_total / total:.0f}%", round(e.count / done, 1)] for e in events[:top]]


def derive_limits(rows: list[dict]) -> dict[str, list]:
    """pack/plan.py's limits from this section's rows, in its form (pack when batch <= max batch and batch x
    S <= max samples): per model, the largest batch up to which packing beat separate steps (median speedup
    > 1) at some S > 1 at every batch, and, if some S lost at those batches, the largest batch x S that won
    below the smallest that lost (null when none lost): {"mlp": [max batch, max samples or null], ...}."""
    out = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model and r["members"] > 1]
        best = 0
        for batch in sorted({r["batch_size"] for r in mine}):
            if any(r["speedup"]["median"] > 1 for r in mine if r["batch_size"] == batch):
                best = batch
            else:
                break
        won = [r["batch_size"] * r["members"] for r in mine if r["speedup"]["median"] > 1]
        lost = [r["batch_size"] * r["members"] for r in mine if r["speedup"]["median"] <= 1 and r["batch_size"] <= best]
        out[model] = [best, None if not lost else max((w for w in won if w < min(lost)), default=0)]
    return out


def with_limits(device_type: str, limits: dict[str, list] | None) -> str:
    """pack/plan.py's limits file (plan.LIMITS_FILE, one table per kind of device) with `device_type`'s
    entry replaced by `limits` (derive_limits' output, or None: nothing measured), as the text to write over
    normbench/pack/limits.json: one line per kind of device, the other kinds' tables as they were."""
    import json

    from normbench.pack import plan

    tables = {**json.loads(plan.LIMITS_FILE.read_text()), device_type: limits}
    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in tables.items()) + "\n}\n"


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
    bandwidth, flop_rate = copy_bandwidth(device), gemm_rate(device)
    rows, table = [], []
    for model, norm in CASES:
        for batch in batches:
            traffic, flops = limits(model, norm, batch, device)
            for size in sizes:
                probe, params = variants(model, norm, batch, size, device, 1)
                one = min(probe["separate"]() for _ in range(2))
                steps = max(2, min(200, int(args.seconds / max(one, 1e-6))))
                timed, _ = variants(model, norm, batch, size, device, steps)
                got = interleave(timed, rounds)
                speedup = paired_ratio(got["separate"], got["packed"])
                traffic_bound, flop_bound = size * traffic / bandwidth, size * flops / flop_rate
                bound = max(traffic_bound, flop_bound)
                if size == 1:
                    single = min(got["separate"])
                # One run at a time (a sweep's runs, each keeping its own state in cache): S x the S=1 step
                sequential = size * single / min(got["packed"])
                rows.append({"model": model, "norm": norm, "batch_size": batch, "members": size,
                             "separate_ms": 1e3 * min(got["separate"]), "packed_ms": 1e3 * min(got["packed"]),
                             "speedup": speedup, "speedup_vs_one_at_a_time": sequential,
                             "traffic_bound_ms": 1e3 * traffic_bound, "flop_bound_ms": 1e3 * flop_bound,
                             "separate_over_bound": min(got["separate"]) / bound,
                             "packed_over_bound": min(got["packed"]) / bound, "params": params,
                             "bytes_per_member": traffic, "flops_per_member": flops})
                table.append([f"{model}+{norm}", batch, size, f"{1e3 * min(got['separate']):.2f}",
                              f"{1e3 * min(got['packed']):.2f}", fmt_ratio(speedup), f"{sequential:.2f}",
                              f"{1e3 * traffic_bound:.2f} / {1e3 * flop_bound:.2f}",
                              f"{min(got['separate']) / bound:.1f}", f"{min(got['packed']) / bound:.1f}"])
                print(f"  packed {model}+{norm} b={batch} S={size}: {fmt_ratio(speedup)}x", flush=True)
    profiles = [line for model, norm in CASES for size in (1, max(sizes)) for line in op_profile(model, norm, size, device)]
    text = ("### packed: S members in one step vs S separate steps, and the machine's limits\n\n"
            f"Copy bandwidth {bandwidth / 1e9:.1f} GB/s (64 MB, read + write); matmul rate {flop_rate / 1e9:.0f} "
            "GFLOP/s (1024 x 1024, float32). Times are per step of all S members (fastest round); speedup = "
            "separate / packed (median, range). `vs one at a time`: S x the S=1 separate step / packed, the "
            "baseline of runs trained one after another (each keeps its own state in cache, where S models "
            "stepped in turn evict each other's). Bounds, for S members: traffic (parameters x "
            f"{TOUCHES} touches, activations x {ACTIVATION_TOUCHES}, 4 bytes each, at the copy bandwidth) / FLOPs "
            "(matmul and conv, forward and backward, at the matmul rate); `/ bound`: the step over the larger "
            "of the two (1 = at the machine's limit).\n\n"
            + markdown_table(["model", "batch", "S", "separate ms", "packed ms", "speedup", "vs one at a time",
                              "bound ms (traffic / FLOP)", "separate / bound", "packed / bound"], table)
            + "\n\nWhere a batch-2 step's time goes (torch.profiler, self CPU time per step; S = 1: one model's "
              f"step, S = {max(sizes)}: the pack's):\n\n"
            + markdown_table(["model", "S", "op", "ms per step", "share", "calls per step"], profiles))
    return rows, text


LR_MEMBERS = (3, 15)  # 3 lrs (the converged grid), 15 (5 lrs x 3, or the members of a wider grid)


def member_lr_variants(batch: int, size: int, device, steps: int):
    """One SGD training step of an S-member MLP+BN pack, its members at their own lrs (pack.optim.MemberLR,
    as `pack.lrs` trains) and all at one lr (torch's fused SGD over the stacked parameters, as a pack of
    seeds trains)."""
    from normbench.config import Config, Optimizer
    from normbench.pack.optim import MemberLR

    xs = torch.randn(size, batch, 1, 28, 28, device=device)
    ys = torch.randint(0, 10, (size, batch), device=device)

    def variant(own: bool):
        pack = PackedModel([build("mlp", "bn", s, device) for s in range(size)]).to(device)
        if own:
            opt = MemberLR(pack, size, Config(optimizer=Optimizer.sgd, momentum=0.9))
            opt.set_lrs([0.01 * (k + 1) for k in range(size)])
        else:
            opt = torch.optim.SGD(pack.parameters(), lr=0.01, momentum=0.9, fused=True)
        return timer(pack_step(pack, opt, xs, ys), steps, device)

    return {"own lrs": variant(True), "one lr": variant(False)}


def run_member_lrs(args, device: torch.device):
    rows, table = [], []
    for batch in (2,) if args.quick else (2, 8, 64):
        for size in LR_MEMBERS[:1] if args.quick else LR_MEMBERS:
            one = min(member_lr_variants(batch, size, device, 1)["one lr"]() for _ in range(2))
            steps = max(2, min(200, int(args.seconds / max(one, 1e-6))))
            got = interleave(member_lr_variants(batch, size, device, steps), args.rounds)
            ratio = paired_ratio(got["own lrs"], got["one lr"])
            rows.append({"model": "mlp", "norm": "bn", "batch_size": batch, "members": size,
                         "own_lrs_ms": 1e3 * min(got["own lrs"]), "one_lr_ms": 1e3 * min(got["one lr"]),
                         "own_over_one": ratio})
            table.append([batch, size, f"{1e3 * min(got['own lrs']):.2f}", f"{1e3 * min(got['one lr']):.2f}",
                          fmt_ratio(ratio)])
            print(f"  lrs mlp+bn b={batch} S={size}: own / one {fmt_ratio(ratio)}", flush=True)
    text = ("### lrs: a pack's members at their own learning rates vs at one\n\n"
            "One SGD (momentum 0.9) training step of an MLP+BN pack of S members (fastest round, ms): with "
            "`pack.lrs` (pack.optim.MemberLR: torch's fused SGD kernel per member) and with one lr (torch's fused "
            "SGD over the stacked parameters); own / one: median over interleaved rounds (range). 1 = per-member "
            "lrs cost nothing.\n\n"
            + markdown_table(["batch", "S", "own lrs ms", "one lr ms", "own / one"], table))
    return rows, text
