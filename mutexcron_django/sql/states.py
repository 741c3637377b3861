"""The ``Lock`` rows as lock states (``LockState``): read back with their times in UTC whatever the session's zone,
written whole; and what the store's acquire decides on a row, as conditions on the database's clock (the database's
side of :mod:`mutexcron.stores.changes`: a pause, a live overlap slot, a run kept for a task worker's retry)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from django.db.models import BooleanField, DateTimeField, ExpressionWrapper, F, Q, QuerySet

from mutexcron.stores.base import LockState

from ..models import Lock
from .clock import AsUTC, DbNow, aware, now_minus

__all__ = ["NOT_PAUSED", "PAUSED", "SLOT_LIVE", "columns", "free_for", "lock_states", "reserve_columns", "reserved",
           "slot_allows"]

# Every LockState field is a column of the same name; the times are read as UTC whatever the session's time zone.
_FIELDS = tuple(field.name for field in fields(LockState))
_TIMES = frozenset(field.name for field in Lock._meta.concrete_fields if isinstance(field, DateTimeField))
_PLAIN = tuple(name for name in _FIELDS if name not in _TIMES)


def lock_states(rows: QuerySet[Lock]) -> list[LockState]:
    """The rows as lock states."""
    times = [name for name in _FIELDS if name in _TIMES]
    states = []
    for row in rows.values(*_PLAIN, **{f"utc_{name}": AsUTC(name) for name in times}):
        values: dict[str, Any] = {name: row[name] for name in _PLAIN}
        values.update((name, aware(row[f"utc_{name}"])) for name in times)
        states.append(LockState(**values))
    return states


def columns(state: LockState) -> dict[str, Any]:
    """What a row stores of ``state``: every field but its name (the key) and its revision (the store's to bump)."""
    return {name: getattr(state, name) for name in _FIELDS if name not in ("name", "revision")}


# Acquires are refused while PAUSED holds: paused, and its until (if any) not reached on the database's clock.
NOT_PAUSED = Q(paused=False) | Q(paused_until__lte=DbNow())
PAUSED = Q(paused=True) & (Q(paused_until__isnull=True) | Q(paused_until__gt=DbNow()))  # NOT_PAUSED's negation

# The overlap slot holds a tick (changes.live_slot): written, not expired, and not yet taken (NULL-safe: false or NULL).
_LIVE = (Q(next_fire__isnull=False) & Q(next_until__gt=DbNow())
         & (Q(last_fire_time__isnull=True) | Q(next_fire__gt=F("last_fire_time"))))
SLOT_LIVE = ExpressionWrapper(_LIVE, output_field=BooleanField())  # as a column read with the row
# Its negation, NULL-safe: the slot is empty, expired, or holds a tick already taken.
_DEAD = (Q(next_fire__isnull=True) | Q(next_until__isnull=True) | Q(next_until__lte=DbNow())
         | Q(next_fire__lte=F("last_fire_time")))

# A run a task worker took over (its token moved past the tick token) and never released.
_TAKEN_OVER = Q(locked=True) & ~Q(tick_token=0) & ~Q(tick_token=F("token"))


def slot_allows(fire_time: datetime | None) -> Q:
    """The rows whose slot lets ``fire_time`` through: dead, or holding that tick. A manual run (None) only gets
    through a dead slot."""
    return _DEAD if fire_time is None else _DEAD | Q(next_fire=fire_time)


def free_for(lease: timedelta) -> Q:
    """The rows an acquire with ``lease`` may take: not locked, or its lease ran out, but for a run taken over by a
    worker, which is kept for its tick's retry until ``lease`` after its lease ran out (changes.reserved)."""
    return Q(locked=False) | (Q(lock_until__lte=DbNow()) & ~(_TAKEN_OVER & Q(lock_until__gt=now_minus(lease))))


def reserve_columns() -> dict[str, Any]:
    """What :func:`reserved` reads of a row, as ``values()`` columns."""
    return {"taken_over": ExpressionWrapper(_TAKEN_OVER, output_field=BooleanField()),
            "until": AsUTC("lock_until"), "db_now": AsUTC(DbNow())}


def reserved(row: Mapping[str, Any], lease: timedelta) -> bool:
    """Whether a row read with :func:`reserve_columns` is kept for a taken-over run's retry from an acquire with
    ``lease`` (:func:`free_for`, for a row already read)."""
    until, now = aware(row["until"]), aware(row["db_now"])
    return bool(row["taken_over"]) and until is not None and now is not None and until + lease > now
