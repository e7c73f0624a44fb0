"""`normbench norms check NAME|MODULE:NAME`: the contract every catalog norm is tested against, run on any
norm, yours included, one line per item.

    items = check("my_norm:ScaleNorm")        # [Item("shape flat", True, "(6, 16) -> (6, 16)"), ...]
    normbench norms check my_norm:ScaleNorm   # prints them; exit 1 on any failure

Everything runs in float64 on the CPU, on small random inputs:
- shape, per layout it declares: the output has the input's shape and is finite (seq with a padding mask);
- train and eval: both modes run; in eval mode a sample's output does not depend on the rest of its batch;
- batch dependence: in training mode, does a sample's output move when the others change? It must not if
  the norm declares itself batch-free;
- state: state_dict survives torch.save and load into a fresh build (same outputs in both modes), and a
  training step from that loaded state equals the step from the original: resume is bit-identical;
- packing: two members of a small model packed (normbench.pack, its per-member fallback for a layer
  with no packed form) equal the two models run apart, forward and gradients;
- gradients: torch.autograd.gradcheck (finite differences) on the input and every parameter, unless the
  norm declares that its backward is not its forward's derivative (`exact_gradient = False`: Batch
  Renorm holds r and d constant, PowerNorm back-propagates through its running statistics).
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass

import torch
from torch import nn

from normbench.errors import UserError
from normbench.norms.registry import NormFactory, get
from normbench.norms.user import CUSTOM, factory

C, N = 16, 6  # channels (every catalog norm's groups divide it), samples
SHAPES = {"flat": (N, C), "image": (N, C, 3, 3), "seq": (N, 5, C)}
# Each layout's smallest model, to pack: an MLP normalizes flat features, a CNN images, an RNN sequences.
MODELS = {"flat": ("mlp", (1, 4, 4)), "image": ("cnn", (1, 4, 4)), "seq": ("rnn", (1, 4, 4))}


@dataclass(frozen=True)
class Item:
    name: str
    ok: bool
    why: str


def check(norm: str, **options) -> list[Item]:
    """Every item of the contract for `norm` (a catalog or installed name, or MODULE:NAME), in float64."""
    make = factory(CUSTOM, target=norm, **options) if ":" in norm else factory(norm, **options)
    spec = get(make.name)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        items = [_item(f"shape {layout}", _shape, make, layout) for layout in spec.layouts]
        layout = spec.layouts[0]
        items += [_item("train and eval", _modes, make, layout),
                  _item("batch dependence", _batch_dependence, make, layout, spec.batch_dependent),
                  _item("state round trip and resume", _state, make, layout),
                  _item("packing", _packing, make, layout),
                  _item("gradients", _gradients, make, layout) if spec.exact_gradient else
                  Item("gradients", True, "not checked: it declares a backward other than its forward's derivative")]
    finally:
        torch.set_default_dtype(old)
    return items


def _item(name: str, test, *args) -> Item:
    """One item: its test's note when it passes, what failed when it raises (an assertion or any error)."""
    torch.manual_seed(0)
    try:
        return Item(name, True, test(*args))
    except AssertionError as e:
        return Item(name, False, str(e))
    except Exception as e:  # noqa: BLE001  the user's layer may raise anything: that is the finding
        return Item(name, False, f"{type(e).__name__}: {e}")


def _input(layout: str, n: int = N) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A random input in `layout` and, on seq, a mask whose last sample is padded after 3 steps."""
    x = torch.randn(n, *SHAPES[layout][1:]) * 2 + 0.5
    if layout != "seq":
        return x, None
    mask = torch.ones(n, x.shape[1], dtype=torch.bool)
    mask[-1, 3:] = False
    return x, mask


def _run(module: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return module(x) if mask is None else module(x, mask)


def _built(make: NormFactory, layout: str) -> nn.Module:
    return make(C, layout).double()


def _shape(make: NormFactory, layout: str) -> str:
    x, mask = _input(layout)
    y = _run(_built(make, layout).train(), x, mask)
    assert y.shape == x.shape, f"{tuple(x.shape)} in, {tuple(y.shape)} out: a norm keeps its input's shape"
    assert torch.isfinite(y).all(), "non-finite outputs on a finite input"
    return f"{tuple(x.shape)} -> {tuple(y.shape)}"


def _modes(make: NormFactory, layout: str) -> str:
    module = _built(make, layout)
    x, mask = _input(layout)
    _run(module.train(), x, mask)  # running statistics, where it keeps them, away from their start
    module.eval()
    with torch.no_grad():
        whole = _run(module, x, mask)
        first = _run(module, x[:1], None if mask is None else mask[:1])
    assert torch.isfinite(whole).all(), "non-finite outputs in eval mode"
    assert torch.allclose(whole[:1], first, rtol=1e-9, atol=1e-12), \
        "in eval mode a sample's output depends on the rest of its batch (test scores would depend on batching)"
    return "both run; eval mode scores each sample on its own"


def _batch_dependence(make: NormFactory, layout: str, declared: bool) -> str:
    module = _built(make, layout).train()
    x, mask = _input(layout)
    other = x.clone()
    other[1:] = torch.randn_like(other[1:]) * 3 - 1
    a = _run(copy.deepcopy(module), x, mask)[0]
    b = _run(copy.deepcopy(module), other, mask)[0]
    mixes = not torch.allclose(a, b, rtol=1e-9, atol=1e-12)
    if mixes and not declared:
        raise AssertionError("in training a sample's output moves with the other samples, but the norm "
                             "declares itself batch-free: set batch_dependent = True on it")
    if not mixes and declared:
        return "declared batch-dependent; in this forward a sample's output did not read the others"
    return "reads the batch, as declared" if mixes else "batch-free, as declared"


def _state(make: NormFactory, layout: str) -> str:
    x, mask = _input(layout)
    torch.manual_seed(1)
    trained = _built(make, layout).train()
    _step(trained, x, mask)
    buffer = io.BytesIO()
    torch.save(trained.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(2)  # another initialization: only the loaded state may make it equal
    loaded = _built(make, layout)
    loaded.load_state_dict(torch.load(buffer, weights_only=True))
    for mode in (False, True):
        trained.train(mode), loaded.train(mode)
        with torch.no_grad():
            assert torch.equal(_run(copy.deepcopy(trained), x, mask), _run(copy.deepcopy(loaded), x, mask)), \
                f"the loaded state gives other outputs in {'training' if mode else 'eval'} mode"
    trained.train(), loaded.train()
    _step(trained, x, mask)
    _step(loaded, x, mask)
    for (name, a), b in zip(trained.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), f"{name} differs after one step from the loaded state: resume is not exact"
    return f"{len(trained.state_dict())} tensors; a step after loading equals the original's"


def _step(module: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> None:
    """One SGD step on a loss that reads every output."""
    params = [p for p in module.parameters() if p.requires_grad]
    loss = (_run(module, x, mask) * torch.linspace(-1, 1, x.shape[-1])).pow(2).mean()
    if params:
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p.grad = None


def _packing(make: NormFactory, layout: str) -> str:
    from normbench import models
    from normbench.config import ModelConfig
    from normbench.pack.model import PackedModel, unpack

    name, shape = MODELS[layout]
    cfg = ModelConfig(name=name, hidden=C, depth=1, dropout=0.0, **({"channels": [C]} if name == "cnn" else {}))
    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        members.append(models.create(cfg, make, shape, 10).double().train())
    packed = PackedModel(copy.deepcopy(members))
    x = torch.randn(2, N, *shape)
    out = packed(x)
    out.pow(2).sum().backward()
    unpack(packed)
    for k, member in enumerate(members):
        alone = member(x[k])
        alone.pow(2).sum().backward()
        assert torch.allclose(out[k], alone, rtol=1e-9, atol=1e-10), f"member {k}'s packed output differs from its own"
    grads = [p.grad for p in packed.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads), "no finite gradient reached the pack"
    return f"2 {name.upper()} members packed equal their separate models (float64)"


def _gradients(make: NormFactory, layout: str) -> str:
    module = _built(make, layout).train()
    x, mask = _input(layout, n=4)
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    params = [p.detach().clone().requires_grad_() for n, p in module.named_parameters() if p.requires_grad]

    def f(x, *values):  # a fresh copy each call: running statistics and step counts never move between calls
        fresh = copy.deepcopy(module)
        return torch.func.functional_call(fresh, dict(zip(names, values)), (x,) if mask is None else (x, mask))

    ok = torch.autograd.gradcheck(f, (x.requires_grad_(), *params), eps=1e-6, atol=1e-5, raise_exception=False)
    assert ok, "autograd's gradients differ from finite differences (torch.autograd.gradcheck)"
    return f"finite differences agree on the input and {len(params)} parameter tensors"


def main(argv: list[str], say=print) -> int:
    """`normbench norms check NAME [KEY=VALUE ...]`: one line per item, exit 1 on any failure."""
    if not argv or argv[0].startswith("-"):
        raise UserError("usage: normbench norms check NAME|MODULE:NAME [OPTION=VALUE ...]",
                        "e.g. normbench norms check my_norm:ScaleNorm eps=1e-6")
    options = {}
    for arg in argv[1:]:
        key, eq, value = arg.partition("=")
        if not eq:
            raise UserError(f"{arg!r} is not OPTION=VALUE", "give the norm's options as key=value")
        options[key] = _value(value)
    items = check(argv[0], **options)
    for item in items:
        say(f"{'pass' if item.ok else 'FAIL'}  {item.name}: {item.why}")
    failed = [i for i in items if not i.ok]
    say(f"{argv[0]}: {len(items) - len(failed)} of {len(items)} passed")
    return 1 if failed else 0


def _value(text: str):
    """An option's value as YAML reads it on the command line (1e-6, true, 8)."""
    import yaml

    return yaml.safe_load(text)
