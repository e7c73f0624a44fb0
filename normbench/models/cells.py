"""Recurrent layers built from a norm constructor, for the RNN model's three norm placements.

    layer = recurrent_layer("lstm", 28, 128, norms.factory("bn"), placement="recurrent")
    out = layer(seq, mask)        # (N, T, 128); mask (N, T) True on real steps, or None

placement="output": torch's fused nn.RNN / nn.LSTM / nn.GRU, the norm goes on the layer's outputs (the
model does that). Norms that change the layer itself (WeightNorm, Cosine Norm) get a Python-stepped layer
whose matrices come from the norm's linear builder, for either placement.

placement="input": the norm on W_x x_t over the whole padded sequence at once (a Python-stepped layer): the
place where padding enters a naive BN's statistics undiluted, every padded step giving one constant W_x pad.

placement="recurrent": the norm sits inside the cell at every time step, which PyTorch does not ship.
A batch-dependent norm (bn, brn, sn) takes recurrent BN's form, Cooijmans et al. 2016 (arXiv 1603.09025),
eq. (6-8): W_x x_t and W_h h_{t-1} are normalized separately, each with gamma initialized to 0.1 (their
section 5 and figure 1: gamma = 1 saturates tanh and kills gradients through time) and no shift of its
own, and the one bias b is added to their sum:
  rnn   h_t = tanh(BN_x(W_x x_t) + BN_h(W_h h_{t-1}) + b)            (eq. 6's form for a tanh cell)
  lstm  gates = BN_x(W_x x_t) + BN_h(W_h h_{t-1}) + b                 (eq. 6)
        c_t = sig(f) c_{t-1} + sig(i) tanh(g),  h_t = sig(o) tanh(BN_c(c_t))   (eq. 7-8; BN_c keeps its
        shift, gamma 0.1)
Each BN keeps separate statistics for every time step, sharing its scale (and shift) across steps; past
the longest step seen in training it uses the last step's statistics (their section 4). With a mask,
step t's statistics cover the samples still running at t; `StepNorm.samples_per_step` counts, per step,
how many real samples its statistics took in training (`samples_per_step(model)` reads it).

A batch-independent norm (ln, gn, rms) takes Ba et al.'s form (2016, arXiv 1607.06450):
  rnn   h_t = tanh(N(W_x x_t + W_h h_{t-1}))                        LN-RNN, eq. (4); N's shift is the bias
  lstm  gates = N_x(W_x x_t) + N_h(W_h h_{t-1});  h_t = sig(o) tanh(N_c(c_t))   LN-LSTM; the shifts of N_x
        and N_h are the gates' bias
W_x carries no bias of its own where a shift follows it (bn: its mean subtraction cancels the bias
exactly; ln, gn: their shift covers it), so no parameter is left that only weight decay moves; with rms,
which has no shift, W_x keeps its bias.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from normbench.errors import UserError
from normbench.models.recurrence import ONE_MEMBER_MAX_BATCH, fits, one_member

CELLS = ("rnn", "lstm", "gru")
GATES = {"rnn": 1, "lstm": 4, "gru": 3}
PLACEMENTS = ("output", "recurrent", "input")
RECURRENT_BN_GAMMA = 0.1  # initial scale of every batch norm inside a cell (Cooijmans et al., section 5)
COUNTS = ("samples_per_step", "batches_per_step", "min_samples_per_step")  # StepNorm's training counts
FEWEST = 2**62  # min_samples_per_step before any batch reached the step


class TorchRNN(nn.RNN):
    """torch's tanh RNN. Trained on the CPU at batches up to `ONE_MEMBER_MAX_BATCH` its recurrence runs as
    one autograd Function (`models.recurrence.one_member`), which is faster there; evaluation, and
    larger batches, use torch's kernel. Same parameters, same function."""

    def forward(self, x, mask=None):
        if (torch.is_grad_enabled() and x.device.type == "cpu" and len(x) <= ONE_MEMBER_MAX_BATCH
                and fits(self)):
            return one_member(self, x)
        return super().forward(x)[0]


class TorchLSTM(nn.LSTM):
    def forward(self, x, mask=None):
        return super().forward(x)[0]


class TorchGRU(nn.GRU):
    def forward(self, x, mask=None):
        return super().forward(x)[0]


TORCH_CELLS = {"rnn": TorchRNN, "lstm": TorchLSTM, "gru": TorchGRU}


class Passthrough(nn.Module):
    """The output norm of a layer whose norm is inside its cell."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return x


def check(cell: str, placement: str, make) -> None:
    """A cell, a placement and a norm that go together, before any data is read (`models.validate`)."""
    if placement not in PLACEMENTS:
        raise UserError(f"model.placement={placement} is a Transformer's; the RNN puts its norm at its output, "
                        "inside the cell or on W_x x_t", "use model.placement=output, recurrent or input")
    if placement == "recurrent" and cell == "gru":
        raise UserError("recurrent placement is defined for the rnn (Ba et al.) and lstm (Ba et al.; Cooijmans "
                        "et al.) cells, not gru", "use model.cell=rnn or lstm, or model.placement=output")
    if placement != "recurrent" or make.reparameterizes or make.name == "none":
        return
    if "flat" in make.spec.unsupported:
        raise UserError(f"{make.name} cannot go inside a recurrent cell: each step's pre-activation is a "
                        f"flat (N, C) vector, one value per channel, where {make.name} is not defined",
                        "use model.placement=output, or ln / bn inside the cell")
    if make.spec.own_activation:
        raise UserError(f"{make.name} includes its own activation, which inside a recurrent cell would act on "
                        "the gate pre-activations before the cell's sigmoid and tanh",
                        "use model.placement=output, or ln / rms / bn inside the cell")


def recurrent_layer(cell: str, input_size: int, hidden: int, make, placement: str = "output") -> nn.Module:
    """A batch-first recurrent layer, forward(seq, mask=None) -> (N, T, hidden). `cell` one of CELLS and
    `placement` one of PLACEMENTS (config.RNNCell, config.Placement), the two and the norm checked against
    each other by `check`."""
    if placement == "output" and not make.reparameterizes:
        return TORCH_CELLS[cell](input_size, hidden, batch_first=True)
    return SteppedRecurrent(cell, input_size, hidden, make, inner=placement == "recurrent",
                            on_input=placement == "input")


def _has_shift(module: nn.Module) -> bool:
    return any(name.rpartition(".")[2] == "bias" for name, _ in module.named_parameters())


def _drop_shift(module: nn.Module) -> None:
    """Remove a norm's learnable shift (beta): Cooijmans et al.'s BN_x and BN_h have none, b replaces them."""
    for name, _ in list(module.named_parameters()):
        owner, _, leaf = name.rpartition(".")
        if leaf == "bias":
            setattr(module.get_submodule(owner), leaf, None)


class StepNorm(nn.Module):
    """One norm at one place in a cell, applied at every time step to (N, C) vectors.

    A batch-dependent norm gets one copy per step: the copies own their running statistics and share the
    learnable parameters of step 0's module (`norm`). Copies are made as training reaches new steps (and
    when a state dict that has them is loaded). `gamma` sets the initial scale of a batch-dependent norm;
    `shift=False` removes its shift."""

    def __init__(self, make, features: int, gamma: float | None = None, shift: bool = True):
        super().__init__()
        self.make, self.features, self.shift = make, features, shift
        self.norm = make(features, "seq")
        self.per_step = make.spec.batch_dependent
        self.steps = nn.ModuleList()  # steps 1, 2, ...
        if self.per_step:
            # real samples whose statistics each step took in training: summed over the run, the batches
            # that reached the step (with a real sample), and the fewest any of them had
            for name in COUNTS:
                self.register_buffer(name, torch.full((1,), FEWEST if name == "min_samples_per_step" else 0,
                                                      dtype=torch.long))
            if not shift:
                _drop_shift(self.norm)
            weight = getattr(self.norm, "weight", None)
            if gamma is not None and isinstance(weight, nn.Parameter):
                nn.init.constant_(weight, gamma)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, step: int) -> torch.Tensor:
        module = self.at(step)
        if not self.training and not module.training and getattr(module, "running_affine", False):
            return _running_affine(module, x, mask)
        if self.per_step and not self.training and module.training and step >= self.trained_steps:
            # Only PreciseBN puts the norms alone in training mode: a step past the trained ones has no
            # statistics of its own to re-estimate, so it reads the last step's rather than overwrite them.
            module.eval()
            try:
                return module(x.unsqueeze(1), mask).squeeze(1)
            finally:
                module.train()
        return module(x.unsqueeze(1), mask).squeeze(1)

    def count(self, counts: torch.Tensor) -> None:
        """One training batch's real samples at each of its steps, (T,): folded into the counts at once
        (the layer calls this after its steps, so counting adds a few ops a batch, not a few a step)."""
        k = counts.numel()
        reached = counts > 0
        self.samples_per_step[:k] += counts
        self.batches_per_step[:k] += reached
        fewest = self.min_samples_per_step[:k]
        fewest.copy_(torch.where(reached, torch.minimum(fewest, counts), fewest))

    def at(self, step: int) -> nn.Module:
        if not self.per_step or step == 0:
            return self.norm
        if self.training:
            self.extend(step + 1)
        return self.steps[min(step, len(self.steps)) - 1] if self.steps else self.norm

    def extend(self, steps: int) -> None:
        """Give the first `steps` time steps statistics of their own (new ones start from the last step's)."""
        while len(self.steps) < steps - 1:
            self.steps.append(self._next())
        for name in COUNTS:
            counts = getattr(self, name)
            if counts.numel() < steps:
                grown = counts.new_full((steps,), FEWEST if name == "min_samples_per_step" else 0)
                grown[:counts.numel()] = counts
                setattr(self, name, grown)

    @property
    def trained_steps(self) -> int:
        """How many time steps have their own statistics."""
        return 1 + len(self.steps) if self.per_step else 0

    def _next(self) -> nn.Module:
        """A new step's module: the last step's statistics as its first guess, step 0's parameters shared.
        Built afresh and loaded rather than deep-copied, which would also copy any hooks on the module."""
        last = self.steps[-1] if self.steps else self.norm
        new = self.make(self.features, "seq")
        if not self.shift:
            _drop_shift(new)
        ref = next((b for b in self.norm.buffers() if b.is_floating_point()), None)
        if ref is not None:
            new.to(ref.device, ref.dtype)
        new.load_state_dict(last.state_dict())
        if getattr(last, "total_steps", None) is not None:  # Batch Renorm's schedule: the run's length
            new.set_total_steps(last.total_steps)
        for name, p in self.norm.named_parameters():
            owner, _, leaf = name.rpartition(".")
            setattr(new.get_submodule(owner), leaf, p)
        new.__dict__.pop("normbench_norm", None)  # the probe watches step 0's module only
        return new.train(self.training)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The module loader visits children after this call, so match the steps the state dict holds first
        # (more, from a longer run; or fewer, restoring a copy taken before steps were added).
        steps = {int(k[len(prefix) + 6:].split(".")[0]) for k in state_dict if k.startswith(prefix + "steps.")}
        count = max(steps) + 1 if steps else 0
        del self.steps[count:]
        if self.per_step:
            self.extend(count + 1)
        for name in COUNTS if self.per_step else ():
            saved = state_dict.get(prefix + name)
            if saved is not None:
                setattr(self, name, getattr(self, name).new_zeros(saved.shape))
            elif name != "samples_per_step":  # a checkpoint from before the counts: none were kept
                state_dict[prefix + name] = getattr(self, name)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def restore_steps(target: nn.Module, source: nn.Module, below: int) -> None:
    """Give `target`'s per-step norms the statistics `source`'s (the same model, before a re-estimation)
    hold for the time steps before `below`: the steps past them keep what `target` has."""
    pairs = zip((m for m in target.modules() if isinstance(m, StepNorm) and m.per_step),
                (m for m in source.modules() if isinstance(m, StepNorm) and m.per_step))
    with torch.no_grad():
        for new, old in pairs:
            for t, (a, b) in enumerate(zip([new.norm, *new.steps], [old.norm, *old.steps])):
                if t >= below:
                    break
                buffers = dict(a.named_buffers())
                for name, buf in b.named_buffers():
                    buffers[name].copy_(buf)


def step_samples(model: nn.Module) -> dict | None:
    """What each trained time step's statistics saw per training batch, from the model's first per-step
    norm: `mean` and `min` real samples per step (over the batches that reached it), and their summary over
    the trained steps: `min` (the fewest any batch gave any step), `median` (of the per-step means), `last`
    and `last_min` (at the last trained step). None without per-step statistics."""
    for m in model.modules():
        if isinstance(m, StepNorm) and m.per_step:
            reached = m.batches_per_step > 0
            if not reached.any():
                return None
            k = int(reached.nonzero().max()) + 1
            mean = (m.samples_per_step[:k].double() / m.batches_per_step[:k].clamp_min(1)).tolist()
            fewest = torch.where(reached[:k], m.min_samples_per_step[:k], 0).tolist()
            return {"mean": [round(v, 2) for v in mean], "min": fewest, "summary": {
                "min": min(fewest), "median": statistics.median(mean), "last": round(mean[-1], 2),
                "last_min": fewest[-1]}}
    return None


def samples_per_step(model: nn.Module) -> list[int] | None:
    """Real training samples each time step's statistics took, from the model's first per-step norm (every
    place in a cell sees the same samples); None when the model has no per-step statistics."""
    for m in model.modules():
        if isinstance(m, StepNorm) and m.per_step:
            return [int(v) for v in m.samples_per_step]
    return None


def _running_affine(bn: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A BatchNorm (or Batch Renorm) at test time on one step's (N, C) vectors: the affine map its running
    statistics define, padded rows 0 when it is masked, as the layer's own sequence path computes (the
    same kernel on the same rows), without that path's gather and scatter of the real rows: recurrent BN's
    evaluation calls it twice per step (tests/test_cells.py checks the two paths equal)."""
    y = F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
    return y if mask is None or not bn.masked else torch.where(mask, y, y.new_zeros(()))


class SteppedRecurrent(nn.Module):
    """A recurrent layer stepped in Python, so a norm can sit inside its cell (`inner`) and its matrices
    W_x, W_h can come from the norm's layer builder (WeightNorm, Cosine Norm)."""

    def __init__(self, cell: str, input_size: int, hidden: int, make, inner: bool, on_input: bool = False):
        super().__init__()
        self.cell, self.hidden = cell, hidden
        gates = GATES[cell] * hidden
        inner = inner and not make.reparameterizes and make.name != "none"
        self.norm_x = self.norm_h = self.norm_c = None
        self.bias = None  # recurrent BN's b, on the sum of the normalized terms
        ih_bias = True
        if inner and make.spec.batch_dependent:  # Cooijmans et al., eq. (6-8)
            self.norm_x = StepNorm(make, gates, RECURRENT_BN_GAMMA, shift=False)
            self.norm_h = StepNorm(make, gates, RECURRENT_BN_GAMMA, shift=False)
            if cell == "lstm":
                self.norm_c = StepNorm(make, hidden, RECURRENT_BN_GAMMA)
            self.bias = nn.Parameter(torch.zeros(gates))
            ih_bias = False
        elif inner:  # Ba et al.: LN-RNN on the sum, LN-LSTM on each term
            self.norm_h = StepNorm(make, gates)
            if cell == "lstm":
                self.norm_x, self.norm_c = StepNorm(make, gates), StepNorm(make, hidden)
            ih_bias = not _has_shift(self.norm_h)
        # model.placement=input: one norm over every step's W_x x_t at once, (N, T, gates) with the mask,
        # padded steps included: with norm.masked=false their W_x pad (one constant) enters its statistics
        self.norm_in = make(gates, "seq") if on_input and make.name != "none" and not make.reparameterizes else None
        if self.norm_in is not None:
            ih_bias = not _has_shift(self.norm_in)
        self.ih = make.linear(input_size, gates, bias=ih_bias)
        self.hh = make.linear(hidden, gates, bias=cell == "gru")  # GRU's reset gate needs b_hn inside

    def forward(self, seq: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        n, steps, _ = seq.shape
        if mask is not None:  # no step past the longest sequence: it would have no real sample for statistics
            steps = max(1, int(mask.sum(1).max()))
        # Every step's W_x x at once, split by unbind: its backward stacks the steps' gradients once,
        # where indexing xs[:, t] zero-filled a whole (N, T, gates) gradient per step (docs/performance.md).
        xs = (self.ih(seq[:, :steps]) if self.norm_in is None
              else self.norm_in(self.ih(seq), mask)[:, :steps]).unbind(1)
        h = seq.new_zeros(n, self.hidden)
        c = seq.new_zeros(n, self.hidden)
        outs = []
        with parametrize.cached():  # WeightNorm's w = g v / ||v||, once per sequence, not per step
            for t in range(steps):
                m = None if mask is None else mask[:, t:t + 1]
                h, c = self._step(xs[t], h, c, m, t)
                outs.append(h)
        if self.training:  # what each step's batch statistics took: the per-step norms' counts
            counts = (mask[:, :steps].sum(0) if mask is not None
                      else torch.full((steps,), n, dtype=torch.long, device=seq.device))
            for norm in (self.norm_x, self.norm_h, self.norm_c):
                if norm is not None and norm.per_step:
                    norm.count(counts)
        out = torch.stack(outs, 1)
        if steps < seq.shape[1]:
            out = torch.cat([out, out.new_zeros(n, seq.shape[1] - steps, self.hidden)], 1)
        return out

    def _step(self, x, h, c, m, t):
        hh = self.hh(h)
        if self.norm_x is not None:  # each term normalized on its own (recurrent BN; LN-LSTM)
            x, hh = self.norm_x(x, m, t), self.norm_h(hh, m, t)
        a = x + hh if self.bias is None else x + hh + self.bias
        if self.cell == "rnn":
            if self.norm_h is not None and self.norm_x is None:  # LN-RNN: one norm on the sum
                a = self.norm_h(a, m, t)
            return torch.tanh(a), c
        if self.cell == "lstm":
            i, f, g, o = a.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c if self.norm_c is None else self.norm_c(c, m, t)), c
        xr, xz, xn = x.chunk(3, 1)
        hr, hz, hn = hh.chunk(3, 1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        return (1 - z) * torch.tanh(xn + r * hn) + z * h, c
