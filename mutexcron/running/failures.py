"""Failed runs in a row, counted fleet-wide in the job's lock document, and ``pause_on_failure``: after that many,
the job pauses itself on every instance (``by="mutexcron:pause_on_failure"``, with a note saying why) and one
``"paused"`` alert goes out, from the instance whose count paused it (:meth:`ControlStore.record_failure`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from ..errors import SchedulerConfigError, StoreUnavailable
from ..ops.alerts import Alert
from ..registry import Job
from ..stores import ControlStore, LockStore
from ..stores.base import MAX_PAUSE_NOTE

__all__ = ["PAUSED_BY", "check_pause_on_failure", "count_failure"]

logger = logging.getLogger("mutexcron.alerts")
PAUSED_BY = "mutexcron:pause_on_failure"  # the pause's "by" when a job paused itself


def count_failure(store: LockStore, job: Job, error: str | None, *, instance_id: str,
                  notify: Callable[[Alert, str], None] | None) -> None:
    """After a failed (or timed-out) run of ``job`` was released: count it, and pause the job once its
    ``pause_on_failure`` is reached, telling ``notify`` (the listeners' ``"paused"``) if this count paused it. Nothing
    on a store without the control plane; a store error is logged (the count misses this run)."""
    if not isinstance(store, ControlStore):
        return
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    note = (f"paused after {job.pause_on_failure} failed runs in a row (pause_on_failure); the last: "
            f"{lines[-1] if lines else 'no error text'}")[:MAX_PAUSE_NOTE]
    try:
        failures, paused = store.record_failure(job.name, pause_after=job.pause_on_failure, by=PAUSED_BY, note=note)
    except StoreUnavailable as failure:
        logger.warning("job %r: could not count its failed run: %s", job.name, failure)
        return
    if not paused:
        return
    logger.error("job %r paused itself on every instance after %d failed runs in a row (pause_on_failure=%d); "
                 "resume it once fixed", job.name, failures, job.pause_on_failure)
    if notify is not None:
        notify(Alert(job.name, "paused", note, instance_id, datetime.now(UTC)), "paused")


def check_pause_on_failure(store: LockStore, jobs: Iterable[Job]) -> None:
    """SchedulerConfigError naming the ``pause_on_failure`` jobs if ``store`` has no control plane to pause them."""
    named = [repr(job.name) for job in jobs if job.pause_on_failure is not None]
    if named and not isinstance(store, ControlStore):
        raise SchedulerConfigError(f"job(s) {', '.join(named)} pause themselves after failed runs "
                                   f"(pause_on_failure), which needs a store with the control plane "
                                   f"(mutexcron.stores.ControlStore), and {store!r} has none")
