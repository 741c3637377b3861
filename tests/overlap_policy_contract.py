"""``on_busy="buffer_one"`` and ``"replace"`` through the Scheduler, on a real store: a tick that finds the previous
run going runs once that run ends (one such tick kept), or tells the running body to stop and runs once it released.
Each instance is a Scheduler of its own on the same store, each tick run with ``run_tick`` in a thread of its own.

Mixed into :class:`tests.contract.ControlSchedulerContract`, so every store with the control plane proves it.
Several OS processes on Redis and PostgreSQL: tests/scheduling/test_overlap_fleet.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.records import JobContext, Outcome
from mutexcron.stores import ControlStore, LockStore
from tests.support import wait_until

SECOND = timedelta(seconds=1)
LEASE = 1.5  # seconds: the holder's heartbeat, which sees a stop request, renews every lease / 3


class Instance:
    """One scheduler of the fleet and the ticks it ran, each in a thread of its own."""

    def __init__(self, scheduler: Scheduler, finished: Callable[[], None]) -> None:
        self.scheduler, self._finished = scheduler, finished
        self.records: list[RunRecord] = []
        self.threads: list[threading.Thread] = []

    def fire(self, name: str, tick: datetime) -> threading.Thread:
        def run() -> None:
            try:
                self.records.append(self.scheduler.run_tick(name, tick))
            finally:
                self._finished()

        thread = threading.Thread(target=run, name=f"tick-{tick:%S}")
        self.threads.append(thread)
        thread.start()
        return thread

    def done(self) -> bool:
        return not any(thread.is_alive() for thread in self.threads)


class Held:
    """A job of ``policy`` whose body records each tick it ran and, on instance "first", holds the lock until
    ``go_on`` is set, ignoring ``ctx.cancelled``."""

    def __init__(self, name: str, policy: str) -> None:
        self.registry, self.started, self.go_on = Registry(), threading.Event(), threading.Event()
        self.ran: list[datetime] = []
        self.contexts: list[JobContext] = []
        mutex_cron("* * * * * *", name=name, registry=self.registry, lease=LEASE, on_busy=policy)(self)  # type: ignore[arg-type]

    def __call__(self, ctx: JobContext) -> None:
        self.ran.append(ctx.fire_time)
        if ctx.instance_id == "first":
            self.contexts.append(ctx)
            self.started.set()
            self.go_on.wait(30)


class OverlapPolicyContract:
    """What buffer_one and replace do for ticks fired by several instances of one store."""

    store: LockStore

    def thread_finished(self) -> None:
        """Overridden by a store whose connections are per thread (see SchedulerContract)."""

    @pytest.fixture
    def caplog_info(self, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
        caplog.set_level(logging.INFO, logger="mutexcron.scheduler")
        return caplog

    @contextmanager
    def fleet(self, registry: Registry, *names: str) -> Iterator[list[Instance]]:
        instances = [Instance(Scheduler(self.store, registry=registry, instance_id=name, busy_grace=timedelta(0)),
                              self.thread_finished) for name in names]
        try:
            yield instances
        finally:
            for instance in instances:
                for thread in instance.threads:
                    thread.join(30)
                instance.scheduler.shutdown()

    def _tick(self) -> datetime:
        """A past whole second: the ticks of these tests run late on purpose."""
        return datetime.now(UTC).replace(microsecond=0) - 60 * SECOND

    @staticmethod
    def _waiting(caplog: pytest.LogCaptureFixture, tick: datetime) -> Callable[[], bool]:
        """True once a fire of ``tick`` keeps the slot and waits (the scheduler logs it once per fire)."""
        return lambda: any("waits for the lock" in r.getMessage() and tick.isoformat() in r.getMessage()
                           for r in caplog.records)

    def test_buffer_one_runs_a_tick_that_found_the_run_going_once_that_run_ends(
            self, caplog_info: pytest.LogCaptureFixture) -> None:
        held = Held("buffered", "buffer_one")
        registry, started, go_on = held.registry, held.started, held.go_on
        tick = self._tick()
        with self.fleet(registry, "first", "second") as (first, second):
            first.fire("buffered", tick)
            assert started.wait(10)
            second.fire("buffered", tick + SECOND)
            wait_until(self._waiting(caplog_info, tick + SECOND), timeout=10, what="the second tick to wait")
            assert not second.done()
            go_on.set()
            wait_until(lambda: first.done() and second.done(), timeout=15, what="both ticks to end")
        [earlier], [later] = first.records, second.records
        assert earlier.outcome is Outcome.SUCCEEDED and later.outcome is Outcome.SUCCEEDED
        assert later.fire_time == tick + SECOND
        assert earlier.finished_at is not None and later.started_at <= earlier.finished_at  # fired meanwhile
        assert later.token is not None and earlier.token is not None and later.token > earlier.token

    def test_buffer_one_keeps_one_tick_and_skips_a_third_as_busy(self, caplog_info: pytest.LogCaptureFixture) -> None:
        held = Held("buffered", "buffer_one")
        registry, started, go_on, ran = held.registry, held.started, held.go_on, held.ran
        tick = self._tick()
        with self.fleet(registry, "first", "second", "third") as (first, second, third):
            first.fire("buffered", tick)
            assert started.wait(10)
            second.fire("buffered", tick + SECOND)
            wait_until(self._waiting(caplog_info, tick + SECOND), timeout=10, what="the second tick to wait")
            third.fire("buffered", tick + 2 * SECOND).join(10)
            [skipped] = third.records
            go_on.set()
        assert skipped.outcome is Outcome.SKIPPED_BUSY
        assert skipped.error is not None and "another tick waits" in skipped.error
        assert ran == [tick, tick + SECOND]

    def test_a_buffered_tick_fired_by_every_instance_runs_once(self, caplog_info: pytest.LogCaptureFixture) -> None:
        held = Held("buffered", "buffer_one")
        registry, started, go_on, ran = held.registry, held.started, held.go_on, held.ran
        tick = self._tick()
        with self.fleet(registry, "first", "second", "third") as (first, second, third):
            first.fire("buffered", tick)
            assert started.wait(10)
            for instance in (first, second, third):
                instance.fire("buffered", tick + SECOND)
            wait_until(lambda: sum("waits for the lock" in r.getMessage() for r in caplog_info.records) == 3,
                       timeout=10, what="the three fires of the second tick to wait")
            go_on.set()
            wait_until(lambda: all(i.done() for i in (first, second, third)), timeout=15, what="every fire to end")
        later = [r for i in (first, second, third) for r in i.records if r.fire_time == tick + SECOND]
        assert sorted(r.outcome for r in later) == sorted(
            [Outcome.SUCCEEDED, Outcome.SKIPPED_ALREADY_RAN, Outcome.SKIPPED_ALREADY_RAN])
        assert ran == [tick, tick + SECOND]

    def test_replace_tells_the_running_body_to_stop_then_runs_the_new_tick(self) -> None:
        registry, started = Registry(), threading.Event()
        told: list[bool] = []

        def body(ctx: JobContext) -> None:
            if ctx.instance_id == "first":
                started.set()
                told.append(ctx.cancelled.wait(30))
                ctx.check_cancelled()

        mutex_cron("* * * * * *", name="replaced", registry=registry, lease=LEASE, on_busy="replace")(body)
        tick = self._tick()
        with self.fleet(registry, "first", "second") as (first, second):
            first.fire("replaced", tick)
            assert started.wait(10)
            began = time.monotonic()
            second.fire("replaced", tick + SECOND)
            wait_until(lambda: first.done() and second.done(), timeout=15, what="both ticks to end")
            took = time.monotonic() - began
        [old], [new] = first.records, second.records
        assert told == [True]
        assert old.outcome is Outcome.REPLACED and old.outcome.ran
        assert old.error is not None and "replace" in old.error
        assert new.outcome is Outcome.SUCCEEDED and new.fire_time == tick + SECOND
        # Seen at the holder's next renewal (every lease / 3), then the new tick's next ask (at most 0.5 s apart).
        assert took < LEASE + 5

    def test_replace_runs_the_new_tick_only_once_a_body_ignoring_the_signal_returns(self) -> None:
        held = Held("stubborn", "replace")
        registry, started, go_on, contexts = held.registry, held.started, held.go_on, held.contexts
        tick = self._tick()
        with self.fleet(registry, "first", "second") as (first, second):
            first.fire("stubborn", tick)
            assert started.wait(10)
            second.fire("stubborn", tick + SECOND)
            wait_until(lambda: contexts[0].cancelled.is_set(), timeout=10, what="the running body to be told")
            assert not second.done() and not second.records  # the lock is still held: the new tick waits
            go_on.set()
            wait_until(lambda: first.done() and second.done(), timeout=15, what="both ticks to end")
        assert [r.outcome for r in first.records] == [Outcome.REPLACED]
        assert [r.outcome for r in second.records] == [Outcome.SUCCEEDED]

    def test_a_later_tick_takes_the_place_of_a_waiting_one_under_replace(
            self, caplog_info: pytest.LogCaptureFixture) -> None:
        held = Held("replaced", "replace")  # both later ticks find its body running: it ignores ctx.cancelled
        registry, started, go_on, ran = held.registry, held.started, held.go_on, held.ran
        tick = self._tick()
        with self.fleet(registry, "first", "second", "third") as (first, second, third):
            first.fire("replaced", tick)
            assert started.wait(10)
            second.fire("replaced", tick + SECOND)
            wait_until(self._waiting(caplog_info, tick + SECOND), timeout=10, what="the second tick to wait")
            third.fire("replaced", tick + 2 * SECOND)
            wait_until(lambda: second.done(), timeout=10, what="the second tick to give way")
            go_on.set()
            wait_until(lambda: first.done() and third.done(), timeout=15, what="the third tick to run")
        assert [r.outcome for r in second.records] == [Outcome.SKIPPED_BUSY]
        assert second.records[0].error is not None and "a later tick replaces it" in second.records[0].error
        assert [r.outcome for r in third.records] == [Outcome.SUCCEEDED]
        assert ran == [tick, tick + 2 * SECOND]

    def test_a_store_keeps_replaced_as_the_last_outcome(self) -> None:
        if not isinstance(self.store, ControlStore):
            pytest.skip("the store has no control plane: no lock documents to read")
        tick = self._tick()
        won = self.store.acquire("replaced", owner="runner", lease=SECOND, fire_time=tick)
        assert won.token is not None
        assert self.store.release("replaced", token=won.token, outcome="replaced", error="replaced: told to stop")
        state = self.store.lock("replaced")
        assert state is not None and state.last_outcome == "replaced" and state.last_error is None
