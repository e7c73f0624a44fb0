"""Where a run's progress goes: a rich progress bar and table, TensorBoard, or nowhere (tests).

    tracker = Trackers([RichTracker("cnn/bn"), TensorBoardTracker(run_dir, config, hparams)])
    tracker.start(total_steps, first_step); tracker.step(step, metrics); tracker.epoch(e, metrics)
    tracker.finish(results)

The engine only ever calls these four methods; nothing here computes a metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from tensorboard.compat.proto.summary_pb2 import Summary


class NullTracker:
    """Accepts everything, shows nothing: the stand-in for tests and library use."""

    def start(self, total_steps: int, first_step: int = 0) -> None: ...
    def step(self, step: int, metrics: dict[str, float]) -> None: ...
    def epoch(self, epoch: int, metrics: dict[str, float]) -> None: ...
    def finish(self, results: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class Trackers(NullTracker):
    """Fan every call out to several trackers."""

    def __init__(self, trackers: list):
        self.trackers = trackers

    def start(self, *args, **kwargs) -> None:
        for t in self.trackers:
            t.start(*args, **kwargs)

    def step(self, *args, **kwargs) -> None:
        for t in self.trackers:
            t.step(*args, **kwargs)

    def epoch(self, *args, **kwargs) -> None:
        for t in self.trackers:
            t.epoch(*args, **kwargs)

    def finish(self, *args, **kwargs) -> None:
        for t in self.trackers:
            t.finish(*args, **kwargs)

    def close(self) -> None:
        for t in self.trackers:
            t.close()


class RichTracker(NullTracker):
    """A live progress bar (loss, accuracy, samples/s) and a results table at the end, on stderr."""

    def __init__(self, title: str, console: Console | None = None):
        self.title = title
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}  {task.fields[speed]} samples/s"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=False,
            # Each redraw costs ~1 ms of Python on a background thread that competes with training for
            # the GIL and the cores: at rich's default 10/s that was ~1% of a batch-2 run.
            refresh_per_second=2,
        )
        self.task = None

    def start(self, total_steps: int, first_step: int = 0) -> None:
        self.progress.start()
        self.task = self.progress.add_task(self.title, total=total_steps, completed=first_step,
                                           loss="-", acc="-", speed="-")

    def step(self, step: int, metrics: dict[str, float]) -> None:
        self.progress.update(self.task, completed=step, loss=f"{metrics['loss/train']:.4f}",
                             acc=f"{metrics['acc/train']:.3f}",
                             speed=f"{metrics['throughput/samples_per_s']:,.0f}")

    def epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        self.progress.console.print(
            f"epoch {epoch}: val loss {metrics['loss/val']:.4f}  val acc {metrics['acc/val']:.4f}")

    def finish(self, results: dict[str, Any]) -> None:
        self.close()
        table = Table(title=self.title, show_header=True)
        for col in ("status", "test acc", "val acc", "samples/s", "epochs", "wall s"):
            table.add_column(col, justify="right")
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        table.add_row(results["status"], fmt(results.get("test_acc"), ".4f"), fmt(results.get("val_acc"), ".4f"),
                      fmt(results.get("train_samples_per_s"), ",.0f"), str(results.get("epochs_done")),
                      fmt(results.get("wall_s"), ".1f"))
        self.console.print(table)

    def close(self) -> None:
        self.progress.stop()


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"name": "cnn"}} -> {"model.name": "cnn"}."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        flat.update(flatten(v, f"{key}.") if isinstance(v, dict) else {key: v})
    return flat


def _hparam_value(v: Any):
    return v if isinstance(v, (bool, int, float, str)) else str(v)


class TensorBoardTracker(NullTracker):
    """Scalars per log window and per epoch, the resolved config as text, and HParams (flattened config
    + final metrics) in the run's own event file, so a sweep's runs line up in the HParams tab."""

    def __init__(self, log_dir: Path, config: dict[str, Any], discrete: dict[str, list] | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.config, self.discrete = config, discrete or {}
        self.last_step = 0

    def _scalars(self, scalars: dict[str, float], step: int) -> None:
        """All values of a log window in one event: TensorBoard still reads each tag as its own series,
        and the writer thread handles one event instead of one per tag (measurable at batch size 2)."""
        from torch.utils.tensorboard.summary import scalar

        values = [scalar(tag, float(v)).value[0] for tag, v in scalars.items()]
        self.writer.file_writer.add_summary(Summary(value=values), step)

    def start(self, total_steps: int, first_step: int = 0) -> None:
        import yaml

        config = yaml.safe_dump(self.config, sort_keys=False)
        self.writer.add_text("config", "```yaml\n" + config + "```", global_step=first_step)

    def step(self, step: int, metrics: dict[str, float]) -> None:
        self._scalars(metrics, step)
        self.last_step = step

    def epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        step = metrics.get("step", self.last_step)
        scalars = {k: v for k, v in metrics.items() if k not in ("epoch", "step")}
        self._scalars({**scalars, "epoch": epoch}, step)
        self.writer.flush()

    def finish(self, results: dict[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        hp = {k: _hparam_value(v) for k, v in flatten(self.config).items()}
        final = {f"final/{k}": float(results[k]) for k in ("test_acc", "val_acc", "train_samples_per_s", "wall_s")
                 if isinstance(results.get(k), (int, float))}
        discrete = {k: v for k, v in self.discrete.items() if k in hp}
        for k, values in discrete.items():  # a run's own value must be in its domain
            if hp[k] not in values:
                values.append(hp[k])
        exp, ssi, sei = hparams(hp, final, hparam_domain_discrete=discrete or None)
        for summary in (exp, ssi, sei):
            self.writer.file_writer.add_summary(summary)
        self._scalars(final, self.last_step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
