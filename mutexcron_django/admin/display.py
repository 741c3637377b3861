"""How the admin pages show values: times with seconds, durations, error texts, and text without the
passwords of the configured URLs, and the permissions of read-only pages. Shared by the Locks, run history and
scheduled tasks pages."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone as dj_timezone
from django.utils.html import format_html

from mutexcron.urls import scrub

from ..conf import MutexcronSettings, get_settings
from ..sql.clock import AsUTC, aware

M = TypeVar("M", bound=Model)

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin
else:
    class ModelAdmin(admin.ModelAdmin, Generic[M]):
        """``admin.ModelAdmin``, subscriptable at run time as django-stubs types it (``ModelAdmin[Lock]``)."""


class WrittenByMutexcron:
    """Admin permissions for rows that only mutexcron writes (run history, scheduled tasks): no add form and
    no edit form; the rows are viewed."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def zone_name(zone: tzinfo) -> str:
    return getattr(zone, "key", None) or str(zone)


def show_time(moment: datetime | None, zone: tzinfo | None = None) -> str:
    """``moment`` with seconds and its zone (default: the current time zone); "" for None."""
    if moment is None:
        return ""
    local = moment.astimezone(zone or dj_timezone.get_current_timezone())
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


def with_utc_times(queryset: QuerySet[M], fields: tuple[str, ...]) -> QuerySet[M]:
    """``queryset`` with each time field also read as UTC, as ``utc_<field>`` (see :class:`AsUTC`): on
    PostgreSQL, Django labels what the server sends in the session's zone as UTC, so a session in another zone
    would shift every time shown by its offset."""
    annotated: QuerySet[M] = queryset.annotate(**{f"utc_{field}": AsUTC(field) for field in fields})
    return annotated


def utc_time(obj: Any, field: str) -> datetime | None:
    """The time ``field`` of ``obj``: its ``utc_<field>`` if read by :func:`with_utc_times`, else the field."""
    return aware(getattr(obj, f"utc_{field}")) if hasattr(obj, f"utc_{field}") else getattr(obj, field)


def seconds_column(field: str, description: str, empty: str = "") -> Callable[[Any, Any], str]:
    """An admin column showing a time field with seconds (Django's default format stops at minutes)."""

    @admin.display(description=description, ordering=field)
    def column(self: Any, obj: Any) -> str:
        return show_time(utc_time(obj, field)) or empty

    return column


def format_duration(duration: timedelta | None) -> str:
    if duration is None:
        return ""
    seconds = duration.total_seconds()
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d} min"


def last_line(text: str | None) -> str:
    """The last non-blank line of ``text`` (of a traceback: what went wrong); "" if there is none."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def error_block(error: str | None) -> str:
    """A stored error (a traceback) as a wrapped, preformatted block; "-" if there is none."""
    if not error:
        return "-"
    return format_html(
        '<pre class="mutexcron-error" style="white-space: pre-wrap; overflow-x: auto; margin: 0; '
        'font-size: 0.85em; line-height: 1.4;">{}</pre>',
        error,
    )


def current_settings() -> MutexcronSettings | None:
    """The settings, or None if they are invalid (an error message is being shown about something else)."""
    with suppress(ImproperlyConfigured):
        return get_settings()
    return None


def without_store_secrets(text: str, conf: MutexcronSettings | None) -> str:
    """``text`` without the lock store URL's secrets. Stores already mask them; this guards client
    libraries' messages."""
    if conf is None or not isinstance(conf.store, str):
        return text
    return scrub(text, conf.store)


def without_task_secrets(text: str) -> str:
    """``text`` without the secrets of the task backend's and cancel store's URLs."""
    with suppress(ImproperlyConfigured):
        return scrub(text, *get_settings().tasks.urls)
    return text
