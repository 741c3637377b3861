"""The run history of ``run_on="tasks"`` jobs: the winner's ``enqueued`` fire is the tick's run, and the worker's run
of the body takes that row over, whichever is written first; the other instances' fires stay folded into it. On
SQLite, PostgreSQL and MariaDB (tests/django/test_history_ticks.py has the fold itself)."""

from __future__ import annotations

from dataclasses import replace

from mutexcron import Outcome, RunRecord
from mutexcron_django import history
from mutexcron_django.models import JobRun
from tests.django.test_history_ticks import FIRE, fire, on_each_database, rows

TASK = "job-0123456789abcdef01234567-1772366400000"


def enqueued(instance: str = "web-1", *, manual: bool = False) -> RunRecord:
    return replace(fire(instance, Outcome.ENQUEUED, token=7, manual=manual), task_id=TASK)


def worker_run(outcome: Outcome = Outcome.SUCCEEDED, *, manual: bool = False) -> RunRecord:
    return replace(fire("worker-1", outcome, late=0.5, took=2.0, token=7, manual=manual,
                        error="boom" if outcome is Outcome.FAILED else None), task_id=TASK)


def assert_the_ticks_row_is_the_workers_run(alias: str, run: RunRecord, fired: list[str]) -> JobRun:
    (row,) = rows(alias)
    assert (row.outcome, row.instance_id, row.task_id, row.token) == (str(run.outcome), "worker-1", TASK, 7)
    assert (row.started_at, row.finished_at, row.error) == (run.started_at, run.finished_at, run.error or "")
    assert row.tick_key == history.tick_key(run.job_name, FIRE)
    assert (row.fired_count, sorted(instance for instance, _ in row.fires)) == (len(fired), sorted(fired))
    return row


@on_each_database()
def test_the_workers_run_takes_over_the_enqueued_row(alias: str) -> None:
    history.write(fire("web-2", Outcome.SKIPPED_ALREADY_RAN), using=alias)
    history.write(enqueued(), using=alias)
    (row,) = rows(alias)
    assert (row.outcome, row.task_id, row.fired_count) == ("enqueued", TASK, 2)
    run = worker_run(Outcome.FAILED)
    history.write(run, using=alias)
    history.write(fire("web-3", Outcome.SKIPPED_ALREADY_RAN), using=alias)
    assert_the_ticks_row_is_the_workers_run(alias, run, ["web-1", "web-2", "web-3"])


@on_each_database()
def test_a_workers_run_written_before_the_enqueued_fire_is_the_ticks_row(alias: str) -> None:
    run = worker_run()
    history.write(run, using=alias)
    history.write(enqueued(), using=alias)
    history.write(fire("web-2", Outcome.SKIPPED_ALREADY_RAN), using=alias)
    assert_the_ticks_row_is_the_workers_run(alias, run, ["web-1", "web-2"])


@on_each_database()
def test_a_workers_run_takes_over_a_skippers_placeholder(alias: str) -> None:
    history.write(fire("web-2", Outcome.SKIPPED_ALREADY_RAN), using=alias)
    run = worker_run()
    history.write(run, using=alias)
    history.write(enqueued(), using=alias)
    assert_the_ticks_row_is_the_workers_run(alias, run, ["web-1", "web-2"])


@on_each_database()
def test_a_manual_runs_worker_takes_over_its_own_row(alias: str) -> None:
    history.write(enqueued(manual=True), using=alias)
    history.write(worker_run(manual=True), using=alias)
    (row,) = rows(alias)
    assert (row.outcome, row.instance_id, row.manual, row.tick_key, row.task_id) == (
        "succeeded", "worker-1", True, None, TASK)


@on_each_database()
def test_a_task_that_did_not_run_its_body_keeps_a_row_of_its_own(alias: str) -> None:
    history.write(enqueued(), using=alias)
    refused = replace(fire("worker-1", Outcome.SKIPPED_BUSY, error="the lock ... is no longer held"), task_id=TASK)
    history.write(refused, using=alias)
    assert [(row.outcome, row.instance_id) for row in rows(alias)] == [("enqueued", "web-1"),
                                                                       ("skipped_busy", "worker-1")]
