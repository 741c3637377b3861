"""One JobRun row per tick (issue 10): the fold in both orders, under concurrent writers (threads, each with
its own connection) on SQLite, PostgreSQL and MariaDB; rows of their own for the other skips and manual
runs; one PauseSpan per pause episode; pruning in batches."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from mutexcron import Outcome, RunRecord
from mutexcron_django import history, runtime
from mutexcron_django.models import JobRun, PauseSpan
from mutexcron_django.sql.databases import NowAndThen

JOB = "tests.history.tick"
FIRE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ALIASES = ("default", "postgres", "mariadb")


def on_each_database(transaction: bool = False) -> Any:
    """Parametrize a test over the three databases, each test with its own (the suite's test databases)."""
    return pytest.mark.parametrize("alias", [
        pytest.param(alias, marks=pytest.mark.django_db(transaction=transaction, databases=[alias]))
        for alias in ALIASES])


def fire(instance: str, outcome: Outcome, *, tick: datetime = FIRE, late: float = 0.01, took: float = 0.0,
         token: int | None = None, manual: bool = False, catch_up: bool = False, error: str | None = None,
         backfill: bool = False) -> RunRecord:
    started = tick + timedelta(seconds=late)
    return RunRecord(JOB, tick, instance, outcome, started, started + timedelta(seconds=took), error=error,
                     token=token, manual=manual, catch_up=catch_up, backfill=backfill)


def rows(alias: str) -> list[JobRun]:
    return list(JobRun.objects.using(alias).filter(job_name=JOB).order_by("fire_time", "pk"))


def assert_one_row_for_the_tick(alias: str, run: RunRecord, instances: list[str]) -> JobRun:
    """The tick has exactly one row: the run's, with every instance's fire folded into it."""
    (row,) = rows(alias)
    assert (row.outcome, row.instance_id, row.token, row.started_at, row.finished_at) == (
        str(run.outcome), run.instance_id, run.token, run.started_at, run.finished_at)
    assert row.tick_key == history.tick_key(JOB, FIRE) == f"{JOB}@2026-03-01T12:00:00+00:00"
    assert row.fired_count == len(instances)
    assert sorted(instance for instance, _ in row.fires) == sorted(instances)
    return row


@on_each_database()
def test_skips_first_then_the_run_upgrade_the_placeholder(alias: str) -> None:
    history.write(fire("web-2", Outcome.SKIPPED_ALREADY_RAN, late=0.012), using=alias)
    history.write(fire("web-3", Outcome.SKIPPED_ALREADY_RAN, late=2.301), using=alias)
    (placeholder,) = rows(alias)
    assert (placeholder.outcome, placeholder.fired_count) == ("skipped_already_ran", 2)

    run = fire("web-1", Outcome.SUCCEEDED, late=0.004, took=1.5, token=7)
    history.write(run, using=alias)

    row = assert_one_row_for_the_tick(alias, run, ["web-1", "web-2", "web-3"])
    assert row.fires == [("web-2", "+0.012s"), ("web-3", "+2.301s"), ("web-1", "+0.004s")]
    assert row.error == "" and row.duration == timedelta(seconds=1.5)


@on_each_database()
def test_the_run_first_then_the_skips_fold_into_it(alias: str) -> None:
    run = fire("web-1", Outcome.FAILED, took=0.25, token=3, error="Traceback ...\nValueError: boom")
    history.write(run, using=alias)
    history.write(fire("web-2", Outcome.SKIPPED_ALREADY_RAN, late=0.5), using=alias)
    history.write(fire("web-3", Outcome.SKIPPED_ALREADY_RAN, late=-0.002), using=alias)

    row = assert_one_row_for_the_tick(alias, run, ["web-1", "web-2", "web-3"])
    assert row.fires == [("web-1", "+0.010s"), ("web-2", "+0.500s"), ("web-3", "-0.002s")]
    assert row.error.endswith("ValueError: boom")


@on_each_database()
def test_other_skips_and_manual_runs_keep_rows_of_their_own(alias: str) -> None:
    run = fire("web-1", Outcome.SUCCEEDED, token=1)
    for record in (fire("web-2", Outcome.SKIPPED_BUSY, error="lock held by web-9"),
                   fire("web-3", Outcome.SKIPPED_STORE_ERROR, error="store down"),
                   fire("web-4", Outcome.SKIPPED_STALE_SCHEDULE), run,
                   fire("web-5", Outcome.SKIPPED_ALREADY_RAN),
                   fire("web-1", Outcome.SUCCEEDED, manual=True, token=2)):
        history.write(record, using=alias)

    found = rows(alias)
    assert sorted((row.outcome, row.instance_id, row.fired_count, row.tick_key is None) for row in found) == [
        ("skipped_busy", "web-2", 1, True), ("skipped_stale_schedule", "web-4", 1, True),
        ("skipped_store_error", "web-3", 1, True), ("succeeded", "web-1", 1, True), ("succeeded", "web-1", 2, False)]
    tick_row = next(row for row in found if row.tick_key is not None)
    assert tick_row.token == 1 and [instance for instance, _ in tick_row.fires] == ["web-1", "web-5"]


@on_each_database()
def test_a_second_run_of_the_same_tick_is_kept_apart(alias: str) -> None:
    history.write(fire("web-1", Outcome.SUCCEEDED, token=1), using=alias)
    history.write(fire("web-2", Outcome.FAILED, token=2), using=alias)

    first, second = rows(alias)
    assert (first.token, first.tick_key is not None, second.token, second.tick_key) == (1, True, 2, None)


@on_each_database()
def test_a_catch_up_run_is_the_row_of_its_tick(alias: str) -> None:
    history.write(fire("web-2", Outcome.SKIPPED_ALREADY_RAN, catch_up=True, late=300), using=alias)
    run = fire("web-1", Outcome.SUCCEEDED, catch_up=True, late=299, token=4)
    history.write(run, using=alias)

    assert assert_one_row_for_the_tick(alias, run, ["web-1", "web-2"]).catch_up


@on_each_database()
def test_a_backfilled_run_keeps_a_row_of_its_own_beside_the_ticks_row(alias: str) -> None:
    scheduled = fire("web-1", Outcome.SUCCEEDED, token=1)
    history.write(scheduled, using=alias)
    history.write(fire("ops", Outcome.FAILED, backfill=True, late=86400, token=2), using=alias)

    tick_row, backfilled = rows(alias)
    assert (tick_row.token, tick_row.backfill, tick_row.tick_key is not None) == (1, False, True)
    assert (backfilled.token, backfilled.backfill, backfilled.tick_key, backfilled.outcome) == (2, True, None, "failed")


@on_each_database()
def test_a_backfills_ticks_taken_by_another_backfill_or_refused_by_a_pause_are_no_rows(alias: str) -> None:
    history.write(fire("ops", Outcome.SKIPPED_ALREADY_RAN, backfill=True), using=alias)
    history.write(fire("ops", Outcome.SKIPPED_PAUSED, backfill=True), using=alias)

    assert rows(alias) == [] and not PauseSpan.objects.using(alias).exists()


WRITERS = 6
TICKS = 4


@on_each_database(transaction=True)
def test_concurrent_writers_leave_one_row_per_tick_with_every_fire(alias: str) -> None:
    """WRITERS threads (own connections) fire TICKS ticks at once; each tick's run is written by a different
    writer, in the middle of the skips."""
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            for tick_number in range(TICKS):
                tick = FIRE + timedelta(minutes=tick_number)
                ran = tick_number % WRITERS == number
                outcome = Outcome.SUCCEEDED if ran else Outcome.SKIPPED_ALREADY_RAN
                barrier.wait(timeout=30)
                history.write(fire(f"web-{number}", outcome, tick=tick, late=number / 100, token=tick_number + 1),
                              using=alias)
        except BaseException as error:  # reported by the test's thread
            errors.append(error)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    found = rows(alias)
    assert len(found) == TICKS, [(row.fire_time, row.instance_id, row.outcome) for row in found]
    for tick_number, row in enumerate(found):
        assert row.fire_time == FIRE + timedelta(minutes=tick_number)
        assert (row.outcome, row.instance_id, row.token) == ("succeeded", f"web-{tick_number % WRITERS}",
                                                             tick_number + 1)
        assert row.fired_count == WRITERS
        assert sorted(instance for instance, _ in row.fires) == [f"web-{n}" for n in range(WRITERS)]


# -- pauses ----------------------------------------------------------------------------------------------


def spans(alias: str) -> list[tuple[datetime, datetime]]:
    return list(PauseSpan.objects.using(alias).filter(job_name=JOB).order_by("started_at")
                .values_list("started_at", "ended_at"))


@on_each_database()
def test_paused_fires_make_one_span_per_episode_and_no_job_run(alias: str) -> None:
    ticks = [FIRE + timedelta(minutes=n) for n in range(6)]
    for tick in ticks[:3]:  # paused: three instances each
        for instance in ("web-1", "web-2", "web-3"):
            history.write(fire(instance, Outcome.SKIPPED_PAUSED, tick=tick), using=alias)
    assert spans(alias) == [(ticks[0], ticks[2])]
    assert rows(alias) == []

    history.write(fire("web-1", Outcome.SUCCEEDED, tick=ticks[3]), using=alias)  # resumed: a run
    for tick in ticks[4:]:  # paused again: a new episode
        history.write(fire("web-2", Outcome.SKIPPED_PAUSED, tick=tick), using=alias)
    history.write(fire("web-3", Outcome.SKIPPED_PAUSED, tick=ticks[4]), using=alias)  # a late instance
    history.write(fire("web-1", Outcome.SKIPPED_PAUSED, manual=True, tick=ticks[5] + timedelta(hours=1)),
                  using=alias)  # a manual run refused by the pause is no tick

    assert spans(alias) == [(ticks[0], ticks[2]), (ticks[4], ticks[5])]
    assert len(rows(alias)) == 1


# -- pruning ---------------------------------------------------------------------------------------------


def old_rows(alias: str, count: int, started: datetime) -> None:
    JobRun.objects.using(alias).bulk_create(
        JobRun(job_name=JOB, fire_time=started, instance_id="i", outcome="succeeded", started_at=started,
               tick_key=f"{JOB}@{n}") for n in range(count))


@on_each_database()
def test_prune_deletes_in_batches_of_ids_and_keeps_the_newer(alias: str) -> None:
    now = datetime.now(UTC)
    old_rows(alias, 2500, now - timedelta(days=40))
    history.write(fire("web-1", Outcome.SUCCEEDED, tick=now), using=alias)
    PauseSpan.objects.using(alias).create(job_name=JOB, started_at=now - timedelta(days=41),
                                          ended_at=now - timedelta(days=40))

    with CaptureQueriesContext(connections[alias]) as queries:
        pruned = history.prune(now - timedelta(days=30), using=alias, batch=1000)

    assert pruned == history.Pruned(2500, complete=True)
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith("DELETE")
               and "jobrun" in q["sql"].lower()]
    assert len(deletes) == 3
    assert [row.started_at >= now - timedelta(seconds=1) for row in rows(alias)] == [True]
    assert spans(alias) == []


@pytest.mark.django_db
def test_a_prune_with_a_budget_stops_after_a_batch_and_the_next_goes_on() -> None:
    now = datetime.now(UTC)
    old_rows("default", 30, now - timedelta(days=40))

    first = history.prune(now - timedelta(days=30), batch=10, budget=0)

    assert first == history.Pruned(10, complete=False)
    assert history.prune(now - timedelta(days=30), batch=10) == history.Pruned(20, complete=True)


@pytest.mark.django_db
def test_an_automatic_prune_left_unfinished_goes_on_at_the_next_record(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(UTC)
    old_rows("default", 30, now - timedelta(days=40))
    monkeypatch.setattr(runtime, "_prunes", NowAndThen(runtime.PRUNE_EVERY))  # due at the first record
    monkeypatch.setattr(runtime, "PRUNE_BUDGET", 0)
    monkeypatch.setattr(history, "PRUNE_BATCH", 10)
    real_prune: Callable[..., history.Pruned] = history.prune
    monkeypatch.setattr(history, "prune", lambda cutoff, **kw: real_prune(cutoff, batch=10, **kw))

    runtime.record_history(fire("web-1", Outcome.SUCCEEDED, tick=now))
    assert JobRun.objects.count() == 21  # one batch, then the budget ran out: the next record goes on
    for second in range(1, 4):  # two more full batches, then one that finds the end
        runtime.record_history(fire("web-1", Outcome.SUCCEEDED, tick=now + timedelta(seconds=second)))

    assert JobRun.objects.count() == 4 and not runtime._prunes.due()  # done: the next prune in an hour


@pytest.fixture(autouse=True)
def _fresh_prune_clock() -> Iterator[None]:
    """No automatic prune of another test's making runs in the middle of these."""
    saved = runtime._prunes
    yield
    runtime._prunes = saved


@pytest.mark.django_db
def test_the_runtime_listener_writes_a_pause_span_for_paused_fires(declare: Any) -> None:
    from mutexcron_django import testing
    from mutexcron_django.sql.store import DjangoLockStore

    declare("@hourly", name=JOB)
    store = DjangoLockStore()
    store.seed([JOB])
    store.pause(JOB, by="ops")

    first = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)  # recent: not pruned by the retention
    for hour in range(3):
        assert testing.run_tick(JOB, fire_time=first + timedelta(hours=hour)).outcome is Outcome.SKIPPED_PAUSED

    assert spans("default") == [(first, first + timedelta(hours=2))]
    assert not JobRun.objects.exists()
