"""The backfill part of the lock contract: :meth:`Scheduler.backfill` on the store runs each tick of a range once,
oldest first, as a backfill, in the job's zone and on its effective schedule; refuses too long a range before
anything runs; runs nothing new when the range is run again; waits for the job's scheduled run; stops at a pause.

Mixed into :class:`tests.contract.SchedulerContract`, so every store runs it against its real server (the tests that
need the control plane, to pause or re-schedule the job, are skipped on a store without one).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from mutexcron import JobDefinitionError, Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.records import JobContext, Outcome
from mutexcron.stores import ControlStore, LockStore
from tests.support import FireThreads, wait_until

MIDNIGHT = datetime(2026, 1, 5, tzinfo=UTC)
TEN_MINUTES = [MIDNIGHT + timedelta(minutes=10 * n) for n in range(6)]  # "*/10 * * * *" from 00:00 to 01:00


class BackfillContract(FireThreads):
    """What a backfill runs, on a real store."""

    store: LockStore

    def thread_finished(self) -> None:
        """Overridden by a store whose connections are per thread (see SchedulerContract)."""

    def _control(self) -> ControlStore:
        if not isinstance(self.store, ControlStore):
            pytest.skip("the store has no control plane: no pause, no schedule override")
        return self.store

    def _job(self, spec: str = "*/10 * * * *", body: Callable[[JobContext], None] | None = None,
             **options: object) -> tuple[Scheduler, list[JobContext], list[RunRecord]]:
        """A never-started scheduler of one job ``backfilled`` on the store; the contexts its body got, and the
        finished records."""
        registry, contexts, records = Registry(), list[JobContext](), list[RunRecord]()

        def run(ctx: JobContext) -> None:
            contexts.append(ctx)
            if body is not None:
                body(ctx)

        mutex_cron(spec, name="backfilled", registry=registry, **options)(run)
        scheduler = Scheduler(self.store, registry=registry, instance_id="operator")
        scheduler.add_listener(records.append)
        return scheduler, contexts, records

    def test_a_backfill_runs_each_tick_of_the_range_once_oldest_first_as_a_backfill(self) -> None:
        scheduler, contexts, records = self._job()
        assert scheduler.backfill("backfilled", MIDNIGHT, MIDNIGHT + timedelta(hours=1), by="ops") == 6
        assert [ctx.fire_time for ctx in contexts] == TEN_MINUTES
        assert all(ctx.backfill and not ctx.catch_up for ctx in contexts)
        assert [(r.fire_time, r.outcome, r.backfill, r.manual) for r in records] == [
            (tick, Outcome.SUCCEEDED, True, False) for tick in TEN_MINUTES]
        assert [r.token for r in records] == [ctx.token for ctx in contexts]  # the job lock's fencing tokens

    def test_the_start_is_included_and_the_end_excluded(self) -> None:
        scheduler, contexts, _ = self._job()
        assert scheduler.backfill("backfilled", TEN_MINUTES[1], TEN_MINUTES[4]) == 3
        assert [ctx.fire_time for ctx in contexts] == TEN_MINUTES[1:4]

    def test_the_ticks_are_the_jobs_zone_s_across_a_daylight_saving_change(self) -> None:
        scheduler, contexts, _ = self._job("0 12 * * *", timezone="Europe/Paris")
        paris = ZoneInfo("Europe/Paris")  # clocks go forward on 2026-03-29: noon is 11:00 UTC, then 10:00 UTC
        ran = scheduler.backfill("backfilled", datetime(2026, 3, 28, tzinfo=paris), datetime(2026, 3, 31, tzinfo=paris))
        assert ran == 3
        assert [ctx.fire_time for ctx in contexts] == [datetime(2026, 3, 28, 11, tzinfo=UTC),
                                                       datetime(2026, 3, 29, 10, tzinfo=UTC),
                                                       datetime(2026, 3, 30, 10, tzinfo=UTC)]

    def test_an_operators_schedule_override_is_the_schedule_backfilled(self) -> None:
        control = self._control()
        scheduler, contexts, _ = self._job()
        scheduler.set_schedule("backfilled", "*/20 * * * *", by="ops")
        assert scheduler.backfill("backfilled", MIDNIGHT, MIDNIGHT + timedelta(hours=1)) == 3
        assert [ctx.fire_time for ctx in contexts] == TEN_MINUTES[::2]
        state = control.lock("backfilled")
        assert state is not None and state.last_fire_time is None  # the job's own tick ledger is untouched

    def test_a_range_of_more_than_10000_ticks_is_refused_before_anything_runs(self) -> None:
        scheduler, contexts, records = self._job("* * * * * *")
        with pytest.raises(JobDefinitionError, match=r"'backfilled'.*2026-01-05T00:00:00\+00:00 to "
                                                      r"2026-01-05T03:00:00\+00:00.*more than 10000 ticks"):
            scheduler.backfill("backfilled", MIDNIGHT, MIDNIGHT + timedelta(hours=3))  # 10,800 ticks
        assert contexts == [] and records == []
        if isinstance(self.store, ControlStore):
            assert [state.name for state in self.store.locks()] == []  # no ledger either

    def test_an_end_after_the_stores_now_is_refused_naming_it_and_the_stores_now_before_anything_runs(self) -> None:
        scheduler, contexts, records = self._job()
        before = self.store.now()
        end = before + timedelta(hours=1)
        with pytest.raises(JobDefinitionError, match=rf"'backfilled'.*end {re.escape(end.isoformat())} is after the "
                                                      r"lock store's now \(") as refused:
            scheduler.backfill("backfilled", before - timedelta(hours=1), end)
        named = re.search(r"store's now \(([^)]+)\)", str(refused.value))
        assert named is not None
        assert before.replace(microsecond=0) <= datetime.fromisoformat(named[1]) <= self.store.now()
        assert contexts == [] and records == []
        if isinstance(self.store, ControlStore):
            assert [state.name for state in self.store.locks()] == []  # no ledger either

    def test_a_range_ending_at_the_stores_now_runs_its_ticks(self) -> None:
        scheduler, contexts, _ = self._job()
        now = self.store.now()
        assert scheduler.backfill("backfilled", now - timedelta(minutes=30), now) == 3
        assert all(ctx.fire_time < now for ctx in contexts)

    def test_the_same_range_run_again_runs_nothing_new(self) -> None:
        scheduler, contexts, records = self._job()
        end = MIDNIGHT + timedelta(hours=1)
        assert scheduler.backfill("backfilled", MIDNIGHT, end) == 6
        assert scheduler.backfill("backfilled", MIDNIGHT, end) == 0
        assert len(contexts) == 6
        assert [r.outcome for r in records[6:]] == [Outcome.SKIPPED_ALREADY_RAN] * 6
        if isinstance(self.store, ControlStore):  # the ledger is hidden once the backfill is over
            assert [state.name for state in self.store.locks()] == ["backfilled"]

    def test_two_backfills_of_one_range_at_once_run_each_tick_once(self) -> None:
        first, contexts, _ = self._job()
        second = Scheduler(self.store, registry=first.registry, instance_id="other operator")
        end, counts = MIDNIGHT + timedelta(hours=1), list[int]()
        barrier = threading.Barrier(2)

        def backfill(scheduler: Scheduler) -> None:
            barrier.wait()
            counts.append(scheduler.backfill("backfilled", MIDNIGHT, end))

        for thread in [self.in_thread(lambda s=s: backfill(s)) for s in (first, second)]:
            thread.join()
        assert sorted(ctx.fire_time for ctx in contexts) == TEN_MINUTES and sum(counts) == 6

    def test_a_backfill_waits_for_the_jobs_scheduled_run_to_end(self) -> None:
        scheduled, finish = threading.Event(), threading.Event()
        ended, backfilled_at = list[datetime](), list[datetime]()

        def body(ctx: JobContext) -> None:
            if ctx.backfill:
                backfilled_at.append(datetime.now(UTC))
                return
            scheduled.set()
            finish.wait(30)
            ended.append(datetime.now(UTC))

        scheduler, contexts, records = self._job(body=body)
        running = self.in_thread(lambda: scheduler.run_tick("backfilled", datetime.now(UTC).replace(second=0)))
        wait_until(scheduled.is_set, what="the scheduled run's body")
        backfill = self.in_thread(lambda: scheduler.backfill("backfilled", MIDNIGHT, TEN_MINUTES[2]))
        backfill.join(0.3)
        assert backfill.is_alive(), "the backfill did not wait for the scheduled run"
        finish.set()
        running.join()
        backfill.join()
        backfilled = [r for r in records if r.backfill]
        assert [(r.fire_time, r.outcome) for r in backfilled] == [(tick, Outcome.SUCCEEDED) for tick in TEN_MINUTES[:2]]
        assert len(backfilled_at) == 2 and min(backfilled_at) >= ended[0] and len(contexts) == 3

    def test_a_paused_job_refuses_the_backfill_which_stops_and_runs_its_ticks_once_resumed(self) -> None:
        self._control()
        scheduler, contexts, records = self._job()
        scheduler.pause("backfilled", by="ops")
        assert scheduler.backfill("backfilled", MIDNIGHT, MIDNIGHT + timedelta(hours=1)) == 0
        assert contexts == [] and [r.outcome for r in records] == [Outcome.SKIPPED_PAUSED]
        scheduler.resume("backfilled")
        assert scheduler.backfill("backfilled", MIDNIGHT, MIDNIGHT + timedelta(hours=1)) == 6
        assert [ctx.fire_time for ctx in contexts] == TEN_MINUTES
