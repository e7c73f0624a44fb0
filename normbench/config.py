"""The typed config schema: every key `normbench train` accepts, with its meaning and default.

Registered in Hydra's ConfigStore by `normbench.cli`, so a misspelled key, a wrong type or an unknown
choice (optimizer=adm) fails at composition, before any work. The rest of the package reads these
dataclasses, never Hydra; they hold plain Python values, so a library user builds them directly:

    cfg = Config(model=ModelConfig(name="cnn"), norm=NormConfig(name="gn", groups=8))
    cfg.model.dropout                      # 0.25: each model's defaults live in MODEL_DEFAULTS, once

Keys marked `runtime` (the device, threads, the display, ...) do not change what is trained: resume
accepts a different value, and summaries, sweep directory names and TensorBoard's HParams leave them out.
`runtime_keys()` lists them, `to_dict(cfg)` is the config as results.json records it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from normbench.errors import UserError


class Choice(str, Enum):
    """A key with a fixed set of values: Hydra refuses others at composition. Members are their own
    lowercase names, compare equal to plain strings and print as them."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Optimizer(Choice):
    adam = "adam"  # AdamW
    sgd = "sgd"
    muon = "muon"  # torch.optim.Muon on the hidden 2-D weights, AdamW on the rest (train/optim.py)


class Schedule(Choice):
    cosine = "cosine"
    constant = "constant"


class LrScaling(Choice):
    none = "none"
    linear = "linear"
    sqrt = "sqrt"


class RNNCell(Choice):
    rnn = "rnn"  # tanh
    lstm = "lstm"
    gru = "gru"


class Placement(Choice):
    output = "output"  # the norm after each RNN layer
    recurrent = "recurrent"  # the norm inside the cell, at every time step
    input = "input"  # the norm on each layer's W_x x_t, over the whole sequence (padding enters it undiluted)
    pre = "pre"  # Transformer: the norm before each sublayer, inside the residual branch, and a final norm
    post = "post"  # Transformer: the norm after each residual sum (the original Transformer's)
    peri = "peri"  # Transformer: a norm on each sublayer's input and one on its output before the residual add (Peri-LN)
    mix = "mix"  # Transformer: post in the first model.mix_ratio of the blocks, pre in the rest (Mix-LN)


class Tokens(Choice):
    rows = "rows"  # Transformer tokens: image rows, as the RNN's time steps
    patches = "patches"  # ... 4 x 4 patches (49 tokens of a 28 x 28 image)


class Batching(Choice):
    mixed = "mixed"  # each sample its own random length: a batch mixes lengths
    bucketed = "bucketed"  # each batch's lengths from one narrow bucket: every step sees min_step_samples


class PadValue(Choice):
    zero = "zero"  # padded rows are 0 (the normalized data's mean)
    background = "background"  # padded rows hold the image background (a 0 pixel, normalized)


class Split(Choice):
    fixed = "fixed"  # one validation split and training subset for every run (drawn from seed 0)
    per_seed = "per_seed"  # each run's seed draws its own (runs at one seed still share it)


def runtime(default: Any, **kw) -> Any:
    """A field that does not change what a run computes (see the module docstring)."""
    return field(default=default, metadata={"runtime": True}, **kw)


# Each model's defaults, the only place they are written: `ModelConfig(name=...)`, `model=...` on the
# command line, the bench, the scripts and summarize all read them from here.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    # Flatten -> depth x [linear -> norm -> ReLU] -> linear.
    "mlp": {"hidden": 256, "depth": 2, "dropout": 0.0},
    # Per stage: conv3x3 -> norm -> ReLU -> max-pool; then linear(hidden) -> ReLU -> dropout -> linear.
    "cnn": {"channels": [32, 64], "hidden": 256, "dropout": 0.25},
    # Stem conv3x3 -> norm -> ReLU; per stage (stride 2 from the second) depth x [conv3x3 -> norm -> ReLU ->
    # conv3x3 -> norm + skip -> ReLU]; global average pool -> linear (He et al. 2016's CIFAR ResNet; depth 3 is ResNet-20).
    "resnet": {"channels": [16, 32, 64], "depth": 1, "dropout": 0.0},
    # Image rows as time steps; the norm on each layer's outputs; classify from the last real step.
    # 256 units: 0.860 test accuracy with LN where 128 reached 0.848 (docs/performance.md).
    "rnn": {"hidden": 256, "depth": 1, "cell": "rnn", "placement": "output", "dropout": 0.0},
    # Tokens (rows) -> linear embedding + learned positions -> depth x [attention, MLP] (pre-, post- or peri-norm)
    # -> mean of the real tokens -> linear.
    "transformer": {"hidden": 64, "depth": 4, "heads": 4, "tokens": "rows", "placement": "pre", "qk_norm": "none",
                    "dropout": 0.0, "mix_ratio": 0.25, "layer_scaling": False},
}


@dataclass
class ModelConfig:
    # Options left at null take the model's default from MODEL_DEFAULTS; those a model does not use
    # (an MLP's channels, a CNN's cell) stay null.
    name: Optional[str] = "mlp"  # mlp | cnn | resnet | rnn | transformer
    hidden: Optional[int] = None  # MLP width, RNN hidden size, CNN classifier width, Transformer width
    depth: Optional[int] = None  # MLP hidden layers; RNN stacked layers; Transformer blocks
    channels: Optional[List[int]] = None  # CNN channels, one conv stage each
    cell: Optional[RNNCell] = None  # RNN cell: rnn (tanh) | lstm | gru
    # RNN: output (after each layer) | recurrent (inside the cell) | input (on W_x x_t); Transformer: pre | post
    placement: Optional[Placement] = None
    heads: Optional[int] = None  # Transformer attention heads (they split its width)
    tokens: Optional[Tokens] = None  # Transformer tokens: rows | patches
    qk_norm: Optional[str] = None  # Transformer: a batch-free norm on each head's queries and keys (ln, rms, dyt), none = off
    dropout: Optional[float] = None  # dropout before the classifier
    mix_ratio: Optional[float] = None  # Transformer, placement=mix: the fraction of blocks, the first ones, that are post-LN
    layer_scaling: Optional[bool] = None  # Transformer: block l's norms on its branches' inputs scaled by 1/sqrt(l) (LayerNorm Scaling)

    def __post_init__(self) -> None:
        if self.name is None:  # the schema's unchosen model (see `schema()`): nothing to fill in yet
            return
        for key, value in MODEL_DEFAULTS.get(self.name, {}).items():
            if getattr(self, key) is None:
                setattr(self, key, list(value) if isinstance(value, list) else value)
        if self.cell is not None:
            self.cell = _choice(RNNCell, self.cell, "model.cell")
        if self.placement is not None:
            self.placement = _choice(Placement, self.placement, "model.placement")
        if self.tokens is not None:
            self.tokens = _choice(Tokens, self.tokens, "model.tokens")


@dataclass
class NormConfig:
    # Options left at null take the norm's own default (from its paper); see `normbench norms`.
    name: str = "bn"  # a catalog name: `normbench norms` lists them
    impl: str = "native"  # native (PyTorch kernel) | scratch (written from the definition)
    eps: Optional[float] = None  # added to the variance
    eps_grad: Optional[float] = None  # bn: backpropagate BN's gradient at this eps, output at eps (null = eps's own)
    momentum: Optional[float] = None  # running-statistics update rate (batch norms)
    affine: Optional[bool] = None  # learnable scale and shift
    groups: Optional[int] = None  # channel groups (gn, evonorm); seednorm: heads, each with its own tanh(x_h beta_h)
    masked: Optional[bool] = None  # seq layout: statistics over real tokens only (false = naive, padding counted)
    ghost_batch: Optional[int] = None  # bn, brn, sn: statistics over groups of this many samples (null = whole batch)
    positions: Optional[int] = None  # bn on images: statistics over this many random positions per image (null = all)
    r_max: Optional[float] = None  # brn: final bound on r = sigma_B / sigma (1 = plain BN)
    d_max: Optional[float] = None  # brn: final bound on d = (mu_B - mu) / sigma (0 = plain BN)
    renorm_warmup_frac: Optional[float] = None  # brn: fraction of the run's steps trained as plain BN first
    renorm_r_ramp_frac: Optional[float] = None  # brn: then r_max relaxes linearly over this fraction of the run
    renorm_d_ramp_frac: Optional[float] = None  # brn: and d_max over this fraction of the run
    learn_eps: Optional[bool] = None  # frn: learn eps (null = on for flat/seq, where each channel holds one value)
    alpha_init: Optional[float] = None  # dyt, derf: initial value of the learned scalar alpha in tanh(alpha x), erf(alpha x + s); seednorm: of its alpha vector
    shift_init: Optional[float] = None  # derf: initial value of the learned scalar shift s in erf(alpha x + s)
    target: Optional[str] = None  # norm=custom: your norm, MODULE:NAME (a class or factory taking num_features)
    options: Dict[str, Any] = field(default_factory=dict)  # your norm's options: +norm.options.KEY=VALUE
    track_stats: bool = runtime(False)  # log each norm layer's input mean/std and scale/shift to TensorBoard
    track_every: int = runtime(100)  # ... every this many steps


@dataclass
class DataConfig:
    name: str = "fashion_mnist"  # fashion_mnist | cifar10
    root: Optional[str] = runtime(None)  # where datasets live (null: $NORMBENCH_DATA, else ./data)
    val_size: int = 5000  # training samples held out for validation
    subset: Optional[int] = None  # train on only this many samples (smoke runs)
    split: Split = Split.fixed  # fixed | per_seed: what draws the validation split and the subset
    download: bool = runtime(True)  # let torchvision download when the files are nowhere on disk
    augment: bool = False  # augment training batches on the device (validation and test never are)
    crop_padding: int = 4  # ... random crop of each image zero-padded by this many pixels (0 = no crop)
    hflip: bool = True  # ... mirror half the images left-right

    def __post_init__(self) -> None:
        self.split = _choice(Split, self.split, "data.split")


def data_root(cfg: DataConfig) -> str:
    """`data.root`, else $NORMBENCH_DATA, else ./data."""
    return cfg.root or os.environ.get("NORMBENCH_DATA") or "./data"


def split_seed(cfg: DataConfig, seed: int) -> int:
    """The seed that draws the validation split and `data.subset` of a run with seed `seed`: 0 for every
    run (`data.split=fixed`), else the run's own. Runs with equal split seeds train on the same data."""
    return seed if cfg.split == Split.per_seed else 0


@dataclass
class VarLenConfig:
    # The variable-length regime (docs/regimes.md): rows as time steps, each sample resized to its own length.
    enabled: bool = False  # train on samples resized along their height to random lengths (RNN only)
    design: Optional[str] = None  # which question's design set the keys below (varlen_design=length | padding)
    min_len: int = 10  # shortest training length, in rows
    max_len: int = 28  # longest training length, in rows
    test_lengths: List[int] = field(default_factory=lambda: [10, 14, 20, 28, 36, 42])  # also longer than trained
    precise_bn_lengths: Optional[List[int]] = None  # PreciseBN variants at these lengths (null: test_lengths >= max_len)
    heavy_pad: float = 2.0  # heavy-padding test: each batch padded to this x its longest length
    train_pad: float = 1.0  # training batches padded to this x their longest length (2 = train under heavy padding)
    train_pad_max: Optional[float] = None  # if set, each training batch's factor is drawn from [train_pad, this]
    pad_value: PadValue = PadValue.zero  # zero | background: what padded rows hold
    batching: Batching = Batching.mixed  # mixed | bucketed (docs/regimes.md)
    min_step_samples: int = 32  # bucketed: every trained step's statistics see at least this many samples
    test_seed: int = 0  # draws the mixed test lengths, the same for every run so runs compare

    def __post_init__(self) -> None:
        self.batching = _choice(Batching, self.batching, "varlen.batching")
        self.pad_value = _choice(PadValue, self.pad_value, "varlen.pad_value")


class PackMode(Choice):
    auto = "auto"  # packed where the bench measured packing faster, else members one after another
    packed = "packed"  # always one packed computation
    sequential = "sequential"  # members one after another in this process (the same outputs)


@dataclass
class PackConfig:
    # Packed training (docs/packing.md): members that differ only in seed (and lr) train as one computation,
    # each written as its own run in a subdirectory (seed=3, lr=0.1,seed=3) of the run directory.
    seeds: Optional[List[int]] = None  # one member per seed; replaces `seed`
    lrs: Optional[List[float]] = None  # ... times one per learning rate; replaces `lr`
    mode: PackMode = runtime(PackMode.auto)  # auto | packed | sequential

    def __post_init__(self) -> None:
        self.mode = _choice(PackMode, self.mode, "pack.mode")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    norm: NormConfig = field(default_factory=NormConfig)
    data: DataConfig = field(default_factory=DataConfig)
    varlen: VarLenConfig = field(default_factory=VarLenConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    batch_size: int = 64  # training batch size
    epochs: int = 5  # passes over the training set
    max_steps: Optional[int] = None  # stop after this many optimizer steps (smoke runs, benchmarks)
    optimizer: Optimizer = Optimizer.adam  # adam (AdamW) | sgd
    lr: float = 1e-3  # peak learning rate (at lr_ref_batch when lr_scaling is not none)
    lr_scaling: LrScaling = LrScaling.none  # none | linear | sqrt: lr x (batch_size / lr_ref_batch), or its sqrt
    lr_ref_batch: int = 64  # the batch size at which `lr` applies unscaled
    momentum: float = 0.9  # SGD momentum
    aux_lr: Optional[float] = None  # optimizer=muon: the AdamW group's lr (embeddings, head, gains, biases); null = lr
    weight_decay: float = 0.0  # L2 penalty (decoupled for adam: AdamW)
    schedule: Schedule = Schedule.cosine  # cosine (to 0 over the run, after warmup) | constant
    warmup_steps: int = 0  # linear warmup from 0 to lr
    seed: int = 0  # everything random derives from it
    device: str = runtime("auto")  # auto (cuda > mps > cpu) | cpu | cuda | mps
    threads: Optional[int] = runtime(None)  # torch CPU threads for this run (null = torch's default)
    flush_denormal: bool = runtime(True)  # CPU: subnormal floats as zero (some CPUs run them 10x slower); false: IEEE
    amp: bool = False  # bf16 autocast in the training step (CUDA; works on CPU, rarely faster there)
    compile: bool = runtime(False)  # torch.compile the model (compiles for seconds to minutes; pays off on long runs)
    cudnn_benchmark: bool = runtime(True)  # CUDA only: let cuDNN time its conv algorithms once and keep the fastest
    # the test-time statistics suite after training (studies/default.py: test_acc_train_mode, train_acc_train_mode,
    # test_acc_precise_bn); false: those numbers null, for cells no claim reads them from (a CNN's cost as much
    # as its short training)
    statistics_suite: bool = runtime(True)
    # validation passes over the run, spread evenly, the last epoch always (null: after every epoch); for runs of
    # many short epochs, where a pass each epoch costs as much as the training (results.json's history has these)
    validations: Optional[int] = runtime(None)
    eval_batch_size: int = runtime(250)  # batch size for validation and test passes (250: the CNN's and RNN's fastest here)
    log_every: int = runtime(50)  # steps between progress/TensorBoard updates (the only host syncs in the loop)
    progress: bool = runtime(True)  # rich progress bar and final table
    tensorboard: bool = runtime(True)  # write TensorBoard event files into the run directory
    resume: bool = runtime(False)  # continue from checkpoint.pt in the run directory (set hydra.run.dir to it)
    debug: bool = runtime(False)  # show full tracebacks for user errors (or set NORMBENCH_DEBUG=1)
    # The hypotheses an experiment declares before it runs (normbench/summary/claims.py); recorded with every run,
    # tested by `normbench summarize`. They describe the runs, they do not change them.
    claims: List[Any] = field(default_factory=list, metadata={"runtime": True})
    # normbench study: the hash of the family (claims and protocol) its study.json froze at the start, so each run
    # says which family it was trained for (docs/protocol.md); null outside a study
    family_hash: Optional[str] = runtime(None)

    def __post_init__(self) -> None:
        for key, kind in (("optimizer", Optimizer), ("schedule", Schedule), ("lr_scaling", LrScaling)):
            setattr(self, key, _choice(kind, getattr(self, key), key))


def _choice(kind: type[Choice], value: Any, key: str) -> Choice:
    """`value` as a member of `kind` (library users pass plain strings); a UserError if it is none."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise UserError(f"unknown {key} {value!r}", f"use one of: {choices}") from None


def schema() -> Config:
    """The node Hydra composes onto (the CLI stores it in the ConfigStore): a Config whose model is not
    chosen yet, so that `model=cnn` fills in the CNN's defaults when the composed config becomes a
    `Config`, not the MLP's defaults of a `Config()` built before the group was merged."""
    return Config(model=ModelConfig(name=None))


def runtime_keys(schema: type = Config, prefix: str = "") -> frozenset[str]:
    """The dotted keys marked `runtime` in the schema: {"device", "threads", "data.root", ...}."""
    keys: set[str] = set()
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            keys |= runtime_keys(f.default_factory, f"{prefix}{f.name}.")
        elif f.metadata.get("runtime"):
            keys.add(f"{prefix}{f.name}")
    return frozenset(keys)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config dict with dotted keys: {"model": {"name": "cnn"}} -> {"model.name": "cnn"}."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        flat.update(flatten(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return flat


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as plain JSON/YAML values (choices as their strings), as results.json holds it."""
    def plain(v: Any) -> Any:
        if isinstance(v, Enum):
            return v.value
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return plain(dataclasses.asdict(cfg))
