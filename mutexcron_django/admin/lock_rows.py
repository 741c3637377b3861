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
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.contrib.admin.utils import quote
from django.core.exceptions import ImproperlyConfigured
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils.safestring import SafeString

from mutexcron import Job, LockBusy, RunRecord, default_registry
from mutexcron.cron import resolve_timezone
from mutexcron.errors import MutexcronError
from mutexcron.ops.alerts import Problem
from mutexcron.ops.listing import Listing, read_listing, unread_listing
from mutexcron.stores import LockState, LockStore

from .. import runtime
from ..conf import MutexcronSettings, get_settings
from ..models import JobRun
from .display import format_duration, show_time, without_store_secrets
from .schedules import JobSchedule, job_schedule, paused_line
from .timeline import STRIP_TICKS, Timeline, build_timelines

logger = logging.getLogger("mutexcron.django")


@contextmanager
def open_store() -> Iterator[tuple[MutexcronSettings, LockStore]]:
    """The settings and their store (:meth:`MutexcronSettings.open_store`: closed afterwards unless it is a shared
    LockStore object)."""
    conf = get_settings()
    with conf.open_store() as store:
        yield conf, store


def read_store(now: datetime) -> Listing:
    """The configured store's listing (:func:`~mutexcron.ops.listing.read_listing`: every lock document read once,
    the jobs they make, the store's clock), without the store's secrets. A store that cannot be built or read
    (misconfigured, unreachable, no control plane) gives ``error`` and the declared jobs without their locks."""
    conf: MutexcronSettings | None = None
    store, zone = "", resolve_timezone("UTC")
    try:
        conf = get_settings()
        zone = resolve_timezone(conf.timezone)
        with conf.open_store() as built:
            store = repr(built)
            listing = read_listing(built, default_registry, zone, now)
    except (ImproperlyConfigured, MutexcronError) as error:
        listing = unread_listing(store, default_registry, zone, now, str(error))
    except Exception as error:  # a custom store's bug must not take the page down either
        logger.exception("mutexcron admin: reading the lock store failed")
        listing = unread_listing(store, default_registry, zone, now, f"{type(error).__name__}: {error}")
    masked = None if listing.error is None else without_store_secrets(listing.error, conf)
    return dataclasses.replace(listing, store=without_store_secrets(listing.store, conf), error=masked)


STATUS_LABELS = {  # by the listing's lock_state
    "held": "Locked",
    "expired": "Lease expired",  # locked, but its holder stopped renewing: the next fire takes it
    "free": "Free",
    "unseeded": "No lock yet",  # no lock document: seeded at scheduler start, created by the first run
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


def build_rows(listing: Listing, now: datetime) -> list[LockRow]:
    """One row per job of ``listing`` and per other lock document (an orphan, or a run-time schedule this process
    cannot build), by name; ``now`` is when its next fires are counted from."""
    lines = {line.job.name: line for line in listing.jobs}
    names = sorted(set(lines) | set(listing.locks))
    runs = last_runs(names)
    rows = []
    for name in names:
        line, state = lines.get(name), listing.locks.get(name)
        schedule = job_schedule(line) if line else None
        fires = schedule.fires(now) if schedule else []
        status = listing.status(state)
        lease_left = ""
        if status == "held" and state is not None and state.lock_until:
            lease_left = format_duration(state.lock_until - listing.now)
        run = runs.get(name)
        rows.append(LockRow(
            name=name,
            job=line.job if line else None,
            timezone=schedule.zone_name if schedule else "",
            timezone_inherited=bool(line and line.job.timezone is None and not (state and state.schedule_timezone)),
            next_fire=show_time(line.next_fire, line.zone) if line else "",
            next_fire_iso=line.next_fire.isoformat() if line and line.next_fire else "",
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
            paused_line=paused_line(state, listing.now),
            job_url=reverse("admin:mutexcron_lock_history", args=[quote(name)]),
            timeline_url=reverse("admin:mutexcron_lock_timeline", args=[quote(name)]) if line else "",
            schedule_url=reverse("admin:mutexcron_schedule_change", args=[quote(name)])
            if state is not None and state.definition is not None else "",
        ))
    timelines = build_timelines(((row.job, row.state, row.schedule.trigger) for row in rows
                                 if row.job is not None and row.schedule is not None),
                                now=listing.now, zone=listing.timezone, limit=STRIP_TICKS)
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
