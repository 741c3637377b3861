"""The process's scheduler in Django: run history, pruning, signals, fresh DB connections, seeding, run_tick."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings
from django.utils import timezone

from mutexcron import JobContext, Outcome, RunRecord, Scheduler
from mutexcron_django import runtime, signals, testing
from mutexcron_django.models import JobRun, Lock
from mutexcron_django.sql.databases import NowAndThen
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations, wait_for

UNREACHABLE = "redis://:s3cret-pw@127.0.0.1:1/0"
FIRE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def history_writes_ok() -> Iterator[None]:
    """Each test starts with history writing healthy (an outage is remembered to log it only once)."""
    runtime._history_failing = False
    yield
    runtime._history_failing = False


@pytest.fixture
def received() -> Iterator[list[tuple[str, Any, RunRecord]]]:
    """(signal name, sender, record) of every job_started / job_finished / job_skipped sent."""
    seen: list[tuple[str, Any, RunRecord]] = []
    receivers = {}
    for name in ("job_started", "job_finished", "job_skipped"):
        def receiver(sender: Any, record: RunRecord, _name: str = name, **_: Any) -> None:
            seen.append((_name, sender, record))

        receivers[name] = receiver
        getattr(signals, name).connect(receiver)
    yield seen
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver)


def fail() -> None:
    raise ValueError("no good")


def assert_recorded(record: RunRecord) -> JobRun:
    """The JobRun row of ``record``, every field as in the record."""
    row = JobRun.objects.get(job_name=record.job_name, fire_time=record.fire_time, outcome=str(record.outcome))
    assert (row.instance_id, row.started_at, row.finished_at) == (
        record.instance_id, record.started_at, record.finished_at)
    assert (row.error, row.token, row.lock_lost, row.manual, row.catch_up) == (
        record.error or "", record.token, record.lock_lost, record.manual, record.catch_up)
    return row


# -- history ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_successful_run_is_recorded_once(declare: Declarations) -> None:
    declare("@hourly", name="tests.rt.ok")

    record = testing.run_tick("tests.rt.ok", fire_time=FIRE)

    assert record.outcome is Outcome.SUCCEEDED
    assert assert_recorded(record).token == 1
    assert JobRun.objects.count() == 1  # the "started" event leaves no row of its own


@pytest.mark.django_db
def test_a_failed_run_is_recorded_with_its_traceback(declare: Declarations) -> None:
    declare("@hourly", fail, name="tests.rt.fail")

    record = testing.run_tick("tests.rt.fail", fire_time=FIRE)

    row = assert_recorded(record)
    assert row.outcome == "failed" and "ValueError: no good" in row.error


@pytest.mark.django_db
def test_a_skipped_already_ran_fire_is_folded_into_the_row_of_its_tick(declare: Declarations) -> None:
    # One row per tick (issue 10): the second fire of the tick is counted in the run's row, not a row of its own.
    declare("@hourly", name="tests.rt.twice")
    ran = testing.run_tick("tests.rt.twice", fire_time=FIRE)

    record = testing.run_tick("tests.rt.twice", fire_time=FIRE)

    assert record.outcome is Outcome.SKIPPED_ALREADY_RAN
    row = assert_recorded(ran)
    assert JobRun.objects.count() == 1
    assert row.fired_count == 2 and [instance for instance, _ in row.fires] == [ran.instance_id] * 2


@pytest.mark.django_db
def test_a_skipped_busy_fire_is_recorded_with_the_holder(declare: Declarations) -> None:
    declare("@hourly", name="tests.rt.busy")
    DjangoLockStore().acquire("tests.rt.busy", owner="web-5:9", lease=timedelta(hours=1), fire_time=None)

    record = testing.run_tick("tests.rt.busy", fire_time=FIRE)

    row = assert_recorded(record)
    assert row.outcome == "skipped_busy" and row.error == "lock held by web-5:9"


@pytest.mark.django_db
def test_a_skipped_store_error_fire_is_recorded_in_the_database(declare: Declarations) -> None:
    declare("@hourly", name="tests.rt.nostore")

    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE}):
        record = testing.run_tick("tests.rt.nostore", fire_time=FIRE)

    row = assert_recorded(record)
    assert row.outcome == "skipped_store_error" and "s3cret-pw" not in row.error


@pytest.mark.django_db
def test_a_manual_run_is_recorded_as_manual(declare: Declarations) -> None:
    declare("@hourly", name="tests.rt.manual")

    record = runtime.build_scheduler().run_now("tests.rt.manual")

    assert assert_recorded(record).manual is True


def _record(outcome: Outcome, **fields: Any) -> RunRecord:
    return RunRecord(job_name="tests.rt.control", fire_time=FIRE, instance_id="web-1:7", outcome=outcome,
                     started_at=FIRE, finished_at=FIRE, **fields)


@pytest.mark.django_db
def test_a_fire_skipped_by_a_pause_is_not_recorded() -> None:
    # An operator's pause is shown once (on the lock), not as one skip per instance per tick.
    runtime.record_history(_record(Outcome.SKIPPED_PAUSED, error="paused by ops"))

    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_a_fire_skipped_for_a_stale_schedule_is_recorded() -> None:
    record = _record(Outcome.SKIPPED_STALE_SCHEDULE, error="schedule version 2 replaced it")

    runtime.record_history(record)

    assert assert_recorded(record).outcome == "skipped_stale_schedule"


@pytest.mark.django_db
def test_a_caught_up_run_is_recorded_as_catch_up() -> None:
    late, on_time = _record(Outcome.SUCCEEDED, token=3, catch_up=True), _record(Outcome.FAILED, token=4)

    runtime.record_history(late)
    runtime.record_history(on_time)

    assert assert_recorded(late).catch_up is True
    assert assert_recorded(on_time).catch_up is False


class MutexcronOnPostgres:
    """Routes the mutexcron app's tables (locks and history) to the "postgres" database."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "postgres" if model._meta.app_label == "mutexcron" else None

    db_for_write = db_for_read


@pytest.mark.django_db(databases=["default", "postgres"])
@pytest.mark.parametrize("alias", ["default", "postgres"])
def test_a_failed_history_write_inside_a_transaction_does_not_break_the_next_fires(
    declare: Declarations, alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The test runs inside a transaction, so the DROP is rolled back afterwards. On PostgreSQL an error
    # aborts the whole transaction unless it happened inside a savepoint: then every later query failed.
    declare("@hourly", name="tests.rt.nohistory")
    routers = [MutexcronOnPostgres()] if alias == "postgres" else []
    with override_settings(DATABASE_ROUTERS=routers):
        with connections[alias].cursor() as cursor:
            cursor.execute("DROP TABLE mutexcron_jobrun")

        first = testing.run_tick("tests.rt.nohistory", fire_time=FIRE)
        second = testing.run_tick("tests.rt.nohistory", fire_time=FIRE + timedelta(hours=1))

        assert (first.outcome, second.outcome) == (Outcome.SUCCEEDED, Outcome.SUCCEEDED)
        assert Lock.objects.get(name="tests.rt.nohistory").token == 2
    # One warning per outage, not one per fire.
    assert caplog.text.count("could not record the succeeded run of job 'tests.rt.nohistory'") == 1


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_keeps_firing_when_history_cannot_be_written(
    declare: Declarations, caplog: pytest.LogCaptureFixture
) -> None:
    declare("* * * * * *", name="tests.rt.every_second")
    with connection.schema_editor() as editor:
        editor.delete_model(JobRun)
    try:
        scheduler = runtime.build_scheduler()
        records: list[RunRecord] = []
        scheduler.add_listener(records.append)
        scheduler.start()
        try:
            wait_for(lambda: sum(r.outcome is Outcome.SUCCEEDED for r in records) >= 2, what="two runs")
        finally:
            scheduler.shutdown()
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(JobRun)
    assert "could not record the succeeded run of job 'tests.rt.every_second'" in caplog.text


# -- pruning ---------------------------------------------------------------------------------------------


def _run_started(ago: timedelta, now: datetime | None = None) -> JobRun:
    started = (now or timezone.now()) - ago
    return JobRun.objects.create(job_name="tests.rt.history", fire_time=started, instance_id="i",
                                 outcome="succeeded", started_at=started, finished_at=started)


@pytest.mark.django_db
def test_prune_removes_rows_older_than_the_retention_and_keeps_newer() -> None:
    now = timezone.now()
    _run_started(timedelta(days=30, seconds=1), now)
    kept = [_run_started(timedelta(days=29, hours=23), now), _run_started(timedelta(0), now)]

    assert runtime.prune_history(now) == 1
    assert set(JobRun.objects.all()) == set(kept)


@pytest.mark.django_db
@override_settings(MUTEXCRON={"AUTOSTART": False, "HISTORY_RETENTION": timedelta(hours=1)})
def test_prune_follows_the_history_retention_setting() -> None:
    _run_started(timedelta(hours=2))
    kept = _run_started(timedelta(minutes=30))

    assert runtime.prune_history() == 1
    assert list(JobRun.objects.all()) == [kept]


@pytest.mark.django_db
@override_settings(MUTEXCRON={"AUTOSTART": False, "HISTORY_RETENTION": None})
def test_prune_keeps_everything_without_a_retention() -> None:
    _run_started(timedelta(days=10_000))

    assert runtime.prune_history() == 0
    assert JobRun.objects.count() == 1


@pytest.mark.django_db
def test_recording_runs_prunes_at_most_once_per_prune_interval(
    declare: Declarations, monkeypatch: pytest.MonkeyPatch
) -> None:
    declare("@hourly", name="tests.rt.autoprune")
    monkeypatch.setattr(runtime, "_prunes", NowAndThen(runtime.PRUNE_EVERY))  # due at the first record
    first_old = _run_started(timedelta(days=40))

    testing.run_tick("tests.rt.autoprune", fire_time=FIRE)
    second_old = _run_started(timedelta(days=40))
    testing.run_tick("tests.rt.autoprune", fire_time=FIRE + timedelta(hours=1))

    assert not JobRun.objects.filter(pk=first_old.pk).exists()
    assert JobRun.objects.filter(pk=second_old.pk).exists()  # the next prune is due in an hour


# -- signals ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_job_started_and_job_finished_carry_the_records_of_a_run(
    declare: Declarations, received: list[tuple[str, Any, RunRecord]]
) -> None:
    declare("@hourly", name="tests.rt.signals")

    record = testing.run_tick("tests.rt.signals", fire_time=FIRE)

    (started, started_sender, start_record), (finished, finished_sender, finish_record) = received
    assert (started, finished) == ("job_started", "job_finished")
    assert started_sender is Scheduler and finished_sender is Scheduler
    assert start_record.outcome is None and start_record.finished_at is None
    assert (start_record.job_name, start_record.fire_time, start_record.token) == ("tests.rt.signals", FIRE, 1)
    assert finish_record is record and record.outcome is Outcome.SUCCEEDED


@pytest.mark.django_db
def test_job_finished_carries_a_failed_run(
    declare: Declarations, received: list[tuple[str, Any, RunRecord]]
) -> None:
    declare("@hourly", fail, name="tests.rt.signals_fail")

    record = testing.run_tick("tests.rt.signals_fail", fire_time=FIRE)

    assert [(name, r.outcome) for name, _, r in received] == [("job_started", None), ("job_finished", "failed")]
    assert received[-1][2] is record


@pytest.mark.django_db
def test_job_skipped_carries_the_record_of_a_skip(
    declare: Declarations, received: list[tuple[str, Any, RunRecord]]
) -> None:
    declare("@hourly", name="tests.rt.signals_skip")
    testing.run_tick("tests.rt.signals_skip", fire_time=FIRE)
    received.clear()

    record = testing.run_tick("tests.rt.signals_skip", fire_time=FIRE)

    assert received == [("job_skipped", Scheduler, record)]
    assert record.outcome is Outcome.SKIPPED_ALREADY_RAN


@pytest.mark.django_db
def test_a_failing_signal_receiver_breaks_neither_the_run_nor_the_history(declare: Declarations) -> None:
    def broken_receiver(**_: Any) -> None:
        raise RuntimeError("receiver bug")

    declare("@hourly", name="tests.rt.bad_receiver")
    signals.job_finished.connect(broken_receiver)
    try:
        record = testing.run_tick("tests.rt.bad_receiver", fire_time=FIRE)
    finally:
        signals.job_finished.disconnect(broken_receiver)

    assert record.outcome is Outcome.SUCCEEDED
    assert_recorded(record)


# -- fresh database connections around each scheduled fire ---------------------------------------------


def _start_one_worker_scheduler(declare: Declarations, seen: list[tuple[BaseDatabaseWrapper, Any]]) -> Scheduler:
    """A scheduler from settings with one worker thread, firing a job that notes the DB connection it used."""

    def note_connection() -> None:
        wrapper = connections["default"]
        wrapper.ensure_connection()
        seen.append((wrapper, wrapper.connection))

    declare("* * * * * *", note_connection, name="tests.rt.connections")
    scheduler = runtime.build_scheduler()
    scheduler.max_workers = 1  # every fire in the same thread, so on the same Django connection object
    scheduler.start()
    return scheduler


def _closed(raw: sqlite3.Connection) -> bool:
    try:
        raw.execute("SELECT 1")
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
        return True
    return False


@pytest.mark.django_db(transaction=True)
def test_a_connection_older_than_conn_max_age_is_replaced_before_the_next_fire(
    declare: Declarations, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fires are 1 s apart: a connection opened in one fire is still young after it, and too old at the
    # next. Django checks CONN_MAX_AGE only in close_old_connections(), so without the call before the
    # fire the second fire would reuse the first one's connection.
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0.5)
    seen: list[tuple[BaseDatabaseWrapper, Any]] = []
    scheduler = _start_one_worker_scheduler(declare, seen)
    try:
        wait_for(lambda: len(seen) >= 2, what="two fires")
    finally:
        scheduler.shutdown()

    (first_wrapper, first_raw), (second_wrapper, second_raw) = seen[:2]
    assert first_wrapper is second_wrapper
    assert second_raw is not first_raw
    assert _closed(first_raw)


@pytest.mark.django_db(transaction=True)
def test_the_connection_is_closed_after_each_fire_without_conn_max_age(
    declare: Declarations, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With CONN_MAX_AGE=0 Django closes a connection at the end of each request; a fire is a request.
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    seen: list[tuple[BaseDatabaseWrapper, Any]] = []
    scheduler = _start_one_worker_scheduler(declare, seen)
    try:
        wait_for(lambda: seen, what="a fire")
    finally:
        scheduler.shutdown()  # no fire after this one: only the call after the fire can close it

    wait_for(lambda: all(wrapper.connection is None for wrapper, _ in seen), timeout=5, what="the close")
    assert all(_closed(raw) for _, raw in seen)


# -- post_migrate seeding --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_migrate_seeds_lock_rows_for_the_declared_jobs(declare: Declarations) -> None:
    declare("@daily", name="tests.rt.seeded_a")
    declare("@daily", name="tests.rt.seeded_b")

    call_command("migrate", verbosity=0, interactive=False)

    assert set(Lock.objects.filter(name__startswith="tests.rt.seeded").values_list("name", flat=True)) == {
        "tests.rt.seeded_a", "tests.rt.seeded_b"}


@pytest.mark.django_db(transaction=True)
def test_migrate_never_resets_an_existing_lock_row(declare: Declarations) -> None:
    declare("@daily", name="tests.rt.kept")
    testing.run_tick("tests.rt.kept", fire_time=FIRE)

    call_command("migrate", verbosity=0, interactive=False)

    lock = Lock.objects.get(name="tests.rt.kept")
    assert (lock.last_fire_time, lock.token) == (FIRE, 1)


@pytest.mark.django_db(transaction=True, databases=["default", "postgres"])
def test_migrating_another_database_seeds_nothing(declare: Declarations) -> None:
    declare("@daily", name="tests.rt.elsewhere")

    call_command("migrate", database="postgres", verbosity=0, interactive=False)

    assert not Lock.objects.using("default").filter(name="tests.rt.elsewhere").exists()
    assert not Lock.objects.using("postgres").filter(name="tests.rt.elsewhere").exists()


@pytest.mark.django_db
def test_post_migrate_with_a_redis_store_leaves_redis_alone(declare: Declarations, redis_url: str) -> None:
    from django.apps import apps
    from django.db.models.signals import post_migrate

    from mutexcron.stores import store_from_url

    declare("@daily", name="tests.rt.redis")
    app_config = apps.get_app_config("mutexcron")
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": redis_url}):
        post_migrate.send(sender=app_config, app_config=app_config, verbosity=0, interactive=False,
                          using="default", apps=apps, plan=[])

    with store_from_url(redis_url) as store:
        assert store.lock("tests.rt.redis") is None


# -- mutexcron_django.testing.run_tick -------------------------------------------------------------------


@pytest.mark.django_db
def test_run_tick_runs_the_next_tick_by_default(declare: Declarations) -> None:
    seen: list[JobContext] = []
    declare("0 0 * * * *", seen.append, name="tests.rt.helper")

    before = timezone.now()
    record = testing.run_tick("tests.rt.helper")

    (ctx,) = seen
    assert record.outcome is Outcome.SUCCEEDED and not record.manual
    assert ctx.fire_time == record.fire_time
    assert before < record.fire_time <= before + timedelta(hours=1) and record.fire_time.minute == 0


@pytest.mark.django_db
@override_settings(MUTEXCRON={"AUTOSTART": False, "TIMEZONE": "Asia/Tokyo"})
def test_run_tick_picks_the_next_tick_in_the_schedulers_time_zone(declare: Declarations) -> None:
    from zoneinfo import ZoneInfo

    declare("0 0 6 * * *", name="tests.rt.helper_zone")  # 06:00 in the scheduler's zone: Tokyo here

    record = testing.run_tick("tests.rt.helper_zone")

    assert record.fire_time.astimezone(ZoneInfo("Asia/Tokyo")).hour == 6


@pytest.mark.django_db
def test_run_tick_twice_with_the_same_fire_time_skips_the_second(declare: Declarations) -> None:
    ran: list[JobContext] = []
    declare("@hourly", ran.append, name="tests.rt.helper_twice")

    first = testing.run_tick("tests.rt.helper_twice", fire_time=FIRE)
    second = testing.run_tick("tests.rt.helper_twice", fire_time=FIRE)

    assert (first.outcome, second.outcome) == (Outcome.SUCCEEDED, Outcome.SKIPPED_ALREADY_RAN)
    assert len(ran) == 1


@pytest.mark.django_db
def test_run_tick_leaves_no_thread_behind(declare: Declarations, redis_url: str) -> None:
    declare("@hourly", name="tests.rt.threads")
    before = set(threading.enumerate())

    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": redis_url}):
        testing.run_tick("tests.rt.threads", fire_time=FIRE)

    wait_for(lambda: not set(threading.enumerate()) - before, timeout=5, what="no thread left behind")



@pytest.mark.django_db(transaction=True)
def test_history_logs_when_it_is_recorded_again_after_an_outage(
    declare: Declarations, caplog: pytest.LogCaptureFixture
) -> None:
    declare("@hourly", name="tests.rt.recovers")
    with connections["default"].cursor() as cursor:
        cursor.execute("ALTER TABLE mutexcron_jobrun RENAME TO mutexcron_jobrun_away")
    try:
        testing.run_tick("tests.rt.recovers", fire_time=FIRE)
        testing.run_tick("tests.rt.recovers", fire_time=FIRE + timedelta(hours=1))
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE mutexcron_jobrun_away RENAME TO mutexcron_jobrun")
    caplog.set_level(logging.INFO, logger="mutexcron.django")
    testing.run_tick("tests.rt.recovers", fire_time=FIRE + timedelta(hours=2))
    assert caplog.text.count("could not record") == 1
    assert "run history is being recorded again" in caplog.text
    assert JobRun.objects.filter(job_name="tests.rt.recovers").count() == 1


@pytest.mark.django_db(transaction=True)
@override_settings(MUTEXCRON={"AUTOSTART": False, "SYNC_INTERVAL": 0.2})
def test_job_failing_and_job_recovered_carry_the_alert_once_each(declare: Declarations) -> None:
    broken = threading.Event()
    broken.set()

    def body() -> None:
        if broken.is_set():
            raise ValueError("no upstream")

    declare("* * * * * *", body, name="tests.rt.alerting")
    alerts: list[tuple[str, Any]] = []

    def receiver(sender: Any, alert: Any, signal: Any, **_: Any) -> None:
        alerts.append((signal, alert))

    for signal in (signals.job_overdue, signals.job_failing, signals.job_recovered):
        signal.connect(receiver)
    scheduler = runtime.build_scheduler()
    try:
        scheduler.start()
        wait_for(lambda: alerts, timeout=10, what="job_failing")
        broken.clear()
        wait_for(lambda: len(alerts) == 2, timeout=10, what="job_recovered")
    finally:
        scheduler.shutdown(timeout=timedelta(seconds=2))
        for signal in (signals.job_overdue, signals.job_failing, signals.job_recovered):
            signal.disconnect(receiver)
    (failing_signal, failing), (recovered_signal, recovered) = alerts
    assert failing_signal is signals.job_failing and failing.job_name == "tests.rt.alerting"
    assert failing.problem is not None and "ValueError: no upstream" in failing.problem.detail
    assert recovered_signal is signals.job_recovered and recovered.incident == failing.incident


@pytest.mark.django_db(transaction=True)
@override_settings(MUTEXCRON={"AUTOSTART": False, "SYNC_INTERVAL": 0.2})
def test_job_paused_carries_the_alert_of_a_job_that_paused_itself(declare: Declarations) -> None:
    def body() -> None:
        raise ValueError("no upstream")

    declare("* * * * * *", body, name="tests.rt.pausing", pause_on_failure=2)
    alerts: list[tuple[Any, Any]] = []

    def receiver(sender: Any, alert: Any, signal: Any, **_: Any) -> None:
        alerts.append((signal, alert))

    signals.job_paused.connect(receiver)
    scheduler = runtime.build_scheduler()
    try:
        scheduler.start()
        wait_for(lambda: alerts, timeout=10, what="job_paused")
    finally:
        scheduler.shutdown(timeout=timedelta(seconds=2))
        signals.job_paused.disconnect(receiver)
    [(signal, alert)] = alerts
    assert signal is signals.job_paused and alert.job_name == "tests.rt.pausing" and alert.event == "paused"
    assert "2 failed runs in a row" in alert.incident and "ValueError: no upstream" in alert.incident
    state = scheduler.store.lock("tests.rt.pausing")  # type: ignore[attr-defined]
    assert state.paused_by == "mutexcron:pause_on_failure" and state.pause_note == alert.incident


@pytest.mark.django_db(transaction=True)
@override_settings(MUTEXCRON={"AUTOSTART": False, "SYNC_INTERVAL": 0.2})
def test_job_overdue_and_job_recovered_carry_a_missed_tick_once_each(declare: Declarations) -> None:
    name = declare("* * * * * *", name="tests.rt.overdue", alert_after=timedelta(seconds=1), lease=5)
    alerts: list[tuple[Any, Any]] = []

    def receiver(sender: Any, alert: Any, signal: Any, **_: Any) -> None:
        alerts.append((signal, alert))

    scheduler = runtime.build_scheduler()
    scheduler.store.seed([name])
    # A hung holder: every tick is refused as busy until the lock is forced open.
    assert scheduler.store.acquire(name, owner="ghost", lease=timedelta(minutes=5), fire_time=None).acquired
    for signal in (signals.job_overdue, signals.job_failing, signals.job_recovered):
        signal.connect(receiver)
    try:
        scheduler.start()
        wait_for(lambda: alerts, timeout=10, what="job_overdue")
        scheduler.store.force_unlock(name)
        wait_for(lambda: len(alerts) >= 2, timeout=10, what="job_recovered")
    finally:
        scheduler.shutdown(timeout=timedelta(seconds=2))
        for signal in (signals.job_overdue, signals.job_failing, signals.job_recovered):
            signal.disconnect(receiver)
    (overdue_signal, overdue), (recovered_signal, recovered) = alerts
    assert overdue_signal is signals.job_overdue and overdue.job_name == name
    assert overdue.problem is not None and overdue.problem.kind == "overdue"
    assert recovered_signal is signals.job_recovered and recovered.incident == overdue.incident
