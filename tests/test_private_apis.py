"""The libraries' private APIs normbench calls, each from one named function, against the public API that
does the same: a test here fails when the library changes what the private one does (or drops it).

- torch's fused optimizer kernels (`torch._fused_sgd_`, `torch._fused_adamw_`, `torch._foreach_add_`):
  normbench.pack.optim.fused_sgd / fused_adamw, against torch.optim.SGD(fused=True) / AdamW(fused=True).
- Hydra's override parser (`OverridesParser`): normbench.cli_errors.parse_overrides, against the overrides
  Hydra itself reads from a command line.
- submitit's message for a task that raised (the traceback framed by rules): hydra_plugins.normbench_slurm's
  `_why`, against a real task run by submitit's LocalExecutor; and submitit's UncompletedJobError,
  normbench.cli's `_killed_task`.
- hydra-submitit's executor set-up: hydra_plugins.normbench_slurm's `submit`, against what hydra-submitit's
  own launcher submits.
"""

from __future__ import annotations

import pytest
import torch

from normbench.pack.optim import fused_adamw, fused_sgd

SHAPES = [(5, 3), (7,), (2, 3, 4)]


def _tensors(dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]


def _steps(dtype: torch.dtype, make, ours) -> None:
    """Three steps at changing lrs of torch's optimizer (`make(params, lr)`) and of ours (`ours(params,
    grads, state, lr)`) on copies of the same parameters and gradients: every parameter bit for bit."""
    mine = _tensors(dtype, 0)
    theirs = [torch.nn.Parameter(p.clone()) for p in mine]
    opt = make(theirs, 0.1)
    state: dict = {}
    for step, lr in enumerate((0.1, 0.03, 0.2)):
        grads = _tensors(dtype, step + 1)
        for p, g in zip(theirs, grads):
            p.grad = g.clone()
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        ours(mine, grads, state, lr)
        for a, b in zip(mine, theirs):
            assert torch.equal(a, b.detach()), f"step {step}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("momentum,decay", [(0.9, 1e-2), (0.0, 0.0)])
def test_fused_sgd_is_torchs_fused_sgd(dtype, momentum, decay):
    def ours(params, grads, state, lr):
        bufs = state.setdefault("bufs", [torch.zeros_like(p) for p in params] if momentum else [])
        fused_sgd(params, grads, bufs, lr=lr, momentum=momentum, weight_decay=decay)

    _steps(dtype, lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=momentum, weight_decay=decay, fused=True), ours)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("decay", [1e-2, 0.0])
def test_fused_adamw_is_torchs_fused_adamw(dtype, decay):
    def ours(params, grads, state, lr):
        if not state:
            state.update(m=[torch.zeros_like(p) for p in params], v=[torch.zeros_like(p) for p in params],
                         steps=[torch.zeros((), dtype=torch.float32) for _ in params])
        fused_adamw(params, grads, state["m"], state["v"], state["steps"], lr=lr, weight_decay=decay)

    _steps(dtype, lambda p, lr: torch.optim.AdamW(p, lr=lr, weight_decay=decay, fused=True), ours)


def test_parse_overrides_reads_what_normbench_reads():
    """normbench reads each override's key, whether it adds (+) or force-adds (++) a key, and a sweep's
    values; a malformed line is Hydra's OverrideParseException (cli_errors.explain says it in one line)."""
    from hydra.errors import OverrideParseException

    from normbench.cli_errors import parse_overrides

    add, force, sweep, group, plain = parse_overrides(["+foo=1", "++bar.baz=2", "batch_size=2,8", "norm=bn,gn",
                                                       "lr=0.1"])
    assert (add.key_or_group, add.is_add(), add.is_force_add()) == ("foo", True, False)
    assert (force.key_or_group, force.is_add(), force.is_force_add()) == ("bar.baz", False, True)
    assert sweep.is_sweep_override() and list(sweep.sweep_iterator()) == [2, 8]
    assert group.key_or_group == "norm" and list(group.sweep_iterator()) == ["bn", "gn"]
    assert not plain.is_sweep_override() and plain.value() == 0.1
    with pytest.raises(OverrideParseException):
        parse_overrides(["batch_size=[2"])


@pytest.fixture
def local_executor(tmp_path):
    """submitit's LocalExecutor: each job a process of this machine, with submitit's own result files."""
    submitit = pytest.importorskip("submitit")
    executor = submitit.LocalExecutor(folder=tmp_path / "%j")
    executor.update_parameters(timeout_min=2)
    return executor


def test_a_failed_tasks_reason_is_the_last_line_of_submitits_traceback(local_executor):
    """A task that raised: `_why` finds the exception's line in submitit's message (not a log path)."""
    import hydra_plugins.normbench_slurm as plugin

    job = local_executor.submit(int, "not a number")
    error = plugin._error(job)
    assert plugin._why(error, job) == "ValueError: invalid literal for int() with base 10: 'not a number'"


def test_a_task_killed_before_its_result_is_submitits_uncompleted_job_error(local_executor):
    """A task that died without a result (here it exits at once; on SLURM, a SIGKILL or a node lost) is
    what normbench.cli says in one line; a task that raised is not (its traceback is shown)."""
    import os

    from normbench.cli import _killed_task

    killed = local_executor.submit(os._exit, 3)
    killed._results_timeout_s = 0  # submitit waits for a slow filesystem's result file otherwise (15 s)
    raised = local_executor.submit(int, "not a number")
    assert _killed_task(killed.exception())
    assert not _killed_task(raised.exception())
    assert not _killed_task(RuntimeError("UncompletedJobError"))


class _Recorder:
    """submitit.AutoExecutor's stand-in: records how it is built, its parameters and the tasks it is given."""

    calls: list = []

    def __init__(self, **kwargs):
        self.calls.append(("init", kwargs))

    def update_parameters(self, **kwargs):
        self.calls.append(("update_parameters", kwargs))

    def map_array(self, fn, *iterables):
        self.calls.append(("map_array", fn, [list(i) for i in iterables]))
        return [_Done() for _ in iterables[0]]


class _Done:
    job_id, state = "1_0", "COMPLETED"

    def wait(self):
        pass

    def exception(self):
        return None

    def results(self):
        return ["result"]


def test_the_launcher_submits_as_hydra_submitits_own(monkeypatch, tmp_path):
    """`NormbenchSlurmLauncher.submit` builds submitit's executor, its parameters and the array's task
    arguments as hydra-submitit's SlurmLauncher.launch does, at every key of the preset's schema set (the
    task arguments' last, Hydra's singletons, compared by their keys)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    import submitit
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
    from omegaconf import OmegaConf

    from hydra_plugins.normbench_slurm import NormbenchSlurmConf, NormbenchSlurmLauncher

    monkeypatch.setattr(submitit, "AutoExecutor", _Recorder)
    params = OmegaConf.to_container(OmegaConf.structured(NormbenchSlurmConf))
    del params["_target_"], params["max_requeues"]
    params.update(submitit_folder=str(tmp_path / "submitit"), partition="p", max_num_timeout=2,
                  additional_parameters={"mail_type": "END"}, setup=["export A=1"])
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    overrides = [["norm=bn", "seed=0"], ["norm=gn", "seed=1"]]
    recorded = {}
    for name, launcher in (("hydra-submitit", SlurmLauncher(**params)),
                           ("normbench", NormbenchSlurmLauncher(**params))):
        launcher.config = config
        _Recorder.calls = []
        assert launcher.launch(overrides, 3) == ["result", "result"]
        *rest, (kind, fn, tasks) = _Recorder.calls
        assert fn is launcher  # each task calls the launcher (its __call__ runs the run on the node)
        singletons = tasks.pop()
        recorded[name] = [*rest, (kind, tasks, [sorted(s) for s in singletons])]
    # one deliberate difference: srun runs the task through HOLD (normbench_slurm), after the preset's own options
    ours, theirs = (dict(next(args for kind, args, *_ in recorded[n] if kind == "update_parameters"))
                    for n in ("normbench", "hydra-submitit"))
    from hydra_plugins.normbench_slurm import HOLD

    assert ours.pop("slurm_srun_args") == [*(theirs.pop("slurm_srun_args") or []), *HOLD]
    assert ours == theirs
    assert [c for c in recorded["normbench"] if c[0] != "update_parameters"] == \
        [c for c in recorded["hydra-submitit"] if c[0] != "update_parameters"]
    assert recorded["normbench"][0] == ("init", {"cluster": "slurm", "folder": params["submitit_folder"],
                                                 "slurm_max_num_timeout": 2})
