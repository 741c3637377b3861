"""The overlap policies' state on the ``Lock`` rows (:class:`mutexcron.stores.OverlapStore`): one next-tick slot
(``next_fire``, live until ``next_until``) and a stop request (``stop_token``), each change one conditional UPDATE.

A slot is live while ``next_until`` is later than the database's now and its tick later than the last fire time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import BooleanField, Case, ExpressionWrapper, F, Q, QuerySet, When

from mutexcron.stores.base import Renewal

from ..models import Lock
from .clock import DbNow, now_plus

__all__ = ["SLOT_LIVE", "claim_next", "renew_watching", "slot_allows"]

# The slot holds a tick: written, not expired on the database's clock, and not yet taken (NULL-safe: false or NULL).
_LIVE = (Q(next_fire__isnull=False) & Q(next_until__gt=DbNow())
         & (Q(last_fire_time__isnull=True) | Q(next_fire__gt=F("last_fire_time"))))
SLOT_LIVE = ExpressionWrapper(_LIVE, output_field=BooleanField())  # as a column read with the row
# Its negation, NULL-safe: the slot is empty, expired, or holds a tick already taken.
_DEAD = (Q(next_fire__isnull=True) | Q(next_until__isnull=True) | Q(next_until__lte=DbNow())
         | Q(next_fire__lte=F("last_fire_time")))
_HELD = Q(locked=True) & Q(lock_until__gt=DbNow())


def slot_allows(fire_time: datetime | None, *, or_earlier: bool = False) -> Q:
    """The rows whose slot lets ``fire_time`` through: dead, or holding that tick (``or_earlier``: or an earlier one).
    A manual run (None) only gets through a dead slot."""
    if fire_time is None:
        return _DEAD
    return _DEAD | (Q(next_fire__lte=fire_time) if or_earlier else Q(next_fire=fire_time))


def claim_next(locks: QuerySet[Lock], name: str, fire_time: datetime, lease: timedelta, replace: bool) -> bool:
    """:meth:`OverlapStore.claim_next` as one conditional UPDATE of ``name``'s visible row."""
    rows = locks.filter(Q(name=name, deleted=False) & (Q(last_fire_time__isnull=True) | Q(last_fire_time__lt=fire_time))
                        & slot_allows(fire_time, or_earlier=replace))
    # MySQL's SET sees the columns assigned before it: stop_token reads none of them.
    changes: dict[str, object] = {"next_fire": fire_time, "next_until": now_plus(lease)}
    if replace:
        changes["stop_token"] = Case(When(_HELD, then=F("token")), default=F("stop_token"))
    return rows.update(**changes) == 1


def renew_watching(locks: QuerySet[Lock], using: str, name: str, token: int, lease: timedelta) -> Renewal:
    """:meth:`OverlapStore.renew_watching`: the renewing UPDATE, then the stop request read in its transaction."""
    with transaction.atomic(using=using):
        if locks.filter(name=name, locked=True, token=token).update(lock_until=now_plus(lease)) != 1:
            return Renewal.LOST
        stop = locks.filter(name=name).values_list("stop_token", flat=True).first()
    return Renewal.STOP if stop == token else Renewal.RENEWED
