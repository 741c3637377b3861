"""The run-time schedule part of the lock store contract: a schedule added on one scheduler runs on the fleet each
tick once, follows a redefinition, and stops when removed, on a real store (define() itself: control_contract).

Mixed into :class:`tests.contract.LockStoreContract`, so every store runs it against its real server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

from mutexcron import Outcome, Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.stores import LockStore
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
