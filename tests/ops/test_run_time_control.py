"""Run-time control in one process: pause and resume, schedule overrides, catch-up and jitter, each rule on
its own. tests/ops/test_fleet_control.py proves the same with several processes on real stores."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from mutexcron import (
    CronSpecError,
    JobContext,
    Outcome,
    Registry,
    RunRecord,
    Scheduler,
    UnknownJobError,
    mutex_cron,
    next_fire_times,
)
from mutexcron.errors import StoreUnavailable
from mutexcron.ops.control import jitter_delay, missed_ticks
from mutexcron.stores import Acquisition, LockState, MemoryLockStore
from tests.support import wait_until

TICK = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


@pytest.fixture
def schedulers() -> Iterator[list[Scheduler]]:
    """Schedulers a test started; shut down afterwards, whatever happened."""
    started: list[Scheduler] = []
    yield started
    for scheduler in started:
        scheduler.shutdown(timeout=timedelta(seconds=2))


def instance(store: MemoryLockStore, registry: Registry, name: str = "A", **options: object) -> Scheduler:
    return Scheduler(store, registry=registry, instance_id=name, **options)  # type: ignore[arg-type]


def recorder(scheduler: Scheduler) -> list[RunRecord]:
    records: list[RunRecord] = []
    scheduler.add_listener(records.append)
    return records


# -- pause and resume ---------------------------------------------------------------------------------

def test_pause_works_on_a_scheduler_that_was_never_started(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    state = instance(store, registry).pause("digest", by="alice")
    assert state.paused and state.paused_by == "alice"
    assert store.lock("digest") == state


def test_a_job_the_store_does_not_know_is_an_unknown_job_error(store: MemoryLockStore, registry: Registry) -> None:
    scheduler = instance(store, registry)
    for action in (lambda: scheduler.pause("nope"), lambda: scheduler.resume("nope"),
                   lambda: scheduler.set_schedule("nope", "* * * * *"), lambda: scheduler.reset_schedule("nope")):
        with pytest.raises(UnknownJobError, match="'nope'"):
            action()
    assert store.locks() == []


def test_a_job_declared_elsewhere_is_paused_through_the_store(store: MemoryLockStore, registry: Registry) -> None:
    store.seed(["declared.elsewhere"])
    assert instance(store, registry).pause("declared.elsewhere").paused


def test_a_pause_until_a_time_already_passed_is_refused_and_writes_nothing(store: MemoryLockStore,
                                                                          registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    with pytest.raises(ValueError, match=r"'digest'.*already passed"):
        instance(store, registry).pause("digest", until=store.now() - timedelta(seconds=1))
    state = store.lock("digest")
    assert state is None or not state.paused


@pytest.mark.parametrize("field", ["spec", "by"])
def test_a_spec_or_by_longer_than_a_store_keeps_is_refused_before_writing(store: MemoryLockStore,
                                                                         registry: Registry, field: str) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    long = "0 6 * * *" + " " * 300 + "*" if field == "spec" else "x" * 256
    arguments = {"spec": long} if field == "spec" else {"spec": "0 7 * * *", "by": long}
    with pytest.raises((CronSpecError, ValueError), match="255"):
        instance(store, registry).set_schedule("digest", **arguments)  # type: ignore[arg-type]
    state = store.lock("digest")
    assert state is None or state.schedule_version == 0


def test_pause_until_must_be_aware(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    with pytest.raises(ValueError, match="'digest': until"):
        instance(store, registry).pause("digest", until=datetime(2030, 1, 1))
    assert store.lock("digest") is None


def test_a_paused_job_skips_its_ticks_without_running_the_body(store: MemoryLockStore, registry: Registry) -> None:
    ran: list[datetime] = []
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda ctx: ran.append(ctx.fire_time))
    scheduler = instance(store, registry)
    scheduler.pause("digest")
    record = scheduler.run_tick("digest", TICK)
    assert record.outcome is Outcome.SKIPPED_PAUSED and ran == []
    state = store.lock("digest")
    assert state is not None and state.last_fire_time is None


def test_a_paused_job_refuses_run_now_too_without_raising(store: MemoryLockStore, registry: Registry) -> None:
    ran: list[str] = []
    mutex_cron("0 6 * * *", name="digest", registry=registry, on_busy="raise")(lambda: ran.append("ran"))
    scheduler = instance(store, registry)
    scheduler.pause("digest")
    assert scheduler.run_now("digest").outcome is Outcome.SKIPPED_PAUSED and ran == []


def test_resume_lets_the_next_tick_run(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    scheduler = instance(store, registry)
    scheduler.pause("digest")
    scheduler.resume("digest")
    assert scheduler.run_tick("digest", TICK).outcome is Outcome.SUCCEEDED


def test_a_running_fleet_stops_and_restarts_at_pause_and_resume(store: MemoryLockStore, registry: Registry,
                                                                schedulers: list[Scheduler]) -> None:
    bodies: list[datetime] = []
    mutex_cron("* * * * * *", name="tick", registry=registry)(lambda ctx: bodies.append(ctx.fire_time))
    for name in "AB":
        schedulers.append(instance(store, registry, name))
        schedulers[-1].start()
    wait_until(lambda: bodies, timeout=3, what="a first run")
    operator = instance(store, registry, "ops")  # never started
    paused_at = operator.pause("tick").paused_at
    assert paused_at is not None
    skipped = recorder(schedulers[0])
    wait_until(lambda: any(r.outcome is Outcome.SKIPPED_PAUSED for r in skipped), timeout=3, what="a paused skip")
    assert [fire for fire in bodies if fire > paused_at] == []
    operator.resume("tick")
    resumed = datetime.now(UTC)
    wait_until(lambda: any(fire > resumed for fire in bodies), timeout=3, what="a run after resume")


def test_a_pause_until_ends_by_itself(store: MemoryLockStore, registry: Registry,
                                      schedulers: list[Scheduler]) -> None:
    bodies: list[datetime] = []
    mutex_cron("* * * * * *", name="tick", registry=registry)(lambda ctx: bodies.append(ctx.fire_time))
    scheduler = instance(store, registry)
    until = store.now().replace(microsecond=500_000) + timedelta(seconds=1)  # half-way between two ticks
    scheduler.pause("tick", until=until)
    schedulers.append(scheduler)
    scheduler.start()
    wait_until(lambda: bodies, timeout=4, what="a run once the pause ended")
    assert min(bodies) > until  # the ticks before it were refused


# -- schedule overrides ---------------------------------------------------------------------------------

def test_set_schedule_stores_the_override_and_keeps_the_codes_spec(store: MemoryLockStore,
                                                                   registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    state = instance(store, registry).set_schedule("digest", "0 7 * * *", timezone=ZoneInfo("Europe/Paris"),
                                                   by="bob")
    assert (state.schedule, state.schedule_timezone, state.schedule_by) == ("0 7 * * *", "Europe/Paris", "bob")
    assert registry.get("digest").spec.expression == "0 6 * * *"


@pytest.mark.parametrize(("spec", "zone"), [("61 * * * *", None), ("* * *", None), ("0 7 * * *", "Mars/Base"),
                                            ("", None)])
def test_a_bad_spec_or_zone_is_a_cron_spec_error_and_writes_nothing(store: MemoryLockStore, registry: Registry,
                                                                    spec: str, zone: str | None) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    store.seed(["digest"])
    with pytest.raises(CronSpecError, match="digest"):
        instance(store, registry).set_schedule("digest", spec, timezone=zone)
    state = store.lock("digest")
    assert state is not None and state.schedule is None and state.schedule_version == 0


def test_reset_schedule_goes_back_to_the_codes_spec(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    scheduler = instance(store, registry)
    scheduler.set_schedule("digest", "0 7 * * *")
    state = scheduler.reset_schedule("digest")
    assert state.schedule is None and state.schedule_version == 2


def test_a_running_scheduler_follows_its_own_change_at_once(store: MemoryLockStore, registry: Registry,
                                                           schedulers: list[Scheduler]) -> None:
    bodies: list[datetime] = []
    mutex_cron("0 0 1 1 *", name="yearly", registry=registry)(lambda ctx: bodies.append(ctx.fire_time))
    scheduler = instance(store, registry, sync_interval=timedelta(hours=1))
    schedulers.append(scheduler)
    scheduler.start()
    scheduler.set_schedule("yearly", "* * * * * *")
    wait_until(lambda: bodies, timeout=3, what="a run on the new schedule")


def test_another_instance_follows_a_change_within_sync_interval(store: MemoryLockStore, registry: Registry,
                                                               schedulers: list[Scheduler]) -> None:
    bodies: list[datetime] = []
    mutex_cron("0 0 1 1 *", name="yearly", registry=registry)(lambda ctx: bodies.append(ctx.fire_time))
    scheduler = instance(store, registry, sync_interval=timedelta(milliseconds=300))
    schedulers.append(scheduler)
    scheduler.start()
    changed = instance(store, registry, "ops").set_schedule("yearly", "* * * * * *").schedule_changed_at
    assert changed is not None
    wait_until(lambda: bodies, timeout=3, what="a run on the new schedule")
    assert min(bodies) <= changed + timedelta(milliseconds=300) + timedelta(seconds=1)


def test_a_tick_of_the_old_schedule_is_not_run_after_the_change(store: MemoryLockStore, registry: Registry,
                                                               schedulers: list[Scheduler]) -> None:
    mutex_cron("* * * * *", name="minutely", registry=registry)(lambda: None)
    stale = instance(store, registry, "stale", sync_interval=timedelta(hours=1))
    schedulers.append(stale)
    stale.start()  # fires on version 0 until it learns otherwise
    instance(store, registry, "ops").set_schedule("minutely", "*/5 * * * *")
    old_only = datetime(2026, 3, 1, 6, 1, tzinfo=UTC)
    assert stale.run_tick("minutely", old_only).outcome is Outcome.SKIPPED_STALE_SCHEDULE
    state = store.lock("minutely")
    assert state is not None and state.last_fire_time is None


def test_a_stale_instance_runs_a_tick_both_schedules_have(store: MemoryLockStore, registry: Registry,
                                                          schedulers: list[Scheduler]) -> None:
    mutex_cron("* * * * *", name="minutely", registry=registry)(lambda: None)
    stale = instance(store, registry, "stale", sync_interval=timedelta(hours=1))
    schedulers.append(stale)
    stale.start()
    instance(store, registry, "ops").set_schedule("minutely", "*/5 * * * *")
    both = datetime(2026, 3, 1, 6, 5, tzinfo=UTC)
    assert stale.run_tick("minutely", both).outcome is Outcome.SUCCEEDED
    assert stale.run_tick("minutely", both).outcome is Outcome.SKIPPED_ALREADY_RAN


def test_an_override_in_its_own_zone_fires_in_that_zone(store: MemoryLockStore, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    instance(store, registry).set_schedule("digest", "0 9 * * *", timezone="Asia/Tokyo")
    state = store.lock("digest")
    assert state is not None
    from mutexcron.ops.control import effective_trigger
    trigger = effective_trigger(registry.get("digest"), state, UTC)
    assert trigger.next_after(TICK) == datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # 09:00 in Tokyo


# -- catch-up -------------------------------------------------------------------------------------------

def lock_state(last_fire: datetime | None, **fields: object) -> LockState:
    return LockState("job", False, None, None, None, None, last_fire, 1, **fields)  # type: ignore[arg-type]


def declared(registry: Registry, catch_up: str, spec: str = "0 * * * *", **options: object) -> Scheduler:
    mutex_cron(spec, name="job", registry=registry, catch_up=catch_up, **options)(lambda: None)  # type: ignore[arg-type]
    return Scheduler("memory://", registry=registry)


NOW = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def missed(registry: Registry, state: LockState, catch_up: str = "all", **options: object) -> list[int]:
    declared(registry, catch_up, **options)
    job = registry.get("job")
    return [tick.hour for tick in missed_ticks(job, state, job.trigger(UTC), now=NOW)]


def test_all_catches_up_every_tick_after_the_last_fire_in_order(registry: Registry) -> None:
    assert missed(registry, lock_state(NOW.replace(hour=9, minute=0)), catch_up_window=timedelta(hours=6)) == [
        10, 11, 12]


def test_latest_catches_up_only_the_most_recent_tick(registry: Registry) -> None:
    state = lock_state(NOW.replace(hour=9, minute=0))
    assert missed(registry, state, "latest", catch_up_window=timedelta(hours=6)) == [12]


def test_skip_catches_up_nothing(registry: Registry) -> None:
    assert missed(registry, lock_state(NOW.replace(hour=9, minute=0)), "skip") == []


def test_only_ticks_within_the_window_are_missed(registry: Registry) -> None:
    state = lock_state(NOW.replace(hour=1, minute=0))
    assert missed(registry, state, catch_up_window=timedelta(hours=2)) == [11, 12]


def test_a_job_that_never_ran_catches_up_nothing(registry: Registry) -> None:
    assert missed(registry, lock_state(None), catch_up_window=timedelta(hours=6)) == []


def test_ticks_skipped_by_a_pause_are_never_caught_up(registry: Registry) -> None:
    resumed = NOW.replace(hour=11, minute=10)
    state = lock_state(NOW.replace(hour=8, minute=0), resumed_at=resumed)
    assert missed(registry, state, catch_up_window=timedelta(hours=6)) == [12]


def test_a_pause_that_ended_by_itself_counts_too(registry: Registry) -> None:
    state = lock_state(NOW.replace(hour=8, minute=0), paused=True, paused_until=NOW.replace(hour=11, minute=0))
    assert missed(registry, state, catch_up_window=timedelta(hours=6)) == [12]


def test_a_paused_job_catches_up_nothing(registry: Registry) -> None:
    state = lock_state(NOW.replace(hour=8, minute=0), paused=True)
    assert missed(registry, state, catch_up_window=timedelta(hours=6)) == []


def run_then_stop(store: MemoryLockStore, registry: Registry, catch_up: str, bodies: list[JobContext]) -> None:
    """Declare a per-second job, run one tick of it at 'now - 4 s' (as a fleet that then stopped)."""
    mutex_cron("* * * * * *", name="job", registry=registry, catch_up=catch_up)(bodies.append)
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=4)
    assert instance(store, registry, "old").run_tick("job", last).outcome is Outcome.SUCCEEDED
    bodies.clear()


@pytest.mark.parametrize(("catch_up", "expected"), [("all", 3), ("latest", 1), ("skip", 0)])
def test_a_starting_fleet_runs_each_missed_tick_once(store: MemoryLockStore, registry: Registry,
                                                      schedulers: list[Scheduler], catch_up: str,
                                                      expected: int) -> None:
    bodies: list[JobContext] = []
    run_then_stop(store, registry, catch_up, bodies)
    for name in "ABC":
        schedulers.append(instance(store, registry, name))
    for scheduler in schedulers:
        scheduler.start()
    wait_until(lambda: sum(not ctx.catch_up for ctx in bodies) >= 1, timeout=3, what="a live tick")
    caught = [ctx.fire_time for ctx in bodies if ctx.catch_up]
    assert len(caught) >= expected and len(set(caught)) == len(caught)
    fires = [ctx.fire_time for ctx in bodies]
    assert len(fires) == len(set(fires)), "a tick ran twice"
    if catch_up == "latest":
        assert len(caught) == 1
    if catch_up == "skip":
        assert caught == []
    assert caught == sorted(caught)


@pytest.mark.parametrize("catch_up", ["all", "latest"])
def test_ticks_that_fire_while_a_job_catches_up_run_after_the_missed_ones_each_once(
        store: MemoryLockStore, registry: Registry, schedulers: list[Scheduler], catch_up: str) -> None:
    """Each run takes 0.4 s: ticks fire while the catch-up runs, are handed to it, and run after it in order."""
    runs: list[JobContext] = []
    never = threading.Event()

    def slow(ctx: JobContext) -> None:
        runs.append(ctx)
        never.wait(0.4)

    mutex_cron("* * * * * *", name="job", registry=registry, catch_up=catch_up)(slow)
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    assert instance(store, registry, "old").run_tick("job", last).outcome is Outcome.SUCCEEDED
    runs.clear()
    schedulers.append(instance(store, registry))
    started = datetime.now(UTC)
    schedulers[0].start()
    wait_until(lambda: len(runs) >= 10, timeout=15, what="ten runs")
    never.set()
    fire_times = [ctx.fire_time for ctx in runs]
    # The missed ticks first (every one, or the latest), then every tick that fired since, once, in order.
    assert fire_times == [fire_times[0] + timedelta(seconds=n) for n in range(len(fire_times))]
    caught = [ctx.fire_time for ctx in runs if ctx.catch_up]
    assert caught == fire_times[:len(caught)] and caught[-1] <= started
    assert caught[0] == last + timedelta(seconds=1) if catch_up == "all" else len(caught) == 1


class FlakyStore(MemoryLockStore):
    """The memory store with a switch that makes every call fail, as an unreachable store does."""

    def __init__(self) -> None:
        super().__init__()
        self.down = threading.Event()

    def _check(self) -> None:
        if self.down.is_set():
            raise StoreUnavailable("flaky store: down")

    def acquire(self, name: str, **options: object) -> Acquisition:  # type: ignore[override]
        self._check()
        return super().acquire(name, **options)  # type: ignore[arg-type]

    def lock(self, name: str) -> LockState | None:
        self._check()
        return super().lock(name)

    def locks(self) -> list[LockState]:
        self._check()
        return super().locks()


def test_ticks_missed_during_a_store_outage_are_caught_up_when_it_is_back(registry: Registry,
                                                                          schedulers: list[Scheduler]) -> None:
    store = FlakyStore()
    bodies: list[JobContext] = []
    mutex_cron("* * * * * *", name="job", registry=registry, catch_up="all")(bodies.append)
    scheduler = instance(store, registry, sync_interval=timedelta(milliseconds=200))
    records = recorder(scheduler)
    schedulers.append(scheduler)
    scheduler.start()
    wait_until(lambda: bodies, timeout=3, what="a first run")
    store.down.set()
    wait_until(lambda: sum(r.outcome is Outcome.SKIPPED_STORE_ERROR for r in records) >= 2, timeout=4,
               what="two ticks lost to the outage")
    lost = {r.fire_time for r in records if r.outcome is Outcome.SKIPPED_STORE_ERROR}
    store.down.clear()
    wait_until(lambda: lost <= {ctx.fire_time for ctx in bodies if ctx.catch_up}, timeout=4,
               what="every lost tick caught up")


def test_an_instance_that_started_while_the_store_was_down_keeps_to_the_override(
        registry: Registry, schedulers: list[Scheduler]) -> None:
    store = FlakyStore()
    bodies: list[JobContext] = []
    mutex_cron("* * * * * *", name="job", registry=registry)(bodies.append)
    instance(store, registry, "ops").set_schedule("job", "0 0 1 1 *")  # yearly from now on
    store.down.set()
    scheduler = instance(store, registry, sync_interval=timedelta(hours=1))  # no sync to the rescue
    records = recorder(scheduler)
    schedulers.append(scheduler)
    scheduler.start()  # reads no override: fires every second on the code's spec
    store.down.clear()
    wait_until(lambda: any(r.outcome is Outcome.SKIPPED_STALE_SCHEDULE for r in records), timeout=3,
               what="a fire of the code's schedule refused as stale")
    assert bodies == []


def test_a_catch_up_after_a_schedule_change_runs_no_tick_of_the_old_schedule(registry: Registry,
                                                                            schedulers: list[Scheduler]) -> None:
    store = FlakyStore()
    bodies: list[JobContext] = []
    mutex_cron("* * * * * *", name="job", registry=registry, catch_up="all")(bodies.append)
    scheduler = instance(store, registry, sync_interval=timedelta(hours=1))  # its copy stays on version 0
    records = recorder(scheduler)
    schedulers.append(scheduler)
    scheduler.start()
    wait_until(lambda: bodies, timeout=3, what="a first run")
    store.down.set()
    wait_until(lambda: sum(r.outcome is Outcome.SKIPPED_STORE_ERROR for r in records) >= 3, timeout=5,
               what="three ticks lost to the outage")
    store.set_schedule("job", "0 0 1 1 *")  # an operator, who still reaches the store: yearly from now on
    changed = store.now()
    store.down.clear()
    wait_until(lambda: any(r.outcome is Outcome.SKIPPED_STALE_SCHEDULE for r in records), timeout=3,
               what="a fire of the old schedule refused as stale")
    assert [ctx.fire_time for ctx in bodies if ctx.catch_up] == []
    assert [ctx.fire_time for ctx in bodies if ctx.fire_time >= changed] == []


class ChangedAfterReadStore(MemoryLockStore):
    """The memory store, where an operator bumps the job's schedule version (same spec) right after the next
    read of its document: the acquire that follows is stale."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = threading.Event()

    def lock(self, name: str) -> LockState | None:
        state = super().lock(name)
        if self.armed.is_set() and state is not None:
            self.armed.clear()
            self.set_schedule(name, "* * * * * *")
        return state


def test_a_catch_up_tick_refused_as_stale_and_run_on_the_new_schedule_is_still_a_catch_up(
        registry: Registry, schedulers: list[Scheduler]) -> None:
    store = ChangedAfterReadStore()
    bodies: list[JobContext] = []
    run_then_stop(store, registry, "latest", bodies)
    scheduler = instance(store, registry, sync_interval=timedelta(hours=1))
    records = recorder(scheduler)
    schedulers.append(scheduler)
    store.armed.set()
    scheduler.start()
    wait_until(lambda: any(ctx.catch_up for ctx in bodies), timeout=3, what="the catch-up run")
    # Its record is reported once the body has ended and its lock is released, a moment after the body started.
    wait_until(lambda: any(r.catch_up for r in records), timeout=3, what="the catch-up run's record")
    assert not any(r.outcome is Outcome.SKIPPED_STALE_SCHEDULE and r.catch_up for r in records)
    caught = [r for r in records if r.catch_up]
    assert caught and all(r.outcome is Outcome.SUCCEEDED for r in caught)


def test_a_tick_still_waiting_out_its_jitter_is_not_missed_yet(registry: Registry) -> None:
    spread = timedelta(minutes=59)  # below the hour between ticks
    noon = NOW.replace(minute=0)

    def late_noon(name: str) -> bool:
        return noon + jitter_delay(name, noon, spread) > NOW  # its instances run it after 12:30

    name = next(f"job.{i}" for i in range(1000) if late_noon(f"job.{i}"))
    mutex_cron("0 * * * *", name=name, registry=registry, catch_up="all", jitter=spread,
               catch_up_window=timedelta(hours=6))(lambda: None)
    job = registry.get(name)
    state = LockState(name, False, None, None, None, None, NOW.replace(hour=9, minute=0), 1)
    assert [tick.hour for tick in missed_ticks(job, state, job.trigger(UTC), now=NOW)] == [10, 11]


# -- jitter ---------------------------------------------------------------------------------------------

def test_jitter_is_the_same_for_a_tick_everywhere_and_within_range() -> None:
    spread = timedelta(seconds=30)
    delays = {jitter_delay("job", TICK + timedelta(minutes=i), spread) for i in range(200)}
    assert all(timedelta(0) <= d < spread for d in delays) and len(delays) > 100
    assert jitter_delay("job", TICK, spread) == jitter_delay("job", TICK.astimezone(ZoneInfo("Asia/Tokyo")), spread)
    assert jitter_delay("job", TICK, spread) != jitter_delay("other", TICK, spread)
    assert jitter_delay("job", TICK, timedelta(0)) == timedelta(0)


def test_a_jittered_tick_runs_late_by_its_jitter_with_a_nominal_fire_time(store: MemoryLockStore,
                                                                          registry: Registry,
                                                                          schedulers: list[Scheduler]) -> None:
    started: list[tuple[datetime, datetime]] = []
    spread = timedelta(milliseconds=900)
    mutex_cron("* * * * * *", name="job", registry=registry, jitter=spread)(
        lambda ctx: started.append((ctx.fire_time, datetime.now(UTC))))
    scheduler = instance(store, registry)
    schedulers.append(scheduler)
    scheduler.start()
    wait_until(lambda: len(started) >= 2, timeout=5, what="two jittered runs")
    for fire_time, at in started:
        assert fire_time.microsecond == 0  # nominal
        assert at >= fire_time + jitter_delay("job", fire_time, spread)


def test_next_fire_times_still_lists_the_codes_schedule(registry: Registry) -> None:
    assert next_fire_times("0 6 * * *", after=TICK, count=2) == [TICK + timedelta(days=1), TICK + timedelta(days=2)]
