"""``on_busy="buffer_one"`` and ``"replace"`` (docs/overlap.md): a scheduled tick that finds its job's lock held
keeps the job's one next-tick slot in the store (:meth:`ControlStore.claim_next`) and asks again for the lock until
the running body releases it. With ``"replace"`` the claim also asks the holder to stop; its heartbeat sees that
(:class:`~mutexcron.stores.Renewal` STOP) and sets ``ctx.cancelled``. The store decides, so the result is the same
whichever instances hold the body and fire the tick."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import StoreUnavailable
from ..records import Outcome
from ..stores import AcquireStatus, Acquisition, ControlStore, LockStore
from .fires import Skip

if TYPE_CHECKING:
    from .fires import Fire

__all__ = ["Buffered", "Overlap"]

logger = logging.getLogger("mutexcron.scheduler")

# How often a buffered tick asks again, backing off from the first to the last: it starts at most this long after
# the release, and each round also renews its slot (whose lease is the job's).
FIRST_PAUSE, LAST_PAUSE = 0.02, 0.5

Buffered = Acquisition | StoreUnavailable | Skip  # the lock's answer, the error asking it, or the skip to record


class Overlap:
    """Waits out a held lock for one scheduled tick of a ``buffer_one``/``replace`` job, keeping its slot."""

    def __init__(self, store: LockStore, owner: str) -> None:
        self.store = store
        self.owner = owner  # this instance's name at the time of the wait

    def wait(self, fire: Fire, busy: Acquisition) -> Buffered:
        """After ``busy`` (the first answer, BUSY): the lock won, or another refusal (already ran, paused, a stale
        schedule), or the skip to record when another tick holds the slot, the store fails or shutdown begins."""
        assert isinstance(self.store, ControlStore), "checked at start: check_overlap()"
        job, replace, pause = fire.job, fire.job.on_busy == "replace", FIRST_PAUSE
        answer = busy
        try:
            while answer.status is AcquireStatus.BUSY:
                if not self.store.claim_next(job.name, fire_time=fire.time, lease=job.lease, replace=replace):
                    return self._slot_refused(fire)
                if pause == FIRST_PAUSE:
                    logger.info("job %r fire %s waits for the lock held by %s (on_busy=%r)", job.name,
                                fire.time.isoformat(), answer.holder or "another instance", job.on_busy)
                if fire.life.closing.wait(pause):
                    return Skip(Outcome.SKIPPED_BUSY, "the scheduler shut down while the tick waited for its lock")
                pause = min(pause * 2, LAST_PAUSE)
                answer = self._acquire(fire)
        except StoreUnavailable as error:
            return error
        return answer

    def _acquire(self, fire: Fire) -> Acquisition:
        return self.store.acquire(fire.job.name, owner=self.owner, lease=fire.job.lease, fire_time=fire.time,
                                  schedule_version=fire.version)

    def _slot_refused(self, fire: Fire) -> Buffered:
        """The slot holds another tick, or this one was taken: what the store says now, as the skip to record."""
        answer = self._acquire(fire)  # ALREADY_RAN: another instance ran it; won: the slot's holder is gone
        if answer.status is not AcquireStatus.BUSY:
            return answer
        other = "a later tick replaces it" if fire.job.on_busy == "replace" else "another tick waits already"
        logger.info("job %r fire %s skipped: the lock is held and %s (on_busy=%r)", fire.job.name,
                    fire.time.isoformat(), other, fire.job.on_busy)
        return Skip(Outcome.SKIPPED_BUSY, f"lock held by {answer.holder or 'another instance'} and {other}")
