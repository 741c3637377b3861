"""``pause_on_failure`` and the pause note at the edges: what a job may declare, which stores can serve it, what a
note may hold. Every store proves the pause itself in tests/pause_contract.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs.examples.minimal_store import SQLiteLockStore
from mutexcron import JobDefinitionError, Registry, Scheduler, SchedulerConfigError, mutex_cron
from mutexcron.stores import MemoryLockStore


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "3"])
def test_a_bad_pause_on_failure_is_a_definition_error_naming_job_and_value(value: object) -> None:
    with pytest.raises(JobDefinitionError) as raised:
        mutex_cron("* * * * *", name="reports.daily", registry=Registry(),
                   pause_on_failure=value)(lambda: None)  # type: ignore[arg-type]
    assert "'reports.daily'" in str(raised.value) and "pause_on_failure" in str(raised.value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize(("value", "kept"), [(False, None), (1, 1), (5, 5)])
def test_pause_on_failure_is_false_or_a_count(value: int | bool, kept: int | None) -> None:
    registry = Registry()
    mutex_cron("* * * * *", name="job", registry=registry, pause_on_failure=value)(lambda: None)
    assert registry.get("job").pause_on_failure == kept


def test_a_store_without_the_control_plane_refuses_pause_on_failure_at_start(tmp_path: Path) -> None:
    registry = Registry()
    mutex_cron("* * * * *", name="reports.daily", registry=registry, pause_on_failure=3)(lambda: None)
    scheduler = Scheduler(SQLiteLockStore(str(tmp_path / "locks.db")), registry=registry)
    with pytest.raises(SchedulerConfigError) as raised:
        scheduler.start()
    assert "'reports.daily'" in str(raised.value) and "pause_on_failure" in str(raised.value)
    assert "SQLiteLockStore" in str(raised.value)


def test_a_note_too_long_is_refused_naming_the_job_and_nothing_is_paused() -> None:
    registry, store = Registry(), MemoryLockStore()
    mutex_cron("* * * * *", name="reports.daily", registry=registry)(lambda: None)
    scheduler = Scheduler(store, registry=registry)
    scheduler.seed()
    with pytest.raises(ValueError, match=r"pause 'reports\.daily': a pause note must be .* at most 1000"):
        scheduler.pause("reports.daily", note="x" * 1001)
    state = store.lock("reports.daily")
    assert state is not None and not state.paused


def test_a_note_is_kept_with_the_pause_and_dropped_by_resume() -> None:
    registry, store = Registry(), MemoryLockStore()
    mutex_cron("* * * * *", name="reports.daily", registry=registry)(lambda: None)
    scheduler = Scheduler(store, registry=registry)
    scheduler.seed()
    assert scheduler.pause("reports.daily", by="alice", note="warehouse migration").pause_note == "warehouse migration"
    assert scheduler.resume("reports.daily").pause_note is None
