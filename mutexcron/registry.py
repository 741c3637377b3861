"""Declaring jobs: the :func:`mutex_cron` decorator, :class:`Job` and the :class:`Registry` that holds them."""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta, tzinfo
from typing import Any, Literal, TypeVar, cast

from ._options import alert_after as check_alert_after
from ._options import duration, http_url, shown
from ._options import zone as as_zone
from .cron import CronSpec, CronTrigger, parse_cron
from .cron_intervals import check_jitter
from .declarations import DeclarationProblem, keep, location
from .errors import CronSpecError, DuplicateJobError, JobDefinitionError, UnknownJobError
from .records import JobContext

__all__ = ["BUSY_POLICIES", "CATCH_UP_POLICIES", "RUN_ON", "BusyPolicy", "CatchUp", "Job", "Registry", "RunOn",
           "callable_target", "check_on_busy", "check_run_on", "default_registry", "mutex_cron", "run_limit",
           "validate_job_name"]

BusyPolicy = Literal["skip", "wait", "raise", "buffer_one", "replace"]
BUSY_POLICIES: tuple[str, ...] = ("skip", "wait", "raise", "buffer_one", "replace")
CatchUp = Literal["skip", "latest", "all"]
CATCH_UP_POLICIES: tuple[str, ...] = ("skip", "latest", "all")
RunOn = Literal["here", "tasks"]
RUN_ON: tuple[str, ...] = ("here", "tasks")
MAX_NAME_LENGTH = 200
# Letters (any script), digits and a few separators. No spaces, quotes, "$" or braces: the name is a
# Redis key part (braces would change its Cluster hash tag), a Mongo _id and a SQL primary key.
_NAME_RE = re.compile(r"\w[\w.:@/<>+-]*")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def validate_job_name(name: object) -> str:
    """Return ``name`` if it is a usable job name, else raise :class:`JobDefinitionError` naming it."""
    if not isinstance(name, str):
        raise JobDefinitionError(f"job name must be a string, not {type(name).__name__}")
    shown = repr(name) if len(name) <= 60 else repr(name[:60]) + f"... ({len(name)} characters)"
    if not name:
        raise JobDefinitionError("job name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise JobDefinitionError(f"job name {shown} is longer than {MAX_NAME_LENGTH} characters")
    if not _NAME_RE.fullmatch(name):
        bad = next((ch for ch in name if not _NAME_RE.fullmatch("a" + ch)), name[0])
        raise JobDefinitionError(
            f"job name {shown} contains {bad!r}; start with a letter, digit or _ and use letters, digits "
            "and . _ - : @ / < > + only"
        )
    return name


@dataclass(frozen=True)
class Job:
    """A declared job: what to run, when, and how its lock behaves."""

    name: str
    func: Callable[..., Any]
    spec: CronSpec
    lease: timedelta
    hold_at_least: timedelta
    timezone: tzinfo | None  # None: the scheduler's time zone
    on_busy: BusyPolicy
    takes_context: bool
    catch_up: CatchUp = "skip"  # what to run of the ticks missed while no instance ran (see docs/fleet-control.md)
    catch_up_window: timedelta = timedelta(hours=1)  # only ticks this recent are caught up
    jitter: timedelta = timedelta(0)  # each tick runs up to this much late, the same on every instance
    alert_after: timedelta | bool | None = None  # overdue this long after a tick nobody ran (None: the default
    # of one lease plus the scheduler's misfire grace; False: no alerts); see mutexcron.ops.alerts
    ping_url: str | None = None  # GET after each run this instance ran ("/fail" after the path on failure);
    # a PingURL, whose repr is masked (mutexcron.running.pings)
    runtime: bool = False  # a run-time schedule (Scheduler.add_schedule), not declared in code
    run_on: RunOn = "here"  # "tasks": the lock winner enqueues the body on the scheduler's TaskQueue
    # (docs/run-on-tasks.md)
    timeout: timedelta | None = None  # the body is told to stop (ctx.cancelled) after this (docs/run-limits.md)
    start_deadline: timedelta | None = None  # a tick whose body would start later than this is skipped_late
    pause_on_failure: int | None = None  # pause itself fleet-wide after this many failed runs in a row (None: never)

    def trigger(self, default_timezone: tzinfo) -> CronTrigger:
        return CronTrigger(self.spec, self.timezone or default_timezone)

    def call(self, ctx: JobContext) -> Any:
        """Run the body (an ``async def`` body runs in its own event loop)."""
        args = (ctx,) if self.takes_context else ()
        result = self.func(*args)
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    @property
    def location(self) -> str:
        code = getattr(self.func, "__code__", None)
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
        return f"{getattr(self.func, '__module__', '?')}.{getattr(self.func, '__qualname__', self.func)}{where}"


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _takes_context(func: Callable[..., Any], job: str) -> bool:
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(required) > 1 or any(p.kind is p.KEYWORD_ONLY for p in required):
        raise JobDefinitionError(
            f"job {job!r}: the function must take no arguments or one (the JobContext), "
            f"but requires {', '.join(p.name for p in required)}"
        )
    return bool(positional) or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _is_task(func: object) -> bool:
    """True for a django.tasks ``Task`` (what ``@task`` returns): a run-time schedule enqueues it."""
    return callable(getattr(func, "enqueue", None)) and callable(getattr(func, "func", None))


def target_name(func: object) -> str:
    """The default name of a target: its function's ``module.qualname`` (a django.tasks Task's function's)."""
    inner = getattr(func, "func", func) if _is_task(func) else func
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"


class Registry:
    """The jobs declared with :func:`mutex_cron`, and the targets run-time schedules may call; a scheduler runs
    every job of its registry. ``base``: a registry whose jobs and targets this one shows too (a scheduler keeps
    its run-time schedules in one layered on the declared jobs' registry)."""

    def __init__(self, *, base: Registry | None = None) -> None:
        self._jobs: dict[str, Job] = {}
        self._targets: dict[str, Any] = {}  # functions, and django.tasks Tasks (not callable)
        self._problems: list[DeclarationProblem] = []  # declarations that failed while collecting (declarations.py)
        self._lock = threading.Lock()
        self.base = base

    def allow(self, func: T, name: str | None = None) -> T:
        """Let run-time schedules call ``func`` (a function, or a django.tasks ``@task``, which they enqueue) by
        ``name`` (default ``module.qualname``); only allowed targets can be called. Returns ``func``."""
        if not callable(func) and not _is_task(func):
            raise JobDefinitionError(f"a run-time schedule's target must be a function or a django.tasks task, "
                                     f"not {shown(func)}")
        key = name if name is not None else target_name(func)
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_NAME_LENGTH:
            raise JobDefinitionError(f"target name must be a non-empty string of at most {MAX_NAME_LENGTH} "
                                     f"characters, not {shown(key)}")
        with self._lock:
            existing = self._targets.get(key)
            if existing is not None and existing is not func:  # two closures of one factory share a qualname
                raise DuplicateJobError(f"target name {key!r} is allowed twice, for two different functions: "
                                        f"{location(existing)} and {location(func)}; pass name= to one of them")
            self._targets[key] = func
        return func

    def targets(self) -> dict[str, Any]:
        """The allowed targets by name, sorted (this registry's and its base's)."""
        found = dict(self.base.targets()) if self.base is not None else {}
        found.update(self._targets)
        return dict(sorted(found.items()))

    def target(self, name: str) -> Any:
        """The allowed target ``name``, or :class:`JobDefinitionError` listing the allowed ones."""
        targets = self.targets()
        if name not in targets:
            known = ", ".join(targets) or "none (mark one with @callable_target or Registry.allow)"
            raise JobDefinitionError(f"target {shown(name)} is not allowed (allowed targets: {known})")
        return targets[name]

    def name_of(self, func: object) -> str | None:
        """The name ``func`` is allowed under, or None."""
        return next((name for name, target in self.targets().items() if target is func), None)

    def add(self, job: Job) -> None:
        """Add ``job``; a different function under the same name raises :class:`DuplicateJobError`."""
        with self._lock:
            existing = self._jobs.get(job.name)
            if existing is not None and existing.location != job.location:
                raise DuplicateJobError(
                    f"job name {job.name!r} is declared twice: by {existing.location} and by {job.location}; "
                    "pass name= to one of them"
                )
            # The same function declared again (a module imported twice or reloaded) replaces itself, and the
            # failure its declaration had before (kept while collecting) is gone.
            self._jobs[job.name] = job
            self._problems = [p for p in self._problems if (p.job, p.location) != (job.name, job.location)]

    def add_problem(self, problem: DeclarationProblem) -> None:
        """Keep a job declaration that failed while collecting (once: a module may be imported again)."""
        with self._lock:
            if str(problem) not in map(str, self._problems):
                self._problems.append(problem)

    def problems(self) -> list[DeclarationProblem]:
        """The kept declarations that failed, this registry's and its base's: jobs that will not run."""
        return [*(self.base.problems() if self.base is not None else ()), *self._problems]

    def get(self, name: str) -> Job:
        if self.base is not None and name in self.base:
            return self.base.get(name)  # a job declared in code wins over a run-time schedule of its name
        try:
            return self._jobs[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise UnknownJobError(f"no job named {name!r} is declared (declared jobs: {known})") from None

    def remove(self, name: str) -> None:
        """Forget job ``name`` and its failed declarations."""
        with self._lock:
            self._jobs.pop(name, None)
            self._problems = [problem for problem in self._problems if problem.job != name]

    def clear(self) -> None:
        with self._lock:
            self._jobs.clear()
            self._problems.clear()

    def names(self) -> list[str]:
        return sorted(set(self._jobs) | set(self.base.names() if self.base is not None else ()))

    def __iter__(self) -> Iterator[Job]:
        return iter([self.get(name) for name in self.names()])

    def __len__(self) -> int:
        return len(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._jobs or (self.base is not None and name in self.base)

    def __repr__(self) -> str:
        return f"<Registry jobs={self.names()!r}>"


default_registry = Registry()


def check_run_on(run_on: object, job_name: str) -> RunOn:
    """``run_on`` if it is ``"here"`` or ``"tasks"``; JobDefinitionError naming the job and the value otherwise."""
    if run_on == "here":
        return "here"
    if run_on == "tasks":
        return "tasks"
    raise JobDefinitionError(f"job {job_name!r}: run_on must be one of {RUN_ON}, not {shown(run_on)}")


def check_on_busy(on_busy: object, job_name: str) -> BusyPolicy:
    """``on_busy`` if it is one of BUSY_POLICIES; JobDefinitionError naming the job and the value otherwise."""
    if on_busy not in BUSY_POLICIES:
        raise JobDefinitionError(f"job {job_name!r}: on_busy must be one of {BUSY_POLICIES}, not {on_busy!r}")
    return cast("BusyPolicy", on_busy)


def run_limit(value: object, job_name: str, field: str) -> timedelta | None:
    """A job's ``timeout`` or ``start_deadline``: None, or a positive finite duration (a timedelta or seconds);
    JobDefinitionError naming the job, the field and the value otherwise."""
    if value is None:
        return None
    return duration(value, what=f"job {job_name!r}: {field}", error=JobDefinitionError, allow_zero=False)


def callable_target(name: str | None = None, *, registry: Registry | None = None) -> Callable[[T], T]:
    """Mark a function (or a django.tasks ``@task``) as a target run-time schedules may call, by ``name``
    (default ``module.qualname``): :meth:`Registry.allow` on ``registry`` (default: the default registry)."""
    if callable(name):
        raise TypeError(f"@callable_target needs parentheses: write @callable_target() (or "
                        f"@callable_target(\"a-name\")) above {location(name)}, not a bare @callable_target")
    check_registry(registry, what="callable_target registry", error=JobDefinitionError)

    def decorate(func: T) -> T:
        return (registry if registry is not None else default_registry).allow(func, name)

    return decorate


def check_registry(value: object, *, what: str, error: type[Exception]) -> Registry | None:
    """``value`` if it is a Registry (or None, the default registry)."""
    if value is not None and not isinstance(value, Registry):
        raise error(f"{what} must be a Registry, not {shown(value)}")
    return value


def failures_in_a_row(value: object, job_name: str) -> int | None:
    """A job's ``pause_on_failure``: False (never: None), or a number of failed runs in a row, at least 1."""
    if value is False or value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobDefinitionError(f"job {job_name!r}: pause_on_failure must be False or a number of failed runs in a "
                                 f"row (an int of at least 1), not {value!r}")
    return value


def mutex_cron(
    spec: str,
    *,
    name: str | None = None,
    lease: timedelta | float = timedelta(minutes=10),
    hold_at_least: timedelta | float = timedelta(0),
    timezone: str | tzinfo | None = None,
    on_busy: BusyPolicy = "skip",
    registry: Registry | None = None,
    catch_up: CatchUp = "skip",
    catch_up_window: timedelta | float = timedelta(hours=1),
    jitter: timedelta | float = timedelta(0),
    alert_after: timedelta | float | bool | None = None,
    ping_url: str | None = None,
    run_on: RunOn = "here",
    timeout: timedelta | float | None = None,
    start_deadline: timedelta | float | None = None,
    pause_on_failure: int | bool = False,
) -> Callable[[F], F]:
    """Declare ``func`` as a job that fires on every instance at ``spec`` and runs on one.

    The function is returned unchanged: calling it directly runs it without any lock.
    Every problem (bad spec, name, lease, zone, policy) raises here, at declaration time.
    ``catch_up`` (``"skip"``, ``"latest"``, ``"all"``) says what runs of the ticks missed within
    ``catch_up_window`` when an instance starts or its store comes back; ``jitter`` delays each tick's run
    by a fixed amount in ``[0, jitter)`` derived from the job name and fire time (below the shortest interval
    between its ticks, or a tick could run after the next one and be lost). ``alert_after``: how long
    after a tick that no instance ran the job is overdue (None: one lease plus the misfire grace; False:
    never); ``ping_url``: a dead man's switch GET after each run (``/fail`` after its path, before its query, on
    failure; ``/start`` as the body starts). ``on_busy``: what a tick does while an earlier run holds the lock:
    ``"skip"``, ``"wait"`` (up to a lease), ``"raise"``, ``"buffer_one"`` (runs once that run ends, one such tick
    kept fleet-wide), ``"replace"`` (the running body is told to stop; runs once it released: docs/overlap.md).
    ``run_on="tasks"``: the instance that wins a tick's lock does not run the body but enqueues one task for it on
    the scheduler's TaskQueue, which a task worker runs under the same lock (docs/jobs.md).
    ``timeout``: a body still running this long is told to stop (``ctx.cancelled``) and recorded ``timed_out``;
    ``start_deadline``: a tick whose body would start later than this after its time is recorded ``skipped_late``
    instead (docs/run-limits.md). ``pause_on_failure``: after that many failed (or timed-out) runs in a row the job
    pauses itself on every instance, with a ``"paused"`` alert (False: never; docs/monitoring.md).
    A bad declaration inside :func:`mutexcron.declarations.collecting` is kept in the registry (``problems()``)
    instead, so that the module's later jobs are declared (Django's discovery of ``cron.py``).
    """
    if callable(spec):
        raise TypeError(f"@mutex_cron needs a cron expression: write @mutex_cron(\"0 * * * *\") (your schedule) above "
                        f"{location(spec)}, not a bare @mutex_cron")

    def decorate(func: F) -> F:
        home = registry if isinstance(registry, Registry) else default_registry
        try:
            home.add(declare(func))
        except (CronSpecError, JobDefinitionError) as error:
            intended = name if isinstance(name, str) else target_name(func)  # module.qualname
            if not keep(problem := DeclarationProblem(intended, location(func), error)):
                raise
            home.add_problem(problem)
        return func

    def declare(func: F) -> Job:
        if not callable(func):
            raise JobDefinitionError(f"@mutex_cron({spec!r}) must decorate a function, not {func!r}")
        job_name = validate_job_name(name if name is not None else f"{func.__module__}.{func.__qualname__}")
        parsed = parse_cron(spec, job_name=job_name)
        lease_duration = duration(lease, what=f"job {job_name!r}: lease", error=JobDefinitionError, allow_zero=False)
        hold = duration(hold_at_least, what=f"job {job_name!r}: hold_at_least", error=JobDefinitionError)
        if hold > lease_duration:
            raise JobDefinitionError(
                f"job {job_name!r}: hold_at_least ({hold}) must not exceed lease ({lease_duration})"
            )
        policy = check_on_busy(on_busy, job_name)
        zone = None if timezone is None else as_zone(timezone, what=f"job {job_name!r}", error=JobDefinitionError)
        check_registry(registry, what=f"job {job_name!r}: registry", error=JobDefinitionError)
        if catch_up not in CATCH_UP_POLICIES:
            raise JobDefinitionError(
                f"job {job_name!r}: catch_up must be one of {CATCH_UP_POLICIES}, not {catch_up!r}")
        window = duration(catch_up_window, what=f"job {job_name!r}: catch_up_window", error=JobDefinitionError,
                          allow_zero=False)
        spread = duration(jitter, what=f"job {job_name!r}: jitter", error=JobDefinitionError)
        check_jitter(job_name, parsed, spread, error=JobDefinitionError)
        alert = check_alert_after(alert_after, what=f"job {job_name!r}: alert_after", error=JobDefinitionError)
        ping = http_url(ping_url, what=f"job {job_name!r}: ping_url", error=JobDefinitionError)
        where = check_run_on(run_on, job_name)
        return Job(job_name, func, parsed, lease_duration, hold, zone, policy, _takes_context(func, job_name),
                   catch_up, window, spread, alert, ping, run_on=where,
                   timeout=run_limit(timeout, job_name, "timeout"),
                   start_deadline=run_limit(start_deadline, job_name, "start_deadline"),
                   pause_on_failure=failures_in_a_row(pause_on_failure, job_name))

    return decorate
