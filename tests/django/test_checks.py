"""System checks: E001 invalid declaration, E002 duplicate name, W001 orphan lock, W002 unreachable store,
W003 a Redis eviction policy that may evict mutexcron's keys."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest
from django.conf import settings
from django.core.checks import Warning, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from mutexcron import default_registry
from mutexcron.stores import store_from_url
from mutexcron_django import checks
from mutexcron_django.discovery import declaration_errors
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations
from tests.support.servers import PrivateRedis

UNREACHABLE = "redis://:s3cret-pw@127.0.0.1:1/0"


@pytest.fixture
def fresh_declaration_errors() -> Iterator[None]:
    """No kept declaration error before the test; after it, none of the check apps' jobs, failed declarations or
    modules: the next test that installs a check app imports its ``cron`` module anew, as a starting process does."""
    saved = list(declaration_errors)
    declaration_errors.clear()
    yield
    declaration_errors[:] = saved
    for name in {*default_registry.names(), *(problem.job for problem in default_registry.problems())}:
        if name.startswith("checkapps."):
            default_registry.remove(name)
    for module in [module for module in sys.modules if module.startswith("tests.django.checkapps.")]:
        del sys.modules[module]


def installed(app: str) -> AbstractContextManager[object]:
    """Install ``tests.django.checkapps.<app>``: Django runs every AppConfig.ready() again, so mutexcron
    discovers the app's ``cron`` module as it does at start-up."""
    return override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, f"tests.django.checkapps.{app}"])


def mutexcron_messages(**options: object) -> list:  # type: ignore[type-arg]
    """mutexcron's checks; the database-tagged one only looks at the databases given (none by default:
    with tags, Django 6 would otherwise hand it every database)."""
    options.setdefault("databases", [])
    return run_checks(tags=["mutexcron"], **options)


# -- E001 / E002: bad declarations found by discovery ---------------------------------------------------


@pytest.mark.usefixtures("fresh_declaration_errors")
def test_an_invalid_declaration_is_e001_naming_module_job_and_value() -> None:
    with installed("badspecjobs"):
        (error,) = mutexcron_messages()

    assert error.id == "mutexcron.E001"
    assert error.obj == "tests.django.checkapps.badspecjobs.cron"
    assert error.msg.startswith("tests.django.checkapps.badspecjobs.cron: ")
    assert "checkapps.bad_spec" in error.msg and "61" in error.msg
    assert "@mutex_cron" in error.hint


@pytest.mark.usefixtures("fresh_declaration_errors")
def test_a_duplicate_job_name_is_e002_naming_both_functions() -> None:
    with installed("duplicatejobs"):
        (error,) = mutexcron_messages()

    assert error.id == "mutexcron.E002"
    assert error.obj == "tests.django.checkapps.duplicatejobs.cron"
    assert "'checkapps.duplicate'" in error.msg
    assert "cron.cleanup " in error.msg and "cron.cleanup_again " in error.msg
    assert "name=" in error.hint


@pytest.mark.usefixtures("fresh_declaration_errors")
@pytest.mark.django_db
def test_a_bad_declaration_does_not_crash_start_up_but_stops_manage_py_check() -> None:
    with installed("badspecjobs"), pytest.raises(SystemCheckError, match=r"\(mutexcron.E001\)"):
        call_command("check", tags=["mutexcron"])


def test_no_declaration_errors_means_no_errors(declare: Declarations) -> None:
    declare("@daily", name="tests.checks.fine")

    assert [m for m in mutexcron_messages() if m.is_serious()] == []


# -- W001: orphan locks ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_orphan_lock_row_is_w001_with_the_command_to_delete_it(declare: Declarations) -> None:
    declare("@daily", name="tests.checks.declared")
    DjangoLockStore().seed(["tests.checks.declared", "tests.checks.orphan"])

    (warning,) = mutexcron_messages(databases=["default"])

    assert warning.id == "mutexcron.W001"
    assert warning.obj == "tests.checks.orphan" and "'tests.checks.orphan'" in warning.msg
    assert "manage.py mutexcron unlock --delete tests.checks.orphan" in warning.hint


@pytest.mark.django_db
def test_a_deleted_orphan_lock_is_no_longer_w001() -> None:
    store = DjangoLockStore()
    store.seed(["tests.checks.gone"])
    assert store.delete("tests.checks.gone")  # a tombstone row stays, keeping its token and last fire

    assert mutexcron_messages(databases=["default"]) == []


@pytest.mark.django_db
def test_orphan_locks_are_not_looked_for_in_databases_the_check_was_not_given() -> None:
    DjangoLockStore().seed(["tests.checks.orphan"])

    assert mutexcron_messages(databases=["postgres"]) == []


@pytest.mark.django_db
def test_orphan_locks_are_not_looked_for_without_databases() -> None:
    # Like Django's own database checks: `manage.py check` without --database, runserver and migrate's
    # checks run before the database may exist or be reachable, and must not query it.
    DjangoLockStore().seed(["tests.checks.orphan"])

    with CaptureQueriesContext(connection) as queries:
        # What a plain `manage.py check` does to it on Django 5.2 (Django 6 does not call it at all).
        messages = checks.check_orphan_locks_in_the_database(databases=None)

    assert messages == [] and len(queries) == 0


@pytest.mark.django_db
def test_the_orphan_check_is_silent_before_migrate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE mutexcron_lock")  # rolled back with the test's transaction

    assert mutexcron_messages(databases=["default"]) == []


def test_an_orphan_lock_in_redis_is_w001_in_the_deploy_checks(declare: Declarations, redis_url: str) -> None:
    declare("@daily", name="tests.checks.redis_declared")
    with store_from_url(redis_url) as store:
        store.seed(["tests.checks.redis_declared", "tests.checks.redis_orphan"])

    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": redis_url}):
        (warning,) = mutexcron_messages(include_deployment_checks=True)

    assert warning.id == "mutexcron.W001" and warning.obj == "tests.checks.redis_orphan"
    assert "unlock --delete tests.checks.redis_orphan" in warning.hint


# -- W002: the store cannot be reached (deploy) ------------------------------------------------------------


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_an_unreachable_store_is_w002_in_the_deploy_checks_without_the_password() -> None:
    (warning,) = mutexcron_messages(include_deployment_checks=True)

    assert warning.id == "mutexcron.W002"
    assert "cannot be reached" in warning.msg and "127.0.0.1:1" in warning.msg
    assert "skipped_store_error" in warning.hint and "MUTEXCRON['STORE']" in warning.hint
    assert "s3cret-pw" not in warning.msg + warning.hint


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_the_store_is_not_contacted_outside_the_deploy_checks() -> None:
    assert mutexcron_messages() == []


@pytest.mark.django_db
def test_a_reachable_database_store_gives_no_deploy_warning() -> None:
    assert mutexcron_messages(include_deployment_checks=True) == []


# -- W003: a Redis server that may evict mutexcron's keys (deploy) -------------------------------------------


@pytest.fixture(scope="module")
def evicting_redis() -> Iterator[str]:
    """A private Redis whose maxmemory-policy evicts keys without a TTL (the shared server is never reconfigured)."""
    with PrivateRedis("--maxmemory-policy", "allkeys-lru") as url:
        yield url


def w003(**mutexcron: object) -> list:  # type: ignore[type-arg]
    with override_settings(MUTEXCRON={"AUTOSTART": False, **mutexcron}):
        return [m for m in mutexcron_messages(include_deployment_checks=True) if m.id == "mutexcron.W003"]


def test_a_redis_lock_store_that_may_evict_its_locks_is_w003(evicting_redis: str) -> None:
    (warning,) = w003(STORE=evicting_redis)

    assert "allkeys-lru" in warning.msg and "lock store" in warning.msg and "run twice" in warning.msg
    assert "noeviction" in warning.hint


def test_a_redis_task_backend_that_may_evict_its_tasks_is_w003(evicting_redis: str, redis_url: str) -> None:
    (warning,) = w003(STORE=redis_url, TASKS={"BACKEND": evicting_redis})

    assert "allkeys-lru" in warning.msg and "task backend" in warning.msg and "vanish" in warning.msg


def cancel_store_w003(cancel_store: str, store: str) -> Warning:
    """The one W003 of a RabbitMQ task backend whose cancel store is ``cancel_store`` (the lock store: ``store``)."""
    rabbitmq = "amqp://guest:guest@127.0.0.1:5672/"
    (warning,) = w003(STORE=store, TASKS={"BACKEND": rabbitmq, "CANCEL_STORE": cancel_store})
    return warning


def test_a_redis_cancel_store_that_may_evict_its_records_is_w003(evicting_redis: str, redis_url: str) -> None:
    warning = cancel_store_w003(evicting_redis, redis_url)

    assert "allkeys-lru" in warning.msg and "cancel store" in warning.msg


def test_w003_for_an_allkeys_cancel_store_says_a_scheduled_task_is_dead_lettered_unrun(evicting_redis: str,
                                                                                      redis_url: str) -> None:
    warning = cancel_store_w003(evicting_redis, redis_url)

    assert "scheduled task's record" in warning.msg and "dead-lettered unrun" in warning.msg
    assert "status is lost" in warning.msg and "cancelled task still never runs" in warning.msg


@pytest.fixture(scope="module")
def volatile_redis() -> Iterator[str]:
    """A private Redis whose maxmemory-policy evicts only keys with a TTL."""
    with PrivateRedis("--maxmemory-policy", "volatile-lru") as url:
        yield url


def test_w003_for_a_volatile_cancel_store_names_only_records_whose_message_came(volatile_redis: str,
                                                                               redis_url: str) -> None:
    warning = cancel_store_w003(volatile_redis, redis_url)

    assert "volatile-lru" in warning.msg and "cancel store" in warning.msg
    assert "whose message already came" in warning.msg and "pending and failed records have no TTL" in warning.msg


def test_a_volatile_policy_gives_no_w003_for_the_lock_store_or_task_backend(volatile_redis: str) -> None:
    assert w003(STORE=volatile_redis, TASKS={"BACKEND": volatile_redis}) == []


def test_a_redis_with_noeviction_gives_no_w003(redis_url: str) -> None:
    assert w003(STORE=redis_url, TASKS={"BACKEND": redis_url}) == []


def test_eviction_policy_is_none_and_w003_silent_where_config_is_not_allowed() -> None:
    with PrivateRedis("--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "") as url:
        with store_from_url(url) as store:
            assert store.eviction_policy() is None
        assert w003(STORE=url) == []
