"""The typed config schema: every key `normbench train` accepts, with its meaning and default.

Registered in Hydra's ConfigStore by `normbench.cli`, so a misspelled key or a wrong type fails at
composition, before any work. The rest of the package reads these dataclasses, never Hydra.

    cfg = Config(model=ModelConfig(name="cnn"), norm=NormConfig(name="gn", groups=8))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class ModelConfig:
    name: str = "mlp"  # mlp | cnn | rnn
    hidden: int = 256  # MLP width, RNN hidden size, CNN classifier width
    depth: int = 2  # MLP hidden layers; RNN stacked layers
    channels: List[int] = field(default_factory=lambda: [32, 64])  # CNN channels, one conv stage each
    cell: str = "rnn"  # RNN cell: rnn (tanh) | lstm | gru
    placement: str = "output"  # RNN norm placement: output (after each layer) | recurrent (inside the cell)
    dropout: float = 0.0  # dropout before the classifier


@dataclass
class NormConfig:
    # Options left at null take the norm's own default (from its paper); see `normbench norms`.
    name: str = "bn"  # a catalog name: `normbench norms` lists them
    impl: str = "native"  # native (PyTorch kernel) | scratch (written from the definition)
    eps: Optional[float] = None  # added to the variance
    momentum: Optional[float] = None  # running-statistics update rate (batch norms)
    affine: Optional[bool] = None  # learnable scale and shift
    groups: Optional[int] = None  # channel groups (gn, evonorm)
    masked: Optional[bool] = None  # seq layout: statistics over real tokens only (false = naive, padding counted)
    r_max: Optional[float] = None  # brn: final bound on r = sigma_B / sigma (1 = plain BN)
    d_max: Optional[float] = None  # brn: final bound on d = (mu_B - mu) / sigma (0 = plain BN)
    renorm_warmup: Optional[int] = None  # brn: steps of plain BN before r_max, d_max relax
    renorm_ramp: Optional[int] = None  # brn: steps over which r_max, d_max relax linearly to their final values
    learn_eps: Optional[bool] = None  # frn: learn eps (null = on for flat/seq, where each channel holds one value)
    track_stats: bool = False  # log each norm layer's input mean/std and scale/shift to TensorBoard
    track_every: int = 100  # ... every this many steps


@dataclass
class DataConfig:
    name: str = "fashion_mnist"  # fashion_mnist | cifar10
    root: str = "${oc.env:NORMBENCH_DATA,./data}"  # where datasets live
    val_size: int = 5000  # training samples held out for validation
    subset: Optional[int] = None  # train on only this many samples (smoke runs)
    download: bool = True  # let torchvision download when the files are nowhere on disk
    augment: bool = False  # augment training batches on the device (validation and test never are)
    crop_padding: int = 4  # ... random crop of each image zero-padded by this many pixels (0 = no crop)
    hflip: bool = True  # ... mirror half the images left-right


@dataclass
class VarLenConfig:
    # The variable-length regime (DESIGN.md): rows as time steps, each sample resized to its own length.
    enabled: bool = False  # train on samples resized along their height to random lengths (RNN only)
    min_len: int = 10  # shortest training length, in rows
    max_len: int = 28  # longest training length, in rows
    test_lengths: List[int] = field(default_factory=lambda: [10, 14, 20, 28, 36, 42])  # also longer than trained
    heavy_pad: float = 2.0  # heavy-padding test: each batch padded to this x its longest length
    train_pad: float = 1.0  # training batches padded to this x their longest length (2 = train under heavy padding)
    test_seed: int = 0  # draws the mixed test lengths, the same for every run so runs compare


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    norm: NormConfig = field(default_factory=NormConfig)
    data: DataConfig = field(default_factory=DataConfig)
    varlen: VarLenConfig = field(default_factory=VarLenConfig)
    batch_size: int = 64  # training batch size
    epochs: int = 5  # passes over the training set
    max_steps: Optional[int] = None  # stop after this many optimizer steps (smoke runs, benchmarks)
    optimizer: str = "adam"  # adam | sgd
    lr: float = 1e-3  # peak learning rate (at lr_ref_batch when lr_scaling is not none)
    lr_scaling: str = "none"  # none | linear | sqrt: lr x (batch_size / lr_ref_batch), or its square root
    lr_ref_batch: int = 64  # the batch size at which `lr` applies unscaled
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 0.0  # L2 penalty (decoupled for adam: AdamW)
    schedule: str = "cosine"  # cosine (to 0 over the run, after warmup) | constant
    warmup_steps: int = 0  # linear warmup from 0 to lr
    seed: int = 0  # everything random derives from it
    device: str = "auto"  # auto (cuda > mps > cpu) | cpu | cuda | mps
    threads: Optional[int] = None  # torch CPU threads for this run (null = torch's default)
    amp: bool = False  # bf16 autocast in the training step (CUDA; works on CPU, rarely faster there)
    compile: bool = False  # torch.compile the model (compiles for seconds to minutes; pays off on long runs)
    cudnn_benchmark: bool = True  # CUDA only: let cuDNN time its conv algorithms once and keep the fastest
    eval_batch_size: int = 1000  # batch size for validation and test passes
    log_every: int = 50  # steps between progress/TensorBoard updates (the only host syncs in the loop)
    progress: bool = True  # rich progress bar and final table
    tensorboard: bool = True  # write TensorBoard event files into the run directory
    resume: bool = False  # continue from checkpoint.pt in the run directory (set hydra.run.dir to it)
    debug: bool = False  # show full tracebacks for user errors (or set NORMBENCH_DEBUG=1)

