"""The run-time schedule part of the lock store contract: a schedule added on one scheduler runs on the fleet each
tick once, follows a redefinition, stops when removed, and carries the run options of a declared job (its timeout
and busy policy applied by whichever instance runs it), on a real store (define() itself: control_contract).

Mixed into :class:`tests.contract.ControlSchedulerContract`, so every store runs it against its real server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron import JobContext, Outcome, Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.stores import LockStore, supports_control
from tests.support import FireThreads, unique_name, wait_until

SYNC = timedelta(milliseconds=300)


class RuntimeScheduleContract(FireThreads):
    """Schedules stored at run time, followed by every scheduler on the store."""

    store: LockStore

    @contextmanager
    def _fleet(self, registry: Registry, size: int = 2) -> Iterator[tuple[list[Scheduler], list[RunRecord]]]:
        records: list[RunRecord] = []
        with ExitStack() as stack:
            fleet = []
            for n in range(size):
                scheduler = Scheduler(self.store, registry=registry, instance_id=f"i{n}", sync_interval=SYNC,
                                      fire_context=self.each_fire)
                scheduler.add_listener(records.append)
                scheduler.start()
                stack.callback(scheduler.shutdown)
                fleet.append(scheduler)
            yield fleet, records

    @staticmethod
    def _past_tick() -> datetime:
        """A whole second a minute ago: a tick run late on purpose (no instance fires it)."""
        return datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)

    @staticmethod
    def _ran(records: list[RunRecord], name: str) -> list[datetime]:
        return [r.fire_time for r in list(records) if r.job_name == name and r.outcome is Outcome.SUCCEEDED]

    def test_a_schedule_added_on_one_scheduler_runs_on_the_fleet_each_tick_once(self) -> None:
        registry, seen = Registry(), []
        registry.allow(lambda ctx, to: seen.append((ctx.fire_time, to)), "send")
        name = unique_name("rt")
        with self._fleet(registry) as (fleet, records):
            fleet[0].add_schedule(name, "* * * * * *", "send", kwargs={"to": "ops"})
            wait_until(lambda: all(name in scheduler.jobs for scheduler in fleet), timeout=5,
                       what="every scheduler to follow the schedule within sync_interval")
            wait_until(lambda: len(self._ran(records, name)) >= 3, timeout=10, what="three ticks to run")
        ran = self._ran(records, name)
        assert len(ran) == len(set(ran)), f"a tick ran twice: {sorted(ran)}"
        assert {to for _, to in seen} == {"ops"}

    def test_a_redefined_schedule_runs_its_new_kwargs_on_every_scheduler(self) -> None:
        registry, seen = Registry(), []
        registry.allow(lambda to: seen.append(to), "send")
        name = unique_name("rt")
        with self._fleet(registry) as (fleet, _):
            fleet[0].add_schedule(name, "* * * * * *", "send", kwargs={"to": "old"})
            wait_until(lambda: "old" in seen, timeout=10, what="a run of the first definition")
            fleet[1].add_schedule(name, "* * * * * *", "send", kwargs={"to": "new"})
            wait_until(lambda: seen[-3:] == ["new"] * 3, timeout=10, what="three runs of the new definition")

    def test_a_removed_schedule_runs_no_tick_after_remove_returns(self) -> None:
        registry = Registry()
        registry.allow(lambda: None, "noop")
        ticks: list[Any] = []
        mutex_cron("* * * * * *", name=unique_name("clock"), registry=registry)(lambda: ticks.append(1))
        name = unique_name("rt")
        with self._fleet(registry) as (fleet, records):
            fleet[0].add_schedule(name, "* * * * * *", "noop")
            wait_until(lambda: self._ran(records, name), timeout=10, what="a first run")
            fleet[1].remove_schedule(name, by="ops")
            removed_at = self.store.now()
            wait_until(lambda: all(name not in scheduler.jobs for scheduler in fleet), timeout=5,
                       what="every scheduler to drop the schedule")
            seen = len(ticks)
            wait_until(lambda: len(ticks) >= seen + 2, timeout=10, what="two more ticks of another job")
        late = [t for t in self._ran(records, name) if t > removed_at]
        assert late == [], f"ticks after remove_schedule returned ran: {late}"
        assert fleet[0].schedules() == []

    def test_a_body_running_when_its_schedule_is_removed_finishes_and_releases(self) -> None:
        registry, started, finish = Registry(), threading.Event(), threading.Event()

        def slow() -> None:
            started.set()
            finish.wait(10)

        registry.allow(slow, "slow")
        name = unique_name("rt")
        with self._fleet(registry, size=1) as (fleet, records):
            fleet[0].add_schedule(name, "* * * * * *", "slow", lease=30)
            assert started.wait(10)
            fleet[0].remove_schedule(name)
            finish.set()
            wait_until(lambda: self._ran(records, name), timeout=10, what="the running body to finish")
        acquired = self.store.acquire(name, owner="check", lease=timedelta(seconds=5), fire_time=None)
        assert acquired.acquired, f"the removed schedule's lock was not released: {acquired}"

    def test_a_schedules_run_options_reach_every_scheduler_that_follows_it(self) -> None:
        registry = Registry()
        registry.allow(lambda: None, "noop")
        name = unique_name("rt")
        with self._fleet(registry) as (fleet, _):
            fleet[0].add_schedule(name, "0 0 1 1 *", "noop", timeout=30, start_deadline=timedelta(seconds=5),
                                  on_busy="wait", pause_on_failure=3)
            wait_until(lambda: name in fleet[1].jobs, timeout=5, what="the other scheduler to follow the schedule")
            job = fleet[1].jobs.get(name)  # built by the other scheduler from the stored definition
        assert (job.timeout, job.start_deadline, job.on_busy, job.pause_on_failure) == (
            timedelta(seconds=30), timedelta(seconds=5), "wait", 3)

    def test_a_timeout_from_a_run_time_schedule_stops_its_body_on_the_instance_that_runs_it(self) -> None:
        registry, told = Registry(), list[bool]()

        def cooperative(ctx: JobContext) -> None:
            told.append(ctx.cancelled.wait(10))
            ctx.check_cancelled()

        registry.allow(cooperative, "cooperative")
        name = unique_name("rt")
        adder = Scheduler(self.store, registry=registry, instance_id="adder")
        adder.add_schedule(name, "* * * * * *", "cooperative", lease=1, timeout=0.3)
        adder.shutdown()
        runner = Scheduler(self.store, registry=registry, instance_id="runner")  # reads the definition from the store
        try:
            record = runner.run_tick(name, self._past_tick())
        finally:
            runner.shutdown()
        assert told == [True]
        assert record.outcome is Outcome.TIMED_OUT and "timeout" in (record.error or "")

    def test_on_busy_replace_from_a_run_time_schedule_stops_the_running_body_for_the_next_tick(self) -> None:
        if not supports_control(self.store):
            pytest.skip("the store keeps no overlap slot: on_busy='replace' is refused")
        registry, started, told = Registry(), threading.Event(), list[bool]()

        def held(ctx: JobContext) -> None:
            if ctx.instance_id == "first":
                started.set()
                told.append(ctx.cancelled.wait(10))
                ctx.check_cancelled()

        registry.allow(held, "held")
        name, tick, records = unique_name("rt"), self._past_tick(), dict[str, RunRecord]()
        first, second = (Scheduler(self.store, registry=registry, instance_id=instance, busy_grace=timedelta(0))
                         for instance in ("first", "second"))
        first.add_schedule(name, "* * * * * *", "held", lease=1.5, on_busy="replace")
        running = self.in_thread(lambda: records.setdefault("first", first.run_tick(name, tick)))
        try:
            assert started.wait(10)
            records["second"] = second.run_tick(name, tick + timedelta(seconds=1))
        finally:
            running.join(15)
            first.shutdown()
            second.shutdown()
        assert told == [True]
        assert (records["first"].outcome, records["second"].outcome) == (Outcome.REPLACED, Outcome.SUCCEEDED)
