"""System checks: bad job declarations (errors), orphan locks, an unreachable store, a Redis eviction
policy that may evict mutexcron's keys, overdue or failing jobs, run_on="tasks" leases shorter than the
workers' visibility timeout and databases that lack mutexcron's migrations (warnings)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from mutexcron import default_registry
from mutexcron.errors import ControlNotSupported, DuplicateJobError, MutexcronError
from mutexcron.stores import LockStore, supports_control
from mutexcron.tasks import TaskBackend, TaskQueue
from mutexcron.tasks.records.base import TaskRecordStore

from .conf import MutexcronSettings, get_settings
from .discovery import declaration_errors, declaration_messages
from .health import health_report
from .sql.databases import migrate_command
from .sql.store import DjangoLockStore
from .sql.tasks.backend import DjangoTaskBackend
from .sql.tasks.records import DjangoTaskRecords

TAG = "mutexcron"


@register(TAG)
def check_declarations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """mutexcron.E001 (invalid job) and E002 (duplicate job name) from the jobs' modules."""
    return declaration_messages(
        declaration_errors, DuplicateJobError, ("mutexcron.E002", "mutexcron.E001"),
        ("Give one of the functions another name= .",
         "Fix the @mutex_cron declaration; the job is not scheduled until then."))


def _orphans(store: Any) -> list[Warning]:
    if not supports_control(store):  # a lock-only store lists no locks
        return []
    declared = set(default_registry.names())
    return [
        Warning(
            f"lock {state.name!r} in {store!r} belongs to no declared job",
            hint=f"If the job was removed or renamed, delete it: manage.py mutexcron unlock --delete {state.name}",
            obj=state.name,
            id="mutexcron.W001",
        )
        for state in store.locks()
        if state.name not in declared and state.definition is None  # a run-time schedule is no orphan
    ]


@register(TAG, Tags.database)
def check_orphan_locks_in_the_database(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W001 for the SQL store: lock rows whose job is no longer declared.

    Like Django's own database checks, only for the databases it is given (``check --database``,
    ``migrate``, the test runner): a plain ``check`` or runserver's must not need a database."""
    if databases is None:
        return []
    with get_settings().open_store() as store:
        if store.database_alias is None or store.database_alias not in databases:  # not a store in the database
            return []
        try:
            return _orphans(store)
        except MutexcronError:  # the table does not exist yet (before migrate)
            return []


@register(TAG, deploy=True)
def check_store(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W002 (deploy): the lock store cannot be reached; W001 for Redis and MongoDB stores."""
    with get_settings().open_store() as store:
        try:
            store.ping()
            return [] if store.database_alias is not None else _orphans(store)  # W001 in the database: the check above
        except MutexcronError as error:
            return [Warning(
                f"the lock store {store!r} cannot be reached: {error}",
                hint="Jobs are skipped (skipped_store_error) until it can; check MUTEXCRON['STORE'] and the server.",
                id="mutexcron.W002",
            )]


# Policies that may evict keys without a TTL (lock hashes, scheduled tasks, task records whose message has not
# come), and those that evict only keys with one (the records of tasks whose message came).
_ALLKEYS = frozenset({"allkeys-lru", "allkeys-lfu", "allkeys-random"})
_VOLATILE = frozenset({"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"})
_EVICTION_RISKS: dict[str, tuple[tuple[frozenset[str], str], ...]] = {
    "the lock store": ((_ALLKEYS, "an evicted lock hash resets its token and last fire time: a tick may run twice "
                                  "and fencing tokens may repeat"),),
    "the task backend": ((_ALLKEYS, "scheduled tasks have no TTL: an evicted one may vanish unrun"),),
    "the task cancel store": (
        (_ALLKEYS, "a scheduled task's record (no TTL until its message comes) may be evicted: its message is then "
                   "dead-lettered unrun and its status is lost (a cancelled task still never runs)"),
        (_VOLATILE, "the record of a task whose message already came (it has a TTL) may be evicted early: its "
                    "status and result are lost, and a redelivered message of a running task is dead-lettered, "
                    "not retried (pending and failed records have no TTL and stay)"),
    ),
}


@contextmanager
def _task_queue(conf: MutexcronSettings) -> Iterator[TaskQueue | None]:
    """A queue built from the ``MUTEXCRON["TASKS"]`` URLs for one check (it connects to nothing until asked), closed
    afterwards; None without TASKS, or with a TaskBackend object (the user's)."""
    if "TASKS" not in getattr(settings, "MUTEXCRON", {}) or not isinstance(conf.tasks.backend, str):
        yield None
        return
    with conf.tasks.build_queue() as queue:
        yield queue


def _eviction_warning(what: str, part: LockStore | TaskBackend | TaskRecordStore | None) -> list[Warning]:
    if part is None:
        return []
    try:
        policy = part.eviction_policy()  # None but for Redis-backed pieces
    except MutexcronError:  # unreachable: W002 says so for the lock store; the queue reports its own errors
        return []
    consequence = next((text for risky, text in _EVICTION_RISKS[what] if policy in risky), None)
    if consequence is None:
        return []
    return [Warning(
        f"{what} {part!r} is on a Redis server whose maxmemory-policy is {policy!r}: {consequence}",
        hint="Set maxmemory-policy to noeviction on that server"
             + ("" if what == "the task cancel store" else " (or a volatile-* policy: mutexcron's keys that must "
                                                          "stay have no TTL)")
             + "; see README, Redis eviction.",
        obj=what,
        id="mutexcron.W003",
    )]


@register(TAG, deploy=True)
def check_redis_eviction(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W003 (deploy): a Redis lock store, task backend or cancel store whose server may evict its keys.

    Says nothing where CONFIG GET is not allowed or the server cannot be reached."""
    conf = get_settings()
    with conf.open_store() as store:
        warnings = _eviction_warning("the lock store", store)
    with _task_queue(conf) as queue:
        if queue is not None:
            warnings += _eviction_warning("the task backend", queue.backend)
            warnings += _eviction_warning("the task cancel store", queue.backend.record_store)
    return warnings


@register(TAG, deploy=True)
def check_job_health(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W004 (deploy): a declared job is overdue or failing (an unreachable store is W002's)."""
    try:
        report = health_report()
    except ControlNotSupported:  # a lock-only store keeps no runs' outcomes to judge
        return []
    return [Warning(
        f"job {problem.job_name!r} is {problem.kind} since {problem.since.isoformat()}: {problem.detail}",
        hint="See manage.py mutexcron health and the job's timeline in the admin; an overdue job's ticks are "
             "not being run by any instance (is any scheduler running? is its lock held by a dead holder?).",
        obj=problem.job_name,
        id="mutexcron.W004",
    ) for problem in report.problems]


@register(TAG)
def check_job_leases_cover_the_visibility_timeout(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W005: a ``run_on="tasks"`` job whose lease is shorter than ``JOB_VISIBILITY_TIMEOUT``, which the
    workers refuse (docs/run-on-tasks.md): the task of a worker that died mid-body must come back while that worker's
    lease still keeps the tick, for the worker that gets it to take the tick over (else a later tick may take the
    lock, and this tick is lost)."""
    visibility = get_settings().tasks.job_visibility_timeout
    return [Warning(
        f"job {job.name!r} runs on tasks with a lease ({job.lease}) shorter than MUTEXCRON['TASKS']"
        f"['JOB_VISIBILITY_TIMEOUT'] ({visibility}): `manage.py mutexcron worker` refuses to start with it",
        hint="Give the job a lease of at least the visibility timeout (a dead worker's task comes back after the "
             "visibility timeout, and the lock must still keep its tick then), or lower JOB_VISIBILITY_TIMEOUT.",
        obj=job.name,
        id="mutexcron.W005",
    ) for job in default_registry if job.run_on == "tasks" and job.lease < visibility]


# -- W006: a database that lacks mutexcron's migrations ------------------------------------------------------------

APP_LABEL = "mutexcron"
_checked_by_database_check: list[str] | None = None  # the ``databases`` of the last run of the database check


def _databases_in_use() -> set[str]:
    """The aliases of the databases that hold this app's tables in use: the SQL lock store's and the django:// task
    backend's and cancel store's."""
    conf = get_settings()
    with conf.open_store() as store:
        aliases = {store.using} if isinstance(store, DjangoLockStore) else set()
    with _task_queue(conf) as queue:
        if queue is not None:
            parts = (queue.backend, queue.backend.record_store)
            aliases.update(part.using for part in parts if isinstance(part, DjangoTaskBackend | DjangoTaskRecords))
    return aliases


def _unapplied_migrations(alias: str) -> list[Warning]:
    """mutexcron.W006 if database ``alias`` lacks any of mutexcron's migrations (none if it cannot be read)."""
    try:
        executor = MigrationExecutor(connections[alias])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes(APP_LABEL))
    except DatabaseError:  # unreachable: W002 says so for the lock store, and every query will
        return []
    names = [migration.name for migration, _ in plan if migration.app_label == APP_LABEL]
    if not names:
        return []
    span = names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"
    return [Warning(
        f"database {alias!r} lacks {len(names)} of mutexcron's migrations ({span}): its tables there are missing "
        "or out of date, so the SQL lock store (every job is skipped as a store error) or django:// task queue in "
        "it fails until they are migrated",
        hint=f"Run {migrate_command(alias)}.",
        obj=alias,
        id="mutexcron.W006",
    )]


def _running_migrate() -> bool:
    """Whether the checks run as ``manage.py migrate``'s own: it checks the database it is about to migrate."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), MigrateCommand):
            return True
        frame = frame.f_back
    return False


@register(TAG, Tags.database)
def check_migrations_in_the_database(app_configs: Any = None, databases: Any = None, **kwargs: Any
                                     ) -> list[Warning]:
    """mutexcron.W006 for the databases it is given (``check --database``) that hold mutexcron's tables in use.
    Silent without databases (a plain ``check``) and under ``migrate``, which runs the database checks first."""
    global _checked_by_database_check
    _checked_by_database_check = databases
    if not databases or _running_migrate():
        return []
    return [warning for alias in sorted(_databases_in_use() & set(databases))
            for warning in _unapplied_migrations(alias)]


@register(TAG, deploy=True)
def check_migrations_deploy(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W006 (deploy) for every database that holds mutexcron's tables in use, but those the database
    check above has just looked at in this same run (``check --deploy --database ...``: it runs first, given the same
    list; without ``--database``, Django 6 does not run it and Django 5.2 gives it none)."""
    seen = set(databases or ()) if databases is _checked_by_database_check else set()
    return [warning for alias in sorted(_databases_in_use() - seen) for warning in _unapplied_migrations(alias)]
