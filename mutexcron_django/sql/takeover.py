"""A run handed to a task worker on the ``Lock`` rows (:class:`mutexcron.stores.TakeOverStore`): the worker takes the
lock over under a token of its own with one conditional UPDATE, decided on the database's clock; and the pause
predicates the store's acquire shares with it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q, QuerySet

from mutexcron.stores.base import AcquireRequest, AcquireStatus, Acquisition

from ..models import Lock
from .clock import AsUTC, DbNow, aware, now_minus, now_plus

__all__ = ["NOT_PAUSED", "PAUSED", "free_for", "reserve_columns", "reserved", "take_over"]

# Acquires are refused while PAUSED holds: paused, and its until (if any) not reached on the database's clock.
NOT_PAUSED = Q(paused=False) | Q(paused_until__lte=DbNow())
PAUSED = Q(paused=True) & (Q(paused_until__isnull=True) | Q(paused_until__gt=DbNow()))  # NOT_PAUSED's negation
# A run a task worker took over (its token moved past the tick token) and never released.
_TAKEN_OVER = Q(locked=True) & ~Q(tick_token=0) & ~Q(tick_token=F("token"))


def free_for(lease: timedelta) -> Q:
    """The rows an acquire with ``lease`` may take: not locked, or its lease ran out, but for a run taken over by a
    worker, which is kept for its tick's retry until ``lease`` after its lease ran out (TakeOverStore)."""
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


def take_over(locks: QuerySet[Lock], using: str, request: AcquireRequest, tick_token: int) -> Acquisition:
    """:meth:`TakeOverStore.take_over` of ``request`` (its name, owner, lease and schedule version): one conditional
    UPDATE takes it; else the row read back says why, and a paused or stale run its acquirer still holds is released
    unrun by one more conditional UPDATE (its reason re-checked)."""
    name, owner, lease, schedule_version = request.name, request.owner, request.lease, request.schedule_version
    run = locks.filter(name=name, deleted=False, locked=True, tick_token=tick_token)
    current = run.filter(NOT_PAUSED)
    if schedule_version is not None:
        current = current.filter(schedule_version=schedule_version)
    with transaction.atomic(using=using):
        if current.filter(Q(token=tick_token) | Q(lock_until__lte=DbNow())).update(
                locked_by=owner, lock_until=now_plus(lease), token=F("token") + 1) == 1:
            return Acquisition(AcquireStatus.ACQUIRED, token=locks.get(name=name).token)
    row = run.values("locked_by", "schedule_version",
                     paused_now=ExpressionWrapper(PAUSED, output_field=BooleanField())).first()
    if row is None:
        return Acquisition(AcquireStatus.ALREADY_RAN)
    if row["paused_now"]:
        refusal, reason = Acquisition(AcquireStatus.PAUSED, holder=row["locked_by"]), PAUSED
    elif schedule_version is not None and row["schedule_version"] != schedule_version:
        refusal = Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=row["schedule_version"])
        reason = ~Q(schedule_version=schedule_version)
    else:
        return Acquisition(AcquireStatus.BUSY, holder=row["locked_by"])
    run.filter(reason, token=tick_token).update(locked=False, lock_until=DbNow(), last_released_at=DbNow(),
                                                tick_token=0)
    return refusal
