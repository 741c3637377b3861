"""The ``MUTEXCRON`` setting: documented defaults, and ImproperlyConfigured naming the key and the value."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mutexcron.stores import MemoryLockStore
from mutexcron_django.conf import get_settings
from mutexcron_django.sql.store import DjangoLockStore


def read(**mutexcron: object):  # type: ignore[no-untyped-def]
    with override_settings(MUTEXCRON=mutexcron):
        return get_settings()


def problem(setting: object) -> str:
    """The message of the ImproperlyConfigured that MUTEXCRON=setting raises."""
    with override_settings(MUTEXCRON=setting), pytest.raises(ImproperlyConfigured) as raised:
        get_settings()
    return str(raised.value)


def test_defaults() -> None:
    conf = read()

    assert conf.store == "django"
    assert conf.autostart is True
    assert conf.timezone == "UTC"  # settings.TIME_ZONE
    assert conf.instance_id is None
    assert conf.history_retention == timedelta(days=30)
    assert conf.modules == ("cron",)


def test_no_mutexcron_setting_means_the_defaults() -> None:
    with override_settings():
        from django.conf import settings

        del settings.MUTEXCRON
        assert get_settings() == read()


def test_timezone_defaults_to_the_projects_time_zone() -> None:
    with override_settings(TIME_ZONE="Europe/Paris"):
        assert read().timezone == "Europe/Paris"


def test_every_key_can_be_set() -> None:
    store = MemoryLockStore()
    conf = read(STORE=store, AUTOSTART=False, TIMEZONE="Asia/Tokyo", INSTANCE_ID="web-1",
                HISTORY_RETENTION=None, MODULES=["cron", "jobs"])

    assert conf.store is store
    assert (conf.autostart, conf.timezone, conf.instance_id) == (False, "Asia/Tokyo", "web-1")
    assert conf.history_retention is None
    assert conf.modules == ("cron", "jobs")


def test_default_store_is_the_projects_database() -> None:
    store = read().build_store()

    assert isinstance(store, DjangoLockStore) and store.using == "default"


def test_store_url_builds_that_store() -> None:
    assert isinstance(read(STORE="memory://").build_store(), MemoryLockStore)


@pytest.mark.parametrize("value", ["", "   ", 42, None, ["redis://x"]], ids=repr)
def test_bad_store_names_the_key_and_the_value(value: object) -> None:
    message = problem({"STORE": value})

    assert "MUTEXCRON['STORE']" in message and repr(value) in message


@pytest.mark.parametrize(("value", "meant"), [("djnago", '"django"'), ("Django", '"django"'),
                                              ("djnago://default", '"django://…"'), ("rdis://127.0.0.1:6379/0",
                                              '"redis://…"'), ("redis", '"redis://…"'), ("mongo://db", '"mongodb://…"')])
def test_a_mistyped_store_names_the_valid_values_and_the_closest_one(value: str, meant: str) -> None:
    """Reading the setting refuses a value that is no URL; a URL of an unknown scheme fails where the store is
    built (``AppConfig.ready()`` builds it once, connecting to nothing)."""
    if "://" in value:
        with pytest.raises(ImproperlyConfigured) as raised:
            read(STORE=value).build_store()
        message = str(raised.value)
    else:
        message = problem({"STORE": value})

    assert "MUTEXCRON['STORE']" in message and repr(value) in message
    assert all(valid in message for valid in ("django", "redis", "mongodb", "memory", "dotted path")), message
    assert message.endswith(f"did you mean {meant}?"), message


def test_a_store_like_nothing_valid_names_the_valid_values_and_suggests_none() -> None:
    message = problem({"STORE": "etcd"})

    assert '"django"' in message and "redis://" in message and "did you mean" not in message


@pytest.mark.parametrize(("key", "value", "meant"), [("BACKEND", "djnago", '"django"'),
                                                     ("BACKEND", "reddis://127.0.0.1/0", '"redis://…"'),
                                                     ("CANCEL_STORE", "djnago", '"django"')])
def test_a_mistyped_task_backend_or_cancel_store_suggests_the_closest_value(key: str, value: str, meant: str) -> None:
    tasks = {"BACKEND": "amqp://guest:guest@127.0.0.1:5672/", key: value}
    message = problem({"TASKS": tasks})

    assert f"MUTEXCRON['TASKS'][{key!r}]" in message and repr(value) in message and '"django"' in message
    assert message.endswith(f"did you mean {meant}?"), message


@pytest.mark.parametrize("value", ["yes", 1, None], ids=repr)
def test_autostart_not_a_bool_names_the_key_and_the_value(value: object) -> None:
    message = problem({"AUTOSTART": value})

    assert "MUTEXCRON['AUTOSTART']" in message and repr(value) in message


@pytest.mark.parametrize("value", ["Mars/Olympus_Mons", "utc+2", 5], ids=repr)
def test_unknown_timezone_names_the_key_and_the_value(value: object) -> None:
    message = problem({"TIMEZONE": value})

    assert "MUTEXCRON['TIMEZONE']" in message and repr(value) in message


@pytest.mark.parametrize("value", ["", "  ", 7], ids=repr)
def test_bad_instance_id_names_the_key_and_the_value(value: object) -> None:
    message = problem({"INSTANCE_ID": value})

    assert "MUTEXCRON['INSTANCE_ID']" in message and repr(value) in message


@pytest.mark.parametrize("value", [timedelta(days=-1), timedelta(0)], ids=str)
def test_history_retention_not_positive_names_the_key_and_the_value(value: timedelta) -> None:
    message = problem({"HISTORY_RETENTION": value})

    assert "MUTEXCRON['HISTORY_RETENTION']" in message and repr(value) in message


@pytest.mark.parametrize("value", [30, "30 days", 30.0], ids=repr)
def test_history_retention_not_a_timedelta_names_the_key_and_the_value(value: object) -> None:
    message = problem({"HISTORY_RETENTION": value})

    assert "MUTEXCRON['HISTORY_RETENTION']" in message and repr(value) in message


@pytest.mark.parametrize("value", ["cron", "", b"cron"], ids=repr)
def test_modules_a_string_names_the_key_and_the_value(value: object) -> None:
    message = problem({"MODULES": value})

    assert "MUTEXCRON['MODULES']" in message and repr(value) in message


@pytest.mark.parametrize("value", [None, 3, ["cron", 3], ["cron", ""]], ids=repr)
def test_modules_not_a_list_of_names_names_the_key_and_the_value(value: object) -> None:
    message = problem({"MODULES": value})

    assert "MUTEXCRON['MODULES']" in message and repr(value) in message


def test_unknown_key_is_named_with_the_known_ones() -> None:
    message = problem({"STORES": "memory://"})

    assert "'STORES'" in message
    assert "STORE" in message.split("known keys:")[1]


@pytest.mark.parametrize("value", [["STORE"], "redis://:s3cret@host/0", None], ids=lambda v: type(v).__name__)
def test_mutexcron_not_a_dict_names_the_setting_and_the_type_but_not_the_value(value: object) -> None:
    message = problem(value)

    assert message.startswith("MUTEXCRON must be a dict") and type(value).__name__ in message
    assert "s3cret" not in message


@pytest.mark.parametrize("url", [
    "redis://:s3cret@127.0.0.1:notaport/0",
    "redis://user:s3cret@127.0.0.1:99999/0",
    "postgres://user:s3cret@db.example/app",
    "mongodb://user:s3cret@mongo.example:27x17/db",
])
def test_malformed_store_url_is_improperly_configured_without_the_password(url: str) -> None:
    conf = read(STORE=url)

    with pytest.raises(ImproperlyConfigured, match=r"MUTEXCRON\['STORE'\]") as raised:
        conf.build_store()

    assert "s3cret" not in str(raised.value) and "//***@" in str(raised.value)
    assert raised.value.__suppress_context__  # a traceback does not show the original error either
