"""Recurrent layers built from a norm constructor, for the RNN model's two norm placements.

    layer = recurrent_layer("lstm", 28, 128, norms.factory("bn"), placement="recurrent")
    out = layer(seq, mask)        # (N, T, 128); mask (N, T) True on real steps, or None

placement="output": torch's fused nn.RNN / nn.LSTM / nn.GRU, the norm goes on the layer's outputs (the
model does that). Norms that change the layer itself (WeightNorm, Cosine Norm) get a Python-stepped layer
whose matrices come from the norm's linear builder, for either placement.

placement="recurrent": the norm sits inside the cell at every time step, which PyTorch does not ship:
  rnn   h_t = tanh(N(W_x x_t + W_h h_{t-1}))                       LN-RNN, Ba et al. 2016, eq. (4)
  lstm  gates = N_x(W_x x_t) + N_h(W_h h_{t-1}) + b                BN-LSTM, Cooijmans et al. 2016, eq. (6-8);
        c_t = sig(f) c_{t-1} + sig(i) tanh(g),  h_t = sig(o) tanh(N_c(c_t))     the same form as Ba et al.'s LN-LSTM
A batch-dependent norm (bn, brn, sn) keeps separate statistics for every time step, sharing its learned
scale and shift across steps; past the longest step seen in training it uses the last step's statistics
(Cooijmans et al., section 4); in the LSTM its scale starts at 0.1, as theirs does. With a mask, step t's
statistics cover the samples still running at t.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from normbench.errors import UserError

CELLS = ("rnn", "lstm", "gru")
GATES = {"rnn": 1, "lstm": 4, "gru": 3}
PLACEMENTS = ("output", "recurrent")
RECURRENT_BN_GAMMA = 0.1  # initial scale of a batch norm inside an LSTM cell (Cooijmans et al.)


class TorchRNN(nn.RNN):
    def forward(self, x, mask=None):
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


def recurrent_layer(cell: str, input_size: int, hidden: int, make, placement: str = "output") -> nn.Module:
    """A batch-first recurrent layer, forward(seq, mask=None) -> (N, T, hidden)."""
    if cell not in CELLS:
        raise UserError(f"unknown RNN cell {cell!r}", f"choose one of: {', '.join(CELLS)}")
    if placement not in PLACEMENTS:
        raise UserError(f"unknown norm placement {placement!r}", "use model.placement=output or recurrent")
    if placement == "recurrent" and cell == "gru":
        raise UserError("recurrent placement is defined for the rnn (Ba et al.) and lstm (Ba et al.; Cooijmans "
                        "et al.) cells, not gru", "use model.cell=rnn or lstm, or model.placement=output")
    if placement == "output" and not make.reparameterizes:
        return TORCH_CELLS[cell](input_size, hidden, batch_first=True)
    return SteppedRecurrent(cell, input_size, hidden, make, inner=placement == "recurrent")


class StepNorm(nn.Module):
    """One norm at one place in a cell, applied at every time step to (N, C) vectors.

    A batch-dependent norm gets one copy per step: the copies own their running statistics and share the
    learnable parameters of step 0's module (`norm`). Copies are made as training reaches new steps (and
    when a state dict that has them is loaded)."""

    def __init__(self, make, features: int, batch_gamma: float | None = None):
        super().__init__()
        self.make, self.features = make, features
        self.norm = make(features, "seq")
        self.per_step = make.spec.batch_dependent
        self.steps = nn.ModuleList()  # steps 1, 2, ...
        weight = getattr(self.norm, "weight", None)
        if batch_gamma is not None and self.per_step and isinstance(weight, nn.Parameter):
            nn.init.constant_(weight, batch_gamma)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, step: int) -> torch.Tensor:
        return self.at(step)(x.unsqueeze(1), mask).squeeze(1)

    def at(self, step: int) -> nn.Module:
        if not self.per_step or step == 0:
            return self.norm
        if self.training:
            while len(self.steps) < step:
                self.steps.append(self._next())
        return self.steps[min(step, len(self.steps)) - 1] if self.steps else self.norm

    @property
    def trained_steps(self) -> int:
        """How many time steps have their own statistics."""
        return 1 + len(self.steps) if self.per_step else 0

    def _next(self) -> nn.Module:
        """A new step's module: the last step's statistics as its first guess, step 0's parameters shared.
        Built afresh and loaded rather than deep-copied, which would also copy any hooks on the module."""
        last = self.steps[-1] if self.steps else self.norm
        new = self.make(self.features, "seq")
        ref = next((b for b in self.norm.buffers() if b.is_floating_point()), None)
        if ref is not None:
            new.to(ref.device, ref.dtype)
        new.load_state_dict(last.state_dict())
        for name, p in self.norm.named_parameters():
            owner, _, leaf = name.rpartition(".")
            setattr(new.get_submodule(owner), leaf, p)
        new.__dict__.pop("normbench_norm", None)  # the probe watches step 0's module only
        return new.train(self.training)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The module loader visits children after this call, so make the steps the state dict holds first.
        steps = {int(k[len(prefix) + 6:].split(".")[0]) for k in state_dict if k.startswith(prefix + "steps.")}
        while len(self.steps) < (max(steps) + 1 if steps else 0):
            self.steps.append(self._next())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class SteppedRecurrent(nn.Module):
    """A recurrent layer stepped in Python, so a norm can sit inside its cell (`inner`) and its matrices
    W_x, W_h can come from the norm's layer builder (WeightNorm, Cosine Norm)."""

    def __init__(self, cell: str, input_size: int, hidden: int, make, inner: bool):
        super().__init__()
        self.cell, self.hidden = cell, hidden
        gates = GATES[cell] * hidden
        self.ih = make.linear(input_size, gates)  # carries the bias b
        self.hh = make.linear(hidden, gates, bias=cell == "gru")  # GRU's reset gate needs b_hn inside
        self.norm_x = self.norm_h = self.norm_c = None
        if inner and not make.reparameterizes and make.name != "none":
            if "flat" in make.spec.unsupported:
                raise UserError(f"{make.name} cannot go inside a recurrent cell: each step's pre-activation is a "
                                f"flat (N, C) vector, one value per channel, where {make.name} is not defined",
                                "use model.placement=output, or ln / bn inside the cell")
            if make.spec.own_activation:
                raise UserError(f"{make.name} includes its own activation, which inside a recurrent cell would act on "
                                "the gate pre-activations before the cell's sigmoid and tanh",
                                "use model.placement=output, or ln / rms / bn inside the cell")
            self.norm_h = StepNorm(make, gates)  # rnn: the norm of the summed pre-activation (Ba eq. 4)
            if cell == "lstm":
                # Cooijmans et al., section 5: BN-LSTM's gamma starts at 0.1, not 1, which keeps the gates and
                # tanh out of saturation so gradients flow through time (their figure 1).
                self.norm_h = StepNorm(make, gates, RECURRENT_BN_GAMMA)
                self.norm_x = StepNorm(make, gates, RECURRENT_BN_GAMMA)
                self.norm_c = StepNorm(make, hidden, RECURRENT_BN_GAMMA)

    def forward(self, seq: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        n, steps, _ = seq.shape
        if mask is not None:  # no step past the longest sequence: it would have no real sample for statistics
            steps = max(1, int(mask.sum(1).max()))
        # Every step's W_x x at once, split by unbind: its backward stacks the steps' gradients once,
        # where indexing xs[:, t] zero-filled a whole (N, T, gates) gradient per step (45% of LN-LSTM's time).
        xs = self.ih(seq[:, :steps]).unbind(1)
        h = seq.new_zeros(n, self.hidden)
        c = seq.new_zeros(n, self.hidden)
        outs = []
        with parametrize.cached():  # WeightNorm's w = g v / ||v||, once per sequence, not per step
            for t in range(steps):
                m = None if mask is None else mask[:, t:t + 1]
                h, c = self._step(xs[t], h, c, m, t)
                outs.append(h)
        out = torch.stack(outs, 1)
        if steps < seq.shape[1]:
            out = torch.cat([out, out.new_zeros(n, seq.shape[1] - steps, self.hidden)], 1)
        return out

    def _step(self, x, h, c, m, t):
        hh = self.hh(h)
        if self.cell == "rnn":
            a = x + hh
            return torch.tanh(a if self.norm_h is None else self.norm_h(a, m, t)), c
        if self.cell == "lstm":
            if self.norm_h is not None:
                x, hh = self.norm_x(x, m, t), self.norm_h(hh, m, t)
            i, f, g, o = (x + hh).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c if self.norm_c is None else self.norm_c(c, m, t)), c
        xr, xz, xn = x.chunk(3, 1)
        hr, hz, hn = hh.chunk(3, 1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        return (1 - z) * torch.tanh(xn + r * hn) + z * h, c
