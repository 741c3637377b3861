"""The overlap policies' edges in one process (the fleet-wide behaviour is in tests/overlap_policy_contract.py, on
every store): which stores take them, which runs keep the slot, what a replaced run reports, shutdown."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from docs.examples.minimal_store import SQLiteLockStore
from mutexcron import JobDefinitionError, Registry, RunRecord, Scheduler, SchedulerConfigError, mutex_cron
from mutexcron.records import JobContext, Outcome
from mutexcron.stores import MemoryLockStore
from tests.support import wait_until
from tests.support.ping_servers import PingServer

TICK = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
SECOND = timedelta(seconds=1)


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


@pytest.fixture
def server() -> Iterator[PingServer]:
    ping_server = PingServer()
    yield ping_server
    ping_server.close()


@pytest.mark.parametrize("policy", ["buffer_one", "replace"])
def test_a_store_without_the_overlap_state_refuses_the_policy_at_start_naming_job_and_store(
        tmp_path: Path, policy: str) -> None:
    registry = Registry()
    mutex_cron("* * * * *", name="reports.hourly", registry=registry, on_busy=policy)(lambda: None)  # type: ignore[arg-type]
    scheduler = Scheduler(SQLiteLockStore(str(tmp_path / "locks.db")), registry=registry)
    with pytest.raises(SchedulerConfigError) as raised:
        scheduler.start()
    assert "'reports.hourly'" in str(raised.value) and policy in str(raised.value)
    assert "SQLiteLockStore" in str(raised.value) and "ControlStore" in str(raised.value)


def test_an_unknown_policy_is_a_definition_error_listing_the_policies() -> None:
    with pytest.raises(JobDefinitionError) as raised:
        mutex_cron("* * * * *", name="job", registry=Registry(), on_busy="queue")(lambda: None)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "'job'" in message and "'queue'" in message and "buffer_one" in message and "replace" in message


@pytest.mark.parametrize("policy", ["buffer_one", "replace"])
def test_a_manual_run_of_a_busy_job_is_skipped_without_taking_the_slot(store: MemoryLockStore, policy: str) -> None:
    registry = Registry()
    mutex_cron("* * * * * *", name="job", registry=registry, on_busy=policy)(lambda: None)  # type: ignore[arg-type]
    held = store.acquire("job", owner="other", lease=timedelta(minutes=1), fire_time=TICK)
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    try:
        record = scheduler.run_now("job")
    finally:
        scheduler.shutdown()
    assert record.outcome is Outcome.SKIPPED_BUSY
    assert held.token is not None and store.claim_next("job", fire_time=TICK + SECOND, lease=SECOND)  # slot free
    assert store.renew_watching("job", token=held.token, lease=SECOND).value == "renewed"  # nobody asked it to stop


def test_a_tick_waiting_for_the_lock_is_skipped_busy_when_the_scheduler_shuts_down(
        store: MemoryLockStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mutexcron.scheduler")
    registry = Registry()
    mutex_cron("* * * * * *", name="job", registry=registry, on_busy="buffer_one")(lambda: None)
    store.acquire("job", owner="other", lease=timedelta(minutes=1), fire_time=TICK)
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    records: list[RunRecord] = []
    waiting = threading.Thread(target=lambda: records.append(scheduler.run_tick("job", TICK + SECOND)))
    waiting.start()
    wait_until(lambda: any("waits for the lock" in r.getMessage() for r in caplog.records), timeout=5,
               what="the tick to keep the slot and wait")
    scheduler.shutdown(timeout=timedelta(seconds=5))
    waiting.join(5)
    [record] = records
    assert record.outcome is Outcome.SKIPPED_BUSY and record.error is not None and "shut down" in record.error


def test_a_replaced_run_sends_its_start_ping_and_no_end_ping(store: MemoryLockStore, server: PingServer) -> None:
    registry, started = Registry(), threading.Event()

    def body(ctx: JobContext) -> None:
        if ctx.fire_time == TICK:
            started.set()
            ctx.cancelled.wait(30)

    mutex_cron("* * * * * *", name="job", registry=registry, lease=1.5, on_busy="replace",
               ping_url=server.url)(body)
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    records: list[RunRecord] = []
    try:
        old = threading.Thread(target=lambda: records.append(scheduler.run_tick("job", TICK)))
        old.start()
        assert started.wait(10)
        records.append(scheduler.run_tick("job", TICK + SECOND))
        old.join(10)
        wait_until(lambda: len(server.paths) == 3, timeout=5, what="the pings of both runs")
    finally:
        scheduler.shutdown()
    assert sorted(r.outcome for r in records) == sorted([Outcome.REPLACED, Outcome.SUCCEEDED])
    assert server.paths == ["/ping/3f1c/start", "/ping/3f1c/start", "/ping/3f1c"]


def test_a_replaced_run_is_logged_as_a_warning_not_a_failure(store: MemoryLockStore,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    registry, started = Registry(), threading.Event()

    def body(ctx: JobContext) -> None:
        if ctx.fire_time == TICK:
            started.set()
            ctx.cancelled.wait(30)

    mutex_cron("* * * * * *", name="job", registry=registry, lease=1.5, on_busy="replace")(body)
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    try:
        with caplog.at_level(logging.INFO, logger="mutexcron.scheduler"):
            old = threading.Thread(target=lambda: scheduler.run_tick("job", TICK))
            old.start()
            assert started.wait(10)
            scheduler.run_tick("job", TICK + SECOND)
            old.join(10)
    finally:
        scheduler.shutdown()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(r.levelno == logging.WARNING and "'job'" in r.getMessage() and "replace" in r.getMessage()
               for r in caplog.records)
    state = store.lock("job")
    assert state is not None and state.last_outcome == "succeeded"
