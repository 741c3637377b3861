"""Checking option values (durations, counts, zones) the same way for jobs and schedulers.

Each check raises the entry point's own documented error type, with a message naming the option and the
value, instead of the ValueError or OverflowError that ``timedelta`` or ``ZoneInfo`` would raise.
"""

from __future__ import annotations

import math
from datetime import timedelta, tzinfo
from urllib.parse import urlsplit

from .cron import resolve_timezone
from .ping_urls import PingURL, mask_ping_url

# Longer leases, grace times or timeouts are mistakes (seconds given as minutes...), and far-off lock
# expiries overflow the stores' datetimes.
MAX_DURATION = timedelta(days=365)


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


def duration(value: object, *, what: str, error: type[Exception], allow_zero: bool = True,
             allow_negative: bool = False, seconds: bool = True) -> timedelta:
    """``value`` (a timedelta, or a number of seconds if ``seconds``) as a timedelta within ±MAX_DURATION."""
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float) or (
            not seconds and not isinstance(value, timedelta)):
        raise error(f"{what} must be a timedelta{' or seconds' if seconds else ''}, not {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{what} must be a finite duration, not {shown(value)}")
    if not isinstance(value, timedelta) and abs(value) > MAX_DURATION.total_seconds():
        raise error(f"{what} must be at most {MAX_DURATION}, not {shown(value)} seconds")
    result = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if abs(result) > MAX_DURATION:
        raise error(f"{what} must be at most {MAX_DURATION}, not {shown(value)}")
    if result < timedelta(0) and not allow_negative:
        raise error(f"{what} must be {'>= 0' if allow_zero else '> 0'}, not {shown(value)}")
    if result == timedelta(0) and not allow_zero:
        raise error(f"{what} must be > 0, not {shown(value)}")
    return result


def positive_duration(value: object, *, what: str, error: type[Exception], seconds: bool = True) -> timedelta:
    """``value`` (a timedelta, or a number of seconds if ``seconds``) as a timedelta longer than zero, with no
    upper bound: a store's or backend's setting (a retention may well be years)."""
    result: object = value
    if seconds and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            result = timedelta(seconds=value)
        except (ValueError, OverflowError):  # nan, inf, too large
            result = None
    if not isinstance(result, timedelta) or result <= timedelta(0):
        kind = "timedelta or seconds" if seconds else "duration"
        raise error(f"{what} must be a positive {kind}, not {shown(value)}")
    return result


def count(value: object, *, what: str, error: type[Exception], maximum: int) -> int:
    """``value`` as a whole number from 1 to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise error(f"{what} must be a whole number from 1 to {maximum}, not {shown(value)}")
    return value


def zone(value: object, *, what: str, error: type[Exception]) -> tzinfo:
    """``value`` (a zone name or tzinfo) as a tzinfo."""
    try:
        # resolve_timezone rejects any other value with the message wanted here, so it gets the value as is.
        return resolve_timezone(value, subject=what)  # type: ignore[arg-type]
    except ValueError as problem:
        raise error(str(problem)) from None


def instance_id(value: object, *, what: str, error: type[Exception]) -> str | None:
    """``value`` if it is None (host:pid) or a non-empty string."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise error(f"{what} must be a non-empty string or None, not {shown(value)}")
    return value


def alert_after(value: object, *, what: str, error: type[Exception]) -> timedelta | bool | None:
    """``value`` as an alert delay: None (the default delay), False (no alerts), or a duration >= 0."""
    if value is None or value is False:
        return value
    if value is True:
        raise error(f"{what} must be None (the default), False (no alerts) or a duration >= 0, not True")
    return duration(value, what=what, error=error)


def http_url(value: object, *, what: str, error: type[Exception]) -> str | None:
    """``value`` if it is None or an absolute http(s) URL (a dead man's switch to GET), kept as written: its
    query is part of every ping (:func:`~mutexcron.ping_urls.ping_target`). Errors show it masked
    (:func:`~mutexcron.ping_urls.mask_ping_url`): its path holds the ping's secret."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        given = "an empty string" if isinstance(value, str) else shown(value)
        raise error(f"{what} must be an http(s) URL or None, not {given}")
    why = _http_url_problem(value)
    if why is not None:
        raise error(f"{what} must be an absolute http:// or https:// URL: {mask_ping_url(value)!r} {why}")
    return PingURL(value)


def _http_url_problem(url: str) -> str | None:
    scheme, separator, _ = url.partition("://")
    if not separator:
        return "has no http:// or https:// scheme"
    if scheme.lower() not in ("http", "https"):
        return "has another scheme" if len(scheme) > 10 else f"has the scheme {scheme!r}"
    if any(ch.isspace() for ch in url):
        return "contains whitespace"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "has a port that is not a number from 0 to 65535"
    return None if parts.hostname else "has no host"
