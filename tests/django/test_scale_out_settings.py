"""A Redis Cluster or Sentinel URL in the Django settings: the lock store is built from it and the deploy checks
read it (W001 scans every master of a cluster; W003 asks each master its eviction policy)."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mutexcron.stores import store_from_url
from mutexcron.stores.redis import RedisLockStore
from mutexcron_django.conf import get_settings
from tests.django.jobhelpers import Declarations


def deploy_messages() -> list:  # type: ignore[type-arg]
    return run_checks(tags=["mutexcron"], include_deployment_checks=True, databases=[])


def test_the_store_setting_takes_a_cluster_or_sentinel_url(scale_out_url: str) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": f"{scale_out_url}&wait_replicas=1"}):
        store = get_settings().build_store()
    try:
        assert isinstance(store, RedisLockStore) and store.wait_replicas == 1
        assert store.seed(["tests.scale_out.job"]) == 1
    finally:
        store.close()


def test_a_malformed_cluster_store_setting_names_the_key_without_the_password() -> None:
    password = "S3cr3t-pw"
    url = f"redis+cluster://:{password}@127.0.0.1:7000/3"
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": url}), pytest.raises(ImproperlyConfigured) as raised:
        get_settings().build_store()
    assert "STORE" in str(raised.value) and "only database 0" in str(raised.value)
    assert password not in str(raised.value)


def test_an_orphan_lock_on_the_cluster_is_w001_and_its_policy_gives_no_w003(
    declare: Declarations, cluster_url: str,
) -> None:
    declare("@daily", name="tests.scale_out.declared")
    names = ["tests.scale_out.declared", *(f"tests.scale_out.orphan{n}" for n in range(6))]
    with store_from_url(cluster_url) as store:
        store.seed(names)  # spread over the three masters
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": cluster_url}):
        warnings = deploy_messages()
    assert {w.id for w in warnings} == {"mutexcron.W001"}
    assert sorted(w.obj for w in warnings) == names[1:]


def test_the_task_settings_take_cluster_and_sentinel_urls(cluster_url: str, sentinel_url: str) -> None:
    from mutexcron.tasks.backends.rabbitmq.backend import RabbitMQTaskBackend
    from mutexcron.tasks.backends.redis.backend import RedisTaskBackend
    from mutexcron.tasks.records.redis import RedisTaskRecords

    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": cluster_url}}):
        queue = get_settings().tasks.build_queue()
    try:
        assert isinstance(queue.backend, RedisTaskBackend) and queue.backend.claim_groups(["a", "b"]) != [["a", "b"]]
    finally:
        queue.close()
    tasks = {"BACKEND": "amqp://guest:guest@127.0.0.1:5672/", "CANCEL_STORE": sentinel_url}
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}):
        queue = get_settings().tasks.build_queue()
    try:
        assert isinstance(queue.backend, RabbitMQTaskBackend) and isinstance(queue.backend.marks, RedisTaskRecords)
    finally:
        queue.close()
