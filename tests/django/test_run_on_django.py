"""``run_on="tasks"`` in Django: the process's scheduler enqueues a tick on the queue of ``MUTEXCRON["TASKS"]``
(the project's database here), the history shows ``enqueued`` with the task id, and the worker's JobRunner
(:mod:`mutexcron_django.job_runs`, what ``manage.py mutexcron worker`` installs) runs the body, writes its run over
that row and sends the run's signals. The fleet of processes: tests/django/test_run_on_fleet_django.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from mutexcron import JobContext, Outcome, RunRecord
from mutexcron_django import checks, history, job_runs, runtime, signals
from mutexcron_django.conf import get_settings
from mutexcron_django.models import JobRun, Lock, ScheduledTask
from mutexcron_django.sql.store import DjangoLockStore
from mutexcron_django.tasks import get_task_queue, reset_task_queue
from tests.django.jobhelpers import Declarations
from tests.django.test_admin_timeline import cells, page, section, timeline_url
from tests.django.timeline_history import EXPECTED, known_history
from tests.django.timeline_history import JOB as TIMELINE_JOB
from tests.django.timeline_history import fire as timeline_fire

JOB = "tests.run_on.report"
FIRE = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fresh_queue() -> Iterator[None]:
    reset_task_queue()
    yield
    reset_task_queue()


@pytest.fixture
def signalled() -> Iterator[list[tuple[str, RunRecord]]]:
    seen: list[tuple[str, RunRecord]] = []
    names = ("job_started", "job_finished", "job_skipped", "job_enqueued")
    receivers = {name: (lambda sender, record, _name=name, **_: seen.append((_name, record))) for name in names}
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver)
    yield seen
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver)


@pytest.fixture
def bodies(declare: Declarations) -> list[JobContext]:
    ran: list[JobContext] = []
    declare("0 2 * * *", ran.append, name=JOB, run_on="tasks", lease=600)
    return ran


@pytest.mark.django_db(transaction=True)
def test_a_tick_is_enqueued_on_the_projects_queue_and_run_by_the_workers_job_runner(
        bodies: list[JobContext], signalled: list[tuple[str, RunRecord]]) -> None:
    scheduler = runtime.build_scheduler()
    try:
        enqueued = scheduler.run_tick(JOB, FIRE)
    finally:
        scheduler.shutdown()
    assert enqueued.outcome is Outcome.ENQUEUED and bodies == []
    assert ScheduledTask.objects.filter(pk=enqueued.task_id, task_type="mutexcron-job").exists()
    row = JobRun.objects.get(job_name=JOB)
    assert (row.outcome, row.task_id, row.instance_id) == ("enqueued", enqueued.task_id, enqueued.instance_id)
    lock = Lock.objects.get(name=JOB)
    assert (lock.locked, lock.locked_by, lock.token) == (True, enqueued.instance_id, enqueued.token)
    assert job_runs.runs_jobs()

    queue = get_task_queue()
    runner = job_runs.install(queue)
    try:
        info = queue.info(enqueued.task_id or "")
        assert info is not None
        queue.handlers.get("mutexcron-job").func(info.payload)  # as the worker calls it
    finally:
        runner.close()
    assert enqueued.token is not None  # the worker's own token: the run taken over from the scheduler's acquire
    assert [(ctx.fire_time, ctx.token) for ctx in bodies] == [(FIRE, enqueued.token + 1)]
    row.refresh_from_db()
    assert (row.outcome, row.task_id, row.fired_count) == ("succeeded", enqueued.task_id, 1)
    assert row.instance_id == queue.worker_id
    lock.refresh_from_db()
    assert (lock.locked, lock.last_outcome) == (False, "succeeded")
    assert [name for name, _ in signalled] == ["job_enqueued", "job_started", "job_finished"]


def test_without_run_on_tasks_jobs_the_worker_runs_no_job_runner(declare: Declarations) -> None:
    declare("0 2 * * *", name="tests.run_on.here")
    assert not job_runs.runs_jobs()


def test_the_job_visibility_timeout_is_a_setting_in_seconds_or_a_timedelta() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"JOB_VISIBILITY_TIMEOUT": 30}}):
        assert get_settings().tasks.job_visibility_timeout == timedelta(seconds=30)
    assert get_settings().tasks.job_visibility_timeout == timedelta(minutes=5)


@pytest.mark.parametrize("value", [0, -1, "soon", True])
def test_a_bad_job_visibility_timeout_names_the_key(value: Any) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"JOB_VISIBILITY_TIMEOUT": value}}), \
            pytest.raises(ImproperlyConfigured, match=r"MUTEXCRON\['TASKS'\]\['JOB_VISIBILITY_TIMEOUT'\]"):
        get_settings()


@pytest.mark.django_db
def test_the_admins_run_now_enqueues_and_says_so(admin_client: Client, bodies: list[JobContext]) -> None:
    response = admin_client.post("/admin/mutexcron/lock/run/", {"name": JOB}, follow=True)
    page = response.content.decode()
    assert f"Job “{JOB}” was enqueued by" in page and "a task worker runs it" in page
    row = JobRun.objects.get(job_name=JOB)
    assert (row.outcome, row.manual) == ("enqueued", True) and (row.task_id or "").endswith("-m")
    assert ScheduledTask.objects.filter(pk=row.task_id).exists() and bodies == []


@pytest.mark.django_db
def test_the_trigger_command_enqueues_and_prints_the_task(bodies: list[JobContext]) -> None:
    out = StringIO()
    call_command("mutexcron", "trigger", JOB, stdout=out)
    task_id = JobRun.objects.get(job_name=JOB).task_id
    assert out.getvalue().startswith(f"job {JOB!r} enqueued on ") and f"as task {task_id} (token 1)" in out.getvalue()


@pytest.mark.django_db
def test_the_timeline_shows_an_enqueued_tick_running_until_its_worker_releases_it(admin_client: Client,
                                                                                    declare: Declarations) -> None:
    latest = known_history(declare).ticks[-1]
    acquired = DjangoLockStore().acquire(TIMELINE_JOB, owner="web-1", lease=timedelta(minutes=5), fire_time=latest)
    assert acquired.acquired
    history.write(replace(timeline_fire(latest, "web-1", Outcome.ENQUEUED), task_id="job-abc-1"))

    found = cells(section(page(admin_client, timeline_url(TIMELINE_JOB)), 'id="mutexcron-timeline-strip"'))

    assert [state for _, state, _ in found] == [*EXPECTED[:-1], "running"]
    assert "enqueued as task job-abc-1; waiting for or running on a worker" in found[-1][2]


def test_a_run_on_tasks_lease_shorter_than_the_visibility_timeout_is_w005(declare: Declarations) -> None:
    declare("0 2 * * *", name="tests.run_on.short", run_on="tasks", lease=60)
    declare("0 2 * * *", name="tests.run_on.here_short", lease=60)  # runs here: no task to come back
    (warning,) = checks.check_job_leases_cover_the_visibility_timeout()
    assert warning.id == "mutexcron.W005" and warning.obj == "tests.run_on.short"
    assert "lease (0:01:00) shorter than MUTEXCRON['TASKS']['JOB_VISIBILITY_TIMEOUT'] (0:05:00)" in warning.msg
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"JOB_VISIBILITY_TIMEOUT": 60}}):
        assert checks.check_job_leases_cover_the_visibility_timeout() == []


@pytest.mark.django_db(transaction=True)
def test_the_worker_refuses_to_start_with_a_run_on_tasks_job_whose_lease_is_shorter_than_the_visibility_timeout(
        declare: Declarations) -> None:
    declare("0 2 * * *", name="tests.run_on.short", run_on="tasks", lease=60)
    with pytest.raises(CommandError, match=r"job\(s\) 'tests.run_on.short' \(lease 0:01:00\) run on tasks with a lease "
                                           r"shorter than the workers' visibility timeout \(0:05:00\)"):
        call_command("mutexcron", "worker")
