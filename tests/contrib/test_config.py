"""The Flask extension's ``MUTEXCRON_*`` config keys and when a process starts its scheduler (framework-free)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Outcome, Registry, mutex_cron
from mutexcron.contrib.config import AppSettings, read_config, start_mode
from mutexcron.errors import SchedulerConfigError

STORE = "redis://:s3cret-pw@127.0.0.1:6379/0"


def test_defaults_need_only_the_store() -> None:
    settings = read_config({"MUTEXCRON_STORE": STORE})
    assert (settings.autostart, settings.max_workers, settings.sync_interval) == (True, 10, timedelta(seconds=5))
    assert (settings.metrics, settings.tracing, settings.health_token, settings.modules) == (False, False, None, ())


def test_a_missing_store_is_an_error_naming_the_key() -> None:
    with pytest.raises(SchedulerConfigError, match=r"MUTEXCRON_STORE.*is required"):
        read_config({})


@pytest.mark.parametrize(("key", "value"), [
    ("MUTEXCRON_AUTOSTART", "yes"), ("MUTEXCRON_MAX_WORKERS", 0), ("MUTEXCRON_SYNC_INTERVAL", 0),
    ("MUTEXCRON_TIMEZONE", "Mars/Base"), ("MUTEXCRON_MODULES", "myapp.cron"), ("MUTEXCRON_HEALTH_TOKEN", "short"),
    ("MUTEXCRON_INSTANCE_ID", ""), ("MUTEXCRON_METRICS", 1), ("MUTEXCRON_TASKS", "redis"), ("MUTEXCRON_TASKS", 42),
])
def test_a_bad_value_is_an_error_naming_its_key(key: str, value: object) -> None:
    with pytest.raises(SchedulerConfigError, match=key):
        read_config({"MUTEXCRON_STORE": STORE, key: value})


def test_an_unknown_mutexcron_key_is_a_typo() -> None:
    with pytest.raises(SchedulerConfigError, match="MUTEXCRON_STROE"):
        read_config({"MUTEXCRON_STORE": STORE, "MUTEXCRON_STROE": STORE, "OTHER": 1})


def test_a_module_that_cannot_be_imported_is_named() -> None:
    with pytest.raises(SchedulerConfigError, match="no_such_module_here"):
        read_config({"MUTEXCRON_STORE": STORE, "MUTEXCRON_MODULES": ["no_such_module_here"]})


def test_the_settings_repr_masks_the_store_password_and_the_token() -> None:
    settings = read_config({"MUTEXCRON_STORE": STORE, "MUTEXCRON_HEALTH_TOKEN": "t" * 20})
    assert "s3cret" not in repr(settings) and "t" * 20 not in repr(settings)


def test_a_malformed_store_url_fails_when_the_scheduler_is_built() -> None:
    with pytest.raises(SchedulerConfigError, match="MUTEXCRON_STORE"):
        AppSettings(store="redis://127.0.0.1:notaport/0").build_scheduler()


def test_the_reloader_child_starts_at_once() -> None:
    assert start_mode({"WERKZEUG_RUN_MAIN": "true"}) == "now"


@pytest.mark.parametrize("environ", [{}, {"WERKZEUG_RUN_MAIN": "false"}], ids=["unset", "false"])
def test_any_other_process_waits_for_a_request_so_the_reloader_parent_never_starts(environ: dict[str, str]) -> None:
    assert start_mode(environ) == "first_request"


def test_the_tasks_key_is_where_the_apps_run_on_tasks_bodies_are_enqueued(redis_url: str) -> None:
    registry = Registry()
    mutex_cron("0 2 * * *", name="reports.offloaded", registry=registry, run_on="tasks")(lambda: None)
    scheduler = read_config({"MUTEXCRON_STORE": "memory://", "MUTEXCRON_TASKS": redis_url}).build_scheduler(registry)
    try:
        record = scheduler.run_tick("reports.offloaded", datetime(2026, 3, 1, 2, 0, tzinfo=UTC))
    finally:
        scheduler.shutdown()
    assert record.outcome is Outcome.ENQUEUED and record.task_id is not None
