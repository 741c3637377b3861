"""Time zones for schedules: a name or tzinfo resolved with an error that names it, and whether a zone keeps
one UTC offset forever (UTC, the ``Etc/`` zones, ``datetime.timezone``), for which a fire time is plain
arithmetic: no gap, no repeated hour."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["fixed_offset", "resolve_timezone"]

# The tz database's fixed zones outside Etc/ (each a link to an Etc/ zone); every Etc/ zone is fixed.
_FIXED_NAMES = frozenset({"UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Universal", "Zulu"})


def resolve_timezone(value: str | tzinfo | None, *, default: str | tzinfo = "UTC", subject: str = "timezone") -> tzinfo:
    """Turn a zone name or tzinfo into a tzinfo; an unknown name raises ``ValueError`` naming it."""
    value = default if value is None else value
    if isinstance(value, tzinfo):
        return value
    if isinstance(value, str):
        try:
            return ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
            pass
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "…"
    raise ValueError(f"{subject}: unknown time zone {shown}")


def fixed_offset(zone: tzinfo) -> timedelta | None:
    """The one UTC offset of a zone that never changes it, else None (any other zone, even one with no DST
    today: its history may hold a change)."""
    if isinstance(zone, timezone):
        return zone.utcoffset(None)
    key = zone.key if isinstance(zone, ZoneInfo) else None  # None too for a ZoneInfo read from a file
    if key is not None and (key in _FIXED_NAMES or key.startswith("Etc/")):
        return zone.utcoffset(datetime(2000, 1, 1)) or timedelta(0)
    return None
