"""What the Locks page shows: the configured store read live (every lock document and the store's
clock) and one row per declared job, run-time schedule or orphan lock, with its last telling run; and running a
job from the admin.

The page is not a list of ``Lock`` rows: it reads the store named by ``MUTEXCRON['STORE']`` (the SQL
table, Redis or MongoDB) at each request, so it shows the state the schedulers see.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, tzinfo
from urllib.parse import urlencode

from django.contrib.admin.utils import quote
from django.core.exceptions import ImproperlyConfigured
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils.safestring import SafeString

from mutexcron import Job, LockBusy, RunRecord, default_registry
from mutexcron.cron import iter_fire_times
from mutexcron.definitions import with_stored
from mutexcron.errors import MutexcronError
from mutexcron.ops.alerts import Problem
from mutexcron.registry import Registry
from mutexcron.stores import LockState, LockStore, require_control

from .. import runtime
from ..conf import MutexcronSettings, get_settings
from ..models import JobRun
from .display import format_duration, show_time, without_store_secrets
from .schedules import JobSchedule, job_schedule, paused_line
from .timeline import STRIP_TICKS, Timeline, build_timelines

logger = logging.getLogger("mutexcron.django")


@contextmanager
def open_store() -> Iterator[tuple[MutexcronSettings, LockStore]]:
    """The configured store, closed afterwards (unless settings hold a shared LockStore object)."""
    conf = get_settings()
    store = conf.build_store()
    try:
        yield conf, store
    finally:
        if isinstance(conf.store, str):  # we built it; a LockStore object in settings is shared
            with suppress(Exception):
                store.close()


def known_jobs(states: dict[str, LockState]) -> Registry:
    """The declared jobs and the run-time schedules ``states`` define, as every scheduler builds them (a
    schedule whose target this process does not allow is left out, and logged)."""
    return with_stored(default_registry, states)


@dataclass
class StoreSnapshot:
    """What the Locks page shows about the store: its lock documents and clock, or why it could not be read."""

    description: str = ""
    states: dict[str, LockState] = dataclasses.field(default_factory=dict)
    now: datetime | None = None
    error: str | None = None


def read_store() -> StoreSnapshot:
    """Every lock document and the store's clock; an unreachable or misconfigured store gives ``error``."""
    snapshot = StoreSnapshot()
    conf: MutexcronSettings | None = None
    try:
        with open_store() as (conf, store):
            snapshot.description = without_store_secrets(repr(store), conf)
            snapshot.states = {state.name: state for state in require_control(store, "list its locks").locks()}
            snapshot.now = store.now()
    except (ImproperlyConfigured, MutexcronError) as error:
        snapshot.error = without_store_secrets(str(error), conf)
    except Exception as error:  # a custom store's bug must not take the page down either
        logger.exception("mutexcron admin: reading the lock store failed")
        snapshot.error = without_store_secrets(f"{type(error).__name__}: {error}", conf)
    return snapshot


STATUS_LABELS = {
    "held": "Locked",
    "expired": "Lease expired",  # locked, but its holder stopped renewing: the next fire takes it
    "free": "Free",
    "missing": "No lock yet",  # no lock document: seeded at scheduler start, created by the first run
    "unknown": "Unknown",  # the store could not be read
}


@dataclass
class LockRow:
    name: str
    job: Job | None  # None: an orphan lock, whose job is not declared (removed or renamed), or a run-time
    # schedule this process cannot build
    timezone: str
    timezone_inherited: bool
    next_fire: str
    next_fire_iso: str
    state: LockState | None
    status: str
    lock_until: str
    lease_left: str
    last_fire: str
    last_run: JobRun | None
    last_run_url: str
    history_url: str
    schedule: JobSchedule | None = None  # None for an orphan lock
    fires_title: str = ""  # the next five fires, one a line, for the spec's hover
    paused_line: str = ""  # "Paused since …, by …, until …" while paused
    job_url: str = ""  # the job's page (its admin history)
    timeline: Timeline | None = None  # its last ticks (None: not declared here, or no lock document yet)
    timeline_url: str = ""
    schedule_url: str = ""  # a run-time schedule's page

    @property
    def orphan(self) -> bool:
        return self.job is None

    @property
    def runtime(self) -> bool:
        """A run-time schedule (``Scheduler.add_schedule``), not a job declared in code."""
        return self.state is not None and self.state.definition is not None

    @property
    def strip(self) -> SafeString | str:
        """Its last ticks as a small strip of cells (the Timeline page has the whole picture)."""
        return self.timeline.strip(compact=True) if self.timeline else ""

    @property
    def problems(self) -> list[Problem]:
        """Overdue and failing, as the schedulers judge them (its badges)."""
        return self.timeline.problems if self.timeline else []

    @property
    def spec(self) -> str:
        """The spec the job fires on: the store's override if any, else the code's."""
        return self.schedule.spec if self.schedule else ""

    @property
    def paused(self) -> bool:
        return bool(self.paused_line)

    @property
    def paused_until(self) -> str:
        return show_time(self.state.paused_until) if self.state else ""

    @property
    def overridden(self) -> bool:
        return bool(self.schedule and self.schedule.overridden)

    @property
    def status_label(self) -> str:
        return STATUS_LABELS[self.status]

    @property
    def holder(self) -> str:
        return (self.state.locked_by or "") if self.state and self.state.locked else ""

    @property
    def locked(self) -> bool:
        return bool(self.state and self.state.locked)


def last_runs(names: list[str]) -> dict[str, JobRun]:
    """Each job's latest run record that tells something: ``skipped_already_ran`` records are only the
    other instances' echo of a tick that ran elsewhere, so they never hide the run itself."""
    if not names:
        return {}
    telling = JobRun.objects.exclude(outcome=JobRun.Outcome.SKIPPED_ALREADY_RAN)
    latest = telling.filter(job_name=OuterRef("job_name")).order_by("-started_at", "-pk").values("pk")[:1]
    runs = telling.filter(job_name__in=names, pk=Subquery(latest))
    return {run.job_name: run for run in runs}


def _history_filter_url(job_name: str) -> str:
    """The run history filtered to one job."""
    return reverse("admin:mutexcron_jobrun_changelist") + "?" + urlencode({"job_name__exact": job_name})


def _status(snapshot: StoreSnapshot, state: LockState | None) -> str:
    """The row's key in :data:`STATUS_LABELS`."""
    if snapshot.error is not None:
        return "unknown"
    if state is None:
        return "missing"
    if snapshot.now is not None and state.is_held(snapshot.now):
        return "held"
    return "expired" if state.locked else "free"


def build_rows(snapshot: StoreSnapshot, *, scheduler_timezone: tzinfo, now: datetime) -> list[LockRow]:
    jobs = {job.name: job for job in known_jobs(snapshot.states)}
    names = sorted(set(jobs) | set(snapshot.states))
    runs = last_runs(names)
    rows = []
    for name in names:
        job, state = jobs.get(name), snapshot.states.get(name)
        schedule = job_schedule(job, state, scheduler_timezone) if job else None
        fires = schedule.fires(now) if schedule else []
        next_fire = next(iter_fire_times(schedule.trigger, now), None) if schedule else None
        status = _status(snapshot, state)
        lease_left = ""
        if status == "held" and state is not None and state.lock_until and snapshot.now:
            lease_left = format_duration(state.lock_until - snapshot.now)
        run = runs.get(name)
        rows.append(LockRow(
            name=name,
            job=job,
            timezone=schedule.zone_name if schedule else "",
            timezone_inherited=bool(job and job.timezone is None and not (state and state.schedule_timezone)),
            next_fire=show_time(next_fire, schedule.zone if schedule else None),
            next_fire_iso=next_fire.isoformat() if next_fire else "",
            state=state,
            status=status,
            lock_until=show_time(state.lock_until) if state and state.locked else "",
            lease_left=lease_left,
            last_fire=show_time(state.last_fire_time) if state else "",
            last_run=run,
            last_run_url=reverse("admin:mutexcron_jobrun_change", args=[run.pk]) if run else "",
            history_url=_history_filter_url(name),
            schedule=schedule,
            fires_title="Next fires:\n" + "\n".join(fires) if fires else "",
            paused_line=paused_line(state, snapshot.now or now),
            job_url=reverse("admin:mutexcron_lock_history", args=[quote(name)]),
            timeline_url=reverse("admin:mutexcron_lock_timeline", args=[quote(name)]) if job else "",
            schedule_url=reverse("admin:mutexcron_schedule_change", args=[quote(name)])
            if state is not None and state.definition is not None else "",
        ))
    timelines = build_timelines(((row.job, row.state, row.schedule.trigger) for row in rows
                                 if row.job is not None and row.schedule is not None),
                                now=snapshot.now or now, zone=scheduler_timezone, limit=STRIP_TICKS)
    for row in rows:
        row.timeline = timelines.get(row.name)
    return rows


def run_job_now(job: Job) -> RunRecord:
    """Run ``job`` now in this thread, under its lock, with history and signals, as ``manage.py`` would.

    A job whose ``on_busy`` is ``"wait"`` is run as ``"skip"`` here: a request must not wait up to a lease
    for a busy lock.
    """
    try:
        return runtime.run_now(job.name, on_busy="skip" if job.on_busy == "wait" else None)
    except LockBusy as busy:
        if isinstance(busy.record, RunRecord):
            return busy.record
        raise
