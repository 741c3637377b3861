"""A database that lacks mutexcron's migrations (issue 33), on SQLite and PostgreSQL, each test on a database of
its own: the SQL store's errors, ``manage.py mutexcron list`` and ``health``, the autostarted scheduler's log and
the system check mutexcron.W006 (``check --deploy``, ``check --database``) say to run ``manage.py migrate``, and
``migrate`` is not warned about the migrations it applies.

The commands run as real processes of the fleet test site (tests/django/fleet_settings.py); the store and the
checks are also tried in this process, on the database registered under an alias of its own."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import connections

from mutexcron.errors import StoreUnavailable
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.fleet_support import Database, Site, free_port, postgres_database, sqlite_database
from tests.django.jobhelpers import wait_for
from tests.django.tasks_support import database_alias, settings_like

RUN_MIGRATE = "run manage.py migrate"
STORE_ERROR = re.compile(r"ERROR lock store unreachable.*mutexcron's tables are missing or out of date.*"
                         + re.escape(RUN_MIGRATE))
HISTORY_WARNING = re.compile(r"WARNING could not record .* in the history.*" + re.escape(RUN_MIGRATE))


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty database of the test's own, never migrated."""
    make = sqlite_database(tmp_path) if request.param == "sqlite" else postgres_database()
    with make as fresh:
        yield fresh


@pytest.fixture
def site(database: Database, tmp_path: Path) -> Iterator[Site]:
    with Site(tmp_path, database) as site:
        yield site


@pytest.fixture
def alias(database: Database, django_db_blocker: Any) -> Iterator[str]:
    """The database as an alias of this process's DATABASES, which the test may query."""
    with django_db_blocker.unblock(), database_alias(f"unmigrated_{uuid.uuid4().hex[:8]}",
                                                     settings_like(database.engine, NAME=database.name)) as name:
        yield name


def manage(site: Site, *arguments: str) -> tuple[int, str]:
    """``manage.py <arguments>`` on the site, no scheduler autostarted, run to its end: exit status and output."""
    proc = site.spawn(f"{len(site.members)}-{'-'.join(arguments)}", site.manage(*arguments), FLEET_AUTOSTART="0")
    code = proc.wait_exit(timeout=60)
    assert code is not None, f"manage.py {' '.join(arguments)} did not finish:\n{proc.tail()}"
    return code, proc.text()


def w006(output: str) -> list[str]:
    """Each mutexcron.W006 line of a check's output, with its hint."""
    return re.findall(r"\(mutexcron\.W006\)[^\n]*\n\s*HINT: [^\n]*", output)


# -- the store and the checks, in this process ------------------------------------------------------------------


def test_the_sql_store_says_to_migrate_the_database_it_is_in(alias: str) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        DjangoLockStore(alias).lock("unmigrated.job")

    assert "mutexcron_lock" in str(raised.value)
    assert str(raised.value).endswith(f"{RUN_MIGRATE} --database {alias}")


def test_w006_names_the_unapplied_migrations_and_the_command_under_check_database(alias: str, settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": f"django://{alias}"}

    (warning,) = [m for m in run_checks(tags=["mutexcron"], databases=[alias]) if m.id == "mutexcron.W006"]

    assert warning.obj == alias and "0001_initial" in warning.msg and "mutexcron's migrations" in warning.msg
    assert warning.hint == f"Run manage.py migrate --database {alias}."


def test_w006_is_in_the_deploy_checks_once_with_or_without_the_database(alias: str, settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": f"django://{alias}"}

    for databases in ([alias], []):
        messages = run_checks(tags=["mutexcron"], include_deployment_checks=True, databases=databases)
        assert [m.obj for m in messages if m.id == "mutexcron.W006"] == [alias], databases


# -- manage.py ------------------------------------------------------------------------------------------------


def test_mutexcron_list_says_to_run_migrate(site: Site) -> None:
    code, output = manage(site, "mutexcron", "list")

    assert code != 0 and RUN_MIGRATE in output and "mutexcron_lock" in output
    assert "Traceback" not in output


def test_mutexcron_health_says_to_run_migrate(site: Site) -> None:
    code, output = manage(site, "mutexcron", "health")

    assert code != 0 and RUN_MIGRATE in output
    assert "Traceback" not in output


def test_check_deploy_says_to_run_migrate(site: Site) -> None:
    code, output = manage(site, "check", "--deploy")

    (warning,) = w006(output)
    assert code == 0 and "database 'default' lacks" in warning and "HINT: Run manage.py migrate." in warning


def test_check_database_says_to_run_migrate_until_migrate_applies_them_unwarned(site: Site) -> None:
    code, before = manage(site, "check", "--database", "default")
    assert code == 0 and len(w006(before)) == 1

    code, migrating = manage(site, "migrate", "--noinput")
    assert code == 0 and "mutexcron.W006" not in migrating

    code, after = manage(site, "check", "--deploy", "--database", "default")
    assert code == 0 and "mutexcron.W006" not in after


def test_check_deploy_with_the_database_says_it_once(site: Site) -> None:
    code, output = manage(site, "check", "--deploy", "--database", "default")

    assert code == 0 and len(w006(output)) == 1


def test_a_table_that_lacks_a_column_of_the_model_says_to_run_migrate(site: Site, alias: str) -> None:
    code, migrating = manage(site, "migrate", "--noinput")
    assert code == 0, migrating
    with connections[alias].cursor() as cursor:  # as a release whose migration adds the column finds the table
        cursor.execute("ALTER TABLE mutexcron_lock DROP COLUMN tick_token")

    code, listing = manage(site, "mutexcron", "list")
    assert code != 0 and RUN_MIGRATE in listing and "tick_token" in listing


# -- the autostarted scheduler ----------------------------------------------------------------------------------


def test_the_autostarted_scheduler_says_once_to_run_migrate(site: Site) -> None:
    server = site.spawn("runserver", site.manage("runserver", "--noreload", f"127.0.0.1:{free_port()}"))

    def failed_writes() -> int:
        server.assert_alive()
        return server.text().count("DEBUG could not record")

    wait_for(lambda: failed_writes() >= 2, timeout=30, what="two ticks after the first to fail their history writes")
    log = server.text()
    assert len(STORE_ERROR.findall(log)) == 1, log
    assert len(HISTORY_WARNING.findall(log)) == 1, log
