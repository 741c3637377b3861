"""How ``manage.py mutexcron`` prints: times in a zone, ISO times for JSON, plain-text tables, and a
lock's state in one word."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

from mutexcron.stores import LockState


def when(value: datetime | None, zone: tzinfo = UTC) -> str:
    if value is None:
        return "-"
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * width for width in widths], *rows]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def lock_state(state: LockState | None, now: datetime) -> str:
    """``held`` (a live lease), ``expired`` (taken, lease ran out), ``free``, or ``unseeded`` (no document)."""
    if state is None:
        return "unseeded"
    if state.is_held(now):
        return "held"
    return "expired" if state.locked else "free"
