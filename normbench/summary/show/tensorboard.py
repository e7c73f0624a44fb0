"""What `normbench summarize` adds to TensorBoard: aggregate runs that compare norms across seeds.

    write(summary, sweep_dir / "summary", figures, markdown)
    tensorboard --logdir SWEEP     # runs summary (figures, tables, layout) and summary/<norm>

TensorBoard cannot average runs, so summarize writes the averages as runs of their own: for each norm
label, `summary/<label>` holds, per setting (batch size, and model/dataset where several), the mean of
each training curve over the seeds at the steps every seed logged, and the bounds of its 95% t-interval
(`<setting>/<curve>/mean`, `.../ci_low`, `.../ci_high`). The run `summary` holds summarize's figures
(Images tab), its Markdown tables (Text tab) and a custom-scalars layout: one margin chart per curve
and setting, one band per norm (Custom Scalars tab). Curves come from each run's event files, or from
results.json's per-epoch history when a run has none. Written with TensorBoard's own writer: no torch.
"""

from __future__ import annotations

import struct
import time
from collections import defaultdict
from pathlib import Path

from normbench.summary import stats
from normbench.summary.types import VARLEN, Summary
from normbench.userfiles import inside, safe_name

SUBDIR = "summary"
CURVES = ("acc/val", "loss/val", "acc/train", "loss/train")
STATS = ("mean", "ci_low", "ci_high")


def run_curves(run_dir: Path, history: list[dict] | None = None) -> dict[str, dict[int, float]]:
    """{curve: {step: value}} from the run's event files (its own directory only)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves: dict[str, dict[int, float]] = {}
    if any(run_dir.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
        for tag in set(acc.Tags()["scalars"]) & set(CURVES):
            curves[tag] = {e.step: e.value for e in acc.Scalars(tag)}
    for epoch in history or []:  # the per-epoch values, for runs without TensorBoard files
        for tag in ("acc/val", "loss/val"):
            if tag not in curves and isinstance(epoch.get(tag), (int, float)) and "step" in epoch:
                curves.setdefault(f"_{tag}", {})[epoch["step"]] = epoch[tag]
    for tag in ("acc/val", "loss/val"):
        if f"_{tag}" in curves:
            curves[tag] = curves.pop(f"_{tag}")
    return curves


def aggregate(per_seed: list[dict[int, float]]) -> list[tuple[int, float, float, float]]:
    """(step, mean, ci_low, ci_high) at every step that all seeds logged."""
    steps = sorted(set.intersection(*(set(c) for c in per_seed))) if per_seed else []
    out = []
    for step in steps:
        values = [c[step] for c in per_seed]
        lo, hi = stats.t_interval(values)
        out.append((step, sum(values) / len(values), lo, hi))
    return out


def _slug(label: str) -> str:
    """A label from the runs' data as one folder name (userfiles.safe_name: no '/', no leading '.')."""
    return safe_name(label.replace(" ", ","))


def groups(s: Summary) -> dict[str, dict[str, list[Path]]]:
    """{label: {setting: run dirs}} over the test-accuracy tables; only groups of two seeds or more."""
    tables = [t for t in s.tables if t.metric == "test_acc"]
    several = len({(t.study, t.data, t.model) for t in tables}) > 1
    out: dict[str, dict[str, list[Path]]] = defaultdict(dict)
    for t in tables:
        where = "/".join(p for p in (t.study, t.data, t.model) if p) if several else ""
        for row in t.rows:
            if t.kind == VARLEN:  # columns are test lengths: one training curve per run
                paths = list(dict.fromkeys(p for (r, _), c in t.cells.items() if r == row for p in c.paths))
                settings = {where or "all": paths}
            else:
                settings = {"/".join(p for p in (where, f"bs={col}") if p): t.cells[row, col].paths
                            for col in t.cols if (row, col) in t.cells}
            for setting, paths in settings.items():
                paths = [p for p in paths if p is not None]
                if len(paths) >= 2:
                    out[row][setting] = paths
    return out


def _png_size(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    return height, width


def _tensor_value(tag: str, plugin: str, data: bytes):
    """A string-tensor summary value for `plugin` (what tensorboard.plugins.*.summary.pb build, which
    need TensorFlow)."""
    from tensorboard.compat.proto.summary_pb2 import Summary as SummaryProto
    from tensorboard.compat.proto.summary_pb2 import SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING

    return SummaryProto.Value(tag=tag, tensor=TensorProto(dtype=DT_STRING, string_val=[data],
                                                          tensor_shape=TensorShapeProto()),
                              metadata=SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=plugin)))


def write(s: Summary, log_dir: Path, figures: dict[str, Path], markdown: str) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary as SummaryProto
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.custom_scalar.metadata import CONFIG_SUMMARY_TAG
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    for old in log_dir.rglob("events.out.tfevents.*"):  # summarize again: replace, do not append
        old.unlink()
    now = time.time()
    histories = {r.path: r.results.get("history") for r in s.runs}
    charts: dict[str, set[str]] = defaultdict(set)  # setting -> curves with an aggregate
    for label, settings in groups(s).items():
        writer = EventFileWriter(str(inside(log_dir, log_dir / _slug(label))))
        for setting, paths in settings.items():
            curves = [run_curves(p, histories.get(p)) for p in paths]
            for curve in CURVES:
                per_seed = [c[curve] for c in curves if curve in c]
                if len(per_seed) < len(curves):  # a seed without the curve: no honest average
                    continue
                charts[setting].add(curve)
                for step, mean, lo, hi in aggregate(per_seed):
                    values = [SummaryProto.Value(tag=f"{setting}/{curve}/{k}", simple_value=v)
                              for k, v in zip(STATS, (mean, lo, hi))]
                    writer.add_event(Event(wall_time=now, step=step, summary=SummaryProto(value=values)))
        writer.close()

    writer = EventFileWriter(str(log_dir))
    categories = [layout_pb2.Category(title=f"mean and 95% CI over seeds · {setting}", chart=[
        layout_pb2.Chart(title=f"{curve} · {setting}", margin=layout_pb2.MarginChartContent(series=[
            layout_pb2.MarginChartContent.Series(value=f"{setting}/{curve}/mean", lower=f"{setting}/{curve}/ci_low",
                                                 upper=f"{setting}/{curve}/ci_high")]))
        for curve in CURVES if curve in curves]) for setting, curves in charts.items()]
    layout = layout_pb2.Layout(category=categories).SerializeToString()
    writer.add_event(Event(wall_time=now, step=0, summary=SummaryProto(value=[
        _tensor_value(CONFIG_SUMMARY_TAG, "custom_scalars", layout)])))
    images = []
    for name, path in figures.items():
        data = path.read_bytes()
        height, width = _png_size(data)
        images.append(SummaryProto.Value(tag=f"summary/{name}", image=SummaryProto.Image(
            height=height, width=width, colorspace=4, encoded_image_string=data)))
    if images:
        writer.add_event(Event(wall_time=now, step=0, summary=SummaryProto(value=images)))
    writer.add_event(Event(wall_time=now, step=0, summary=SummaryProto(value=[
        _tensor_value("summary/text_summary", "text", markdown.encode())])))
    writer.close()
