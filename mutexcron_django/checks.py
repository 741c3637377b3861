"""System checks: bad job declarations (errors), orphan locks and an unreachable store (warnings)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register

from mutexcron import default_registry
from mutexcron.errors import DuplicateJobError, MutexcronError

from .conf import get_settings
from .discovery import declaration_errors
from .store import DjangoLockStore

TAG = "mutexcron"


@register(TAG)
def check_declarations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """mutexcron.E001 (invalid job) and E002 (duplicate job name) from the jobs' modules."""
    messages = []
    for problem in declaration_errors:
        duplicate = isinstance(problem.error, DuplicateJobError)
        messages.append(Error(
            f"{problem.module}: {problem.error}",
            hint="Give one of the functions another name= ." if duplicate
            else "Fix the @mutex_cron declaration; the job is not scheduled until then.",
            obj=problem.module,
            id="mutexcron.E002" if duplicate else "mutexcron.E001",
        ))
    return messages


def _orphans(store: Any) -> list[Warning]:
    declared = set(default_registry.names())
    return [
        Warning(
            f"lock {state.name!r} in {store!r} belongs to no declared job",
            hint=f"If the job was removed or renamed, delete it: manage.py mutexcron unlock --delete {state.name}",
            obj=state.name,
            id="mutexcron.W001",
        )
        for state in store.locks()
        if state.name not in declared
    ]


@register(TAG, Tags.database)
def check_orphan_locks_in_the_database(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W001 for the SQL store: lock rows whose job is no longer declared.

    Like Django's own database checks, only for the databases it is given (``check --database``,
    ``migrate``, the test runner): a plain ``check`` or runserver's must not need a database."""
    if databases is None:
        return []
    store = get_settings().build_store()
    if not isinstance(store, DjangoLockStore) or store.using not in databases:
        return []
    try:
        return _orphans(store)
    except MutexcronError:  # the table does not exist yet (before migrate)
        return []


@register(TAG, deploy=True)
def check_store(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """mutexcron.W002 (deploy): the lock store cannot be reached; W001 for Redis and MongoDB stores."""
    store = get_settings().build_store()
    try:
        store.ping()
        return [] if isinstance(store, DjangoLockStore) else _orphans(store)
    except MutexcronError as error:
        return [Warning(
            f"the lock store {store!r} cannot be reached: {error}",
            hint="Jobs are skipped (skipped_store_error) until it can; check MUTEXCRON['STORE'] and the server.",
            id="mutexcron.W002",
        )]
    finally:
        store.close()
