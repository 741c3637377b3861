"""Prometheus metrics of job runs and delayed tasks (the ``prometheus`` extra: prometheus-client).

The metric objects live in prometheus-client's default ``REGISTRY``, created once per process on first use and
shared by every scheduler of the process (two Schedulers never register a name twice). They work unchanged
under gunicorn's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``): counters and histograms sum across
workers, the last-success gauge takes the max and the overdue gauge the most recent value (a dead worker's
stale value is replaced at the next alerts check of a live one). :func:`render` serves either registry.

Jobs (:class:`JobMetrics`, from ``Scheduler(metrics=True)``):

- ``mutexcron_job_runs_total{job, outcome}``: every run and skip of this instance;
- ``mutexcron_job_duration_seconds{job}``: ``finished_at - started_at`` of the runs that ran (the history's
  duration: acquire, body and release);
- ``mutexcron_job_lateness_seconds{job}``: body start minus the nominal fire time (scheduled runs that ran;
  not ``run_now``; a fast clock's negative lateness counts as 0);
- ``mutexcron_job_last_success_timestamp_seconds{job}``; ``mutexcron_job_overdue{job}`` (0 or 1);
- ``mutexcron_pings_dropped_total{host}``: ``ping_url`` pings dropped from a full queue (``host`` is
  ``scheme://host[:port]``, never the path, which holds the ping's secret).

Tasks (called by the task workers): :func:`task_finished` and the scrape-time ``mutexcron_tasks_pending``
(:func:`watch_pending`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ..records import Outcome
from . import Telemetry

if TYPE_CHECKING:
    from ..records import JobContext, RunRecord
    from ..registry import Job

__all__ = [
    "DURATION_BUCKETS",
    "LATENESS_BUCKETS",
    "JobMetrics",
    "PendingTasksCollector",
    "multiprocess_mode",
    "render",
    "task_finished",
    "unwatch_pending",
    "watch_pending",
]

logger = logging.getLogger("mutexcron.metrics")

# Seconds. Jobs and tasks run from milliseconds to an hour; lateness is milliseconds when all is well, up to
# the misfire grace (60 s by default) for a busy process, and hours for a caught-up tick.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                    600.0, 1800.0, 3600.0)
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                    3600.0)
_MAX_OPEN_BODIES = 10_000  # body start times kept for their records; more means records that never came


@dataclass(frozen=True)
class _JobFamilies:
    runs: Counter
    duration: Histogram
    lateness: Histogram
    last_success: Gauge
    overdue: Gauge
    pings_dropped: Counter


@dataclass(frozen=True)
class _TaskFamilies:
    tasks: Counter
    lateness: Histogram
    duration: Histogram


_lock = threading.Lock()
T = TypeVar("T")


def _once(build: Callable[[], T]) -> Callable[[], T]:
    """``build()`` on the first call (under the lock: a name registered twice would raise), the same after."""
    made: list[T] = []

    def get() -> T:
        if not made:
            with _lock:
                if not made:
                    made.append(build())
        return made[0]

    return get


# The metrics of this process, registered into ``REGISTRY`` at the first call.
job_families = _once(lambda: _JobFamilies(
    Counter("mutexcron_job_runs_total", "Runs and skips of mutexcron jobs on this instance, by outcome",
            ["job", "outcome"]),
    Histogram("mutexcron_job_duration_seconds", "Duration of mutexcron job runs (finished - started)", ["job"],
              buckets=DURATION_BUCKETS),
    Histogram("mutexcron_job_lateness_seconds", "Body start minus nominal fire time of scheduled runs", ["job"],
              buckets=LATENESS_BUCKETS),
    Gauge("mutexcron_job_last_success_timestamp_seconds", "When a run of the job last succeeded (Unix time)",
          ["job"], multiprocess_mode="max"),
    Gauge("mutexcron_job_overdue", "1 while a tick of the job is overdue (nobody ran it), else 0", ["job"],
          multiprocess_mode="mostrecent"),
    Counter("mutexcron_pings_dropped_total", "ping_url pings dropped from a host's full queue, by scheme://host:port",
            ["host"]),
))
task_families = _once(lambda: _TaskFamilies(
    Counter("mutexcron_tasks_total", "Delayed tasks handled by this process's workers, by outcome",
            ["task_type", "outcome"]),
    Histogram("mutexcron_task_lateness_seconds", "Task start minus its due time", ["task_type"],
              buckets=LATENESS_BUCKETS),
    Histogram("mutexcron_task_duration_seconds", "Duration of task handler runs", ["task_type"],
              buckets=DURATION_BUCKETS),
))


@dataclass
class _JobSeries:
    """One job's children of the families, looked up once (``labels()`` costs more than the update)."""

    runs: dict[Outcome, Counter]
    duration: Histogram
    lateness: Histogram
    last_success: Gauge | None = None  # created at the first success: no series (rather than 0) before


class JobMetrics(Telemetry):
    """``Scheduler(metrics=True)``: the job metrics of one scheduler's runs (the families are shared)."""

    def __init__(self) -> None:
        self._families = job_families()
        self._body_started: dict[tuple[str, int], float] = {}  # (job, token) -> time.time() at body start
        self._series: dict[str, _JobSeries] = {}

    def _job(self, job: str) -> _JobSeries:
        series = self._series.get(job)
        if series is None:  # a job's success and failure series exist (at 0) from its first record on
            families = self._families
            runs = {outcome: families.runs.labels(job, outcome.value) for outcome in (Outcome.SUCCEEDED,
                                                                                     Outcome.FAILED)}
            series = self._series[job] = _JobSeries(runs, families.duration.labels(job),
                                                    families.lateness.labels(job))
        return series

    def body(self, job: Job, ctx: JobContext) -> AbstractContextManager[object]:
        if len(self._body_started) >= _MAX_OPEN_BODIES:
            self._body_started.clear()
        self._body_started[(ctx.job_name, ctx.token)] = time.time()
        return nullcontext()

    def finished(self, record: RunRecord) -> None:
        outcome = record.outcome
        if outcome is None:
            return
        series = self._job(record.job_name)
        counter = series.runs.get(outcome)
        if counter is None:
            counter = series.runs[outcome] = self._families.runs.labels(record.job_name, outcome.value)
        counter.inc()
        if not outcome.ran:  # a skip: counted, no duration
            return
        token = record.token
        body_started = self._body_started.pop((record.job_name, token), None) if token is not None else None
        finished_at = record.finished_at
        if finished_at is not None:
            series.duration.observe(max(0.0, (finished_at - record.started_at).total_seconds()))
            if outcome is Outcome.SUCCEEDED:
                if series.last_success is None:
                    series.last_success = self._families.last_success.labels(record.job_name)
                series.last_success.set(finished_at.timestamp())
        if not record.manual:
            started = record.started_at.timestamp() if body_started is None else body_started
            series.lateness.observe(max(0.0, started - record.fire_time.timestamp()))

    def overdue(self, job_name: str, overdue: bool) -> None:
        self._families.overdue.labels(job_name).set(1.0 if overdue else 0.0)

    def ping_dropped(self, origin: str) -> None:
        self._families.pings_dropped.labels(origin).inc()


# -- tasks ---------------------------------------------------------------------------------------------------


def task_finished(task_type: str, outcome: str, *, due: datetime | None = None, started: datetime | None = None,
                  finished: datetime | None = None) -> None:
    """One task attempt ended (``outcome``: "succeeded", "failed", "retrying", "cancelled", ...): counted;
    its lateness (``started - due``, at least 0) and duration (``finished - started``) observed when known."""
    families = task_families()
    families.tasks.labels(task_type, outcome).inc()
    if started is not None and due is not None:
        families.lateness.labels(task_type).observe(max(0.0, (started - due).total_seconds()))
    if started is not None and finished is not None:
        families.duration.labels(task_type).observe(max(0.0, (finished - started).total_seconds()))


class PendingTasksCollector(Collector):
    """``mutexcron_tasks_pending{task_type}``: ``counts()`` (task type -> tasks waiting) read at each scrape.

    A ``counts()`` that raises (the backend is down) gives no samples, logged once per outage."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts
        self._failing = False

    @staticmethod
    def family() -> GaugeMetricFamily:
        return GaugeMetricFamily("mutexcron_tasks_pending", "Delayed tasks waiting in the backend, read at scrape "
                                 "time", labels=["task_type"])

    def describe(self) -> Iterable[Metric]:
        return [self.family()]  # registering reads nothing from the backend

    def counts(self) -> Mapping[str, int] | None:
        """The backend's counts, or None if it could not be read."""
        try:
            counts = self._counts()
        except Exception as error:
            if not self._failing:
                self._failing = True
                logger.warning("mutexcron_tasks_pending: could not count the pending tasks (logged once until it "
                               "works again): %s", error)
            return None
        if self._failing:
            self._failing = False
            logger.info("mutexcron_tasks_pending: the pending tasks can be counted again")
        return counts

    def collect(self) -> Iterable[Metric]:
        family = self.family()
        for task_type, count in sorted((self.counts() or {}).items()):
            family.add_metric([task_type], float(count))
        return [family]


class _AllPending(Collector):
    """The one ``mutexcron_tasks_pending`` of the process: the sum of every watched backend's counts."""

    def __init__(self) -> None:
        self.sources: dict[str, PendingTasksCollector] = {}

    def describe(self) -> Iterable[Metric]:
        return [PendingTasksCollector.family()]

    def collect(self) -> Iterable[Metric]:
        totals: dict[str, float] = {}
        for source in list(self.sources.values()):
            for task_type, count in (source.counts() or {}).items():
                totals[task_type] = totals.get(task_type, 0.0) + count
        family = PendingTasksCollector.family()
        for task_type, total in sorted(totals.items()):
            family.add_metric([task_type], total)
        return [family]


_pending: _AllPending | None = None


def watch_pending(key: str, counts: Callable[[], Mapping[str, int]]) -> None:
    """Serve ``counts()`` of backend ``key`` in ``mutexcron_tasks_pending`` (the same key replaces its source;
    different keys add up). Registers the metric into ``REGISTRY`` on the first call."""
    global _pending
    with _lock:
        if _pending is None:
            _pending = _AllPending()
            REGISTRY.register(_pending)
        _pending.sources[key] = PendingTasksCollector(counts)


def unwatch_pending(key: str) -> None:
    """Stop reading backend ``key`` at scrapes."""
    with _lock:
        if _pending is not None:
            _pending.sources.pop(key, None)


# -- exposition ----------------------------------------------------------------------------------------------


def multiprocess_mode() -> bool:
    """True when prometheus-client keeps its values in ``PROMETHEUS_MULTIPROC_DIR`` (gunicorn and the like)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ


def exposition_registry() -> Collector:
    """What a scrape serves: ``REGISTRY``, or in multiprocess mode every process's files plus the scrape-time
    metrics read by this process (pending tasks: one backend read, not one per worker)."""
    job_families()
    if not multiprocess_mode():
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    if _pending is not None:
        registry.register(_pending)
    return registry


def render(accept: str = "") -> tuple[bytes, str]:
    """The metrics page and its content type, in the format the ``Accept`` header asks for."""
    encoder, content_type = choose_encoder(accept)
    return encoder(exposition_registry()), content_type
