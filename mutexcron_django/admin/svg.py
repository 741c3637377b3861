"""The admin's pictures, drawn on the server as inline SVG: a strip of tick cells, a sparkline of durations and
a stacked histogram. No script and no external asset: every colour is a CSS class whose variables
(admin/mutexcron/svg_style.html) follow the admin's light and dark themes. Each picture has ``role="img"``,
an ``aria-label`` and a ``<title>`` saying what it shows in words, and each mark its own ``<title>`` (shown on
hover); the pages add a legend and a table as the text alternative."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

__all__ = ["STATES", "Bar", "Point", "StripCell", "histogram", "sparkline", "spread", "strip", "swatch"]

# A tick's state -> what the legend and the titles call it. The order is the legend's.
STATES: dict[str, str] = {
    "succeeded": "Succeeded",
    "failed": "Failed",
    "timed_out": "Timed out",
    "replaced": "Replaced",
    "caught_up": "Caught up",
    "missed": "Missed",
    "skipped": "Skipped (busy, store error, stale schedule, late)",
    "paused": "Paused",
    "running": "Running",
    "unrecorded": "Taken, no outcome recorded",
    "pending": "Pending (within its alert delay)",
}
# Shapes as well as colours, so the states differ without colour too: (y offset, height) as parts of a cell.
_SHAPES: dict[str, tuple[float, float]] = {"paused": (0.3, 0.4), "skipped": (0.25, 0.75), "pending": (0.6, 0.4),
                                           "timed_out": (0.0, 0.6), "replaced": (0.4, 0.6)}
SERIES = 8  # histogram colours (mx-series-0 .. 7), then they repeat
HISTOGRAM_BAR, HISTOGRAM_GAP, HISTOGRAM_HEIGHT = 18.0, 4.0, 90.0  # a bar's width, the gap after it, the chart's height


def swatch(css_class: str, size: float = 12) -> SafeString:
    """A legend's sample of a colour (hidden from assistive technology: the legend's text says it)."""
    return format_html('<svg xmlns="http://www.w3.org/2000/svg" class="mutexcron-swatch" aria-hidden="true" '
                       'focusable="false" viewBox="0 0 {} {}" width="{}" height="{}"><rect class="{}" x="0.5" '
                       'y="0.5" width="{}" height="{}" rx="2"/></svg>', _n(size), _n(size), _n(size), _n(size),
                       css_class, _n(size - 1), _n(size - 1))


def _svg(kind: str, width: float, height: float, label: str, body: SafeString) -> SafeString:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="mutexcron-svg mutexcron-{}" role="img" aria-label="{}" '
        'viewBox="0 0 {} {}" width="{}" height="{}"><title>{}</title>{}</svg>',
        kind, label, _n(width), _n(height), _n(width), _n(height), label, body)


def _n(value: float) -> str:
    """A coordinate, short: 12, 12.5."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class StripCell:
    """One nominal tick: its time (``data-tick``, ISO 8601 UTC), its state (a key of :data:`STATES`), its hover."""

    tick: str
    state: str
    title: str


def strip(cells: Sequence[StripCell], *, label: str, cell: float = 7, gap: float = 1, height: float = 22,
          axis: tuple[str, str] | None = None) -> SafeString:
    """One cell per tick, oldest left; ``axis`` labels the first and the last tick under the strip."""
    pitch = cell + gap
    width = max(pitch * len(cells) - gap, cell)
    marks = []
    for number, item in enumerate(cells):
        top, part = _SHAPES.get(item.state, (0.0, 1.0))
        marks.append(format_html(
            '<rect class="mx-cell mx-{}" x="{}" y="{}" width="{}" height="{}" rx="1" data-tick="{}" '
            'data-state="{}"><title>{}</title></rect>',
            item.state, _n(number * pitch), _n(top * height), _n(cell), _n(part * height), item.tick, item.state,
            item.title))
    body = mark_safe("".join(marks))
    total = height
    if axis is not None:
        total = height + 14
        body = format_html('{}<text class="mx-axis" x="0" y="{}">{}</text>'
                           '<text class="mx-axis" x="{}" y="{}" text-anchor="end">{}</text>',
                           body, _n(total - 2), axis[0], _n(width), _n(total - 2), axis[1])
    return _svg("strip", width, total, label, body)


@dataclass(frozen=True)
class Point:
    """A sparkline's value at one tick (None: no run there), with its hover."""

    value: float | None
    title: str


def sparkline(points: Sequence[Point], *, label: str, pitch: float = 8, cell: float = 7, height: float = 40,
              unit: str = "s") -> SafeString:
    """A line through the values, one x per tick (aligned with a :func:`strip` of the same pitch); a tick
    without a value breaks the line. The largest value is labelled."""
    values = [point.value for point in points if point.value is not None]
    width = max(pitch * len(points) - (pitch - cell), cell)
    if not values:
        return _svg("sparkline", width, height, label, format_html(
            '<text class="mx-axis" x="0" y="{}">no run in this window</text>', _n(height / 2)))
    top = max(values) or 1.0
    plot = height - 12

    def y(value: float) -> float:
        return 10 + plot - value / top * plot

    lines: list[list[str]] = []
    run: list[str] = []
    dots: list[SafeString] = []
    for number, point in enumerate(points):
        x = number * pitch + cell / 2
        if point.value is None:
            lines.append(run)
            run = []
            continue
        run.append(f"{_n(x)},{_n(y(point.value))}")
        dots.append(format_html('<circle class="mx-dot" cx="{}" cy="{}" r="2"><title>{}</title></circle>',
                                _n(x), _n(y(point.value)), point.title))
    lines.append(run)
    paths = format_html_join("", '<polyline class="mx-line" points="{}"/>',
                             ((" ".join(line),) for line in lines if len(line) > 1))
    body = format_html('<line class="mx-base" x1="0" y1="{}" x2="{}" y2="{}"/>{}{}'
                       '<text class="mx-axis" x="{}" y="8" text-anchor="end">max {} {}</text>',
                       _n(10 + plot), _n(width), _n(10 + plot), paths, mark_safe("".join(dots)), _n(width),
                       f"{top:.3f}", unit)
    return _svg("sparkline", width, height, label, body)


def spread(values: Sequence[float], unit: str = "s") -> str:
    """"min …, median …, max … s" of ``values`` (for a text alternative)."""
    if not values:
        return "none"
    return (f"min {min(values):.3f} {unit}, median {statistics.median(values):.3f} {unit}, "
            f"max {max(values):.3f} {unit}")


@dataclass(frozen=True)
class Bar:
    """One bin of a histogram: its axis label, its hover's time range and its count per series."""

    label: str
    span: str
    counts: Mapping[str, int]


def histogram(bars: Sequence[Bar], series: Sequence[str], *, label: str, every: int = 1) -> SafeString:
    """Stacked bars, one colour per series (in ``series`` order); ``every``-th bar labelled under the axis."""
    bar, gap, height = HISTOGRAM_BAR, HISTOGRAM_GAP, HISTOGRAM_HEIGHT
    pitch = bar + gap
    width = max(pitch * len(bars) - gap, bar)
    plot = height - 26
    tallest = max((sum(b.counts.values()) for b in bars), default=0) or 1
    marks = []
    for number, item in enumerate(bars):
        x, base = number * pitch, 10 + plot
        for index, name in enumerate(series):
            count = item.counts.get(name, 0)
            if not count:
                continue
            size = count / tallest * plot
            base -= size
            marks.append(format_html(
                '<rect class="mx-series-{}" x="{}" y="{}" width="{}" height="{}" data-series="{}" data-count="{}">'
                '<title>{}: {} task{} due {}</title></rect>',
                index % SERIES, _n(x), _n(base), _n(bar), _n(size), name, count, name, count,
                "" if count == 1 else "s", item.span))
        if number % every == 0:
            marks.append(format_html('<text class="mx-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                                     _n(x + bar / 2), _n(height - 2), item.label))
    body = format_html('<line class="mx-base" x1="0" y1="{}" x2="{}" y2="{}"/>{}'
                       '<text class="mx-axis" x="{}" y="8" text-anchor="end">max {}</text>',
                       _n(10 + plot), _n(width), _n(10 + plot), mark_safe("".join(marks)), _n(width), tallest)
    return _svg("histogram", width, height, label, body)
