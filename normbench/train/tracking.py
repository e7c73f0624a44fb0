"""Where a run's progress goes: a rich progress bar and table, TensorBoard, or nowhere (tests).

    tracker = Trackers([RichTracker("cnn/bn"), TensorBoardTracker(run_dir, config, sweep_domains)])
    tracker.start(total_steps, first_step); tracker.step(step, metrics); tracker.epoch(e, metrics)
    tracker.finish(results)
    tracker.scalars(step, {"norm/0/input_std": 1.2}); tracker.histogram("norm/0/scale", values, step)

The engine calls the first four; the norm probe the last two (`records_scalars` says whether any
tracker keeps them). Nothing here computes a metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from tensorboard.compat.proto.summary_pb2 import Summary

from normbench.config import flatten, runtime_keys

# The HParams columns every run has: what the run is. A sweep adds the keys it varies.
IDENTITY = ("model.name", "norm.name", "data.name")
# Without a sweep (one run, or runs started one by one) nothing says what varies: these two do in
# every study, so runs made separately still line up by them.
SINGLE_RUN_HPARAMS = ("batch_size", "lr")
FINAL_METRICS = ("test_acc", "val_acc", "test_acc_precise_bn")  # the HParams metric columns, where present


class NullTracker:
    """Accepts everything, shows nothing: the stand-in for tests and library use."""

    records_scalars = False  # does `scalars`/`histogram` go anywhere?

    def start(self, total_steps: int, first_step: int = 0) -> None: ...
    def step(self, step: int, metrics: dict[str, float]) -> None: ...
    def epoch(self, epoch: int, metrics: dict[str, float]) -> None: ...
    def finish(self, results: dict[str, Any]) -> None: ...
    def close(self) -> None: ...
    def scalars(self, step: int, values: dict[str, float]) -> None: ...
    def histogram(self, tag: str, values, step: int) -> None: ...


class Trackers(NullTracker):
    """Fan every call out to several trackers."""

    def __init__(self, trackers: list):
        self.trackers = trackers

    @property
    def records_scalars(self) -> bool:
        return any(t.records_scalars for t in self.trackers)

    def scalars(self, *args, **kwargs) -> None:
        for t in self.trackers:
            t.scalars(*args, **kwargs)

    def histogram(self, *args, **kwargs) -> None:
        for t in self.trackers:
            t.histogram(*args, **kwargs)

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


def _numbers_first(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def hparams_of(config: dict[str, Any], domains: dict[str, list] | None = None) -> tuple[dict, dict]:
    """The HParams of a run and their discrete domains: the identity keys and the keys its sweep varies
    (`domains`: key -> the values the sweep gives it; keys with one value are constant), runtime keys
    left out. Integers become strings ("4", not 4.0000: the HParams table prints every number with five
    digits), their domains in numeric order; floats stay numbers (a continuous axis), booleans booleans."""
    flat = flatten(config)
    domains = {k: list(v) for k, v in (domains or {}).items() if k in flat and k not in runtime_keys()}
    swept = [k for k, v in domains.items() if k not in IDENTITY and len(set(map(str, v))) > 1]
    keys = [*IDENTITY, *(swept or SINGLE_RUN_HPARAMS)]
    hp, discrete = {}, {}
    for k in (k for k in keys if k in flat):
        values = [flat[k], *domains.get(k, [])]
        if all(isinstance(v, bool) for v in values):
            hp[k] = flat[k]
        elif all(isinstance(v, float) for v in values) or (k not in domains and isinstance(flat[k], float)):
            hp[k] = flat[k]
            continue  # continuous: no discrete domain
        else:
            hp[k] = str(flat[k]).lower() if isinstance(flat[k], bool) else str(flat[k])
        if k in domains:
            ordered = sorted(set(domains[k]) | {flat[k]}, key=_numbers_first)
            discrete[k] = [v if isinstance(hp[k], bool) else str(v) for v in ordered]
    return hp, discrete


class TensorBoardTracker(NullTracker):
    """Scalars per log window and per epoch, the resolved config as text, and HParams (see `hparams_of`;
    the final accuracies as metrics) in the run's own event file, so a sweep's runs line up in the
    HParams tab. `discrete`: key -> the values the run's sweep gives it (the runner passes the sweep's
    domains, and the catalog's names for the identity keys)."""

    records_scalars = True

    def __init__(self, log_dir: Path, config: dict[str, Any], discrete: dict[str, list] | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.config, self.discrete = config, discrete or {}  # config: plain values (config.to_dict)
        self.last_step = 0

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self._scalars(values, step)

    def histogram(self, tag: str, values, step: int) -> None:
        self.writer.add_histogram(tag, values, step)

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
        # epoch and step are where a point sits, not something to plot: no card of their own
        self._scalars({k: v for k, v in metrics.items() if k not in ("epoch", "step")}, step)
        self.writer.flush()

    def finish(self, results: dict[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        hp, discrete = hparams_of(self.config, self.discrete)
        # A metric column per final accuracy the run reports (precise BN's even when null, so every run
        # of a sweep declares the same columns); the run's numbers as scalars with the same tags.
        metrics = {f"final/{k}": 0.0 for k in FINAL_METRICS if k in results}
        final = {f"final/{k}": float(results[k]) for k in (*FINAL_METRICS, "train_samples_per_s", "wall_s")
                 if isinstance(results.get(k), (int, float))}
        exp, ssi, sei = hparams(hp, metrics, hparam_domain_discrete=discrete or None)
        for summary in (exp, ssi, sei):
            self.writer.file_writer.add_summary(summary)
        self._scalars(final, self.last_step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
