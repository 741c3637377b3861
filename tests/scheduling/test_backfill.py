"""Scheduler.backfill's refusals, its ledger's name, and what a backfilled run shares with every run (the started
listeners, a failure that does not stop the range, the release outcome alerts read), in one process on the memory
store; tests/backfill_contract.py holds what every store must do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import (
    JobContext,
    JobDefinitionError,
    Outcome,
    Registry,
    RunRecord,
    Scheduler,
    UnknownJobError,
    mutex_cron,
)
from mutexcron.registry import MAX_NAME_LENGTH, validate_job_name
from mutexcron.scheduling.backfill import ledger_name
from mutexcron.stores import MemoryLockStore

MIDNIGHT = datetime(2026, 1, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


def scheduler_of(store: MemoryLockStore, registry: Registry) -> Scheduler:
    return Scheduler(store, registry=registry, instance_id="operator")


@pytest.fixture
def hourly(store: MemoryLockStore, registry: Registry) -> tuple[Scheduler, list[JobContext]]:
    """A never-started scheduler of the job "hourly" ("0 * * * *"); the contexts its runs got."""
    contexts: list[JobContext] = []
    mutex_cron("0 * * * *", name="hourly", registry=registry)(contexts.append)
    return scheduler_of(store, registry), contexts


@pytest.mark.parametrize(("start", "end", "argument"), [
    (datetime(2026, 1, 5), MIDNIGHT + HOUR, "start"),
    (MIDNIGHT, datetime(2026, 1, 5, 1), "end"),
])
def test_a_naive_time_is_refused_naming_the_argument(hourly: tuple[Scheduler, list[JobContext]], start: datetime,
                                                     end: datetime, argument: str) -> None:
    scheduler, contexts = hourly
    with pytest.raises(JobDefinitionError, match=rf"job 'hourly': backfill {argument}=datetime.*must be an aware"):
        scheduler.backfill("hourly", start, end)
    assert contexts == []


@pytest.mark.parametrize("end", [MIDNIGHT, MIDNIGHT - HOUR], ids=["equal", "before"])
def test_an_end_not_after_the_start_is_refused(hourly: tuple[Scheduler, list[JobContext]], end: datetime) -> None:
    scheduler, _ = hourly
    with pytest.raises(JobDefinitionError, match="end must be after start"):
        scheduler.backfill("hourly", MIDNIGHT, end)


def test_the_end_is_judged_by_the_lock_stores_clock_not_this_machines(registry: Registry) -> None:
    store = MemoryLockStore(clock=lambda: MIDNIGHT + timedelta(minutes=30))  # this machine's clock is later
    contexts: list[JobContext] = []
    mutex_cron("0 * * * *", name="hourly", registry=registry)(contexts.append)
    with pytest.raises(JobDefinitionError, match=r"end 2026-01-05T01:00:00\+00:00 is after the lock store's now "
                                                 r"\(2026-01-05T00:30:00\+00:00\)"):
        scheduler_of(store, registry).backfill("hourly", MIDNIGHT, MIDNIGHT + HOUR)
    assert contexts == []


def test_an_unknown_job_is_refused(hourly: tuple[Scheduler, list[JobContext]]) -> None:
    scheduler, _ = hourly
    with pytest.raises(UnknownJobError, match="'nope'"):
        scheduler.backfill("nope", MIDNIGHT, MIDNIGHT + HOUR)


def test_a_range_without_a_tick_runs_nothing_and_leaves_no_ledger(hourly: tuple[Scheduler, list[JobContext]],
                                                                  store: MemoryLockStore) -> None:
    scheduler, contexts = hourly
    assert scheduler.backfill("hourly", MIDNIGHT + timedelta(minutes=1), MIDNIGHT + HOUR) == 0
    assert contexts == [] and store.locks() == []


def test_exactly_10000_ticks_are_allowed(store: MemoryLockStore, registry: Registry) -> None:
    ran: list[datetime] = []
    mutex_cron("* * * * * *", name="seconds", registry=registry)(lambda ctx: ran.append(ctx.fire_time))
    start = MIDNIGHT
    assert scheduler_of(store, registry).backfill("seconds", start, start + timedelta(seconds=10_000)) == 10_000
    assert len(set(ran)) == 10_000


def test_a_shut_down_scheduler_refuses_a_backfill(hourly: tuple[Scheduler, list[JobContext]]) -> None:
    scheduler, contexts = hourly
    scheduler.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        scheduler.backfill("hourly", MIDNIGHT, MIDNIGHT + HOUR)
    assert contexts == []


def test_a_failed_tick_counts_as_run_and_the_range_goes_on(store: MemoryLockStore, registry: Registry) -> None:
    @mutex_cron("0 * * * *", name="flaky", registry=registry)
    def flaky(ctx: JobContext) -> None:
        if ctx.fire_time == MIDNIGHT + HOUR:
            raise ValueError("the 01:00 tick fails")

    scheduler, records = scheduler_of(store, registry), list[RunRecord]()
    scheduler.add_listener(records.append)
    assert scheduler.backfill("flaky", MIDNIGHT, MIDNIGHT + 3 * HOUR) == 3
    assert [r.outcome for r in records] == [Outcome.SUCCEEDED, Outcome.FAILED, Outcome.SUCCEEDED]
    state = store.lock("flaky")
    assert state is not None and state.last_outcome == "succeeded"  # the alerts' release outcome


def test_started_listeners_see_a_backfilled_run_as_one(hourly: tuple[Scheduler, list[JobContext]]) -> None:
    scheduler, _ = hourly
    started: list[RunRecord] = []
    scheduler.add_listener(started.append, events=("started",))
    scheduler.backfill("hourly", MIDNIGHT, MIDNIGHT + 2 * HOUR)
    assert [(r.fire_time, r.outcome, r.backfill) for r in started] == [(MIDNIGHT, None, True),
                                                                       (MIDNIGHT + HOUR, None, True)]


def test_a_range_with_the_same_ticks_is_the_same_backfill(hourly: tuple[Scheduler, list[JobContext]]) -> None:
    scheduler, contexts = hourly
    assert scheduler.backfill("hourly", MIDNIGHT, MIDNIGHT + 2 * HOUR) == 2
    # Other bounds around the same two ticks: the same ledger, so nothing runs again.
    assert scheduler.backfill("hourly", MIDNIGHT - timedelta(minutes=59), MIDNIGHT + HOUR + timedelta(seconds=1)) == 0
    assert scheduler.backfill("hourly", MIDNIGHT, MIDNIGHT + 3 * HOUR) == 3  # another range: another backfill
    assert len(contexts) == 5


def test_the_ledger_name_is_a_valid_name_within_the_limit_even_for_the_longest_job_name() -> None:
    longest = "j" * MAX_NAME_LENGTH
    name = ledger_name(longest, MIDNIGHT, MIDNIGHT + HOUR)
    assert validate_job_name(name) == name and len(name) == MAX_NAME_LENGTH and "@backfill:" in name
    assert ledger_name(longest, MIDNIGHT, MIDNIGHT + 2 * HOUR) != name
    assert ledger_name("report", MIDNIGHT, MIDNIGHT + HOUR).startswith("report@backfill:")


def test_a_backfill_stopped_by_shutdown_counts_the_tick_it_ran_and_the_range_resumes_after_it(
        store: MemoryLockStore, registry: Registry) -> None:
    ran: list[datetime] = []
    first = scheduler_of(store, registry)

    @mutex_cron("0 * * * *", name="stopped", registry=registry)
    def stopped(ctx: JobContext) -> None:
        ran.append(ctx.fire_time)
        if ctx.fire_time == MIDNIGHT + HOUR:
            first.shutdown(wait=False)  # as a SIGTERM's handler would, while this tick's body runs

    assert first.backfill("stopped", MIDNIGHT, MIDNIGHT + 4 * HOUR) == 2
    assert scheduler_of(store, registry).backfill("stopped", MIDNIGHT, MIDNIGHT + 4 * HOUR) == 2
    assert ran == [MIDNIGHT + n * HOUR for n in range(4)]
