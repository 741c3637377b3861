"""The Scheduled tasks page's picture: how many tasks are waiting, by due time and task type, for the next hour
(12 five-minute bins) and the next day (24 hourly bins), each after a "due now" bin of the tasks already due.

The task backends' declared API has no count by due time (``TaskBackend`` answers per task: ``info``,
``status``), so this reads the app's own SQL backend's table (``django://``, the ``ScheduledTask`` model): one
GROUP BY query per chart with a filtered count per bin, on the (status, task_type, due) index.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.db.models import Count, Q
from django.utils import timezone as dj_timezone
from django.utils.safestring import SafeString

from ..models import ScheduledTask
from . import svg

__all__ = ["PendingChart", "pending_charts"]


@dataclass(frozen=True)
class PendingChart:
    """One histogram: its title, bars, task types (the series) and totals per type (its text alternative)."""

    title: str
    bars: list[svg.Bar]
    types: list[str]
    totals: dict[str, int]
    every: int  # label every n-th bar

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    @property
    def summary(self) -> str:
        if not self.total:
            return f"{self.title}: no task waiting."
        busiest = max(self.bars, key=lambda bar: sum(bar.counts.values()))
        kinds = ", ".join(f"{name} {count}" for name, count in self.totals.items())
        return (f"{self.title}: {self.total} task{'s' if self.total != 1 else ''} waiting ({kinds}); the most, "
                f"{sum(busiest.counts.values())}, due {busiest.span}.")

    def svg(self) -> SafeString:
        return svg.histogram(self.bars, self.types, label=self.summary, every=self.every)

    @property
    def legend(self) -> list[tuple[SafeString, str, int]]:
        return [(svg.swatch(f"mx-series-{index % svg.SERIES}"), name, self.totals[name])
                for index, name in enumerate(self.types)]


def _bins(now: datetime, step: timedelta, count: int) -> list[tuple[datetime, datetime]]:
    return [(now + step * n, now + step * (n + 1)) for n in range(count)]


def _chart(alias: str, title: str, now: datetime, bins: list[tuple[datetime | None, datetime]], every: int,
           fmt: str) -> PendingChart:
    """Count the waiting tasks of each type in each bin (``None`` as a bin's start: everything due before its end)."""
    filters = {f"b{n}": Q(due__lt=end) if start is None else Q(due__gte=start, due__lt=end)
               for n, (start, end) in enumerate(bins)}
    waiting = ScheduledTask.objects.using(alias).filter(status=ScheduledTask.Status.SCHEDULED, due__lt=bins[-1][1])
    rows = cast(Iterable[dict[str, Any]], waiting.order_by().values("task_type").annotate(
        **{name: Count("pk", filter=q) for name, q in filters.items()}))
    counts = {str(row["task_type"]): [int(row[f"b{n}"]) for n in range(len(bins))] for row in rows}
    types = sorted(counts)
    zone = dj_timezone.get_current_timezone()
    bars = []
    for n, (start, end) in enumerate(bins):
        label = "now" if start is None else start.astimezone(zone).strftime(fmt)
        span = (f"by {now.astimezone(zone):%H:%M}" if start is None
                else f"{start.astimezone(zone):%H:%M}-{end.astimezone(zone):%H:%M %Z}")
        bars.append(svg.Bar(label, span, {name: counts[name][n] for name in types}))
    return PendingChart(title, bars, types, {name: sum(counts[name]) for name in types}, every)


def pending_charts(alias: str, now: datetime | None = None) -> list[PendingChart]:
    """The next hour (a "due now" bin, then 12 five-minute bins) and the next day ("due now", 24 hourly bins)."""
    now = now or dj_timezone.now()
    hour: list[tuple[datetime | None, datetime]] = [(None, now), *_bins(now, timedelta(minutes=5), 12)]
    day: list[tuple[datetime | None, datetime]] = [(None, now), *_bins(now, timedelta(hours=1), 24)]
    return [_chart(alias, "Due in the next hour", now, hour, every=2, fmt="%H:%M"),
            _chart(alias, "Due in the next day", now, day, every=3, fmt="%H:%M")]
