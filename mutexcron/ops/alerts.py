"""Missed and failing runs, told once per incident by the whole fleet.

A job is *overdue* when a nominal tick of its effective schedule (not paused) is older than its
``alert_after`` (default: one lease plus the scheduler's misfire grace, plus the tick's jitter) and no
instance ran that tick or a later one; it is *failing* when its latest run failed (or timed out). Every running
scheduler judges its jobs from the lock documents it already reads at each schedule sync (no extra store read); the
first instance to see a problem opens the incident in the store (:meth:`ControlStore.open_incident`, atomic), so
one ERROR and one ``"overdue"`` (or ``"failing"``) event go out per incident.

A job has one incident, which names its latest condition: ``"failing"`` while its latest run failed (if
ticks are missed too, the failed run is the newer news), else ``"overdue"``. A failed run while overdue turns
the incident into "failing"; a success that leaves a tick missed (a manual run, or a caught-up tick with
later ones still unrun) turns "failing" into "overdue": one alert each, the store's swap atomic too. It
recovers (one ``"recovered"``) only once neither holds and a run succeeded after it opened. A missed tick is
covered only by a run of that tick or a later one, so a manual run (``run_now``, which takes no tick) clears
"failing" but never "overdue", and one missed tick raises one incident however many runs, manual or caught
up, come before the schedule is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeAlias

from ..errors import StoreUnavailable
from ..stores.base import FAILING
from ..stores.control import ControlStore
from .control import jitter_delay

if TYPE_CHECKING:
    from ..cron import CronTrigger
    from ..registry import Job
    from ..stores import LockState, LockStore

__all__ = ["ALERT_EVENTS", "Alert", "Alerts", "Problem", "alert_delay", "job_problems"]

logger = logging.getLogger("mutexcron.alerts")
ProblemKind = Literal["overdue", "failing"]
ALERT_EVENTS = ("overdue", "failing", "recovered", "paused")  # "paused": mutexcron.running.failures
MAX_INCIDENT = 255  # what a store keeps of an incident's text


@dataclass(frozen=True)
class Problem:
    """What is wrong with one job now: ``since`` is the missed tick (overdue) or when the failed run ended."""

    job_name: str
    kind: ProblemKind
    since: datetime
    detail: str

    @property
    def incident(self) -> str:
        """The incident's text as the store keeps it."""
        return f"{self.kind} since {self.since.isoformat()}: {self.detail}"[:MAX_INCIDENT]


@dataclass(frozen=True)
class Alert:
    """What ``"overdue"``, ``"failing"`` and ``"recovered"`` listeners get: the incident, and who told it."""

    job_name: str
    event: str  # "overdue", "failing", "recovered" or "paused" (pause_on_failure)
    incident: str  # the store's text of the incident ("overdue since <tick>: ..." or "failing since ...")
    instance_id: str  # the instance that opened (or closed) it
    at: datetime  # when this instance noticed
    problem: Problem | None = None  # what was found (None for "recovered")

    @property
    def kind(self) -> str:
        return incident_kind(self.incident)


def incident_kind(incident: str) -> str:
    """The kind an incident's text names (``"overdue"`` or ``"failing"``): its first word, as Problem writes it."""
    return incident.split(" ", 1)[0]


def alert_delay(job: Job, misfire_grace_time: timedelta) -> timedelta | None:
    """How long after a tick that nobody ran ``job`` is overdue; None if its alerts are off."""
    if job.alert_after is False:
        return None
    if job.alert_after is None or job.alert_after is True:
        return job.lease + misfire_grace_time
    return job.alert_after


def overdue_tick(job: Job, state: LockState, trigger: CronTrigger, *, now: datetime, delay: timedelta,
                 known_since: datetime) -> datetime | None:
    """The first tick that no instance ran and that is past its alert delay at ``now``, or None. Ticks count
    from the lock's last fire, the end of a pause, or the document's creation (``known_since`` if unknown);
    none while paused."""
    if state.is_paused(now):
        return None
    floors = [state.last_fire_time, state.pause_ended_at(now), state.created_at or known_since]
    floor = max(floor for floor in floors if floor is not None)
    if floor + delay >= now:  # the next tick comes after the floor: not past its delay yet, no cron to compute
        return None
    tick = trigger.next_after(floor)
    if tick is None or tick + jitter_delay(job.name, tick, job.jitter) + delay >= now:
        return None
    return tick


def job_problems(job: Job, state: LockState | None, trigger: CronTrigger, *, now: datetime,
                 misfire_grace_time: timedelta, known_since: datetime) -> list[Problem]:
    """Overdue and failing, in that order, as ``state`` shows them at ``now`` (none if alerts are off)."""
    delay = alert_delay(job, misfire_grace_time)
    if state is None or delay is None:
        return []
    problems: list[Problem] = []
    tick = overdue_tick(job, state, trigger, now=now, delay=delay, known_since=known_since)
    if tick is not None:
        problems.append(Problem(job.name, "overdue", tick, f"no instance ran the tick of {tick.isoformat()} "
                                                           f"(alert after {delay})"))
    if state.last_outcome in FAILING:  # a timed-out run is a failure too
        since = state.last_finished_at or now
        problems.append(Problem(job.name, "failing", since, state.last_error or "its latest run failed"))
    return problems


def recovered(state: LockState) -> bool:
    """True once a run succeeded after the open incident was opened (whether its condition is gone is judged apart)."""
    return (state.incident is not None and state.incident_at is not None and state.last_success_at is not None
            and state.last_success_at > state.incident_at)


def condition(problems: list[Problem]) -> Problem | None:
    """The problem an incident names: failing if the latest run failed, else overdue, else None."""
    return next((problem for problem in problems if problem.kind == "failing"), problems[0] if problems else None)


# One job's problems as a lock document shows them at a moment.
Judge: TypeAlias = "Callable[[LockState, datetime], list[Problem]]"


@dataclass(frozen=True)
class _Seen:
    """An incident this instance saw open at its last check, and how to judge its job again after a success."""

    incident: str
    judge: Judge


class Alerts:
    """One scheduler's alerts: judge its jobs at each check, open and close incidents, tell the listeners. On a
    store without the control plane (no incidents to claim) there are none: every call does nothing."""

    def __init__(self, store: LockStore, *, instance_id: Callable[[], str], misfire_grace_time: timedelta,
                 notify: Callable[[Alert, str], None], overdue: Callable[[str, bool], None]) -> None:
        self.store = store if isinstance(store, ControlStore) else None
        self.instance_id, self.misfire_grace_time = instance_id, misfire_grace_time
        self._notify, self._overdue = notify, overdue
        self._lock = threading.Lock()
        self._open: dict[str, _Seen] = {}  # job name -> the incident open at the last check
        self._known_since: datetime | None = None

    def check(self, jobs: Iterable[Job], states: Mapping[str, LockState], trigger: Callable[[Job], CronTrigger],
              now: datetime) -> None:
        """Judge every job from ``states`` (just read); open, turn or close incidents where this instance is
        first."""
        if self.store is None:
            return
        known_since = self._known_since = self._known_since or now  # documents from before created_at
        for job in jobs:
            state = states.get(job.name)
            judge: Judge = partial(self._judge, job, trigger(job), known_since)
            found = [] if state is None else judge(state, now)
            self._overdue(job.name, any(problem.kind == "overdue" for problem in found))
            if state is not None:
                self._settle(job.name, state, found, judge, now)

    def succeeded(self, job_name: str, now: datetime) -> None:
        """A run of ``job_name`` just succeeded here: if this instance saw an incident open, judge the job again
        from a fresh read at once (one read, only then), rather than at the next sync."""
        with self._lock:
            seen = self._open.get(job_name)
        if seen is None or self.store is None:
            return
        try:
            state = self.store.lock(job_name)
        except StoreUnavailable as error:
            logger.debug("job %r: could not read it after a success (checked again at the next sync): %s",
                         job_name, error)
            return
        if state is not None:
            self._settle(job_name, state, seen.judge(state, now), seen.judge, now)

    def _judge(self, job: Job, trigger: CronTrigger, known_since: datetime, state: LockState,
               now: datetime) -> list[Problem]:
        return job_problems(job, state, trigger, now=now, misfire_grace_time=self.misfire_grace_time,
                            known_since=known_since)

    def _settle(self, job_name: str, state: LockState, found: list[Problem], judge: Judge, now: datetime) -> None:
        """Make the store's incident name the job's condition in ``found``: open it, turn the open one into
        it, or close the open one once no problem is left and a run succeeded since it opened."""
        incident, problem = state.incident, condition(found)
        if incident is None and problem is not None:
            incident = self._open_incident(problem, now)
        elif incident is not None and problem is None and recovered(state):
            incident = None if self._close(job_name, incident, now) else incident
        elif incident is not None and problem is not None and incident_kind(incident) != problem.kind:
            incident = self._open_incident(problem, now, replacing=incident)
        with self._lock:
            if incident is None:
                self._open.pop(job_name, None)
            else:
                self._open[job_name] = _Seen(incident, judge)

    def _open_incident(self, problem: Problem, now: datetime, replacing: str | None = None) -> str | None:
        """Open ``problem``'s incident (or turn ``replacing`` into it); its text if this call did, else None."""
        if self.store is None:
            return None
        try:
            opened = self.store.open_incident(problem.job_name, problem.incident, replacing=replacing)
        except StoreUnavailable as error:
            logger.debug("job %r: could not open its incident (checked again at the next sync): %s",
                         problem.job_name, error)
            return None
        if not opened:  # another instance was first; it told the fleet
            return None
        logger.error("job %r is %s since %s: %s", problem.job_name, problem.kind, problem.since.isoformat(),
                     problem.detail)
        self._notify(Alert(problem.job_name, problem.kind, problem.incident, self.instance_id(), now, problem),
                     problem.kind)
        return problem.incident

    def _close(self, job_name: str, incident: str, now: datetime) -> bool:
        if self.store is None:
            return False
        try:
            closed = self.store.close_incident(job_name, incident)
        except StoreUnavailable as error:
            logger.debug("job %r: could not close its incident (checked again at the next sync): %s", job_name,
                         error)
            return False
        if closed:
            logger.warning("job %r recovered: a run succeeded after %s", job_name, incident)
            self._notify(Alert(job_name, "recovered", incident, self.instance_id(), now), "recovered")
        return True  # closed here or by another instance: not open any more
