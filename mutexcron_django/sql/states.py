"""The ``Lock`` rows read back as lock states (``LockState``), their times in UTC whatever the session's zone."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from mutexcron.stores.base import LockState

from ..models import Lock
from .clock import AsUTC, aware

__all__ = ["lock_states"]

# LockState's fields as the row holds them; the times are read as UTC whatever the session's time zone.
_PLAIN = ("name", "locked", "locked_by", "token", "tick_token", "paused", "paused_by", "pause_note", "schedule",
          "schedule_timezone", "schedule_version", "schedule_by", "last_outcome", "last_error", "failures", "incident",
          "definition")
_TIMES = ("last_locked_at", "last_released_at", "lock_until", "last_fire_time", "paused_at", "paused_until",
          "resumed_at", "schedule_changed_at", "created_at", "last_finished_at", "last_success_at", "incident_at")


def lock_states(rows: QuerySet[Lock]) -> list[LockState]:
    """The rows as lock states."""
    states = []
    for row in rows.values(*_PLAIN, **{f"utc_{field}": AsUTC(field) for field in _TIMES}):
        fields: dict[str, Any] = {field: row[field] for field in _PLAIN}
        fields.update((field, aware(row[f"utc_{field}"])) for field in _TIMES)
        states.append(LockState(**fields))
    return states
