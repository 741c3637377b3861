"""What a fire does when its job's lock is busy: the one place that reads ``on_busy`` and the fire's kind.

| fire | busy lock |
| --- | --- |
| scheduled, ``buffer_one`` / ``replace`` | keeps its job's next-tick slot, waits for the lock (:mod:`.overlap`) |
| scheduled, ``wait``; any catch-up or backfill | asks again for up to the job's lease (:mod:`.waiting`) |
| scheduled, ``skip`` / ``raise`` | asks again for ``busy_grace`` (an earlier run just finishing), then skipped |
| manual (``run_now``) | skipped at once; ``on_busy="raise"`` raises :class:`~mutexcron.errors.LockBusy` to its caller |

A catch-up waits: giving up on a missed tick while another instance still runs an older one could let a later tick
overtake it. A backfill waits for the job's scheduled run rather than lose its tick to it. The skip of
``"raise"`` is logged as an error, the others' at INFO."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from ..definitions import OVERLAP_POLICIES
from ..records import Outcome
from .fires import Fire, FireKind, Skip

if TYPE_CHECKING:
    from ..stores import Acquisition

__all__ = ["BusyPlan", "busy_plan", "busy_skip"]

logger = logging.getLogger("mutexcron.scheduler")
_NO_PATIENCE = timedelta(0)


@dataclass(frozen=True)
class BusyPlan:
    """What a fire refused as busy does: wait in its job's overlap slot, or ask again for ``patience`` (0: it is
    skipped at once)."""

    slot: bool
    patience: timedelta


def busy_plan(fire: Fire, busy_grace: timedelta) -> BusyPlan:
    """The plan of ``fire`` (see the module's table); ``busy_grace``: the scheduler's option."""
    on_busy, kind = fire.job.on_busy, fire.kind
    if kind is FireKind.SCHEDULED and on_busy in OVERLAP_POLICIES:
        return BusyPlan(True, _NO_PATIENCE)
    if on_busy == "wait" or kind is FireKind.CATCH_UP or kind is FireKind.BACKFILL:
        return BusyPlan(False, fire.job.lease)  # by then a live holder has released it or died
    if kind is FireKind.SCHEDULED:
        # BUSY means an earlier run holds the lock (a later one would be ALREADY_RAN). It may be just finishing,
        # e.g. an old tick run late by an instance whose clock is slow: give it busy_grace rather than lose this tick.
        return BusyPlan(False, busy_grace)
    return BusyPlan(False, _NO_PATIENCE)


def busy_skip(fire: Fire, busy: Acquisition) -> Skip:
    """The skip of ``fire``, whose lock stayed busy: logged (as an error for ``on_busy="raise"``)."""
    why = f"lock held by {busy.holder or 'another instance'}"
    log = logger.error if fire.job.on_busy == "raise" else logger.info
    log("job %r fire %s skipped: %s", fire.job.name, fire.time.isoformat(), why)
    return Skip(Outcome.SKIPPED_BUSY, why)
