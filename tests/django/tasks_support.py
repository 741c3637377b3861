"""Databases of the ``django://`` task backend tests: temporary aliases, fresh databases, fleet backends.

``database_alias`` registers a DATABASES entry in this process for the duration of a ``with`` block;
``fresh_database`` creates a new empty database (PostgreSQL or MariaDB: ``mutexcron_tasks_<hex>``; SQLite:
a file), registers it, migrates it and drops it afterwards; ``fleet_backend`` turns one into the
:class:`~tests.tasks.test_task_workers.WorkerBackend` of the multi-process tests, whose worker processes
use tests/tasks/django_settings.py.
"""

from __future__ import annotations

import copy
import json
import types
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

# The aliases of tests/django/settings.py that each kind of database is copied from.
TEMPLATE_ALIAS = {"sqlite": "default", "postgresql": "postgres", "mysql": "mariadb"}
WORKER_KEYS = ("ENGINE", "NAME", "HOST", "PORT", "USER", "PASSWORD", "OPTIONS")


@contextmanager
def database_alias(alias: str, settings_dict: dict[str, Any]) -> Iterator[str]:
    """``alias`` in ``django.db.connections`` while the block runs (this thread's connection closed after)."""
    assert alias not in connections.settings, f"alias {alias!r} exists already"
    connections.settings[alias] = settings_dict
    try:
        yield alias
    finally:
        with suppress(Exception):
            connections[alias].close()
        with suppress(AttributeError):
            delattr(connections._connections, alias)
        del connections.settings[alias]


def settings_like(vendor: str, **changes: Any) -> dict[str, Any]:
    """A complete DATABASES entry copied from the test settings' alias of that vendor, with ``changes``."""
    base = copy.deepcopy(connections.settings[TEMPLATE_ALIAS[vendor]])
    base.update(changes)
    base["TEST"] = {**base.get("TEST", {}), "NAME": None, "MIRROR": None}
    return base


@contextmanager
def unreachable_alias(vendor: str, blocker: Any) -> Iterator[str]:
    """An alias of a database that cannot be reached: a port where nobody listens, a file in no directory.

    Inside a ``django_db`` test Django forbids connecting to an alias the test did not declare (and this
    one cannot be declared: it does not exist yet), so this thread's connection object of the alias gets
    the real ``ensure_connection`` back, from pytest-django's ``django_db_blocker``: it may try, and fail.
    """
    if vendor == "sqlite":
        settings_dict = settings_like(vendor, NAME="/nonexistent-mutexcron-dir/tasks.sqlite3")
    else:
        settings_dict = settings_like(vendor, HOST="127.0.0.1", PORT="1", NAME="mutexcron_nowhere")
    with database_alias(f"unreachable_{uuid.uuid4().hex[:8]}", settings_dict) as alias:
        connection = connections[alias]
        connection.ensure_connection = types.MethodType(blocker._real_ensure_connection, connection)
        yield alias


def _server_connection(vendor: str) -> Any:
    """A plain driver connection (autocommit) to the server of the test settings, for CREATE/DROP DATABASE."""
    entry = connections.settings[TEMPLATE_ALIAS[vendor]]
    if vendor == "postgresql":
        import psycopg

        return psycopg.connect(host=entry["HOST"], port=entry["PORT"], user=entry["USER"],
                               password=entry["PASSWORD"] or None, dbname="postgres", autocommit=True)
    import MySQLdb

    return MySQLdb.connect(host=entry["HOST"], port=int(entry["PORT"]), user=entry["USER"],
                           passwd=entry["PASSWORD"] or "")


@contextmanager
def fresh_database(vendor: str, directory: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """A new, migrated database registered as alias ``tasks_<hex>``; dropped afterwards.

    Yields the alias and the DATABASES entry for other processes (JSON-serialisable).
    """
    token = uuid.uuid4().hex[:10]
    alias = f"tasks_{token}"
    server = None
    if vendor == "sqlite":
        settings_dict = settings_like(vendor, NAME=str(directory / f"tasks-{token}.sqlite3"))
    else:
        name = f"mutexcron_tasks_{token}"
        server = _server_connection(vendor)
        if vendor == "postgresql":
            server.execute(f'CREATE DATABASE "{name}"')
        else:
            server.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        settings_dict = settings_like(vendor, NAME=name)
    try:
        with database_alias(alias, settings_dict):
            call_command("migrate", database=alias, verbosity=0, interactive=False)
            connections[alias].close()
            yield alias, {key: settings_dict[key] for key in WORKER_KEYS}
    finally:
        if server is not None:
            if vendor == "postgresql":
                server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            else:
                server.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
            server.close()


def fleet_backend(request: pytest.FixtureRequest, vendor: str = "postgresql", max_sleep: float | None = None) -> Any:
    """The WorkerBackend of test_task_workers.py on a fresh database of ``vendor`` (dropped after the test).

    The test process schedules and inspects tasks through the same alias, so database access is unblocked
    (pytest-django) for the test.
    """
    from tests.tasks.test_task_workers import WorkerBackend

    blocker = request.getfixturevalue("django_db_blocker")
    stack = ExitStack()
    request.addfinalizer(stack.close)
    blocker.unblock()
    stack.callback(blocker.restore)
    alias, worker_database = stack.enter_context(fresh_database(vendor, request.getfixturevalue("tmp_path")))
    url = f"django://{alias}" + (f"?max_sleep={max_sleep}" if max_sleep is not None else "")
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.tasks.django_settings",
        "MUTEXCRON_TASKS_DATABASE": json.dumps(worker_database),
        "MUTEXCRON_TASKS_ALIAS": alias,
    }
    return WorkerBackend(url, env=env)
