"""The geometry of the dashboard's throughput charts, drawn by an SVG template."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import formats, timezone
from django.utils.translation import gettext as _

from django_sqlq.dashboard.rows import Bucket


@dataclass(frozen=True)
class ChartBar:
    x: float
    width: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True)
class Chart:
    """A stacked bar chart (completed below, failed above), drawn by an SVG template."""

    width: int
    height: int
    plot_top: int
    plot_bottom: int
    bars: list[ChartBar]
    labels: list[tuple[float, str]]
    peak: int
    unit: str
    completed: int
    failed: int

    @property
    def plot_height(self) -> int:
        return self.plot_bottom - self.plot_top


def chart(buckets: Sequence[Bucket], *, label_every: int, label_format: str, unit: str) -> Chart:
    """Bars for ``buckets`` on a 600 x 130 canvas, scaled to the busiest bucket, with a time
    label (in the current time zone) every ``label_every`` bars."""
    width, height, top, bottom = 600, 130, 12, 110
    peak = max((b.total for b in buckets), default=0)
    scale = (bottom - top) / peak if peak else 0.0
    step = width / max(1, len(buckets))
    bars, labels = [], []
    for i, bucket in enumerate(buckets):
        completed = bucket.completed * scale
        failed = bucket.failed * scale
        start = timezone.localtime(bucket.start)
        stamp = formats.date_format(start, label_format)
        bars.append(
            ChartBar(
                x=round(i * step + 1, 2),
                width=round(max(1.0, step - 2), 2),
                completed_y=round(bottom - completed, 2),
                completed_height=round(completed, 2),
                failed_y=round(bottom - completed - failed, 2),
                failed_height=round(failed, 2),
                title=_("%(when)s: %(c)d completed, %(f)d failed")
                % {"when": stamp, "c": bucket.completed, "f": bucket.failed},
            )
        )
        if i % label_every == 0:
            labels.append((round(i * step + 1, 2), stamp))
    return Chart(
        width=width,
        height=height,
        plot_top=top,
        plot_bottom=bottom,
        bars=bars,
        labels=labels,
        peak=peak,
        unit=unit,
        completed=sum(b.completed for b in buckets),
        failed=sum(b.failed for b in buckets),
    )
