"""Bench sections `norms` and `cells`: forward + backward of single norms and of recurrent cells.

`norms` walks the catalog (`norms.names()`), so a norm added later is timed without a change here:
every norm on every layout it supports against native BatchNorm on the same shape; its from-scratch
twin (when `impl` is among its options) against its native kernel; a norm with a `masked` option also
with a padding mask on `seq`; a norm that reparameterizes the layer before it (WeightNorm, Cosine
Norm) also as that layer against a plain nn.Linear / nn.Conv2d. `cells` times the RNN with the norm
inside the cell (`model.placement=recurrent`) against nn.RNN / nn.LSTM with the norm on its output,
and one tanh RNN layer trained through torch's kernel against the pack's recurrence for one member
(`models.recurrence.one_member`, which `cells.TorchRNN` uses up to `ONE_MEMBER_MAX_BATCH`). With `--compile`, torch.compile'd versions of the from-scratch modules and cells are timed too.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from normbench import models, norms
from normbench.bench import fmt_ratio, interleave, markdown_table, paired_ratio, sync
from normbench.config import ModelConfig

# Batch 64 through the default models: the MLP's hidden layer, the CNN's first stage, the RNN's outputs.
SHAPES = {"flat": (64, 256), "image": (64, 32, 28, 28), "seq": (64, 28, 256)}
LAYERS = {"flat": (lambda make: make.linear(256, 256)), "image": (lambda make: make.conv2d(32, 32, 3, padding=1))}
CELLS = (("LN-RNN", "rnn", "ln"), ("per-step BN", "rnn", "bn"), ("LN-LSTM", "lstm", "ln"))


def timer(step: Callable[[], None], target: float, device: torch.device) -> Callable[[], float]:
    """A function returning the seconds per call of `step` (a forward + backward), over enough calls
    that one measurement takes about `target` seconds. `step` runs once first, untimed: lazy state,
    the allocator, and a compiled module's compilation."""
    step()
    sync(device)
    start = time.perf_counter()
    step()
    sync(device)
    reps = max(1, round(target / max(time.perf_counter() - start, 1e-6)))

    def measure() -> float:
        sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            step()
        sync(device)
        return (time.perf_counter() - t) / reps

    return measure


def fwd_bwd(module: nn.Module, x: torch.Tensor, *extra) -> Callable[[], None]:
    """Forward, then backward of a fixed random output gradient: the input's gradient included, as
    inside a network."""
    x = x.detach().requires_grad_()
    grad = torch.randn_like(module(x, *extra))

    def step() -> None:
        module(x, *extra).backward(grad)
        x.grad = None

    return step


def fresh_compiler() -> None:
    """Forget earlier compilations. Modules of one class share their forward's compile cache: after the
    8th layout/instance of a class, dynamo stops compiling it and runs it eagerly (a training run
    compiles one model, so this is the bench's problem only: it once timed compiled GN at 17x native)."""
    torch._dynamo.reset()


def _try(build: Callable[[], nn.Module]) -> nn.Module | None:
    try:
        return build()
    except Exception:  # this norm has no such variant (yet): the row says so with a "-"
        return None


def run_norms(args, device: torch.device):
    rows, table = [], []
    gen = torch.Generator().manual_seed(0)
    for layout, shape in SHAPES.items():
        x = torch.randn(shape, generator=gen).to(device)
        c = shape[1] if layout != "seq" else shape[-1]
        lengths = torch.randint(shape[1] // 2, shape[1] + 1, (shape[0],), generator=gen).to(device)
        mask = torch.arange(shape[1], device=device) < lengths[:, None]  # ~25% padding
        bn = fwd_bwd(norms.create("bn", c, layout).to(device), x)
        for name in norms.names():
            spec = norms.get(name)
            if name == "none" or spec.reparameterizes or layout not in spec.layouts:
                continue  # the identity, or a norm timed as its layer below
            variants = {"native BN": bn, "native": fwd_bwd(norms.create(name, c, layout).to(device), x)}
            if "impl" in spec.options():
                scratch = _try(lambda: norms.create(name, c, layout, impl="scratch").to(device))
                if scratch is not None:
                    variants["scratch"] = fwd_bwd(scratch, x)
                    if args.compile:
                        fresh_compiler()
                        twin = norms.create(name, c, layout, impl="scratch").to(device)
                        variants["scratch, compiled"] = fwd_bwd(torch.compile(twin), x)
            elif args.compile:  # no native kernel: compiling is the way to a fused one
                fresh_compiler()
                variants["compiled"] = fwd_bwd(torch.compile(norms.create(name, c, layout).to(device)), x)
            if layout == "seq" and "masked" in spec.options():
                variants["masked"] = fwd_bwd(norms.create(name, c, layout).to(device), x, mask)
            rows.append(_row(name, layout, shape, variants, args, device, table))
        if layout in LAYERS:
            for name in norms.names():
                spec = norms.get(name)
                if not spec.reparameterizes:
                    continue  # an activation norm: its layer is the plain one
                plain = LAYERS[layout](norms.factory("none")).to(device)
                layer = LAYERS[layout](norms.factory(name)).to(device)
                variants = {"plain layer": fwd_bwd(plain, x), "native": fwd_bwd(layer, x)}
                if "impl" in spec.options():
                    scratch = _try(lambda: LAYERS[layout](norms.factory(name, impl="scratch")).to(device))
                    if scratch is not None:
                        variants["scratch"] = fwd_bwd(scratch, x)
                rows.append(_row(f"{name} (layer)", layout, shape, variants, args, device, table))
    text = ("### Norms: forward + backward, one layer\n\n"
            "Times are per call; ratios are time / time of the reference (lower is faster). "
            "`× BN`: against native BatchNorm on the same shape (for a reparameterized layer: against the "
            "plain nn.Linear / nn.Conv2d); `scratch × native`: the from-scratch twin against its PyTorch "
            "kernel; `masked`: statistics over real tokens only (~25% padding). The `bn` rows time two "
            "instances of the same layer: the noise floor.\n\n")
    header = ["norm", "layout", "shape", "native µs", "× BN", "scratch µs", "scratch × native", "scratch × BN",
              "masked × BN"]
    if args.compile:
        header += ["compiled × native", "compiled × BN"]
    return rows, text + markdown_table(header, table)


def _row(name: str, layout: str, shape, variants: dict, args, device, table: list) -> dict:
    times = interleave({k: timer(v, args.seconds / len(variants), device) for k, v in variants.items()}, args.rounds)
    ref = "native BN" if "native BN" in times else "plain layer"
    us = {k: min(v) * 1e6 for k, v in times.items()}
    ratio = {f"{k} / {ref}": paired_ratio(v, times[ref]) for k, v in times.items() if k != ref}
    for k in ("scratch", "scratch, compiled"):
        if k in times:
            ratio[f"{k} / native"] = paired_ratio(times[k], times["native"])
    compiled = "scratch, compiled" if "scratch, compiled" in times else "compiled"
    row = {"norm": name, "layout": layout, "shape": list(shape), "us": us, "ratio": ratio, "times_s": times}
    cells = [name, layout, "×".join(map(str, shape)), f"{us['native']:,.0f}", fmt_ratio(ratio[f"native / {ref}"]),
             f"{us['scratch']:,.0f}" if "scratch" in us else "-", fmt_ratio(ratio.get("scratch / native")),
             fmt_ratio(ratio.get(f"scratch / {ref}")), fmt_ratio(ratio.get(f"masked / {ref}"))]
    if args.compile:
        cells += [fmt_ratio(ratio.get(f"{compiled} / native")), fmt_ratio(ratio.get(f"{compiled} / {ref}"))]
    table.append(cells)
    print(" | ".join(cells), flush=True)
    return row


def run_cells(args, device: torch.device):
    rows, table, notes = [], [], []
    x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(0)).to(device)
    y = torch.arange(64, device=device) % 10

    def build(cell: str, norm: str, placement: str) -> nn.Module:
        torch.manual_seed(0)
        cfg = ModelConfig(name="rnn", cell=cell, placement=placement)
        return models.create(cfg, norms.factory(norm), (1, 28, 28), 10).to(device)

    def step(model: nn.Module) -> Callable[[], None]:
        return lambda: F.cross_entropy(model(x), y).backward()

    for label, cell, norm in CELLS:
        try:
            recurrent = build(cell, norm, "recurrent")
        except Exception as e:  # placement=recurrent not built (yet), or not for this norm
            notes.append(f"{label} ({cell}, {norm}): skipped, `model.placement=recurrent` failed: {e}")
            continue
        variants = {"output": step(build(cell, norm, "output")), "recurrent": step(recurrent)}
        if args.compile:
            fresh_compiler()
            variants["recurrent, compiled"] = step(torch.compile(build(cell, norm, "recurrent")))
        times = interleave({k: timer(v, args.seconds / len(variants), device) for k, v in variants.items()},
                           args.rounds)
        ratio = {f"{k} / output": paired_ratio(v, times["output"]) for k, v in times.items() if k != "output"}
        rows.append({"cell": label, "rnn_cell": cell, "norm": norm, "us": {k: min(v) * 1e6 for k, v in times.items()},
                     "ratio": ratio, "times_s": times})
        table.append([label, cell, norm, f"{min(times['output']) * 1e3:,.1f}", f"{min(times['recurrent']) * 1e3:,.1f}",
                      fmt_ratio(ratio["recurrent / output"]),
                      fmt_ratio(ratio.get("recurrent, compiled / output")) if args.compile else "-"])
        print(" | ".join(table[-1]), flush=True)
    one_rows, one_text = _one_member(args, device)
    rows.append({"one_member_rnn": one_rows})
    text = ("### Recurrent placement: the norm inside the cell vs on the RNN's output\n\n"
            "The default RNN (2 layers, hidden 256, 28 steps), batch 64, forward + backward; ratio = time "
            "with `model.placement=recurrent` / time with `model.placement=output` (nn.RNN / nn.LSTM).\n\n")
    text += markdown_table(["cell", "rnn cell", "norm", "output ms", "recurrent ms", "recurrent × output",
                            "compiled × output"], table)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return {"rows": rows, "notes": notes}, text + "\n\n" + one_text


def _one_member(args, device: torch.device) -> tuple[list[dict], str]:
    """One tanh RNN layer (28 steps of 28 inputs, hidden 256, as the default RNN's first), forward +
    backward: torch's nn.RNN against `models.recurrence.one_member`, at the batches the studies train at."""
    from normbench.models.recurrence import ONE_MEMBER_MAX_BATCH, one_member

    rows, table = [], []
    torch.manual_seed(0)
    rnn = nn.RNN(28, 256, batch_first=True).to(device)
    for batch in (2, 8, 32, 64, 256):
        x = torch.randn(batch, 28, 28, device=device)
        variants = {"nn.RNN": lambda: nn.RNN.forward(rnn, x)[0].sum().backward(),
                    "one member": lambda: one_member(rnn, x).sum().backward()}
        times = interleave({k: timer(v, args.seconds / 2, device) for k, v in variants.items()}, args.rounds)
        ratio = paired_ratio(times["nn.RNN"], times["one member"])
        rows.append({"batch": batch, "us": {k: min(v) * 1e6 for k, v in times.items()}, "ratio": ratio})
        table.append([str(batch), f"{min(times['nn.RNN']) * 1e3:,.2f}", f"{min(times['one member']) * 1e3:,.2f}",
                      fmt_ratio(ratio), "one member" if batch <= ONE_MEMBER_MAX_BATCH else "nn.RNN"])
        print(" | ".join(table[-1]), flush=True)
    text = ("### One tanh RNN layer: torch's kernel vs the pack's recurrence for one member\n\n"
            "28 steps, 28 inputs, hidden 256, forward + backward; `nn.RNN / one member` > 1 where the pack's "
            "recurrence is faster. `cells.TorchRNN` trains through it up to batch "
            f"{ONE_MEMBER_MAX_BATCH} on the CPU (`models.recurrence.ONE_MEMBER_MAX_BATCH`).\n\n")
    return rows, text + markdown_table(["batch", "nn.RNN ms", "one member ms", "nn.RNN / one member", "a plain run uses"],
                                       table)
