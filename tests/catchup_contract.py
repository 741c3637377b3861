"""The catch-up part of the lock store contract: a scheduler on the store catching up a long backlog of one job
keeps every other job on time, and runs the backlog on one worker thread, each tick once and in order.

Mixed into :class:`tests.contract.ControlSchedulerContract`, so every store runs it against its real server.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.records import JobContext, Outcome
from mutexcron.stores import LockStore
from tests.support import FireThreads, wait_until, whole_seconds

SECOND = timedelta(seconds=1)
BACKLOG = 30  # missed per-second ticks of the job that catches up
BODY = 0.5  # seconds each of its runs takes: the catch-up lasts about BACKLOG * BODY / (1 - BODY) = 30 s
WATCHED = 16  # caught-up runs watched (about 8 s): long past the moment 4 workers would all be taken
# A fire later than this is dropped (the scheduler's misfire grace). Starved of a worker, the other job's fires
# would wait for the whole catch-up (about 30 s) and never run within the watch, whatever the grace; 6 s leaves
# room for a machine that other test suites keep busy, and is below the watch's length.
GRACE = timedelta(seconds=6)


class CatchUpContract(FireThreads):
    """What a long catch-up leaves to the other jobs, on a real store."""

    store: LockStore

    def test_a_long_catch_up_takes_one_worker_and_the_other_job_misses_no_tick(
            self, caplog: pytest.LogCaptureFixture) -> None:
        registry = Registry()
        finish = threading.Event()  # set at the end: the bodies still running return at once
        lock = threading.Lock()
        caught: list[tuple[datetime, str]] = []  # (fire time, worker thread) of each run of the catching-up job
        running, most_at_once = 0, 0

        def slow(ctx: JobContext) -> None:
            nonlocal running, most_at_once
            with lock:
                running += 1
                most_at_once = max(most_at_once, running)
                caught.append((ctx.fire_time, threading.current_thread().name))
            finish.wait(BODY)
            with lock:
                running -= 1

        mutex_cron("* * * * * *", name="backlog", registry=registry, catch_up="all")(slow)
        mutex_cron("* * * * * *", name="beside", registry=registry)(lambda: None)
        last_run = datetime.now(UTC).replace(microsecond=0) - BACKLOG * SECOND
        taken = self.store.acquire("backlog", owner="before the restart", lease=SECOND, fire_time=last_run)
        assert taken.token is not None and self.store.release("backlog", token=taken.token)

        beside: list[RunRecord] = []
        scheduler = Scheduler(self.store, registry=registry, instance_id="restarted", max_workers=4,
                              misfire_grace_time=GRACE, fire_context=self.each_fire)
        scheduler.add_listener(lambda record: beside.append(record) if record.job_name == "beside" else None)
        started = datetime.now(UTC)
        scheduler.start()
        try:
            wait_until(lambda: len(caught) >= WATCHED, timeout=WATCHED * BODY + 10, what="the catch-up's runs")
            watched_until = datetime.now(UTC)
            # The other job's fires due in the watch may still be on their way on a loaded machine: each has until
            # the misfire grace to report before the shutdown would drop it (a missing one fails below).
            due = whole_seconds(started.replace(microsecond=0) + SECOND, watched_until - 2 * SECOND)
            deadline = time.monotonic() + GRACE.total_seconds()
            while time.monotonic() < deadline and not set(due) <= {record.fire_time for record in list(beside)}:
                time.sleep(0.05)
        finally:
            finish.set()
            scheduler.shutdown(timeout=timedelta(seconds=5))

        # The scenario held: the backlog was still being caught up when the watch ended.
        fire_times = [fire_time for fire_time, _ in caught]
        assert len(fire_times) < 2 * BACKLOG
        # The backlog ran on one worker, one run at a time, each tick once, oldest first from the last run.
        assert most_at_once == 1 and len({thread for _, thread in caught}) == 1
        assert fire_times == whole_seconds(last_run + SECOND, fire_times[-1])
        # Every tick of the other job that was due while the watch lasted (its last second excepted: its fire may
        # still be on its way) ran on time.
        ran = sorted(record.fire_time for record in beside if record.outcome is Outcome.SUCCEEDED)
        assert len(due) >= WATCHED * BODY - 3
        missing = {tick.time().isoformat(): [str(r.outcome) for r in beside if r.fire_time == tick]
                   for tick in due if tick not in ran}
        said = [r.getMessage() for r in caplog.records if "'beside'" in r.getMessage()]  # a drop is logged
        assert missing == {}, (f"ticks of the other job that did not run (with what this instance recorded): "
                               f"{missing}; its warnings: {said}")
