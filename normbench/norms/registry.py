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

from torch import nn

from normbench.errors import UserError

LAYOUTS = ("flat", "image", "seq")


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
    # WeightNorm / Cosine Norm change the layer before the norm: these build that layer.
    linear: Callable[..., nn.Module] = nn.Linear
    conv2d: Callable[..., nn.Module] = nn.Conv2d
    build: Callable[..., nn.Module] | None = None  # build(num_features, layout, **options)

    @property
    def layouts(self) -> tuple[str, ...]:
        return tuple(layout for layout in LAYOUTS if layout not in self.unsupported)

    def options(self) -> dict[str, object]:
        """The options `build` accepts, with their defaults."""
        sig = inspect.signature(self.build)
        return {
            p.name: p.default
            for p in sig.parameters.values()
            if p.kind is p.KEYWORD_ONLY
        }


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
    if unknown:
        valid = ", ".join(spec.options()) or "none"
        raise UserError(f"{spec.name} takes no option {', '.join(sorted(unknown))}", f"its options are: {valid}")


def _check(spec: NormSpec, layout: str, options: dict) -> None:
    if layout not in LAYOUTS:
        raise UserError(f"unknown layout {layout!r}", f"use one of: {', '.join(LAYOUTS)}")
    if layout in spec.unsupported:
        raise UserError(f"{spec.name} is not defined on {layout} features: {spec.unsupported[layout]}")
    _check_options(spec, options)


def create(name: str, num_features: int, layout: str, **options) -> nn.Module:
    """Build norm `name` for `num_features` channels in `layout`; unknown options or layouts fail."""
    spec = get(name)
    _check(spec, layout, options)
    return spec.build(num_features, layout, **options)


class NormFactory:
    """A norm constructor bound to its options: what a model receives, so it never names a norm.

    `factory(num_features, layout)` builds the activation norm; `.linear(...)`/`.conv2d(...)` build the
    layer before it (plain for most norms, reparameterized for WeightNorm and Cosine Norm).
    """

    def __init__(self, name: str, **options):
        self.spec = get(name)
        self.name, self.options = name, options
        _check_options(self.spec, options)

    def __call__(self, num_features: int, layout: str) -> nn.Module:
        _check(self.spec, layout, self.options)
        return self.spec.build(num_features, layout, **self.options)

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> nn.Module:
        return self.spec.linear(in_features, out_features, bias=bias)

    def conv2d(self, in_channels: int, out_channels: int, kernel_size: int, **kwargs) -> nn.Module:
        return self.spec.conv2d(in_channels, out_channels, kernel_size, **kwargs)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"NormFactory({self.name!r}{', ' + opts if opts else ''})"


def factory(name: str, **options) -> NormFactory:
    """A constructor for norm `name` with `options`; see `NormFactory`."""
    return NormFactory(name, **options)
