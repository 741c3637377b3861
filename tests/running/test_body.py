"""The one body run (:func:`mutexcron.running.body.run_body`) that a scheduler and a ``run_on="tasks"`` worker both
use: what it reports, in which order, and what it counts. The scheduler's and the worker's own paths through it
are tested end to end in tests/scheduling/ and tests/tasks/test_run_on*.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import JobContext, Outcome, RunRecord
from mutexcron.listeners import Listeners
from mutexcron.registry import Job, Registry, mutex_cron
from mutexcron.running.body import BodyKit, Reports, run_body
from mutexcron.running.heartbeats import Beat, Heartbeats
from mutexcron.running.pings import Pings
from mutexcron.stores import MemoryLockStore
from mutexcron.telemetry import build_telemetry

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


class Side:
    """A side's settling, recording each call and the order of events; ``holds``: whether the run still held its
    lock (its answer)."""

    def __init__(self, holds: bool = True) -> None:
        self.holds = holds
        self.events: list[str] = []
        self.settled_with: list[tuple[Outcome, str | None]] = []

    def settle(self, outcome: Outcome, error: str | None, beat: Beat) -> bool:
        self.events.append("settle")
        self.settled_with.append((outcome, error))
        return self.holds

    def settled(self) -> None:
        self.events.append("settled")


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


@pytest.fixture
def kit(store: MemoryLockStore) -> Iterator[BodyKit]:
    heartbeats, pings = Heartbeats(store), Pings()
    yield BodyKit(store, heartbeats, pings, Reports(Listeners(), build_telemetry(metrics=False, tracing=False)))
    heartbeats.stop(timeout=5)


def declare(registry: Registry, body: object, **options: object) -> Job:
    mutex_cron("0 2 * * *", name="reports.nightly", registry=registry, **options)(body)  # type: ignore[arg-type]
    return registry.get("reports.nightly")


def holding(store: MemoryLockStore, job: Job, asked: float = 0.0) -> tuple[JobContext, RunRecord]:
    """The job's lock won for the tick, asked for at ``asked`` (time.monotonic(); 0.0: not known): the body's context
    and its record while it runs."""
    won = store.acquire(job.name, owner="web-1", lease=job.lease, fire_time=TICK)
    assert won.acquired and won.token is not None
    started = RunRecord(job.name, TICK, "web-1", None, datetime.now(UTC), None, token=won.token)
    return JobContext(job.name, TICK, "web-1", won.token, _asked=asked), started


def fail(ctx: JobContext) -> None:
    raise RuntimeError("the report server is down")


def test_a_body_that_returns_is_settled_succeeded_then_reported_with_its_record(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    job = declare(registry, lambda ctx: None)
    ctx, started = holding(store, job)
    side = Side()
    kit.reports.listeners.add(lambda record: side.events.append(f"finished {record.outcome}"), ("finished",))

    record = run_body(job, ctx, started, kit, side.settle, settled=side.settled)

    assert record is not None and record.outcome is Outcome.SUCCEEDED and record.finished_at is not None
    assert (record.token, record.instance_id) == (started.token, "web-1")
    assert side.events == ["settle", "settled", "finished succeeded"]


def test_a_failed_body_counts_towards_pause_on_failure_when_its_run_still_held_the_lock(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    job = declare(registry, fail, pause_on_failure=3)
    ctx, started = holding(store, job)

    record = run_body(job, ctx, started, kit, Side(holds=True).settle)

    assert record is not None and record.outcome is Outcome.FAILED and "report server is down" in (record.error or "")
    state = store.lock(job.name)
    assert state is not None and state.failures == 1


def test_a_failed_body_whose_run_was_lost_counts_nothing(kit: BodyKit, store: MemoryLockStore,
                                                         registry: Registry) -> None:
    """A holder that lost its lock (stalled past its lease, taken over) ran a body whose outcome is not the tick's."""
    job = declare(registry, fail, pause_on_failure=3)
    ctx, started = holding(store, job)

    run_body(job, ctx, started, kit, Side(holds=False).settle)

    state = store.lock(job.name)
    assert state is not None and state.failures == 0


def test_a_body_raising_keyboard_interrupt_is_settled_as_failed_then_raised(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    def interrupted(ctx: JobContext) -> None:
        raise KeyboardInterrupt

    job = declare(registry, interrupted)
    ctx, started = holding(store, job)
    side = Side()

    with pytest.raises(KeyboardInterrupt):
        run_body(job, ctx, started, kit, side.settle, settled=side.settled)

    assert [outcome for outcome, _ in side.settled_with] == [Outcome.FAILED]
    assert side.events == ["settle", "settled"]


def test_a_body_past_its_timeout_is_settled_timed_out(kit: BodyKit, store: MemoryLockStore,
                                                      registry: Registry) -> None:
    def slow(ctx: JobContext) -> None:
        assert ctx.cancelled.wait(10), "the heartbeat never told the body to stop"

    job = declare(registry, slow, timeout=timedelta(milliseconds=200))
    ctx, started = holding(store, job)
    side = Side()

    record = run_body(job, ctx, started, kit, side.settle)

    assert record is not None and record.outcome is Outcome.TIMED_OUT
    assert [outcome for outcome, _ in side.settled_with] == [Outcome.TIMED_OUT]


def test_once_the_heartbeats_are_stopped_nothing_runs_nor_settles_and_settled_is_still_called(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    ran: list[JobContext] = []
    job = declare(registry, ran.append)
    ctx, started = holding(store, job)
    kit.heartbeats.stop(timeout=5)
    side = Side()

    assert run_body(job, ctx, started, kit, side.settle, settled=side.settled) is None
    assert ran == [] and side.events == ["settled"]


def test_started_listeners_get_the_running_record_before_the_body_runs(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    seen: list[str] = []
    job = declare(registry, lambda ctx: seen.append("body"))
    ctx, started = holding(store, job)
    kit.reports.listeners.add(lambda record: seen.append(f"started {record.outcome}"), ("started",))

    run_body(job, ctx, started, kit, Side().settle)

    assert seen == ["started None", "body"]


def test_a_body_asked_for_over_a_third_of_its_lease_ago_whose_lock_another_run_took_is_not_run(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    """A process stopped between winning the lock and starting the body (SIGSTOP, a GC pause) resumes after its
    lease ran out and another run took the lock: it must not start a second body."""
    ran: list[JobContext] = []
    job = declare(registry, ran.append, lease=30)
    ctx, started = holding(store, job, asked=time.monotonic() - 20)  # 20 s of its 30 s lease went by
    assert store.force_unlock(job.name)
    assert store.acquire(job.name, owner="web-2", lease=job.lease, fire_time=None).acquired
    side = Side()

    record = run_body(job, ctx, started, kit, side.settle, settled=side.settled)

    assert ran == [] and side.events == ["settled"]  # nothing kept nor released: the lock is web-2's
    assert record is not None and record.outcome is Outcome.SKIPPED_BUSY and record.lock_lost
    state = store.lock(job.name)
    assert state is not None and state.locked_by == "web-2"


def test_a_body_asked_for_long_ago_whose_lock_is_still_its_own_renews_it_and_runs(
        kit: BodyKit, store: MemoryLockStore, registry: Registry) -> None:
    ran: list[JobContext] = []
    job = declare(registry, ran.append, lease=30)
    ctx, started = holding(store, job, asked=time.monotonic() - 20)
    before = store.lock(job.name)

    record = run_body(job, ctx, started, kit, Side().settle)

    assert len(ran) == 1 and record is not None and record.outcome is Outcome.SUCCEEDED
    after = store.lock(job.name)
    assert before is not None and after is not None and before.lock_until is not None
    assert after.lock_until is not None and after.lock_until > before.lock_until  # renewed before the body
