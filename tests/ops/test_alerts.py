"""Missed and failing runs (issue 10): when a job is overdue or failing, one alert per incident for the whole
fleet, and one "recovered" when a run succeeds again. The store's part (atomic open/close of an incident, the
last outcome written by release) is in tests/alert_contract.py, run on every store."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import JobDefinitionError, Registry, Scheduler, mutex_cron
from mutexcron.ops.alerts import Alert, alert_delay, job_problems
from mutexcron.stores import LockState, LockStore, MemoryLockStore, store_from_url
from tests.support import wait_until

NOW = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
GRACE = timedelta(seconds=60)


@pytest.fixture
def schedulers() -> Iterator[list[Scheduler]]:
    started: list[Scheduler] = []
    yield started
    for scheduler in started:
        scheduler.shutdown(timeout=timedelta(seconds=2))


def declare(registry: Registry, spec: str = "0 * * * *", **options: object) -> None:
    mutex_cron(spec, name="job", registry=registry, lease=timedelta(minutes=5), **options)(lambda: None)  # type: ignore[arg-type]


def state(last_fire: datetime | None, **fields: object) -> LockState:
    fields.setdefault("created_at", NOW - timedelta(days=30))
    return LockState("job", False, None, None, None, None, last_fire, 1, **fields)  # type: ignore[arg-type]


def problems(registry: Registry, lock: LockState | None, now: datetime = NOW) -> list[tuple[str, datetime]]:
    job = registry.get("job")
    found = job_problems(job, lock, job.trigger(UTC), now=now, misfire_grace_time=GRACE, known_since=NOW)
    return [(problem.kind, problem.since) for problem in found]


# -- what counts as overdue or failing -------------------------------------------------------------------


def test_the_default_alert_delay_is_one_lease_plus_the_misfire_grace(registry: Registry) -> None:
    declare(registry)
    assert alert_delay(registry.get("job"), GRACE) == timedelta(minutes=6)


def test_a_tick_nobody_ran_is_overdue_once_its_alert_delay_has_passed(registry: Registry) -> None:
    declare(registry)
    lock = state(NOW.replace(hour=11, minute=0))  # the 12:00 tick did not run
    assert problems(registry, lock, NOW.replace(minute=5)) == []  # 12:05: within lease + grace (6 min)
    assert problems(registry, lock, NOW.replace(minute=7)) == [("overdue", NOW.replace(minute=0))]


def test_a_job_whose_latest_tick_ran_is_not_overdue(registry: Registry) -> None:
    declare(registry)
    assert problems(registry, state(NOW.replace(minute=0))) == []


def test_alert_after_zero_alerts_as_soon_as_a_tick_passed_unrun(registry: Registry) -> None:
    declare(registry, alert_after=timedelta(0))
    assert problems(registry, state(NOW.replace(hour=11, minute=0)), NOW.replace(minute=0, second=1)) == [
        ("overdue", NOW.replace(minute=0))]


def test_alert_after_false_turns_alerts_off(registry: Registry) -> None:
    declare(registry, alert_after=False)
    assert problems(registry, state(NOW.replace(hour=1), last_outcome="failed")) == []


def test_a_paused_job_is_not_overdue_and_its_paused_ticks_never_count(registry: Registry) -> None:
    declare(registry)
    last = NOW.replace(hour=6, minute=0)
    assert problems(registry, state(last, paused=True)) == []
    resumed = NOW.replace(minute=10)  # ticks 7:00 to 12:00 were refused by the pause
    assert problems(registry, state(last, resumed_at=resumed), NOW.replace(minute=29)) == []


def test_a_new_job_is_not_overdue_for_ticks_before_its_lock_existed(registry: Registry) -> None:
    declare(registry)
    assert problems(registry, state(None, created_at=NOW.replace(minute=1))) == []
    assert problems(registry, state(None, created_at=NOW.replace(hour=11, minute=1))) == [
        ("overdue", NOW.replace(minute=0))]


def test_a_job_whose_latest_run_failed_is_failing(registry: Registry) -> None:
    declare(registry)
    failed_at = NOW.replace(minute=0, second=3)
    lock = state(NOW.replace(minute=0), last_outcome="failed", last_finished_at=failed_at,
                 last_error="ValueError: boom")
    assert problems(registry, lock) == [("failing", failed_at)]
    assert problems(registry, state(NOW.replace(minute=0), last_outcome="succeeded")) == []


@pytest.mark.parametrize("bad", [True, -1, "soon", float("nan"), timedelta(days=400)])
def test_a_bad_alert_after_is_a_job_definition_error_naming_it(registry: Registry, bad: object) -> None:
    with pytest.raises(JobDefinitionError, match="'job': alert_after"):
        declare(registry, alert_after=bad)


@pytest.mark.parametrize("bad", ["ftp://hc.example/x", "hc-ping.com/uuid", "http://", "http://h:port/x", 5,
                                 "http://h/a b"])
def test_a_bad_ping_url_is_a_job_definition_error_naming_it(registry: Registry, bad: object) -> None:
    with pytest.raises(JobDefinitionError, match="'job': ping_url"):
        declare(registry, ping_url=bad)


# -- one alert per incident, fleet-wide --------------------------------------------------------------------


class Events:
    """The alerts every scheduler of a test told its listeners."""

    def __init__(self, schedulers: list[Scheduler]) -> None:
        self.alerts: list[Alert] = []
        self._lock = threading.Lock()
        for scheduler in schedulers:
            scheduler.add_listener(self._add, events=("overdue", "failing", "recovered"))

    def _add(self, alert: Alert) -> None:
        with self._lock:
            self.alerts.append(alert)

    def of(self, event: str) -> list[Alert]:
        with self._lock:
            return [alert for alert in self.alerts if alert.event == event]


@pytest.fixture(params=["memory", "redis", "mongo"])
def shared(request: pytest.FixtureRequest) -> Iterator[tuple[LockStore, str | LockStore]]:
    """(the test's own view of the store, what each instance is built on): one in-process store for all, or a
    real Redis or MongoDB (this test's own prefix or database) that each instance connects to itself."""
    if request.param == "memory":
        store = MemoryLockStore()
        yield store, store
        return
    url = str(request.getfixturevalue(f"{request.param}_url"))
    store = store_from_url(url)
    try:
        yield store, url
    finally:
        store.close()


def fleet(store: str | LockStore, registry: Registry, started: list[Scheduler], count: int = 3) -> list[Scheduler]:
    made = [Scheduler(store, registry=registry, instance_id=f"i{n}", sync_interval=timedelta(milliseconds=100))
            for n in range(count)]
    started.extend(made)
    return made


def test_an_overdue_job_raises_one_alert_for_the_fleet_and_one_recovery(
    registry: Registry, schedulers: list[Scheduler], caplog: pytest.LogCaptureFixture,
    shared: tuple[LockStore, str | LockStore],
) -> None:
    store, each = shared
    runs: list[datetime] = []
    mutex_cron("* * * * * *", name="job", registry=registry, alert_after=timedelta(milliseconds=500))(
        lambda ctx: runs.append(ctx.fire_time))
    store.seed(["job"])
    ghost = store.acquire("job", owner="ghost", lease=timedelta(hours=1), fire_time=None)  # a stuck holder
    instances = fleet(each, registry, schedulers)
    events = Events(instances)
    with caplog.at_level(logging.ERROR, logger="mutexcron.alerts"):
        for scheduler in instances:
            scheduler.start()
        wait_until(lambda: events.of("overdue"), timeout=5, what="an overdue alert")
        held = store.now()
        wait_until(lambda: store.now() > held + timedelta(milliseconds=600), timeout=3, what="more checks")
        assert len(events.of("overdue")) == 1 and runs == []
        assert len([r for r in caplog.records if "is overdue" in r.getMessage()]) == 1
        store.force_unlock("job")
        wait_until(lambda: events.of("recovered"), timeout=5, what="a recovery")
    assert ghost.acquired and runs
    alert = events.of("overdue")[0]
    assert alert.job_name == "job" and alert.kind == "overdue" and alert.problem is not None
    assert len(events.of("recovered")) == 1
    assert events.of("recovered")[0].incident == alert.incident
    final = store.lock("job")
    assert final is not None and final.incident is None


def test_a_failing_job_raises_one_alert_and_recovers_when_a_run_succeeds(
    registry: Registry, schedulers: list[Scheduler], shared: tuple[LockStore, str | LockStore]
) -> None:
    store, each = shared
    broken = threading.Event()
    broken.set()

    def body() -> None:
        if broken.is_set():
            raise ValueError("the upstream is down")

    mutex_cron("* * * * * *", name="job", registry=registry)(body)
    instances = fleet(each, registry, schedulers)
    events = Events(instances)
    for scheduler in instances:
        scheduler.start()
    wait_until(lambda: events.of("failing"), timeout=5, what="a failing alert")
    failing = events.of("failing")[0]
    assert failing.problem is not None and "ValueError: the upstream is down" in failing.problem.detail
    broken.clear()
    wait_until(lambda: events.of("recovered"), timeout=5, what="a recovery")
    assert len(events.of("failing")) == 1 and len(events.of("recovered")) == 1
    lock = store.lock("job")
    assert lock is not None and lock.last_outcome == "succeeded" and lock.last_error is None


def test_no_alert_for_a_job_that_runs_every_tick(registry: Registry, schedulers: list[Scheduler],
                                                shared: tuple[LockStore, str | LockStore]) -> None:
    _, each = shared
    runs: list[datetime] = []
    mutex_cron("* * * * * *", name="job", registry=registry, alert_after=timedelta(milliseconds=800))(
        lambda ctx: runs.append(ctx.fire_time))
    instances = fleet(each, registry, schedulers)
    events = Events(instances)
    for scheduler in instances:
        scheduler.start()
    wait_until(lambda: len(runs) >= 3, timeout=6, what="three runs")
    assert events.alerts == []


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()])
def test_a_body_that_raises_a_base_exception_is_released_as_failed_and_the_exception_goes_on(
    registry: Registry, raised: BaseException
) -> None:
    """Not as a success: that would move last_success_at and close an incident for a run that never finished."""
    def body() -> None:
        raise raised

    mutex_cron("0 * * * *", name="job", registry=registry)(body)
    store = MemoryLockStore()
    scheduler = Scheduler(store, registry=registry)
    with pytest.raises(type(raised)):
        scheduler.run_now("job")
    lock = store.lock("job")
    assert lock is not None and not lock.locked
    assert lock.last_outcome == "failed" and lock.last_success_at is None
    assert lock.last_error is not None and type(raised).__name__ in lock.last_error
