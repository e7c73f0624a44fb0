"""The small-batch study, and the default for every run without `varlen`: plain shuffled batches
(augmented on the device when data.augment=true), and the test-time statistics suite.

    batch_fn = train_batches(cfg)
    results.update(evaluations(model, splits, cfg))   # {"test_acc_train_mode": 0.83, ...}

Next to `test_acc` (running statistics), for telling a norm's failure modes apart:
- `test_acc_train_mode`: every norm normalizing each test batch of `batch_size` by its own statistics
  (per ghost batch with norm.ghost_batch): the gap to test_acc is the train/eval discrepancy;
- `test_acc_precise_bn`: the running statistics replaced by population statistics recomputed with the
  final weights over 10k training images at the training (ghost) batch size (PreciseBN, Wu & Johnson
  2021, arXiv 2105.07576); null for norms without running statistics;
- `train_acc`, `train_acc_train_mode`: the same two modes on 5,000 training images: low there too means
  the model failed to fit, high there and low on test means a train/test mismatch.

Each of these passes costs about as much as the test evaluation (a CNN on 2 cores: 3-5 s per 10k images),
so the training-set accuracies use half of PreciseBN's 10k images. `statistics_suite=false` leaves the
three statistics passes out (their numbers null): the studies' CNN cells, whose claims read test_acc only.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from normbench import data, norms
from normbench.config import Config
from normbench.data import MemberSplits, augment
from normbench.pack.members import Members, Solo, each_member, joined, member_splits, members_of
from normbench.regimes import precise_bn, saturation
from normbench.train.evaluate import PassClock, evaluate
from normbench.train.norm_modes import can_split_statistics, split_statistics

STATISTICS = ("test_acc_train_mode", "train_acc_train_mode", "test_acc_precise_bn")  # statistics_suite's passes
PRECISE_SAMPLES = precise_bn.DEFAULT_SAMPLES  # training images PreciseBN averages over (10k)
TRAIN_SAMPLES = 5_000  # training images for the training-set accuracies


def validate(cfg: Config) -> None:
    augment.validate(cfg.data)


def train_batches(cfg: Config):
    return augment.augmented(data.batches, cfg.data)


def _large(cfg: Config) -> int:
    """The largest multiple of the training batch size within the evaluation batch size."""
    return max(cfg.batch_size, cfg.eval_batch_size // cfg.batch_size * cfg.batch_size)


def on_test(s: data.Splits) -> tuple[torch.Tensor, torch.Tensor]:
    """A member's test set (the images normalized by its own training split)."""
    return s.test_x, s.test_y


def on_train(n: int):
    """A member's first `n` training images (the training-set accuracies')."""
    return lambda s: (s.train_x[:n], s.train_y[:n])


def train_mode_acc(model: Members, splits: data.Splits | MemberSplits, part, cfg: Config) -> list[float]:
    """Accuracy with batch statistics over whole batches of the training batch size, on each member's
    `part(splits)` (`on_test`, `on_train`). Where every norm can split its statistics into groups
    (`norm_modes.split_statistics`), the passes go over large batches, each group of batch_size samples
    normalized on its own: the same numbers, and at batch 2 thousands of kernel calls fewer."""
    bs = cfg.batch_size
    if not can_split_statistics(model):
        return evaluate(model, each_member(model, splits, lambda s: data.batches(*part(s), bs, drop_last=True)),
                        batch_stats=True).acc

    def whole_batches(s: data.Splits):
        x, y = part(s)
        n = len(x) // bs * bs
        return data.batches(x[:n], y[:n], _large(cfg))

    return evaluate(model, each_member(model, splits, whole_batches), batch_stats=True, stats_per=bs).acc


def precise_batches(model: Members, splits: data.Splits | MemberSplits, cfg: Config, batch_fn,
                    drop_last: bool = True):
    """PreciseBN's training batches, drawn from the run's training split as its own seed draws them; a
    pack's members each their own, from their own splits."""
    splits = member_splits(model, splits)
    return joined(model, [batch_fn(s.train_x, s.train_y, cfg.batch_size, shuffle=True, drop_last=drop_last,
                                   generator=torch.Generator(device=s.train_x.device).manual_seed(seed))
                          for s, seed in zip(splits.each, _seeds(model, cfg))])


def _seeds(model: Members, cfg: Config) -> list[int]:
    """Each member's seed: PreciseBN draws a member's batches by it."""
    if model.seeds is None:
        raise ValueError("PreciseBN draws each member's batches by its seed: build the pack with seeds")
    return model.seeds


def recompute(model: Members, splits: data.Splits | MemberSplits, cfg: Config, batch_fn, steps: int | None = None,
              splittable: bool = True) -> precise_bn.Recomputed:
    """PreciseBN on `model`, in place: population statistics over PRECISE_SAMPLES training images in the
    run's training batches (`precise_batches`, of `batch_fn`). Where every norm can split its statistics
    and the batches can be joined (`splittable`: not padded batch by batch), the pass goes over large batches,
    each group of batch_size samples normalized on its own: the same samples in the same groups, so the
    same statistics, in fewer forward calls (250 // batch_size groups a call: 3 at batch 64, 125 at 2)."""
    bs = cfg.batch_size
    split = splittable and can_split_statistics(model)
    size = _large(cfg) if split else bs
    if not model.packs(size):
        # Past the pack's limit each member alone is faster (as `evaluate` scores them): each on its own
        # seed's batches, then the members' new statistics back into the pack.
        done = [recompute(Solo(m, seed), s, replace(cfg, seed=seed), batch_fn, steps, splittable)
                for m, s, seed in zip(model.unpacked(), member_splits(model, splits).each, _seeds(model, cfg))]
        model.repack_buffers()
        return done[0]  # a member's layers and samples (every member sees as many)
    if steps is not None:  # before the split: the new steps' copies split their statistics too
        precise_bn.extend_steps(model, steps)
    batches = precise_batches(model, splits, replace(cfg, batch_size=size), batch_fn,
                              drop_last=not split)  # split: whole groups are kept, not whole large batches
    with split_statistics(model, bs) if split else contextlib.nullcontext():
        return precise_bn.recompute_statistics(model, batches, PRECISE_SAMPLES, groups_of=bs if split else None,
                                               batch_dim=model.batch_dim)


def batch_free(model: nn.Module) -> bool:
    """Does no module's output depend on the rest of its batch? Then every norm in training mode (dropout
    off) computes, sample by sample, what eval mode computes: batch statistics equal running ones by
    construction."""
    return not any(norms.is_batch_dependent(m) for net in members_of(model).member_models for m in net.modules())


def prefix_acc(correct: torch.Tensor, n: int) -> list[float]:
    """Each member's accuracy over the first `n` samples of a pass's per-sample hits ((S, N))."""
    return correct[:, :n].double().mean(-1).tolist()


BY_CONSTRUCTION = "equal by construction: no norm depends on the batch, so batch statistics are the running ones"


def evaluations(model: nn.Module, splits: data.Splits | MemberSplits, cfg: Config, batch_fn=data.batches,
                clock: PassClock | None = None, statistics: bool = True) -> dict[str, Any]:
    """The test pass and the suite above, each member of a pack on its own splits (`MemberSplits`; one
    `Splits` is every member's). Batch statistics are taken at the training batch size (what the
    norm saw in training), on the test set cut to a multiple of it; `batch_fn` makes the training batches
    that PreciseBN averages over (the study's, not augmented); `clock` times each pass by its result's name.
    A model whose norms do not depend on the batch (`batch_free`) gets its batch-statistics numbers from
    the eval-mode passes over the same samples instead of passes of their own; `eval_derived` says which.
    With `statistics=False` or cfg.statistics_suite false, only the test and training-set accuracies run (a
    study whose questions ask for other passes: the variable-length designs; a cell no claim reads the
    statistics of), the statistics' numbers null. Every value is a list, one entry per member
    (`plan.member_values` takes member k's)."""
    clock, model = clock or PassClock(), members_of(model, cfg.seed)
    splits = member_splits(model, splits)
    n_test, bs, ebs = len(splits.first.test_x), cfg.batch_size, cfg.eval_batch_size
    out: dict[str, Any] = {}
    def test_batches(s: data.Splits):
        return data.batches(*on_test(s), ebs)

    with clock("test"):
        scores = evaluate(model, each_member(model, splits, test_batches), per_sample=True)
        out["test_loss"], out["test_acc"], correct = scores.loss, scores.acc, scores.correct
    if bs > n_test:
        return {**out, "test_acc_train_mode": None, "test_acc_precise_bn": None}
    free = batch_free(model)
    n = min(TRAIN_SAMPLES, len(splits.first.train_x)) // bs * bs  # both modes on the same whole training batches
    train = on_train(n)
    with clock("train_acc"):
        out["train_acc"] = evaluate(model, each_member(model, splits, lambda s: data.batches(*train(s), ebs))).acc
    if not (statistics and cfg.statistics_suite):
        return {**out, **dict.fromkeys(STATISTICS), **saturation.measure(model, splits, cfg, clock)}
    if free:
        out["test_acc_train_mode"] = prefix_acc(correct, n_test // bs * bs)
        out["train_acc_train_mode"] = out["train_acc"]
        out["eval_derived"] = {"test_acc_train_mode": BY_CONSTRUCTION + " (test_acc's pass, cut to whole batches)",
                               "train_acc_train_mode": BY_CONSTRUCTION + " (train_acc's pass)"}
    else:
        with clock("test_acc_train_mode"):
            out["test_acc_train_mode"] = train_mode_acc(model, splits, on_test, cfg)
        with clock("train_acc_train_mode"):
            out["train_acc_train_mode"] = train_mode_acc(model, splits, train, cfg)
    out["test_acc_precise_bn"] = None
    if precise_bn.has_running_stats(model):
        trained = copy.deepcopy(model.state_dict())  # the reported model keeps its running statistics
        try:
            with clock("test_acc_precise_bn"):
                done = recompute(model, splits, cfg, batch_fn, splittable=batch_fn is data.batches)  # padded: as drawn
                out["test_acc_precise_bn"] = evaluate(model, each_member(model, splits, test_batches)).acc
            out["precise_bn_samples"] = done.samples  # training images its population statistics averaged
        finally:
            model.load_state_dict(trained)
    out.update(saturation.measure(model, splits, cfg, clock))  # DyT/Derf: the fraction of saturated values
    return out
