"""The variable-length study: image rows as time steps, each training sample resized along its height to
a random length in [varlen.min_len, varlen.max_len], batches right-padded with a mask.

    batch_fn = train_batches(cfg)
    results.update(evaluations(model, splits, cfg))

Evaluations: the test pass and the training-set accuracy, then each question's own passes (a run of a
design, `varlen_design=length | padding`, runs its question's only; without one, both and the small-batch
study's statistics suite): the length question's accuracy per test length (also longer than any trained),
stretched and with background rows after the image; the padding question's on mixed lengths and with each
batch padded to `varlen.heavy_pad` x its longest length, each with running and with batch statistics (a
column equal to another by construction is that one's pass: `eval_derived`). For norms with running
statistics, `test_acc_by_length_precise_bn` tests each length >= varlen.max_len after PreciseBN
re-estimated the statistics on training images stretched to that length (every step up to it gets
statistics of its own): if a norm recovers there, what it lacked past the trained length was statistics;
if not, the cause is the dynamics. Stretching changes the images too, so read it against `none`'s drop
over the same lengths.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from normbench import data
from normbench.config import Config
from normbench.data import MemberSplits, varlen
from normbench.errors import UserError
from normbench.models import cells
from normbench.norms.batch_stats import BatchStatistics
from normbench.norms.registry import TAG
from normbench.pack.members import each_member, member_splits, members_of
from normbench.regimes import default, precise_bn
from normbench.train.evaluate import PassClock, evaluate
from normbench.train.norm_modes import eval_mode

SEQUENCE_MODELS = ("rnn", "transformer")  # they take (x, lengths) and mask what lies past each length


def validate(cfg: Config) -> None:
    v = cfg.varlen
    if v.design not in (None, "length", "padding"):  # it decides which test passes run
        raise UserError(f"varlen.design={v.design} is not a design", "use varlen_design=length or "
                        "varlen_design=padding, or leave varlen.design null for every test pass")
    if cfg.model.name not in SEQUENCE_MODELS:
        raise UserError(f"varlen.enabled needs a sequence model, not model={cfg.model.name}",
                        "use model=rnn or model=transformer (or experiment=variable_length)")
    if cfg.model.name == "transformer" and cfg.model.tokens != "rows":
        raise UserError("variable lengths count image rows, and model.tokens=patches makes tokens of 4 x 4 patches",
                        "use model.tokens=rows with varlen.enabled")
    if cfg.data.augment:  # a crop would shift padding rows into the real ones
        raise UserError("data.augment does not apply to variable-length sequences", "set data.augment=false")
    if not 1 <= v.min_len <= v.max_len:
        raise UserError(f"varlen lengths must satisfy 1 <= min_len <= max_len (got {v.min_len}, {v.max_len})",
                        "set e.g. varlen.min_len=10 varlen.max_len=28")
    if not v.test_lengths or min(v.test_lengths) < 1:
        raise UserError(f"varlen.test_lengths must be lengths >= 1 (got {v.test_lengths})",
                        "set e.g. varlen.test_lengths=[10,20,28,36,42]")
    for key in ("heavy_pad", "train_pad"):
        if getattr(v, key) < 1:
            raise UserError(f"varlen.{key} must be >= 1 (got {getattr(v, key)})", f"set varlen.{key}=1 or more")
    if v.train_pad_max is not None and v.train_pad_max < v.train_pad:
        raise UserError(f"varlen.train_pad_max={v.train_pad_max} is below varlen.train_pad={v.train_pad}",
                        "set train_pad_max >= train_pad (each batch draws its factor between them), or null")
    if v.min_step_samples < 1:
        raise UserError(f"varlen.min_step_samples must be >= 1 (got {v.min_step_samples})",
                        "set e.g. varlen.min_step_samples=32")
    if v.batching == "bucketed" and cfg.batch_size < v.min_step_samples:
        raise UserError(f"varlen.batching=bucketed cannot give every step {v.min_step_samples} samples in batches "
                        f"of {cfg.batch_size}", f"raise batch_size to >= {v.min_step_samples} or lower "
                        "varlen.min_step_samples")


def train_batches(cfg: Config):
    return varlen.train_batches(cfg.varlen)


def evaluations(model: nn.Module, splits: data.Splits | MemberSplits, cfg: Config,
                clock: PassClock | None = None) -> dict[str, Any]:
    """The suite above, each member of a pack on its own splits (`MemberSplits`; one `Splits` is every
    member's): its own normalization of the test set, its own background value. Every value is a list,
    one entry per member."""
    clock, model = clock or PassClock(), members_of(model, cfg.seed)
    v = cfg.varlen
    length_question, padding_question = v.design in (None, "length"), v.design in (None, "padding")
    # under a design, its own question's passes only; the statistics suite on full-length images is neither's
    out = default.evaluations(model, splits, cfg, train_batches(cfg), clock, statistics=v.design is None)
    splits = member_splits(model, splits)
    if cfg.batch_size > len(splits.first.test_x):
        return out
    derived = out.pop("eval_derived", {})  # which numbers came from another pass, and why
    if length_question:
        out.update(_by_length(model, splits, cfg, out["test_acc"], derived, clock))
    if padding_question:
        out.update(_padding(model, splits, cfg, derived, clock))
    return out | ({"eval_derived": derived} if derived else {})


def _by_length(model: nn.Module, splits: MemberSplits, cfg: Config, test_acc, derived: dict[str, str],
               clock: PassClock) -> dict[str, Any]:
    """The length question's passes: accuracy at each test length, stretched and with background rows after
    the image, and PreciseBN at the lengths past the trained ones (norms with running statistics)."""
    v, ebs, rows = cfg.varlen, cfg.eval_batch_size, splits.first.test_x.shape[2]
    got: dict[str, Any] = {}
    with clock("test_acc_by_length"):
        got["test_acc_by_length"] = {
            str(length): test_acc if length == rows else
            evaluate(model, each_member(model, splits, at_length(length, ebs))).acc
            for length in v.test_lengths
        }
    if rows in v.test_lengths:
        derived[f"test_acc_by_length.{rows}"] = (f"test_acc's pass: the test images are {rows} rows long, which "
                                                 "resizing to that length leaves as they are")
    with clock("test_acc_by_length_background"):  # the second manipulation: background rows after the image
        got["test_acc_by_length_background"] = {
            str(length): evaluate(model, each_member(model, splits, background_after(length, ebs))).acc
            for length in v.test_lengths if length > rows
        }
    if precise_bn.has_running_stats(model):
        past = [length for length in (v.precise_bn_lengths or v.test_lengths) if length >= v.max_len]
        got.update(_precise_bn_by_length(model, splits, cfg, past, clock))
    return got


def _padding(model: nn.Module, splits: MemberSplits, cfg: Config, derived: dict[str, str],
             clock: PassClock) -> dict[str, Any]:
    """The padding question's passes: mixed lengths and heavy padding, with running and with batch
    statistics, and how far padding moves the first sequence BN's statistics (`padding_shift`)."""
    n, bs, ebs, v = len(splits.first.test_x), cfg.batch_size, cfg.eval_batch_size, cfg.varlen
    gen = torch.Generator().manual_seed(v.test_seed)
    mixed = varlen.random_lengths(n, v.min_len, v.max_len, gen).to(splits.first.test_x.device)

    def mixed_batches(batch_size: int, pad: float = 1.0, drop_last: bool = False):
        """Each member's test set at the mixed lengths, padded with its own pad value."""
        return each_member(model, splits, lambda s: varlen.padded_batches(
            s.test_x, s.test_y, mixed, batch_size, pad, drop_last, pad_value(s, cfg)))

    out: dict[str, Any] = {}
    with clock("test_acc_mixed"):
        scores = evaluate(model, mixed_batches(ebs), per_sample=True)
        out["test_acc_mixed"], correct = scores.acc, scores.correct
    if per_token(model, RUNNING_PER_TOKEN):  # padding past a sequence's end cannot reach its answer
        out["test_acc_heavy_pad"] = out["test_acc_mixed"]
        derived["test_acc_heavy_pad"] = PADDING_FREE + " (test_acc_mixed)"
    else:
        with clock("test_acc_heavy_pad"):
            out["test_acc_heavy_pad"] = evaluate(model, mixed_batches(ebs, v.heavy_pad)).acc
    padding_free = default.batch_free(model) and per_token(model, PER_TOKEN)  # batch statistics too
    blind = masks_padding(model)  # batch statistics over real tokens only: the same batches, any padding
    for name, pad in (("mixed", 1.0), ("heavy_pad", v.heavy_pad)):
        if padding_free:
            out[f"test_acc_{name}_train_mode"] = default.prefix_acc(correct, n // bs * bs)
            derived[f"test_acc_{name}_train_mode"] = default.BY_CONSTRUCTION + "; " + PADDING_FREE + \
                " (test_acc_mixed's pass, cut to whole batches)"
            continue
        if name == "heavy_pad" and blind:
            out["test_acc_heavy_pad_train_mode"] = out["test_acc_mixed_train_mode"]
            derived["test_acc_heavy_pad_train_mode"] = MASKED + " (test_acc_mixed_train_mode's pass: the same " \
                "batches)"
            continue
        with clock(f"test_acc_{name}_train_mode"):
            out[f"test_acc_{name}_train_mode"] = evaluate(model, mixed_batches(bs, pad, drop_last=True),
                                                          batch_stats=True).acc
    with clock("padding_shift"):
        nets, seeds = model.unpacked(), model.seeds
        shifts = [padding_shift(m, s, cfg, mixed, pad_value(s, cfg), seed)
                  for m, s, seed in zip(nets, splits.each, seeds)]
        out["padding_shift"] = shifts
    return out


def at_length(length: int, batch_size: int):
    """A member's test set with every sample resized to `length` rows."""
    return lambda s: varlen.length_batches(s.test_x, s.test_y, length, batch_size)


def background_after(length: int, batch_size: int):
    """A member's test set made `length` rows long by its own background rows after each image."""
    return lambda s: varlen.background_rows(length, varlen.background(s.train_x))(s.test_x, s.test_y, batch_size)


def pad_value(splits: data.Splits, cfg: Config) -> float:
    """What padded rows hold in a run's test batches: 0, or its own normalization's background."""
    return varlen.background(splits.train_x) if cfg.varlen.pad_value == "background" else 0.0


def _precise_bn_by_length(model: nn.Module, splits: MemberSplits, cfg: Config, lengths: list[int],
                          clock: PassClock) -> dict[str, Any]:
    """Test accuracy at each length past the trained ones after PreciseBN on training images stretched to
    it; with per-step statistics, also the control that re-estimates only the steps past the trained ones."""
    ebs, max_len = cfg.eval_batch_size, cfg.varlen.max_len
    control = cells.step_samples(model) is not None
    by_length, past_only = {}, {}
    for length in lengths:
        with clock("test_acc_by_length_precise_bn"):
            stretched = stretched_precise_bn(model, splits, cfg, length)
            by_length[str(length)] = evaluate(stretched, each_member(stretched, splits, at_length(length, ebs))).acc
        if control:  # the same re-estimation, the steps before max_len given back their trained statistics
            with clock("test_acc_by_length_precise_bn_past"):
                cells.restore_steps(stretched, model, max_len)
                past_only[str(length)] = evaluate(stretched, each_member(stretched, splits,
                                                                         at_length(length, ebs))).acc
    out: dict[str, Any] = {"test_acc_by_length_precise_bn": by_length}
    if control:
        out["test_acc_by_length_precise_bn_past"] = past_only
    return out


# Norms whose output at a token never reads another token in the evaluation passes (per token, elementwise,
# a reparameterized weight, or PowerNorm, whose forward divides by its running quadratic mean, which only a
# training step with autograd updates; the passes run without), and, in eval mode, BN and Batch Renorm too
# (affine maps of their running statistics). In a causal RNN that classifies from each sequence's last real
# step, or a Transformer that masks padded keys and pools the real tokens only, padding after a sequence
# then cannot change its answer.
PER_TOKEN = frozenset({"none", "ln", "rms", "gn", "frn", "wn", "cn", "dyt", "derf", "pn", "seednorm", "dyisru"})
RUNNING_PER_TOKEN = PER_TOKEN | {"bn", "brn"}
PADDING_FREE = ("padding after a sequence's last real step cannot reach its answer (a causal RNN, or a "
                "Transformer's masked attention and pooling; norms per token)")


MASKED = ("padding enters no norm's statistics (each is per token or masked), nor a causal RNN's answer or a "
          "Transformer's masked attention and pooling")


def masks_padding(model: nn.Module) -> bool:
    """Is every norm of the model (of each member of a pack) per token (PER_TOKEN) or a norm on whole
    sequences whose statistics cover real tokens only (norm.masked)? Then a batch's answers with batch
    statistics are the same at any padding. A model with recurrent BN's per-step copies is not counted: each
    step's statistics are its own question (cells.StepNorm)."""
    return all(name in PER_TOKEN or (layout == "seq" and getattr(m, "masked", False) is True and not per_step)
               for m, name, layout, per_step in _norms(model))


def per_token(model: nn.Module, names: frozenset[str]) -> bool:
    """Is every norm layer of the model (of each member of a pack) one of `names`?"""
    return all(name in names for _, name, _, _ in _norms(model))


def _norms(model: nn.Module):
    """(module, name, layout, is one of recurrent BN's per-step norms) for each norm the catalog built in the
    model (in each member of a pack)."""
    for net in members_of(model).member_models:
        steps = _step_copies(net)
        for m in net.modules():
            if hasattr(m, TAG):
                yield (m, *getattr(m, TAG), id(m) in steps)


def _step_copies(net: nn.Module) -> set[int]:
    """The ids of recurrent BN's per-step norms (cells.StepNorm's first and its copies) in `net`."""
    return {id(m) for s in net.modules() if isinstance(s, cells.StepNorm) for m in [s.norm, *s.steps]}


def stretched_precise_bn(model: nn.Module, splits: data.Splits | MemberSplits, cfg: Config,
                         length: int) -> nn.Module:
    """A copy of `model` (the run's is kept) after PreciseBN on training images stretched to `length` rows,
    at the training batch size, every step up to `length` with statistics of its own. Every sample of a
    batch has that one length, so the pass joins batches where the norms can split their statistics
    (`default.recompute`). `cells.restore_steps(copy, model, k)` then makes the control that tells
    missing statistics from re-estimated ones: the steps before k back to their trained statistics."""
    stretched = copy.deepcopy(model)
    default.recompute(stretched, splits, cfg, varlen.fixed_length(length), steps=length)
    return stretched


def _sequence_batch_norms(model: nn.Module) -> list[nn.Module]:
    """The batch-statistics norms that see whole padded sequences (N, T, C) with a mask: on the layers'
    outputs, or on W_x x_t (model.placement=input); not recurrent BN's per-step copies."""
    steps = _step_copies(model)
    return [m for m in model.modules() if isinstance(m, BatchStatistics) and getattr(m, "layout", None) == "seq"
            and id(m) not in steps]


def padding_shift(model: nn.Module, splits: data.Splits, cfg: Config, mixed: torch.Tensor, value: float,
                  seed: int) -> dict[str, dict[str, float]] | None:
    """How far padding moves a naive BN's statistics from the real tokens' (its own masked ones), for the
    first sequence BN: per channel, |mean over every position - mean over real tokens| in units of the real
    tokens' SD, and SD over every position / the real tokens' SD, each the median over channels; on one
    training batch (the run's training padding, drawn by `seed`) and one test batch at heavy padding. None for a model
    without such a norm. So a null result on padding says how large the perturbation was."""
    bns = _sequence_batch_norms(model)
    if not bns:
        return None
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    hook = bns[0].register_forward_pre_hook(lambda m, args: seen.append((args[0].detach(), args[1])))
    v = cfg.varlen
    gen = torch.Generator(device=splits.train_x.device).manual_seed(seed)
    train = next(iter(train_batches(cfg)(splits.train_x, splits.train_y, cfg.batch_size, shuffle=True,
                                         generator=gen, drop_last=True)))
    test = next(iter(varlen.padded_batches(splits.test_x, splits.test_y, mixed, cfg.batch_size, v.heavy_pad,
                                           drop_last=True, value=value)))
    try:
        with torch.no_grad(), eval_mode(model):
            for xb, _, lengths in (train, test):
                model(xb, lengths)
    finally:
        hook.remove()
    return {name: shift_of(x, mask) for name, (x, mask) in zip(("train", "test"), seen[:2])}


def shift_of(x: torch.Tensor, mask: torch.Tensor | None) -> dict[str, float]:
    """(N, T, C) inputs of a sequence BN and their (N, T) mask -> the median over channels of |mean over
    every position - mean over real tokens| / SD over real tokens, of SD over every position / SD over real
    tokens (biased SDs, as BN's), and the share of padded positions."""
    real = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if mask is None else mask
    xf, w = x.flatten(0, 1).double(), real.flatten().double()[:, None]  # (N T, C), (N T, 1)
    real_mean = (xf * w).sum(0) / w.sum()
    real_sd = ((xf - real_mean).square() * w).sum(0).div(w.sum()).sqrt()
    all_mean, all_sd = xf.mean(0), xf.var(0, unbiased=False).sqrt()
    ok = real_sd > 0
    return {"mean_shift_sd": float(((all_mean - real_mean).abs() / real_sd)[ok].median()),
            "sd_ratio": float((all_sd / real_sd)[ok].median()), "padding_share": float(1 - w.mean())}
