"""Time zones for schedules: a name or tzinfo resolved with an error that names it (a pytz zone becomes the
``ZoneInfo`` of its name), and whether a zone keeps one UTC offset forever (UTC, the ``Etc/`` zones,
``datetime.timezone``), for which a fire time is plain arithmetic: no gap, no repeated hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import CronSpecError

__all__ = ["fixed_offset", "native_zone", "resolve_timezone", "wall_offsets", "zone_name"]

# The tz database's fixed zones outside Etc/ (each a link to an Etc/ zone); every Etc/ zone is fixed.
_FIXED_NAMES = frozenset({"UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Universal", "Zulu"})


def resolve_timezone(value: str | tzinfo | None, *, default: str | tzinfo = "UTC", subject: str = "timezone") -> tzinfo:
    """Turn a zone name or tzinfo into a tzinfo; an unknown name raises ``ValueError`` naming it."""
    value = default if value is None else value
    if isinstance(value, tzinfo):
        return native_zone(value, subject=subject)
    if isinstance(value, str):
        try:
            return ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
            pass
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "…"
    raise ValueError(f"{subject}: unknown time zone {shown}")


def native_zone(zone: tzinfo, *, subject: str = "timezone") -> tzinfo:
    """``zone``, or for a pytz zone the standard zone it stands for: the ``ZoneInfo`` of its name, or a fixed
    ``datetime.timezone``. A pytz zone gives its first (local mean time) offset to ``replace(tzinfo=)``, which
    wall-clock arithmetic relies on; a ValueError names a pytz zone this system's tz database lacks."""
    if type(zone).__module__.partition(".")[0] != "pytz":  # pytz is never imported here: checked by its classes
        return zone
    name = getattr(zone, "zone", None)
    if not isinstance(name, str):  # pytz.FixedOffset: one offset, whatever the date
        return timezone(zone.utcoffset(None) or timedelta(0))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"{subject}: pytz time zone {name!r} is not in this system's tz database (install the "
                         "tzdata package, or pass another zone)") from None


def fixed_offset(zone: tzinfo) -> timedelta | None:
    """The one UTC offset of a zone that never changes it, else None (any other zone, even one with no DST
    today: its history may hold a change)."""
    if isinstance(zone, timezone):
        return zone.utcoffset(None)
    key = zone.key if isinstance(zone, ZoneInfo) else None  # None too for a ZoneInfo read from a file
    if key is not None and (key in _FIXED_NAMES or key.startswith("Etc/")):
        return zone.utcoffset(datetime(2000, 1, 1)) or timedelta(0)
    return None


def wall_offsets(wall: datetime, zone: tzinfo) -> tuple[timedelta, timedelta]:
    """The UTC offsets of the naive ``wall`` time's first (fold=0) and second (fold=1) readings in ``zone``: equal
    except in a change (before < after: a skipped time, before > after: a repeated one). A zone that reads a skipped
    time with one offset for both folds (dateutil's) shows it by the round trip: the instant it names reads another."""
    first = wall.replace(tzinfo=zone)
    before, after = first.utcoffset() or timedelta(0), first.replace(fold=1).utcoffset() or timedelta(0)
    if before == after and not isinstance(zone, ZoneInfo):  # ZoneInfo follows PEP 495 in gaps too
        actual = (wall - before).replace(tzinfo=UTC).astimezone(zone).utcoffset() or timedelta(0)
        if actual != before:
            return min(before, actual), max(before, actual)
    return before, after


def zone_name(zone: str | tzinfo | None, *, job_name: str) -> str | None:
    """The IANA name of ``zone`` (what the store keeps), or CronSpecError naming the job and the zone."""
    if zone is None:
        return None
    try:
        resolved = resolve_timezone(zone, subject=f"job {job_name!r}: schedule timezone")
    except ValueError as error:
        raise CronSpecError(str(error)) from None
    key = getattr(resolved, "key", None)
    name = key if isinstance(key, str) else str(resolved) if resolved is UTC else None
    if name is None:
        raise CronSpecError(f"job {job_name!r}: schedule timezone {zone!r} has no IANA name; pass one such as "
                            "'Europe/Paris'")
    return name
