"""Stale copies of a run-time schedule, on every store: a tick queued for a worker before its schedule was redefined
is not run with the new definition; a manual run or a fire on an instance whose copy of a removed schedule is stale
is refused in the store's acquire itself (no such job, a stale skip), revives nothing, and is never taken for a store
outage.

Mixed into :class:`tests.contract.ControlSchedulerContract`, so every store runs it against its real server (the
task queue of the worker test is the test Redis, under the test's own key prefix).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron import Outcome, Registry, RunRecord, Scheduler
from mutexcron.errors import UnknownJobError
from mutexcron.stores import ControlStore, LockStore
from mutexcron.tasks import HandlerRegistry, TaskQueue
from mutexcron.tasks.job_runs import JobRunner, declared_or_stored
from tests.support import FireThreads, unique_name

TICK = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
QUIET = timedelta(minutes=10)  # a sync interval no test waits for: each instance keeps the copy it read


class StaleScheduleContract(FireThreads):
    """What instances and workers holding an old copy of a run-time schedule may still do: nothing of it."""

    store: LockStore
    run_together: Callable[[Callable[..., None], list[tuple[object, ...]]], None]  # LockContract's

    @contextmanager
    def _instances(self, registry: Registry, count: int, **options: Any) -> Iterator[list[Scheduler]]:
        """``count`` schedulers on the store, never started: each reads a schedule when first asked for it."""
        with ExitStack() as stack:
            fleet = []
            for n in range(count):
                scheduler = Scheduler(self.store, registry=registry, instance_id=f"i{n}", sync_interval=QUIET,
                                      fire_context=self.each_fire, **options)
                stack.callback(scheduler.shutdown)
                fleet.append(scheduler)
            yield fleet

    def test_a_tick_queued_before_its_schedule_was_redefined_is_not_run_by_the_worker(self, redis_url: str) -> None:
        registry, calls = Registry(), list[tuple[str, dict[str, Any]]]()
        registry.allow(lambda **kwargs: calls.append(("old", kwargs)), "export.old")
        registry.allow(lambda **kwargs: calls.append(("new", kwargs)), "export.new")
        name = unique_name("rt")
        queue = TaskQueue(redis_url, handlers=HandlerRegistry())
        runner = JobRunner(self.store, lookup=declared_or_stored(registry, self.store), instance_id="worker-1")
        runner.register(queue, visibility_timeout=timedelta(seconds=30))
        records: list[RunRecord] = []
        runner.add_listener(records.append)
        try:
            with self._instances(registry, 1, tasks=queue) as (scheduler,):
                scheduler.add_schedule(name, "0 3 * * *", "export.old", kwargs={"to": "a"}, run_on="tasks", lease=60)
                enqueued = scheduler.run_tick(name, TICK)
                assert enqueued.outcome is Outcome.ENQUEUED
                scheduler.add_schedule(name, "0 3 * * *", "export.new", kwargs={"to": "b"}, run_on="tasks", lease=60)
                info = queue.info(enqueued.task_id or "")
                assert info is not None
                runner.run(info.payload)
        finally:
            runner.close()
            queue.close()
        assert calls == []
        assert [(r.outcome, r.fire_time) for r in records] == [(Outcome.SKIPPED_STALE_SCHEDULE, TICK)]
        assert isinstance(self.store, ControlStore)
        state = self.store.lock(name)
        assert state is not None and not state.locked  # released unrun: the new schedule's ticks are not held up

    def test_a_manual_run_of_a_schedule_removed_since_the_instance_read_it_is_no_such_job_and_revives_nothing(
            self) -> None:
        registry, runs = Registry(), list[int]()
        registry.allow(lambda: runs.append(1), "noop")
        name = unique_name("rt")
        with self._instances(registry, 2) as (adder, stale):
            adder.add_schedule(name, "0 3 * * *", "noop")
            assert stale.run_now(name).outcome is Outcome.SUCCEEDED  # the stale instance reads (and keeps) it
            adder.remove_schedule(name, by="ops")
            with pytest.raises(UnknownJobError, match=f"no job named {name!r}"):
                stale.run_now(name)
            assert name not in stale.jobs
            assert isinstance(self.store, ControlStore)
            assert self.store.lock(name) is None  # hidden still: the stale run revived nothing
            adder.add_schedule(name, "0 3 * * *", "noop")  # and the name is free to add again
        assert runs == [1]

    def test_instances_firing_a_removed_schedule_skip_it_as_stale_never_as_a_store_error(
            self, caplog: pytest.LogCaptureFixture) -> None:
        registry = Registry()
        registry.allow(lambda: None, "noop")
        records: list[RunRecord] = []
        for round_ in range(5):  # the stale instances fire a tick together, as their triggers would, five times
            name, tick = unique_name("rt"), TICK + timedelta(minutes=round_)
            with self._instances(registry, 3) as (adder, *stale):
                adder.add_schedule(name, "* * * * *", "noop")
                for scheduler in stale:  # each reads the schedule (and keeps its copy)
                    scheduler.run_tick(name, tick - timedelta(minutes=1))
                adder.remove_schedule(name, by="ops")
                with caplog.at_level(logging.ERROR):
                    self.run_together(lambda scheduler, name, tick: records.append(scheduler.run_tick(name, tick)),
                                      [(scheduler, name, tick) for scheduler in stale])
            assert isinstance(self.store, ControlStore)
            assert self.store.lock(name) is None
        assert [record.outcome for record in records] == [Outcome.SKIPPED_STALE_SCHEDULE] * 10
        assert [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()] == []
