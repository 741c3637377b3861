"""Schedules created at run time (:meth:`Scheduler.add_schedule`): their definition as the lock store keeps it
(JSON text on the job's lock document), checked before anything is stored, and the :class:`Job` each instance
builds from it. Only targets allowed in the registry (``@callable_target``, ``Registry.allow``) can be called:
stored data names a target, never a dotted path to import. See docs/schedules.md."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from ._options import duration, shown
from ._options import zone as as_zone
from .cron import parse_cron
from .errors import CronSpecError, JobDefinitionError, SchedulerConfigError
from .registry import (
    CATCH_UP_POLICIES,
    Job,
    Registry,
    _is_task,
    check_on_busy,
    failures_in_a_row,
    run_limit,
    validate_job_name,
)
from .stores import ControlStore, LockState, LockStore, supports_control
from .stores.base import MAX_DEFINITION
from .zones import zone_name

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import tzinfo

    from .records import JobContext

__all__ = ["DEFAULT_LEASE", "MAX_DEFINITION", "OVERLAP_POLICIES", "RUN_ON", "RuntimeCall", "RuntimeSchedules",
           "ScheduleDefinition", "check_overlap", "checked_definition", "lease_of", "run_options", "target_key",
           "with_stored", "zone_of"]

logger = logging.getLogger("mutexcron.scheduler")

RUN_ON: tuple[str, ...] = ("here", "tasks")
OVERLAP_POLICIES = ("buffer_one", "replace")  # the busy policies whose next-tick slot the store keeps
DEFAULT_LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class ScheduleDefinition:
    """What a run-time schedule runs and when: the target's name, its JSON kwargs and the job's options (some of
    :func:`~mutexcron.mutex_cron`'s: zone, lease, catch-up, where it runs, timeout, start deadline, busy policy and
    pause on failure)."""

    target: str
    spec: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    timezone: str | None = None  # an IANA name (None: the scheduler's zone)
    lease: timedelta = DEFAULT_LEASE
    catch_up: str = "skip"
    run_on: str = "here"
    timeout: timedelta | None = None
    start_deadline: timedelta | None = None
    on_busy: str = "skip"
    pause_on_failure: int | None = None  # None: never

    def as_dict(self) -> dict[str, Any]:
        """The definition as its JSON object holds it (durations in seconds, None for none)."""
        return {"target": self.target, "spec": self.spec, "kwargs": self.kwargs, "timezone": self.timezone,
                "lease": self.lease.total_seconds(), "catch_up": self.catch_up, "run_on": self.run_on,
                "timeout": _seconds(self.timeout), "start_deadline": _seconds(self.start_deadline),
                "on_busy": self.on_busy, "pause_on_failure": self.pause_on_failure}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), allow_nan=False, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ScheduleDefinition:
        """The definition in ``text``; ValueError if it is not one (a store's document edited by hand). A key it
        lacks (a definition stored by an older release) takes its default."""
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("target"), str) or not isinstance(
                data.get("spec"), str) or not isinstance(data.get("kwargs", {}), dict):
            raise ValueError(f"not a schedule definition: {text[:200]!r}")
        return cls(data["target"], data["spec"], data.get("kwargs", {}), data.get("timezone"),
                   timedelta(seconds=float(data.get("lease", DEFAULT_LEASE.total_seconds()))),
                   str(data.get("catch_up", "skip")), str(data.get("run_on", "here")),
                   _duration(data.get("timeout")), _duration(data.get("start_deadline")),
                   str(data.get("on_busy", "skip")), data.get("pause_on_failure"))

    def job(self, name: str, registry: Registry) -> Job:
        """The job this definition makes under ``name``, calling the target allowed in ``registry``; every
        problem (an unknown target, a bad spec, kwargs that do not fit) is a JobDefinitionError naming it."""
        what = f"schedule {name!r}"
        func = registry.target(self.target)
        try:
            spec = parse_cron(self.spec, job_name=name)
            zone = zone_name(self.timezone, job_name=name)
        except CronSpecError as error:
            raise JobDefinitionError(f"{what}: {error}") from None
        tz = None if zone is None else as_zone(zone, what=what, error=JobDefinitionError)
        lease = duration(self.lease, what=f"{what}: lease", error=JobDefinitionError, allow_zero=False)
        if self.catch_up not in CATCH_UP_POLICIES:
            raise JobDefinitionError(f"{what}: catch_up must be one of {CATCH_UP_POLICIES}, not {self.catch_up!r}")
        if self.run_on not in RUN_ON:
            raise JobDefinitionError(f"{what}: run_on must be one of {RUN_ON}, not {self.run_on!r}")
        options = run_options(name, self.timeout, self.start_deadline, self.on_busy, self.pause_on_failure)
        call = RuntimeCall(self.target, func, self.kwargs)
        call.check(what)
        return Job(name, call, spec, lease, timedelta(0), tz, options["on_busy"], True,
                   self.catch_up, runtime=True, run_on=self.run_on,  # type: ignore[arg-type]
                   timeout=options["timeout"], start_deadline=options["start_deadline"],
                   pause_on_failure=options["pause_on_failure"])


def run_options(name: str, timeout: object, start_deadline: object, on_busy: object,
                pause_on_failure: object) -> dict[str, Any]:
    """The run options of schedule ``name`` (ScheduleDefinition's fields), checked by the rules and with the errors
    of :func:`~mutexcron.mutex_cron`: timeouts as timedeltas, ``pause_on_failure=False`` as None."""
    return {"timeout": run_limit(timeout, name, "timeout"),
            "start_deadline": run_limit(start_deadline, name, "start_deadline"),
            "on_busy": check_on_busy(on_busy, name), "pause_on_failure": failures_in_a_row(pause_on_failure, name)}


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _duration(seconds: object) -> timedelta | None:
    """A stored duration (seconds, or null) as a timedelta; ValueError if it is neither."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"not a number of seconds: {shown(seconds)}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"not a number of seconds: {shown(seconds)}") from None


@functools.lru_cache(maxsize=1024)
def _inspected(func: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(func)


def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    """``func``'s signature, inspected once per target (many schedules share few targets; an unhashable callable
    object each time); None for one without (a builtin)."""
    inspecting: Callable[[Callable[..., Any]], inspect.Signature] = _inspected
    try:
        hash(func)
    except TypeError:
        inspecting = inspect.signature
    try:
        return inspecting(func)
    except (TypeError, ValueError):
        return None


class RuntimeCall:
    """A run-time schedule's body: ``target(**kwargs)`` (with ``ctx=`` the JobContext if the target takes
    ``ctx``), or ``target.enqueue(**kwargs)`` for a django.tasks Task."""

    __signature__ = inspect.Signature([inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)])

    def __init__(self, name: str, target: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.name, self.target, self.kwargs = name, target, kwargs
        self.__module__ = getattr(target, "__module__", __name__)  # Job.location names the target
        self.__qualname__ = f"target {name}"
        self._signature = _signature(getattr(target, "func", target) if _is_task(target) else target)
        self._takes_ctx = (self._signature is not None and "ctx" in self._signature.parameters
                           and not _is_task(target))

    def check(self, what: str) -> None:
        """JobDefinitionError if ``kwargs`` do not fit the target's signature."""
        if self._signature is None:
            return  # a builtin without a signature: its call will say
        given = dict(self.kwargs, ctx=None) if self._takes_ctx and "ctx" not in self.kwargs else self.kwargs
        try:
            self._signature.bind(**given)
        except TypeError as error:
            raise JobDefinitionError(f"{what}: kwargs {shown(self.kwargs)} do not fit target {self.name!r}: "
                                     f"{error}") from None

    def __call__(self, ctx: JobContext) -> Any:
        if _is_task(self.target):
            return cast("Any", self.target).enqueue(**self.kwargs)  # a django.tasks Task
        if self._takes_ctx and "ctx" not in self.kwargs:
            return self.target(ctx=ctx, **self.kwargs)
        return self.target(**self.kwargs)

    def __repr__(self) -> str:
        return f"<RuntimeCall {self.name}>"


def checked_definition(name: str, definition: ScheduleDefinition, registry: Registry) -> str:
    """The JSON text to store for ``definition`` under ``name``, after every check a run would make; a
    JobDefinitionError names the field and value (and nothing is stored)."""
    validate_job_name(name)
    if name in registry and not registry.get(name).runtime:
        raise JobDefinitionError(f"schedule {name!r}: the name is a job declared in code "
                                 f"({registry.get(name).location}); pick another name")
    if not isinstance(definition.spec, str):
        raise JobDefinitionError(f"schedule {name!r}: spec must be a cron string, not {shown(definition.spec)}")
    if not isinstance(definition.kwargs, dict) or not all(isinstance(key, str) for key in definition.kwargs):
        raise JobDefinitionError(f"schedule {name!r}: kwargs must be a dict with string keys, not "
                                 f"{shown(definition.kwargs)}")
    try:
        text = definition.to_json()
    except (TypeError, ValueError, RecursionError) as error:
        raise JobDefinitionError(f"schedule {name!r}: kwargs {shown(definition.kwargs)} are not JSON: "
                                 f"{error}") from None
    if len(text) > MAX_DEFINITION:
        raise JobDefinitionError(f"schedule {name!r}: its definition is {len(text)} characters of JSON, more than "
                                 f"{MAX_DEFINITION}; keep large data elsewhere and pass its key in kwargs")
    ScheduleDefinition.from_json(text).job(name, registry)  # what every instance will build from it
    return text


class RuntimeSchedules:
    """This instance's run-time schedules, kept in ``jobs`` (a registry layered on the declared jobs'), as the
    lock documents last read define them."""

    def __init__(self, jobs: Registry) -> None:
        self.jobs = jobs
        self._texts: dict[str, str] = {}  # name -> the definition its Job was built from
        self._versions: dict[str, int] = {}  # name -> the schedule version of that definition
        self._broken: set[tuple[str, str]] = set()  # (name, definition) already logged as unusable

    def job_from(self, state: LockState) -> Job | None:
        """The job ``state`` defines (None: no definition, a declared job's name, or an unusable definition,
        logged once)."""
        text = state.definition
        if text is None or (self.jobs.base is not None and state.name in self.jobs.base):
            return None
        if self._texts.get(state.name) == text:
            return self.jobs.get(state.name)
        try:
            return ScheduleDefinition.from_json(text).job(state.name, self.jobs)
        except (ValueError, JobDefinitionError) as error:
            if (state.name, text) not in self._broken:
                self._broken.add((state.name, text))
                logger.error("run-time schedule %r cannot run on this instance: %s", state.name, error)
            return None

    def sync(self, states: dict[str, LockState]) -> tuple[list[tuple[Job, LockState]], list[str]]:
        """Follow every document read: the schedules added or redefined since (with their documents), and the
        names of those removed. The jobs table is updated; APScheduler is the caller's."""
        changed: list[tuple[Job, LockState]] = []
        for state in states.values():
            if state.definition is not None and self._texts.get(state.name) != state.definition:
                job = self.put(state)
                if job is not None:
                    changed.append((job, state))
        gone = [name for name in self._texts if states.get(name) is None or states[name].definition is None]
        for name in gone:
            self.drop(name)
        return changed, gone

    def put(self, state: LockState) -> Job | None:
        """Take ``state``'s definition as this instance's job of that name (None: it cannot be built)."""
        job = self.job_from(state)
        if job is not None and state.definition is not None:
            self.jobs.remove(state.name)  # a redefinition may call another target: not a duplicate
            self.jobs.add(job)
            self._texts[state.name] = state.definition
            self._versions[state.name] = state.schedule_version
        return job

    def known(self, name: str, store: LockStore) -> Job:
        """Job ``name`` of this instance, or a run-time schedule of ``store`` it has not read yet (a scheduler
        that never started: the command line, the admin); UnknownJobError if neither."""
        if name not in self.jobs and isinstance(store, ControlStore):
            state = store.lock(name)
            if state is not None and state.definition is not None:
                self.put(state)
        return self.jobs.get(name)

    def current(self, job: Job, state: LockState | None, dropped: Callable[[str], None]) -> Job | None:
        """``job`` as ``state`` defines it now: a declared job as it is, a run-time schedule redefined rebuilt, one
        removed (or with no visible document: None) forgotten here and ``dropped(name)``; None if it is gone."""
        if not job.runtime:
            return job if state is not None else None
        if state is not None and state.definition is not None:
            return self.put(state)
        if self.drop(job.name):
            dropped(job.name)
        return None

    def drop(self, name: str) -> bool:
        """Forget a run-time schedule; True if this instance had it."""
        self._versions.pop(name, None)
        if self._texts.pop(name, None) is None:
            return False
        self.jobs.remove(name)
        return True

    def names(self) -> list[str]:
        return sorted(self._texts)

    def version(self, name: str) -> int | None:
        """The schedule version of run-time schedule ``name`` as this instance built it (None: not one)."""
        return self._versions.get(name)


def with_stored(registry: Registry, states: dict[str, LockState]) -> Registry:
    """``registry``'s jobs and the run-time schedules ``states`` define (those this process can build): what a
    listing or a health check judges, read from a store without a running scheduler."""
    jobs = Registry(base=registry)
    RuntimeSchedules(jobs).sync(states)
    return jobs


def target_key(target: str | Callable[..., Any], registry: Registry, name: str) -> str:
    """The allowed name of ``target`` (given by name or as the function itself)."""
    if isinstance(target, str):
        return target
    found = registry.name_of(target)
    if found is None:
        raise JobDefinitionError(f"schedule {name!r}: target {shown(target)} is not allowed (mark it with "
                                 "@callable_target or Registry.allow)")
    return found


def zone_of(timezone: str | tzinfo | None, name: str) -> str | None:
    """The IANA name a definition keeps for ``timezone``; JobDefinitionError naming the schedule and zone."""
    try:
        return zone_name(timezone, job_name=name)
    except CronSpecError as error:
        raise JobDefinitionError(str(error)) from None


def lease_of(lease: object, name: str) -> timedelta:
    """``lease`` (a timedelta or seconds) checked as a schedule's lease."""
    return duration(lease, what=f"schedule {name!r}: lease", error=JobDefinitionError, allow_zero=False)


def check_overlap(store: LockStore, jobs: Registry | list[Job]) -> None:
    """SchedulerConfigError naming the ``buffer_one``/``replace`` jobs if ``store`` cannot keep their slot."""
    named = [f"{job.name!r} (on_busy={job.on_busy!r})" for job in jobs if job.on_busy in OVERLAP_POLICIES]
    if named and not supports_control(store):
        raise SchedulerConfigError(
            f"job(s) {', '.join(named)} need a lock store that keeps the overlap slot fleet-wide "
            f"(a mutexcron.stores.ControlStore: the memory, Redis, MongoDB and SQL stores), and {store!r} does not")
