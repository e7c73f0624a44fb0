"""Your own norm, without editing normbench: from a module on the command line, or from an installed
package's entry point, registered beside the catalog's and built by the same factory.

    # my_norm.py: a class (or a factory function) taking the channel count first, timm's convention
    class ScaleNorm(nn.Module):
        layouts = ("flat", "seq")       # where it is defined (default: all three); `norms check` tries each
        batch_dependent = False         # does a sample's output read the batch's others? (default False)
        exact_gradient = True           # is its backward its forward's derivative? (default True)
        paper = "Nguyen & Salazar 2019, arXiv 1910.05895"
        def __init__(self, num_features, eps=1e-5): ...
        def forward(self, x, mask=None): ...   # (N, C) | (N, C, H, W) | (N, T, C); mask (N, T) on seq

    normbench train norm=custom norm.target=my_norm:ScaleNorm +norm.options.eps=1e-6
    normbench norms check my_norm:ScaleNorm             # the catalog's contract, one line per item

    # pyproject.toml of an installed package: `norm=scale` then works like a shipped name
    [project.entry-points."normbench.norms"]
    scale = "my_norm:ScaleNorm"

A target may take `layout` as a keyword (it is then told which of "flat", "image", "seq" it is built for)
and any options with defaults after the channel count; a forward without `mask` is handed the tensor alone.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from importlib.metadata import entry_points
from typing import Any, Callable

from torch import nn

from normbench.errors import UserError
from normbench.norms import registry
from normbench.norms.registry import LAYOUTS, NormFactory, NormSpec

CUSTOM = "custom"  # norm=custom: the norm is the one `norm.target` names
GROUP = "normbench.norms"  # the entry-point group an installed package registers its norms in
log = logging.getLogger(__name__)


class _TensorOnly(nn.Module):
    """A user's norm whose forward takes the tensor alone, given the models' (x, mask) call."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x, mask=None):
        return self.norm(x)


def load(target: str) -> Callable[..., nn.Module]:
    """The class or factory `target` ("package.module:Name") names; a user error saying why if none."""
    module, _, name = (target or "").partition(":")
    if not module or not name:
        raise UserError(f"norm.target={target!r} is not MODULE:NAME", "e.g. norm.target=my_norm:ScaleNorm")
    if "" not in sys.path:
        sys.path.insert(0, "")  # a module in the working directory, as `python -m` finds it
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise UserError(f"cannot import {module!r} for norm.target={target} ({e})",
                        "put the module on PYTHONPATH or in the working directory") from None
    except Exception as e:  # the module itself fails as it loads (a SyntaxError, an error at its top level)
        raise UserError(f"importing {module!r} for norm.target={target} failed: {type(e).__name__}: {e}",
                        f"fix the module: python -c 'import {module}' shows where") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{module} has no {name!r} (norm.target={target})", "name a class or function in it")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UserError(f"{target} is not a class or function", "name a norm class, or a factory returning one")
    return obj


def _options(obj: Callable) -> dict[str, Any]:
    """The options a target takes: its parameters with defaults after the channel count, `layout` aside."""
    try:
        params = list(inspect.signature(obj).parameters.values())[1:]
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot read the parameters of {getattr(obj, '__name__', obj)!r} ({e})",
                        "name a Python class or function taking the channel count first") from None
    return {p.name: p.default for p in params if p.default is not p.empty and p.name != "layout"
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _builder(obj: Callable, options: dict[str, Any]) -> Callable[..., nn.Module]:
    """build(num_features, layout, **options), the catalog's signature, around a user's target."""
    told_layout = "layout" in inspect.signature(obj).parameters

    def build(num_features: int, layout: str, **kwargs) -> nn.Module:
        try:
            module = obj(num_features, **kwargs, **({"layout": layout} if told_layout else {}))
        except Exception as e:  # the user's constructor: its error is theirs to fix, said in one line
            raise UserError(f"{_named(obj)}({num_features}{''.join(f', {k}={v!r}' for k, v in kwargs.items())}) "
                            f"raised {type(e).__name__}: {' '.join(str(e).split())[:300]}", _CHECK) from None
        if not isinstance(module, nn.Module):
            raise UserError(f"{getattr(obj, '__name__', obj)}({num_features}) returned {type(module).__name__}, "
                            "not an nn.Module", "return a module from the norm's class or factory")
        forward = inspect.signature(module.forward).parameters
        module.register_forward_hook(_same_shape)  # the models' contract: a norm keeps its input's shape
        return module if len(forward) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in forward.values()) \
            else _TensorOnly(module)

    # its options as keyword-only parameters: the registry reads and checks them from the signature
    build.__signature__ = inspect.Signature(
        [inspect.Parameter("num_features", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         inspect.Parameter("layout", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in options.items()])
    return build


_CHECK = "fix the norm: `normbench norms check MODULE:NAME` runs the catalog's contract on it"


def _named(obj) -> str:
    return getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))


def _same_shape(module: nn.Module, args: tuple, out) -> None:
    """A user's norm returned another shape than its input's: one line, not the model's error further on."""
    if args and hasattr(out, "shape") and out.shape != args[0].shape:
        raise UserError(f"the norm {_named(type(module))} turned a {tuple(args[0].shape)} input into "
                        f"{tuple(out.shape)}", _CHECK)


def spec_of(name: str, target: str, obj: Callable) -> NormSpec:
    """What the catalog knows of a norm, from what the target declares, with the defaults `norms check`
    verifies: every layout, batch-free."""
    layouts = getattr(obj, "layouts", LAYOUTS)
    if isinstance(layouts, str) or not isinstance(layouts, (tuple, list)) or not layouts:
        raise UserError(f"{target} declares layouts = {layouts!r}",
                        f"declare a non-empty tuple of some of: {', '.join(LAYOUTS)} (e.g. layouts = (\"seq\",))")
    layouts = tuple(layouts)
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        raise UserError(f"{target} declares unknown layouts {sorted(unknown)}", f"use some of: {', '.join(LAYOUTS)}")
    return NormSpec(
        name=name, full_name=getattr(obj, "full_name", getattr(obj, "__name__", name)),
        stats_over=getattr(obj, "stats_over", "(declared by its author)"),
        batch_dependent=bool(getattr(obj, "batch_dependent", False)),
        params=getattr(obj, "params", "(its own)"), paper=getattr(obj, "paper", target),
        exact_gradient=bool(getattr(obj, "exact_gradient", True)),
        unsupported={layout: f"{target} declares layouts {', '.join(layouts)}" for layout in LAYOUTS
                     if layout not in layouts})


def register_target(target: str, name: str | None = None) -> str:
    """Register the norm `target` names (under `name`, else the target itself) and return its registry
    name; registering the same target again returns the same name."""
    name = name or target
    if name in registry.names():
        return name
    obj = load(target)
    options = _options(obj)
    registry.register(spec_of(name, target, obj))(_builder(obj, options))
    return name


def load_entry_points() -> None:
    """Register every norm an installed package declares in the `normbench.norms` entry-point group. One
    that cannot be loaded, or that takes a catalog name, is skipped with a warning: the others still work."""
    for ep in entry_points(group=GROUP):
        if ep.name in registry.names() or ep.name == CUSTOM:
            log.warning("the norm %r from %s is already a normbench name: skipped", ep.name, ep.value)
            continue
        try:
            register_target(ep.value, ep.name)
        except Exception as e:  # whatever a package's module raises: the other norms and commands still work
            log.warning("the norm %r (%s) could not be loaded: %s", ep.name, ep.value, e)


def entry_point_names() -> list[str]:
    """The names installed packages declare, read from their metadata without importing them."""
    return [ep.name for ep in entry_points(group=GROUP)]


def factory(name: str, target: str | None = None, **options) -> NormFactory:
    """A constructor for norm `name` with `options`: a catalog or installed name, or `custom` with the
    `target` it names (MODULE:NAME)."""
    if name == CUSTOM:
        if not target:
            raise UserError("norm=custom needs norm.target", "e.g. norm=custom norm.target=my_norm:ScaleNorm")
        name = register_target(target)
    elif target:
        raise UserError(f"norm.target={target} is for norm=custom, not norm={name}",
                        f"use norm=custom norm.target={target}, or drop norm.target")
    return NormFactory(name, **options)
