"""The run limits part of the lock contract: a body past its job's ``timeout`` is told to stop, its run recorded
``timed_out`` and its lock released when it returns; a body that ignores the signal keeps the lock only until
``timeout + lease``, after which another instance runs the next tick; a tick won later than its job's
``start_deadline`` is ``skipped_late``, counted as taken, and the lock free for the next tick.

Mixed into :class:`tests.contract.SchedulerContract`, so every store runs it against its real server (the test of the
outcome a lock document keeps needs the control plane and is skipped on a store without one).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.records import JobContext, Outcome
from mutexcron.stores import AcquireStatus, ControlStore, LockStore
from tests.support import wait_until

SECOND = timedelta(seconds=1)
LEASE = 1.0  # seconds: short, so that a lock given up expires soon
TIMEOUT = 0.5  # seconds


class RunLimitsContract:
    """What a job's timeout and start deadline do, on a real store."""

    store: LockStore

    def thread_finished(self) -> None:
        """Overridden by a store whose connections are per thread (see SchedulerContract)."""

    def _scheduler(self, registry: Registry, instance_id: str) -> Scheduler:
        # No busy grace: a refused fire is recorded at once, so that the test asks again on its own deadline.
        return Scheduler(self.store, registry=registry, instance_id=instance_id, busy_grace=timedelta(0))

    def _tick(self) -> datetime:
        """A past whole second, well before now: the ticks of these tests run late on purpose."""
        return datetime.now(UTC).replace(microsecond=0) - 60 * SECOND

    def test_a_body_past_its_timeout_is_told_to_stop_and_recorded_timed_out(self) -> None:
        registry, told = Registry(), threading.Event()

        def cooperative(ctx: JobContext) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if ctx.cancelled.wait(0.02):
                    told.set()
                    ctx.check_cancelled()

        mutex_cron("* * * * * *", name="limited", registry=registry, lease=LEASE, timeout=TIMEOUT)(cooperative)
        scheduler = self._scheduler(registry, "runner")
        try:
            started = time.monotonic()
            record = scheduler.run_tick("limited", self._tick())
            took = time.monotonic() - started
        finally:
            scheduler.shutdown()
        assert told.is_set()
        assert record.outcome is Outcome.TIMED_OUT and record.outcome.ran
        assert record.error is not None and "timeout" in record.error
        assert TIMEOUT <= took < TIMEOUT + 5

    def test_a_timed_out_body_releases_its_lock_when_it_returns(self) -> None:
        registry = Registry()
        mutex_cron("* * * * * *", name="limited", registry=registry, lease=60, timeout=TIMEOUT)(
            lambda ctx: ctx.cancelled.wait(30))
        scheduler, tick = self._scheduler(registry, "runner"), self._tick()
        try:
            assert scheduler.run_tick("limited", tick).outcome is Outcome.TIMED_OUT
        finally:
            scheduler.shutdown()
        # Released at once, though its lease (60 s) is far from over: the next tick takes the lock.
        taken = self.store.acquire("limited", owner="next", lease=SECOND, fire_time=tick + SECOND)
        assert taken.status is AcquireStatus.ACQUIRED

    def test_a_body_that_ignores_its_timeout_loses_the_lock_after_timeout_plus_lease(self) -> None:
        registry, go_on, started = Registry(), threading.Event(), threading.Event()
        seen: dict[str, bool] = {}

        def stubborn(ctx: JobContext) -> None:
            if ctx.instance_id == "hung":
                started.set()
                go_on.wait(30)  # ignores ctx.cancelled
                seen["told"] = ctx.cancelled.is_set()

        mutex_cron("* * * * * *", name="stubborn", registry=registry, lease=LEASE, timeout=TIMEOUT)(stubborn)
        hung, other, tick = self._scheduler(registry, "hung"), self._scheduler(registry, "other"), self._tick()
        hung_records: list[RunRecord] = []

        def run_hung() -> None:
            try:
                hung_records.append(hung.run_tick("stubborn", tick))
            finally:
                self.thread_finished()  # a store whose connections are per thread closes this one's

        thread = threading.Thread(target=run_hung)
        thread.start()
        try:
            assert started.wait(10)
            began = time.monotonic()
            # Without the timeout the heartbeat would renew the lock for as long as the body runs; here the next
            # tick runs on the other instance once timeout + lease have passed.
            record = wait_until(lambda: _ran(other.run_tick("stubborn", tick + SECOND)), timeout=TIMEOUT + LEASE + 10,
                                what="the next tick on the other instance", interval=0.05)
            waited = time.monotonic() - began
            assert record.outcome is Outcome.SUCCEEDED and record.instance_id == "other"
            assert TIMEOUT <= waited <= TIMEOUT + LEASE + 2
        finally:
            go_on.set()
            thread.join(10)
            hung.shutdown()
            other.shutdown()
        assert seen == {"told": True}
        assert [r.outcome for r in hung_records] == [Outcome.TIMED_OUT]

    def test_a_store_keeps_a_timed_out_outcome_and_its_error(self) -> None:
        if not isinstance(self.store, ControlStore):
            pytest.skip("the store has no control plane: no lock documents to read")
        control, tick = self.store, self._tick()
        won = self.store.acquire("limited", owner="runner", lease=SECOND, fire_time=tick)
        assert won.token is not None
        assert self.store.release("limited", token=won.token, outcome="timed_out", error="timed out: line one\nlast")
        state = control.lock("limited")
        assert state is not None and state.last_outcome == "timed_out" and state.last_error == "last"
        assert state.last_success_at is None and state.last_finished_at is not None

    def test_a_tick_won_after_its_start_deadline_is_skipped_late_and_counts_as_taken(self) -> None:
        registry, ran = Registry(), list[datetime]()
        mutex_cron("* * * * * *", name="punctual", registry=registry, lease=LEASE, start_deadline=5)(
            lambda ctx: ran.append(ctx.fire_time))
        first, second = self._scheduler(registry, "first"), self._scheduler(registry, "second")
        late = self._tick()  # 60 s ago: later than its start deadline
        try:
            record = first.run_tick("punctual", late)
            again = second.run_tick("punctual", late)
            on_time = datetime.now(UTC).replace(microsecond=0)
            next_one = second.run_tick("punctual", on_time)
        finally:
            first.shutdown()
            second.shutdown()
        assert record.outcome is Outcome.SKIPPED_LATE and not record.outcome.ran
        assert record.error is not None and "start_deadline" in record.error
        # The late tick is taken (no instance runs it), and its lock was given back: the next tick runs.
        assert again.outcome is Outcome.SKIPPED_ALREADY_RAN
        assert next_one.outcome is Outcome.SUCCEEDED and ran == [on_time]

    def test_start_deadline_does_not_apply_to_a_manual_run_or_a_backfill(self) -> None:
        registry, ran = Registry(), list[datetime]()
        mutex_cron("* * * * * *", name="punctual", registry=registry, lease=LEASE, start_deadline=1)(
            lambda ctx: ran.append(ctx.fire_time))
        scheduler, start = self._scheduler(registry, "operator"), self._tick()
        try:
            assert scheduler.run_now("punctual").outcome is Outcome.SUCCEEDED
            assert scheduler.backfill("punctual", start, start + 2 * SECOND) == 2
        finally:
            scheduler.shutdown()
        assert ran[1:] == [start, start + SECOND]


def _ran(record: RunRecord) -> RunRecord | None:
    """``record`` if its body ran (a poll's answer), None if it was refused (the lock still busy)."""
    return record if record.outcome is not None and record.outcome.ran else None
