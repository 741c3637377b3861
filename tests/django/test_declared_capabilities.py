"""The Django app asks backends what they declare (no isinstance on its own classes): ``needs_record_store`` and
``record_store`` for MUTEXCRON["TASKS"], ``database_alias`` for seeding, W001 and the admin, ``eviction_policy()``
for W003. Each is shown here with a backend of another package (registered through mutexcron.plugins)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mutexcron import plugins
from mutexcron.stores.memory import MemoryLockStore
from mutexcron.tasks import TaskBackend
from mutexcron.tasks.backends.base import ConsumeRequest
from mutexcron.tasks.model import NewTask, TaskInfo
from mutexcron.tasks.records.base import TaskRecordStore
from mutexcron.tasks.records.memory import MemoryTaskRecords
from mutexcron.tasks.records.redis import RedisTaskRecords
from mutexcron_django.admin.task_admin import _task_backend_alias
from mutexcron_django.apps import seed_after_migrate
from mutexcron_django.conf import get_settings
from mutexcron_django.sql.store import DjangoLockStore
from mutexcron_django.sql.tasks.backend import DjangoTaskBackend
from tests.django.jobhelpers import Declarations

SCHEME = "capabilitybroker"  # a task backend scheme of "another package", registered for these tests only
PLAIN_SCHEME = "capabilityplain"
RECORDS_SCHEME = "capabilityrecords"  # and a record store scheme


class EvictingRecords(MemoryTaskRecords):
    """Task records on a server that says it may evict them."""

    @classmethod
    def from_url(cls, url: str) -> EvictingRecords:
        return cls()

    def eviction_policy(self) -> str | None:
        return "volatile-lru"


class BrokerBackend(TaskBackend):
    """A broker's backend from another package: it keeps its task records in a record store, and its server
    may evict keys. Nothing here is ever called but building it and what the settings and checks ask."""

    needs_record_store = True

    def __init__(self, marks: TaskRecordStore | None) -> None:
        self._records = marks

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | TaskRecordStore | None = None) -> BrokerBackend:
        assert cancel_store is None or isinstance(cancel_store, TaskRecordStore)  # the settings build it
        return cls(cancel_store)

    @property
    def record_store(self) -> TaskRecordStore | None:
        return self._records

    def eviction_policy(self) -> str | None:
        return "allkeys-lru"

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        raise NotImplementedError

    def cancel(self, task_id: str) -> bool:
        raise NotImplementedError

    def info(self, task_id: str) -> TaskInfo | None:
        raise NotImplementedError

    def retry(self, task_id: str) -> bool:
        raise NotImplementedError

    def pending_counts(self) -> Mapping[str, int] | None:
        return None

    def store_result(self, task_id: str, text: str) -> bool:
        raise NotImplementedError

    def load_result(self, task_id: str) -> str | None:
        raise NotImplementedError

    def deliver(self, request: ConsumeRequest) -> None:
        raise NotImplementedError


class PlainBackend(BrokerBackend):
    """A registered backend that keeps its own records (the default: needs_record_store False)."""

    needs_record_store = False


class TableBackend(PlainBackend):
    """A backend object whose tasks are in the default database's mutexcron tables."""

    database_alias = "default"


class DatabaseLockStore(MemoryLockStore):
    """A lock store that says its rows are in the default database (as the SQL store does)."""

    database_alias = "default"


class EvictingLockStore(MemoryLockStore):
    def eviction_policy(self) -> str | None:
        return "allkeys-lfu"


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    plugins.register("task_backend", SCHEME, f"{__name__}.BrokerBackend")
    plugins.register("task_backend", PLAIN_SCHEME, f"{__name__}.PlainBackend")
    plugins.register("record_store", RECORDS_SCHEME, f"{__name__}.EvictingRecords")
    yield
    del plugins.schemes("task_backend")[SCHEME]
    del plugins.schemes("task_backend")[PLAIN_SCHEME]
    del plugins.schemes("record_store")[RECORDS_SCHEME]


def tasks_settings(tasks: dict[str, Any]) -> Any:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}):
        return get_settings().tasks


# -- needs_record_store and record_store: MUTEXCRON["TASKS"]["CANCEL_STORE"] ----------------------------------


def test_the_declared_capabilities_of_the_built_in_backends() -> None:
    from mutexcron.tasks.backends.rabbitmq.backend import RabbitMQTaskBackend
    from mutexcron.tasks.backends.redis.backend import RedisTaskBackend

    assert RabbitMQTaskBackend.needs_record_store is True
    assert RedisTaskBackend.needs_record_store is False and DjangoTaskBackend.needs_record_store is False
    assert TaskBackend.database_alias is None and MemoryLockStore().database_alias is None
    assert MemoryLockStore().eviction_policy() is None and MemoryTaskRecords().eviction_policy() is None
    assert DjangoLockStore("postgres").database_alias == "postgres"
    assert DjangoTaskBackend("postgres").database_alias == "postgres"


def test_a_registered_backend_that_needs_a_record_store_gets_cancel_store_from_the_settings() -> None:
    conf = tasks_settings({"BACKEND": f"{SCHEME}://broker/", "CANCEL_STORE": "redis://127.0.0.1:6379/9"})
    assert conf.cancel_store == "redis://127.0.0.1:6379/9"

    queue = conf.build_queue()  # connects to nothing
    try:
        assert isinstance(queue.backend, BrokerBackend)
        assert isinstance(queue.backend.record_store, RedisTaskRecords)  # built from CANCEL_STORE, handed over
    finally:
        queue.close()
    assert tasks_settings({"BACKEND": f"{SCHEME}://broker/", "CANCEL_STORE": "django"}).cancel_store == "django://"


def test_a_registered_backend_that_needs_a_record_store_requires_cancel_store() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": f"{SCHEME}://u:s3cret@broker/"}}), \
            pytest.raises(ImproperlyConfigured) as raised:
        get_settings()

    message = str(raised.value)
    assert "MUTEXCRON['TASKS']['CANCEL_STORE'] is required" in message
    assert f"{SCHEME}://***@broker/" in message and "s3cret" not in message


def test_a_registered_backend_that_keeps_its_own_records_refuses_cancel_store() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": f"{PLAIN_SCHEME}://h/",
                                                                    "CANCEL_STORE": "redis://127.0.0.1/9"}}), \
            pytest.raises(ImproperlyConfigured) as raised:
        get_settings()

    assert "MUTEXCRON['TASKS']['CANCEL_STORE'] is only for" in str(raised.value)
    assert tasks_settings({"BACKEND": f"{PLAIN_SCHEME}://h/"}).cancel_store is None


def test_a_backend_whose_module_cannot_be_imported_names_the_backend_key() -> None:
    plugins.register("task_backend", "capabilitymissing", "no_such_package.backend.Backend")
    try:
        with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": "capabilitymissing://h/"}}), \
                pytest.raises(ImproperlyConfigured) as raised:
            get_settings()
    finally:
        del plugins.schemes("task_backend")["capabilitymissing"]

    assert str(raised.value).startswith("MUTEXCRON['TASKS']['BACKEND']: cannot load")


# -- eviction_policy(): W003 through the declared method --------------------------------------------------------


def test_w003_asks_each_part_its_declared_eviction_policy() -> None:
    settings = {"AUTOSTART": False, "STORE": EvictingLockStore(),
                "TASKS": {"BACKEND": f"{SCHEME}://broker/", "CANCEL_STORE": f"{RECORDS_SCHEME}://"}}
    with override_settings(MUTEXCRON=settings):
        messages = run_checks(tags=["mutexcron"], include_deployment_checks=True, databases=[])

    warnings = {str(m.obj): m.msg for m in messages if m.id == "mutexcron.W003"}
    assert sorted(warnings) == ["the lock store", "the task backend", "the task cancel store"]
    assert "'allkeys-lfu'" in warnings["the lock store"] and "'allkeys-lru'" in warnings["the task backend"]
    assert "'volatile-lru'" in warnings["the task cancel store"]


# -- database_alias: post_migrate seeding, W001 and the admin's tasks page -----------------------------------------


def test_seeding_after_migrate_asks_the_store_its_database(declare: Declarations) -> None:
    declare("@daily", name="capability.seeded")
    store = DatabaseLockStore()
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": store}):
        seed_after_migrate(using="postgres")  # another database: nothing seeded
        assert store.lock("capability.seeded") is None
        seed_after_migrate(using="default")
    assert store.lock("capability.seeded") is not None


def test_orphan_locks_of_a_store_in_the_database_are_w001_of_the_database_check_only() -> None:
    store = DatabaseLockStore()
    store.seed(["capability.orphan"])
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": store}):
        in_database = run_checks(tags=["mutexcron"], databases=["default"])
        elsewhere = run_checks(tags=["mutexcron"], databases=["postgres"])
        deploy = run_checks(tags=["mutexcron"], include_deployment_checks=True, databases=[])

    assert [m.obj for m in in_database if m.id == "mutexcron.W001"] == ["capability.orphan"]
    assert not [m for m in elsewhere + deploy if m.id == "mutexcron.W001"]


def test_an_orphan_lock_of_a_store_elsewhere_is_w001_of_the_deploy_check() -> None:
    store = MemoryLockStore()
    store.seed(["capability.orphan"])
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": store}):
        deploy = run_checks(tags=["mutexcron"], include_deployment_checks=True, databases=[])

    assert [m.obj for m in deploy if m.id == "mutexcron.W001"] == ["capability.orphan"]


def test_the_admin_tasks_page_asks_a_backend_object_its_database() -> None:
    for backend, alias in ((TableBackend(None), "default"), (PlainBackend(None), None),
                           (DjangoTaskBackend("postgres"), "postgres")):
        with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": backend}}):
            assert _task_backend_alias() == alias
