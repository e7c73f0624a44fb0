"""The norm registry: one dict from a short lowercase name to a `NormSpec`, and the factories.

    from normbench import norms
    ln = norms.create("ln", 64, "seq")           # a module: forward(x, mask=None) on (N, T, C)
    make = norms.factory("gn", groups=8)          # a constructor: make(num_features, layout)
    block = nn.Sequential(make.conv2d(3, 32, 3, padding=1), make(32, "image"), nn.ReLU())

A norm is registered with `@register(NormSpec(...))` on its build function, in the module of its
family (batch.py, layer.py, ...). Layouts: "flat" (N, C), "image" (N, C, H, W), "seq" (N, T, C).
Every module built for "seq" takes an optional boolean `mask` (N, T), True = real token.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from normbench.errors import UserError
from normbench.norms.batch_stats import BatchStatistics

LAYOUTS = ("flat", "image", "seq")
IMPLS = ("native", "scratch")
# Modules a factory builds carry this attribute, (norm name, layout or "layer"), so probe.py can find them.
TAG = "normbench_norm"


def check_impl(impl: str) -> str:
    """`impl` picks torch's kernel ("native") or the from-scratch twin written from the definition."""
    if impl not in IMPLS:
        raise UserError(f"unknown norm.impl {impl!r}", "use native (PyTorch kernels) or scratch (from the definition)")
    return impl


# (norm name, "norm" | "linear" | "conv2d") -> the from-scratch twin of that builder (norms/scratch.py
# registers them with `twin`): called as the native builder is, with its options and their defaults.
_TWINS: dict[tuple[str, str], Callable[..., nn.Module]] = {}


def twin(name: str, role: str = "norm"):
    """Decorator: register the from-scratch twin of norm `name`'s builder `role` (the norm itself, or the
    linear / conv2d layer a reparameterizing norm builds). `norm.impl=scratch` picks it, here only."""

    def deco(build):
        _TWINS[name, role] = build
        return build

    return deco


def _implementation(name: str, role: str, native: Callable[..., nn.Module], options: dict) -> Callable[..., nn.Module]:
    """The builder `options["impl"]` selects for `role` (removing impl from `options`): `native`, or its
    twin. The one place normbench chooses between a PyTorch kernel and its from-scratch twin."""
    if check_impl(options.pop("impl", "native")) == "scratch":
        return _TWINS.get((name, role), native)  # wn's norm is an identity either way: its twins are layers
    return native


def keyword_options(fn: Callable) -> dict[str, object]:
    """A function's keyword-only parameters and their defaults: a build function's options."""
    return {p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}


@dataclass(frozen=True)
class NormSpec:
    """What a norm is, for the registry, for `normbench norms`, and for the models that use it."""

    name: str
    full_name: str
    stats_over: str  # what its statistics are computed over, in words
    batch_dependent: bool  # does one sample's output depend on the others in the batch (in training)?
    params: str  # its learnable parameters, in words
    paper: str
    # layout -> why it is not defined there and what to use instead
    unsupported: dict[str, str] = field(default_factory=dict)
    # FRN (its TLU) and EvoNorm-S0 (its sigmoid gate) replace the activation after the norm too.
    own_activation: bool = False
    # WeightNorm / Cosine Norm change the layer before the norm: these build that layer.
    linear: Callable[..., nn.Module] = nn.Linear
    conv2d: Callable[..., nn.Module] = nn.Conv2d
    build: Callable[..., nn.Module] | None = None  # build(num_features, layout, **options)
    # False where the backward is by design not the forward's derivative (Batch Renorm's r and d held
    # constant; PowerNorm's backward through its running statistics): `norms check` skips gradcheck then.
    exact_gradient: bool = True

    @property
    def layouts(self) -> tuple[str, ...]:
        return tuple(layout for layout in LAYOUTS if layout not in self.unsupported)

    def options(self) -> dict[str, object]:
        """The options `build` accepts, with their defaults; `impl` where a from-scratch twin exists."""
        twins = any(name == self.name for name, _ in _TWINS)
        return {**keyword_options(self.build), **({"impl": "native"} if twins else {})}

    @property
    def reparameterizes(self) -> bool:
        """Does this norm change the layer before it (WeightNorm, Cosine Norm) rather than its output?"""
        return self.linear is not nn.Linear or self.conv2d is not nn.Conv2d


_REGISTRY: dict[str, NormSpec] = {}


def register(spec: NormSpec):
    """Decorator: register `build(num_features, layout, *, option=default, ...)` under `spec.name`."""

    def deco(build):
        if spec.name in _REGISTRY:
            raise KeyError(f"norm {spec.name!r} is registered twice")
        _REGISTRY[spec.name] = NormSpec(**{**spec.__dict__, "build": build})
        return build

    return deco


def names() -> list[str]:
    """Every catalog name, in catalog order."""
    return list(_REGISTRY)


def get(name: str) -> NormSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown norm {name!r}", f"choose one of: {', '.join(names())}") from None


def _check_options(spec: NormSpec, options: dict) -> None:
    unknown = set(options) - set(spec.options())
    if "ghost_batch" in unknown:
        ghosts = ", ".join(s.name for s in _REGISTRY.values() if "ghost_batch" in s.options())
        raise UserError(f"{spec.name} is batch-independent, so there is no batch statistic for norm.ghost_batch "
                        "to split", f"ghost_batch applies to {ghosts}; leave norm.ghost_batch=null")
    if unknown == {"impl"}:
        with_impl = ", ".join(s.name for s in _REGISTRY.values() if "impl" in s.options())
        raise UserError(f"{spec.name} has no PyTorch kernel, so no from-scratch twin to select with norm.impl",
                        f"impl applies to {with_impl}; leave norm.impl=native")
    if unknown:
        valid = ", ".join(spec.options()) or "none"
        raise UserError(f"{spec.name} takes no option {', '.join(sorted(unknown))}", f"its options are: {valid}")


def _without_null_ghost(options: dict) -> dict:
    """ghost_batch=None means the whole batch, which every norm computes: not an option to refuse."""
    return {k: v for k, v in options.items() if not (k == "ghost_batch" and v is None)}


def _check(spec: NormSpec, layout: str, options: dict) -> None:
    if layout not in LAYOUTS:
        raise UserError(f"unknown layout {layout!r}", f"use one of: {', '.join(LAYOUTS)}")
    if layout in spec.unsupported:
        raise UserError(f"{spec.name} is not defined on {layout} features: {spec.unsupported[layout]}")
    _check_options(spec, options)


def create(name: str, num_features: int, layout: str, **options) -> nn.Module:
    """Build norm `name` for `num_features` channels in `layout`; unknown options or layouts fail."""
    spec = get(name)
    options = _without_null_ghost(options)
    _check(spec, layout, options)
    options = {**spec.options(), **options}  # a twin takes the native builder's defaults, never its own
    build = _implementation(name, "norm", spec.build, options)
    module = build(num_features, layout, **options)
    setattr(module, TAG, (name, layout))
    return module


class NormFactory:
    """A norm constructor bound to its options: what a model receives, so it never names a norm.

    `factory(num_features, layout)` builds the activation norm; `.linear(...)`/`.conv2d(...)` build the
    layer before it (plain for most norms, reparameterized for WeightNorm and Cosine Norm).
    """

    def __init__(self, name: str, **options):
        self.spec = get(name)
        options = _without_null_ghost(options)
        self.name, self.options = name, options
        _check_options(self.spec, options)

    def __call__(self, num_features: int, layout: str) -> nn.Module:
        return create(self.name, num_features, layout, **self.options)

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> nn.Module:
        return self._layer("linear", self.spec.linear, in_features, out_features, bias=bias)

    def conv2d(self, in_channels: int, out_channels: int, kernel_size: int, **kwargs) -> nn.Module:
        return self._layer("conv2d", self.spec.conv2d, in_channels, out_channels, kernel_size, **kwargs)

    def _layer(self, role: str, builder: Callable[..., nn.Module], *args, **kwargs) -> nn.Module:
        """A layer builder receives the norm options it names as keyword-only parameters (e.g. impl)."""
        if builder in (nn.Linear, nn.Conv2d):
            return builder(*args, **kwargs)
        builder = _implementation(self.name, role, builder, dict(self.options))
        named = keyword_options(builder)
        layer = builder(*args, **kwargs, **{k: v for k, v in self.options.items() if k in named})
        setattr(layer, TAG, (self.name, "layer"))
        return layer

    @property
    def reparameterizes(self) -> bool:
        return self.spec.reparameterizes

    def activation(self) -> nn.Module:
        """The activation to put after the norm: ReLU, or nothing for a norm that includes its own."""
        return nn.Identity() if self.spec.own_activation else nn.ReLU()

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"NormFactory({self.name!r}{', ' + opts if opts else ''})"


def factory(name: str, **options) -> NormFactory:
    """A constructor for norm `name` with `options`; see `NormFactory`."""
    return NormFactory(name, **options)


def batch_free_names(layouts=(), *, own_layer: bool = False) -> list[str]:
    """The catalog's batch-independent norms (`none` left out) defined on every one of `layouts`; with
    `own_layer`, only those that are a layer of their own (not a reparameterization of the layer before)."""
    return [n for n, spec in _REGISTRY.items() if n != "none" and not spec.batch_dependent
            and all(layout in spec.layouts for layout in layouts) and not (own_layer and spec.reparameterizes)]


def has_running_statistics(module: nn.Module) -> bool:
    """Does `module` keep running statistics that evaluation normalizes with (bn, brn, sn, a recurrent
    step's copy, a pack's BN)? What PreciseBN re-estimates."""
    return torch.is_tensor(getattr(module, "running_mean", None)) and torch.is_tensor(getattr(module, "running_var", None))


def is_batch_dependent(module: nn.Module) -> bool:
    """The one definition: does `module`'s output in training mode depend on the other samples of its batch?
    True for the batch-statistics protocol, torch's BatchNorm, anything with running statistics, and any
    module the catalog built from a norm whose spec says `batch_dependent` (not the layer of WN / CN)."""
    if isinstance(module, (BatchStatistics, nn.modules.batchnorm._BatchNorm)) or has_running_statistics(module):
        return True
    tag = getattr(module, TAG, None)
    return tag is not None and tag[1] != "layer" and _REGISTRY[tag[0]].batch_dependent
