"""The Scheduler's guarantees, one per test, in one process (tests/test_fleet.py does several processes)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from mutexcron import JobContext, LockBusy, Outcome, Registry, RunRecord, Scheduler, mutex_cron
from mutexcron.stores import MemoryLockStore
from tests.support import wait_until

TICK = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0?socket_connect_timeout=0.2"


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


def instance(store: MemoryLockStore, registry: Registry, name: str = "A", **options: object) -> Scheduler:
    return Scheduler(store, registry=registry, instance_id=name, **options)  # type: ignore[arg-type]


def test_a_tick_runs_the_body_with_its_context(store: MemoryLockStore, registry: Registry) -> None:
    seen: list[JobContext] = []
    mutex_cron("0 6 * * *", name="digest", registry=registry)(seen.append)

    record = instance(store, registry).run_tick("digest", TICK)

    assert record.outcome is Outcome.SUCCEEDED
    assert [(c.job_name, c.fire_time, c.instance_id, c.token) for c in seen] == [("digest", TICK, "A", 1)]
    assert (record.job_name, record.fire_time, record.instance_id, record.token) == ("digest", TICK, "A", 1)
    assert record.started_at <= record.finished_at  # type: ignore[operator]


def test_a_body_without_parameters_is_called_without_context(store: MemoryLockStore, registry: Registry) -> None:
    calls = []
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: calls.append("ran"))
    assert instance(store, registry).run_tick("digest", TICK).outcome is Outcome.SUCCEEDED
    assert calls == ["ran"]


def test_an_async_body_is_awaited(store: MemoryLockStore, registry: Registry) -> None:
    calls = []

    @mutex_cron("0 6 * * *", name="digest", registry=registry)
    async def digest(ctx: JobContext) -> None:
        calls.append(ctx.token)

    assert instance(store, registry).run_tick("digest", TICK).outcome is Outcome.SUCCEEDED
    assert calls == [1]


def test_a_tick_that_ran_in_a_millisecond_is_not_run_again_by_a_late_instance(
    store: MemoryLockStore, registry: Registry
) -> None:
    calls = []
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: calls.append(1))
    assert instance(store, registry, "on-time").run_tick("digest", TICK).outcome is Outcome.SUCCEEDED
    late = instance(store, registry, "late").run_tick("digest", TICK)
    assert late.outcome is Outcome.SKIPPED_ALREADY_RAN
    assert calls == [1]


def test_the_next_tick_runs_again(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    scheduler = instance(store, registry)
    scheduler.run_tick("digest", TICK)
    assert scheduler.run_tick("digest", TICK + timedelta(days=1)).outcome is Outcome.SUCCEEDED


def test_only_one_instance_runs_while_the_body_is_running(store: MemoryLockStore, registry: Registry) -> None:
    entered, leave = threading.Event(), threading.Event()

    @mutex_cron("0 6 * * *", name="digest", registry=registry)
    def digest() -> None:
        entered.set()
        leave.wait(10)

    first = instance(store, registry, "A")
    worker = threading.Thread(target=first.run_tick, args=("digest", TICK))
    worker.start()
    try:
        assert entered.wait(5)
        other = instance(store, registry, "B").run_now("digest")
        assert other.outcome is Outcome.SKIPPED_BUSY
        assert "A" in (other.error or "")
    finally:
        leave.set()
        worker.join()
    assert not store.lock("digest").locked  # type: ignore[union-attr]


def test_on_busy_wait_runs_once_the_holder_releases(store: MemoryLockStore, registry: Registry) -> None:
    entered, leave = threading.Event(), threading.Event()
    order: list[str] = []

    @mutex_cron("0 6 * * *", name="digest", registry=registry, on_busy="wait", lease=5)
    def digest(ctx: JobContext) -> None:
        order.append(ctx.instance_id)
        if ctx.instance_id == "A":
            entered.set()
            leave.wait(10)

    holder = threading.Thread(target=instance(store, registry, "A").run_now, args=("digest",))
    holder.start()
    assert entered.wait(5)
    waiter_records: list[RunRecord] = []
    waiter = threading.Thread(target=lambda: waiter_records.append(instance(store, registry, "B").run_now("digest")))
    waiter.start()
    leave.set()
    holder.join()
    waiter.join()
    assert order == ["A", "B"]
    assert waiter_records[0].outcome is Outcome.SUCCEEDED


def test_on_busy_raise_records_and_raises_lock_busy(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry, on_busy="raise")(lambda: None)
    store.acquire("digest", owner="elsewhere", lease=timedelta(minutes=1), fire_time=None)
    records: list[RunRecord] = []
    scheduler = instance(store, registry)
    scheduler.add_listener(records.append)
    with pytest.raises(LockBusy, match="digest") as error:
        scheduler.run_now("digest")
    assert error.value.record.outcome is Outcome.SKIPPED_BUSY  # type: ignore[union-attr]
    assert [r.outcome for r in records] == [Outcome.SKIPPED_BUSY]


def test_a_failing_body_is_recorded_with_its_traceback_and_releases_the_lock(
    store: MemoryLockStore, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    @mutex_cron("0 6 * * *", name="digest", registry=registry)
    def digest() -> None:
        raise RuntimeError("mail server down")

    record = instance(store, registry).run_tick("digest", TICK)

    assert record.outcome is Outcome.FAILED
    assert "RuntimeError: mail server down" in (record.error or "")
    assert "Traceback" in (record.error or "")
    assert not store.lock("digest").locked  # type: ignore[union-attr]
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


def test_the_scheduler_keeps_firing_after_a_body_fails(store: MemoryLockStore, registry: Registry) -> None:
    outcomes: list[Outcome | None] = []

    @mutex_cron("* * * * * *", name="flaky", registry=registry)
    def flaky() -> None:
        raise RuntimeError("boom")

    scheduler = instance(store, registry)
    scheduler.add_listener(lambda record: outcomes.append(record.outcome))
    with scheduler:
        assert wait_until(lambda: len(outcomes) >= 2, timeout=5)
    assert set(outcomes) == {Outcome.FAILED}


def test_an_unreachable_store_fails_closed(registry: Registry) -> None:
    calls = []
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: calls.append(1))
    scheduler = Scheduler(UNREACHABLE_REDIS, registry=registry, instance_id="A")
    record = scheduler.run_tick("digest", TICK)
    assert record.outcome is Outcome.SKIPPED_STORE_ERROR
    assert "127.0.0.1:1" in (record.error or "")
    assert calls == []


def test_start_survives_an_unreachable_store(registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    with Scheduler(UNREACHABLE_REDIS, registry=registry) as scheduler:
        assert scheduler.running


def test_hold_at_least_keeps_a_quick_job_locked(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry, hold_at_least=timedelta(minutes=1))(lambda: None)
    assert instance(store, registry, "A").run_now("digest").outcome is Outcome.SUCCEEDED
    assert instance(store, registry, "B").run_now("digest").outcome is Outcome.SKIPPED_BUSY


def test_the_heartbeat_renews_the_lease_while_the_body_runs(store: MemoryLockStore, registry: Registry) -> None:
    lease = timedelta(milliseconds=300)
    entered, leave = threading.Event(), threading.Event()

    @mutex_cron("0 6 * * *", name="slow", registry=registry, lease=lease)
    def slow() -> None:
        entered.set()
        leave.wait(10)

    records: list[RunRecord] = []
    worker = threading.Thread(target=lambda: records.append(instance(store, registry, "A").run_tick("slow", TICK)))
    worker.start()
    assert entered.wait(5)
    first_until = store.lock("slow").lock_until  # type: ignore[union-attr]
    # Three leases later the lock must still be held, and its expiry must have moved forward.
    assert wait_until(lambda: store.now() > first_until + 2 * lease, timeout=5)  # type: ignore[operator]
    assert store.lock("slow").is_held(store.now())  # type: ignore[union-attr]
    assert instance(store, registry, "B").run_now("slow").outcome is Outcome.SKIPPED_BUSY
    leave.set()
    worker.join()
    assert records[0].outcome is Outcome.SUCCEEDED and not records[0].lock_lost


def test_a_lost_lock_is_logged_and_marked_on_the_run(
    store: MemoryLockStore, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    entered, leave = threading.Event(), threading.Event()
    seen: list[JobContext] = []

    @mutex_cron("0 6 * * *", name="slow", registry=registry, lease=timedelta(milliseconds=300))
    def slow(ctx: JobContext) -> None:
        seen.append(ctx)
        entered.set()
        leave.wait(10)

    records: list[RunRecord] = []
    worker = threading.Thread(target=lambda: records.append(instance(store, registry, "A").run_tick("slow", TICK)))
    worker.start()
    assert entered.wait(5)
    store.force_unlock("slow")  # an operator frees it; the heartbeat must notice it no longer holds it
    assert wait_until(lambda: seen[0].lock_lost, timeout=5)
    leave.set()
    worker.join()
    assert records[0].lock_lost
    assert any("lock lost" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


def test_listeners_hear_start_and_finish_and_their_errors_are_contained(
    store: MemoryLockStore, registry: Registry
) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    heard: list[tuple[str, Outcome | None]] = []
    scheduler = instance(store, registry)
    scheduler.add_listener(lambda r: heard.append(("started", r.outcome)), events=["started"])
    scheduler.add_listener(lambda r: heard.append(("finished", r.outcome)))
    scheduler.add_listener(lambda r: 1 / 0, events=["started", "finished"])

    assert scheduler.run_tick("digest", TICK).outcome is Outcome.SUCCEEDED
    assert heard == [("started", None), ("finished", Outcome.SUCCEEDED)]


def test_start_seeds_every_declared_job_without_resetting_existing_locks(
    store: MemoryLockStore, registry: Registry
) -> None:
    mutex_cron("0 6 * * *", name="a", registry=registry)(lambda: None)
    mutex_cron("0 7 * * *", name="b", registry=registry)(lambda: None)
    store.acquire("a", owner="elsewhere", lease=timedelta(minutes=1), fire_time=TICK)
    with instance(store, registry):
        states = {s.name: s for s in store.locks()}
    assert set(states) == {"a", "b"}
    assert states["a"].locked and states["a"].locked_by == "elsewhere"


def test_a_started_scheduler_fires_on_the_clock(store: MemoryLockStore, registry: Registry) -> None:
    fires: list[datetime] = []
    mutex_cron("* * * * * *", name="every_second", registry=registry)(lambda ctx: fires.append(ctx.fire_time))
    with instance(store, registry):
        assert wait_until(lambda: len(fires) >= 2, timeout=5)
    assert all(f.microsecond == 0 and f.tzinfo is not None for f in fires)
    assert fires[1] - fires[0] == timedelta(seconds=1)


def test_shutdown_waits_for_a_running_body_and_releases_its_lock(
    store: MemoryLockStore, registry: Registry
) -> None:
    entered = threading.Event()
    finished: list[bool] = []

    @mutex_cron("* * * * * *", name="slow", registry=registry)
    def slow() -> None:
        entered.set()
        threading.Event().wait(0.3)  # the body's own work
        finished.append(True)

    scheduler = instance(store, registry)
    scheduler.start()
    assert entered.wait(5)
    scheduler.shutdown(wait=True)
    assert finished
    assert not store.lock("slow").is_held(store.now())  # type: ignore[union-attr]


def test_shutdown_timeout_leaves_a_stuck_body_its_lock(store: MemoryLockStore, registry: Registry) -> None:
    entered, leave = threading.Event(), threading.Event()

    @mutex_cron("* * * * * *", name="stuck", registry=registry)
    def stuck() -> None:
        entered.set()
        leave.wait(10)

    scheduler = instance(store, registry)
    scheduler.start()
    try:
        assert entered.wait(5)
        scheduler.shutdown(wait=True, timeout=timedelta(milliseconds=100))
        assert store.lock("stuck").is_held(store.now())  # type: ignore[union-attr]
    finally:
        leave.set()


def test_a_clock_skewed_instance_reports_nominal_fire_times(store: MemoryLockStore, registry: Registry) -> None:
    fires: list[datetime] = []
    mutex_cron("* * * * * *", name="tick", registry=registry)(lambda ctx: fires.append(ctx.fire_time))
    with instance(store, registry, clock_skew=timedelta(milliseconds=-1500)):
        assert wait_until(lambda: len(fires) >= 1, timeout=5)
    assert fires[0].microsecond == 0
    assert datetime.now(UTC) - fires[0] >= timedelta(milliseconds=1500)


def test_unknown_listener_events_are_rejected(store: MemoryLockStore, registry: Registry) -> None:
    with pytest.raises(ValueError, match="unknown listener events"):
        instance(store, registry).add_listener(print, events=["done"])


def test_run_tick_rejects_a_naive_fire_time(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    with pytest.raises(ValueError, match="naive"):
        instance(store, registry).run_tick("digest", datetime(2026, 3, 1, 6))


class BusyWatchingStore(MemoryLockStore):
    """A memory store that tells the test when an acquire found the lock busy."""

    def __init__(self) -> None:
        super().__init__()
        self.busy_seen = threading.Event()

    def acquire(self, name, *, owner, lease, fire_time, schedule_version=None):  # type: ignore[no-untyped-def]
        acquisition = super().acquire(name, owner=owner, lease=lease, fire_time=fire_time,
                                      schedule_version=schedule_version)
        if acquisition.status == "busy":
            self.busy_seen.set()
        return acquisition


def test_a_tick_is_not_lost_to_an_earlier_run_that_is_just_finishing(registry: Registry) -> None:
    # A late instance (clock behind) runs an old tick at the very moment the on-time instance fires the
    # current one. The current tick must wait the short busy_grace for it, not be skipped and lost.
    store = BusyWatchingStore()
    inside, leave = threading.Event(), threading.Event()
    ran: list[tuple[str, datetime]] = []

    @mutex_cron("* * * * * *", name="tick", registry=registry)
    def tick(ctx: JobContext) -> None:
        ran.append((ctx.instance_id, ctx.fire_time))
        if ctx.instance_id == "late":
            inside.set()
            leave.wait(10)

    old_tick = TICK - timedelta(seconds=2)
    late = threading.Thread(target=instance(store, registry, "late").run_tick, args=("tick", old_tick))
    late.start()
    assert inside.wait(5)
    records: list[RunRecord] = []
    on_time_instance = instance(store, registry, "on-time")
    on_time = threading.Thread(target=lambda: records.append(on_time_instance.run_tick("tick", TICK)))
    on_time.start()
    assert store.busy_seen.wait(5)
    leave.set()
    late.join()
    on_time.join()
    assert records[0].outcome is Outcome.SUCCEEDED
    assert ran == [("late", old_tick), ("on-time", TICK)]


def test_a_tick_still_busy_after_the_grace_is_skipped(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("* * * * * *", name="tick", registry=registry)(lambda: None)
    store.acquire("tick", owner="long-runner", lease=timedelta(minutes=1), fire_time=TICK - timedelta(seconds=1))
    scheduler = instance(store, registry, busy_grace=timedelta(milliseconds=100))
    record = scheduler.run_tick("tick", TICK)
    assert record.outcome is Outcome.SKIPPED_BUSY
    assert "long-runner" in (record.error or "")


def test_run_now_can_override_the_busy_policy(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry, on_busy="wait", lease=60)(lambda: None)
    store.acquire("digest", owner="elsewhere", lease=timedelta(minutes=1), fire_time=None)
    record = instance(store, registry).run_now("digest", on_busy="skip")  # returns at once, no lease-long wait
    assert record.outcome is Outcome.SKIPPED_BUSY
    assert registry.get("digest").on_busy == "wait"


def test_a_scheduler_keeps_the_empty_registry_it_was_given_and_runs_jobs_declared_into_it_later(
    store: MemoryLockStore, registry: Registry
) -> None:
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    mutex_cron("0 6 * * *", name="declared.later", registry=registry)(lambda: None)

    assert scheduler.registry is registry
    record = scheduler.run_tick("declared.later", datetime(2026, 1, 1, 6, tzinfo=UTC))
    assert record.outcome is Outcome.SUCCEEDED


def test_the_options_are_checked_once_into_one_frozen_value(store: MemoryLockStore, registry: Registry) -> None:
    """What the fire path reads: durations as timedeltas, the zone as a tzinfo, defaults filled in, unchangeable."""
    scheduler = instance(store, registry, timezone="Europe/Paris", ping_timeout=2.5)
    options = scheduler.options

    assert (options.registry, options.instance_id, options.timezone) == (registry, "A", ZoneInfo("Europe/Paris"))
    assert options.ping_timeout == timedelta(seconds=2.5)
    assert options.name() == scheduler.instance_id == "A"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.busy_grace = timedelta(0)  # type: ignore[misc]
