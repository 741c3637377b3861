"""A job's recent ticks as the admin shows them: every nominal tick of its effective schedule (the store's
override or the code's) in the last 24 hours, at most the last 200, each with what happened, worked out
from the history (one JobRun row per tick, :mod:`mutexcron_django.history`), the pause spans and the lock
document:

- ``succeeded``, ``failed``, ``caught_up``: the tick's run (a catch-up run that succeeded is ``caught_up``);
- ``running``: its lock is held for it now (for a ``run_on="tasks"`` job, from its enqueue to its worker's release);
  ``unrecorded``: it was taken but no outcome was written;
- ``paused``: an operator's pause skipped it; ``skipped``: only busy, store-error or stale-schedule skips;
- ``missed``: no instance ran it and it is past its alert delay (``mutexcron.ops.alerts.alert_delay``, plus its
  jitter); ``pending``: not yet.

Ticks count from the lock document's creation (and from the last schedule change: older ticks were
another schedule's). The Locks page shows the last 30 of each job, with its overdue and failing badges
(``mutexcron.ops.alerts.job_problems``, as the running schedulers judge them).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from functools import reduce
from operator import or_

from django.db.models import Q
from django.utils.safestring import SafeString

from mutexcron import Job
from mutexcron.cron import CronTrigger, iter_fire_times
from mutexcron.ops.alerts import Problem, alert_delay, job_problems
from mutexcron.ops.checkup import DEFAULT_MISFIRE_GRACE_TIME
from mutexcron.ops.control import jitter_delay
from mutexcron.stores import LockState

from ..models import JobRun, PauseSpan
from . import svg
from .display import format_duration, last_line, show_time, utc_time, with_utc_times

__all__ = ["MAX_TICKS", "STRIP_TICKS", "WINDOW", "TickCell", "Timeline", "build_timelines", "recent_ticks"]

WINDOW = timedelta(hours=24)
MAX_TICKS = 200  # the Timeline page
STRIP_TICKS = 30  # the Locks page
RAN = (JobRun.Outcome.SUCCEEDED, JobRun.Outcome.FAILED, JobRun.Outcome.TIMED_OUT, JobRun.Outcome.REPLACED)
# A run's state by its outcome (else succeeded, or caught_up).
RAN_STATES: dict[str, str] = {JobRun.Outcome.FAILED: "failed", JobRun.Outcome.TIMED_OUT: "timed_out",
                              JobRun.Outcome.REPLACED: "replaced"}
PLACEHOLDER = JobRun.Outcome.SKIPPED_ALREADY_RAN
ENQUEUED = JobRun.Outcome.ENQUEUED  # run_on="tasks": the tick's row until its worker's run takes it over


def recent_ticks(trigger: CronTrigger, *, now: datetime, limit: int, floor: datetime | None = None,
                 window: timedelta = WINDOW) -> list[datetime]:
    """The last ``limit`` fire times of ``trigger`` at or before ``now``, after ``floor`` and within ``window``,
    oldest first. Looks back a minute, then 4 times further each round, so a per-second job costs a few hundred
    steps, not a day's."""
    start = now - window if floor is None else max(now - window, floor)
    lookback = timedelta(minutes=1)
    while True:
        begin = max(start, now - lookback)
        ticks: deque[datetime] = deque(maxlen=limit)
        for tick in iter_fire_times(trigger, begin):
            if tick > now:
                break
            ticks.append(tick)
        if len(ticks) >= limit or begin <= start:
            return list(ticks)
        lookback *= 4


@dataclass(frozen=True)
class TickCell:
    """One nominal tick and what happened: its state (a key of :data:`svg.STATES`), the run if any."""

    tick: datetime
    state: str
    title: str
    run: JobRun | None = None
    lateness: timedelta | None = None
    duration: timedelta | None = None
    fires: list[tuple[str, str]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return svg.STATES[self.state]


@dataclass
class Timeline:
    """A job's recent ticks (oldest first), its problems now, and since when ticks are counted."""

    job_name: str
    zone: tzinfo
    cells: list[TickCell]
    problems: list[Problem]
    since: datetime | None = None

    @property
    def counts(self) -> dict[str, int]:
        """How many ticks are in each state, in the legend's order (states with none left out)."""
        found = {state: sum(cell.state == state for cell in self.cells) for state in svg.STATES}
        return {state: count for state, count in found.items() if count}

    @property
    def legend(self) -> list[tuple[SafeString, str, int]]:
        """(swatch, label, count) of every state, in the legend's order."""
        return [(svg.swatch(f"mx-{state}"), label, sum(cell.state == state for cell in self.cells))
                for state, label in svg.STATES.items()]

    @property
    def summary(self) -> str:
        """The strip in words (its text alternative)."""
        if not self.cells:
            return f"No tick of job {self.job_name} yet."
        states = ", ".join(f"{count} {svg.STATES[state].split(' (')[0].lower()}" for state, count in
                           self.counts.items())
        return (f"Last {len(self.cells)} ticks of job {self.job_name}, {self._shown(self.cells[0].tick)} to "
                f"{self._shown(self.cells[-1].tick)}: {states}.")

    def _shown(self, moment: datetime) -> str:
        return show_time(moment, self.zone)

    @property
    def pitch(self) -> float:
        """The page's cell pitch: wide cells for few ticks, 8 units for 150 and more (the page scales it down)."""
        return max(8.0, min(28.0, 1200 / max(1, len(self.cells))))

    def strip(self, *, compact: bool = False) -> SafeString:
        cells = [svg.StripCell(cell.tick.astimezone(UTC).isoformat(), cell.state, cell.title) for cell in self.cells]
        if compact:
            return svg.strip(cells, label=self.summary, cell=4, gap=1, height=16)
        axis = (self._shown(self.cells[0].tick), self._shown(self.cells[-1].tick)) if self.cells else None
        gap = 2 if self.pitch >= 12 else 1
        return svg.strip(cells, label=self.summary, cell=self.pitch - gap, gap=gap, height=28, axis=axis)

    @property
    def durations(self) -> list[float]:
        return [cell.duration.total_seconds() for cell in self.cells if cell.duration is not None]

    @property
    def duration_summary(self) -> str:
        return f"Run durations of job {self.job_name}, tick by tick: {svg.spread(self.durations)}."

    def sparkline(self) -> SafeString:
        points = [svg.Point(None if cell.duration is None else cell.duration.total_seconds(),
                            f"{self._shown(cell.tick)}: took {format_duration(cell.duration)}")
                  for cell in self.cells]
        gap = 2 if self.pitch >= 12 else 1
        return svg.sparkline(points, label=self.duration_summary, pitch=self.pitch, cell=self.pitch - gap,
                             height=48)

    def table(self) -> list[dict[str, str]]:
        """The cells as the page's table shows them (the strip's text alternative)."""
        return [{"tick": cell.tick.astimezone(UTC).isoformat(), "state": cell.state, "label": cell.label,
                 "when": self._shown(cell.tick), "instance": cell.run.instance_id if cell.run else "",
                 "lateness": f"{cell.lateness.total_seconds():+.3f} s" if cell.lateness is not None else "",
                 "duration": format_duration(cell.duration),
                 "fired": ", ".join(f"{instance} {how}".strip() for instance, how in cell.fires)}
                for cell in self.cells]

    @property
    def overdue(self) -> Problem | None:
        return next((problem for problem in self.problems if problem.kind == "overdue"), None)

    @property
    def failing(self) -> Problem | None:
        return next((problem for problem in self.problems if problem.kind == "failing"), None)


@dataclass(frozen=True)
class _Judge:
    """What a job's ticks are judged by: its lock document now, its pauses, its delays."""

    job: Job
    state: LockState
    now: datetime
    zone: tzinfo
    delay: timedelta
    pauses: list[tuple[datetime, datetime | None]]

    def paused(self, tick: datetime) -> bool:
        return any(start <= tick and (end is None or tick <= end) for start, end in self.pauses)

    def held_for(self, tick: datetime) -> bool:
        return self.state.is_held(self.now) and self.state.last_fire_time == tick

    def cell(self, tick: datetime, rows: list[JobRun]) -> TickCell:
        when = show_time(tick, self.zone)
        runs = sorted((row for row in rows if row.outcome in RAN), key=lambda row: row.tick_key is None)
        if runs:
            return self._ran(tick, when, runs[0], rows)
        placeholder = next((row for row in rows if row.outcome in (PLACEHOLDER, ENQUEUED)), None)
        late = any(row.outcome == JobRun.Outcome.SKIPPED_LATE for row in rows)  # taken, then skipped unrun
        if not late and (placeholder is not None or self.state.last_fire_time == tick):
            fires = placeholder.fires if placeholder is not None else []
            state = "running" if self.held_for(tick) else "unrecorded"
            told = "running now" if state == "running" else "taken, but no outcome was recorded"
            if placeholder is not None and placeholder.outcome == ENQUEUED:
                told = f"enqueued as task {placeholder.task_id}; " + (
                    "waiting for or running on a worker" if state == "running" else "no run of it was recorded")
            return TickCell(tick, state, f"{when}: {told}{_fired(fires)}", fires=fires)
        if self.paused(tick):
            return TickCell(tick, "paused", f"{when}: paused (an operator's pause skipped it)")
        if rows:
            skips = "; ".join(f"{row.outcome} on {row.instance_id}" + (f": {row.error}" if row.error else "")
                              for row in rows)
            return TickCell(tick, "skipped", f"{when}: not run: {skips}")
        due = tick + jitter_delay(self.job.name, tick, self.job.jitter) + self.delay
        if due >= self.now:
            return TickCell(tick, "pending", f"{when}: not run yet; missed if no instance runs it by "
                                             f"{show_time(due, self.zone)}")
        return TickCell(tick, "missed", f"{when}: missed: no instance ran it")

    def _ran(self, tick: datetime, when: str, run: JobRun, rows: list[JobRun]) -> TickCell:
        state = RAN_STATES.get(str(run.outcome), "caught_up" if run.catch_up else "succeeded")
        started, finished = utc_time(run, "started_at"), utc_time(run, "finished_at")
        lateness = started - tick if started is not None else None
        duration = finished - started if started is not None and finished is not None else None
        words = {"failed": "failed", "caught_up": "caught up (run late by its catch_up policy)",
                 "succeeded": "succeeded", "timed_out": "timed out (told to stop after its timeout)",
                 "replaced": "replaced (told to stop for a newer tick)"}[state]
        title = f"{when}: {words}{' by a backfill' if run.backfill else ''} on {run.instance_id}"
        if lateness is not None:
            title += f", {lateness.total_seconds():+.3f} s late"
        if duration is not None:
            title += f", took {format_duration(duration)}"
        if state in ("failed", "timed_out") and last_line(run.error):
            title += f"\n{last_line(run.error)}"
        others = [row for row in rows if row is not run]
        fires = run.fires + [(row.instance_id, "" if row.outcome == PLACEHOLDER else row.outcome) for row in others]
        return TickCell(tick, state, title + _fired(fires), run, lateness, duration, fires)


def _fired(fires: list[tuple[str, str]]) -> str:
    if not fires:
        return ""
    return f"\nfired by {len(fires)}: " + ", ".join(f"{instance} {how}".strip() for instance, how in fires)


def _floor(state: LockState) -> datetime | None:
    """Ticks count after this: the document's creation, or the last schedule change (another schedule's before)."""
    floors = [moment for moment in (state.created_at, state.schedule_changed_at) if moment is not None]
    return max(floors, default=None)


def build_timelines(jobs: Iterable[tuple[Job, LockState | None, CronTrigger]], *, now: datetime, zone: tzinfo,
                    limit: int = MAX_TICKS, misfire_grace_time: timedelta = DEFAULT_MISFIRE_GRACE_TIME,
                    ) -> dict[str, Timeline]:
    """The timeline of each (job, lock document, effective trigger), from one query of the history and one
    of the pause spans for them all. A job without a lock document has no ticks yet."""
    wanted = [(job, state, trigger, recent_ticks(trigger, now=now, limit=limit, floor=_floor(state)))
              for job, state, trigger in jobs if state is not None]
    ranges = [Q(job_name=job.name, fire_time__gte=ticks[0], fire_time__lte=ticks[-1])
              for job, _, _, ticks in wanted if ticks]
    rows: dict[tuple[str, datetime], list[JobRun]] = defaultdict(list)
    pauses: dict[str, list[tuple[datetime, datetime | None]]] = defaultdict(list)
    if ranges:
        found = with_utc_times(JobRun.objects.filter(reduce(or_, ranges), manual=False).order_by("pk"),
                               ("fire_time", "started_at", "finished_at"))
        for row in found:
            fire_time = utc_time(row, "fire_time")
            assert fire_time is not None
            rows[(row.job_name, fire_time)].append(row)
        names = [job.name for job, _, _, ticks in wanted if ticks]
        spans = with_utc_times(PauseSpan.objects.filter(job_name__in=names), ("started_at", "ended_at"))
        for span in spans:
            start, end = utc_time(span, "started_at"), utc_time(span, "ended_at")
            assert start is not None and end is not None
            pauses[span.job_name].append((start, end))
    timelines = {}
    for job, state, trigger, ticks in wanted:
        assert state is not None
        delay = alert_delay(job, misfire_grace_time)  # timedelta(0) alerts at once; None (alerts off): the default
        judge = _Judge(job, state, now, trigger.timezone, job.lease + misfire_grace_time if delay is None else delay,
                       [*pauses[job.name], *_current_pause(state, now)])
        problems = job_problems(job, state, trigger, now=now, misfire_grace_time=misfire_grace_time,
                                known_since=now)
        cells = [judge.cell(tick, rows[(job.name, tick)]) for tick in ticks]
        timelines[job.name] = Timeline(job.name, trigger.timezone, cells, problems, _floor(state))
    return timelines


def _current_pause(state: LockState, now: datetime) -> list[tuple[datetime, datetime | None]]:
    """The pause the document holds now (paused_at to paused_until, or on): its ticks are paused even where no
    scheduler was running to skip them."""
    if state.paused and state.paused_at is not None:
        return [(state.paused_at, state.paused_until)]
    return []
