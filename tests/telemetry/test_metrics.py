"""Prometheus metrics (Scheduler(metrics=True), mutexcron.telemetry.metrics) read back from
prometheus-client's REGISTRY.

Every test uses job and task-type names of its own: the registry is the process's, shared by all tests.
The gunicorn multiprocess test is tests/django/test_metrics_gunicorn.py.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from mutexcron import Outcome, Registry, Scheduler, SchedulerConfigError, mutex_cron
from mutexcron.running.pings import MAX_QUEUED
from mutexcron.stores import LockStore, MemoryLockStore
from mutexcron.telemetry.metrics import (
    JobMetrics,
    PendingTasksCollector,
    render,
    task_finished,
    unwatch_pending,
    watch_pending,
)
from tests.support import declare_job, unique_name, wait_until
from tests.support.ping_servers import PingServer, serving

EVERY_SECOND = "* * * * * *"


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def runs(job: str, outcome: Outcome | str) -> float:
    return sample("mutexcron_job_runs_total", job=job, outcome=str(outcome)) or 0.0


def this_second() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


NewScheduler = Callable[..., Scheduler]


def test_scheduled_runs_are_counted_with_their_duration_lateness_and_last_success(
    memory_or_redis: str | LockStore, registry: Registry, new_scheduler: NewScheduler
) -> None:
    job = declare_job(registry)
    scheduler = new_scheduler(memory_or_redis, metrics=True)
    scheduler.start()

    wait_until(lambda: runs(job, Outcome.SUCCEEDED) >= 2, timeout=6, what="two scheduled runs")
    scheduler.shutdown()
    succeeded = runs(job, Outcome.SUCCEEDED)
    assert runs(job, Outcome.FAILED) == 0.0  # the failure series exists (0) from the first record on
    assert sample("mutexcron_job_duration_seconds_count", job=job) == succeeded
    assert sample("mutexcron_job_lateness_seconds_count", job=job) == succeeded
    lateness = sample("mutexcron_job_lateness_seconds_sum", job=job)
    assert lateness is not None and 0 <= lateness < succeeded * 2  # each body starts within its second
    last = sample("mutexcron_job_last_success_timestamp_seconds", job=job)
    assert last is not None and abs(last - time.time()) < 5


def test_a_tick_run_on_two_instances_counts_one_run_and_one_skip_and_two_schedulers_share_the_metrics(
    memory_or_redis: str | LockStore, registry: Registry, new_scheduler: NewScheduler
) -> None:
    job = declare_job(registry)
    first = new_scheduler(memory_or_redis, metrics=True)
    second = new_scheduler(memory_or_redis, "B", metrics=True)  # no "Duplicated timeseries"
    tick = this_second()

    assert first.run_tick(job, tick).outcome is Outcome.SUCCEEDED
    assert second.run_tick(job, tick).outcome is Outcome.SKIPPED_ALREADY_RAN

    assert runs(job, Outcome.SUCCEEDED) == 1.0
    assert runs(job, Outcome.SKIPPED_ALREADY_RAN) == 1.0
    assert sample("mutexcron_job_duration_seconds_count", job=job) == 1.0  # skips have no duration
    assert sample("mutexcron_job_lateness_seconds_count", job=job) == 1.0


def test_a_failed_run_is_counted_failed_with_its_duration_and_no_success_time(
    memory_or_redis: str | LockStore, registry: Registry, new_scheduler: NewScheduler
) -> None:
    job = unique_name()

    @mutex_cron(EVERY_SECOND, name=job, registry=registry)
    def boom() -> None:
        raise RuntimeError("boom")

    scheduler = new_scheduler(memory_or_redis, metrics=True)
    assert scheduler.run_tick(job, this_second()).outcome is Outcome.FAILED

    assert runs(job, Outcome.FAILED) == 1.0
    assert runs(job, Outcome.SUCCEEDED) == 0.0
    assert sample("mutexcron_job_duration_seconds_count", job=job) == 1.0
    assert sample("mutexcron_job_last_success_timestamp_seconds", job=job) is None


def test_run_now_is_counted_but_has_no_lateness(registry: Registry, new_scheduler: NewScheduler) -> None:
    job = declare_job(registry, spec="0 6 * * *")
    scheduler = new_scheduler("memory://", metrics=True)
    assert scheduler.run_now(job).outcome is Outcome.SUCCEEDED
    assert runs(job, Outcome.SUCCEEDED) == 1.0
    assert sample("mutexcron_job_duration_seconds_count", job=job) == 1.0
    assert not sample("mutexcron_job_lateness_seconds_count", job=job)  # the request time is no schedule


def test_lateness_is_body_start_minus_the_fire_time(registry: Registry, new_scheduler: NewScheduler) -> None:
    job = declare_job(registry)
    scheduler = new_scheduler("memory://", metrics=True)
    fire = datetime.now(UTC) - timedelta(seconds=3)
    before = time.time()
    scheduler.run_tick(job, fire.replace(microsecond=0))
    after = time.time()
    lateness = sample("mutexcron_job_lateness_seconds_sum", job=job)
    fire_ts = fire.replace(microsecond=0).timestamp()
    assert lateness is not None and before - fire_ts <= lateness <= after - fire_ts
    assert sample("mutexcron_job_lateness_seconds_bucket", job=job, le="2.5") == 0.0
    assert sample("mutexcron_job_lateness_seconds_bucket", job=job, le="5.0") == 1.0


def test_the_overdue_gauge_follows_the_alerts_check(registry: Registry, new_scheduler: NewScheduler) -> None:
    """A job whose lock a dead holder keeps: its ticks go unrun, it turns overdue (1); once the lock is free
    its runs resume and the next check says 0."""
    job = unique_name()
    mutex_cron(EVERY_SECOND, name=job, registry=registry, alert_after=timedelta(seconds=1))(lambda: None)
    store = MemoryLockStore()
    held = store.acquire(job, owner="dead-instance", lease=timedelta(minutes=5), fire_time=None)
    assert held.token is not None
    scheduler = new_scheduler(store, metrics=True, busy_grace=timedelta(0), sync_interval=timedelta(seconds=0.2))
    scheduler.start()

    def overdue() -> float | None:
        return sample("mutexcron_job_overdue", job=job)

    assert wait_until(lambda: overdue() == 0.0, timeout=2, what="the check at start")  # no tick missed yet
    wait_until(lambda: overdue() == 1.0, timeout=6, what="the job to turn overdue")
    assert runs(job, Outcome.SKIPPED_BUSY) >= 1
    store.release(job, token=held.token)
    wait_until(lambda: overdue() == 0.0 and runs(job, Outcome.SUCCEEDED) >= 1, timeout=6,
               what="runs to resume and the job to recover")


def test_the_hooks_can_be_called_directly() -> None:
    metrics = JobMetrics()
    job = unique_name()
    metrics.overdue(job, True)
    assert sample("mutexcron_job_overdue", job=job) == 1.0
    metrics.overdue(job, False)
    assert sample("mutexcron_job_overdue", job=job) == 0.0


def test_pings_dropped_from_a_full_queue_are_counted_by_host_without_the_path(registry: Registry,
                                                                              new_scheduler: NewScheduler) -> None:
    server = PingServer()
    with serving(server):
        job = declare_job(registry, spec="0 6 * * *", ping_url=server.url)
        scheduler = new_scheduler(MemoryLockStore(), metrics=True)
        server.hold.clear()
        scheduler.run_now(job)  # its start ping is held by the server, its success ping waits in the queue
        wait_until(lambda: server.paths, timeout=5, what="the first ping, held by the server")
        runs = MAX_QUEUED // 2 + 1  # two pings each (start, success): the queue overflows
        for _ in range(runs):
            scheduler.run_now(job)
        dropped = 1 + 2 * runs - MAX_QUEUED
        assert sample("mutexcron_pings_dropped_total", host=server.origin) == dropped
        exposed = render()[0].decode()
        assert f'mutexcron_pings_dropped_total{{host="{server.origin}"}} {float(dropped)}' in exposed
        assert "3f1c" not in exposed


# -- tasks ---------------------------------------------------------------------------------------------------


def test_task_finished_counts_and_observes_lateness_and_duration() -> None:
    kind = unique_name("email")
    due = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    task_finished(kind, "succeeded", due=due, started=due + timedelta(seconds=0.2),
                  finished=due + timedelta(seconds=1.7))
    task_finished(kind, "failed", due=due, started=due - timedelta(seconds=1), finished=due)  # early: lateness 0
    task_finished(kind, "cancelled", due=due)  # never started: counted only

    assert sample("mutexcron_tasks_total", task_type=kind, outcome="succeeded") == 1.0
    assert sample("mutexcron_tasks_total", task_type=kind, outcome="failed") == 1.0
    assert sample("mutexcron_tasks_total", task_type=kind, outcome="cancelled") == 1.0
    assert sample("mutexcron_task_lateness_seconds_count", task_type=kind) == 2.0
    assert sample("mutexcron_task_lateness_seconds_sum", task_type=kind) == pytest.approx(0.2)
    assert sample("mutexcron_task_duration_seconds_count", task_type=kind) == 2.0
    assert sample("mutexcron_task_duration_seconds_sum", task_type=kind) == pytest.approx(2.5)


def test_the_pending_collector_reads_its_backend_at_each_scrape() -> None:
    counts: dict[str, int] = {"email": 3}
    reads: list[int] = []

    def read() -> Mapping[str, int]:
        reads.append(1)
        return dict(counts)

    registry = CollectorRegistry()
    registry.register(PendingTasksCollector(read))
    assert reads == []  # registering reads nothing
    assert registry.get_sample_value("mutexcron_tasks_pending", {"task_type": "email"}) == 3.0
    counts.update(email=1, report=7)
    assert registry.get_sample_value("mutexcron_tasks_pending", {"task_type": "email"}) == 1.0
    assert registry.get_sample_value("mutexcron_tasks_pending", {"task_type": "report"}) == 7.0


def test_a_pending_count_that_fails_gives_no_samples_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    def down() -> Mapping[str, int]:
        raise ConnectionError("backend down")

    registry = CollectorRegistry()
    registry.register(PendingTasksCollector(down))
    with caplog.at_level(logging.WARNING, logger="mutexcron.metrics"):
        for _ in range(3):
            assert registry.get_sample_value("mutexcron_tasks_pending", {"task_type": "email"}) is None
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "backend down" in caplog.records[0].getMessage()


def test_watched_backends_add_up_and_the_same_key_replaces_its_source() -> None:
    kind = unique_name("report")
    first, second = unique_name("backend"), unique_name("backend")
    try:
        watch_pending(first, lambda: {kind: 2})
        watch_pending(second, lambda: {kind: 5})
        assert sample("mutexcron_tasks_pending", task_type=kind) == 7.0
        watch_pending(first, lambda: {kind: 10})
        assert sample("mutexcron_tasks_pending", task_type=kind) == 15.0
        unwatch_pending(second)
        assert sample("mutexcron_tasks_pending", task_type=kind) == 10.0
    finally:
        unwatch_pending(first)
        unwatch_pending(second)
    assert sample("mutexcron_tasks_pending", task_type=kind) is None


def test_render_serves_the_text_format_or_openmetrics(registry: Registry, new_scheduler: NewScheduler) -> None:
    job = declare_job(registry, spec="0 6 * * *")
    scheduler = new_scheduler("memory://", metrics=True)
    scheduler.run_now(job)

    text, content_type = render()
    assert content_type.startswith("text/plain")
    assert f'mutexcron_job_runs_total{{job="{job}",outcome="succeeded"}} 1.0' in text.decode()
    body, openmetrics = render("application/openmetrics-text; version=1.0.0")
    assert openmetrics.startswith("application/openmetrics-text")
    assert body.decode().rstrip().endswith("# EOF")


# -- the extra -----------------------------------------------------------------------------------------------

_WITHOUT = """
import sys
sys.modules[sys.argv[1]] = None  # as if the extra were not installed
from mutexcron import Scheduler, SchedulerConfigError
from mutexcron.errors import StoreConfigError
from mutexcron.tasks import TaskQueue
try:
    if sys.argv[3] == "Scheduler":
        Scheduler("memory://", **{sys.argv[2]: True})
    else:
        TaskQueue("redis://127.0.0.1:1/0", **{sys.argv[2]: True})  # builds without connecting
except (SchedulerConfigError, StoreConfigError) as error:
    print(type(error).__name__, error)
else:
    print("no error")
"""


@pytest.mark.parametrize(("owner", "error"), [("Scheduler", "SchedulerConfigError"),
                                              ("TaskQueue", "StoreConfigError")])
@pytest.mark.parametrize(("module", "option", "extra"), [("prometheus_client", "metrics", "mutexcron[prometheus]"),
                                                         ("opentelemetry", "tracing", "mutexcron[otel]")])
def test_a_missing_extra_is_a_config_error_naming_it(module: str, option: str, extra: str, owner: str,
                                                     error: str) -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT, module, option, owner], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{error} {owner} {option}=True needs"), done.stdout
    assert extra in done.stdout, done.stdout


@pytest.mark.parametrize("value", [1, "yes", None])
def test_metrics_and_tracing_must_be_booleans(value: object) -> None:
    for option in ("metrics", "tracing"):
        with pytest.raises(SchedulerConfigError, match=option):
            Scheduler("memory://", **{option: value})  # type: ignore[arg-type]
